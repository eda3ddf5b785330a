// End to end: /metrics is valid Prometheus text (exposition format 0.0.4) and its counters
// match the requests that were sent.

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>

#include "support/http_client.hpp"
#include "support/redis_cluster.hpp"
#include "support/redis_server.hpp"

namespace ratekeeper::testing {
namespace {

// Every line of the text format: a HELP or TYPE comment, another comment, or a sample
// `name{label="value",...} value [timestamp]`.
void expect_exposition_format(const std::string& text) {
  static const std::regex help(R"(^# HELP [a-zA-Z_:][a-zA-Z0-9_:]* .*$)");
  static const std::regex type(
      R"(^# TYPE [a-zA-Z_:][a-zA-Z0-9_:]* (counter|gauge|histogram|summary|untyped)$)");
  static const std::regex sample(
      R"(^[a-zA-Z_:][a-zA-Z0-9_:]*(\{([a-zA-Z_][a-zA-Z0-9_]*="([^"\\\n]|\\["\\n])*")(,[a-zA-Z_][a-zA-Z0-9_]*="([^"\\\n]|\\["\\n])*")*,?\})? ([-+]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][-+]?[0-9]+)?|[-+]?Inf|NaN)( -?[0-9]+)?$)");
  ASSERT_FALSE(text.empty());
  ASSERT_EQ(text.back(), '\n') << "the exposition ends with a line feed";
  std::istringstream in(text);
  std::string line;
  std::set<std::string> typed;
  int samples = 0;
  while (std::getline(in, line)) {
    if (line.starts_with("# TYPE ")) {
      EXPECT_TRUE(std::regex_match(line, type)) << line;
      const auto name = line.substr(7, line.find(' ', 7) - 7);
      EXPECT_TRUE(typed.insert(name).second) << "TYPE given twice for " << name;
    } else if (line.starts_with("# HELP ")) {
      EXPECT_TRUE(std::regex_match(line, help)) << line;
    } else if (line.starts_with("#")) {
      continue;
    } else {
      EXPECT_FALSE(line.empty()) << "no blank lines";
      EXPECT_TRUE(std::regex_match(line, sample)) << line;
      ++samples;
    }
  }
  EXPECT_GT(samples, 0);
}

TEST(HttpMetrics, ExpositionParsesAndCountersMatchRequests) {
  RedisServer redis;
  ServerProcess::Options o;
  o.config_yaml = R"(
rules:
  - name: api
    match: {path: /api/data}
    limits:
      - capacity: 5
        refill_rate: 0.001
  - name: profile
    match: {path: /api/profile}
    identity: {type: header, header: X-User-ID}
    limits:
      - capacity: 2
        refill_rate: 0.001
)";
  o.store_url = redis.url();
  ServerProcess server(std::move(o));
  HttpClient client(server.port());
  // Each server thread's Redis connection connects in the background: ready once all have
  // (on a busy machine, after the first requests). /readyz is one of the server's own routes,
  // not counted among the limited, rejected or unmatched requests.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (client.get("/readyz").status != 200 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }

  auto metrics = client.get("/metrics");
  ASSERT_EQ(metrics.status, 200);
  EXPECT_EQ(metrics.header("Content-Type"), "text/plain; version=0.0.4; charset=utf-8");
  expect_exposition_format(metrics.body);
  EXPECT_EQ(
      metric_value(metrics.body, R"(ratekeeper_decisions_total{rule="api",outcome="allowed"})"),
      0.0);

  for (int i = 0; i < 8; ++i) client.get("/api/data");                            // 5 + 3 denied
  for (int i = 0; i < 3; ++i) client.get("/api/profile", {{"X-User-ID", "u1"}});  // 2 + 1 denied
  for (int i = 0; i < 4; ++i) client.get("/api/search?q=x");                      // no rule
  client.get("/healthz");                                                         // not limited

  metrics = client.get("/metrics");
  ASSERT_EQ(metrics.status, 200);
  expect_exposition_format(metrics.body);
  const auto& m = metrics.body;
  EXPECT_EQ(metric_value(m, R"(ratekeeper_decisions_total{rule="api",outcome="allowed"})"), 5.0)
      << m;
  EXPECT_EQ(metric_value(m, R"(ratekeeper_decisions_total{rule="api",outcome="denied"})"), 3.0)
      << m;
  EXPECT_EQ(metric_value(m, R"(ratekeeper_decisions_total{rule="profile",outcome="allowed"})"), 2.0)
      << m;
  EXPECT_EQ(metric_value(m, R"(ratekeeper_decisions_total{rule="profile",outcome="denied"})"), 1.0)
      << m;
  EXPECT_EQ(metric_value(m, R"(ratekeeper_http_requests_total{result="admitted"})"), 7.0) << m;
  EXPECT_EQ(metric_value(m, R"(ratekeeper_http_requests_total{result="rejected"})"), 4.0) << m;
  EXPECT_EQ(metric_value(m, R"(ratekeeper_http_requests_total{result="unmatched"})"), 4.0) << m;
  EXPECT_EQ(metric_value(m, "ratekeeper_store_latency_seconds_count"), 11.0) << m;
  EXPECT_EQ(metric_value(m, R"(ratekeeper_store_ready{kind="redis"})"), 1.0) << m;
}

// On a Redis Cluster store the cluster's counters are in /metrics, behind the leasing store and
// the denial cache that wrap it: a request checked by a rule per IP and a rule per user spans
// two slots (one cross-slot check).
TEST(HttpMetrics, ClusterCountersAreExposedBehindTheStoresThatWrapIt) {
  auto& cluster = shared_cluster();
  ServerProcess::Options o;
  o.config_yaml = R"(
rules:
  - name: per_ip
    match: {path: /api/data}
    limits:
      - capacity: 100
        refill_rate: 1
  - name: per_user
    match: {path: /api/data}
    identity: {type: header, header: X-User-ID}
    limits:
      - capacity: 100
        refill_rate: 1
  - name: leased
    match: {path: /api/other}
    lease: {max: 10, ttl: 1s}
    limits:
      - capacity: 1000
        refill_rate: 100
)";
  o.store_url = cluster.url();
  ServerProcess server(std::move(o));
  HttpClient client(server.port());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (client.get("/readyz").status != 200 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const auto metric = [&](const char* name) {
    return metric_value(client.get("/metrics").body, name).value_or(-1);
  };
  const double before = metric("ratekeeper_cluster_cross_slot_checks_total");
  ASSERT_GE(before, 0.0);
  ASSERT_EQ(client.get("/api/data", {{"X-User-ID", "metrics-user"}}).status, 200);
  const auto metrics = client.get("/metrics");
  expect_exposition_format(metrics.body);
  EXPECT_EQ(metric_value(metrics.body, "ratekeeper_cluster_cross_slot_checks_total"), before + 1) << metrics.body;
  EXPECT_EQ(metric_value(metrics.body, "ratekeeper_cluster_refund_failures_total"), 0.0) << metrics.body;
  EXPECT_TRUE(metric_value(metrics.body, "ratekeeper_denial_cache_entries").has_value()) << metrics.body;
}

// `ratekeeper serve` gives the library's decision log a stdout sink: denials are written as
// JSON lines with a timestamp.
TEST(HttpDecisionLog, DenialsAreWrittenToStdoutWithATimestamp) {
  ServerProcess::Options o;
  o.config_yaml = R"(
logging:
  decisions: {enabled: true}
rules:
  - name: api
    match: {path: /api/data}
    limits:
      - capacity: 1
        refill_rate: 0.001
)";
  ServerProcess server(std::move(o));
  EXPECT_EQ(http_get(server.port(), "/api/data").status, 200);
  EXPECT_EQ(http_get(server.port(), "/api/data").status, 429);
  std::string line;
  for (int i = 0; i < 200 && line.empty(); ++i) {
    std::istringstream out(server.output());
    for (std::string l; std::getline(out, l);) {
      if (l.find(R"("rule":"api")") != std::string::npos && l.find(R"("allowed":false)") != std::string::npos) line = l;
    }
    if (line.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_FALSE(line.empty()) << server.output();
  EXPECT_TRUE(std::regex_search(line, std::regex(R"re("ts":"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z")re")))
      << line;
}

// logging.decisions.lines_per_second and burst reach the server's decision log: with a budget
// of 2 lines and almost no refill, 10 denials write 2 lines and the other 8 are counted in
// /metrics as suppressed.
TEST(HttpDecisionLog, LinesBeyondTheConfiguredBurstAreSuppressedAndCounted) {
  auto server = serve(R"(
logging:
  decisions: {enabled: true, lines_per_second: 0.001, burst: 2}
rules:
  - name: api
    match: {path: /api/data}
    limits:
      - capacity: 1
        refill_rate: 0.001
)");
  HttpClient client(server->port());
  EXPECT_EQ(client.get("/api/data").status, 200);  // allowed: not sampled, not logged
  for (int i = 0; i < 10; ++i) EXPECT_EQ(client.get("/api/data").status, 429) << i;

  const auto metrics = client.get("/metrics").body;
  EXPECT_EQ(metric_value(metrics, "ratekeeper_decision_log_suppressed_total"), 8.0) << metrics;
  int lines = 0;
  std::istringstream out(server->output());
  for (std::string l; std::getline(out, l);) {
    if (l.find(R"("rule":"api")") != std::string::npos) ++lines;
  }
  EXPECT_EQ(lines, 2) << server->output();
}

}  // namespace
}  // namespace ratekeeper::testing
