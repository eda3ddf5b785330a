// End to end: the caller-shaped decision API (POST /v1/check with `request` or `checks`) of a
// real `ratekeeper serve` over a real Redis: the checks of one call are consumed in one
// atomic script call, all-or-nothing, and a described request charges the same keys as the
// request itself.

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "support/http_client.hpp"
#include "support/redis_server.hpp"

namespace ratekeeper::testing {
namespace {

using json = nlohmann::json;

constexpr std::string_view kConfig = R"(
logging: {decisions: {enabled: false}}
trusted_proxies: [127.0.0.1/32]
rules:
  - name: api
    match: {path_prefix: /api/}
    identity: {type: user_or_ip, header: X-User-ID}
    limits:
      - {name: burst, capacity: 3, refill_rate: 0.001}
      - {name: daily, algorithm: fixed_window, limit: 100, window: 1d}
    ip_limits: [{capacity: 2, refill_rate: 0.001}]
  - name: exports
    match: {path: /exports}
    identity: {type: header, header: X-User-ID}
    limits: [{algorithm: sliding_window_log, limit: 2, window: 1h}]
)";

class HttpDecisionApi : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    redis_ = new RedisServer();
    server_ = serve(std::string(kConfig), redis_->url(), 1).release();
  }
  static void TearDownTestSuite() {
    delete server_;
    delete redis_;
  }
  void SetUp() override { ASSERT_EQ(redis_->command({"FLUSHALL"}), "OK"); }

  static HttpResponse check(const json& body) {
    return http_post(server_->port(), "/v1/check", body.dump(),
                     {{"Content-Type", "application/json"}});
  }

  static RedisServer* redis_;
  static ServerProcess* server_;
};

RedisServer* HttpDecisionApi::redis_ = nullptr;
ServerProcess* HttpDecisionApi::server_ = nullptr;

TEST_F(HttpDecisionApi, ChecksOverRedisAreAllOrNothing) {
  const json exports{{"rule", "exports"}, {"identity", "user:7"}};
  const json api{{"rule", "api"}, {"identity", "user:7"}};
  ASSERT_EQ(check({{"checks", {exports, api}}}).status, 200);
  ASSERT_EQ(check({{"checks", {exports}}}).status, 200);
  // The export window is full: the pair is denied and the api limits keep what they had.
  auto denied = check({{"checks", {api, exports}}});
  ASSERT_EQ(denied.status, 429) << denied.body;
  const auto body = json::parse(denied.body);
  EXPECT_EQ(body.at("status"), 429);
  EXPECT_EQ(denied.header("Retry-After"), body.at("headers").at("Retry-After"));
  ASSERT_EQ(body.at("limits").size(), 3u);
  EXPECT_EQ(body.at("limits")[0].at("policy"), "api.burst");
  EXPECT_EQ(body.at("limits")[0].at("remaining"), 2);
  EXPECT_EQ(body.at("limits")[2].at("allowed"), false);
  // The day's window in Redis ("<window start>:<count>") counts the first call only.
  const auto daily = redis_->command({"GET", "ratelimit:{user:7}:api:daily"});
  EXPECT_TRUE(daily.ends_with(":1")) << daily;

  auto alone = check({{"checks", {api}}});
  ASSERT_EQ(alone.status, 200) << alone.body;
  EXPECT_EQ(json::parse(alone.body).at("limits")[1].at("remaining"), 98);
}

TEST_F(HttpDecisionApi, DescribedRequestsChargeTheRequestsOwnKeys) {
  // The client 192.0.2.7, as a caller describes it and as it comes through a proxy.
  const json anonymous{{"request",
                        {{"method", "GET"},
                         {"path", "/api/items?page=1"},
                         {"client_ip", "::ffff:192.0.2.7"}}}};
  auto first = check(anonymous);
  ASSERT_EQ(first.status, 200) << first.body;
  EXPECT_EQ(json::parse(first.body).at("limits")[0].at("identity"), "ip:192.0.2.7");
  EXPECT_EQ(http_get(server_->port(), "/api/data", {{"X-Forwarded-For", "192.0.2.7"}}).status,
            200);  // the last token
  auto denied = check(anonymous);
  ASSERT_EQ(denied.status, 429) << denied.body;
  EXPECT_EQ(json::parse(denied.body).at("headers").at("RateLimit"), R"("api";r=0;t=1000)");
  EXPECT_EQ(redis_->command({"EXISTS", "ratelimit:{ip:192.0.2.7}:api"}), "1");

  const json user{{"request", {{"method", "POST"}, {"path", "/api/items"},
                               {"headers", {{"x-user-id", "7"}}}, {"client_ip", "192.0.2.7"}}}};
  auto admitted = check(user);
  ASSERT_EQ(admitted.status, 200) << admitted.body;
  EXPECT_EQ(json::parse(admitted.body).at("headers").at("RateLimit-Policy"),
            R"("api.burst";q=3;w=3000, "api.daily";q=100;w=86400)");
}

}  // namespace
}  // namespace ratekeeper::testing
