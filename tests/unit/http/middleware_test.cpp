// The HTTP middleware without sockets: rule matching, identities (user → IP fallback, proxies),
// tiers, the 429 answer and the rate limit headers, over a MemoryStore and a manual clock.

#include "ratekeeper/http/middleware.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <nlohmann/json.hpp>
#include <thread>

#include "config.hpp"
#include "ratekeeper/store/memory_store.hpp"

namespace ratekeeper::http {
namespace {

using server::Config;
using server::load_config;
using server::parse_config;

constexpr Micros kStart = 1'700'000'000LL * kMicrosPerSecond;

const char* kYaml = R"(
trusted_proxies: [10.0.0.0/8, "2001:db8:ffff::/48"]
headers: {draft: true, legacy: true}
logging: {decisions: {enabled: false}}
tiers:
  header: X-User-Tier
  trust_header: true
  users: {alice: pro}
  levels:
    free: [{capacity: 60, refill_rate: 1}]
    pro: [{capacity: 600, refill_rate: 10}]
rules:
  - name: api
    match: {methods: [GET], path: /api/data}
    limits: [{algorithm: token_bucket, capacity: 100, refill_rate: 10}]
  - name: profile
    match: {path: /api/profile}
    identity: {type: header, header: X-User-ID, default: anonymous}
    limits: [{capacity: 5, refill_rate: 1}]
  - name: account
    match: {path_prefix: /account/}
    identity: {type: user_or_ip, header: X-User-ID}
    limits: [{capacity: 5, refill_rate: 1}]
    ip_limits: [{capacity: 2, refill_rate: 1}]
  - name: search
    match: {path: /api/search}
    identity: {type: header, header: X-User-ID, default: anonymous}
    tiered: true
  - name: slow
    match: {path: /slow}
    limits: [{capacity: 1, rate: 1/2500ms}]
  - name: keyed
    match: {path: /keyed}
    identity: {type: api_key, header: X-API-Key}
    limits: [{capacity: 3, refill_rate: 1}]
)";

struct Request {
  std::string method = "GET";
  std::string path = "/api/data";
  std::string peer = "192.0.2.7";
  std::vector<std::pair<std::string, std::string>> headers;

  http::Request view() const {
    http::Request v;
    v.method = method;
    v.target = path;
    v.peer_address = peer;
    v.headers.assign(headers.begin(), headers.end());
    return v;
  }
};

std::string header(const MiddlewareResult& r, std::string_view name) {
  for (const auto& [n, v] : r.headers) {
    if (iequals(n, name)) return v;
  }
  return "<absent>";
}

class MiddlewareTest : public ::testing::Test {
 protected:
  ManualClock clock{kStart};
  store::MemoryStore store{
      store::MemoryStoreOptions{.max_keys = 10'000, .shards = 4, .clock = &clock}};
  Config config = parse_config(kYaml, "middleware_test.yaml");
  limiter::Limiter limiter{config.limiter, store};
  Middleware middleware{limiter, config.middleware};

  MiddlewareResult send(const Request& r) { return middleware.handle_sync(r.view()); }

  std::string identity(const Request& r) {
    auto apps = middleware.applied_rules(r.view());
    if (!apps) return "<error: " + apps.error().message + ">";
    if (apps->empty()) return "<none>";
    return apps->front().identity;
  }
};

TEST_F(MiddlewareTest, UnmatchedRequestIsAdmittedWithoutHeaders) {
  Request r;
  r.path = "/other";
  auto res = send(r);
  EXPECT_TRUE(res.admitted);
  EXPECT_EQ(res.status, 200);
  EXPECT_TRUE(res.headers.empty());
  r.path = "/api/data";
  r.method = "POST";  // the api rule is GET only
  EXPECT_TRUE(send(r).headers.empty());
}

TEST_F(MiddlewareTest, AdmittedResponseCarriesDraftAndLegacyHeaders) {
  auto res = send(Request{});
  EXPECT_TRUE(res.admitted);
  EXPECT_EQ(res.status, 200);
  EXPECT_TRUE(res.body.empty());
  EXPECT_EQ(header(res, "RateLimit-Policy"), "\"api\";q=100;w=10");
  EXPECT_EQ(header(res, "RateLimit"), "\"api\";r=99;t=1");
  EXPECT_EQ(header(res, "X-RateLimit-Limit"), "100");
  EXPECT_EQ(header(res, "X-RateLimit-Remaining"), "99");
  EXPECT_EQ(header(res, "X-RateLimit-Reset"), "1");
  EXPECT_EQ(header(res, "Retry-After"), "<absent>");
}

TEST_F(MiddlewareTest, LegacyHeadersOnlyWhenSwitchedOn) {
  auto c = parse_config(kYaml, "x.yaml");
  c.middleware.headers.legacy = false;
  Middleware m(limiter, c.middleware);
  auto res = m.handle_sync(Request{}.view());
  EXPECT_EQ(header(res, "X-RateLimit-Limit"), "<absent>");
  EXPECT_NE(header(res, "RateLimit"), "<absent>");
}

TEST_F(MiddlewareTest, DenialIs429WithExactBodyAndRetryAfterRoundedUp) {
  Request r;
  r.path = "/slow";  // capacity 1, one token every 2.5 s
  EXPECT_TRUE(send(r).admitted);
  auto denied = send(r);
  EXPECT_FALSE(denied.admitted);
  EXPECT_EQ(denied.status, 429);
  EXPECT_EQ(denied.body, R"({"error":"Rate limit exceeded","retryAfter":3})");
  EXPECT_EQ(header(denied, "Retry-After"), "3");
  EXPECT_EQ(denied.content_type, "application/json");
  EXPECT_EQ(header(denied, "RateLimit"), "\"slow\";r=0;t=3");

  clock.advance(1200 * kMicrosPerMilli);  // 1.3 s left
  auto later = send(r);
  EXPECT_EQ(later.body, R"({"error":"Rate limit exceeded","retryAfter":2})");
  EXPECT_EQ(header(later, "Retry-After"), "2");

  clock.advance(1299 * kMicrosPerMilli);  // 1 ms left: still a whole second, never 0
  EXPECT_EQ(header(send(r), "Retry-After"), "1");
  clock.advance(1 * kMicrosPerMilli);
  EXPECT_TRUE(send(r).admitted);
}

// A delay rule: admitted requests over the limit carry the wait before they are passed on;
// the headers describe the bucket after the reservation, without Retry-After; beyond
// max_delay, the 429 of a reject rule.
TEST_F(MiddlewareTest, DelayRuleAdmitsWithTheWaitInTheResult) {
  const auto c = parse_config(R"(
logging: {decisions: {enabled: false}}
rules:
  - name: queued
    match: {path: /queued}
    limits: [{capacity: 2, rate: 1/500ms}]
    on_limit: delay
    max_delay: 1s
)",
                              "delay.yaml");
  limiter::Limiter l(c.limiter, store);
  Middleware m(l, c.middleware);
  Request r;
  r.path = "/queued";
  for (int i = 0; i < 2; ++i) {
    auto res = m.handle_sync(r.view());
    EXPECT_TRUE(res.admitted);
    EXPECT_EQ(res.delay, 0);
  }
  for (Micros expected : {500 * kMicrosPerMilli, 1000 * kMicrosPerMilli}) {
    auto res = m.handle_sync(r.view());
    EXPECT_TRUE(res.admitted);
    EXPECT_EQ(res.status, 200);
    EXPECT_EQ(res.delay, expected);
    EXPECT_TRUE(res.body.empty());
    EXPECT_EQ(header(res, "Retry-After"), "<absent>");
    // Nothing left; full again once the reservations have refilled: in 1.5 s, then 2 s.
    EXPECT_EQ(header(res, "RateLimit"), "\"queued\";r=0;t=2");
  }
  auto denied = m.handle_sync(r.view());
  EXPECT_FALSE(denied.admitted);
  EXPECT_EQ(denied.status, 429);
  EXPECT_EQ(denied.delay, 0);
  EXPECT_EQ(header(denied, "Retry-After"), "2");  // 1.5 s until it would pass at once
}

TEST_F(MiddlewareTest, PerIpLimitMatchesTheSeedBucket) {
  int admitted = 0;
  for (int i = 0; i < 120; ++i) admitted += send(Request{}).admitted ? 1 : 0;
  EXPECT_EQ(admitted, 100);
  Request other;
  other.peer = "192.0.2.8";
  EXPECT_TRUE(send(other).admitted);  // another client has its own bucket
  clock.advance(kMicrosPerSecond);
  admitted = 0;
  for (int i = 0; i < 20; ++i) admitted += send(Request{}).admitted ? 1 : 0;
  EXPECT_EQ(admitted, 10);  // 10 tokens per second
}

TEST_F(MiddlewareTest, HeaderIdentityUsesDefaultWhenAbsent) {
  Request r;
  r.path = "/api/profile";
  EXPECT_EQ(identity(r), "user:anonymous");
  r.headers = {{"x-user-id", "123"}};  // header names are case-insensitive
  EXPECT_EQ(identity(r), "user:123");
}

TEST_F(MiddlewareTest, UserIdentityFallsBackToIpWithItsOwnLimits) {
  Request user;
  user.path = "/account/settings";
  user.headers = {{"X-User-ID", "123"}};
  EXPECT_EQ(identity(user), "user:123");
  Request anon;
  anon.path = "/account/settings";
  EXPECT_EQ(identity(anon), "ip:192.0.2.7");

  int user_ok = 0, anon_ok = 0;
  for (int i = 0; i < 8; ++i) {
    user_ok += send(user).admitted ? 1 : 0;
    anon_ok += send(anon).admitted ? 1 : 0;
  }
  EXPECT_EQ(user_ok, 5);
  EXPECT_EQ(anon_ok, 2);
}

TEST_F(MiddlewareTest, WithoutTrustedProxiesTheClientIsThePeerInCanonicalForm) {
  MiddlewareOptions options = config.middleware;
  options.trusted_proxies = {};
  Middleware direct{limiter, options};
  auto identity_of = [&](std::string peer) {
    Request r;
    r.peer = std::move(peer);
    r.headers = {{"X-Forwarded-For", "198.51.100.1"}};
    auto apps = direct.applied_rules(r.view());
    return apps && !apps->empty() ? apps->front().identity : "<error>";
  };
  EXPECT_EQ(identity_of("192.0.2.7"), "ip:192.0.2.7");
  EXPECT_EQ(identity_of("10.1.2.3"), "ip:10.1.2.3");  // not trusted here
  EXPECT_EQ(identity_of("255.255.255.0"), "ip:255.255.255.0");
  EXPECT_EQ(identity_of("::ffff:192.0.2.7"), "ip:192.0.2.7");
  EXPECT_EQ(identity_of("2001:DB8:0::42"), "ip:2001:db8::/64");  // its /64 (ipv6_prefix)
  EXPECT_EQ(identity_of("192.0.2.7:8080"), "ip:192.0.2.7");
  EXPECT_EQ(identity_of("not an address"), "<error>");
}

TEST_F(MiddlewareTest, ForwardedForHonouredOnlyFromTrustedProxies) {
  Request direct;
  direct.headers = {{"X-Forwarded-For", "198.51.100.1"}};
  EXPECT_EQ(identity(direct), "ip:192.0.2.7");  // an untrusted peer cannot pick its IP

  Request proxied = direct;
  proxied.peer = "10.1.2.3";
  EXPECT_EQ(identity(proxied), "ip:198.51.100.1");

  Request spoofed;
  spoofed.peer = "10.1.2.3";
  spoofed.headers = {{"X-Forwarded-For", "1.1.1.1, 10.0.0.1"}, {"x-forwarded-for", "203.0.113.5"}};
  EXPECT_EQ(identity(spoofed), "ip:203.0.113.5");  // every header line, walked from the right

  Request v6;
  v6.peer = "2001:db8:ffff::10";
  v6.headers = {{"X-Forwarded-For", "2001:DB8:0:7::0:42"}};
  EXPECT_EQ(identity(v6), "ip:2001:db8:0:7::/64");

  Request mapped;
  mapped.peer = "::ffff:192.0.2.7";
  EXPECT_EQ(identity(mapped), "ip:192.0.2.7");
}

// A host is given a whole /64: each request from another address of it is the same client.
// ipv6_prefix sets the network's bits (128: the address).
TEST_F(MiddlewareTest, AnIpv6ClientIsItsNetworkNotEachAddressOfIt) {
  Request r;
  r.path = "/slow";  // capacity 1
  r.peer = "2001:db8:1:2::1";
  EXPECT_TRUE(send(r).admitted);
  for (const char* peer : {"2001:db8:1:2::2", "2001:db8:1:2:ffff:ffff:ffff:ffff", "[2001:db8:1:2:a::]:443"}) {
    r.peer = peer;
    EXPECT_EQ(send(r).status, 429) << peer;
  }
  r.peer = "2001:db8:1:3::1";  // the next /64: another client
  EXPECT_TRUE(send(r).admitted);

  for (const auto& [prefix, identity] : std::vector<std::pair<int, std::string>>{
           {128, "ip:2001:db8:1:2:ab:cd:ef:12"}, {56, "ip:2001:db8:1::/56"}, {48, "ip:2001:db8:1::/48"},
           {33, "ip:2001:db8::/33"}}) {
    MiddlewareOptions options = config.middleware;
    options.ipv6_prefix = prefix;
    Middleware m{limiter, options};
    Request one;
    one.peer = "2001:db8:1:2:ab:cd:ef:12";
    const auto apps = m.applied_rules(one.view());
    ASSERT_TRUE(apps && !apps->empty());
    EXPECT_EQ(apps->front().identity, identity) << prefix;
  }
  EXPECT_EQ(parse_config("ipv6_prefix: 128\n", "t.yaml").middleware.ipv6_prefix, 128);
  try {
    parse_config("ipv6_prefix: 16\n", "t.yaml");
    ADD_FAILURE() << "accepted";
  } catch (const server::ConfigError& e) {
    EXPECT_EQ(e.field(), "ipv6_prefix");
  }
}

TEST_F(MiddlewareTest, SpoofedForwardedForDoesNotEscapeTheLimit) {
  Request r;
  r.path = "/slow";
  r.peer = "10.0.0.1";
  r.headers = {{"X-Forwarded-For", "1.1.1.1, 203.0.113.5"}};
  EXPECT_TRUE(send(r).admitted);
  r.headers = {{"X-Forwarded-For", "9.9.9.9, 203.0.113.5"}};  // new fake prefix, same real client
  EXPECT_EQ(send(r).status, 429);
}

TEST_F(MiddlewareTest, TierFromTrustedHeaderOrUserTableElseDefault) {
  auto limit_for = [&](Request r) {
    r.path = "/api/search";
    auto res = send(r);
    return header(res, "RateLimit-Policy");
  };
  Request free_user;
  free_user.headers = {{"X-User-ID", "bob"}};
  EXPECT_EQ(limit_for(free_user), "\"search.free\";q=60;w=60");
  Request alice;
  alice.headers = {{"X-User-ID", "alice"}};
  EXPECT_EQ(limit_for(alice), "\"search.pro\";q=600;w=60");  // no tier header: the users table
  alice.headers.emplace_back("X-User-Tier", "free");
  EXPECT_EQ(limit_for(alice), "\"search.free\";q=60;w=60");  // the trusted header decides
  free_user.headers.emplace_back("X-User-Tier", "pro");
  EXPECT_EQ(limit_for(free_user), "\"search.pro\";q=600;w=60");
  Request unknown;
  unknown.headers = {{"X-User-ID", "carol"}, {"X-User-Tier", "platinum"}};
  EXPECT_EQ(limit_for(unknown), "\"search.free\";q=60;w=60");
}

TEST_F(MiddlewareTest, UntrustedTierHeaderIsIgnoredAndUserTableDecides) {
  auto c = parse_config(kYaml, "x.yaml");
  c.limiter.tiers.trust_header = false;
  limiter::Limiter l(c.limiter, store);
  Middleware m(l, c.middleware);
  Request r;
  r.path = "/api/search";
  r.headers = {{"X-User-ID", "bob"}, {"X-User-Tier", "pro"}};
  EXPECT_EQ(header(m.handle_sync(r.view()), "RateLimit-Policy"), "\"search.free\";q=60;w=60");
  r.headers = {{"X-User-ID", "alice"}};
  EXPECT_EQ(header(m.handle_sync(r.view()), "RateLimit-Policy"), "\"search.pro\";q=600;w=60");
}

TEST_F(MiddlewareTest, ApiKeyIdentityIsHashedAndFallsBackToIp) {
  Request r;
  r.path = "/keyed";
  r.headers = {{"X-API-Key", "sk_secret"}};
  const auto id = identity(r);
  EXPECT_TRUE(id.starts_with("key:"));
  EXPECT_EQ(id.find("sk_secret"), std::string::npos);
  r.headers.clear();
  EXPECT_EQ(identity(r), "ip:192.0.2.7");
}

TEST_F(MiddlewareTest, OversizedUserIdIsABadRequest) {
  Request r;
  r.path = "/api/profile";
  r.headers = {{"X-User-ID", std::string(1000, 'a')}};
  auto res = send(r);
  EXPECT_FALSE(res.admitted);
  EXPECT_EQ(res.status, 400);
  auto body = nlohmann::json::parse(res.body);
  EXPECT_EQ(body["error"], "Bad request");
  EXPECT_EQ(middleware.metrics().requests(RequestOutcome::bad_request), 1u);
}

// A field the rules decide on, sent twice or in another spelling a gateway reads as the same
// variable (X-User_ID, X.User.ID: HTTP_X_USER_ID), is refused: the proxy sends every field on,
// and the application might read another value than the one counted, or, behind a server that
// drops such names, none.
TEST_F(MiddlewareTest, AFieldTheRulesDecideOnIsSentOnceOrRefused) {
  auto refused = [&](Request r) {
    const auto res = send(r);
    if (res.admitted || res.status != 400) return false;
    const auto detail = nlohmann::json::parse(res.body)["detail"].get<std::string>();
    return detail.find("must be sent once") != std::string::npos || detail.find("is a spelling of") != std::string::npos;
  };
  Request profile;
  profile.path = "/api/profile";
  profile.headers = {{"X-User-ID", "mallory"}, {"X-User-ID", "alice"}};
  EXPECT_TRUE(refused(profile));
  profile.headers = {{"X-User-ID", "alice"}, {"x-user_id", "mallory"}};
  EXPECT_TRUE(refused(profile));
  for (const char* spelling : {"X-User_ID", "X.User.ID", "x~user~id"}) {
    profile.headers = {{spelling, "alice"}};
    EXPECT_TRUE(refused(profile)) << spelling;
  }
  profile.headers = {{"XUserID", "alice"}, {"X-User-IDs", "bob"}};  // other fields: the default
  EXPECT_EQ(identity(profile), "user:anonymous");

  Request keyed;
  keyed.path = "/keyed";
  keyed.headers = {{"X-API-Key", "sk_throwaway"}, {"X-API-Key", "sk_secret"}};
  EXPECT_TRUE(refused(keyed));
  Request account;  // user_or_ip: refused too, not taken for the IP
  account.path = "/account/settings";
  account.headers = {{"X-User-ID", "1"}, {"X-User-ID", "2"}};
  EXPECT_TRUE(refused(account));

  Request tiered;  // the trusted tier header
  tiered.path = "/api/search";
  tiered.headers = {{"X-User-ID", "bob"}, {"X-User-Tier", "free"}, {"X-User-Tier", "pro"}};
  EXPECT_TRUE(refused(tiered));
  tiered.headers.pop_back();
  EXPECT_EQ(header(send(tiered), "RateLimit-Policy"), "\"search.free\";q=60;w=60");
  EXPECT_EQ(middleware.metrics().requests(RequestOutcome::bad_request), 8u);
}

TEST_F(MiddlewareTest, IdentityWithBracesCannotBreakTheHashTag) {
  Request r;
  r.path = "/api/profile";
  r.headers = {{"X-User-ID", "x}:other{y"}};
  auto apps = middleware.applied_rules(r.view());
  ASSERT_TRUE(apps);
  auto ev = limiter.evaluate_sync(*apps);
  ASSERT_TRUE(ev);
  EXPECT_EQ(ev->rules[0].limits[0].key, "ratelimit:{user:x%7D:other%7By}:profile");
}

TEST_F(MiddlewareTest, CallbackMayOutliveTheRequest) {
  std::optional<MiddlewareResult> got;
  {
    Request r;
    r.path = "/slow";
    middleware.handle(r.view(), [&](MiddlewareResult res) { got = std::move(res); });
  }
  ASSERT_TRUE(got);
  EXPECT_TRUE(got->admitted);
}

TEST_F(MiddlewareTest, ConcurrentRequestsAdmitExactlyTheCapacity) {
  // Time is frozen: the bucket of 100 cannot refill, so exactly 100 of 400 get through.
  std::atomic<int> admitted{0}, rejected{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 100; ++i) {
        auto res = send(Request{});
        (res.admitted ? admitted : rejected).fetch_add(1);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(admitted.load(), 100);
  EXPECT_EQ(rejected.load(), 300);
  EXPECT_EQ(limiter.metrics().decisions(0, limiter::Outcome::allowed), 100u);
  EXPECT_EQ(limiter.metrics().decisions(0, limiter::Outcome::denied), 300u);
}

TEST(ShippedConfigTest, LoginAllowsFivePerMinutePerIpThenTellsWhenToRetry) {
  ManualClock clock{kStart};
  store::MemoryStore store{
      store::MemoryStoreOptions{.max_keys = 1000, .shards = 2, .clock = &clock}};
  auto config = load_config(std::string(RATEKEEPER_SOURCE_DIR) + "/config/ratekeeper.yaml");
  config.limiter.decision_log.enabled = false;
  limiter::Limiter limiter(config.limiter, store);
  Middleware mw(limiter, config.middleware);
  Request login;
  login.method = "POST";
  login.path = "/auth/login";
  for (int i = 0; i < 5; ++i) {
    EXPECT_TRUE(mw.handle_sync(login.view()).admitted) << i;
    clock.advance(10 * kMicrosPerSecond);
  }
  // 50 s after the first attempt: the window frees its first slot 10 s from now.
  auto denied = mw.handle_sync(login.view());
  EXPECT_EQ(denied.status, 429);
  EXPECT_EQ(header(denied, "Retry-After"), "10");
  Request other = login;
  other.peer = "198.51.100.20";
  EXPECT_TRUE(mw.handle_sync(other.view()).admitted);  // per IP
  clock.advance(10 * kMicrosPerSecond);
  EXPECT_TRUE(mw.handle_sync(login.view()).admitted);
  login.method = "GET";
  EXPECT_TRUE(mw.handle_sync(login.view()).headers.empty());  // only POST is limited
}

TEST(RuleMatchTest, MatchesRulesByMethodAndPathInConfigOrder) {
  store::MemoryStore store;
  auto c = parse_config(R"(
rules:
  - {name: exact, match: {methods: [GET], path: /api/data}, limits: [{capacity: 10, refill_rate: 1}]}
  - {name: prefix, match: {path_prefix: /api/}, limits: [{capacity: 10, refill_rate: 1}]}
  - {name: login, match: {methods: [POST], path: /auth/login}, limits: [{capacity: 10, refill_rate: 1}]}
)");
  limiter::Limiter limiter(c.limiter, store);
  Middleware m(limiter, c.middleware);
  auto names = [&](std::string method, std::string path) {
    http::Request request;
    request.method = std::move(method);
    request.target = std::move(path);
    request.peer_address = "192.0.2.7";
    std::vector<std::string> out;
    const auto apps = m.applied_rules(request);
    EXPECT_TRUE(apps);
    if (apps) {
      for (const auto& app : *apps) out.push_back(app.rule->name);
    }
    return out;
  };
  EXPECT_EQ(names("GET", "/api/data"), (std::vector<std::string>{"exact", "prefix"}));
  EXPECT_EQ(names("POST", "/api/data"), (std::vector<std::string>{"prefix"}));
  EXPECT_EQ(names("GET", "/api/data/x"), (std::vector<std::string>{"prefix"}));
  EXPECT_EQ(names("POST", "/auth/login"), (std::vector<std::string>{"login"}));
  EXPECT_TRUE(names("GET", "/auth/login").empty());
  EXPECT_TRUE(names("GET", "/apix").empty());
  EXPECT_EQ(names("GET", "/api/data?x=1"), (std::vector<std::string>{"exact", "prefix"}));
  // HEAD runs an application's GET handler: a rule for GET covers it.
  EXPECT_EQ(names("HEAD", "/api/data"), (std::vector<std::string>{"exact", "prefix"}));
  EXPECT_TRUE(names("HEAD", "/auth/login").empty());
  // An exact path also matches with one trailing slash, which most applications serve alike.
  EXPECT_EQ(names("POST", "/auth/login/"), (std::vector<std::string>{"login"}));
  EXPECT_EQ(names("POST", "/auth/login//"), (std::vector<std::string>{"login"}));  // normal: /auth/login/
  EXPECT_TRUE(names("POST", "/auth/login/x").empty());
  EXPECT_TRUE(names("POST", "/auth/logi/").empty());
  EXPECT_TRUE(names("POST", "/auth/loginx").empty());
}

// A per_endpoint bucket of an exact path is the rule's path whatever the trailing slash (one
// bucket, as one rule); under a prefix, each path is its own.
TEST(RuleMatchTest, AnExactPathsEndpointIsTheRulesPath) {
  store::MemoryStore store;
  auto c = parse_config(R"(
rules:
  - {name: item, match: {path: /api/item}, bucket: per_endpoint, limits: [{capacity: 10, refill_rate: 1}]}
  - {name: files, match: {path_prefix: /files/}, bucket: per_endpoint, limits: [{capacity: 10, refill_rate: 1}]}
)");
  limiter::Limiter limiter(c.limiter, store);
  Middleware m(limiter, c.middleware);
  auto endpoint = [&](std::string path) {
    http::Request request;
    request.method = "GET";
    request.target = std::move(path);
    request.peer_address = "192.0.2.7";
    const auto apps = m.applied_rules(request);
    return apps && apps->size() == 1 ? apps->front().endpoint : "<error>";
  };
  EXPECT_EQ(endpoint("/api/item"), "/api/item");
  EXPECT_EQ(endpoint("/api/item/"), "/api/item");
  EXPECT_EQ(endpoint("/api/./item//"), "/api/item");
  EXPECT_EQ(endpoint("/files/a"), "/files/a");
  EXPECT_EQ(endpoint("/files/a/"), "/files/a/");
}

TEST(RuleMatchTest, AnExactPathMatchesWithOrWithoutOneTrailingSlash) {
  RuleMatch with;
  with.path = "/a/";
  EXPECT_TRUE(with.matches("GET", "/a/"));
  EXPECT_TRUE(with.matches("GET", "/a"));
  EXPECT_FALSE(with.matches("GET", "/a/b"));
  EXPECT_FALSE(with.matches("GET", "/"));
  RuleMatch root;
  root.path = "/";
  EXPECT_TRUE(root.matches("GET", "/"));
  EXPECT_FALSE(root.matches("GET", "/a"));
  RuleMatch without;
  without.path = "/a";
  EXPECT_TRUE(without.matches("GET", "/a/"));
  EXPECT_FALSE(without.matches("GET", "/ab"));
  EXPECT_FALSE(without.matches("GET", "/"));
  without.methods = {"POST"};
  EXPECT_FALSE(without.matches("HEAD", "/a"));
  EXPECT_FALSE(without.matches("GET", "/a"));
  EXPECT_TRUE(without.matches("POST", "/a"));
}

TEST(RuleMatchTest, DefaultRulesApplyOnlyToRequestsNoOtherRuleMatches) {
  store::MemoryStore store;
  auto c = parse_config(R"(
rules:
  - {name: orders, match: {path_prefix: /orders}, limits: [{capacity: 10, refill_rate: 1}]}
  - {name: reads, match: {unmatched: true, methods: [GET]}, limits: [{capacity: 10, refill_rate: 1}]}
  - {name: fallback, match: {unmatched: true}, limits: [{capacity: 10, refill_rate: 1}]}
  - {name: shadowed, match: {path: /orders/x}, shadow: true, limits: [{capacity: 10, refill_rate: 1}]}
)");
  limiter::Limiter limiter(c.limiter, store);
  Middleware m(limiter, c.middleware);
  auto names = [&](std::string method, std::string path) {
    http::Request request;
    request.method = std::move(method);
    request.target = std::move(path);
    request.peer_address = "192.0.2.7";
    std::vector<std::string> out;
    const auto apps = m.applied_rules(request);
    EXPECT_TRUE(apps);
    if (apps) {
      for (const auto& app : *apps) out.push_back(app.rule->name);
    }
    return out;
  };
  EXPECT_EQ(names("GET", "/orders/1"), (std::vector<std::string>{"orders"}));
  EXPECT_EQ(names("GET", "/orders/x"), (std::vector<std::string>{"orders", "shadowed"}));
  EXPECT_EQ(names("GET", "/users"), (std::vector<std::string>{"reads", "fallback"}));
  EXPECT_EQ(names("POST", "/users"), (std::vector<std::string>{"fallback"}));
  // The normalised path decides: //orders is /orders.
  EXPECT_EQ(names("DELETE", "//orders/2"), (std::vector<std::string>{"orders"}));
}

TEST(RuleMatchTest, ADefaultRuleTakesNoPath) {
  try {
    parse_config(
        "rules: [{name: a, match: {unmatched: true, path: /x}, limits: [{capacity: 1, "
        "refill_rate: 1}]}]\n",
        "t.yaml");
    ADD_FAILURE() << "accepted";
  } catch (const server::ConfigError& e) {
    EXPECT_EQ(e.field(), "rules[0].match.unmatched");
  }
}

TEST(RuleMatchTest, AMatchNamingAnUnknownRuleIsRefused) {
  store::MemoryStore store;
  auto c = parse_config("rules: [{name: a, limits: [{capacity: 1, refill_rate: 1}]}]\n");
  limiter::Limiter limiter(c.limiter, store);
  auto options = c.middleware;
  RuleMatch missing;
  missing.rule = "missing";
  options.matches.push_back(missing);
  EXPECT_THROW((Middleware{limiter, options}), std::invalid_argument);
}

TEST(RequestTest, SplitsTargetAndLooksUpHeadersCaseInsensitively) {
  http::Request search;
  search.target = "/api/search?q=x&y=1";
  EXPECT_EQ(search.path(), "/api/search");
  EXPECT_EQ(search.query(), "q=x&y=1");
  http::Request plain;
  plain.target = "/a";
  EXPECT_EQ(plain.path(), "/a");
  EXPECT_EQ(plain.query(), "");
  http::Request v;
  v.headers = {{"X-Forwarded-For", "a"}, {"Host", "h"}, {"x-forwarded-for", "b"}};
  EXPECT_EQ(v.header("HOST").value_or(""), "h");
  EXPECT_FALSE(v.header("Missing"));
  EXPECT_EQ(v.header_list("X-FORWARDED-FOR"), "a, b");
}

TEST(HeadersTest, RetryAfterRoundsUpToWholeSecondsAndIsAtLeastOne) {
  EXPECT_EQ(retry_after_seconds(0), 1);
  EXPECT_EQ(retry_after_seconds(1), 1);
  EXPECT_EQ(retry_after_seconds(kMicrosPerSecond), 1);
  EXPECT_EQ(retry_after_seconds(kMicrosPerSecond + 1), 2);
  EXPECT_EQ(retry_after_seconds(59 * kMicrosPerSecond + 500'000), 60);
  EXPECT_EQ(rejection_body(7), R"({"error":"Rate limit exceeded","retryAfter":7})");
}

TEST(HeadersTest, MultiLimitRulesListEveryLimit) {
  limiter::Evaluation ev;
  limiter::RuleOutcome rule;
  limiter::LimitOutcome burst;
  burst.policy_name = "api.burst";
  burst.limit = *algorithms::Limit::token_bucket(10, 10);
  burst.decision = {true, 10, 7, 0, 300'000};
  limiter::LimitOutcome hourly;
  hourly.policy_name = "api.hourly";
  hourly.limit = *algorithms::Limit::window(algorithms::Algorithm::fixed_window, 1000,
                                            3600 * kMicrosPerSecond);
  hourly.decision = {true, 1000, 990, 0, 1800 * kMicrosPerSecond};
  rule.limits = {burst, hourly};
  ev.rules = {rule};
  EXPECT_EQ(ratelimit_policy_field(ev), "\"api.burst\";q=10;w=1, \"api.hourly\";q=1000;w=3600");
  EXPECT_EQ(ratelimit_field(ev), "\"api.burst\";r=7;t=1, \"api.hourly\";r=990;t=1800");
}

// A list of fields given back (reuse_fields) is filled again from scratch: the next headers
// are exactly the evaluation's, whatever the list held (more fields, longer values).
TEST(HeadersTest, AListGivenBackHoldsOnlyTheNextEvaluationsFields) {
  limiter::Evaluation ev;
  limiter::RuleOutcome rule;
  limiter::LimitOutcome api;
  api.policy_name = "api";
  api.limit = *algorithms::Limit::token_bucket(10, 10);
  api.decision = {false, 10, 0, 400'000, 1'000'000};
  rule.limits = {api};
  ev.rules = {rule};
  ev.decision = api.decision;
  ev.allowed = false;
  const HeaderOptions both{.draft = true, .legacy = true};
  const HeaderList denied = rate_limit_headers(ev, both);
  ASSERT_EQ(denied.size(), 6u);  // the draft's two, the legacy three, Retry-After

  HeaderList stale = denied;
  stale.emplace_back("Server", "ratekeeper");
  stale.emplace_back("Content-Type", "application/json; charset=utf-8; and more than fits inline");
  reuse_fields(std::move(stale));
  ev.rules[0].limits[0].decision = {true, 10, 9, 0, 100'000};
  ev.decision = ev.rules[0].limits[0].decision;
  ev.allowed = true;
  const HeaderList admitted = rate_limit_headers(ev, HeaderOptions{});
  const HeaderList expected = {{"RateLimit-Policy", "\"api\";q=10;w=1"}, {"RateLimit", "\"api\";r=9;t=1"}};
  EXPECT_EQ(admitted, expected);

  HeaderList shorter = admitted;
  reuse_fields(std::move(shorter));
  EXPECT_EQ(rate_limit_headers(ev, both), (HeaderList{{"RateLimit-Policy", "\"api\";q=10;w=1"},
                                                      {"RateLimit", "\"api\";r=9;t=1"},
                                                      {"X-RateLimit-Limit", "10"},
                                                      {"X-RateLimit-Remaining", "9"},
                                                      {"X-RateLimit-Reset", "1"}}));
}

TEST(HeadersTest, VerdictJsonHasTheDecisionApiFields) {
  limiter::Verdict v;
  v.decision = {false, 10, 0, 1'500'001, 9'000'000};
  v.by_failure_policy = false;
  auto j = nlohmann::json::parse(verdict_json(v, limiter::FailureMode::deny));
  EXPECT_EQ(j["allowed"], false);
  EXPECT_EQ(j["limit"], 10);
  EXPECT_EQ(j["remaining"], 0);
  EXPECT_EQ(j["retry_after_ms"], 1501);
  EXPECT_EQ(j["reset_after_ms"], 9000);
  EXPECT_EQ(j["by_failure_policy"], false);
  EXPECT_EQ(j["failure_policy"], "deny");
}

}  // namespace
}  // namespace ratekeeper::http
