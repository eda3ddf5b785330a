#include "ratekeeper/http/headers.hpp"

#include "ratekeeper/core/thread_cache.hpp"

#include <fmt/format.h>

#include <charconv>
#include <utility>
#include <nlohmann/json.hpp>

namespace ratekeeper::http {

std::int64_t ceil_seconds(Micros t) noexcept {
  if (t <= 0) return 0;
  return (t + kMicrosPerSecond - 1) / kMicrosPerSecond;
}

std::int64_t retry_after_seconds(Micros retry_after) noexcept {
  return std::max<std::int64_t>(1, ceil_seconds(retry_after));
}

std::string rejection_body(std::int64_t retry_after_s) {
  return fmt::format(R"({{"error":"Rate limit exceeded","retryAfter":{}}})", retry_after_s);
}

std::string bad_request_body(std::string_view detail) {
  nlohmann::json j = {{"error", "Bad request"}, {"detail", detail}};
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

namespace {

// Appends the decimal digits of `v`.
void append_int(std::string& out, std::int64_t v) {
  char digits[24];
  const auto end = std::to_chars(digits, digits + sizeof digits, v).ptr;
  out.append(digits, end);
}

// One item of a RateLimit field: the quoted policy name, `a` (`";q=`), x, `b` (`;w=`), y.
// Policy names are rule, tier and limit names: [A-Za-z0-9_.-], safe inside an sf-string.
void append_item(std::string& out, std::string_view name, std::string_view a, std::int64_t x,
                 std::string_view b, std::int64_t y) {
  out += '"';
  out += name;
  out += a;
  append_int(out, x);
  out += b;
  append_int(out, y);
}

// Appends the items of every limit of the enforcing rules, comma separated, growing `out`
// once at most.
template <class F>
void append_limits(std::string& out, const limiter::Evaluation& ev, F&& item) {
  std::size_t size = out.size();
  for (const auto& rule : ev.rules) {
    // the name, quotes, two parameters with up to 20 digits each, ", "
    for (const auto& l : rule.limits) size += l.policy_name.size() + 52;
  }
  out.reserve(size);
  bool first = true;
  for (const auto& rule : ev.rules) {
    for (const auto& l : rule.limits) {
      if (!std::exchange(first, false)) out += ", ";
      item(out, l);
    }
  }
}

void append_policy_field(std::string& out, const limiter::Evaluation& ev) {
  append_limits(out, ev, [](std::string& out, const limiter::LimitOutcome& l) {
    append_item(out, l.policy_name, "\";q=", l.limit.capacity, ";w=", ceil_seconds(l.limit.horizon()));
  });
}

void append_ratelimit_field(std::string& out, const limiter::Evaluation& ev) {
  append_limits(out, ev, [](std::string& out, const limiter::LimitOutcome& l) {
    const auto& d = l.decision;
    const auto t = d.allowed ? ceil_seconds(d.reset_after) : retry_after_seconds(d.retry_after);
    append_item(out, l.policy_name, "\";r=", std::max<std::int64_t>(0, d.remaining), ";t=", t);
  });
}

// The lists given back (reuse_fields) on this thread, for rate_limit_headers to fill again.
using FieldLists = ThreadCache<HeaderList, 64>;

}  // namespace

std::string ratelimit_policy_field(const limiter::Evaluation& ev) {
  std::string out;
  append_policy_field(out, ev);
  return out;
}

std::string ratelimit_field(const limiter::Evaluation& ev) {
  std::string out;
  append_ratelimit_field(out, ev);
  return out;
}

HeaderList rate_limit_headers(const limiter::Evaluation& ev, const HeaderOptions& options) {
  if (ev.rules.empty()) return {};
  // A list given back keeps its fields' strings: each is assigned again, its capacity kept.
  HeaderList out;
  FieldLists::take(out);
  out.reserve((options.draft ? 2 : 0) + (options.legacy ? 3 : 0) + (ev.allowed ? 0 : 1));
  std::size_t used = 0;
  auto field = [&](std::string_view name) -> std::string& {
    if (used == out.size()) out.emplace_back();
    auto& [n, v] = out[used++];
    n.assign(name);
    v.clear();
    return v;
  };
  // Answered by the failure policy, the store's count is unknown: the policy is stated, the
  // remaining quota is not claimed.
  const bool known = !ev.by_failure_policy;
  if (options.draft) {
    append_policy_field(field("RateLimit-Policy"), ev);
    if (known) append_ratelimit_field(field("RateLimit"), ev);
  }
  if (options.legacy) {
    const auto& d = ev.decision;
    append_int(field("X-RateLimit-Limit"), d.limit);
    if (known) {
      append_int(field("X-RateLimit-Remaining"), std::max<std::int64_t>(0, d.remaining));
      append_int(field("X-RateLimit-Reset"), ceil_seconds(d.reset_after));
    }
  }
  if (!ev.allowed) append_int(field("Retry-After"), retry_after_seconds(ev.decision.retry_after));
  out.resize(used);
  return out;
}

void reuse_fields(HeaderList&& fields) noexcept {
  if (fields.capacity() > 0) FieldLists::give(std::move(fields));
}

std::string verdict_json(const limiter::Verdict& v, limiter::FailureMode failure_policy) {
  const auto& d = v.decision;
  nlohmann::json j = {
      {"allowed", d.allowed},
      {"limit", d.limit},
      {"remaining", std::max<std::int64_t>(0, d.remaining)},
      {"retry_after_ms", (d.retry_after + kMicrosPerMilli - 1) / kMicrosPerMilli},
      {"reset_after_ms", (d.reset_after + kMicrosPerMilli - 1) / kMicrosPerMilli},
      {"by_failure_policy", v.by_failure_policy},
      {"failure_policy", limiter::to_string(failure_policy)},
  };
  if (!v.reservation.empty()) j["reservation"] = v.reservation;
  return j.dump();
}

}  // namespace ratekeeper::http
