#pragma once
// Response headers and bodies of rate limiting: the 429 body and Retry-After, the IETF draft
// RateLimit-Policy / RateLimit fields, legacy X-RateLimit-*, and the decision API's JSON.
// Pure functions; thread-safe.

#include <string>
#include <utility>
#include <vector>

#include "ratekeeper/http/request.hpp"
#include "ratekeeper/limiter/failure_policy.hpp"
#include "ratekeeper/limiter/limiter.hpp"

namespace ratekeeper::http {

struct HeaderOptions {
  bool draft = true;    // RateLimit-Policy and RateLimit
  bool legacy = false;  // X-RateLimit-Limit, X-RateLimit-Remaining, X-RateLimit-Reset
};

// Whole seconds rounded up, at least 1: the Retry-After of a denial.
std::int64_t retry_after_seconds(Micros retry_after) noexcept;
// Whole seconds rounded up (0 stays 0): delta-seconds of reset times.
std::int64_t ceil_seconds(Micros t) noexcept;

// {"error":"Rate limit exceeded","retryAfter":N}
std::string rejection_body(std::int64_t retry_after_s);
// {"error":"Bad request","detail":"..."}
std::string bad_request_body(std::string_view detail);

// `"name";q=<limit>;w=<seconds>` for each limit of the enforcing rules, comma separated.
std::string ratelimit_policy_field(const limiter::Evaluation& evaluation);
// `"name";r=<remaining>;t=<seconds>` for each limit; t is the retry time of a denied limit,
// else the time until the limit is fully available again.
std::string ratelimit_field(const limiter::Evaluation& evaluation);

// The headers of a limited response (allowed or denied), per the options; adds Retry-After
// when the evaluation denies. Empty when no enforcing rule applied.
HeaderList rate_limit_headers(const limiter::Evaluation& evaluation, const HeaderOptions& options);
// Gives back a list of fields once they are written out (rate_limit_headers' lists): the next
// rate_limit_headers on the calling thread fills it again, keeping its strings' capacity.
void reuse_fields(HeaderList&& fields) noexcept;

// The decision API's answer: {"allowed":..,"limit":..,"remaining":..,"retry_after_ms":..,
// "reset_after_ms":..,"by_failure_policy":..,"failure_policy":..} (the rule's mode when the
// store fails).
std::string verdict_json(const limiter::Verdict& verdict, limiter::FailureMode failure_policy);

}  // namespace ratekeeper::http
