// End to end with Redis as the shared store: two server processes share one limit, and when
// Redis goes away each rule's failure policy (allow, deny, local) answers within the deadline
// while /readyz reports the store as not ready.

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "support/eventually.hpp"
#include "support/http_client.hpp"
#include "support/redis_server.hpp"

namespace ratekeeper::testing {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

TEST(HttpDistributed, TwoServersShareOneLimit) {
  RedisServer redis;
  const std::string yaml = R"(
rules:
  - name: api
    match: {path: /api/data}
    limits:
      - capacity: 10
        refill_rate: 0.001
)";
  auto a = serve(yaml, redis.url());
  auto b = serve(yaml, redis.url());
  HttpClient ca(a->port());
  HttpClient cb(b->port());
  // Both connected to Redis (before that the failure policy would answer without counting).
  ASSERT_TRUE(eventually([&] { return ca.get("/readyz").status == 200 && cb.get("/readyz").status == 200; }));
  int ok = 0;
  for (int i = 0; i < 5; ++i) {
    ok += ca.get("/api/data").status == 200;
    ok += cb.get("/api/data").status == 200;
  }
  EXPECT_EQ(ok, 10);
  // The budget is spent for both: each server now denies.
  EXPECT_EQ(ca.get("/api/data").status, 429);
  EXPECT_EQ(cb.get("/api/data").status, 429);

  // The decision API of either server reads the same bucket.
  auto check = cb.post("/v1/check", R"({"rule":"api","identity":"ip:127.0.0.1","cost":0})");
  ASSERT_EQ(check.status, 200) << check.body;
  EXPECT_EQ(json::parse(check.body).at("remaining"), 0);
}

class HttpRedisDown : public ::testing::Test {
 protected:
  // The failure policies answer every check while Redis is down; with the denial cache on,
  // keys known to be denied would stay denied (HttpRedisDownWithDenialCache).
  virtual std::size_t denied_cache_keys() const { return 0; }

  void SetUp() override {
    server_ = serve(fmt::format(R"(
store:
  url: {}
  denied_cache_keys: {}
  connect_timeout: 200ms
  command_timeout: 200ms
  breaker: {{failures: 2, open_for: 500ms}}
  reconnect: {{min: 50ms, max: 200ms}}
failure_policy:
  deny_retry_after: 7s
rules:
  - name: open
    match: {{path: /api/data}}
    on_store_error: allow
    limits: [{{capacity: 1, refill_rate: 0.001}}]
  - name: closed
    match: {{path: /api/profile}}
    on_store_error: deny
    limits: [{{capacity: 100, refill_rate: 0.001}}]
  - name: local
    match: {{path: /api/search}}
    on_store_error: local
    limits: [{{capacity: 3, refill_rate: 0.001}}]
)",
                                redis_.url(), denied_cache_keys()),
                    "");
    client_ = std::make_unique<HttpClient>(server_->port());
    // Healthy first: Redis answers and the limits hold. Each io thread's Redis connection
    // connects in the background: until it has, the failure policy would answer (and count
    // nothing), so wait for readiness.
    ASSERT_TRUE(eventually([&] { return client_->get("/readyz").status == 200; }));
    // The capacity of 1 spent and its denial answered by Redis. On a loaded machine a check
    // may miss its 200 ms deadline and be answered by the failure policy (allow): asked again.
    ASSERT_TRUE(eventually([&] { return client_->get("/api/data").status == 429; }));
    redis_.stop();
  }

  // A request answered by the failure policy, timed: it must not wait much past the
  // store's command deadline (200 ms) even on a loaded machine.
  HttpResponse timed_get(const std::string& target) {
    const auto start = Clock::now();
    auto r = client_->get(target);
    const auto took = Clock::now() - start;
    EXPECT_LT(took, std::chrono::milliseconds(200 + 1500)) << target;
    return r;
  }

  RedisServer redis_;
  std::unique_ptr<ServerProcess> server_;
  std::unique_ptr<HttpClient> client_;
};

TEST_F(HttpRedisDown, AllowPolicyAdmitsEverything) {
  // Capacity 1 is spent, yet with Redis down the rule fails open.
  for (int i = 0; i < 5; ++i) EXPECT_EQ(timed_get("/api/data").status, 200);
}

class HttpRedisDownWithDenialCache : public HttpRedisDown {
 protected:
  std::size_t denied_cache_keys() const override { return 1000; }
};

TEST_F(HttpRedisDownWithDenialCache, KnownDenialHoldsThroughTheOutageAndTheRestFailsOpen) {
  // 127.0.0.1 was denied on "open" just before Redis stopped, for ~1000 s: still denied,
  // without the failure policy; an identity never denied fails open by the policy.
  for (int i = 0; i < 3; ++i) EXPECT_EQ(timed_get("/api/data").status, 429);
  auto fresh = client_->post("/v1/check", R"({"rule":"open","identity":"ip:192.0.2.1","cost":1})");
  EXPECT_EQ(fresh.status, 200) << fresh.body;
  EXPECT_EQ(json::parse(fresh.body).at("allowed"), true) << fresh.body;
  const auto metrics = client_->get("/metrics").body;
  EXPECT_EQ(metric_value(metrics, R"(ratekeeper_decisions_total{rule="open",outcome="denied"})"), 4.0) << metrics;
  EXPECT_EQ(metric_value(metrics, "ratekeeper_denial_cache_hits_total"), 3.0) << metrics;
}

TEST_F(HttpRedisDown, DenyPolicyRejectsEverything) {
  for (int i = 0; i < 3; ++i) {
    auto r = timed_get("/api/profile");
    EXPECT_EQ(r.status, 429) << r.body;
    ASSERT_TRUE(r.header("Retry-After"));
    EXPECT_EQ(*r.header("Retry-After"), "7");
    EXPECT_EQ(json::parse(r.body),
              json::parse(R"({"error":"Rate limit exceeded","retryAfter":7})"));
  }
}

TEST_F(HttpRedisDown, LocalPolicyEnforcesTheLimitInProcess) {
  std::vector<int> got;
  for (int i = 0; i < 5; ++i) got.push_back(timed_get("/api/search?q=x").status);
  EXPECT_EQ(got, (std::vector<int>{200, 200, 200, 429, 429}));
}

TEST_F(HttpRedisDown, ReadyzReportsTheStoreAndRecovers) {
  // The store notices on its next use or reconnect attempt.
  timed_get("/api/data");
  HttpResponse ready;
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  for (;;) {
    ready = client_->get("/readyz");
    if (ready.status == 503 || Clock::now() > deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_EQ(ready.status, 503) << ready.body;
  const auto body = json::parse(ready.body);
  EXPECT_EQ(body.at("status"), "not ready");
  EXPECT_EQ(body.at("store"), "redis");
  EXPECT_FALSE(body.at("reason").get<std::string>().empty()) << ready.body;
  EXPECT_EQ(client_->get("/healthz").status, 200);  // alive, just not ready

  auto metrics = client_->get("/metrics").body;
  EXPECT_GE(
      metric_value(metrics, R"(ratekeeper_decisions_total{rule="open",outcome="failure_policy"})")
          .value_or(0),
      1.0)
      << metrics;
  EXPECT_EQ(metric_value(metrics, R"(ratekeeper_store_ready{kind="redis"})"), 0.0) << metrics;

  redis_.start();
  const auto back = Clock::now() + std::chrono::seconds(15);
  for (;;) {
    client_->get("/api/profile");  // traffic lets the breaker probe
    ready = client_->get("/readyz");
    if (ready.status == 200 || Clock::now() > back) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(ready.status, 200) << ready.body;
}

}  // namespace
}  // namespace ratekeeper::testing
