// End to end: what the server does with hostile or broken input. Spoofed X-Forwarded-For,
// malformed decision API calls, oversized headers and bodies, unknown paths and methods,
// pipelined requests, and configuration files that must be refused at start.

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "support/http_client.hpp"
#include "support/redis_server.hpp"

namespace ratekeeper::testing {
namespace {

using json = nlohmann::json;

constexpr const char* kPerIp = R"(
rules:
  - name: api
    match: {path: /api/data}
    limits:
      - capacity: 2
        refill_rate: 0.001
)";

TEST(HttpForwardedFor, SpoofedHeaderFromUntrustedPeerIsIgnored) {
  RedisServer redis;
  auto server = serve(kPerIp, redis.url());
  HttpClient client(server->port());
  // Every request claims another client; the socket peer (127.0.0.1) is charged anyway.
  EXPECT_EQ(client.get("/api/data", {{"X-Forwarded-For", "203.0.113.1"}}).status, 200);
  EXPECT_EQ(client.get("/api/data", {{"X-Forwarded-For", "203.0.113.2"}}).status, 200);
  EXPECT_EQ(client.get("/api/data", {{"X-Forwarded-For", "203.0.113.3"}}).status, 429);
  EXPECT_EQ(client.get("/api/data", {{"X-Forwarded-For", "198.51.100.9, 203.0.113.4"}}).status,
            429);
  EXPECT_EQ(redis.command({"EXISTS", "ratelimit:{ip:127.0.0.1}:api"}), "1");
  EXPECT_EQ(redis.command({"EXISTS", "ratelimit:{ip:203.0.113.1}:api"}), "0");
}

TEST(HttpForwardedFor, TrustedProxyForwardsTheClientAddress) {
  RedisServer redis;
  auto server = serve(std::string("trusted_proxies: [127.0.0.1/32]\n") + kPerIp, redis.url());
  HttpClient client(server->port());
  const Headers one = {{"X-Forwarded-For", "203.0.113.1"}};
  const Headers two = {{"X-Forwarded-For", "203.0.113.2"}};
  EXPECT_EQ(client.get("/api/data", one).status, 200);
  EXPECT_EQ(client.get("/api/data", one).status, 200);
  EXPECT_EQ(client.get("/api/data", one).status, 429);
  EXPECT_EQ(client.get("/api/data", two).status, 200);
  // The walk goes from the right: a client cannot prepend an address to pick its bucket.
  EXPECT_EQ(client.get("/api/data", {{"X-Forwarded-For", "203.0.113.2, 203.0.113.1"}}).status, 429);
  EXPECT_EQ(redis.command({"EXISTS", "ratelimit:{ip:203.0.113.1}:api"}), "1");
  EXPECT_EQ(redis.command({"EXISTS", "ratelimit:{ip:127.0.0.1}:api"}), "0");
}

// RFC 9110 6.5.1: trailer fields are not header fields. A trailer naming another client (or
// another user, or a second Host) is not taken for the header: the client the header names is
// charged, whatever its body's trailers say.
TEST(HttpForwardedFor, TrailerFieldsAreNotHeaderFields) {
  RedisServer redis;
  auto server = serve(std::string("trusted_proxies: [127.0.0.1/32]\n") + kPerIp, redis.url());
  HttpClient client(server->port());
  int admitted = 0;
  for (int i = 0; i < 4; ++i) {
    const auto r = client.raw(fmt::format(
        "GET /api/data HTTP/1.1\r\nHost: app\r\nX-Forwarded-For: 203.0.113.1\r\n"
        "Transfer-Encoding: chunked\r\n\r\n0\r\nX-Forwarded-For: 198.51.100.{}\r\n"
        "X-User-ID: u{}\r\nHost: other\r\n\r\n",
        i, i));
    if (r.status == 200) ++admitted;
    else EXPECT_EQ(r.status, 429);
  }
  EXPECT_EQ(admitted, 2);
  EXPECT_EQ(redis.command({"EXISTS", "ratelimit:{ip:203.0.113.1}:api"}), "1");
  EXPECT_EQ(redis.command({"EXISTS", "ratelimit:{ip:198.51.100.0}:api"}), "0");
}

class HttpBadInput : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ = serve(R"(
http:
  max_header_bytes: 2048
  max_body_bytes: 1024
rules:
  - name: api
    match: {path: /api/data}
    limits:
      - capacity: 5
        refill_rate: 0.001
  - name: search
    match: {path: /api/search}
    identity: {type: header, header: X-User-ID}
    limits:
      - capacity: 5
        refill_rate: 0.001
)")
                  .release();
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  static HttpResponse check(std::string body) {
    return http_post(server_->port(), "/v1/check", std::move(body));
  }
  static ServerProcess* server_;
};

ServerProcess* HttpBadInput::server_ = nullptr;

TEST_F(HttpBadInput, MalformedJsonOnCheckIs400) {
  for (const char* body : {"{\"rule\":\"api\"", "not json", "", "[1,2]"}) {
    auto r = check(body);
    EXPECT_EQ(r.status, 400) << body;
    EXPECT_EQ(json::parse(r.body).at("error"), "Bad request") << r.body;
  }
}

TEST_F(HttpBadInput, UnknownRuleOnCheckIs400NamingIt) {
  auto r = check(R"({"rule":"nope","identity":"ip:192.0.2.1","cost":1})");
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.body.find("nope"), std::string::npos) << r.body;
}

TEST_F(HttpBadInput, BadCostOnCheckIs400) {
  for (const char* body :
       {R"({"rule":"api","identity":"ip:192.0.2.1","cost":-1})",
        R"({"rule":"api","identity":"ip:192.0.2.1","cost":1.5})",
        R"({"rule":"api","identity":"ip:192.0.2.1","cost":"1"})",
        R"({"rule":"api","identity":"ip:192.0.2.1","cost":6})", R"({"rule":"api","cost":1})"}) {
    auto r = check(body);
    EXPECT_EQ(r.status, 400) << body << " → " << r.body;
  }
}

TEST_F(HttpBadInput, CheckAnswersTheDecision) {
  auto first = check(R"({"rule":"api","identity":"user:check-1","cost":4})");
  ASSERT_EQ(first.status, 200) << first.body;
  auto j = json::parse(first.body);
  EXPECT_EQ(j.at("allowed"), true);
  EXPECT_EQ(j.at("limit"), 5);
  EXPECT_EQ(j.at("remaining"), 1);
  EXPECT_EQ(j.at("retry_after_ms"), 0);
  EXPECT_GT(j.at("reset_after_ms").get<std::int64_t>(), 0);
  EXPECT_EQ(j.at("failure_policy"), "allow");

  auto denied = check(R"({"rule":"api","identity":"user:check-1","cost":2})");
  ASSERT_EQ(denied.status, 429) << denied.body;
  j = json::parse(denied.body);
  EXPECT_EQ(j.at("allowed"), false);
  EXPECT_EQ(j.at("remaining"), 1);
  EXPECT_GT(j.at("retry_after_ms").get<std::int64_t>(), 0);
  ASSERT_TRUE(denied.header("Retry-After"));
}

TEST_F(HttpBadInput, OversizedHeadersAre431) {
  auto r = http_get(server_->port(), "/api/data", {{"X-Padding", std::string(4096, 'a')}});
  EXPECT_EQ(r.status, 431);
  // The server is fine afterwards.
  EXPECT_EQ(http_get(server_->port(), "/healthz").status, 200);
}

// A line the parser needs whole (a chunk's size line with its extensions, the trailer fields)
// that never ends is refused once it outgrows a header and a read, not read without end.
TEST_F(HttpBadInput, AChunkLineThatNeverEndsIs400) {
  for (const std::string opening : {"5;", "0\r\nX-Trailer: "}) {
    HttpClient client(server_->port());
    client.connect();
    client.send_raw("POST /v1/check HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" + opening);
    const std::string endless(64 * 1024, 'a');
    for (int i = 0; i < 64 && client.send_raw(endless) == endless.size(); ++i) {
    }
    const auto answer = client.read_until_close();
    EXPECT_TRUE(answer.starts_with("HTTP/1.1 400")) << opening << ": " << answer.substr(0, 100);
    EXPECT_EQ(http_get(server_->port(), "/healthz").status, 200);
  }
}

// nginx's auth_request takes any answer but 2xx, 401 and 403 for an outage, which a
// configuration may let through unlimited: a subrequest that cannot be read is denied (403),
// X-RateLimit-Status saying why. Other paths keep their status.
TEST_F(HttpBadInput, AnUnreadableAuthSubrequestIsDenied) {
  const auto big = http_get(server_->port(), "/v1/auth",
                            {{"X-Original-Method", "GET"}, {"X-Original-URI", "/x?" + std::string(4096, 'a')}});
  EXPECT_EQ(big.status, 403);
  EXPECT_EQ(big.header("X-RateLimit-Status"), "431");
  HttpClient client(server_->port());
  const auto bad = client.raw("GET /v1/./auth?x=1 HTTP/1.1\r\nHost: x\r\nX-Original-Method: GET\r\n"
                              "X-Original-URI: /x\r\nX-Bad: a\x7f b\r\n\r\n");
  EXPECT_EQ(bad.status, 403);
  EXPECT_EQ(bad.header("X-RateLimit-Status"), "400");
  EXPECT_EQ(http_get(server_->port(), "/api/data", {{"X-Padding", std::string(4096, 'a')}}).status, 431);
  EXPECT_EQ(http_get(server_->port(), "/healthz").status, 200);
}

TEST_F(HttpBadInput, OversizedBodyIs413) {
  auto r = check(std::string(4096, ' ') + "{}");
  EXPECT_EQ(r.status, 413);
  EXPECT_EQ(http_get(server_->port(), "/healthz").status, 200);
}

TEST_F(HttpBadInput, GarbageRequestLineIs400) {
  HttpClient client(server_->port());
  auto r = client.raw("THIS IS NOT HTTP\r\n\r\n");
  EXPECT_EQ(r.status, 400);
}

TEST_F(HttpBadInput, UnknownPathIs404AndWrongMethodIs405) {
  HttpClient client(server_->port());
  EXPECT_EQ(client.get("/nope").status, 404);
  EXPECT_EQ(client.get("/v1/check").status, 405);
  auto r = client.post("/api/data", "{}");
  EXPECT_EQ(r.status, 405);
  EXPECT_EQ(r.header("Allow"), "GET");
  EXPECT_EQ(client.post("/healthz", "").status, 405);
}

TEST_F(HttpBadInput, PipelinedRequestsAreAnsweredInOrder) {
  HttpClient client(server_->port());
  std::vector<HttpRequest> requests;
  for (int i = 0; i < 8; ++i) {
    requests.push_back({"GET", fmt::format("/api/search?q=p{}", i), {{"X-User-ID", "pipe"}}, {}});
  }
  auto responses = client.pipeline(requests);
  ASSERT_EQ(responses.size(), 8u);
  int ok = 0;
  for (int i = 0; i < 8; ++i) {
    if (responses[i].status == 200) {
      ++ok;
      EXPECT_EQ(json::parse(responses[i].body).at("query"), fmt::format("p{}", i));
    } else {
      EXPECT_EQ(responses[i].status, 429);
    }
  }
  EXPECT_EQ(ok, 5);  // the user's capacity, taken in request order
  EXPECT_EQ(responses[4].status, 200);
  EXPECT_EQ(responses[5].status, 429);
}

TEST(HttpConfig, BadConfigurationFailsNamingFileAndField) {
  const auto path = write_temp_file("bad.yaml", R"(
rules:
  - name: api
    match: {path: /api/data}
    limits:
      - capacity: -5
        refill_rate: 1
)");
  auto result = run_ratekeeper({"serve", "--config", path.string(), "--listen", "127.0.0.1:0"});
  EXPECT_NE(result.exit_code, 0);
  EXPECT_NE(result.errors.find(path.string()), std::string::npos) << result.errors;
  EXPECT_NE(result.errors.find("rules[0].limits[0].capacity"), std::string::npos) << result.errors;
  EXPECT_EQ((result.output + result.errors).find("listening on"), std::string::npos) << result.errors;
}

TEST(HttpConfig, UnknownFieldAndMissingFileFail) {
  const auto path = write_temp_file("typo.yaml", "rulez: []\n");
  auto typo = run_ratekeeper({"serve", "--config", path.string(), "--listen", "127.0.0.1:0"});
  EXPECT_NE(typo.exit_code, 0);
  EXPECT_NE(typo.errors.find("rulez"), std::string::npos) << typo.errors;

  auto missing = run_ratekeeper({"serve", "--config", "/nonexistent/ratekeeper.yaml"});
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_NE(missing.errors.find("/nonexistent/ratekeeper.yaml"), std::string::npos)
      << missing.errors;
}

TEST(HttpConfig, WithoutAStoreItUsesMemoryAndSaysSo) {
  auto server = serve(kPerIp);
  EXPECT_NE(server->log().find("memory://"), std::string::npos) << server->log();
  auto ready = http_get(server->port(), "/readyz");
  EXPECT_EQ(ready.status, 200);
  EXPECT_EQ(json::parse(ready.body).at("store"), "memory");
}

// store.max_keys reaches the memory store: with room for 3 keys, a fourth identity is refused
// by the store and answered by the rule's failure policy (deny), while the identities already
// held keep their limits.
TEST(HttpConfig, MaxKeysOfTheMemoryStoreHandsTheNextKeyToTheFailurePolicy) {
  auto server = serve(R"(
store: {url: "memory://", max_keys: 3}
rules:
  - name: api
    match: {path: /api/data}
    on_store_error: deny
    limits: [{capacity: 10, refill_rate: 1}]
)");
  HttpClient client(server->port());
  auto check = [&](const std::string& identity) {
    return client.post("/v1/check", json{{"rule", "api"}, {"identity", identity}}.dump());
  };
  for (const auto* identity : {"user:1", "user:2", "user:3"}) {
    const auto r = check(identity);
    ASSERT_EQ(r.status, 200) << identity << ": " << r.body;
    EXPECT_EQ(json::parse(r.body)["by_failure_policy"], false) << identity;
  }
  const auto refused = check("user:4");
  EXPECT_EQ(refused.status, 429) << refused.body;
  const auto body = json::parse(refused.body);
  EXPECT_EQ(body["by_failure_policy"], true) << refused.body;
  EXPECT_EQ(body["failure_policy"], "deny") << refused.body;
  const auto held = check("user:1");
  EXPECT_EQ(held.status, 200) << held.body;
  EXPECT_EQ(json::parse(held.body)["by_failure_policy"], false);
}

// The `tier` field of /v1/check picks the tier's limits, over a real connection: pro allows 3,
// the default tier (free) 1, each identity in its own bucket.
TEST(HttpCheck, TierFieldSelectsTheTiersLimits) {
  auto server = serve(R"(
tiers:
  default: free
  levels:
    free: [{capacity: 1, refill_rate: 0.001}]
    pro: [{capacity: 3, refill_rate: 0.001}]
rules:
  - name: api
    match: {path: /api/data}
    identity: {type: header, header: X-User-ID}
    tiered: true
)");
  HttpClient client(server->port());
  auto check = [&](const std::string& identity, std::optional<std::string> tier) {
    json request{{"rule", "api"}, {"identity", identity}};
    if (tier) request["tier"] = *tier;
    return client.post("/v1/check", request.dump());
  };
  for (int i = 0; i < 3; ++i) {
    const auto r = check("user:pro", "pro");
    ASSERT_EQ(r.status, 200) << i << ": " << r.body;
    EXPECT_EQ(json::parse(r.body)["limit"], 3) << r.body;
    EXPECT_EQ(json::parse(r.body)["remaining"], 2 - i) << r.body;
  }
  EXPECT_EQ(check("user:pro", "pro").status, 429);

  const auto free = check("user:free", std::nullopt);
  ASSERT_EQ(free.status, 200) << free.body;
  EXPECT_EQ(json::parse(free.body)["limit"], 1) << free.body;
  EXPECT_EQ(check("user:free", std::nullopt).status, 429);
  EXPECT_EQ(check("user:named-free", "free").status, 200);
  EXPECT_EQ(check("user:named-free", "free").status, 429);
}

}  // namespace
}  // namespace ratekeeper::testing
