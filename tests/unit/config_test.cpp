// Loading the YAML configuration: the shipped example, defaults, and errors that name the
// file, the field path and the reason.

#include "ratekeeper/http/config.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "ratekeeper/store/memory_store.hpp"

namespace ratekeeper::http {
namespace {

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
  EXPECT_EQ(c.listen.port, 8080);
  const auto& rules = c.limiter.rules;
  auto find = [&](std::string_view name) -> const limiter::Rule& {
    for (const auto& r : rules) {
      if (r.name == name) return r;
    }
    throw std::runtime_error("no rule " + std::string(name));
  };
  const auto& data = find("api_data");
  EXPECT_EQ(data.match.path, "/api/data");
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
  EXPECT_EQ(login.match.methods, std::vector<std::string>{"POST"});
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
  EXPECT_TRUE(c.headers.draft);
  EXPECT_FALSE(c.headers.legacy);
  EXPECT_TRUE(c.metrics_enabled);
}

TEST(ConfigTest, EmptyListsMayBeWrittenAsNothing) {
  const auto c = parse_config("rules:\ntrusted_proxies:\n", "null.yaml");
  EXPECT_TRUE(c.limiter.rules.empty());
  EXPECT_TRUE(c.proxies.empty());
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
trusted_proxies: [10.0.0.0/8, "2001:db8::/32"]
headers: {draft: false, legacy: true}
logging: {level: debug, decisions: {allow_sample_rate: 0.5, lines_per_second: 10, burst: 20}}
metrics: {enabled: false}
http: {max_header_bytes: 4096, max_body_bytes: 1000, read_timeout: 5s, max_pipelined: 4}
rules:
  - name: r
    limits: [{rate: 10/s}]
)",
                              "full.yaml");
  EXPECT_EQ(c.listen.host, "::1");
  EXPECT_EQ(c.listen.port, 9090);
  EXPECT_EQ(c.threads, 4);
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
  EXPECT_TRUE(c.proxies.contains(*limiter::parse_ip("10.2.3.4")));
  EXPECT_TRUE(c.proxies.contains(*limiter::parse_ip("2001:db8::5")));
  EXPECT_FALSE(c.headers.draft);
  EXPECT_TRUE(c.headers.legacy);
  EXPECT_EQ(c.logging.level, "debug");
  EXPECT_DOUBLE_EQ(c.limiter.decision_log.allow_sample_rate, 0.5);
  EXPECT_FALSE(c.metrics_enabled);
  EXPECT_EQ(c.http.max_header_bytes, 4096u);
  EXPECT_EQ(c.http.read_timeout, 5 * kMicrosPerSecond);
  EXPECT_EQ(c.http.max_pipelined, 4);
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
  expect_error(kRules + "  - {name: c, limits: [{algorithm: sliding_window_log, rate: 200000/h}]}\n",
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
  expect_error(kRules + "  - {name: c, limits: [{algorithm: fixed_window, rate: 1099511627777/1d}]}\n",
               "rules[2].limits[0].rate", "at most 2^40");
  expect_error(kRules + "  - {name: c, limits: [{algorithm: fixed_window, rate: 10/500d}]}\n",
               "rules[2].limits[0].rate", "at most 2^45 microseconds");
}

}  // namespace
}  // namespace ratekeeper::http
