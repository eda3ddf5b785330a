// Which descriptor node a request's descriptor finds (envoyproxy/ratelimit's GetLimit): the
// most specific node at each level, limits only at the descriptor's last entry, units.

#include "ratekeeper/rls/descriptors.hpp"

#include <gtest/gtest.h>

#include <initializer_list>
#include <string>
#include <vector>

#include "rls_config.hpp"

namespace ratekeeper::rls {
namespace {

using server::parse_rls_domain;

// The requests_per_unit of the node `entries` find in `domain`; -1: no node, -2: unlimited.
std::int64_t limit_of(const Domain& domain, std::initializer_list<Entry> entries) {
  const std::vector<Entry> list(entries);
  const DescriptorNode* node = match(domain, list);
  if (node == nullptr) return -1;
  if (node->unlimited) return -2;
  return node->limits.at(0).requests_per_unit;
}

constexpr std::int64_t kNone = -1;
constexpr std::int64_t kUnlimited = -2;

TEST(RlsUnit, ParsedInAnyCaseAndNamedInLowerCase) {
  EXPECT_EQ(parse_unit("second"), Unit::second);
  EXPECT_EQ(parse_unit("MINUTE"), Unit::minute);
  EXPECT_EQ(parse_unit("Hour"), Unit::hour);
  EXPECT_EQ(parse_unit("dAy"), Unit::day);
  EXPECT_EQ(parse_unit("week"), Unit::week);
  EXPECT_EQ(parse_unit("month"), Unit::month);
  EXPECT_EQ(parse_unit("YEAR"), Unit::year);
  for (const auto* bad : {"", "unknown", "UNKNOWN", "seconds", "s", "1s", "minute "}) {
    EXPECT_EQ(parse_unit(bad), std::nullopt) << bad;
  }
  for (const Unit u : {Unit::second, Unit::minute, Unit::hour, Unit::day, Unit::week,
                       Unit::month, Unit::year}) {
    EXPECT_EQ(parse_unit(to_string(u)), u);
  }
  EXPECT_EQ(to_string(Unit::unknown), "unknown");
}

TEST(RlsUnit, LengthsAsEnvoyproxyRatelimitCountsThem) {
  constexpr Micros day = 86'400 * kMicrosPerSecond;
  EXPECT_EQ(unit_length(Unit::second), kMicrosPerSecond);
  EXPECT_EQ(unit_length(Unit::minute), 60 * kMicrosPerSecond);
  EXPECT_EQ(unit_length(Unit::hour), 3'600 * kMicrosPerSecond);
  EXPECT_EQ(unit_length(Unit::day), day);
  EXPECT_EQ(unit_length(Unit::week), 7 * day);
  EXPECT_EQ(unit_length(Unit::month), 30 * day);
  EXPECT_EQ(unit_length(Unit::year), 365 * day);
  EXPECT_EQ(unit_length(Unit::unknown), 0);
}

TEST(RlsMatch, ExactValueBeatsWildcardBeatsAnyValue) {
  const auto domain = parse_rls_domain(R"(
domain: d
descriptors:
  - key: path
    rate_limit: {unit: second, requests_per_unit: 10}
  - key: path
    value: /api/*
    rate_limit: {unit: second, requests_per_unit: 20}
  - key: path
    value: /api/login
    rate_limit: {unit: second, requests_per_unit: 30}
)");
  EXPECT_EQ(limit_of(domain, {{"path", "/api/login"}}), 30);
  EXPECT_EQ(limit_of(domain, {{"path", "/api/users"}}), 20);
  EXPECT_EQ(limit_of(domain, {{"path", "/api/"}}), 20);  // an empty rest matches the prefix
  EXPECT_EQ(limit_of(domain, {{"path", "/api"}}), 10);
  EXPECT_EQ(limit_of(domain, {{"path", "/other"}}), 10);
  EXPECT_EQ(limit_of(domain, {{"path", ""}}), 10);
  EXPECT_EQ(limit_of(domain, {{"PATH", "/api/login"}}), kNone);  // keys are case-sensitive
  EXPECT_EQ(limit_of(domain, {{"path", "/API/login"}}), 10);     // and values
}

TEST(RlsMatch, TheFirstWildcardInConfigurationOrderWins) {
  const auto domain = parse_rls_domain(R"(
domain: d
descriptors:
  - {key: k, value: "fo*", rate_limit: {unit: second, requests_per_unit: 1}}
  - {key: k, value: "foo*", rate_limit: {unit: second, requests_per_unit: 2}}
  - {key: other, value: "foo*", rate_limit: {unit: second, requests_per_unit: 3}}
)");
  EXPECT_EQ(limit_of(domain, {{"k", "food"}}), 1);  // not the longer prefix: the first listed
  EXPECT_EQ(limit_of(domain, {{"k", "fo"}}), 1);
  EXPECT_EQ(limit_of(domain, {{"k", "f"}}), kNone);
  EXPECT_EQ(limit_of(domain, {{"other", "food"}}), 3);  // a wildcard is for its own key only
  EXPECT_EQ(limit_of(domain, {{"third", "food"}}), kNone);
}

TEST(RlsMatch, AStarAloneMatchesEveryValueBeforeTheAnyValueNode) {
  const auto domain = parse_rls_domain(R"(
domain: d
descriptors:
  - {key: k, rate_limit: {unit: second, requests_per_unit: 1}}
  - {key: k, value: "*", rate_limit: {unit: second, requests_per_unit: 2}}
  - {key: k, value: "x", rate_limit: {unit: second, requests_per_unit: 3}}
)");
  EXPECT_EQ(limit_of(domain, {{"k", "anything"}}), 2);
  EXPECT_EQ(limit_of(domain, {{"k", ""}}), 2);
  EXPECT_EQ(limit_of(domain, {{"k", "x"}}), 3);
}

TEST(RlsMatch, AStarInsideAValueIsAWildcardAsInEnvoyproxyRatelimit) {
  const auto domain = parse_rls_domain(R"(
domain: d
descriptors:
  - {key: k, value: "a*b", rate_limit: {unit: second, requests_per_unit: 1}}
  - {key: k, value: "axb", rate_limit: {unit: second, requests_per_unit: 2}}
)");
  EXPECT_EQ(limit_of(domain, {{"k", "a*b"}}), 1);
  EXPECT_EQ(limit_of(domain, {{"k", "ayyb"}}), 1);
  EXPECT_EQ(limit_of(domain, {{"k", "axb"}}), 2);  // the exact value first
  EXPECT_EQ(limit_of(domain, {{"k", "a*bc"}}), kNone);
}

TEST(RlsMatch, NestedDescriptorsAreWalkedLevelByLevel) {
  const auto domain = parse_rls_domain(R"(
domain: messaging
descriptors:
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit: {unit: day, requests_per_unit: 5}
  - key: to_number
    rate_limit: {unit: day, requests_per_unit: 100}
)");
  EXPECT_EQ(limit_of(domain, {{"message_type", "marketing"}, {"to_number", "2061111111"}}), 5);
  EXPECT_EQ(limit_of(domain, {{"to_number", "2061111111"}}), 100);
  // The first level has no limit: a placeholder.
  EXPECT_EQ(limit_of(domain, {{"message_type", "marketing"}}), kNone);
  EXPECT_EQ(limit_of(domain, {{"message_type", "transactional"}, {"to_number", "1"}}), kNone);
  // The order of the entries is the order of the levels.
  EXPECT_EQ(limit_of(domain, {{"to_number", "1"}, {"message_type", "marketing"}}), kNone);
}

TEST(RlsMatch, ADescriptorDeeperThanTheConfigurationFindsNoLimit) {
  const auto domain = parse_rls_domain(R"(
domain: d
descriptors:
  - key: key
    value: value
    rate_limit: {unit: second, requests_per_unit: 300}
)");
  EXPECT_EQ(limit_of(domain, {{"key", "value"}}), 300);
  EXPECT_EQ(limit_of(domain, {{"key", "value"}, {"subkey", "subvalue"}}), kNone);
}

TEST(RlsMatch, ALimitReachedBeforeTheLastEntryIsForShorterDescriptorsOnly) {
  const auto domain = parse_rls_domain(R"(
domain: d
descriptors:
  - key: client
    value: c1
    rate_limit: {unit: minute, requests_per_unit: 10}
    descriptors:
      - key: svc
        value: s1
        rate_limit: {unit: minute, requests_per_unit: 2}
      - key: placeholder
        descriptors:
          - key: deeper
            rate_limit: {unit: minute, requests_per_unit: 7}
)");
  EXPECT_EQ(limit_of(domain, {{"client", "c1"}}), 10);
  EXPECT_EQ(limit_of(domain, {{"client", "c1"}, {"svc", "s1"}}), 2);
  // The first level's limit does not apply to a longer descriptor that goes no further.
  EXPECT_EQ(limit_of(domain, {{"client", "c1"}, {"svc", "s2"}}), kNone);
  EXPECT_EQ(limit_of(domain, {{"client", "c1"}, {"other", "x"}}), kNone);
  // A node without limits passed on the way is no obstacle; ending on it finds nothing.
  EXPECT_EQ(limit_of(domain, {{"client", "c1"}, {"placeholder", "p"}, {"deeper", "d"}}), 7);
  EXPECT_EQ(limit_of(domain, {{"client", "c1"}, {"placeholder", "p"}}), kNone);
  EXPECT_EQ(limit_of(domain, {{"client", "c1"}, {"svc", "s1"}, {"more", "m"}}), kNone);
}

TEST(RlsMatch, WildcardsAreLookedUpAtEveryLevel) {
  const auto domain = parse_rls_domain(R"(
domain: d
descriptors:
  - key: tenant
    descriptors:
      - key: path
        value: /files/*
        rate_limit: {unit: second, requests_per_unit: 4}
        descriptors:
          - key: method
            value: P*
            rate_limit: {unit: second, requests_per_unit: 5}
  - key: region
    value: eu-*
    descriptors:
      - key: user
        rate_limit: {unit: hour, requests_per_unit: 6}
)");
  EXPECT_EQ(limit_of(domain, {{"tenant", "t"}, {"path", "/files/a"}}), 4);
  EXPECT_EQ(limit_of(domain, {{"tenant", "t"}, {"path", "/files/a"}, {"method", "POST"}}), 5);
  EXPECT_EQ(limit_of(domain, {{"tenant", "t"}, {"path", "/files/a"}, {"method", "GET"}}), kNone);
  EXPECT_EQ(limit_of(domain, {{"tenant", "t"}, {"path", "/docs/a"}}), kNone);
  EXPECT_EQ(limit_of(domain, {{"region", "eu-west"}, {"user", "u"}}), 6);
  EXPECT_EQ(limit_of(domain, {{"region", "us-east"}, {"user", "u"}}), kNone);
}

TEST(RlsMatch, UnlimitedNodesAreFoundLikeLimitedOnes) {
  const auto domain = parse_rls_domain(R"(
domain: internal
descriptors:
  - key: ldap
    rate_limit: {unlimited: true}
  - key: azure
    rate_limit: {unit: minute, requests_per_unit: 100}
)");
  EXPECT_EQ(limit_of(domain, {{"ldap", "x"}}), kUnlimited);
  EXPECT_EQ(limit_of(domain, {{"azure", "x"}}), 100);
  EXPECT_EQ(limit_of(domain, {{"ldap", "x"}, {"more", "y"}}), kNone);
}

TEST(RlsMatch, NoEntriesAndUnknownKeysFindNothing) {
  const auto domain = parse_rls_domain(R"(
domain: d
descriptors:
  - {key: a, rate_limit: {unit: second, requests_per_unit: 1}}
)");
  EXPECT_EQ(match(domain, std::span<const Entry>{}), nullptr);
  EXPECT_EQ(limit_of(domain, {{"b", "x"}}), kNone);
  EXPECT_EQ(limit_of(domain, {{"", ""}}), kNone);
  const auto empty = parse_rls_domain("domain: empty\n");
  EXPECT_EQ(limit_of(empty, {{"a", "x"}}), kNone);
}

TEST(RlsMatch, ReturnsTheNodeItselfWithItsSettings) {
  const auto domain = parse_rls_domain(R"(
domain: d
descriptors:
  - key: service
    descriptors:
      - key: user
        value: user-a
        shadow_mode: true
        rate_limit: {unit: second, requests_per_unit: 10, name: a_limit}
)");
  const std::vector<Entry> entries = {{"service", "auth"}, {"user", "user-a"}};
  const DescriptorNode* node = match(domain, entries);
  ASSERT_NE(node, nullptr);
  EXPECT_EQ(node, &domain.root.descriptors[0].descriptors[0]);
  EXPECT_TRUE(node->shadow_mode);
  EXPECT_EQ(node->limits[0].name, "a_limit");
}

TEST(RlsConfigIndex, FindsDomainsByName) {
  RlsConfig config;
  config.domains.push_back(parse_rls_domain("domain: one\n"));
  config.domains.push_back(parse_rls_domain("domain: two\n"));
  index_config(config);
  ASSERT_NE(config.find("two"), nullptr);
  EXPECT_EQ(config.find("two")->name, "two");
  EXPECT_EQ(config.find("one"), &config.domains[0]);
  EXPECT_EQ(config.find("three"), nullptr);
  EXPECT_EQ(config.find(""), nullptr);
}

TEST(RlsWildcard, MatchesAsEnvoyproxyRatelimitDoes) {
  struct Case {
    std::string_view pattern;
    std::string_view value;
    bool matches;
  };
  const Case cases[] = {
      {"foo*", "foo", true},
      {"foo*", "foo1", true},
      {"foo*", "fo", false},
      {"*", "", true},
      {"*", "anything", true},
      {"bar*b", "barab", true},
      {"bar*b", "barb", true},
      {"bar*b", "bar", false},
      {"bar*b", "bara", false},
      {"bar*b", "xbarb", false},
      {"*b", "ab", true},
      {"*b", "ba", false},
      {"foo*bar*baz", "foobarbaz", true},
      {"foo*bar*baz", "foo1bar2baz", true},
      {"foo*bar*baz", "foo123baz", false},
      {"foo*bar*baz", "bar456baz", false},
      {"a*a", "a", false},
      {"a*a", "aa", true},
      {"a**b", "ab", true},
      {"a*b*b", "abb", true},
      {"a*b*b", "ab", false},
      {"exact", "exact", true},
      {"exact", "exac", false},
      {"a*bc*bc", "abcbc", true},
      {"a*bc*bc", "abc", false},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(wildcard_match(c.pattern, c.value), c.matches) << c.pattern << " " << c.value;
  }
}

TEST(RlsMatch, AMiddleWildcardMatchesItsKeyOnly) {
  Domain domain;
  DescriptorNode node;
  node.key = "k";
  node.value = "a*z";
  node.wildcard = true;
  node.limits.push_back(
      DescriptorLimit{.name = "", .requests_per_unit = 3, .unit = Unit::second, .limit = {}});
  domain.root.descriptors.push_back(node);
  index_domain(domain);
  const std::vector<Entry> match_it = {{"k", "a-z"}};
  const std::vector<Entry> other_key = {{"j", "a-z"}};
  const std::vector<Entry> no_suffix = {{"k", "a-y"}};
  std::vector<const DescriptorNode*> path;
  EXPECT_EQ(match(domain, match_it, path), &domain.root.descriptors[0]);
  EXPECT_EQ(path, std::vector<const DescriptorNode*>{&domain.root.descriptors[0]});
  EXPECT_EQ(match(domain, other_key, path), nullptr);
  EXPECT_TRUE(path.empty());
  EXPECT_EQ(match(domain, no_suffix), nullptr);
}

TEST(RlsMatch, ABuiltDomainMatchesOnceIndexed) {
  Domain domain;
  domain.name = "built";
  DescriptorNode node;
  node.key = "k";
  node.value = "v*";
  node.wildcard = true;
  node.limits.push_back(DescriptorLimit{.name = "", .requests_per_unit = 3, .unit = Unit::second,
                                        .limit = {}});
  domain.root.descriptors.push_back(node);
  const std::vector<Entry> entries = {{"k", "vv"}};
  EXPECT_EQ(match(domain, entries), nullptr);  // not indexed yet
  index_domain(domain);
  EXPECT_EQ(match(domain, entries), &domain.root.descriptors[0]);
}

}  // namespace
}  // namespace ratekeeper::rls
