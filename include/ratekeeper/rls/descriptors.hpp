#pragma once
// envoyproxy/ratelimit's configuration of one domain, as a tree of descriptors, and how a
// request's descriptor finds the node whose limits apply to it (the most specific match, as
// envoyproxy/ratelimit's GetLimit). Plain values, immutable once indexed; reading them is
// thread-safe.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "ratekeeper/algorithms/limit.hpp"
#include "ratekeeper/core/time.hpp"
#include "ratekeeper/limiter/failure_policy.hpp"

namespace ratekeeper::rls {

// A limit's unit, numbered as RateLimitResponse.RateLimit.Unit (and type.v3.RateLimitUnit).
enum class Unit : std::uint8_t {
  unknown = 0,
  second = 1,
  minute = 2,
  hour = 3,
  day = 4,
  month = 5,
  year = 6,
  week = 7,
};

// "second", "minute", ... (lower case, as the configuration writes it).
std::string_view to_string(Unit unit) noexcept;
// A unit as the configuration writes it, in any case ("second", "SECOND"); nullopt for
// anything else, "unknown" included.
std::optional<Unit> parse_unit(std::string_view text) noexcept;
// The unit's length as envoyproxy/ratelimit counts it: a month is 30 days, a year 365 days,
// a week 7 days. 0 for unknown.
Micros unit_length(Unit unit) noexcept;

// The descriptor entry (and dynamic metadata field) that carries a reservation's id.
inline constexpr std::string_view kReservationKey = "ratekeeper_reservation";
// How long a reservation made through the service can be settled.
inline constexpr Micros kReservationTtl = 300 * kMicrosPerSecond;

// A DescriptorNode::rule that names no rule.
inline constexpr std::size_t kNoRule = static_cast<std::size_t>(-1);

// One limit of a descriptor: envoyproxy/ratelimit's `rate_limit`, `requests_per_unit`
// requests per `unit`, counted by `limit` (a fixed window of one unit unless the limit's
// `algorithm` says otherwise; token bucket: capacity requests_per_unit, refilled over a unit).
struct DescriptorLimit {
  std::string name;  // `name`: current_limit.name, and what `replaces` names; may be empty
  std::uint32_t requests_per_unit = 0;  // 0: every request is over the limit
  Unit unit = Unit::second;
  algorithms::Limit limit;  // unused when requests_per_unit is 0
};

// One `descriptors` entry of the configuration, with its nested descriptors.
struct DescriptorNode {
  std::string key;
  // Exact value; empty: any value (each value counted on its own); holding a '*' (wildcard):
  // any value that wildcard_match()es it, each value counted on its own unless
  // share_threshold.
  std::string value;
  bool wildcard = false;  // value holds a '*'
  // The limits of a descriptor that ends at this node: none when the node only nests
  // (no rate_limit); `unlimited` never counts.
  std::vector<DescriptorLimit> limits;
  bool unlimited = false;
  std::vector<std::string> replaces;  // names of limits this node's limits replace
  bool shadow_mode = false;           // counted, but always answered OK
  // Counted on its own like shadow_mode; over, it makes the request over only when every
  // quota_mode descriptor of the request is over (and it is not shadow_mode).
  bool quota_mode = false;
  // A wildcard whose matching values share one counter: the value's place in the identity
  // is taken by the pattern (`value`).
  bool share_threshold = false;
  // A cost known when the stream ends (ratekeeper's own): the request reserves its hits as an
  // estimate, and answers the reservation's id in dynamic metadata; a later request whose
  // descriptor adds the entry kReservationKey settles it to that request's hits.
  bool reserve = false;
  bool detailed_metric = false;
  bool value_to_metric = false;  // metrics name the request's value (envoyproxy/ratelimit)
  // When the store fails: a failure policy (allow, deny, local), or nullopt: the call fails
  // with gRPC UNAVAILABLE (Envoy's failure_mode_deny decides). Inherited from the parent or
  // the domain when not written.
  std::optional<limiter::FailureMode> on_store_error;
  // Index of the limiter rule that counts this node's limits (append_limiter_rules);
  // meaningful only when `limits` is not empty: kNoRule when none of them counts in the store
  // (every requests_per_unit is 0).
  std::size_t rule = 0;
  std::vector<DescriptorNode> descriptors;  // nested, in configuration order

  // Lookup among `descriptors`, filled by index_config(): (key, value) of exact values,
  // key alone of any-value nodes, wildcard nodes in configuration order.
  struct Index {
    std::unordered_map<std::string, std::size_t> exact;  // key + '\0' + value
    std::unordered_map<std::string, std::size_t> any;    // key
    std::vector<std::size_t> wildcards;
  } index;
};

// One domain: one file of envoyproxy/ratelimit's configuration directory.
struct Domain {
  std::string name;
  std::string source;  // the file it was loaded from
  std::optional<limiter::FailureMode> on_store_error;  // default of its descriptors
  DescriptorNode root;  // key and value empty; its `descriptors` are the file's
  // The limiter rule that counts descriptors carrying a limit override (RateLimitDescriptor
  // .limit); its limits come with each request.
  std::size_t override_rule = 0;
};

// Every domain of the configuration directory, by name.
struct RlsConfig {
  std::string directory;
  std::vector<Domain> domains;
  std::unordered_map<std::string, std::size_t> by_name;  // filled by index_config()

  const Domain* find(std::string_view name) const;
};

// Fills every node's `index` and the config's `by_name`. Call once after loading or
// building; duplicates are configuration errors the loader reports before.
void index_config(RlsConfig& config);
// Fills every node's `index` of one domain (index_config does it for each).
void index_domain(Domain& domain);

// One entry of a request's descriptor.
struct Entry {
  std::string_view key;
  std::string_view value;
};

// The node whose limits apply to a descriptor of `entries` in `domain`, as envoyproxy/
// ratelimit finds it: level by level, the exact (key, value) node, else the first wildcard
// whose prefix the value starts with, else the key's any-value node; a node with limits (or
// unlimited) applies only when it is reached by the descriptor's last entry; the walk stops
// at a node without nested descriptors. nullptr: no limit applies.
const DescriptorNode* match(const Domain& domain, std::span<const Entry> entries);
// As match(), and `path` (cleared first) gets the node each entry found, one per entry, when a
// node applies; left empty otherwise.
const DescriptorNode* match(const Domain& domain, std::span<const Entry> entries,
                            std::vector<const DescriptorNode*>& path);

// Whether `value` matches the wildcard `pattern` as envoyproxy/ratelimit matches it: each '*'
// stands for any run of bytes (empty too), the rest is literal ("a*" any value starting with
// "a", "a*b*c" starting with "a", ending with "c", with "b" between). No allocation.
bool wildcard_match(std::string_view pattern, std::string_view value) noexcept;

}  // namespace ratekeeper::rls

namespace ratekeeper::limiter {
struct Rule;
}

namespace ratekeeper::rls {

// Appends to `rules` the limiter rules that count the configuration's limits: one rule per
// node with limits (its policy: the node's limits; shadow: shadow_mode; on_store_error: the
// node's mode, or limiter::FailureMode::error when it has none), one per domain for the
// descriptors that carry a limit override (no limits of its own: each request brings them).
// Rule names are valid limiter names (1-64 of A-Z a-z 0-9 _ - .), readable and unique:
// "rls.<domain>.<key>[_<value>]…" with other bytes replaced by '_', shortened and numbered
// where needed. Sets each node's `rule` and each domain's `override_rule` to the index of its
// rule in `rules`.
void append_limiter_rules(RlsConfig& config, std::vector<limiter::Rule>& rules);

// The name of `limit` in its rule's policy (the last part of its keys when a node has several
// counted limits): its `name` when that is a valid limiter name, else
// "<requests_per_unit>_per_<unit>" ("100_per_minute"). Unique among a node's limits (the
// loader refuses duplicates).
std::string policy_limit_name(const DescriptorLimit& limit);

}  // namespace ratekeeper::rls
