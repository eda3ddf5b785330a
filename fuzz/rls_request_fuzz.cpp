// Fuzz target: Envoy's RateLimitService.ShouldRateLimit as a gRPC server receives it, the input
// being the RateLimitRequest's protobuf bytes (what the transport hands over), answered by the
// service (src/rls/service.cpp) over a memory store with a manual clock, twice (small limits:
// the second may be over). Bytes protobuf cannot parse are refused by gRPC before the service;
// every parsed message gets an answer: invalid_argument with a message, or OK with exactly one
// status per descriptor, OVER_LIMIT overall iff some status is OVER_LIMIT, Retry-After only
// then. Never internal, never unavailable (the store is up).

#include <cstddef>
#include <cstdint>
#include <vector>

#include "ratekeeper/limiter/limiter.hpp"
#include "ratekeeper/rls/service.hpp"
#include "ratekeeper/store/memory_store.hpp"
#include "require.hpp"
#include "rls_config.hpp"

namespace {

using namespace ratekeeper;
using fuzz::require;

// Every kind of node: exact, any value, wildcard (trailing, middle, shared), nested, unlimited,
// replaces, shadow, quota, several limits and algorithms, a limit of 0, a reservation (settled
// by a request whose descriptors carry the entry ratekeeper_reservation).
constexpr std::string_view kDomain = R"(domain: d
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: k
    value: v
    rate_limit: {unit: minute, requests_per_unit: 1, name: kv}
  - key: w
    value: pre*
    rate_limit: {unit: hour, requests_per_unit: 3, algorithm: token_bucket}
  - key: zero
    rate_limit: {unit: day, requests_per_unit: 0}
  - key: free
    rate_limit: {unlimited: true}
  - key: r
    rate_limit: {unit: second, requests_per_unit: 5, replaces: [{name: kv}]}
  - key: s
    shadow_mode: true
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: q
    quota_mode: true
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: w
    value: a*b*c
    share_threshold: true
    descriptors:
      - key: t
        value: x*
        share_threshold: true
        quota_mode: true
        rate_limit: {unit: minute, requests_per_unit: 2}
  - key: u
    reserve: true
    rate_limit: {unit: hour, requests_per_unit: 50}
  - key: m
    rate_limits:
      - {unit: second, requests_per_unit: 2, algorithm: sliding_window_log}
      - {unit: minute, requests_per_unit: 3, algorithm: sliding_window_counter}
  - key: a
    descriptors:
      - key: b
        rate_limit: {unit: week, requests_per_unit: 4}
        descriptors:
          - key: c
            value: x
            rate_limit: {unit: year, requests_per_unit: 1}
)";

struct Fixture {
  ManualClock clock{1'700'000'000LL * kMicrosPerSecond};
  store::MemoryStore store{store::MemoryStoreOptions{.max_keys = 100'000, .shards = 2, .clock = &clock}};
  std::unique_ptr<limiter::Limiter> limiter;
  std::unique_ptr<rls::Service> service;

  Fixture() {
    rls::RlsConfig config;
    config.domains.push_back(server::parse_rls_domain(kDomain, "fuzz.yaml"));
    rls::index_config(config);
    limiter::LimiterConfig lc;
    rls::append_limiter_rules(config, lc.rules);
    limiter = std::make_unique<limiter::Limiter>(lc, store, &clock);
    service = std::make_unique<rls::Service>(std::move(config), *limiter);
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static Fixture* f = new Fixture();
  rls::pb::RateLimitRequest request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return 0;
  for (int round = 0; round < 2; ++round) {
    const rls::Answer a = f->service->should_rate_limit_sync(request);
    require(a.status == rls::Status::ok || a.status == rls::Status::invalid_argument);
    if (a.status != rls::Status::ok) {
      require(!a.message.empty());
      continue;
    }
    const auto& r = a.response;
    require(r.statuses_size() == request.descriptors_size());
    // Over overall iff a descriptor not in quota mode is over, or every quota-mode one is (the
    // quota nodes of kDomain have no name: never replaced).
    const rls::Domain* domain = f->service->config().find(request.domain());
    bool over = false;
    int quotas = 0;
    int quotas_over = 0;
    std::vector<rls::Entry> entries;
    for (int i = 0; i < r.statuses_size(); ++i) {
      const auto& s = r.statuses(i);
      require(s.code() == rls::pb::RateLimitResponse::OK || s.code() == rls::pb::RateLimitResponse::OVER_LIMIT);
      require(s.code() != rls::pb::RateLimitResponse::OVER_LIMIT || s.has_current_limit());
      const auto& d = request.descriptors(i);
      entries.clear();
      for (const auto& e : d.entries()) entries.push_back({e.key(), e.value()});
      const rls::DescriptorNode* node =
          domain != nullptr && !d.has_limit() ? rls::match(*domain, entries) : nullptr;
      const bool is_over = s.code() == rls::pb::RateLimitResponse::OVER_LIMIT;
      if (node != nullptr && node->quota_mode && !node->shadow_mode) {
        ++quotas;
        quotas_over += is_over ? 1 : 0;
      } else {
        over = over || is_over;
      }
    }
    over = over || (quotas > 0 && quotas_over == quotas);
    require(r.overall_code() == (over ? rls::pb::RateLimitResponse::OVER_LIMIT : rls::pb::RateLimitResponse::OK));
    bool retry_after = false;
    for (const auto& h : r.response_headers_to_add()) retry_after = retry_after || h.key() == "Retry-After";
    require(retry_after == over);
  }
  f->clock.advance(kMicrosPerSecond / 3);
  return 0;
}
