// Prometheus exposition of the limiter's metrics.

#include "ratekeeper/limiter/metrics.hpp"

#include <gtest/gtest.h>

#include <regex>

#include "config.hpp"
#include "ratekeeper/http/middleware.hpp"
#include "ratekeeper/store/memory_store.hpp"

namespace ratekeeper::limiter {
namespace {

constexpr Micros kStart = 1'700'000'000LL * kMicrosPerSecond;

// The value of one sample line "name{labels} value" in an exposition text; -1 when absent.
double sample(const std::string& text, const std::string& series) {
  const auto prefix = series + " ";
  std::size_t pos = 0;
  while ((pos = text.find(prefix, pos)) != std::string::npos) {
    if (pos == 0 || text[pos - 1] == '\n') {
      return std::stod(
          text.substr(pos + prefix.size(), text.find('\n', pos) - pos - prefix.size()));
    }
    pos += prefix.size();
  }
  return -1;
}

TEST(MetricsTest, RenderedCountersMatchRecordedValues) {
  Metrics m({"api", "login"});
  m.record_decision(0, Outcome::allowed);
  m.record_decision(0, Outcome::allowed);
  m.record_decision(1, Outcome::denied);
  m.record_decision(1, Outcome::failure_policy);
  m.record_near_limit(0);
  m.record_delayed(1, 250'000);
  m.record_delayed(1, 1'500'000);
  m.record_store_error(ErrorCode::timeout);
  m.record_store_error(ErrorCode::timeout);
  m.record_reservation(0, Reservation::reserved, 100);
  m.record_reservation(0, Reservation::reserved, 50);
  m.record_reservation(0, Reservation::settled, 70);
  m.record_reservation(0, Reservation::unknown, 9);
  m.record_reservation(1, Reservation::failed);
  const auto text = m.render({true, "ok"}, "memory");
  EXPECT_EQ(sample(text, R"(ratekeeper_reservations_total{rule="api",result="reserved"})"), 2);
  EXPECT_EQ(sample(text, R"(ratekeeper_reservations_total{rule="api",result="settled"})"), 1);
  EXPECT_EQ(sample(text, R"(ratekeeper_reservations_total{rule="api",result="unknown"})"), 1);
  EXPECT_EQ(sample(text, R"(ratekeeper_reservations_total{rule="login",result="failed"})"), 1);
  EXPECT_EQ(sample(text, R"(ratekeeper_reserved_cost_total{rule="api"})"), 150);
  EXPECT_EQ(sample(text, R"(ratekeeper_settled_cost_total{rule="api"})"), 70);
  EXPECT_EQ(sample(text, R"(ratekeeper_decisions_total{rule="api",outcome="allowed"})"), 2);
  EXPECT_EQ(sample(text, R"(ratekeeper_decisions_total{rule="api",outcome="denied"})"), 0);
  EXPECT_EQ(sample(text, R"(ratekeeper_decisions_total{rule="login",outcome="denied"})"), 1);
  EXPECT_EQ(sample(text, R"(ratekeeper_decisions_total{rule="login",outcome="failure_policy"})"),
            1);
  EXPECT_EQ(sample(text, R"(ratekeeper_near_limit_total{rule="api"})"), 1);
  EXPECT_EQ(sample(text, R"(ratekeeper_delayed_total{rule="api"})"), 0);
  EXPECT_EQ(sample(text, R"(ratekeeper_delayed_total{rule="login"})"), 2);
  EXPECT_DOUBLE_EQ(sample(text, R"(ratekeeper_delay_seconds_total{rule="login"})"), 1.75);
  EXPECT_EQ(sample(text, R"(ratekeeper_store_errors_total{kind="timeout"})"), 2);
  EXPECT_EQ(sample(text, R"(ratekeeper_store_errors_total{kind="unavailable"})"), 0);
  EXPECT_EQ(sample(text, R"(ratekeeper_store_ready{kind="memory"})"), 1);
  EXPECT_NE(text.find("# TYPE ratekeeper_decisions_total counter\n"), std::string::npos);
  EXPECT_EQ(
      sample(m.render({false, "breaker open"}, "redis"), R"(ratekeeper_store_ready{kind="redis"})"),
      0);
}

TEST(MetricsTest, LatencyHistogramIsCumulative) {
  Metrics m({"api"});
  m.record_store_latency(40);         // ≤ 50 µs
  m.record_store_latency(700);        // ≤ 1 ms
  m.record_store_latency(3'000'000);  // above every bucket
  const auto text = m.render({}, "memory");
  EXPECT_EQ(sample(text, R"(ratekeeper_store_latency_seconds_bucket{le="5e-05"})"), 1);
  EXPECT_EQ(sample(text, R"(ratekeeper_store_latency_seconds_bucket{le="0.0005"})"), 1);
  EXPECT_EQ(sample(text, R"(ratekeeper_store_latency_seconds_bucket{le="0.001"})"), 2);
  EXPECT_EQ(sample(text, R"(ratekeeper_store_latency_seconds_bucket{le="1"})"), 2);
  EXPECT_EQ(sample(text, R"(ratekeeper_store_latency_seconds_bucket{le="+Inf"})"), 3);
  EXPECT_EQ(sample(text, "ratekeeper_store_latency_seconds_count"), 3);
  EXPECT_NEAR(sample(text, "ratekeeper_store_latency_seconds_sum"), 3.00074, 1e-9);
}

TEST(MetricsTest, EveryLineIsCommentOrWellFormedSample) {
  Metrics m({"a\"b"});
  m.record_decision(0, Outcome::allowed);
  const auto text = m.render({true, "ok"}, "memory");
  const std::regex line(
      R"re(^(# (HELP|TYPE) .*|[a-z_]+(\{([a-z_]+="([^"\\]|\\.)*",?)*\})? [0-9.e+-]+)$)re");
  std::size_t start = 0;
  ASSERT_EQ(text.back(), '\n');
  while (start < text.size()) {
    const auto end = text.find('\n', start);
    const auto l = text.substr(start, end - start);
    EXPECT_TRUE(std::regex_match(l, line)) << l;
    start = end + 1;
  }
  EXPECT_NE(text.find(R"(rule="a\"b")"), std::string::npos);
}

TEST(MetricsTest, MiddlewareDecisionsAreCountedPerRuleAndOutcome) {
  ManualClock clock{kStart};
  store::MemoryStore store{
      store::MemoryStoreOptions{.max_keys = 1000, .shards = 2, .clock = &clock}};
  auto config = server::parse_config(R"(
logging: {decisions: {enabled: false}}
rules:
  - name: api
    match: {path: /api}
    limits: [{capacity: 10, refill_rate: 1}]
  - name: watch
    match: {path_prefix: /}
    shadow: true
    limits: [{capacity: 2, refill_rate: 1}]
)",
                                   "m.yaml");
  Limiter limiter(config.limiter, store);
  http::Middleware mw(limiter, config.middleware);
  http::Request v;
  v.method = "GET";
  v.target = "/api";
  v.peer_address = "192.0.2.1";
  int admitted = 0, rejected = 0;
  for (int i = 0; i < 13; ++i) (mw.handle_sync(v).admitted ? admitted : rejected)++;
  EXPECT_EQ(admitted, 10);
  EXPECT_EQ(rejected, 3);
  const auto text = limiter.metrics_text();
  EXPECT_EQ(sample(text, R"(ratekeeper_decisions_total{rule="api",outcome="allowed"})"), 10);
  EXPECT_EQ(sample(text, R"(ratekeeper_decisions_total{rule="api",outcome="denied"})"), 3);
  EXPECT_EQ(sample(text, R"(ratekeeper_decisions_total{rule="watch",outcome="allowed"})"), 2);
  EXPECT_EQ(sample(text, R"(ratekeeper_decisions_total{rule="watch",outcome="shadow_denied"})"),
            11);
  // remaining 0 after the 10th admission: below 10% of 10 once (remaining 0 < 1).
  EXPECT_EQ(sample(text, R"(ratekeeper_near_limit_total{rule="api"})"), 1);
  const auto requests = mw.metrics().render();
  EXPECT_EQ(sample(requests, R"(ratekeeper_http_requests_total{result="admitted"})"), 10);
  EXPECT_EQ(sample(requests, R"(ratekeeper_http_requests_total{result="rejected"})"), 3);
  EXPECT_EQ(sample(text, "ratekeeper_store_latency_seconds_count"), 26);  // 13 real + 13 shadow
}

}  // namespace
}  // namespace ratekeeper::limiter
