#include "ratekeeper/http/headers.hpp"

#include <fmt/format.h>

#include <charconv>
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

// The items of every limit of the enforcing rules, comma separated, in one allocation.
template <class F>
std::string join_limits(const limiter::Evaluation& ev, F&& item) {
  std::size_t size = 0;
  for (const auto& rule : ev.rules) {
    // the name, quotes, two parameters with up to 20 digits each, ", "
    for (const auto& l : rule.limits) size += l.policy_name.size() + 52;
  }
  std::string out;
  out.reserve(size);
  for (const auto& rule : ev.rules) {
    for (const auto& l : rule.limits) {
      if (!out.empty()) out += ", ";
      item(out, l);
    }
  }
  return out;
}

std::string int_text(std::int64_t v) {
  std::string out;
  append_int(out, v);
  return out;
}

}  // namespace

std::string ratelimit_policy_field(const limiter::Evaluation& ev) {
  return join_limits(ev, [](std::string& out, const limiter::LimitOutcome& l) {
    append_item(out, l.policy_name, "\";q=", l.limit.capacity, ";w=",
                ceil_seconds(l.limit.horizon()));
  });
}

std::string ratelimit_field(const limiter::Evaluation& ev) {
  return join_limits(ev, [](std::string& out, const limiter::LimitOutcome& l) {
    const auto& d = l.decision;
    const auto t = d.allowed ? ceil_seconds(d.reset_after) : retry_after_seconds(d.retry_after);
    append_item(out, l.policy_name, "\";r=", std::max<std::int64_t>(0, d.remaining), ";t=", t);
  });
}

HeaderList rate_limit_headers(const limiter::Evaluation& ev, const HeaderOptions& options) {
  HeaderList out;
  if (ev.rules.empty()) return out;
  out.reserve((options.draft ? 2 : 0) + (options.legacy ? 3 : 0) + (ev.allowed ? 0 : 1));
  // Answered by the failure policy, the store's count is unknown: the policy is stated, the
  // remaining quota is not claimed.
  const bool known = !ev.by_failure_policy;
  if (options.draft) {
    out.emplace_back("RateLimit-Policy", ratelimit_policy_field(ev));
    if (known) out.emplace_back("RateLimit", ratelimit_field(ev));
  }
  if (options.legacy) {
    const auto& d = ev.decision;
    out.emplace_back("X-RateLimit-Limit", int_text(d.limit));
    if (known) {
      out.emplace_back("X-RateLimit-Remaining", int_text(std::max<std::int64_t>(0, d.remaining)));
      out.emplace_back("X-RateLimit-Reset", int_text(ceil_seconds(d.reset_after)));
    }
  }
  if (!ev.allowed) {
    out.emplace_back("Retry-After", int_text(retry_after_seconds(ev.decision.retry_after)));
  }
  return out;
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
