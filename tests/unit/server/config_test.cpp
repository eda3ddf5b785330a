// Loading the YAML configuration: the shipped example, defaults, and errors that name the
// file, the field path and the reason.

#include "config.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "ratekeeper/http/middleware.hpp"
#include "ratekeeper/limiter/keys.hpp"
#include "ratekeeper/store/memory_store.hpp"
#include "support/tls_certs.hpp"

namespace ratekeeper::server {
namespace {

using http::Middleware;

// Expects parse_config(yaml) to fail on `field` with a reason containing `reason`.
void expect_error(const std::string& yaml, const std::string& field, const std::string& reason) {
  try {
    parse_config(yaml, "test.yaml");
    ADD_FAILURE() << "no error for field " << field;
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.file(), "test.yaml");
    EXPECT_EQ(e.field(), field) << e.what();
    EXPECT_NE(e.reason().find(reason), std::string::npos) << e.what();
    const std::string what = e.what();
    EXPECT_NE(what.find("test.yaml"), std::string::npos);
    EXPECT_NE(what.find(field), std::string::npos);
  }
}

const std::string kRules = R"(
rules:
  - name: a
    limits: [{capacity: 10, refill_rate: 1}]
  - name: b
    limits: [{capacity: 10, refill_rate: 1}]
)";

TEST(ConfigTest, ShippedExampleLoadsAndReproducesTheSeed) {
  const auto c = load_config(std::string(RATEKEEPER_SOURCE_DIR) + "/config/ratekeeper.yaml");
  EXPECT_EQ(c.store.url, "memory://");
  EXPECT_EQ(c.http.port, 8080);
  const auto& rules = c.limiter.rules;
  auto find = [&](std::string_view name) -> const limiter::Rule& {
    for (const auto& r : rules) {
      if (r.name == name) return r;
    }
    throw std::runtime_error("no rule " + std::string(name));
  };
  auto match_of = [&](std::string_view name) -> const http::RuleMatch& {
    for (const auto& m : c.middleware.matches) {
      if (m.rule == name) return m;
    }
    throw std::runtime_error("no match for " + std::string(name));
  };
  const auto& data = find("api_data");
  EXPECT_EQ(match_of("api_data").path, "/api/data");
  EXPECT_EQ(data.identity.kind, limiter::IdentityKind::ip);
  ASSERT_EQ(data.limits.size(), 1u);
  EXPECT_EQ(data.limits[0].limit, *algorithms::Limit::token_bucket(100, 10));

  const auto& profile = find("api_profile");
  EXPECT_EQ(profile.identity.kind, limiter::IdentityKind::header);
  EXPECT_EQ(profile.identity.header, "X-User-ID");
  EXPECT_EQ(profile.identity.default_value, "anonymous");

  EXPECT_TRUE(find("api_search").tiered);
  const auto& tiers = c.limiter.tiers;
  EXPECT_EQ(tiers.levels.at("free")[0].limit, *algorithms::Limit::token_bucket(60, 1));
  EXPECT_EQ(tiers.levels.at("pro")[0].limit, *algorithms::Limit::token_bucket(600, 10));
  EXPECT_EQ(tiers.levels.at("enterprise")[0].limit, *algorithms::Limit::token_bucket(6000, 100));

  const auto& login = find("auth_login");
  EXPECT_EQ(match_of("auth_login").methods, std::vector<std::string>{"POST"});
  EXPECT_EQ(login.limits[0].limit.algorithm, algorithms::Algorithm::sliding_window_log);
  EXPECT_EQ(login.limits[0].limit.capacity, 5);
  EXPECT_EQ(login.limits[0].limit.period, 60 * kMicrosPerSecond);
  EXPECT_EQ(login.on_store_error, limiter::FailureMode::deny);

  const auto& exp = find("api_export");
  EXPECT_EQ(exp.limits.size(), 2u);
  EXPECT_EQ(exp.ip_limits.size(), 2u);
  EXPECT_EQ(exp.bucket, limiter::BucketScope::shared);
  EXPECT_TRUE(find("api_global_shadow").shadow);

  // And a limiter can be built from it.
  store::MemoryStore store;
  EXPECT_NO_THROW(limiter::Limiter(c.limiter, store));
}

TEST(ConfigTest, EmptyDocumentGivesDefaultsWithMemoryStore) {
  const auto c = parse_config("", "empty.yaml");
  EXPECT_EQ(c.store.url, "memory://");
  EXPECT_FALSE(c.store_configured);
  EXPECT_EQ(c.limiter.prefix, "ratelimit");
  EXPECT_TRUE(c.limiter.rules.empty());
  EXPECT_EQ(c.limiter.tiers.levels.size(), 3u);
  EXPECT_TRUE(c.middleware.headers.draft);
  EXPECT_FALSE(c.middleware.headers.legacy);
  EXPECT_TRUE(c.metrics_enabled);
}

TEST(ConfigTest, EmptyListsMayBeWrittenAsNothing) {
  const auto c = parse_config("rules:\ntrusted_proxies:\n", "null.yaml");
  EXPECT_TRUE(c.limiter.rules.empty());
  EXPECT_TRUE(c.middleware.trusted_proxies.empty());
}

TEST(ConfigTest, ReadsEveryTopLevelSection) {
  const auto c = parse_config(R"(
listen: "[::1]:9090"
threads: 4
store:
  url: redis://127.0.0.1:6379
  connect_timeout: 2s
  command_timeout: 50ms
  breaker: {failures: 5, open_for: 500ms}
  instances: 3
failure_policy: {default: local, deny_retry_after: 2s}
key_prefix: rk
trusted_proxies: [10.0.0.0/8, "2001:db8::/32", unix]
headers: {draft: false, legacy: true}
logging: {level: debug, decisions: {allow_sample_rate: 0.5, lines_per_second: 10, burst: 20}}
metrics: {enabled: false}
http: {max_header_bytes: 4096, max_body_bytes: 1000, read_timeout: 5s, max_pipelined: 4}
rules:
  - name: r
    limits: [{rate: 10/s}]
)",
                              "full.yaml");
  EXPECT_EQ(c.http.host, "::1");
  EXPECT_EQ(c.http.port, 9090);
  EXPECT_EQ(c.http.threads, 4);
  EXPECT_TRUE(c.store_configured);
  EXPECT_EQ(c.store.url, "redis://127.0.0.1:6379");
  EXPECT_EQ(c.store.connect_timeout, 2 * kMicrosPerSecond);
  EXPECT_EQ(c.store.command_timeout, 50 * kMicrosPerMilli);
  EXPECT_EQ(c.store.breaker_failures, 5);
  EXPECT_EQ(c.store.breaker_open_for, 500 * kMicrosPerMilli);
  EXPECT_EQ(c.limiter.instances, 3);
  EXPECT_EQ(c.limiter.deny_retry_after, 2 * kMicrosPerSecond);
  EXPECT_EQ(c.limiter.rules[0].on_store_error, limiter::FailureMode::local);  // the default
  EXPECT_EQ(c.limiter.prefix, "rk");
  EXPECT_TRUE(c.middleware.trusted_proxies.contains(*http::parse_ip("10.2.3.4")));
  EXPECT_TRUE(c.middleware.trusted_proxies.contains(*http::parse_ip("2001:db8::5")));
  EXPECT_TRUE(c.middleware.trusted_proxies.unix_sockets());
  EXPECT_FALSE(c.middleware.headers.draft);
  EXPECT_TRUE(c.middleware.headers.legacy);
  EXPECT_EQ(c.logging.level, "debug");
  EXPECT_DOUBLE_EQ(c.limiter.decision_log.allow_sample_rate, 0.5);
  EXPECT_FALSE(c.metrics_enabled);
  EXPECT_EQ(c.http.header_limit, 4096u);
  EXPECT_EQ(c.http.read_timeout, 5 * kMicrosPerSecond);
  EXPECT_EQ(c.http.max_pipelined, 4u);
  // rate 10/s on a token bucket: 10 per second, burst 10.
  EXPECT_EQ(c.limiter.rules[0].limits[0].limit, *algorithms::Limit::token_bucket(10, 10));
}

TEST(ConfigTest, UnknownFieldIsNamedWithItsPath) {
  expect_error("colour: blue\n", "colour", "unknown field");
  expect_error(kRules + R"(
  - name: c
    limits: [{capacity: 10, refill_rate: 1, burstiness: 3}]
)",
               "rules[2].limits[0].burstiness", "unknown field");
  expect_error("store: {url: memory://, timeout: 1s}\n", "store.timeout", "unknown field");
  expect_error(kRules + "  - {name: c, limits: [{rate: 1/s}], match: {paths: /x}}\n",
               "rules[2].match.paths", "unknown field");
}

// Requests are matched on their normal path: a rule written in another form would match
// nothing, silently. Refused at load, naming the field and the form to write.
TEST(ConfigTest, AMatchPathNotInNormalFormIsRefusedWithTheFormToWrite) {
  expect_error(kRules + "  - {name: c, limits: [{rate: 1/s}], match: {path: /a//b}}\n", "rules[2].match.path",
               "write '/a/b'");
  expect_error(kRules + "  - {name: c, limits: [{rate: 1/s}], match: {path_prefix: /a/./b}}\n",
               "rules[2].match.path_prefix", "write '/a/b'");
  expect_error(kRules + "  - {name: c, limits: [{rate: 1/s}], match: {path: '/login#x'}}\n", "rules[2].match.path",
               "fragment");
  expect_error(kRules + "  - {name: c, limits: [{rate: 1/s}], match: {path: '/a;b'}}\n", "rules[2].match.path",
               "would match nothing");
  // Under upstream.lowercase_path, request paths are lower-cased: so must the rules' be.
  const std::string lower = "upstream: {url: 'http://10.0.0.5', lowercase_path: true}\n";
  expect_error(lower + kRules + "  - {name: c, limits: [{rate: 1/s}], match: {path_prefix: /API}}\n",
               "rules[2].match.path_prefix", "write '/api'");
  EXPECT_NO_THROW(parse_config(lower + kRules + "  - {name: c, limits: [{rate: 1/s}], match: {path_prefix: /api}}\n"));
  EXPECT_NO_THROW(parse_config(kRules + "  - {name: c, limits: [{rate: 1/s}], match: {path_prefix: /API}}\n"));
  // A prefix ends where it likes: inside a name made of dots, after a slash.
  EXPECT_NO_THROW(parse_config(kRules + "  - {name: c, limits: [{rate: 1/s}], match: {path_prefix: /files/.}}\n"));
  EXPECT_NO_THROW(parse_config(kRules + "  - {name: c, limits: [{rate: 1/s}], match: {path_prefix: /api/}}\n"));
  EXPECT_NO_THROW(parse_config(kRules + "  - {name: c, limits: [{rate: 1/s}], match: {path_prefix: /ap}}\n"));
}

TEST(ConfigTest, BadRateIsNamedWithItsPath) {
  expect_error(kRules + "  - {name: c, limits: [{rate: fast}]}\n", "rules[2].limits[0].rate",
               "must be '<count>/<period>'");
  expect_error(kRules + "  - {name: c, limits: [{rate: 0/s}]}\n", "rules[2].limits[0].rate",
               "count must be a number > 0");
  expect_error(kRules + "  - {name: c, limits: [{rate: 5/fortnight}]}\n", "rules[2].limits[0].rate",
               "period must be a duration");
  expect_error(kRules + "  - {name: c, limits: [{capacity: 10, refill_rate: -1}]}\n",
               "rules[2].limits[0].refill_rate", "refill_rate");
  expect_error(kRules + "  - {name: c, limits: [{capacity: 2.5, refill_rate: 1}]}\n",
               "rules[2].limits[0].capacity", "whole number");
  expect_error(
      kRules + "  - {name: c, limits: [{algorithm: fixed_window, limit: 10, window: soon}]}\n",
      "rules[2].limits[0].window", "duration");
  expect_error(kRules + "  - {name: c, limits: [{algorithm: leaky, rate: 1/s}]}\n",
               "rules[2].limits[0].algorithm", "unknown algorithm");
}

TEST(ConfigTest, OnLimitAndMaxDelayAreReadPerRule) {
  const auto c = parse_config(kRules + "  - {name: c, limits: [{rate: 5/s}], on_limit: delay, max_delay: 1500ms}\n"
                                       "  - {name: d, limits: [{rate: 5/s}], on_limit: reject}\n",
                              "test.yaml");
  ASSERT_EQ(c.limiter.rules.size(), 4u);
  EXPECT_EQ(c.limiter.rules[0].on_limit, limiter::OnLimit::reject);  // the default
  EXPECT_EQ(c.limiter.rules[0].max_delay, 0);
  EXPECT_EQ(c.limiter.rules[2].on_limit, limiter::OnLimit::delay);
  EXPECT_EQ(c.limiter.rules[2].max_delay, 1'500'000);
  EXPECT_EQ(c.limiter.rules[3].on_limit, limiter::OnLimit::reject);
}

TEST(ConfigTest, BadOnLimitOrMaxDelayIsNamedWithItsPath) {
  expect_error(kRules + "  - {name: c, limits: [{rate: 5/s}], on_limit: delay}\n", "rules[2].max_delay",
               "required with on_limit: delay");
  expect_error(kRules + "  - {name: c, limits: [{rate: 5/s}], on_limit: queue, max_delay: 1s}\n",
               "rules[2].on_limit", "must be reject or delay, got 'queue'");
  expect_error(kRules + "  - {name: c, limits: [{rate: 5/s}], on_limit: delay, max_delay: soon}\n",
               "rules[2].max_delay", "duration");
  expect_error(kRules + "  - {name: c, limits: [{rate: 5/s}], on_limit: delay, max_delay: 2h}\n",
               "rules[2].max_delay", "at most");
  expect_error(kRules + "  - {name: c, limits: [{rate: 5/s}], max_delay: 1s}\n", "rules[2].max_delay",
               "only with on_limit: delay");
  expect_error(kRules +
                   "  - {name: c, limits: [{algorithm: fixed_window, limit: 10, window: 1m}], on_limit: delay, "
                   "max_delay: 1s}\n",
               "rules[2].on_limit", "delay needs token_bucket limits");
}

TEST(ConfigTest, LeaseIsReadPerRule) {
  const auto c = parse_config(kRules + "  - {name: c, limits: [{rate: 5/s}], lease: {max: 500, ttl: 250ms}}\n"
                                       "  - {name: d, limits: [{algorithm: fixed_window, limit: 10, window: 1m}], "
                                       "lease: {max: 5}}\n",
                              "test.yaml");
  ASSERT_EQ(c.limiter.rules.size(), 4u);
  EXPECT_FALSE(c.limiter.rules[0].lease.enabled());  // the default: not leased
  EXPECT_EQ(c.limiter.rules[2].lease, (store::LeasePolicy{500, 250'000}));
  EXPECT_EQ(c.limiter.rules[3].lease, (store::LeasePolicy{5, 1'000'000}));  // ttl 1s by default
}

TEST(ConfigTest, BadLeaseIsNamedWithItsPath) {
  expect_error(kRules + "  - {name: c, limits: [{rate: 5/s}], lease: {ttl: 1s}}\n", "rules[2].lease.max",
               "required field missing");
  expect_error(kRules + "  - {name: c, limits: [{rate: 5/s}], lease: {max: 0}}\n", "rules[2].lease.max", "between");
  expect_error(kRules + "  - {name: c, limits: [{rate: 5/s}], lease: {max: 5, ttl: 2h}}\n", "rules[2].lease.ttl",
               "at most");
  expect_error(kRules + "  - {name: c, limits: [{rate: 5/s}], lease: {max: 5, size: 3}}\n", "rules[2].lease.size",
               "unknown field");
  expect_error(kRules + "  - {name: c, limits: [{rate: 5/s}], lease: 5}\n", "rules[2].lease", "mapping");
  expect_error(kRules +
                   "  - {name: c, limits: [{algorithm: sliding_window_log, limit: 10, window: 1m}], "
                   "lease: {max: 5}}\n",
               "rules[2].lease", "leases need fixed_window or token_bucket limits; a limit is sliding_window_log");
  expect_error(kRules + "  - {name: c, identity: {type: user_or_ip}, limits: [{rate: 5/s}], "
                        "ip_limits: [{algorithm: sliding_window_counter, limit: 10, window: 1m}], lease: {max: 5}}\n",
               "rules[2].lease", "an ip_limits limit is sliding_window_counter");
  expect_error(kRules + "  - {name: c, limits: [{rate: 5/s}], on_limit: delay, max_delay: 1s, lease: {max: 5}}\n",
               "rules[2].lease", "not with on_limit: delay");
}

TEST(ConfigTest, UsageIsReadPerRule) {
  const auto c = parse_config(kRules +
                                  "  - {name: c, limits: [{capacity: 1000, rate: 10/s}], usage: {response_header: "
                                  "X-Usage-Tokens, estimate: 200, estimate_header: X-Max-Tokens, ttl: 30s}}\n"
                                  "  - {name: d, limits: [{algorithm: fixed_window, limit: 10, window: 1m}], "
                                  "usage: {response_header: X-Cost, estimate: 1}}\n",
                              "test.yaml");
  ASSERT_EQ(c.limiter.rules.size(), 4u);
  EXPECT_FALSE(c.limiter.rules[0].usage.enabled());
  EXPECT_EQ(c.limiter.rules[2].usage,
            (limiter::UsageSpec{"X-Usage-Tokens", "", "X-Max-Tokens", 200, 30 * kMicrosPerSecond}));
  EXPECT_EQ(c.limiter.rules[3].usage, (limiter::UsageSpec{"X-Cost", "", "", 1, 300 * kMicrosPerSecond}));
  const auto json = parse_config(kRules + "  - {name: c, limits: [{capacity: 1000, rate: 10/s}], usage: "
                                          "{response_json: usage.total_tokens, estimate: 5}}\n",
                                 "test.yaml");
  EXPECT_EQ(json.limiter.rules[2].usage, (limiter::UsageSpec{"", "usage.total_tokens", "", 5, 300 * kMicrosPerSecond}));
}

TEST(ConfigTest, ConcurrencyLimitsAreReadAndBadOnesNamedWithTheirPath) {
  const auto config = parse_config(kRules +
                                   "  - {name: c, limits: [{name: rate, capacity: 10, refill_rate: 1}, "
                                   "{name: slots, algorithm: concurrency, limit: 3, slot_ttl: 90s}]}\n"
                                   "  - {name: d, limits: [{algorithm: concurrency, limit: 1}]}\n",
                                   "test.yaml");
  const auto& slots = config.limiter.rules[2].limits[1].limit;
  EXPECT_EQ(slots, *algorithms::Limit::make(algorithms::Algorithm::concurrency, 3, 90 * kMicrosPerSecond));
  EXPECT_EQ(config.limiter.rules[3].limits[0].limit.period, kDefaultSlotTtl);
  auto limit = [](const std::string& fields) {
    return kRules + "  - {name: c, limits: [{" + fields + "}]}\n";
  };
  expect_error(limit("algorithm: concurrency"), "rules[2].limits[0].limit", "required field missing");
  expect_error(limit("algorithm: concurrency, limit: 2, window: 1m"), "rules[2].limits[0].window",
               "not a concurrency field");
  expect_error(limit("algorithm: concurrency, rate: 5/s"), "rules[2].limits[0].rate", "not a concurrency field");
  expect_error(limit("algorithm: concurrency, limit: 2000000"), "rules[2].limits[0].limit", "at most 2^20");
  expect_error(limit("algorithm: concurrency, limit: 2, slot_ttl: 0s"), "rules[2].limits[0].slot_ttl", "");
  expect_error(limit("capacity: 10, refill_rate: 1, slot_ttl: 5s"), "rules[2].limits[0].slot_ttl",
               "a field of concurrency limits only");
  expect_error(kRules + "  - {name: c, shadow: true, limits: [{algorithm: concurrency, limit: 2}]}\n",
               "rules[2].shadow", "holds no concurrency slot");
  expect_error(kRules + "  - {name: c, lease: {max: 2}, limits: [{algorithm: concurrency, limit: 2}]}\n",
               "rules[2].lease", "is concurrency");
}

TEST(ConfigTest, AParentIsReadAndBadOnesNamedWithTheirPath) {
  const auto config = parse_config(kRules +
                                   "  - {name: c, identity: {type: header, header: X-User-ID}, limits: [{capacity: 5, "
                                   "refill_rate: 1}], parent: {identity: {type: header, header: X-Org-ID, prefix: "
                                   "org, default: none}, limits: [{capacity: 50, refill_rate: 10}]}}\n",
                                   "test.yaml");
  const auto& parent = config.limiter.rules[2].parent;
  ASSERT_TRUE(parent.has_value());
  EXPECT_EQ(parent->identity.header, "X-Org-ID");
  EXPECT_EQ(parent->identity.prefix, "org");
  EXPECT_EQ(parent->identity.default_value, "none");
  EXPECT_EQ(parent->limits[0].limit, *algorithms::Limit::token_bucket(50, 10));
  auto rule = [](const std::string& extra) {
    return kRules + "  - {name: c, limits: [{capacity: 5, refill_rate: 1}]" + extra + "}\n";
  };
  expect_error(rule(", parent: {limits: [{capacity: 5, refill_rate: 1}]}"), "rules[2].parent.identity",
               "required field missing");
  expect_error(rule(", parent: {identity: {type: header, header: X-Org-ID}}"), "rules[2].parent.limits",
               "required field missing");
  expect_error(rule(", parent: {identity: {type: bogus}, limits: [{capacity: 5, refill_rate: 1}]}"),
               "rules[2].parent.identity.type", "must be ip, header");
  expect_error(rule(", parent: {identity: {type: ip}, limits: [{capacity: 1, refill_rate: 1}], size: 2}"),
               "rules[2].parent.size", "unknown field");
  expect_error(rule(", cost: 3, parent: {identity: {type: ip}, limits: [{capacity: 2, refill_rate: 1}]}"),
               "rules[2].cost", "exceeds capacity 2");
  expect_error(rule(", bucket: per_endpoint, parent: {identity: {type: ip}, limits: [{capacity: 5, refill_rate: 1}]}"),
               "rules[2].parent", "not with bucket: per_endpoint");
}

TEST(ConfigTest, BadUsageIsNamedWithItsPath) {
  const std::string ok = "response_header: X-Cost, estimate: 5";
  auto rule = [](std::string extra, std::string usage) {
    return kRules + "  - {name: c, limits: [{capacity: 10, rate: 5/s}]" + extra + ", usage: {" + usage + "}}\n";
  };
  expect_error(rule("", "estimate: 5"), "rules[2].usage", "response_header or response_json required");
  expect_error(rule("", "response_json: usage..total, estimate: 5"), "rules[2].usage.response_json",
               "field names joined by '.'");
  expect_error(rule("", "response_json: '', estimate: 5"), "rules[2].usage.response_json", "must not be empty");
  expect_error(rule("", "response_header: X-Cost"), "rules[2].usage.estimate", "required field missing");
  expect_error(rule("", "response_header: 'X Cost', estimate: 5"), "rules[2].usage.response_header",
               "HTTP header name");
  expect_error(rule("", ok + ", estimate_header: 'a:b'"), "rules[2].usage.estimate_header", "HTTP header name");
  expect_error(rule("", "response_header: X-Cost, estimate: 11"), "rules[2].usage.estimate",
               "above the capacity of a limit (10)");
  expect_error(rule("", "response_header: X-Cost, estimate: -1"), "rules[2].usage.estimate", "between");
  expect_error(rule("", ok + ", ttl: 2d"), "rules[2].usage.ttl", "at most");
  expect_error(rule("", ok + ", size: 1"), "rules[2].usage.size", "unknown field");
  expect_error(rule(", shadow: true", ok), "rules[2].usage", "not for a shadow rule");
  expect_error(rule(", on_limit: delay, max_delay: 1s", ok), "rules[2].usage", "not with on_limit: delay");
  expect_error(rule(", lease: {max: 2}", ok), "rules[2].usage", "not with lease");
  expect_error(kRules +
                   "  - {name: c, limits: [{algorithm: sliding_window_counter, limit: 10, window: 1m}], "
                   "usage: {response_header: X-Cost, estimate: 1}}\n",
               "rules[2].usage", "needs fixed_window, token_bucket or concurrency limits; a limit is sliding_window_counter");
}

TEST(ConfigTest, MissingFieldIsNamedWithItsPath) {
  expect_error("rules:\n  - limits: [{rate: 1/s}]\n", "rules[0].name", "required field missing");
  expect_error("rules:\n  - name: a\n", "rules[0].limits", "required field missing");
  expect_error("rules:\n  - {name: a, limits: [{capacity: 5}]}\n", "rules[0].limits[0].rate",
               "required field missing");
  expect_error("rules:\n  - {name: a, limits: [{name: x, rate: 1/s}, {rate: 10/h}]}\n",
               "rules[0].limits[1].name", "required field missing");
}

TEST(ConfigTest, BadValuesAreNamedWithTheirPath) {
  expect_error("threads: many\n", "threads", "integer");
  expect_error("threads: 0\n", "threads", "between");
  expect_error("listen: 8080\n", "listen", "host:port");
  expect_error("listen: 0.0.0.0:99999\n", "listen", "between");
  expect_error("store: {command_timeout: -5ms}\n", "store.command_timeout", "duration");
  expect_error("failure_policy: {default: maybe}\n", "failure_policy.default",
               "allow, deny or local");
  expect_error("trusted_proxies: [10.0.0.0/33]\n", "trusted_proxies[0]", "prefix length");
  expect_error("headers: {legacy: perhaps}\n", "headers.legacy", "true or false");
  expect_error("logging: {level: loud}\n", "logging.level", "must be trace");
  expect_error("logging: {decisions: {allow_sample_rate: 2}}\n",
               "logging.decisions.allow_sample_rate", "between 0 and 1");
  expect_error("tiers: {users: {bob: gold}}\n", "tiers.users.bob", "unknown tier 'gold'");
  expect_error("tiers: {default: gold}\n", "tiers.default", "not a tier");
  expect_error(kRules + "  - {name: a, limits: [{rate: 1/s}]}\n", "rules[2].name", "duplicate");
  expect_error(kRules + "  - {name: c, cost: 20, limits: [{capacity: 10, refill_rate: 1}]}\n",
               "rules[2].cost", "exceeds capacity");
  expect_error(kRules + "  - {name: c, bucket: sometimes, limits: [{rate: 1/s}]}\n",
               "rules[2].bucket", "shared or per_endpoint");
  expect_error(kRules + "  - {name: c, identity: {type: face}, limits: [{rate: 1/s}]}\n",
               "rules[2].identity.type", "must be ip, header");
  expect_error(kRules + "  - {name: c, tiered: true, limits: [{rate: 1/s}]}\n", "rules[2].limits",
               "tiered");
  expect_error(kRules + "  - {name: 'bad name', limits: [{rate: 1/s}]}\n", "rules[2].name",
               "characters");
  expect_error(kRules + "  - {name: c, match: {path: api}, limits: [{rate: 1/s}]}\n",
               "rules[2].match.path", "must start with '/'");
  expect_error(
      kRules + "  - {name: c, limits: [{algorithm: sliding_window_log, rate: 200000/h}]}\n",
      "rules[2].limits[0].rate", "one entry per admitted unit");
  expect_error("store: {denied_cache_keys: -1}\n", "store.denied_cache_keys", "between");
}

TEST(ConfigTest, InvalidYamlNamesTheFileAndLine) {
  try {
    parse_config("rules: [\n  - {name: a\n", "broken.yaml");
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.file(), "broken.yaml");
    EXPECT_NE(std::string(e.what()).find("line"), std::string::npos);
  }
}

TEST(ConfigTest, LoadConfigNamesTheFile) {
  const auto path = std::filesystem::temp_directory_path() /
                    ("ratekeeper_config_test_" + std::to_string(::getpid()) + ".yaml");
  {
    std::ofstream out(path);
    out << "rules:\n  - name: a\n    limits: [{rate: lots}]\n";
  }
  try {
    load_config(path.string());
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.file(), path.string());
    EXPECT_EQ(e.field(), "rules[0].limits[0].rate");
    EXPECT_NE(std::string(e.what()).find(path.string()), std::string::npos);
  }
  std::filesystem::remove(path);
  EXPECT_THROW(load_config(path.string()), ConfigError);  // missing file
}

TEST(ConfigTest, DurationsAcceptUnitsAndRejectNonsense) {
  EXPECT_EQ(parse_duration("250us"), 250);
  EXPECT_EQ(parse_duration("100ms"), 100'000);
  EXPECT_EQ(parse_duration("1.5s"), 1'500'000);
  EXPECT_EQ(parse_duration("2"), 2'000'000);
  EXPECT_EQ(parse_duration("1m"), 60'000'000);
  EXPECT_EQ(parse_duration("1h"), 3'600'000'000);
  EXPECT_EQ(parse_duration("1d"), 86'400'000'000);
  EXPECT_FALSE(parse_duration(""));
  EXPECT_FALSE(parse_duration("ms"));
  EXPECT_FALSE(parse_duration("-1s"));
  EXPECT_FALSE(parse_duration("1 fortnight"));
  EXPECT_FALSE(parse_duration("1.2.3s"));
}

TEST(ConfigTest, WindowRatesAndMultiLimitPolicies) {
  const auto c = parse_config(R"(
rules:
  - name: login
    limits: [{algorithm: sliding_window_log, rate: 5/1m}]
  - name: multi
    identity: {type: user_or_ip}
    limits:
      - {name: burst, rate: 10/s}
      - {name: hourly, algorithm: sliding_window_counter, limit: 1000, window: 1h}
    ip_limits: [{rate: 2/s}]
)",
                              "w.yaml");
  const auto& login = c.limiter.rules[0].limits[0].limit;
  EXPECT_EQ(login.capacity, 5);
  EXPECT_EQ(login.period, 60 * kMicrosPerSecond);
  const auto& multi = c.limiter.rules[1];
  EXPECT_EQ(multi.identity.header, "X-User-ID");  // the default user header
  EXPECT_EQ(multi.limits[1].limit.capacity, 1000);
  EXPECT_EQ(multi.limits[1].limit.period, 3600 * kMicrosPerSecond);
}

// A temporary directory removed at the end of the test.
class TempDir {
 public:
  TempDir()
      : path_(std::filesystem::temp_directory_path() /
              ("ratekeeper_config_test_dir_" + std::to_string(::getpid()))) {
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::filesystem::path& path() const { return path_; }
  std::string write(const std::string& name, const std::string& text) const {
    const auto file = path_ / name;
    std::ofstream(file, std::ios::binary) << text;
    return file.string();
  }

 private:
  std::filesystem::path path_;
};

// Expects load_config(path) to fail naming `path`, with a reason containing `reason`.
void expect_load_error(const std::string& path, const std::string& reason) {
  try {
    load_config(path);
    ADD_FAILURE() << "no error loading " << path;
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.file(), path);
    EXPECT_EQ(e.field(), "");
    EXPECT_NE(e.reason().find(reason), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
}

TEST(ConfigTest, ADirectoryIsNotAConfiguration) {
  TempDir dir;
  expect_load_error(dir.path().string(), "is a directory");
}

TEST(ConfigTest, AFileThatOpensButCannotBeReadIsAnError) {
  // Opens, but reading at offset 0 fails (EIO: address 0 is not mapped).
  expect_load_error("/proc/self/mem", "cannot read");
}

TEST(ConfigTest, AnEmptyFileIsAnEmptyConfiguration) {
  TempDir dir;
  const auto c = load_config(dir.write("empty.yaml", ""));
  EXPECT_TRUE(c.limiter.rules.empty());
  EXPECT_FALSE(c.store_configured);
  const auto comments = load_config(dir.write("comments.yaml", "# nothing yet\n"));
  EXPECT_TRUE(comments.limiter.rules.empty());
}

TEST(ConfigTest, AFileOverTheSizeLimitIsRejectedBeforeParsing) {
  TempDir dir;
  const std::string fits = "# " + std::string(kMaxConfigBytes - 3, 'x') + "\n";
  ASSERT_EQ(fits.size(), kMaxConfigBytes);
  EXPECT_NO_THROW(load_config(dir.write("fits.yaml", fits)));
  expect_load_error(dir.write("big.yaml", fits + "\n"), "larger than");
}

TEST(ConfigTest, DuplicateKeysAreRejectedWithTheirPath) {
  expect_error("threads: 2\nthreads: many\n", "threads", "duplicate key");
  expect_error("store: {url: memory://, url: 'redis://127.0.0.1:6379'}\n", "store.url",
               "duplicate key");
  expect_error("rules:\n  - name: a\n    limits: [{rate: 1/s, rate: 5/s}]\n",
               "rules[0].limits[0].rate", "duplicate key");
  expect_error("rules:\n  - name: a\n    name: b\n    limits: [{rate: 1/s}]\n", "rules[0].name",
               "duplicate key");
  // Maps read without expect_map: the tier user table and the tier levels.
  expect_error("tiers: {users: {bob: pro, bob: free}}\n", "tiers.users.bob", "duplicate key");
  expect_error("tiers:\n  levels:\n    free: [{rate: 1/s}]\n    free: [{rate: 2/s}]\n",
               "tiers.levels.free", "duplicate key");
  // Keys are compared as written.
  EXPECT_NO_THROW(parse_config("tiers: {users: {bob: pro, Bob: free, '1': pro, '01': free}}\n"));
}

TEST(ConfigTest, KeysMustBeStrings) {
  expect_error("? [a, b]\n: 1\n", "", "keys must be strings");
  expect_error("tiers: {users: {? {a: 1} : pro}}\n", "tiers.users", "keys must be strings");
}

TEST(ConfigTest, TheDocumentIsOneMapping) {
  expect_error("- threads: 2\n", "", "mapping");
  expect_error("threads\n", "", "mapping");
  expect_error("threads: 2\n---\nthreads: 3\n", "", "one YAML document");
  EXPECT_NO_THROW(parse_config("---\nthreads: 2\n...\n"));
}

TEST(ConfigTest, ControlBytesInStringsAreRejected) {
  expect_error(kRules + "  - {name: c, match: {path: \"/api\\0/x\"}, limits: [{rate: 1/s}]}\n",
               "rules[2].match.path", "control character");
  expect_error(kRules +
                   "  - {name: c, identity: {type: header, header: \"X-User\\x01\"}, "
                   "limits: [{rate: 1/s}]}\n",
               "rules[2].identity.header", "control character");
  expect_error("store: {url: \"memory://\\0\"}\n", "store.url", "control character");
  expect_error("tiers: {users: {\"bob\\0\": pro}}\n", "tiers.users", "control character");
  const char raw_nul[] = "threads: 2\n\0x: 1\n";
  expect_error(std::string(raw_nul, sizeof raw_nul - 1), "", "NUL byte at line 2");
}

TEST(ConfigTest, DeepNestingIsRejected) {
  const auto nested = [](int depth) {
    return "rules: " + std::string(static_cast<std::size_t>(depth), '[') +
           std::string(static_cast<std::size_t>(depth), ']') + "\n";
  };
  std::string deepest = "rules";  // the first node below the 32nd level
  for (int i = 0; i < 32; ++i) deepest += "[0]";
  expect_error(nested(40), deepest, "nested too deeply");
  // Deep enough for yaml-cpp's own recursion guard: still a clear error, not a crash.
  for (int depth : {3000, 100'000}) {
    try {
      parse_config(nested(depth), "deep.yaml");
      ADD_FAILURE() << "no error at depth " << depth;
    } catch (const ConfigError& e) {
      EXPECT_NE(e.reason().find("nested too deeply"), std::string::npos) << e.what();
    }
  }
}

TEST(ConfigTest, AliasesAreExpandedWithinABound) {
  // Aliases are fine for sharing a policy between rules.
  const auto c = parse_config(R"(
rules:
  - {name: a, limits: &standard [{rate: 10/s}, ]}
  - {name: b, limits: *standard}
)");
  ASSERT_EQ(c.limiter.rules.size(), 2u);
  EXPECT_EQ(c.limiter.rules[1].limits[0].limit, c.limiter.rules[0].limits[0].limit);
  // A few hundred bytes that expand to 10^9 nodes ("billion laughs") are refused, quickly.
  std::string laughs = "rules:\n  - &a0 [x, x, x, x, x, x, x, x, x, x]\n";
  for (int i = 1; i < 9; ++i) {
    laughs += fmt::format("  - &a{} [", i);
    for (int k = 0; k < 10; ++k) laughs += fmt::format("{}*a{}", k == 0 ? "" : ", ", i - 1);
    laughs += "]\n";
  }
  try {
    parse_config(laughs, "laughs.yaml");
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_TRUE(e.field().starts_with("rules[")) << e.what();
    EXPECT_NE(e.reason().find("aliases expanded"), std::string::npos) << e.what();
  }
}

TEST(ConfigTest, IntegersAreDecimalWithoutSignOrSpaces) {
  for (auto bad : {"1e3", "' 5'", "'5 '", "0x10", "+5", "010", "5.0", "''", "1_000"}) {
    expect_error(fmt::format("threads: {}\n", bad), "threads", "must be a decimal integer");
  }
  expect_error("threads: 99999999999999999999\n", "threads", "between 1 and 1024");
  expect_error("store: {denied_cache_keys: -99999999999999999999}\n", "store.denied_cache_keys",
               "between 0 and");
  expect_error("listen: 127.0.0.1:0080\n", "listen", "decimal integer");
  EXPECT_EQ(parse_config("threads: 10\n").http.threads, 10);
  EXPECT_EQ(parse_config("store: {denied_cache_keys: 0}\n").denied_cache_keys, 0u);
}

TEST(ConfigTest, NumbersAreFiniteDecimals) {
  const std::string p = "rules[2].limits[0]";
  for (auto bad : {".nan", "nan", ".inf", "inf", "-.inf", "1e400", "1e-400", "0x10", "' 5'", "'5 '",
                   "+5", "''"}) {
    expect_error(
        kRules + fmt::format("  - {{name: c, limits: [{{capacity: {}, refill_rate: 1}}]}}\n", bad),
        p + ".capacity", "must be a number");
    expect_error(
        kRules + fmt::format("  - {{name: c, limits: [{{capacity: 5, refill_rate: {}}}]}}\n", bad),
        p + ".refill_rate", "must be a number");
  }
  for (auto bad : {"nan/s", "inf/s", "0x10/s", "' 5/s'", "+5/s", "1e400/s"}) {
    expect_error(kRules + fmt::format("  - {{name: c, limits: [{{rate: {}}}]}}\n", bad),
                 p + ".rate", "count must be a number");
  }
  // Finite but far too large: the limit's own bounds answer, on the rate.
  expect_error(kRules + "  - {name: c, limits: [{rate: 1e300/s}]}\n", p + ".rate", "at most");
  expect_error(kRules + "  - {name: c, limits: [{algorithm: fixed_window, rate: 1e300/1h}]}\n",
               p + ".rate", "at most");
  expect_error(
      kRules + "  - {name: c, limits: [{algorithm: fixed_window, limit: 1e300, window: 1h}]}\n",
      p + ".limit", "at most");
  const auto c =
      parse_config(kRules + "  - {name: c, limits: [{capacity: 1e3, refill_rate: 0.5}]}\n");
  EXPECT_EQ(c.limiter.rules[2].limits[0].limit, *algorithms::Limit::token_bucket(1000, 0.5));
}

TEST(ConfigTest, DurationsThatOverflowOrExceedTheirBoundAreRejected) {
  EXPECT_FALSE(parse_duration("1e30d"));
  EXPECT_FALSE(parse_duration("99999999999999999999d"));
  EXPECT_FALSE(parse_duration(std::string(400, '9') + "s"));
  EXPECT_FALSE(parse_duration("1e3s"));
  EXPECT_FALSE(parse_duration("104250d"));  // 2^53 µs is 104249.99 days
  EXPECT_EQ(parse_duration("1d"), 86'400'000'000);
  expect_error("http: {read_timeout: 2d}\n", "http.read_timeout", "at most 1d");
  expect_error("store: {connect_timeout: 100000d}\n", "store.connect_timeout", "at most 1d");
  expect_error("failure_policy: {deny_retry_after: 25h}\n", "failure_policy.deny_retry_after",
               "at most 1d");
  EXPECT_EQ(parse_config("http: {read_timeout: 1d}\n").http.read_timeout, 86'400'000'000);
  // Windows may be long; the limit's own bound (capacity × window) answers.
  EXPECT_NO_THROW(parse_config(
      "rules: [{name: a, limits: [{algorithm: fixed_window, limit: 10, window: 30d}]}]\n"));
}

TEST(ConfigTest, DecisionLogBudgetIsBounded) {
  expect_error("logging: {decisions: {lines_per_second: 1e300}}\n",
               "logging.decisions.lines_per_second", "between 0.001 and 1000000");
  expect_error("logging: {decisions: {lines_per_second: 1e-300}}\n",
               "logging.decisions.lines_per_second", "between 0.001 and 1000000");
  expect_error("logging: {decisions: {burst: 1e300}}\n", "logging.decisions.burst",
               "between 1 and 1000000");
}

TEST(ConfigTest, ListenHostIsABareAddress) {
  expect_error("listen: 1.2.3.4:80:90\n", "listen", "host must be an IP address");
  expect_error("listen: '[::1%lo]:80'\n", "listen", "host must be an IP address");
  expect_error("listen: '[1.2.3.4]:80'\n", "listen", "host must be an IP address");
  EXPECT_EQ(parse_config("listen: '[::1]:80'\n").http.host, "::1");
  EXPECT_EQ(parse_config("listen: localhost:80\n").http.host, "localhost");
}

TEST(ConfigTest, HeaderNamesAndMethodsAreHttpTokens) {
  // A header name with a space or a colon never matches: every request would fall back.
  expect_error(
      kRules + "  - {name: c, identity: {type: header, header: 'X User'}, limits: [{rate: 1/s}]}\n",
      "rules[2].identity.header", "HTTP header name");
  expect_error(
      kRules +
          "  - {name: c, identity: {type: api_key, header: 'X-Key:'}, limits: [{rate: 1/s}]}\n",
      "rules[2].identity.header", "HTTP header name");
  expect_error("tiers: {header: ''}\n", "tiers.header", "HTTP header name");
  expect_error(kRules + "  - {name: c, match: {methods: ['GET ']}, limits: [{rate: 1/s}]}\n",
               "rules[2].match.methods", "not an HTTP method");
  expect_error(kRules + "  - {name: c, match: {methods: ''}, limits: [{rate: 1/s}]}\n",
               "rules[2].match.methods", "not an HTTP method");
  const auto c = parse_config(kRules +
                              "  - {name: c, match: {methods: [get, M-SEARCH]}, identity: "
                              "{type: header, header: X-Tenant_ID}, limits: [{rate: 1/s}]}\n");
  ASSERT_EQ(c.middleware.matches.size(), 3u);
  EXPECT_EQ(c.middleware.matches[2].rule, "c");
  EXPECT_EQ(c.middleware.matches[2].methods, (std::vector<std::string>{"GET", "M-SEARCH"}));
  EXPECT_EQ(c.limiter.rules[2].identity.header, "X-Tenant_ID");
}

TEST(ConfigTest, TrustedProxyWithOverflowingPrefixLengthIsRejected) {
  expect_error("trusted_proxies: [127.0.0.1/99999999999999999999]\n", "trusted_proxies[0]",
               "prefix length");
  expect_error("trusted_proxies: [10.0.0.0/8, '10.0.0.0:80/8']\n", "trusted_proxies[1]",
               "not an IP address");
}

TEST(ConfigTest, IdentityDefaultMustMakeAValidIdentity) {
  const auto rule = [](const std::string& identity) {
    return kRules + "  - {name: c, match: {path: /c}, identity: {type: header" + identity +
           "}, limits: [{rate: 10/s}]}\n";
  };
  const std::string p = "rules[2].identity.default";
  expect_error(rule(", default: " + std::string(limiter::kMaxIdentityBytes + 1, 'a')), p,
               "longer than 256 bytes");
  // "user:" + 252 bytes is longer than an identity may be.
  expect_error(rule(", default: " + std::string(252, 'a')), p, "longer than 256 bytes");
  expect_error(rule(", prefix: tenant, default: " + std::string(250, 'a')), p,
               "longer than 256 bytes");
  // Bytes escaped in keys count escaped: '{' takes 3.
  expect_error(rule(", default: '" + std::string(100, '{') + "'"), p, "longer than 256 bytes");
  expect_error(rule(", default: \"anon\\x7f\""), p, "control character");

  // The longest default that loads is one every request without the header can use.
  auto c = parse_config(rule(", default: " + std::string(251, 'a')));
  store::MemoryStore store;
  limiter::Limiter limiter(c.limiter, store);
  Middleware middleware(limiter, c.middleware);
  http::Request request;
  request.method = "GET";
  request.target = "/c";
  request.peer_address = "192.0.2.7";
  const auto result = middleware.handle_sync(request);
  EXPECT_EQ(result.status, 200) << result.body;
  EXPECT_TRUE(result.admitted);
}

// Quotas per day, month or year load for every window algorithm (limits up to 2^40 per window
// of up to 2^45 µs); beyond those bounds the limit is rejected with the bound.
TEST(ConfigTest, DailyMonthlyAndYearlyQuotasLoad) {
  const auto c = parse_config(R"(
rules:
  - name: daily
    limits: [{algorithm: fixed_window, rate: 100000/1d}]
  - name: monthly
    limits: [{algorithm: sliding_window_counter, limit: 1000000, window: 30d}]
  - name: daily_log
    limits: [{algorithm: sliding_window_log, limit: 100000, window: 1d}]
  - name: yearly
    limits: [{algorithm: sliding_window_counter, limit: 1099511627776, window: 365d}]
)",
                              "q.yaml");
  constexpr Micros day = 86'400 * kMicrosPerSecond;
  const auto& rules = c.limiter.rules;
  ASSERT_EQ(rules.size(), 4u);
  EXPECT_EQ(rules[0].limits[0].limit.capacity, 100'000);
  EXPECT_EQ(rules[0].limits[0].limit.period, day);
  EXPECT_EQ(rules[1].limits[0].limit.capacity, 1'000'000);
  EXPECT_EQ(rules[1].limits[0].limit.period, 30 * day);
  EXPECT_EQ(rules[2].limits[0].limit.period, day);
  EXPECT_EQ(rules[3].limits[0].limit.capacity, std::int64_t{1} << 40);
  EXPECT_EQ(rules[3].limits[0].limit.period, 365 * day);
  expect_error(
      kRules + "  - {name: c, limits: [{algorithm: fixed_window, rate: 1099511627777/1d}]}\n",
      "rules[2].limits[0].rate", "at most 2^40");
  expect_error(kRules + "  - {name: c, limits: [{algorithm: fixed_window, rate: 10/500d}]}\n",
               "rules[2].limits[0].rate", "at most 2^45 microseconds");
}

// Found by the config fuzzer: yaml-cpp 0.7's LoadAll never returns on this text (the parser
// yields empty documents without advancing); the loader looks at two documents at most.
TEST(ConfigTest, MalformedTextThatNeverEndsAsDocumentsIsRejected) {
  expect_error(
      ",ules:\n  - name: login\n    limits: []\n  - namelogp1h}\n    ip_limits: [{rate: 2/s}]\n",
      "", "several YAML documents");
  expect_error(",", "", "several YAML documents");
}

TEST(ConfigTest, ShippedProxyExampleLoads) {
  const auto c = load_config(std::string(RATEKEEPER_SOURCE_DIR) + "/config/proxy.yaml");
  ASSERT_TRUE(c.upstream.has_value());
  EXPECT_EQ(c.upstream->port, 8000);
  EXPECT_EQ(c.admin.port, 9090);
  ASSERT_EQ(c.limiter.rules.size(), 4U);
  EXPECT_EQ(c.limiter.rules[2].on_limit, limiter::OnLimit::delay);
  EXPECT_TRUE(c.middleware.matches[3].unmatched);
}

TEST(ConfigTest, UpstreamAndAdminSectionsFillTheProxyOptions) {
  const auto c = parse_config(R"(
listen: 127.0.0.1:8080
upstream:
  url: http://app.internal:8000
  connect_timeout: 250ms
  timeout: 3s
  max_idle_connections: 7
  idle_timeout: 90s
  buffer_bytes: 16384
  lowercase_path: true
admin: {listen: 127.0.0.1:9191}
)");
  ASSERT_TRUE(c.upstream.has_value());
  EXPECT_EQ(c.upstream->host, "app.internal");
  EXPECT_EQ(c.upstream->port, 8000);
  EXPECT_EQ(c.upstream->connect_timeout, 250'000);
  EXPECT_EQ(c.upstream->timeout, 3'000'000);
  EXPECT_EQ(c.upstream->max_idle, 7U);
  EXPECT_EQ(c.upstream->idle_timeout, 90'000'000);
  EXPECT_EQ(c.upstream->buffer_size, 16384U);
  EXPECT_TRUE(c.upstream->lowercase_path);
  EXPECT_EQ(c.admin.host, "127.0.0.1");
  EXPECT_EQ(c.admin.port, 9191);
}

// upstream.upgrades: true (WebSocket), false, or the protocols relayed; never h2c.
TEST(ConfigTest, UpgradesAreWebSocketOrTheProtocolsListedButNeverH2c) {
  const auto plain = parse_config("upstream: {url: 'http://10.0.0.5'}\n");
  EXPECT_TRUE(plain.upstream->upgrades);
  EXPECT_EQ(plain.upstream->upgrade_protocols, std::vector<std::string>{"websocket"});
  const auto listed = parse_config("upstream: {url: 'http://10.0.0.5', upgrades: [websocket, chat]}\n");
  EXPECT_TRUE(listed.upstream->upgrades);
  EXPECT_EQ(listed.upstream->upgrade_protocols, (std::vector<std::string>{"websocket", "chat"}));
  EXPECT_FALSE(parse_config("upstream: {url: 'http://10.0.0.5', upgrades: false}\n").upstream->upgrades);
  EXPECT_FALSE(parse_config("upstream: {url: 'http://10.0.0.5', upgrades: []}\n").upstream->upgrades);
  expect_error("upstream: {url: 'http://10.0.0.5', upgrades: [websocket, H2C]}\n", "upstream.upgrades",
               "never meet the rules");
  expect_error("upstream: {url: 'http://10.0.0.5', upgrades: [websocket/13]}\n", "upstream.upgrades",
               "not a protocol name");
}

TEST(ConfigTest, WithoutUpstreamNothingIsProxied) {
  const auto c = parse_config("listen: 127.0.0.1:8080\n");
  EXPECT_FALSE(c.upstream.has_value());
  // The defaults an upstream gets when only its url is given.
  const auto d = parse_config("upstream: {url: 'http://10.0.0.5'}\n");
  ASSERT_TRUE(d.upstream.has_value());
  EXPECT_EQ(d.upstream->port, 80);
  EXPECT_EQ(d.upstream->timeout, 60 * kMicrosPerSecond);
  EXPECT_EQ(d.admin.host, "127.0.0.1");
  EXPECT_EQ(d.admin.port, 9090);
}

TEST(ConfigTest, UpstreamErrorsNameTheField) {
  expect_error("upstream: {timeout: 1s}\n", "upstream.url", "required");
  expect_error("upstream: {url: 'wss://app:443'}\n", "upstream.url", "expected http://");
  expect_error("upstream: {url: 'http://app', tls: {ca_file: ca.pem}}\n", "upstream.tls", "https://");
  expect_error("upstream: {url: 'https://app', tls: {ca_file: /nonexistent/ca.pem}}\n", "upstream.tls",
               "ca_file");
  expect_error("upstream: {url: 'http://app', tunnel_idle_timeout: 0s}\n", "upstream.tunnel_idle_timeout",
               "at least");
  expect_error("tls: {key_file: k.pem}\n", "tls.cert_file", "required");
  expect_error("tls: {cert_file: /nonexistent/c.pem, key_file: /nonexistent/k.pem}\n", "tls", "cert_file");
  expect_error("tls: {cert_file: c.pem, key_file: k.pem, min_version: '1.1'}\n", "tls.min_version",
               "1.2 or 1.3");
  expect_error("upstream: {url: 'http://app:8000/base'}\n", "upstream.url", "path");
  expect_error("upstream: {url: 'http://app:0'}\n", "upstream.url", "port");
  expect_error("upstream: {url: 'http://app', pool: 3}\n", "upstream.pool", "unknown field");
  expect_error("upstream: {url: 'http://app', buffer_bytes: 10}\n", "upstream.buffer_bytes",
               "between");
  expect_error("upstream: {url: 'http://app', timeout: 0s}\n", "upstream.timeout", "at least");
  expect_error("admin: {listen: 127.0.0.1:9090}\n", "admin", "only with an upstream");
  expect_error("upstream: {url: 'http://app'}\nadmin: {}\n", "admin.listen", "required");
  expect_error("listen: 0.0.0.0:8080\nupstream: {url: 'http://app'}\nadmin: {listen: "
               "127.0.0.1:8080}\n",
               "admin.listen", "must differ from listen");
}

// store.tls: files resolved against the configuration's directory and loaded when the file
// is, so a missing one is an error naming its field; only with a TLS url.
TEST(Config, StoreTlsOptions) {
  const auto dir = std::filesystem::temp_directory_path() / fmt::format("ratekeeper-config-tls-{}", ::getpid());
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(testing::tls_certs().ca, dir / "ca.pem", std::filesystem::copy_options::overwrite_existing);
  const auto source = (dir / "ratekeeper.yaml").string();
  auto c = parse_config(
      "store:\n  url: rediss://redis.example:6380\n  tls: {ca_file: ca.pem, server_name: redis.example, verify: true}\n",
      source);
  EXPECT_EQ(c.store.tls.ca_file, (dir / "ca.pem").string());
  EXPECT_EQ(c.store.tls.server_name, "redis.example");
  EXPECT_TRUE(c.store.tls.verify);
  auto off = parse_config("store: {url: 'rediss-cluster://a:1', tls: {verify: false}}\n", source);
  EXPECT_FALSE(off.store.tls.verify);

  expect_error("store: {url: 'rediss://h:1', tls: {ca_file: /nonexistent/ca.pem}}\n", "store.tls",
               "tls ca_file '/nonexistent/ca.pem': cannot load");
  expect_error("store: {url: 'rediss://h:1', tls: {cert_file: /x.crt}}\n", "store.tls.key_file",
               "go together");
  expect_error("store: {url: 'redis://h:1', tls: {verify: false}}\n", "store.tls", "need a TLS store url");
  expect_error("store: {url: 'rediss://h:1', tls: {ca: /x}}\n", "store.tls.ca", "unknown field");
  expect_error("store: {url: 'rediss://h:1', tls: {server_name: ''}}\n", "store.tls.server_name", "must not be empty");
  std::filesystem::remove_all(dir);
}

TEST(ConfigTest, TheOverridesRefreshIsADurationWithinItsBounds) {
  EXPECT_EQ(parse_config(kRules, "test.yaml").overrides_refresh, 1 * kMicrosPerSecond);
  EXPECT_EQ(parse_config("overrides: {refresh: 250ms}\n" + kRules, "test.yaml").overrides_refresh,
            250 * kMicrosPerMilli);
  expect_error("overrides: {refresh: 1ms}\n" + kRules, "overrides.refresh", "at least");
  expect_error("overrides: {refresh: 2h}\n" + kRules, "overrides.refresh", "at most");
  expect_error("overrides: {refresh: soon}\n" + kRules, "overrides.refresh", "");
  expect_error("overrides: {every: 1s}\n" + kRules, "overrides.every", "unknown field");
}

TEST(ConfigTest, ARuleWithMatchFalseIsCheckedByNameOnly) {
  const auto c = parse_config(R"(
rules:
  - {name: everywhere, limits: [{rate: 1/s}]}
  - {name: by_name, match: false, limits: [{rate: 1/s}]}
)", "test.yaml");
  ASSERT_EQ(c.limiter.rules.size(), 2u);
  ASSERT_EQ(c.middleware.matches.size(), 1u);
  EXPECT_EQ(c.middleware.matches[0].rule, "everywhere");
  expect_error("rules:\n  - {name: a, match: true, limits: [{rate: 1/s}]}\n", "rules[0].match", "or false");
  expect_error("rules:\n  - {name: a, match: sometimes, limits: [{rate: 1/s}]}\n", "rules[0].match", "");
}

}  // namespace
}  // namespace ratekeeper::server
