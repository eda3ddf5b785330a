// Loading the domain files of the gRPC rate limit service (envoyproxy/ratelimit's format and
// ratekeeper's additions): every field, the errors (file, field path, reason), the directory,
// and the limiter rules the domains become.

#include "rls_config.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <string>

#include "ratekeeper/limiter/limiter.hpp"
#include "ratekeeper/limiter/rule.hpp"

namespace ratekeeper::server {
namespace {

using algorithms::Algorithm;
using limiter::FailureMode;
using rls::Unit;

// Expects parse_rls_domain(yaml) to fail on `field` with a reason containing `reason`.
void expect_error(const std::string& yaml, const std::string& field, const std::string& reason) {
  try {
    parse_rls_domain(yaml, "domain.yaml");
    ADD_FAILURE() << "no error for field '" << field << "' in\n" << yaml;
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.file(), "domain.yaml");
    EXPECT_EQ(e.field(), field) << e.what();
    EXPECT_NE(e.reason().find(reason), std::string::npos) << e.what();
    const std::string what = e.what();
    EXPECT_NE(what.find("domain.yaml"), std::string::npos);
    EXPECT_NE(what.find(field), std::string::npos);
  }
}

// A descriptor list of one descriptor `d` (a flow mapping) in domain d.
std::string one(const std::string& d) { return "domain: d\ndescriptors:\n  - " + d + "\n"; }

TEST(RlsConfigTest, ReadsEveryField) {
  const auto domain = parse_rls_domain(R"(
domain: api
on_store_error: deny
descriptors:
  - key: remote_address
    rate_limit:
      name: per_ip
      unit: Second
      requests_per_unit: 10
  - key: remote_address
    value: 50.0.0.5
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: user
    on_store_error: local
    detailed_metric: true
    value_to_metric: true
    rate_limits:
      - {name: burst, unit: second, requests_per_unit: 5, algorithm: token_bucket}
      - {unit: HOUR, requests_per_unit: 1000, algorithm: sliding_window_counter}
    descriptors:
      - key: path
        value: /admin/*
        shadow_mode: true
        on_store_error: error
        rate_limit:
          unit: minute
          requests_per_unit: 3
          algorithm: sliding_window_log
          replaces: [{name: per_ip}, {name: other}]
      - key: ldap
        rate_limit: {unlimited: true}
)",
                                       "api.yaml");
  EXPECT_EQ(domain.name, "api");
  EXPECT_EQ(domain.source, "api.yaml");
  EXPECT_EQ(domain.on_store_error, FailureMode::deny);
  ASSERT_EQ(domain.root.descriptors.size(), 3u);

  const auto& ip = domain.root.descriptors[0];
  EXPECT_EQ(ip.key, "remote_address");
  EXPECT_EQ(ip.value, "");
  EXPECT_FALSE(ip.wildcard);
  EXPECT_EQ(ip.on_store_error, FailureMode::deny);  // the domain's
  ASSERT_EQ(ip.limits.size(), 1u);
  EXPECT_EQ(ip.limits[0].name, "per_ip");
  EXPECT_EQ(ip.limits[0].requests_per_unit, 10u);
  EXPECT_EQ(ip.limits[0].unit, Unit::second);
  EXPECT_EQ(ip.limits[0].limit, (algorithms::Limit{Algorithm::fixed_window, 10, kMicrosPerSecond}));
  EXPECT_FALSE(ip.unlimited);
  EXPECT_FALSE(ip.shadow_mode);
  EXPECT_TRUE(ip.replaces.empty());

  const auto& blocked = domain.root.descriptors[1];
  EXPECT_EQ(blocked.value, "50.0.0.5");
  ASSERT_EQ(blocked.limits.size(), 1u);
  EXPECT_EQ(blocked.limits[0].requests_per_unit, 0u);

  const auto& user = domain.root.descriptors[2];
  EXPECT_EQ(user.on_store_error, FailureMode::local);
  EXPECT_TRUE(user.detailed_metric);
  EXPECT_TRUE(user.value_to_metric);
  ASSERT_EQ(user.limits.size(), 2u);
  EXPECT_EQ(user.limits[0].name, "burst");
  // A token bucket of 5 refilled over a second: one every 200 ms.
  EXPECT_EQ(user.limits[0].limit, (algorithms::Limit{Algorithm::token_bucket, 5, 200'000}));
  EXPECT_EQ(user.limits[1].name, "");
  EXPECT_EQ(user.limits[1].unit, Unit::hour);
  EXPECT_EQ(user.limits[1].limit,
            (algorithms::Limit{Algorithm::sliding_window_counter, 1000, 3600 * kMicrosPerSecond}));
  ASSERT_EQ(user.descriptors.size(), 2u);

  const auto& admin = user.descriptors[0];
  EXPECT_EQ(admin.value, "/admin/*");
  EXPECT_TRUE(admin.wildcard);
  EXPECT_TRUE(admin.shadow_mode);
  EXPECT_EQ(admin.on_store_error, std::nullopt);  // error: the gRPC call fails
  EXPECT_EQ(admin.replaces, (std::vector<std::string>{"per_ip", "other"}));
  EXPECT_EQ(admin.limits[0].limit,
            (algorithms::Limit{Algorithm::sliding_window_log, 3, 60 * kMicrosPerSecond}));

  const auto& ldap = user.descriptors[1];
  EXPECT_TRUE(ldap.unlimited);
  EXPECT_TRUE(ldap.limits.empty());
  EXPECT_EQ(ldap.on_store_error, FailureMode::local);  // its parent's
}

TEST(RlsConfigTest, DefaultsAreEnvoyproxyRatelimitsBehaviour) {
  const auto domain = parse_rls_domain(R"(
domain: d
descriptors:
  - key: k
    rate_limit: {unit: day, requests_per_unit: 5}
  - key: nests
    descriptors:
  - key: placeholder
)");
  EXPECT_EQ(domain.source, "<inline>");
  EXPECT_EQ(domain.on_store_error, std::nullopt);
  const auto& k = domain.root.descriptors[0];
  EXPECT_EQ(k.on_store_error, std::nullopt);
  EXPECT_EQ(k.limits[0].limit.algorithm, Algorithm::fixed_window);
  EXPECT_EQ(k.limits[0].limit.period, 86'400 * kMicrosPerSecond);
  EXPECT_TRUE(domain.root.descriptors[1].descriptors.empty());
  EXPECT_TRUE(domain.root.descriptors[2].limits.empty());
  EXPECT_FALSE(domain.root.descriptors[2].unlimited);
}

TEST(RlsConfigTest, NullFieldsReadAsEnvoyproxyRatelimitReadsThem) {
  // A null value is no value, a null rate_limit no limit, null descriptors none.
  const auto domain = parse_rls_domain(R"(
domain: d
descriptors:
  - key: k
    value:
    rate_limit:
    descriptors:
)");
  const auto& k = domain.root.descriptors[0];
  EXPECT_EQ(k.value, "");
  EXPECT_TRUE(k.limits.empty());
  EXPECT_FALSE(k.unlimited);
  EXPECT_TRUE(k.descriptors.empty());
}

TEST(RlsConfigTest, NumbersAndStarsAsValues) {
  const auto domain = parse_rls_domain(R"(
domain: 42
descriptors:
  - {key: 7, value: 2061111111, rate_limit: {unit: second, requests_per_unit: 1}}
  - {key: k, value: "*", rate_limit: {unit: second, requests_per_unit: 1}}
)");
  EXPECT_EQ(domain.name, "42");
  EXPECT_EQ(domain.root.descriptors[0].key, "7");
  EXPECT_EQ(domain.root.descriptors[0].value, "2061111111");
  EXPECT_TRUE(domain.root.descriptors[1].wildcard);
}

TEST(RlsConfigTest, ReadsQuotaModeShareThresholdAndMetadata) {
  // As envoyproxy/ratelimit's examples/ratelimit/config/example.yaml writes them.
  const auto domain = parse_rls_domain(R"(
domain: d
descriptors:
  - key: service
    value: service_1
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
    metadata:
      service_with_quota:
        name: "service_1"
        tags: [a, 1, {b: null}]
  - key: files
    value: files/*
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: mid
    value: a*b*c
    share_threshold: false
    metadata:
)");
  const auto& service = domain.root.descriptors[0];
  EXPECT_TRUE(service.quota_mode);
  EXPECT_FALSE(service.share_threshold);
  const auto& files = domain.root.descriptors[1];
  EXPECT_FALSE(files.quota_mode);
  EXPECT_TRUE(files.share_threshold);
  EXPECT_TRUE(files.wildcard);
  const auto& mid = domain.root.descriptors[2];
  EXPECT_TRUE(mid.wildcard);  // a '*' anywhere makes a wildcard
  EXPECT_FALSE(mid.share_threshold);
}

TEST(RlsConfigTest, LimitsForEveryUnitAndAlgorithm) {
  struct Case {
    std::string rate_limit;
    algorithms::Limit limit;
  };
  constexpr Micros day = 86'400 * kMicrosPerSecond;
  const Case cases[] = {
      {"{unit: week, requests_per_unit: 7}", {Algorithm::fixed_window, 7, 7 * day}},
      {"{unit: month, requests_per_unit: 30}", {Algorithm::fixed_window, 30, 30 * day}},
      {"{unit: year, requests_per_unit: 1, algorithm: sliding_window_counter}",
       {Algorithm::sliding_window_counter, 1, 365 * day}},
      {"{unit: year, requests_per_unit: 4294967295}",
       {Algorithm::fixed_window, 4'294'967'295, 365 * day}},
      // Token buckets refill one request every unit / requests_per_unit, rounded.
      {"{unit: second, requests_per_unit: 3, algorithm: token_bucket}",
       {Algorithm::token_bucket, 3, 333'333}},
      {"{unit: minute, requests_per_unit: 7, algorithm: token_bucket}",
       {Algorithm::token_bucket, 7, 8'571'429}},
      {"{unit: second, requests_per_unit: 1000000, algorithm: token_bucket}",
       {Algorithm::token_bucket, 1'000'000, 1}},
      {"{unit: year, requests_per_unit: 4294967295, algorithm: token_bucket}",
       {Algorithm::token_bucket, 4'294'967'295, 7'343}},
      {"{unit: minute, requests_per_unit: 100000, algorithm: sliding_window_log}",
       {Algorithm::sliding_window_log, 100'000, 60 * kMicrosPerSecond}},
  };
  for (const auto& c : cases) {
    const auto domain = parse_rls_domain(one("{key: k, rate_limit: " + c.rate_limit + "}"));
    EXPECT_EQ(domain.root.descriptors[0].limits.at(0).limit, c.limit) << c.rate_limit;
  }
}

TEST(RlsConfigTest, ErrorsNameTheFileTheFieldAndTheReason) {
  struct Case {
    std::string yaml;
    std::string field;
    std::string reason;
  };
  const std::string rl = "rate_limit: {unit: second, requests_per_unit: 1}";
  const Case cases[] = {
      // The document and the domain.
      {"", "domain", "required field missing"},
      {"descriptors: []\n", "domain", "required field missing"},
      {"domain: \"\"\n", "domain", "must not be empty"},
      {"domain:\n", "domain", "must not be empty"},
      {"domain: [a]\n", "domain", "must be a string"},
      {"- domain: d\n", "", "must be a mapping"},
      {"domain: d\ndomian: e\n", "domian", "unknown field"},
      {"domain: d\non_store_error: open\n", "on_store_error", "must be allow, deny, local or error"},
      {"domain: d\ndescriptors: {key: a}\n", "descriptors", "must be a list"},
      {"domain: d\ndescriptors: [a]\n", "descriptors[0]", "must be a mapping"},
      // Descriptors.
      {one("{value: v, " + rl + "}"), "descriptors[0].key", "required field missing"},
      {one("{key: '', " + rl + "}"), "descriptors[0].key", "must not be empty"},
      {one("{key: a, value: [v]}"), "descriptors[0].value", "must be a string"},
      {one("{key: a, unit: second}"), "descriptors[0].unit", "unknown field"},
      {one("{key: a, shadow_mode: yes}"), "descriptors[0].shadow_mode", "must be true or false"},
      {one("{key: a, detailed_metric: 1}"), "descriptors[0].detailed_metric", "true or false"},
      {one("{key: a, share_threshold: true, value: x}"), "descriptors[0].share_threshold",
       "only with a wildcard value (holding a '*'): 'x' is an exact value"},
      {one("{key: a, reserve: true}"), "descriptors[0].reserve", "only for a descriptor with a rate_limit"},
      {one("{key: a, reserve: 1, " + rl + "}"), "descriptors[0].reserve", "true or false"},
      {one("{key: a, reserve: true, shadow_mode: true, " + rl + "}"), "descriptors[0].reserve",
       "not with shadow_mode or quota_mode"},
      {one("{key: a, reserve: true, rate_limit: {unit: second, requests_per_unit: 5, algorithm: "
           "sliding_window_log}}"),
       "descriptors[0].reserve", "needs fixed_window or token_bucket limits"},
      {one("{key: a, share_threshold: true}"), "descriptors[0].share_threshold",
       "the descriptor has no value"},
      {one("{key: a, quota_mode: 1}"), "descriptors[0].quota_mode", "true or false"},
      {one("{key: a, metadata: [x]}"), "descriptors[0].metadata", "must be a mapping"},
      {one("{key: a, metadata: text}"), "descriptors[0].metadata", "must be a mapping"},
      {one("{key: a, on_store_error: fail}"), "descriptors[0].on_store_error",
       "must be allow, deny, local or error, got 'fail'"},
      {one("{key: a, descriptors: [{key: b, descriptors: 3}]}"),
       "descriptors[0].descriptors[0].descriptors", "must be a list"},
      {"domain: d\ndescriptors:\n  - {key: a, value: v}\n  - {key: a, value: v}\n",
       "descriptors[1]", "duplicate descriptor: key 'a' value 'v' is also descriptors[0]"},
      {"domain: d\ndescriptors:\n  - {key: a}\n  - {key: b}\n  - {key: a}\n", "descriptors[2]",
       "key 'a' without value is also descriptors[0]"},
      {"domain: d\ndescriptors:\n  - {key: a, value: 'x*'}\n  - {key: a, value: 'x*'}\n",
       "descriptors[1]", "duplicate descriptor"},
      {"domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - {key: b}\n"
       "      - {key: b}\n",
       "descriptors[0].descriptors[1]", "duplicate descriptor"},
      // rate_limit.
      {one("{key: a, rate_limit: 10/s}"), "descriptors[0].rate_limit", "must be a mapping"},
      {one("{key: a, rate_limit: {unit: second, requests_per_unit: 1, burst: 2}}"),
       "descriptors[0].rate_limit.burst", "unknown field"},
      {one("{key: a, rate_limit: {requests_per_unit: 1}}"), "descriptors[0].rate_limit.unit",
       "required field missing"},
      {one("{key: a, rate_limit: {}}"), "descriptors[0].rate_limit.unit", "required field missing"},
      {one("{key: a, rate_limit: {unit: fortnight, requests_per_unit: 1}}"),
       "descriptors[0].rate_limit.unit", "invalid rate limit unit 'fortnight'"},
      {one("{key: a, rate_limit: {unit: unknown, requests_per_unit: 1}}"),
       "descriptors[0].rate_limit.unit", "invalid rate limit unit 'unknown'"},
      {one("{key: a, rate_limit: {unit: '', requests_per_unit: 1}}"),
       "descriptors[0].rate_limit.unit", "invalid rate limit unit ''"},
      {one("{key: a, rate_limit: {unit: second}}"), "descriptors[0].rate_limit.requests_per_unit",
       "required field missing"},
      {one("{key: a, rate_limit: {unit: second, requests_per_unit: -1}}"),
       "descriptors[0].rate_limit.requests_per_unit", "must be between 0 and 4294967295"},
      {one("{key: a, rate_limit: {unit: second, requests_per_unit: 4294967296}}"),
       "descriptors[0].rate_limit.requests_per_unit", "must be between 0 and 4294967295"},
      {one("{key: a, rate_limit: {unit: second, requests_per_unit: ten}}"),
       "descriptors[0].rate_limit.requests_per_unit", "must be a decimal integer"},
      {one("{key: a, rate_limit: {unit: second, requests_per_unit: 1.5}}"),
       "descriptors[0].rate_limit.requests_per_unit", "must be a decimal integer"},
      {one("{key: a, rate_limit: {unit: second, requests_per_unit: 1, algorithm: leaky}}"),
       "descriptors[0].rate_limit.algorithm", "unknown algorithm 'leaky'"},
      {one("{key: a, rate_limit: {unit: minute, requests_per_unit: 100001, algorithm: "
           "sliding_window_log}}"),
       "descriptors[0].rate_limit.requests_per_unit", "sliding_window_log keeps one entry"},
      {one("{key: a, rate_limit: {unit: second, requests_per_unit: 1000001, algorithm: "
           "token_bucket}}"),
       "descriptors[0].rate_limit.requests_per_unit",
       "at most one request per microsecond: at most 1000000 per second, got 1000001"},
      {one("{key: a, rate_limit: {unit: second, requests_per_unit: 1, unlimited: maybe}}"),
       "descriptors[0].rate_limit.unlimited", "must be true or false"},
      {one("{key: a, rate_limit: {unlimited: true, unit: second}}"),
       "descriptors[0].rate_limit.unit", "not with unlimited: true"},
      {one("{key: a, rate_limit: {unlimited: true, requests_per_unit: 5}}"),
       "descriptors[0].rate_limit.requests_per_unit", "not with unlimited: true"},
      {one("{key: a, rate_limit: {unlimited: true, algorithm: token_bucket}}"),
       "descriptors[0].rate_limit.algorithm", "not with unlimited: true"},
      // replaces.
      {one("{key: a, rate_limit: {unit: second, requests_per_unit: 1, replaces: x}}"),
       "descriptors[0].rate_limit.replaces", "must be a list"},
      {one("{key: a, rate_limit: {unit: second, requests_per_unit: 1, replaces: [{}]}}"),
       "descriptors[0].rate_limit.replaces[0].name", "required field missing"},
      {one("{key: a, rate_limit: {unit: second, requests_per_unit: 1, replaces: [{name: ''}]}}"),
       "descriptors[0].rate_limit.replaces[0].name", "must not be empty"},
      {one("{key: a, rate_limit: {unit: second, requests_per_unit: 1, replaces: [{nme: x}]}}"),
       "descriptors[0].rate_limit.replaces[0].nme", "unknown field"},
      {one("{key: a, rate_limit: {name: x, unit: second, requests_per_unit: 1, replaces: "
           "[{name: y}, {name: x}]}}"),
       "descriptors[0].rate_limit.replaces[1].name", "a limit cannot replace its own"},
      // rate_limits.
      {one("{key: a, " + rl + ", rate_limits: []}"), "descriptors[0].rate_limits",
       "give either rate_limit or rate_limits, not both"},
      {one("{key: a, rate_limits: []}"), "descriptors[0].rate_limits", "must be a non-empty list"},
      {one("{key: a, rate_limits: {unit: second}}"), "descriptors[0].rate_limits",
       "must be a non-empty list"},
      {one("{key: a, rate_limits: [{unlimited: true}]}"),
       "descriptors[0].rate_limits[0].unlimited", "not in rate_limits"},
      {one("{key: a, rate_limits: [{unit: second, requests_per_unit: 1}, {unit: hour}]}"),
       "descriptors[0].rate_limits[1].requests_per_unit", "required field missing"},
      {one("{key: a, rate_limits: [{name: x, unit: second, requests_per_unit: 1}, "
           "{name: x, unit: hour, requests_per_unit: 9}]}"),
       "descriptors[0].rate_limits[1].name",
       "distinct names: descriptors[0].rate_limits[0] is named 'x' too"},
      {one("{key: a, rate_limits: [{unit: second, requests_per_unit: 5}, "
           "{unit: second, requests_per_unit: 5, algorithm: token_bucket}]}"),
       "descriptors[0].rate_limits[1].name", "'5_per_second' too (a limit without a valid name"},
      {one("{key: a, rate_limits: [{name: burst, unit: second, requests_per_unit: 5}, "
           "{unit: hour, requests_per_unit: 9, replaces: [{name: burst}]}]}"),
       "descriptors[0].rate_limits[1].replaces[0].name", "a limit cannot replace its own"},
      // Where the error is deep, its path says where.
      {"domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - {key: b}\n"
       "      - {key: c, rate_limit: {unit: sec, requests_per_unit: 1}}\n",
       "descriptors[0].descriptors[1].rate_limit.unit", "invalid rate limit unit 'sec'"},
      // The document's bounds.
      {one("{key: a, key: b}"), "descriptors[0].key", "duplicate key"},
      {"domain: d\ndescriptors: [\n", "", "invalid YAML"},
      {"domain: d\n---\ndomain: e\n", "", "several YAML documents"},
      {std::string("domain: d\n\0", 11), "", "NUL byte"},
      {"domain: \"a\\x01b\"\n", "domain", "control character"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.yaml);
    expect_error(c.yaml, c.field, c.reason);
  }
}

TEST(RlsConfigTest, DescriptorsNestThirtyLevelsButNotWithoutBound) {
  auto nested = [](int levels) {
    std::string yaml = "domain: d\n";
    std::string indent;
    for (int i = 0; i < levels; ++i) {
      yaml += indent + "descriptors:\n" + indent + "  - key: k" + std::to_string(i) + "\n";
      indent += "    ";
    }
    return yaml;
  };
  EXPECT_NO_THROW(parse_rls_domain(nested(30)));
  try {
    parse_rls_domain(nested(40));
    ADD_FAILURE() << "40 levels loaded";
  } catch (const ConfigError& e) {
    EXPECT_NE(e.reason().find("nested too deeply"), std::string::npos) << e.what();
  }
}

TEST(RlsConfigTest, KeepsReplacesForTheService) {
  // envoyproxy/ratelimit's README, example 7.
  const auto domain = parse_rls_domain(R"(
domain: example7
descriptors:
  - key: key_1
    value: value_1
    descriptors:
      - key: user
        value: bkthomps
        rate_limit: {name: specific_limit, requests_per_unit: 5, unit: second}
  - key: key_2
    value: value_2
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          replaces:
            - name: specific_limit
          requests_per_unit: 10
          unit: second
)");
  const auto& specific = domain.root.descriptors[0].descriptors[0];
  EXPECT_EQ(specific.limits[0].name, "specific_limit");
  EXPECT_TRUE(specific.replaces.empty());
  const auto& replacing = domain.root.descriptors[1].descriptors[0];
  EXPECT_EQ(replacing.limits[0].name, "");
  EXPECT_EQ(replacing.replaces, std::vector<std::string>{"specific_limit"});
  // An unlimited limit may name what it replaces too (the service honours it).
  const auto unlimited = parse_rls_domain(
      one("{key: a, rate_limit: {unlimited: true, name: u, replaces: [{name: v}]}}"));
  EXPECT_TRUE(unlimited.root.descriptors[0].unlimited);
  EXPECT_EQ(unlimited.root.descriptors[0].replaces, std::vector<std::string>{"v"});
  // Replaces of several limits of one descriptor are gathered once each.
  const auto several = parse_rls_domain(
      one("{key: a, rate_limits: [{unit: second, requests_per_unit: 1, replaces: [{name: x}]}, "
          "{unit: hour, requests_per_unit: 9, replaces: [{name: x}, {name: y}]}]}"));
  EXPECT_EQ(several.root.descriptors[0].replaces, (std::vector<std::string>{"x", "y"}));
}

TEST(RlsConfigTest, TheDocumentedExampleLoadsAndMatchesAsDescribed) {
  std::ifstream in(std::string(RATEKEEPER_SOURCE_DIR) + "/docs/configuration.md");
  const std::string doc{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  const std::string fence = "```yaml\ndomain: edge ";
  const auto start = doc.find(fence);
  ASSERT_NE(start, std::string::npos) << "no domain file example in docs/configuration.md";
  const auto end = doc.find("```", start + fence.size());
  ASSERT_NE(end, std::string::npos);
  const auto domain = parse_rls_domain(doc.substr(start + 8, end - start - 8), "edge.yaml");
  EXPECT_EQ(domain.on_store_error, FailureMode::allow);
  auto find = [&](std::vector<rls::Entry> entries) { return rls::match(domain, entries); };
  const auto* blocked = find({{"remote_address", "50.0.0.5"}});
  ASSERT_NE(blocked, nullptr);
  EXPECT_EQ(blocked->limits.at(0).requests_per_unit, 0u);
  const auto* ip = find({{"remote_address", "192.0.2.7"}});
  ASSERT_NE(ip, nullptr);
  EXPECT_EQ(ip->limits.at(0).requests_per_unit, 10u);
  const auto* user = find({{"path", "/api/orders"}, {"user", "alice"}});
  ASSERT_NE(user, nullptr);
  EXPECT_EQ(user->limits.size(), 2u);
  EXPECT_EQ(find({{"path", "/api/orders"}}), nullptr);
  EXPECT_EQ(find({{"path", "/health"}, {"user", "alice"}}), nullptr);
  EXPECT_EQ(find({{"remote_address", "192.0.2.7"}, {"user", "alice"}}), nullptr);
  const auto* internal = find({{"internal", "x"}});
  ASSERT_NE(internal, nullptr);
  EXPECT_TRUE(internal->unlimited);
}

// A temporary directory removed at the end of the test.
class TempDir {
 public:
  TempDir()
      : path_(std::filesystem::temp_directory_path() /
              ("ratekeeper_rls_config_test_" + std::to_string(::getpid()) + "_" +
               std::to_string(counter_++))) {
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string path() const { return path_.string(); }
  std::string write(const std::string& name, const std::string& text) const {
    const auto file = path_ / name;
    std::ofstream(file, std::ios::binary) << text;
    return file.string();
  }

 private:
  static inline std::atomic<int> counter_{0};
  std::filesystem::path path_;
};

// Expects load_rls_config(directory) to fail naming `file` and `field` with `reason`.
void expect_load_error(const std::string& directory, const std::string& file,
                       const std::string& field, const std::string& reason) {
  try {
    load_rls_config(directory);
    ADD_FAILURE() << "no error loading " << directory;
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.file(), file) << e.what();
    EXPECT_EQ(e.field(), field) << e.what();
    EXPECT_NE(e.reason().find(reason), std::string::npos) << e.what();
  }
}

// The example of config/envoy.yaml and config/ratelimit/: it loads, its rules join the
// limiter's, and its descriptors find the limits its comments say.
TEST(RlsConfigDirectory, TheShippedEnvoyExampleLoads) {
  const auto c = load_config(std::string(RATEKEEPER_SOURCE_DIR) + "/config/envoy.yaml");
  ASSERT_TRUE(c.grpc);
  EXPECT_EQ(c.grpc->port, 8081);
  auto config = load_rls_config(c.grpc->config_dir);
  ASSERT_EQ(config.domains.size(), 1u);
  limiter::LimiterConfig limiter_config = c.limiter;
  rls::append_limiter_rules(config, limiter_config.rules);
  EXPECT_TRUE(limiter::validate(limiter_config).empty());
  const auto& edge = config.domains[0];
  EXPECT_EQ(edge.name, "edge");
  const rls::Entry address[] = {{"remote_address", "192.0.2.7"}};
  const auto* node = rls::match(edge, address);
  ASSERT_NE(node, nullptr);
  EXPECT_EQ(node->limits.at(0).requests_per_unit, 100u);
  const rls::Entry user[] = {{"header_match", "api"}, {"user", "alice"}};
  node = rls::match(edge, user);
  ASSERT_NE(node, nullptr);
  EXPECT_EQ(node->limits.size(), 2u);
  const rls::Entry health[] = {{"generic_key", "health"}};
  node = rls::match(edge, health);
  ASSERT_NE(node, nullptr);
  EXPECT_TRUE(node->unlimited);
  const rls::Entry export_key[] = {{"generic_key", "export"}};
  node = rls::match(edge, export_key);
  ASSERT_NE(node, nullptr);
  EXPECT_TRUE(node->shadow_mode);
}

TEST(RlsConfigDirectory, LoadsEveryYamlFileInNameOrder) {
  TempDir dir;
  const auto b = dir.write("b.yml", "domain: beta\n");
  const auto a = dir.write("a.yaml", one("{key: k, rate_limit: {unit: second, requests_per_unit: 1}}"));
  dir.write("c.yaml.bak", "not: a domain\n");
  dir.write("README", "domain files live here\n");
  dir.write("d.json", "{}");
  std::filesystem::create_directory(std::filesystem::path(dir.path()) / "nested.yaml");
  std::filesystem::create_directory(std::filesystem::path(dir.path()) / "sub");
  dir.write("sub/e.yaml", "domain: nested\n");  // not recursive
  const auto config = load_rls_config(dir.path());
  EXPECT_EQ(config.directory, dir.path());
  ASSERT_EQ(config.domains.size(), 2u);
  EXPECT_EQ(config.domains[0].name, "d");
  EXPECT_EQ(config.domains[0].source, a);
  EXPECT_EQ(config.domains[1].name, "beta");
  EXPECT_EQ(config.domains[1].source, b);
  // Indexed: ready to match.
  ASSERT_NE(config.find("d"), nullptr);
  const std::vector<rls::Entry> entries = {{"k", "v"}};
  EXPECT_EQ(rls::match(*config.find("d"), entries), &config.domains[0].root.descriptors[0]);
  EXPECT_EQ(config.find("nested"), nullptr);
}

TEST(RlsConfigDirectory, FollowsSymbolicLinksToFiles) {
  TempDir dir;
  TempDir data;
  const auto target = data.write("x.yaml", "domain: linked\n");
  std::filesystem::create_symlink(target, std::filesystem::path(dir.path()) / "x.yaml");
  std::filesystem::create_symlink(std::filesystem::path(data.path()) / "missing.yaml",
                                  std::filesystem::path(dir.path()) / "dangling.yaml");
  const auto config = load_rls_config(dir.path());
  ASSERT_EQ(config.domains.size(), 1u);
  EXPECT_EQ(config.domains[0].name, "linked");
}

TEST(RlsConfigDirectory, ADomainInTwoFilesNamesBoth) {
  TempDir dir;
  const auto first = dir.write("1-edge.yaml", "domain: edge\n");
  dir.write("2-other.yaml", "domain: other\n");
  const auto second = dir.write("3-edge-again.yaml", "domain: edge\n");
  try {
    load_rls_config(dir.path());
    ADD_FAILURE() << "a duplicate domain loaded";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.file(), second);
    EXPECT_EQ(e.field(), "domain");
    EXPECT_NE(e.reason().find("duplicate domain 'edge'"), std::string::npos) << e.what();
    EXPECT_NE(e.reason().find(first), std::string::npos) << e.what();
  }
}

TEST(RlsConfigDirectory, AFileErrorNamesTheFile) {
  TempDir dir;
  dir.write("a.yaml", "domain: a\n");
  const auto bad = dir.write("b.yaml", one("{key: k, rate_limit: {unit: sec, requests_per_unit: 1}}"));
  expect_load_error(dir.path(), bad, "descriptors[0].rate_limit.unit", "invalid rate limit unit");
  const auto empty = dir.write("b.yaml", "");
  expect_load_error(dir.path(), empty, "domain", "required field missing");
}

TEST(RlsConfigDirectory, AMissingEmptyOrNonDirectoryIsAnError) {
  TempDir dir;
  const auto missing = dir.path() + "/missing";
  expect_load_error(missing, missing, "", "does not exist");
  const auto file = dir.write("file.yaml", "domain: d\n");
  expect_load_error(file, file, "", "is not a directory");
  TempDir empty;
  empty.write("notes.txt", "nothing\n");
  expect_load_error(empty.path(), empty.path(), "", "holds no domain file");
}

// The rules of `config`'s domains appended to `existing`.
std::vector<limiter::Rule> rules_of(rls::RlsConfig& config,
                                    std::vector<limiter::Rule> existing = {}) {
  rls::append_limiter_rules(config, existing);
  return existing;
}

rls::RlsConfig config_of(std::initializer_list<std::string_view> yamls) {
  rls::RlsConfig config;
  for (const auto yaml : yamls) config.domains.push_back(parse_rls_domain(yaml));
  rls::index_config(config);
  return config;
}

TEST(RlsConfigRules, OneRulePerCountedNodeAndOnePerDomainForOverrides) {
  auto config = config_of({R"(
domain: messaging
on_store_error: local
descriptors:
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        shadow_mode: true
        rate_limit: {unit: day, requests_per_unit: 5}
  - key: to_number
    on_store_error: error
    rate_limit: {unit: day, requests_per_unit: 100, algorithm: token_bucket}
  - key: blocked
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: free
    rate_limit: {unlimited: true}
)"});
  const auto rules = rules_of(config);
  ASSERT_EQ(rules.size(), 3u);
  const auto& domain = config.domains[0];
  const auto& override_rule = rules.at(domain.override_rule);
  EXPECT_EQ(override_rule.name, "rls.messaging");
  // One placeholder limit (a rule holds one): each request carrying an override brings its own.
  EXPECT_EQ(override_rule.limits.size(), 1u);
  EXPECT_EQ(override_rule.on_store_error, FailureMode::local);

  const auto& marketing = domain.root.descriptors[0];
  EXPECT_EQ(marketing.rule, rls::kNoRule);  // a placeholder
  const auto& to_number = marketing.descriptors[0];
  const auto& nested = rules.at(to_number.rule);
  EXPECT_EQ(nested.name, "rls.messaging.message_type_marketing.to_number");
  ASSERT_EQ(nested.limits.size(), 1u);
  EXPECT_EQ(nested.limits[0].limit, to_number.limits[0].limit);
  EXPECT_TRUE(nested.shadow);
  EXPECT_EQ(nested.cost, 1);
  EXPECT_EQ(nested.on_store_error, FailureMode::local);  // the domain's
  EXPECT_EQ(nested.identity.kind, limiter::IdentityKind::ip);
  EXPECT_FALSE(nested.tiered);

  const auto& top = rules.at(domain.root.descriptors[1].rule);
  EXPECT_EQ(top.name, "rls.messaging.to_number");
  EXPECT_FALSE(top.shadow);
  EXPECT_EQ(top.on_store_error, FailureMode::error);  // the gRPC call fails
  EXPECT_EQ(top.limits[0].limit.algorithm, Algorithm::token_bucket);

  // requests_per_unit 0 is answered without the store, unlimited too: no rule.
  EXPECT_EQ(domain.root.descriptors[2].rule, rls::kNoRule);
  EXPECT_EQ(domain.root.descriptors[3].rule, rls::kNoRule);
}

TEST(RlsConfigRules, APolicyHoldsTheCountedLimitsNamedUniquely) {
  auto config = config_of({one(R"({key: k, rate_limits: [
      {unit: second, requests_per_unit: 0},
      {name: burst, unit: second, requests_per_unit: 10, algorithm: token_bucket},
      {name: "not a key name", unit: hour, requests_per_unit: 1000},
      {unit: day, requests_per_unit: 5000}]})")});
  const auto rules = rules_of(config);
  const auto& node = config.domains[0].root.descriptors[0];
  const auto& rule = rules.at(node.rule);
  ASSERT_EQ(rule.limits.size(), 3u);
  EXPECT_EQ(rule.limits[0].name, "burst");
  EXPECT_EQ(rule.limits[1].name, "1000_per_hour");
  EXPECT_EQ(rule.limits[2].name, "5000_per_day");
  EXPECT_EQ(rule.limits[2].limit, node.limits[3].limit);
  // The limits keep their configured names for current_limit.name and replaces.
  EXPECT_EQ(node.limits[2].name, "not a key name");
}

TEST(RlsConfigRules, NamesAreValidUniqueAndShortenedStably) {
  const std::string long_domain(70, 'd');
  const auto build = [&] {
    return config_of({
        R"(
domain: edge proxy/v1
descriptors:
  - {key: remote_address, value: 50.0.0.5, rate_limit: {unit: second, requests_per_unit: 1}}
  - {key: path, value: "/api/*", rate_limit: {unit: second, requests_per_unit: 1}}
  - {key: k, value: "a b", rate_limit: {unit: second, requests_per_unit: 1}}
  - {key: k, value: "a_b", rate_limit: {unit: second, requests_per_unit: 1}}
  - {key: "ключ", rate_limit: {unit: second, requests_per_unit: 1}}
)",
        "domain: " + long_domain + R"(
descriptors:
  - key: a_rather_long_descriptor_key
    value: and_a_value_that_goes_on_1
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: a_rather_long_descriptor_key
    value: and_a_value_that_goes_on_2
    rate_limit: {unit: second, requests_per_unit: 1}
)",
    });
  };
  auto config = build();
  std::vector<limiter::Rule> existing(1);
  existing[0].name = "rls.edge_proxy_v1.path__api__";
  const auto rules = rules_of(config, existing);
  std::set<std::string> names;
  for (const auto& rule : rules) {
    EXPECT_TRUE(limiter::valid_name(rule.name)) << rule.name;
    EXPECT_TRUE(names.insert(rule.name).second) << "twice: " << rule.name;
  }
  ASSERT_EQ(rules.size(), 1u + 2u + 5u + 2u);
  const auto& edge = config.domains[0];
  EXPECT_EQ(rules[edge.override_rule].name, "rls.edge_proxy_v1");
  EXPECT_EQ(rules[edge.root.descriptors[0].rule].name, "rls.edge_proxy_v1.remote_address_50.0.0.5");
  // Taken (by a rule that was there before) or the same once sanitised: a hash keeps it apart.
  const auto& path = rules[edge.root.descriptors[1].rule].name;
  EXPECT_TRUE(path.starts_with("rls.edge_proxy_v1.path__api__-")) << path;
  EXPECT_EQ(rules[edge.root.descriptors[2].rule].name, "rls.edge_proxy_v1.k_a_b");
  EXPECT_TRUE(rules[edge.root.descriptors[3].rule].name.starts_with("rls.edge_proxy_v1.k_a_b-"));
  EXPECT_EQ(rules[edge.root.descriptors[4].rule].name, "rls.edge_proxy_v1.________");

  const auto& long_one = config.domains[1];
  const auto& first = rules[long_one.root.descriptors[0].rule].name;
  const auto& second = rules[long_one.root.descriptors[1].rule].name;
  EXPECT_EQ(first.size(), 64u);
  EXPECT_TRUE(first.starts_with("rls.ddd")) << first;
  EXPECT_NE(first, second);
  EXPECT_EQ(rules[long_one.override_rule].name.size(), 64u);

  // The same configuration gets the same names: the same keys after a restart.
  auto again = build();
  const auto rules_again = rules_of(again, existing);
  ASSERT_EQ(rules_again.size(), rules.size());
  for (std::size_t i = 0; i < rules.size(); ++i) EXPECT_EQ(rules_again[i].name, rules[i].name);
}

TEST(RlsConfigRules, TheLimiterAcceptsTheRulesOfCountedNodes) {
  auto config = config_of({R"(
domain: d
descriptors:
  - key: a
    rate_limits:
      - {unit: second, requests_per_unit: 10, algorithm: token_bucket}
      - {unit: minute, requests_per_unit: 100, algorithm: sliding_window_log}
      - {unit: hour, requests_per_unit: 1000, algorithm: sliding_window_counter}
      - {unit: year, requests_per_unit: 4294967295}
    descriptors:
      - {key: b, value: "x*", shadow_mode: true, rate_limit: {unit: week, requests_per_unit: 1}}
)"});
  const auto rules = rules_of(config);
  limiter::LimiterConfig limiter_config;
  for (std::size_t i = 0; i < rules.size(); ++i) {
    if (i != config.domains[0].override_rule) limiter_config.rules.push_back(rules[i]);
  }
  ASSERT_EQ(limiter_config.rules.size(), 2u);
  const auto issues = limiter::validate(limiter_config);
  for (const auto& issue : issues) ADD_FAILURE() << issue.field << ": " << issue.reason;
}

}  // namespace
}  // namespace ratekeeper::server
