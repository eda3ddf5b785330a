#pragma once
// An rls::Service assembled as the server assembles it (parse_rls_domain → index_config →
// append_limiter_rules → Limiter → Service) from inline YAML domains, over a store and a
// ManualClock the test owns; and RateLimitRequests written as lists of (key, value) entries.

#include <gtest/gtest.h>

#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ratekeeper/core/clock.hpp"
#include "ratekeeper/limiter/limiter.hpp"
#include "ratekeeper/rls/service.hpp"
#include "ratekeeper/store/store.hpp"
#include "rls_config.hpp"

namespace ratekeeper::testing {

namespace pb = rls::pb;
using Code = pb::RateLimitResponse::Code;
using PbUnit = pb::RateLimitResponse::RateLimit::Unit;

// One descriptor: its entries, in order.
using Entries = std::vector<std::pair<std::string, std::string>>;

inline void add_descriptor(pb::RateLimitRequest& request, const Entries& entries) {
  auto* d = request.add_descriptors();
  for (const auto& [key, value] : entries) {
    auto* e = d->add_entries();
    e->set_key(key);
    e->set_value(value);
  }
}

// A request of `domain` with these descriptors; hits_addend 0 (one hit each).
inline pb::RateLimitRequest rls_request(std::string_view domain,
                                        std::initializer_list<Entries> descriptors,
                                        std::uint32_t hits_addend = 0) {
  pb::RateLimitRequest request;
  request.set_domain(std::string(domain));
  for (const auto& d : descriptors) add_descriptor(request, d);
  request.set_hits_addend(hits_addend);
  return request;
}

// The value of response header `name`, or "" when absent.
inline std::string header(const pb::RateLimitResponse& response, std::string_view name) {
  for (const auto& h : response.response_headers_to_add()) {
    if (h.key() == name) return h.value();
  }
  return {};
}

inline bool has_header(const pb::RateLimitResponse& response, std::string_view name) {
  for (const auto& h : response.response_headers_to_add()) {
    if (h.key() == name) return true;
  }
  return false;
}

// Microseconds of a protobuf Duration.
inline Micros micros(const google::protobuf::Duration& d) {
  return d.seconds() * kMicrosPerSecond + d.nanos() / 1000;
}

class RlsService {
 public:
  RlsService(std::initializer_list<std::string_view> domains, store::Store& store,
             const Clock& clock, rls::ServiceOptions options = {}) {
    rls::RlsConfig config;
    for (const auto yaml : domains) config.domains.push_back(server::parse_rls_domain(yaml));
    rls::index_config(config);
    limiter::LimiterConfig limiter_config;
    rls::append_limiter_rules(config, limiter_config.rules);
    limiter_ = std::make_unique<limiter::Limiter>(std::move(limiter_config), store, &clock);
    service_ = std::make_unique<rls::Service>(std::move(config), *limiter_, options);
  }

  rls::Answer ask(const pb::RateLimitRequest& request) {
    return service_->should_rate_limit_sync(request);
  }
  // The response of a request that must be answered (Status::ok).
  pb::RateLimitResponse answer(const pb::RateLimitRequest& request) {
    auto a = ask(request);
    EXPECT_EQ(a.status, rls::Status::ok) << a.message;
    return std::move(a.response);
  }
  // The overall code of a request that must be answered.
  Code code(const pb::RateLimitRequest& request) { return answer(request).overall_code(); }

  rls::Service& service() { return *service_; }
  limiter::Limiter& limiter() { return *limiter_; }

 private:
  std::unique_ptr<limiter::Limiter> limiter_;
  std::unique_ptr<rls::Service> service_;
};

}  // namespace ratekeeper::testing
