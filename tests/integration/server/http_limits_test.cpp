// End to end: a real `ratekeeper serve` process on a real Redis, real HTTP over loopback.
// Limits per IP under a concurrent burst, per user, per endpoint or shared, per tier, the
// login brute-force window, and shadow rules.

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <latch>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "support/http_client.hpp"
#include "support/redis_server.hpp"

namespace ratekeeper::testing {
namespace {

using json = nlohmann::json;

class HttpLimits : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { redis_ = new RedisServer(); }
  static void TearDownTestSuite() {
    delete redis_;
    redis_ = nullptr;
  }
  void SetUp() override { ASSERT_EQ(redis_->command({"FLUSHALL"}), "OK"); }

  static std::unique_ptr<ServerProcess> serve(std::string yaml, int threads = 2) {
    return testing::serve(std::move(yaml), redis_->url(), threads);
  }

  static RedisServer* redis_;
};

RedisServer* HttpLimits::redis_ = nullptr;

std::vector<int> statuses(HttpClient& client, int n, const std::string& target,
                          Headers headers = {}) {
  std::vector<int> out;
  for (int i = 0; i < n; ++i) out.push_back(client.get(target, headers).status);
  return out;
}

std::vector<int> repeat(int status, int n) {
  return std::vector<int>(n, status);
}

std::vector<int> concat(std::vector<int> a, const std::vector<int>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST_F(HttpLimits, ConcurrentBurstFromOneIpAdmitsExactlyCapacity) {
  auto server = serve(R"(
rules:
  - name: api
    match: {path_prefix: /api/}
    limits:
      - capacity: 100
        refill_rate: 0.001
)",
                      4);
  constexpr int kThreads = 40;
  constexpr int kPerThread = 5;
  std::mutex mu;
  std::vector<HttpResponse> responses;
  std::latch start(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      HttpClient client(server->port());
      std::vector<HttpResponse> mine;
      start.arrive_and_wait();
      for (int i = 0; i < kPerThread; ++i) mine.push_back(client.get("/api/data"));
      std::lock_guard lock(mu);
      for (auto& r : mine) responses.push_back(std::move(r));
    });
  }
  for (auto& t : threads) t.join();

  ASSERT_EQ(responses.size(), 200u);
  int ok = 0, limited = 0;
  for (const auto& r : responses) {
    ASSERT_TRUE(r.header("RateLimit-Policy")) << r.status;
    ASSERT_TRUE(r.header("RateLimit")) << r.status;
    if (r.status == 200) {
      ++ok;
      EXPECT_EQ(r.body, R"({"data":"success"})");
      continue;
    }
    ASSERT_EQ(r.status, 429) << r.body;
    ++limited;
    const auto body = json::parse(r.body);
    ASSERT_EQ(body.size(), 2u) << r.body;
    EXPECT_EQ(body.at("error"), "Rate limit exceeded");
    const auto retry_after = body.at("retryAfter").get<std::int64_t>();
    // One token every 1000 s: the next one is at most 1000 s away.
    EXPECT_GE(retry_after, 1);
    EXPECT_LE(retry_after, 1000);
    ASSERT_TRUE(r.header("Retry-After"));
    EXPECT_EQ(*r.header("Retry-After"), std::to_string(retry_after));
    EXPECT_NE(r.header("RateLimit")->find("r=0"), std::string::npos) << *r.header("RateLimit");
  }
  EXPECT_EQ(ok, 100);
  EXPECT_EQ(limited, 100);
}

TEST_F(HttpLimits, UsersHaveIndependentBuckets) {
  auto server = serve(R"(
rules:
  - name: profile
    match: {path: /api/profile}
    identity: {type: header, header: X-User-ID, default: anonymous}
    limits:
      - capacity: 3
        refill_rate: 0.001
)");
  HttpClient client(server->port());
  const Headers alice = {{"X-User-ID", "alice"}};
  const Headers bob = {{"X-User-ID", "bob"}};
  EXPECT_EQ(statuses(client, 4, "/api/profile", alice), concat(repeat(200, 3), {429}));
  // Alice's denials cost Bob nothing; requests without the header share "anonymous".
  EXPECT_EQ(statuses(client, 4, "/api/profile", bob), concat(repeat(200, 3), {429}));
  EXPECT_EQ(statuses(client, 4, "/api/profile"), concat(repeat(200, 3), {429}));

  auto profile = client.get("/api/profile", {{"X-User-ID", "carol"}});
  ASSERT_EQ(profile.status, 200);
  EXPECT_EQ(json::parse(profile.body), json::parse(R"({"profile":{"user_id":"carol"}})"));
  EXPECT_EQ(redis_->command({"EXISTS", "ratelimit:{user:alice}:profile"}), "1");
}

TEST_F(HttpLimits, PerEndpointBucketsAreSeparate) {
  auto server = serve(R"(
rules:
  - name: api
    match: {path_prefix: /api/}
    bucket: per_endpoint
    limits:
      - capacity: 2
        refill_rate: 0.001
)");
  HttpClient client(server->port());
  EXPECT_EQ(statuses(client, 3, "/api/data"), (std::vector<int>{200, 200, 429}));
  EXPECT_EQ(statuses(client, 3, "/api/search?q=x"), (std::vector<int>{200, 200, 429}));
}

TEST_F(HttpLimits, SharedBucketSpansEndpoints) {
  auto server = serve(R"(
rules:
  - name: api
    match: {path_prefix: /api/}
    bucket: shared
    limits:
      - capacity: 2
        refill_rate: 0.001
)");
  HttpClient client(server->port());
  EXPECT_EQ(statuses(client, 2, "/api/data"), repeat(200, 2));
  EXPECT_EQ(client.get("/api/search?q=x").status, 429);
  EXPECT_EQ(client.get("/api/profile").status, 429);
}

TEST_F(HttpLimits, TiersHaveTheirOwnLimits) {
  auto server = serve(R"(
tiers:
  default: free
  levels:
    free:
      - capacity: 2
        refill_rate: 0.001
    pro:
      - capacity: 5
        refill_rate: 0.001
  users:
    alice: pro
    bob: free
rules:
  - name: search
    match: {path: /api/search}
    identity: {type: user_or_ip, header: X-User-ID}
    tiered: true
)");
  HttpClient client(server->port());
  EXPECT_EQ(statuses(client, 6, "/api/search?q=a", {{"X-User-ID", "alice"}}),
            concat(repeat(200, 5), {429}));
  EXPECT_EQ(statuses(client, 3, "/api/search?q=b", {{"X-User-ID", "bob"}}),
            concat(repeat(200, 2), {429}));
  // Unknown users get the default tier; so does the IP fallback.
  EXPECT_EQ(statuses(client, 3, "/api/search?q=c", {{"X-User-ID", "carol"}}),
            concat(repeat(200, 2), {429}));
  EXPECT_EQ(statuses(client, 3, "/api/search?q=d"), concat(repeat(200, 2), {429}));

  auto found = client.get("/api/search?q=red+shoes", {{"X-User-ID", "dave"}});
  ASSERT_EQ(found.status, 200);
  const auto body = json::parse(found.body);
  EXPECT_EQ(body.at("query"), "red shoes");
  EXPECT_TRUE(body.at("results").is_array());
  EXPECT_FALSE(body.at("results").empty());
}

TEST_F(HttpLimits, LoginIsProtectedByAStrictPerIpWindow) {
  auto server = serve(R"(
rules:
  - name: login
    match: {methods: [POST], path: /auth/login}
    limits:
      - algorithm: sliding_window_log
        limit: 5
        window: 15m
)");
  HttpClient client(server->port());
  const std::string good = R"({"username":"alice","password":"secret"})";
  EXPECT_EQ(client.post("/auth/login", good).status, 200);
  EXPECT_EQ(client.post("/auth/login", good).body, R"({"status":"ok"})");
  EXPECT_EQ(client.post("/auth/login", "{}").status, 401);  // attempts count, good or bad
  EXPECT_EQ(client.post("/auth/login", R"({"username":"alice","password":"guess"})").status, 200);
  EXPECT_EQ(client.post("/auth/login", "").status, 401);
  auto denied = client.post("/auth/login", good);
  EXPECT_EQ(denied.status, 429);
  ASSERT_TRUE(denied.header("Retry-After"));
  EXPECT_GT(std::stoll(*denied.header("Retry-After")), 800);  // the window is 15 minutes
  EXPECT_EQ(client.get("/auth/login").status, 405);
}

TEST_F(HttpLimits, ShadowRulesNeverRejectButAreCounted) {
  auto server = serve(R"(
rules:
  - name: trial
    match: {path: /api/data}
    shadow: true
    limits:
      - capacity: 2
        refill_rate: 0.001
)");
  HttpClient client(server->port());
  EXPECT_EQ(statuses(client, 6, "/api/data"), repeat(200, 6));

  // Shadow rules are checked off the request path: wait for the counters to settle.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  std::string metrics;
  for (;;) {
    metrics = client.get("/metrics").body;
    auto denied = metric_value(
        metrics, R"(ratekeeper_decisions_total{rule="trial",outcome="shadow_denied"})");
    auto allowed =
        metric_value(metrics, R"(ratekeeper_decisions_total{rule="trial",outcome="allowed"})");
    if ((denied && allowed && *denied + *allowed >= 6) ||
        std::chrono::steady_clock::now() > deadline) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(
      metric_value(metrics, R"(ratekeeper_decisions_total{rule="trial",outcome="shadow_denied"})"),
      4.0)
      << metrics;
  EXPECT_EQ(metric_value(metrics, R"(ratekeeper_decisions_total{rule="trial",outcome="allowed"})"),
            2.0)
      << metrics;
  EXPECT_EQ(metric_value(metrics, R"(ratekeeper_decisions_total{rule="trial",outcome="denied"})"),
            0.0)
      << metrics;
}

TEST_F(HttpLimits, ShippedConfigurationLimitsTheDemoApi) {
  std::ifstream in(std::string(RATEKEEPER_SOURCE_DIR) + "/config/ratekeeper.yaml");
  ASSERT_TRUE(in);
  std::stringstream yaml;
  yaml << in.rdbuf();
  auto server = serve(yaml.str());
  HttpClient client(server->port());

  // /api/data: the seed's bucket, capacity 100 refilled at 10/s, per IP.
  const auto start = std::chrono::steady_clock::now();
  int ok = 0, limited = 0;
  for (int i = 0; i < 150; ++i) {
    const int status = client.get("/api/data").status;
    ok += status == 200;
    limited += status == 429;
  }
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(ok + limited, 150);
  EXPECT_GE(ok, 100);
  EXPECT_LE(ok, 100 + static_cast<int>(elapsed * 10) + 1) << elapsed << " s";
  EXPECT_GE(limited, 1);

  auto exported = client.get("/api/export/report.csv", {{"X-User-ID", "alice"}});
  EXPECT_EQ(exported.status, 200) << exported.body;
  EXPECT_EQ(json::parse(exported.body).at("export"), "report.csv");
  EXPECT_NE(exported.header("RateLimit-Policy").value_or("").find("api_export"), std::string::npos);
}

}  // namespace
}  // namespace ratekeeper::testing
