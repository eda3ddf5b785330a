#pragma once
// Envoy's rate limit service (RateLimitService.ShouldRateLimit) over the Limiter: each
// descriptor of a request finds its node in the domain's configuration (match), its entries
// name the identity counted, and every descriptor with limits is checked in ONE Limiter
// evaluation: a request's descriptors are consumed all-or-nothing (across Redis Cluster
// slots by the store's refunds, see docs/design/architecture.md). Shadow-mode descriptors
// are counted on their own and always answered OK; quota-mode descriptors are counted on their
// own too, and answered OVER_LIMIT when over, but make the request over only when every
// quota-mode descriptor of it is. Values matching a share_threshold wildcard share one counter.
// A descriptor given twice in one request
// (the same entries finding the same limits) is one counter taking the hits of both, and both
// get its status.
//
// Answers, as envoyproxy/ratelimit gives them: an unknown domain or a descriptor without a
// limit (or unlimited, or replaced) is OK without current_limit; OVER_LIMIT overall when any
// enforcing descriptor is over, or every quota-mode one. A limit of 0 requests, or hits above
// a limit's capacity, is over without counting (and the request's other descriptors then only
// peek). Bad requests (empty domain, no descriptors, a descriptor without entries or with an
// empty key, hits above 2^32-1, too many descriptors, a message above max_message_bytes, an
// override with an unknown unit) are invalid_argument; a store failure that a node's
// on_store_error does not answer is unavailable, so that Envoy applies its own
// failure_mode_deny.
//
// Reservations (ratekeeper's own, for Envoy's apply_on_stream_done): the first enforcing
// descriptor whose node has `reserve` takes its hits as an estimate, and an admitted request
// answers the reservation's id in dynamic_metadata (kReservationKey); a request whose
// descriptors each add the entry kReservationKey with that id settles them to their hits.
//
// Thread-safe. The Limiter must outlive the Service and every call in flight.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "envoy/service/ratelimit/v3/rls.pb.h"
#include "ratekeeper/core/log_limit.hpp"
#include "ratekeeper/limiter/limiter.hpp"
#include "ratekeeper/rls/descriptors.hpp"

namespace ratekeeper {
class MetricsWriter;
}

namespace ratekeeper::rls {

namespace pb = ::envoy::service::ratelimit::v3;

struct ServiceOptions {
  // RateLimit-Policy, RateLimit and (when over) Retry-After in response_headers_to_add.
  bool response_headers = true;
  std::size_t max_message_bytes = 64 * std::size_t{1024};  // a larger request is invalid_argument
  std::size_t max_descriptors = 64;                        // per request
  std::size_t max_entries = 32;                            // per descriptor
};

// The gRPC status of an answer (gRPC's own numbers).
enum class Status : int { ok = 0, invalid_argument = 3, internal = 13, unavailable = 14 };

struct Answer {
  Status status = Status::ok;
  std::string message;          // why, when not ok
  pb::RateLimitResponse response;  // when ok
};
using AnswerCallback = std::function<void(Answer)>;

class Service {
 public:
  // `config`'s rules were appended (append_limiter_rules) to the configuration `limiter` was
  // built with, at the indices the config holds; throws std::invalid_argument otherwise.
  Service(RlsConfig config, limiter::Limiter& limiter, ServiceOptions options = {});
  ~Service();
  Service(const Service&) = delete;
  Service& operator=(const Service&) = delete;

  // Answers `request` through `done`, exactly once, inline or later on a store thread.
  // `request` is read only during the call.
  void should_rate_limit(const pb::RateLimitRequest& request, AnswerCallback done);
  // Blocking form (tests, fuzzing). Not for a thread that runs the store's callbacks.
  Answer should_rate_limit_sync(const pb::RateLimitRequest& request);

  const RlsConfig& config() const noexcept { return config_; }
  // Requests by result, descriptors by result.
  void write_metrics(MetricsWriter& out) const;
  std::string metrics_text() const;  // write_metrics() as exposition text
  // Its counters become `previous`'s, shared (a service rebuilt from a reloaded
  // configuration counts on). Call before the first call: not thread-safe.
  void continue_metrics(const Service& previous);

 private:
  struct Call;
  void answer(Call& call, const Result<limiter::Evaluation>& evaluation);
  void settle(const pb::RateLimitRequest& request, AnswerCallback done);
  void count(Status status, const pb::RateLimitResponse* response);

  RlsConfig config_;
  limiter::Limiter* limiter_;
  ServiceOptions options_;

  struct Counters {
    std::atomic<std::uint64_t> calls{0};  // received, answered or not yet
    std::atomic<std::uint64_t> ok{0};
    std::atomic<std::uint64_t> over_limit{0};
    std::atomic<std::uint64_t> invalid{0};
    std::atomic<std::uint64_t> unavailable{0};
    std::atomic<std::uint64_t> internal{0};
    std::atomic<std::uint64_t> unknown_domain{0};
    std::atomic<std::uint64_t> descriptors_ok{0};
    std::atomic<std::uint64_t> descriptors_over{0};
    std::atomic<std::uint64_t> descriptors_no_limit{0};
    std::atomic<std::uint64_t> descriptors_shadow_over{0};
    std::atomic<std::uint64_t> descriptors_quota_over{0};
    // quota_mode descriptors answered OK because the store failed
    std::atomic<std::uint64_t> descriptors_quota_store_error{0};
  };
  std::shared_ptr<Counters> counters_;  // shared with the services it continues
  LogLimit quota_failure_log_{"rls: quota descriptors the store failed"};
};

}  // namespace ratekeeper::rls
