#pragma once
// A rate-limiting rule: whose budget it charges (identity), with
// which limits (a fixed multi-limit policy or the caller's tier), at what cost, and what to do
// when the store fails. Rules are plain immutable values, safe to share between threads.

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ratekeeper/algorithms/limit.hpp"
#include "ratekeeper/limiter/failure_policy.hpp"
#include "ratekeeper/store/lease.hpp"

namespace ratekeeper::limiter {

// One limit of a policy. `name` becomes the last part of the key when a policy holds several
// limits (`<prefix>:{<identity>}:<rule>:<name>`); a single-limit policy omits it.
struct NamedLimit {
  std::string name;
  algorithms::Limit limit;
};

using Policy = std::vector<NamedLimit>;

// Whether `name` may be a part of a key (a rule's, a limit's, a tier's, the key prefix, an
// identity prefix): 1-64 characters of A-Z a-z 0-9 _ - .
bool valid_name(std::string_view name) noexcept;

// Whose budget a request is charged to. Identities are strings with a kind prefix:
// "ip:192.0.2.7", "user:123", "key:<hash of the API key>".
enum class IdentityKind : std::uint8_t {
  ip,          // the client IP (see http/client_ip.hpp for proxies)
  header,      // a header's value, e.g. X-User-ID, or `default_value` when absent
  api_key,     // an API key header, hashed; requests without it fall back to the IP
  user_or_ip,  // the user header when present (authenticated), else the client IP
};

std::string_view to_string(IdentityKind kind) noexcept;

struct IdentitySpec {
  IdentityKind kind = IdentityKind::ip;
  std::string header;         // header, api_key, user_or_ip: the header to read
  std::string default_value;  // header: used when the header is absent; empty: fall back to IP
  std::string prefix;  // kind prefix of header identities; default "user" ("key" for API keys)
};

// Whether a rule's bucket is shared by every endpoint it matches, or one per endpoint (the
// request path joins the rule name in the key).
enum class BucketScope : std::uint8_t { shared, per_endpoint };

// What a rule does with a request over its limit: deny it, or (token bucket limits only) let
// it wait for its turn, at most `max_delay`: the request reserves its place now and is passed
// on when that place comes (Decision::delay; see algorithms::step_all for the exactness).
enum class OnLimit : std::uint8_t { reject, delay };

std::string_view to_string(OnLimit on_limit) noexcept;

// A cost known only when the upstream answers (a response's usage: tokens of a language model,
// bytes, rows): an HTTP request under the rule reserves an estimate at admission, settled to
// the integer the response header `response_header` carries, or else the field
// `response_json` (dotted: "usage.total_tokens") of a JSON body or of the last event of an
// event stream that holds it (http/usage_scan.hpp), at the response's end (Limiter::settle).
// The estimate is the integer of the request header `estimate_header` when the request has
// one, else `estimate`. Token bucket and fixed window limits only; not shadow, delayed or
// leased.
struct UsageSpec {
  std::string response_header;  // both empty: the rule's cost is `cost`, known at admission
  std::string response_json;
  std::string estimate_header;  // empty: always `estimate`
  std::int64_t estimate = 0;
  Micros ttl = 300 * kMicrosPerSecond;  // how long a reservation can be settled

  bool enabled() const noexcept { return !response_header.empty() || !response_json.empty(); }
  friend bool operator==(const UsageSpec&, const UsageSpec&) = default;
};

// A parent above a rule's identity (an organisation above its users): its own identity and
// limits, checked with the rule's in the same atomic call. The rule's keys of an identity with
// a parent live in the parent's Redis Cluster slot (<prefix>:{<parent>}:<rule>:<identity>
// [:<limit>]; the parent's: <prefix>:{<parent>}:<rule>:parent[:<limit>]), so a request is
// admitted only when both admit, and a denial by either charges neither.
struct ParentSpec {
  IdentitySpec identity;
  Policy limits;
};

struct Rule {
  std::string name;  // which HTTP requests it applies to: http/rule_match.hpp
  IdentitySpec identity;
  Policy limits;        // the policy, unless `tiered`
  Policy ip_limits;     // user_or_ip / api_key: the policy of the IP fallback; empty: `limits`
  bool tiered = false;  // the policy is the caller's tier (see Tiers)
  std::int64_t cost = 1;
  BucketScope bucket = BucketScope::shared;
  bool shadow = false;  // evaluated, counted and logged; never rejects
  FailureMode on_store_error = FailureMode::allow;
  OnLimit on_limit = OnLimit::reject;
  Micros max_delay = 0;  // on_limit delay: in (0, algorithms::kMaxDelay]; reject: 0
  // Admit from leases of the store's units (store/leasing_store.hpp); max 0: never. Fixed
  // window and token bucket limits only, not with on_limit delay.
  store::LeasePolicy lease;
  UsageSpec usage;  // the cost from the response; disabled: `cost`
  std::optional<ParentSpec> parent;  // a hierarchy: the parent's limits checked with the rule's
};

// Whether any of `rules` admits from leases (then the store stack has a LeasingStore).
bool any_leased(std::span<const Rule> rules) noexcept;

// Tiered policies (free, pro, enterprise...). A request's tier comes from `header` only when
// `trust_header` is set (a trusted gateway writes it), else from the static `users` table
// (user id → tier); an unknown or missing tier is `default_tier`.
struct Tiers {
  std::string default_tier = "free";
  std::string header = "X-User-Tier";
  bool trust_header = false;
  std::map<std::string, Policy, std::less<>> levels;
  std::map<std::string, std::string, std::less<>> users;

  // The tier for a user id (may be empty) and the tier header's value (nullopt: absent).
  const std::string& resolve(std::string_view user_id,
                             std::optional<std::string_view> header_value) const;
  const Policy* policy(std::string_view tier) const;

  // The standard tiers: free 60 / 1 per s, pro 600 / 10 per s, enterprise 6000 / 100 per s.
  static Tiers standard();
};

// The shortest slot_ttl of the concurrency limits a request under `rule` may get (its
// policy, its IP fallback's, or any tier's); 0 when it has none: it holds no slot.
Micros shortest_slot_ttl(const Rule& rule, const Tiers& tiers) noexcept;

}  // namespace ratekeeper::limiter
