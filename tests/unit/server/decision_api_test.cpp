// The decision API shaped for callers (POST /v1/check with `request` or `checks`) and nginx's
// auth_request endpoint (/v1/auth), driven through the server's routes over a memory store
// whose clock stands still.

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <nlohmann/json.hpp>
#include <chrono>
#include <future>
#include <optional>
#include <set>
#include <string>

#include "api.hpp"
#include "config.hpp"
#include "ratekeeper/core/clock.hpp"
#include "ratekeeper/http/middleware.hpp"
#include "ratekeeper/limiter/limiter.hpp"
#include "ratekeeper/store/memory_store.hpp"
#include "support/openapi.hpp"

namespace ratekeeper::server {
namespace {

using json = nlohmann::json;

constexpr std::string_view kConfig = R"(
trusted_proxies: [10.0.0.0/8]
logging: {decisions: {enabled: false}}
tiers:
  default: free
  levels:
    free: [{capacity: 2, refill_rate: 0.001}]
    pro: [{capacity: 5, refill_rate: 0.001}]
  users: {alice: pro}
rules:
  - name: data
    match: {methods: [GET], path: /api/data}
    limits: [{capacity: 2, refill_rate: 0.001}]
  - name: search
    match: {path: /api/search}
    identity: {type: user_or_ip, header: X-User-ID}
    tiered: true
    ip_limits: [{capacity: 1, refill_rate: 0.001}]
  - name: orders
    match: {path_prefix: /orders}
    identity: {type: header, header: X-User-ID}
    limits:
      - {name: burst, capacity: 3, refill_rate: 0.001}
      - {name: hourly, algorithm: fixed_window, limit: 10, window: 1h}
  - name: quota
    match: {path: /quota}
    limits: [{capacity: 4, refill_rate: 0.001}]
  - name: members
    match: {path_prefix: /members}
    identity: {type: header, header: X-User-ID}
    limits: [{capacity: 2, refill_rate: 0.001}]
    parent: {identity: {type: header, header: X-Org-ID, prefix: org}, limits: [{capacity: 3, refill_rate: 0.001}]}
  - name: inflight
    match: {path: /inflight}
    identity: {type: header, header: X-User-ID}
    limits:
      - {name: rate, capacity: 10, refill_rate: 0.001}
      - {name: slots, algorithm: concurrency, limit: 1, slot_ttl: 30s}
)";

class DecisionApiTest : public ::testing::Test {
 protected:
  DecisionApiTest()
      : config_(parse_config(kConfig)),
        store_({.max_keys = 1000, .shards = 1, .clock = &clock_}),
        limiter_(config_.limiter, store_),
        middleware_(limiter_, config_.middleware),
        api_(limiter_, middleware_) {}

  http::Response send(http::Request request, std::string peer = "192.0.2.1") {
    request.peer_address = std::move(peer);
    std::optional<http::Response> answer;
    api_.handle(std::move(request), [&answer](http::Response r) { answer = std::move(r); });
    EXPECT_TRUE(answer.has_value()) << "the memory store answers inline";
    return answer.value_or(http::Response{0, {}, {}, {}});
  }

  http::Response check(const json& body, std::string peer = "192.0.2.1") {
    return send(
        http::Request{
            "POST", "/v1/check", {{"Content-Type", "application/json"}}, body.dump(), {}, 0},
        std::move(peer));
  }

  // nginx's auth subrequest for `method uri`, sent from `peer`.
  http::Response auth(std::string method, std::string uri, http::HeaderList headers,
                      std::string peer = "10.0.0.2") {
    headers.emplace_back("X-Original-Method", std::move(method));
    headers.emplace_back("X-Original-URI", std::move(uri));
    return send(http::Request{"GET", "/v1/auth", std::move(headers), {}, {}, 0}, std::move(peer));
  }

  static std::optional<std::string> header(const http::Response& r, std::string_view name) {
    for (const auto& [n, v] : r.headers) {
      if (http::iequals(n, name)) return v;
    }
    return std::nullopt;
  }

  ManualClock clock_{1'700'000'000 * kMicrosPerSecond};
  Config config_;
  store::MemoryStore store_;
  limiter::Limiter limiter_;
  http::Middleware middleware_;
  Api api_;
};

json described(std::string method, std::string path, json headers = json::object(),
               std::optional<std::string> client_ip = "192.0.2.7") {
  json request{{"method", std::move(method)}, {"path", std::move(path)}, {"headers", headers}};
  if (client_ip) request["client_ip"] = *client_ip;
  return {{"request", std::move(request)}};
}

// /admin/keys reads and deletes counts: from a loopback peer only (the socket's: forwarding
// headers are not believed), as /admin/reload.
TEST_F(DecisionApiTest, AdminKeysAnswerLoopbackPeersOnly) {
  const auto inspect = [&](std::string peer) {
    return send(http::Request{"GET", "/admin/keys?rule=quota&identity=user:1", {{"X-Forwarded-For", "127.0.0.1"}}, {},
                              {}, 0},
                std::move(peer));
  };
  const auto far = inspect("192.0.2.1");
  EXPECT_EQ(far.status, 403);
  EXPECT_NE(far.body.find("loopback"), std::string::npos) << far.body;
  EXPECT_EQ(inspect("127.0.0.1").status, 200);
  EXPECT_EQ(inspect("::1").status, 200);
  const auto reset = send(http::Request{"DELETE", "/admin/keys?rule=quota&identity=user:1", {}, {}, {}, 0});
  EXPECT_EQ(reset.status, 403);
  EXPECT_EQ(send(http::Request{"GET", "/admin/top?rule=quota", {}, {}, {}, 0}).status, 403);
  EXPECT_EQ(send(http::Request{"GET", "/admin/top?rule=quota", {}, {}, {}, 0}, "127.0.0.1").status, 200);
}

// A tiered rule's keys are the tier's: given, or resolved as the decision API resolves it.
TEST_F(DecisionApiTest, AdminKeysOfATieredRuleAreTheTiers) {
  const auto r = send(http::Request{"GET", "/admin/keys?rule=search&identity=user:9&tier=pro", {}, {}, {}, 0},
                      "127.0.0.1");
  ASSERT_EQ(r.status, 200) << r.body;
  const auto body = json::parse(r.body);
  EXPECT_EQ(body["tier"], "pro");
  ASSERT_FALSE(body["limits"].empty());
  EXPECT_TRUE(body["limits"][0]["policy"].get<std::string>().starts_with("search.pro")) << r.body;
}

TEST_F(DecisionApiTest, RequestShapeSharesTheMiddlewaresBucketsForTheGivenClient) {
  auto first = check(described("GET", "/api/data?x=1"));
  ASSERT_EQ(first.status, 200) << first.body;
  auto body = json::parse(first.body);
  EXPECT_EQ(body.at("allowed"), true);
  EXPECT_EQ(body.at("status"), 200);
  EXPECT_EQ(body.at("headers").at("RateLimit-Policy"), R"("data";q=2;w=2000)");
  EXPECT_EQ(body.at("headers").at("RateLimit"), R"("data";r=1;t=1000)");
  ASSERT_EQ(body.at("limits").size(), 1u);
  const auto& limit = body.at("limits")[0];
  EXPECT_EQ(limit.at("rule"), "data");
  EXPECT_EQ(limit.at("identity"), "ip:192.0.2.7");
  EXPECT_EQ(limit.at("limit"), 2);
  EXPECT_EQ(limit.at("remaining"), 1);
  EXPECT_EQ(limit.at("window_ms"), 2'000'000);

  // The client's own request through the middleware takes the last token of the same bucket.
  EXPECT_EQ(send(http::Request{"GET", "/api/data", {}, {}, {}, 0}, "192.0.2.7").status, 200);
  auto denied = check(described("GET", "/api/data"));
  ASSERT_EQ(denied.status, 429) << denied.body;
  body = json::parse(denied.body);
  EXPECT_EQ(body.at("allowed"), false);
  EXPECT_EQ(body.at("status"), 429);
  EXPECT_EQ(body.at("retry_after_ms"), 1'000'000);
  EXPECT_EQ(body.at("headers").at("Retry-After"), "1000");
  EXPECT_EQ(header(denied, "Retry-After"), "1000");
  EXPECT_EQ(body.at("limits")[0].at("retry_after_ms"), 1'000'000);

  // Another client has its own bucket.
  EXPECT_EQ(check(described("GET", "/api/data", json::object(), "2001:DB8::1")).status, 200);
}

TEST_F(DecisionApiTest, RequestShapeResolvesIdentitiesAndTiersFromTheHeaders) {
  auto alice = check(described("POST", "/api/search", {{"X-User-ID", "alice"}}));
  ASSERT_EQ(alice.status, 200) << alice.body;
  auto limit = json::parse(alice.body).at("limits").at(0);
  EXPECT_EQ(limit.at("identity"), "user:alice");
  EXPECT_EQ(limit.at("tier"), "pro");
  EXPECT_EQ(limit.at("limit"), 5);

  auto anonymous = check(described("POST", "/api/search"));
  ASSERT_EQ(anonymous.status, 200) << anonymous.body;
  limit = json::parse(anonymous.body).at("limits").at(0);
  EXPECT_EQ(limit.at("identity"), "ip:192.0.2.7");
  EXPECT_EQ(limit.at("limit"), 1);
}

// The values of `request.headers` are read as an HTTP parser gives them, without the spaces and
// tabs around them: " alice " is alice, charged to her bucket, and a blank X-User-ID is an
// absent one (the IP's limits), as over the proxy.
TEST_F(DecisionApiTest, RequestShapeHeaderValuesAreTrimmedAsOverHttp) {
  auto padded = check(described("POST", "/api/search", {{"X-User-ID", " \talice  "}}));
  ASSERT_EQ(padded.status, 200) << padded.body;
  auto limit = json::parse(padded.body).at("limits").at(0);
  EXPECT_EQ(limit.at("identity"), "user:alice");
  EXPECT_EQ(limit.at("remaining"), 4);
  auto plain = check(described("POST", "/api/search", {{"X-User-ID", "alice"}}));
  EXPECT_EQ(json::parse(plain.body).at("limits").at(0).at("remaining"), 3) << plain.body;
  auto blank = check(described("POST", "/api/search", {{"X-User-ID", "  "}}));
  ASSERT_EQ(blank.status, 200) << blank.body;
  EXPECT_EQ(json::parse(blank.body).at("limits").at(0).at("identity"), "ip:192.0.2.7");
}

// What the proxy refuses is refused here too: a method with a lower-case letter, a fragment.
TEST_F(DecisionApiTest, RequestShapeRefusesALowerCaseMethodAndAFragment) {
  auto lower = check(described("get", "/api/data"));
  EXPECT_EQ(lower.status, 400) << lower.body;
  EXPECT_NE(lower.body.find("upper case"), std::string::npos) << lower.body;
  auto fragment = check(described("GET", "/api/data#x"));
  EXPECT_EQ(fragment.status, 400) << fragment.body;
  EXPECT_NE(fragment.body.find("fragment"), std::string::npos) << fragment.body;
  auto lower_auth = auth("get", "/api/data", {});
  EXPECT_EQ(lower_auth.status, 400) << lower_auth.body;
  EXPECT_NE(lower_auth.body.find("upper case"), std::string::npos) << lower_auth.body;
  auto fragment_auth = auth("GET", "/api/data#x", {});
  EXPECT_EQ(fragment_auth.status, 403) << fragment_auth.body;
  EXPECT_EQ(header(fragment_auth, "X-RateLimit-Status"), "400");
}

TEST_F(DecisionApiTest, RequestShapeMatchesMethodsAndPathsAsTheMiddleware) {
  auto unmatched = check(described("POST", "/api/data"));
  ASSERT_EQ(unmatched.status, 200) << unmatched.body;
  const auto body = json::parse(unmatched.body);
  EXPECT_EQ(body.at("allowed"), true);
  EXPECT_TRUE(body.at("headers").empty()) << body;
  EXPECT_TRUE(body.at("limits").empty()) << body;

  auto orders = check(described("DELETE", "/orders/7", {{"X-User-ID", "bob"}}));
  ASSERT_EQ(orders.status, 200) << orders.body;
  const auto limits = json::parse(orders.body).at("limits");
  ASSERT_EQ(limits.size(), 2u);
  EXPECT_EQ(limits[0].at("policy"), "orders.burst");
  EXPECT_EQ(limits[1].at("policy"), "orders.hourly");
  EXPECT_EQ(limits[1].at("algorithm"), "fixed_window");
  EXPECT_EQ(limits[1].at("window_ms"), 3'600'000);
  EXPECT_EQ(limits[1].at("remaining"), 9);
}

TEST_F(DecisionApiTest, ChecksAreConsumedAllOrNothing) {
  const json drain{{"checks", {{{"rule", "quota"}, {"identity", "user:carol"}, {"cost", 4}}}}};
  ASSERT_EQ(check(drain).status, 200);
  const json both{{"checks",
                   {{{"rule", "data"}, {"identity", "ip:192.0.2.9"}},
                    {{"rule", "quota"}, {"identity", "user:carol"}, {"cost", 1}}}}};
  auto denied = check(both);
  ASSERT_EQ(denied.status, 429) << denied.body;
  const auto limits = json::parse(denied.body).at("limits");
  ASSERT_EQ(limits.size(), 2u);
  EXPECT_EQ(limits[0].at("allowed"), true);
  EXPECT_EQ(limits[1].at("allowed"), false);

  // The admitted check of the denied pair consumed nothing: both tokens are still there.
  const json peek{{"checks", {{{"rule", "data"}, {"identity", "ip:192.0.2.9"}, {"cost", 0}}}}};
  auto after = check(peek);
  ASSERT_EQ(after.status, 200) << after.body;
  EXPECT_EQ(json::parse(after.body).at("limits")[0].at("remaining"), 2);
}

TEST_F(DecisionApiTest, ChecksTakeTheRulesCostAndTierUnlessGiven) {
  const json checks{{"checks",
                     {{{"rule", "search"}, {"identity", "user:dave"}, {"tier", "pro"}},
                      {{"rule", "quota"}, {"identity", "user:dave"}, {"cost", 3}}}}};
  auto r = check(checks);
  ASSERT_EQ(r.status, 200) << r.body;
  const auto body = json::parse(r.body);
  const auto& limits = body.at("limits");
  EXPECT_EQ(limits[0].at("tier"), "pro");
  EXPECT_EQ(limits[0].at("remaining"), 4);
  EXPECT_EQ(limits[1].at("remaining"), 1);
  EXPECT_EQ(body.at("headers").at("RateLimit"), R"("search.pro";r=4;t=1000, "quota";r=1;t=3000)");
}

TEST_F(DecisionApiTest, BadBodiesAre400sNamingTheField) {
  const std::vector<std::pair<json, std::string>> cases = {
      {{{"request", "GET /"}}, "`request` must be an object"},
      {{{"request", {{"path", "/"}}}}, "`request.method`"},
      {{{"request", {{"method", "G ET"}, {"path", "/"}}}}, "`request.method`"},
      {{{"request", {{"method", "GET"}, {"path", "api"}}}}, "`request.path`"},
      {{{"request", {{"method", "GET"}, {"path", "/"}, {"headers", {{"X-A", 1}}}}}},
       "`request.headers`"},
      {{{"request", {{"method", "GET"}, {"path", "/"}, {"client_ip", "localhost"}}}},
       "`request.client_ip`"},
      {{{"request", {{"method", "GET"}, {"path", "/"}, {"client-ip", "192.0.2.7"}}}},
       "`request.client-ip`"},
      {described("GET", "/api/search", {{"X-User-ID", std::string(300, 'u')}}), "`request`:"},
      {{{"checks", json::array()}}, "`checks`"},
      {{{"checks", {{{"rule", "data"}}}}}, "`checks[0].identity`"},
      {{{"checks", {{{"rule", "data"}, {"identity", "ip:192.0.2.7"}}, 7}}}, "`checks[1]`"},
      {{{"checks", {{{"rule", "data"}, {"identity", "ip:192.0.2.7"}, {"cost", -1}}}}},
       "`checks[0].cost`"},
      {{{"checks", {{{"rule", "data"}, {"identity", "ip:192.0.2.7"}, {"cost", 1.5}}}}},
       "`checks[0].cost`"},
      {{{"checks", {{{"rule", "data"}, {"identity", "ip:192.0.2.7"}, {"weight", 1}}}}},
       "`checks[0].weight`"},
      {{{"checks", {{{"rule", "nope"}, {"identity", "ip:192.0.2.7"}}}}}, "`checks[0]`: unknown"},
      {{{"checks",
         {{{"rule", "data"}, {"identity", "ip:192.0.2.7"}},
          {{"rule", "data"}, {"identity", "ip:192.0.2.7"}}}}},
       "`checks[1]` repeats"},
      {{{"checks", {{{"rule", "data"}, {"identity", "ip:192.0.2.7"}}}}, {"rule", "data"}},
       "give one of"},
  };
  for (const auto& [body, field] : cases) {
    auto r = check(body);
    EXPECT_EQ(r.status, 400) << body << " → " << r.body;
    const auto answer = json::parse(r.body);
    EXPECT_NE(answer.at("detail").get<std::string>().find(field), std::string::npos)
        << body << " → " << r.body;
  }
  // Nothing of the refused bodies was consumed.
  auto r = check(described("GET", "/api/data"));
  EXPECT_EQ(json::parse(r.body).at("limits")[0].at("remaining"), 1) << r.body;
}

TEST_F(DecisionApiTest, AuthAnswers200WhenAdmittedAnd403WithTheHeadersWhenDenied) {
  const http::HeaderList client = {{"X-Real-IP", "192.0.2.7"}};
  for (int i = 0; i < 2; ++i) {
    auto admitted = auth("GET", "/api/data?page=2", client);
    EXPECT_EQ(admitted.status, 200) << admitted.body;
    EXPECT_TRUE(admitted.body.empty());
    EXPECT_EQ(header(admitted, "X-RateLimit-Status"), "200");
    EXPECT_EQ(header(admitted, "RateLimit-Policy"), R"("data";q=2;w=2000)");
    EXPECT_TRUE(header(admitted, "RateLimit"));
    EXPECT_FALSE(header(admitted, "Retry-After"));
  }
  auto denied = auth("GET", "/api/data", client);
  EXPECT_EQ(denied.status, 403) << denied.body;
  EXPECT_EQ(header(denied, "X-RateLimit-Status"), "429");
  EXPECT_EQ(header(denied, "Retry-After"), "1000");
  EXPECT_EQ(header(denied, "RateLimit"), R"("data";r=0;t=1000)");
  EXPECT_EQ(json::parse(denied.body),
            json::parse(R"({"error":"Rate limit exceeded","retryAfter":1000})"));

  // The original method is what rules match: POST /api/data is not limited.
  auto other = auth("POST", "/api/data", client);
  EXPECT_EQ(other.status, 200);
  EXPECT_FALSE(header(other, "RateLimit"));
}

TEST_F(DecisionApiTest, AuthTakesXRealIpFromTrustedPeersOnly) {
  // From a trusted nginx, each X-Real-IP is its own client.
  EXPECT_EQ(auth("GET", "/api/search", {{"X-Real-IP", "192.0.2.7"}}).status, 200);
  EXPECT_EQ(auth("GET", "/api/search", {{"X-Real-IP", "192.0.2.8"}}).status, 200);
  EXPECT_EQ(auth("GET", "/api/search", {{"X-Real-IP", "192.0.2.7"}}).status, 403);
  // Without X-Real-IP the X-Forwarded-For chain says who the client is, as today.
  EXPECT_EQ(auth("GET", "/api/search", {{"X-Forwarded-For", "192.0.2.8"}}).status, 403);
  // An untrusted peer is the client, whatever it says.
  EXPECT_EQ(auth("GET", "/api/search", {{"X-Real-IP", "192.0.2.20"}}, "198.51.100.1").status, 200);
  EXPECT_EQ(auth("GET", "/api/search", {{"X-Real-IP", "192.0.2.21"}}, "198.51.100.1").status, 403);
  // Identity headers come through: a user has the tier's budget, not the IP's.
  EXPECT_EQ(auth("GET", "/api/search", {{"X-Real-IP", "192.0.2.7"}, {"X-User-ID", "alice"}}).status,
            200);
}

TEST_F(DecisionApiTest, AuthRefusesWhatIsNotARequestDescription) {
  auto no_uri =
      send(http::Request{"GET", "/v1/auth", {{"X-Original-Method", "GET"}}, {}, {}, 0}, "10.0.0.2");
  EXPECT_EQ(no_uri.status, 400);
  EXPECT_NE(no_uri.body.find("X-Original-URI"), std::string::npos) << no_uri.body;
  auto no_method = send(
      http::Request{"GET", "/v1/auth", {{"X-Original-URI", "/api/data"}}, {}, {}, 0}, "10.0.0.2");
  EXPECT_EQ(no_method.status, 400);
  EXPECT_NE(no_method.body.find("X-Original-Method"), std::string::npos) << no_method.body;

  // A request the middleware refuses (an identity too long to be a key) is a 403 saying 400.
  auto bad = auth("GET", "/api/search", {{"X-User-ID", std::string(300, 'u')}});
  EXPECT_EQ(bad.status, 403) << bad.body;
  EXPECT_EQ(header(bad, "X-RateLimit-Status"), "400");
}

// A check with `reserve` takes its cost as an estimate and answers a reservation id; POST
// /v1/settle brings it to the actual cost once: the difference given back, or charged as
// debt that later checks wait for.
TEST_F(DecisionApiTest, AReservedCheckIsSettledToTheActualCostOnce) {
  auto settle = [&](const json& body) {
    return send(http::Request{"POST", "/v1/settle", {{"Content-Type", "application/json"}}, body.dump(), {}, 0});
  };
  const auto reserved = check({{"rule", "orders"}, {"identity", "user:r"}, {"cost", 2}, {"reserve", true}});
  ASSERT_EQ(reserved.status, 200) << reserved.body;
  const auto verdict = json::parse(reserved.body);
  EXPECT_EQ(verdict.at("remaining"), 1);
  const std::string id = verdict.at("reservation");
  EXPECT_TRUE(limiter::valid_reservation_id(id)) << id;

  const json given_back{{"rule", "orders"}, {"identity", "user:r"}, {"reservation", id}, {"cost", 0}};
  const auto settled = settle(given_back);
  ASSERT_EQ(settled.status, 200) << settled.body;
  EXPECT_EQ(json::parse(settled.body), (json{{"settled", true}}));
  const auto peek = check({{"rule", "orders"}, {"identity", "user:r"}, {"cost", 0}});
  EXPECT_EQ(json::parse(peek.body).at("remaining"), 3);
  const auto again = settle(given_back);
  ASSERT_EQ(again.status, 200) << again.body;
  EXPECT_EQ(json::parse(again.body), (json{{"settled", false}}));
  EXPECT_EQ(json::parse(check({{"rule", "orders"}, {"identity", "user:r"}, {"cost", 0}}).body).at("remaining"), 3);

  // Above the estimate: the burst bucket (3) owes two tokens.
  const auto second = json::parse(
      check({{"rule", "orders"}, {"identity", "user:r"}, {"cost", 1}, {"reserve", true}, {"reservation_ttl_ms", 5000}})
          .body);
  const auto charged =
      settle({{"rule", "orders"}, {"identity", "user:r"}, {"reservation", second.at("reservation")}, {"cost", 5}});
  EXPECT_EQ(json::parse(charged.body), (json{{"settled", true}}));
  const auto owes = check({{"rule", "orders"}, {"identity", "user:r"}});
  EXPECT_EQ(owes.status, 429) << owes.body;

  // A denied reservation answers no id; a check without `reserve` neither.
  const auto denied = check({{"rule", "orders"}, {"identity", "user:r"}, {"reserve", true}});
  EXPECT_EQ(denied.status, 429);
  EXPECT_FALSE(json::parse(denied.body).contains("reservation"));
  EXPECT_FALSE(json::parse(check({{"rule", "quota"}, {"identity", "user:r"}}).body).contains("reservation"));
}

// A rule with a concurrency limit is checked with `reserve`: the reservation holds the slot
// until POST /v1/release (or /v1/settle) gives it back; POST /v1/renew is its heartbeat.
TEST_F(DecisionApiTest, AConcurrencySlotIsHeldUntilReleased) {
  auto post = [&](const char* path, const json& body) {
    return send(http::Request{"POST", path, {{"Content-Type", "application/json"}}, body.dump(), {}, 0});
  };
  const json who{{"rule", "inflight"}, {"identity", "user:c"}};
  auto with = [&](json extra) {
    json body = who;
    body.update(extra);
    return body;
  };
  const auto unheld = check(who);
  EXPECT_EQ(unheld.status, 400) << unheld.body;
  EXPECT_NE(unheld.body.find("reserve"), std::string::npos) << unheld.body;

  const auto first = check(with({{"reserve", true}}));
  ASSERT_EQ(first.status, 200) << first.body;
  const std::string id = json::parse(first.body).at("reservation");
  const auto busy = check(with({{"reserve", true}}));
  EXPECT_EQ(busy.status, 429) << busy.body;
  EXPECT_FALSE(json::parse(busy.body).contains("reservation"));

  EXPECT_EQ(json::parse(post("/v1/renew", with({{"reservation", id}})).body), (json{{"renewed", true}}));
  EXPECT_EQ(json::parse(post("/v1/renew", with({{"reservation", id}, {"reservation_ttl_ms", 60000}})).body),
            (json{{"renewed", true}}));
  EXPECT_EQ(json::parse(post("/v1/release", with({{"reservation", id}})).body), (json{{"released", true}}));
  EXPECT_EQ(json::parse(post("/v1/release", with({{"reservation", id}})).body), (json{{"released", false}}));
  EXPECT_EQ(json::parse(post("/v1/renew", with({{"reservation", id}})).body), (json{{"renewed", false}}));

  // Settling gives the slot back too.
  const auto second = check(with({{"reserve", true}}));
  ASSERT_EQ(second.status, 200) << second.body;
  const auto settled = post("/v1/settle", with({{"reservation", json::parse(second.body).at("reservation")}, {"cost", 1}}));
  EXPECT_EQ(json::parse(settled.body), (json{{"settled", true}}));
  EXPECT_EQ(check(with({{"reserve", true}})).status, 200);

  EXPECT_EQ(post("/v1/release", who).status, 400);
  EXPECT_EQ(post("/v1/release", with({{"reservation", id}, {"cost", 1}})).status, 400);
  EXPECT_EQ(post("/v1/renew", with({{"reservation", id}, {"reservation_ttl_ms", 0}})).status, 400);
  EXPECT_EQ(send(http::Request{"GET", "/v1/release", {}, {}, {}, 0}).status, 405);
}

// nginx's auth_request never says when the request it asked about ends: a rule with a
// concurrency limit is a 500 that takes no slot, counted as an error, not as admitted.
TEST_F(DecisionApiTest, AuthRequestRefusesAConcurrencyRuleBeforeTakingASlot) {
  const std::size_t inflight = limiter_.rule_index(limiter_.find_rule("inflight"));
  for (int i = 0; i < 2; ++i) {
    const auto r = auth("GET", "/inflight", {{"X-User-ID", "ann"}});
    EXPECT_EQ(r.status, 500);
    EXPECT_NE(r.body.find("concurrency"), std::string::npos) << r.body;
  }
  EXPECT_EQ(limiter_.metrics().reservations(inflight, limiter::Reservation::reserved), 0u);
  EXPECT_EQ(middleware_.metrics().requests(http::RequestOutcome::error), 2u);
  EXPECT_EQ(middleware_.metrics().requests(http::RequestOutcome::admitted), 0u);
  // The same request through the decision API's explicit form still holds its slot.
  const auto held = send(http::Request{"POST", "/v1/check", {{"Content-Type", "application/json"}},
                                       json{{"rule", "inflight"}, {"identity", "user:ann"}, {"reserve", true}}.dump(),
                                       {}, 0});
  EXPECT_EQ(held.status, 200) << held.body;
  EXPECT_EQ(limiter_.metrics().reservations(inflight, limiter::Reservation::reserved), 1u);
}

// The demo routes answer at once: a reservation (a slot) made for the request is given back
// as soon as it is answered, on the memory store too, whose answers come inline.
TEST(DemoRoutes, ASlotHeldForADemoRouteIsGivenBackWhenItAnswers) {
  ManualClock clock{1'700'000'000 * kMicrosPerSecond};
  const Config config = parse_config(R"(
logging: {decisions: {enabled: false}}
rules:
  - name: data
    match: {methods: [GET], path: /api/data}
    limits:
      - {name: rate, capacity: 2, refill_rate: 0.001}
      - {name: slots, algorithm: concurrency, limit: 1}
)");
  store::MemoryStore store({.max_keys = 1000, .shards = 1, .clock = &clock});
  limiter::Limiter limiter(config.limiter, store);
  http::Middleware middleware(limiter, config.middleware);
  Api api(limiter, middleware);
  auto get = [&] {
    std::optional<http::Response> answer;
    api.handle(http::Request{"GET", "/api/data", {}, {}, "192.0.2.7", 0},
               [&answer](http::Response r) { answer = std::move(r); });
    return answer ? answer->status : 0;
  };
  EXPECT_EQ(get(), 200);
  EXPECT_EQ(get(), 200);  // the slot of the first is back
  EXPECT_EQ(get(), 429);  // the rate limit
  EXPECT_EQ(limiter.metrics().reservations(0, limiter::Reservation::released), 2u);
}

// A rule with a parent: the decision API names the parent's identity (`parent`), a described
// request resolves it from its header; the parent's limit is shared by its children.
TEST_F(DecisionApiTest, AParentIsNamedOrResolvedAndSharedByItsChildren) {
  const json alice{{"rule", "members"}, {"identity", "user:alice"}, {"parent", "org:acme"}};
  const auto first = check(alice);
  ASSERT_EQ(first.status, 200) << first.body;
  EXPECT_EQ(json::parse(first.body).at("remaining"), 1);
  const auto bob = check(described("GET", "/members/x", {{"X-User-ID", "bob"}, {"X-Org-ID", "acme"}}));
  ASSERT_EQ(bob.status, 200) << bob.body;
  const auto limits = json::parse(bob.body).at("limits");
  ASSERT_EQ(limits.size(), 2u);
  EXPECT_EQ(limits[1].at("policy"), "members.parent");
  EXPECT_EQ(limits[1].at("remaining"), 1);  // alice's and bob's
  const auto listed = check({{"checks", json::array({json{{"rule", "members"}, {"identity", "user:carol"},
                                                          {"parent", "org:acme"}}})}});
  EXPECT_EQ(listed.status, 200) << listed.body;
  const auto full = check({{"rule", "members"}, {"identity", "user:dave"}, {"parent", "org:acme"}});
  EXPECT_EQ(full.status, 429) << full.body;  // the organisation's 3 are taken
  EXPECT_EQ(check({{"rule", "members"}, {"identity", "user:dave"}, {"parent", "org:other"}}).status, 200);

  const auto missing = check({{"rule", "members"}, {"identity", "user:alice"}});
  EXPECT_EQ(missing.status, 400);
  EXPECT_NE(missing.body.find("has a parent"), std::string::npos) << missing.body;
  EXPECT_EQ(check({{"rule", "quota"}, {"identity", "user:alice"}, {"parent", "org:acme"}}).status, 400);
  EXPECT_EQ(check({{"rule", "members"}, {"identity", "user:alice"}, {"parent", 7}}).status, 400);

  // /admin/keys: the parent names the keys; a reset leaves the parent's.
  auto admin = [&](const char* method, const std::string& query) {
    return send(http::Request{method, "/admin/keys?" + query, {}, {}, {}, 0}, "127.0.0.1");
  };
  EXPECT_EQ(admin("GET", "rule=members&identity=user:alice").status, 400);
  const auto keys = admin("GET", "rule=members&identity=user:alice&parent=org:acme");
  ASSERT_EQ(keys.status, 200) << keys.body;
  EXPECT_NE(keys.body.find("ratelimit:{org:acme}:members:parent"), std::string::npos) << keys.body;
  const auto reset = admin("DELETE", "rule=members&identity=user:alice&parent=org:acme");
  ASSERT_EQ(reset.status, 200) << reset.body;
  EXPECT_NE(reset.body.find("ratelimit:{org:acme}:members:user:alice"), std::string::npos) << reset.body;
  EXPECT_EQ(reset.body.find(":parent"), std::string::npos) << reset.body;
  EXPECT_EQ(check({{"rule", "members"}, {"identity", "user:alice"}, {"parent", "org:acme"}}).status, 429);
}

TEST_F(DecisionApiTest, BadReservationsAndSettlementsAre400sNamingTheField) {
  const std::string id(32, 'a');
  const std::vector<std::pair<json, std::string>> checks = {
      {{{"rule", "quota"}, {"identity", "user:x"}, {"reserve", "yes"}}, "`reserve`"},
      {{{"rule", "quota"}, {"identity", "user:x"}, {"reservation_ttl_ms", 10}}, "`reservation_ttl_ms` needs"},
      {{{"rule", "quota"}, {"identity", "user:x"}, {"reserve", true}, {"reservation_ttl_ms", 0}}, "`reservation_ttl_ms`"},
      {{{"rule", "quota"}, {"identity", "user:x"}, {"reserve", true}, {"reservation_ttl_ms", 86'400'001}},
       "`reservation_ttl_ms`"},
  };
  for (const auto& [body, reason] : checks) {
    const auto r = check(body);
    EXPECT_EQ(r.status, 400) << body.dump();
    EXPECT_NE(r.body.find(reason), std::string::npos) << r.body;
  }
  const std::vector<std::pair<json, std::string>> settlements = {
      {{{"rule", "quota"}, {"identity", "user:x"}, {"reservation", id}}, "`cost`"},
      {{{"rule", "quota"}, {"identity", "user:x"}, {"reservation", id}, {"cost", -1}}, "`cost`"},
      {{{"rule", "quota"}, {"identity", "user:x"}, {"reservation", "A1"}, {"cost", 1}}, "32 lowercase hex"},
      {{{"rule", "quota"}, {"identity", "user:x"}, {"cost", 1}}, "`reservation`"},
      {{{"rule", "quota"}, {"reservation", id}, {"cost", 1}}, "`identity`"},
      {{{"rule", "nope"}, {"identity", "user:x"}, {"reservation", id}, {"cost", 1}}, "unknown rule"},
      {{{"rule", "quota"}, {"identity", "user:x"}, {"reservation", id}, {"cost", 1}, {"extra", 1}}, "`extra`"},
      {{{"rule", "quota"}, {"identity", "user:x"}, {"reservation", id}, {"cost", std::int64_t{1} << 42}}, "2^41"},
      {json::array(), "object"},
  };
  for (const auto& [body, reason] : settlements) {
    const auto r = send(http::Request{"POST", "/v1/settle", {}, body.dump(), {}, 0});
    EXPECT_EQ(r.status, 400) << body.dump();
    EXPECT_NE(r.body.find(reason), std::string::npos) << r.body;
  }
  EXPECT_EQ(send(http::Request{"GET", "/v1/settle", {}, {}, {}, 0}).status, 405);
}

// docs/openapi.yaml lists the fields of the answers: every required field is there, and
// nothing else.
TEST_F(DecisionApiTest, AnswersHaveTheFieldsTheOpenApiFileDescribes) {
  const auto required = [](const char* schema) { return ratekeeper::testing::openapi_required(schema); };
  const auto keys = [](const json& object) { return ratekeeper::testing::json_keys(object); };
  const auto decision =
      json::parse(check(described("DELETE", "/orders/1", {{"X-User-ID", "e"}})).body);
  EXPECT_EQ(keys(decision), required("Decision"));
  EXPECT_EQ(keys(decision.at("limits").at(0)), required("Limit"));
  const auto verdict = json::parse(check({{"rule", "quota"}, {"identity", "user:e"}}).body);
  EXPECT_EQ(keys(verdict), required("Verdict"));
  auto reserved = json::parse(check({{"rule", "quota"}, {"identity", "user:e"}, {"reserve", true}}).body);
  ASSERT_TRUE(reserved.contains("reservation"));
  const std::string id = reserved.at("reservation");
  reserved.erase("reservation");  // optional: only when reserved
  EXPECT_EQ(keys(reserved), required("Verdict"));
  EXPECT_TRUE(ratekeeper::testing::openapi_schemas()["Verdict"]["properties"]["reservation"]);
  const auto settled = json::parse(
      send(http::Request{"POST", "/v1/settle", {},
                         json{{"rule", "quota"}, {"identity", "user:e"}, {"reservation", id}, {"cost", 1}}.dump(), {}, 0})
          .body);
  EXPECT_EQ(keys(settled), required("Settlement"));
  EXPECT_EQ(keys(json::parse(check({{"checks", 1}}).body)), required("BadRequest"));
  const auto admin = [&](std::string method) {
    return json::parse(
        send(http::Request{std::move(method), "/admin/keys?rule=orders&identity=user:e", {}, {}, {}, 0}, "127.0.0.1")
            .body);
  };
  const auto inspection = admin("GET");
  EXPECT_EQ(keys(inspection), required("KeysInspection"));
  EXPECT_EQ(keys(inspection.at("limits").at(0)), required("KeyState"));
  EXPECT_EQ(keys(admin("DELETE")), required("KeysReset"));
  for (int i = 0; i < 5; ++i) check({{"rule", "quota"}, {"identity", "user:e"}});
  const auto top =
      json::parse(send(http::Request{"GET", "/admin/top?rule=quota", {}, {}, {}, 0}, "127.0.0.1").body);
  EXPECT_EQ(keys(top), required("TopDenied"));
  ASSERT_FALSE(top.at("identities").empty());
  EXPECT_EQ(keys(top.at("identities").at(0)), required("DeniedIdentity"));
  EXPECT_EQ(keys(json::parse(send(http::Request{"GET", "/admin/keys?rule=orders", {}, {}, {}, 0}, "127.0.0.1").body)),
            required("BadRequest"));
}

// A rule with on_limit: delay, decided by the routes over a memory store whose clock stands
// still: every admission after the first must wait for its place (5 per second: 200 ms).
class HeldAnswerTest : public ::testing::Test {
 protected:
  HeldAnswerTest()
      : config_(parse_config(R"(
logging: {decisions: {enabled: false}}
rules:
  - name: paced
    match: {path: /paced}
    on_limit: delay
    max_delay: 500ms
    limits: [{capacity: 1, refill_rate: 5}]
)")),
        store_({.max_keys = 100, .shards = 1, .clock = &clock_}),
        limiter_(config_.limiter, store_),
        middleware_(limiter_, config_.middleware) {}

  struct Answer {
    http::Response response;
    std::chrono::steady_clock::duration took;
  };

  // POST /v1/check for GET /paced; waits for the answer, inline or held.
  static Answer ask(Api& api) {
    std::promise<http::Response> promise;
    auto future = promise.get_future();
    const auto start = std::chrono::steady_clock::now();
    const json body{{"request", {{"method", "GET"}, {"path", "/paced"}}}};
    api.handle(http::Request{"POST", "/v1/check", {{"Content-Type", "application/json"}},
                             body.dump(), "192.0.2.1", 0},
               [&promise](http::Response r) { promise.set_value(std::move(r)); });
    EXPECT_EQ(future.wait_for(std::chrono::seconds(10)), std::future_status::ready);
    return {future.get(), std::chrono::steady_clock::now() - start};
  }

  ManualClock clock_{1'700'000'000 * kMicrosPerSecond};
  Config config_;
  store::MemoryStore store_;
  limiter::Limiter limiter_;
  http::Middleware middleware_;
};

TEST_F(HeldAnswerTest, AnAdmissionThatMustWaitIsAnsweredWhenItsTimeComes) {
  Api api(limiter_, middleware_);
  const auto first = ask(api);
  EXPECT_EQ(first.response.status, 200);
  EXPECT_EQ(json::parse(first.response.body)["delay_ms"], 0);

  // Its place is 200 ms ahead: the answer is held that long, and says so.
  const auto second = ask(api);
  EXPECT_EQ(second.response.status, 200);
  EXPECT_EQ(json::parse(second.response.body)["delay_ms"], 200);
  EXPECT_GE(second.took, std::chrono::milliseconds(190));

  const auto third = ask(api);
  EXPECT_EQ(json::parse(third.response.body)["delay_ms"], 400);
  EXPECT_GE(third.took, std::chrono::milliseconds(390));

  // 600 ms ahead is beyond max_delay: denied at once, nothing reserved.
  const auto fourth = ask(api);
  EXPECT_EQ(fourth.response.status, 429);
  EXPECT_EQ(json::parse(fourth.response.body)["delay_ms"], 0);
}

TEST_F(HeldAnswerTest, WithoutTheDemoRoutesOnlyTheOwnEndpointsAnswer) {
  ApiOptions options;
  options.demo_routes = false;
  Api admin(limiter_, middleware_, options);
  std::optional<http::Response> answer;
  admin.handle(http::Request{"GET", "/api/data", {}, {}, "192.0.2.1", 0},
               [&answer](http::Response r) { answer = std::move(r); });
  ASSERT_TRUE(answer.has_value());
  EXPECT_EQ(answer->status, 404);
  answer.reset();
  admin.handle(http::Request{"GET", "/healthz", {}, {}, "192.0.2.1", 0},
               [&answer](http::Response r) { answer = std::move(r); });
  ASSERT_TRUE(answer.has_value());
  EXPECT_EQ(answer->status, 200);
  EXPECT_EQ(ask(admin).response.status, 200);  // /v1/check
}

}  // namespace
}  // namespace ratekeeper::server
