// End to end: a rule with a concurrency limit next to a rate limit on `ratekeeper serve` as a
// reverse proxy over a real redis-server, to a real upstream that holds requests open
// (/sleep/MS). A request holds a slot from its admission to the end of its response, over
// HTTP/1.1 and HTTP/2; one beyond the limit is a 429; a request that outlasts its slot_ttl
// keeps its slot through the proxy's heartbeats; every slot is given back at the end.

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <future>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "support/http_client.hpp"
#include "support/redis_server.hpp"
#include "support/test_upstream.hpp"

namespace ratekeeper::testing {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;

class HttpConcurrency : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = serve(fmt::format(R"(upstream: {{url: "http://127.0.0.1:{}"}}
admin: {{listen: 127.0.0.1:0}}
rules:
  - name: inflight
    match: {{path_prefix: /}}
    identity: {{type: header, header: X-User-ID}}
    limits:
      - {{name: rate, capacity: 1000, refill_rate: 0.001}}
      - {{name: slots, algorithm: concurrency, limit: 2, slot_ttl: 1500ms}}
)",
                                upstream_.port()),
                    redis_.url());
    proxy_ = logged_port(*server_, "listening on 127.0.0.1:");
    admin_ = logged_port(*server_, "admin endpoints on 127.0.0.1:");
    ASSERT_NE(proxy_, 0) << server_->log();
    ASSERT_NE(admin_, 0) << server_->log();
  }

  // The free slots of `user`, read without taking one through the admin listener.
  std::int64_t free_slots(std::string_view user) {
    const json check{{"rule", "inflight"}, {"identity", fmt::format("user:{}", user)}, {"cost", 0}};
    const auto peek = http_post(admin_, "/v1/check", json{{"checks", json::array({check})}}.dump());
    const json answer = json::parse(peek.body);
    for (const auto& limit : answer.at("limits")) {
      if (limit.at("policy") == "inflight.slots") return limit.at("remaining").get<std::int64_t>();
    }
    ADD_FAILURE() << peek.body;
    return -1;
  }

  // Waits until `user` has `expected` free slots (a release is sent as the response goes out).
  ::testing::AssertionResult frees_to(std::string_view user, std::int64_t expected) {
    std::int64_t seen = -1;
    for (int i = 0; i < 500; ++i) {  // 5 s: sanitizer builds are slow
      seen = free_slots(user);
      if (seen == expected) return ::testing::AssertionSuccess();
      std::this_thread::sleep_for(10ms);
    }
    return ::testing::AssertionFailure() << user << " has " << seen << " free slots, not " << expected;
  }

  // Waits until the upstream has received `n` requests in all.
  ::testing::AssertionResult upstream_saw(std::size_t n) {
    for (int i = 0; i < 500 && upstream_.request_count() < n; ++i) std::this_thread::sleep_for(10ms);
    if (upstream_.request_count() >= n) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << "the upstream saw " << upstream_.request_count() << " requests, not " << n;
  }

  std::string metric(std::string_view result) {
    const auto body = HttpClient(admin_).get("/metrics").body;
    const auto line = fmt::format("ratekeeper_reservations_total{{rule=\"inflight\",result=\"{}\"}} ", result);
    const auto at = body.find(line);
    if (at == std::string::npos) return "absent";
    return body.substr(at + line.size(), body.find('\n', at) - at - line.size());
  }

  RedisServer redis_;
  TestUpstream upstream_;
  std::unique_ptr<ServerProcess> server_;
  int proxy_ = 0;
  int admin_ = 0;
};

TEST_F(HttpConcurrency, RequestsBeyondTheLimitInFlightAreDeniedUntilOneEnds) {
  EXPECT_TRUE(frees_to("alice", 2));
  auto slow = [&] {
    return std::async(std::launch::async, [port = proxy_] {
      return HttpClient(port).get("/sleep/4000", {{"X-User-ID", "alice"}}).status;
    });
  };
  auto first = slow();
  auto second = slow();
  ASSERT_TRUE(upstream_saw(2));
  const auto third = HttpClient(proxy_).get("/now", {{"X-User-ID", "alice"}});
  EXPECT_EQ(third.status, 429) << third.body;
  EXPECT_EQ(third.header("Retry-After"), "1");
  EXPECT_EQ(HttpClient(proxy_).get("/now", {{"X-User-ID", "bob"}}).status, 200);  // bob's own slots
  EXPECT_TRUE(frees_to("bob", 2));

  // Past the slots' 1.5 s: the heartbeats (every 0.5 s) keep them.
  std::this_thread::sleep_for(2500ms);
  EXPECT_EQ(free_slots("alice"), 0);
  EXPECT_EQ(HttpClient(proxy_).get("/now", {{"X-User-ID", "alice"}}).status, 429);

  EXPECT_EQ(first.get(), 200);
  EXPECT_EQ(second.get(), 200);
  EXPECT_TRUE(frees_to("alice", 2));
  EXPECT_EQ(HttpClient(proxy_).get("/now", {{"X-User-ID", "alice"}}).status, 200);
  EXPECT_TRUE(frees_to("alice", 2));
  EXPECT_NE(metric("renewed"), "0");
  EXPECT_NE(metric("renewed"), "absent");
  EXPECT_EQ(metric("lost"), "0");
}

TEST_F(HttpConcurrency, EachHttp2StreamHoldsASlot) {
  FILE* pipe = ::popen(
      fmt::format("h2load -n 4 -c 1 -m 4 -H 'X-User-ID: carol' http://127.0.0.1:{}/sleep/1000 2>&1", proxy_).c_str(),
      "r");
  ASSERT_NE(pipe, nullptr);
  std::string out;
  char buf[512];
  while (std::fgets(buf, sizeof buf, pipe) != nullptr) out += buf;
  ASSERT_EQ(::pclose(pipe), 0) << out;
  // Four streams at once on two slots: two admitted, two denied.
  EXPECT_NE(out.find("status codes: 2 2xx, 0 3xx, 2 4xx"), std::string::npos) << out;
  EXPECT_TRUE(frees_to("carol", 2));
}

TEST_F(HttpConcurrency, AClientThatLeavesGivesItsSlotBack) {
  {
    HttpClient client(proxy_);
    client.connect();
    client.send_raw("GET /sleep/1000 HTTP/1.1\r\nHost: x\r\nX-User-ID: dave\r\n\r\n");
    ASSERT_TRUE(upstream_saw(1));
    EXPECT_EQ(free_slots("dave"), 1);
  }  // closed before its answer
  EXPECT_TRUE(frees_to("dave", 2));
}

TEST_F(HttpConcurrency, AnUpstreamThatFailsGivesTheSlotBack) {
  HttpClient client(proxy_);
  EXPECT_EQ(client.get("/garbage", {{"X-User-ID", "erin"}}).status, 502);
  EXPECT_TRUE(frees_to("erin", 2));
  HttpClient cut(proxy_);
  // The body breaks off after its head was relayed: the client reads a partial message.
  EXPECT_ANY_THROW(cut.get("/close-in-body", {{"X-User-ID", "erin"}}));
  EXPECT_TRUE(frees_to("erin", 2));
  EXPECT_EQ(metric("released"), "2");
}

}  // namespace
}  // namespace ratekeeper::testing
