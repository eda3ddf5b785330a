// End to end: a rule whose cost comes from the response (`usage`) on `ratekeeper serve` as a
// reverse proxy over a real redis-server, to a real upstream that reports each request's cost
// in X-Usage-Tokens. A request reserves its estimate (the rule's, or its X-Max-Tokens) at
// admission and is settled to the reported cost when the response's head arrives, over
// HTTP/1.1 and HTTP/2 alike; a response without a valid cost leaves the estimate and a log
// line; a cost above the estimate is charged (the bucket owes).

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
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

class HttpUsage : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = serve(fmt::format(R"(upstream: {{url: "http://127.0.0.1:{}"}}
admin: {{listen: 127.0.0.1:0}}
rules:
  - name: completions
    match: {{path_prefix: /usage/}}
    identity: {{type: header, header: X-User-ID}}
    limits: [{{capacity: 1000, refill_rate: 0.001}}]
    usage: {{response_header: X-Usage-Tokens, estimate: 100, estimate_header: X-Max-Tokens}}
  - name: bodies
    match: {{path_prefix: /usage-}}
    identity: {{type: header, header: X-User-ID}}
    limits: [{{capacity: 1000, refill_rate: 0.001}}]
    usage: {{response_json: usage.total_tokens, estimate: 100}}
)",
                                upstream_.port()),
                    redis_.url());
    proxy_ = logged_port(*server_, "listening on 127.0.0.1:");
    admin_ = logged_port(*server_, "admin endpoints on 127.0.0.1:");
    ASSERT_NE(proxy_, 0) << server_->log();
    ASSERT_NE(admin_, 0) << server_->log();
  }

  // What `user` has left, read without consuming through the admin listener's decision API.
  std::int64_t remaining(std::string_view user, std::string_view rule = "completions") {
    const auto peek = http_post(admin_, "/v1/check",
                                json{{"rule", rule}, {"identity", fmt::format("user:{}", user)},
                                     {"cost", 0}}
                                    .dump());
    return json::parse(peek.body).at("remaining").get<std::int64_t>();
  }

  // Waits until `user` has `expected` left (a settlement is sent as the response goes out).
  ::testing::AssertionResult settles_to(std::string_view user, std::int64_t expected,
                                        std::string_view rule = "completions") {
    std::int64_t seen = -1;
    for (int i = 0; i < 500; ++i) {  // 5 s: sanitizer builds are slow
      seen = remaining(user, rule);
      if (seen == expected) return ::testing::AssertionSuccess();
      std::this_thread::sleep_for(10ms);
    }
    return ::testing::AssertionFailure() << user << " has " << seen << " left, not " << expected;
  }

  RedisServer redis_;
  TestUpstream upstream_;
  std::unique_ptr<ServerProcess> server_;
  int proxy_ = 0;
  int admin_ = 0;
};

TEST_F(HttpUsage, ARequestIsChargedTheCostItsResponseReports) {
  HttpClient client(proxy_);
  auto get = [&](std::string path, Headers headers) {
    headers.emplace_back("X-User-ID", "alice");
    return client.get(std::move(path), std::move(headers));
  };
  EXPECT_EQ(get("/usage/30", {}).status, 200);
  EXPECT_TRUE(settles_to("alice", 970));
  // The request's own estimate: 500 reserved, 5 charged.
  EXPECT_EQ(get("/usage/5", {{"X-Max-Tokens", "500"}}).status, 200);
  EXPECT_TRUE(settles_to("alice", 965));

  // No cost, or one that is not an integer: the estimate (100) stays, and the log says so.
  EXPECT_EQ(get("/usage/none", {}).status, 200);
  EXPECT_TRUE(settles_to("alice", 865));
  EXPECT_EQ(get("/usage/12abc", {}).status, 200);
  EXPECT_TRUE(settles_to("alice", 765));
  const auto log = server_->log();
  EXPECT_NE(log.find("usage: a response under rule 'completions' reported no valid cost in X-Usage-Tokens: its "
                     "estimate stays charged"),
            std::string::npos)
      << log;
  const auto metrics = HttpClient(admin_).get("/metrics");
  EXPECT_NE(metrics.body.find("ratekeeper_reservations_total{rule=\"completions\",result=\"unreported\"} 2\n"),
            std::string::npos)
      << metrics.body;

  // An estimate no limit can take, or one that is not an integer: 400, nothing forwarded.
  const std::size_t forwarded = upstream_.request_count();
  const auto above = get("/usage/1", {{"X-Max-Tokens", "5000"}});
  EXPECT_EQ(above.status, 400) << above.body;
  const auto bad = get("/usage/1", {{"X-Max-Tokens", "-1"}});
  EXPECT_EQ(bad.status, 400) << bad.body;
  EXPECT_NE(bad.body.find("X-Max-Tokens must be a decimal integer"), std::string::npos) << bad.body;
  EXPECT_EQ(upstream_.request_count(), forwarded);

  // Above the estimate: charged beyond what is left; the bucket owes and denies.
  EXPECT_EQ(get("/usage/2000", {}).status, 200);
  EXPECT_TRUE(settles_to("alice", 0));
  EXPECT_EQ(get("/usage/1", {}).status, 429);
  // Another identity is not charged for it.
  EXPECT_EQ(client.get("/usage/1", {{"X-User-ID", "bob"}}).status, 200);
  EXPECT_TRUE(settles_to("bob", 999));
}

// The same over HTTP/2 (h2c with prior knowledge): streams of one connection (h2load, four
// at once) each settle their own cost, and a response over HTTP/2 is settled as one over
// HTTP/1.1 (curl).
// nginx's auth_request never reports a cost: a usage rule charges its own estimate there, not
// the one the client's estimate header names (which would let it pick its charge, 0 included).
TEST_F(HttpUsage, AnAuthSubrequestIsChargedTheRulesEstimateNotTheClients) {
  for (const char* claimed : {"0", "1"}) {
    const auto r = http_get(admin_, "/v1/auth",
                            {{"X-Original-Method", "POST"}, {"X-Original-URI", "/usage/complete"},
                             {"X-User-ID", "auth-estimate"}, {"X-Max-Tokens", claimed}});
    EXPECT_EQ(r.status, 200) << r.body;
  }
  EXPECT_EQ(remaining("auth-estimate"), 800);  // 1000 - 2 x the rule's 100
}

TEST_F(HttpUsage, EachHttp2StreamIsChargedItsOwnCost) {
  auto run = [](const std::string& cmd) {
    FILE* pipe = ::popen(cmd.c_str(), "r");
    std::string out;
    if (pipe == nullptr) return std::make_pair(-1, out);
    char buf[512];
    while (std::fgets(buf, sizeof buf, pipe) != nullptr) out += buf;
    return std::make_pair(::pclose(pipe), out);
  };
  const auto [status, out] =
      run(fmt::format("h2load -n 4 -c 1 -m 4 -H 'X-User-ID: carol' http://127.0.0.1:{}/usage/40 2>&1", proxy_));
  ASSERT_EQ(status, 0) << out;
  EXPECT_NE(out.find("status codes: 4 2xx"), std::string::npos) << out;
  EXPECT_TRUE(settles_to("carol", 840));
  const auto [curl_status, curl_out] = run(fmt::format(
      "curl -s -o /dev/null -w '%{{http_code}} %{{http_version}}' --http2-prior-knowledge -H 'X-User-ID: carol' "
      "http://127.0.0.1:{}/usage/none",
      proxy_));
  ASSERT_EQ(curl_status, 0) << curl_out;
  EXPECT_EQ(curl_out, "200 2");
  EXPECT_TRUE(settles_to("carol", 740));  // no cost reported: the estimate stays
}

// The cost in the body: a JSON body's usage.total_tokens, read as the body streams through,
// and an event stream's last event that holds it (a streamed completion), over HTTP/1.1 and
// HTTP/2; a body without it keeps the estimate.
TEST_F(HttpUsage, ARequestIsChargedTheCostItsResponseBodyReports) {
  HttpClient client(proxy_);
  const Headers dave = {{"X-User-ID", "dave"}};
  const auto json_body = client.get("/usage-json/30", dave);
  EXPECT_EQ(json_body.status, 200);
  EXPECT_NE(json_body.body.find(R"("total_tokens":30)"), std::string::npos) << json_body.body;  // passed on as it is
  EXPECT_TRUE(settles_to("dave", 970, "bodies"));
  const auto events = client.get("/usage-sse/45", dave);
  EXPECT_EQ(events.status, 200);
  EXPECT_NE(events.body.find("data: [DONE]"), std::string::npos) << events.body;
  EXPECT_TRUE(settles_to("dave", 925, "bodies"));
  EXPECT_EQ(client.get("/usage-json/x1", dave).status, 200);  // "total_tokens": x1 is no JSON
  EXPECT_TRUE(settles_to("dave", 825, "bodies"));
  EXPECT_NE(server_->log().find("reported no valid cost in usage.total_tokens"), std::string::npos) << server_->log();

  FILE* pipe = ::popen(fmt::format("h2load -n 2 -c 1 -m 2 -H 'X-User-ID: erin' http://127.0.0.1:{0}/usage-json/7 2>&1 "
                                   "&& h2load -n 1 -c 1 -H 'X-User-ID: erin' http://127.0.0.1:{0}/usage-sse/9 2>&1",
                                   proxy_)
                           .c_str(),
                       "r");
  ASSERT_NE(pipe, nullptr);
  std::string out;
  char buf[512];
  while (std::fgets(buf, sizeof buf, pipe) != nullptr) out += buf;
  ASSERT_EQ(::pclose(pipe), 0) << out;
  EXPECT_TRUE(settles_to("erin", 1000 - 7 - 7 - 9, "bodies")) << out;
}

}  // namespace
}  // namespace ratekeeper::testing
