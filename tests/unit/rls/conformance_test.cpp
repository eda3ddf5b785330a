// Conformance with envoyproxy/ratelimit: the configuration examples of its README (examples 1
// to 9, and the example.yaml of its docker-compose demo, in rls_readme_examples.hpp), and for
// each request descriptor the README explains, the limit that applies to it at the matching
// level (GetLimit): requests_per_unit / unit / name, unlimited, or none. What the service then
// answers (counters per value, replaces, shadow mode) is checked by
// conformance_decisions_test.

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ratekeeper/rls/descriptors.hpp"
#include "rls_config.hpp"
#include "rls_readme_examples.hpp"

namespace ratekeeper::rls {
namespace {

using namespace ratekeeper::testing::rls_examples;

// What a descriptor finds.
struct Expected {
  enum class Kind { none, limit, unlimited } kind = Kind::none;
  std::uint32_t requests_per_unit = 0;
  Unit unit = Unit::unknown;
  std::string name;
  bool shadow_mode = false;
  std::vector<std::string> replaces;
};

Expected none() { return {}; }
Expected unlimited() {
  Expected e;
  e.kind = Expected::Kind::unlimited;
  return e;
}
Expected limit(std::uint32_t requests_per_unit, Unit unit, std::string name = {},
               bool shadow_mode = false, std::vector<std::string> replaces = {}) {
  Expected e;
  e.kind = Expected::Kind::limit;
  e.requests_per_unit = requests_per_unit;
  e.unit = unit;
  e.name = std::move(name);
  e.shadow_mode = shadow_mode;
  e.replaces = std::move(replaces);
  return e;
}

struct Request {
  std::vector<Entry> descriptor;
  Expected expected;
};

struct Example {
  std::string name;
  std::string yaml;
  std::vector<Request> requests;
};

std::string describe(const std::vector<Entry>& descriptor) {
  std::string out;
  for (const auto& e : descriptor) out += "(" + std::string(e.key) + ", " + std::string(e.value) + ")";
  return out;
}

void check(const Example& example) {
  SCOPED_TRACE(example.name);
  const Domain domain = server::parse_rls_domain(example.yaml, example.name + ".yaml");
  for (const auto& request : example.requests) {
    SCOPED_TRACE(describe(request.descriptor));
    const DescriptorNode* node = match(domain, request.descriptor);
    const auto& want = request.expected;
    switch (want.kind) {
      case Expected::Kind::none:
        EXPECT_EQ(node, nullptr);
        break;
      case Expected::Kind::unlimited:
        ASSERT_NE(node, nullptr);
        EXPECT_TRUE(node->unlimited);
        EXPECT_TRUE(node->limits.empty());
        break;
      case Expected::Kind::limit:
        ASSERT_NE(node, nullptr);
        EXPECT_FALSE(node->unlimited);
        ASSERT_EQ(node->limits.size(), 1u);
        EXPECT_EQ(node->limits[0].requests_per_unit, want.requests_per_unit);
        EXPECT_EQ(node->limits[0].unit, want.unit);
        EXPECT_EQ(node->limits[0].name, want.name);
        EXPECT_EQ(node->shadow_mode, want.shadow_mode);
        EXPECT_EQ(node->replaces, want.replaces);
        // envoyproxy/ratelimit counts a fixed window of one unit.
        if (want.requests_per_unit > 0) {
          EXPECT_EQ(node->limits[0].limit.algorithm, algorithms::Algorithm::fixed_window);
          EXPECT_EQ(node->limits[0].limit.capacity, want.requests_per_unit);
          EXPECT_EQ(node->limits[0].limit.period, unit_length(want.unit));
        }
        break;
    }
  }
}

TEST(RlsConformance, Example1TwoValuesOfOneKey) {
  check({"mongo_cps", std::string(kExample1),
         {
             {{{"database", "users"}}, limit(500, Unit::second)},
             {{{"database", "default"}}, limit(500, Unit::second)},
             {{{"database", "orders"}}, none()},  // only the listed values
         }});
}

TEST(RlsConformance, Example2NestedListsAndAnyValue) {
  check({"messaging", std::string(kExample2),
         {
             {{{"message_type", "marketing"}, {"to_number", "2061111111"}}, limit(5, Unit::day)},
             {{{"message_type", "marketing"}, {"to_number", "2062222222"}}, limit(5, Unit::day)},
             {{{"to_number", "2061111111"}}, limit(100, Unit::day)},
             {{{"to_number", "2062222222"}}, limit(100, Unit::day)},
             {{{"message_type", "marketing"}}, none()},  // the placeholder has no limit
         }});
}

TEST(RlsConformance, Example3TheMostSpecificMatchAtALevel) {
  check({"edge_proxy_per_ip", std::string(kExample3),
         {
             {{{"remote_address", "50.0.0.1"}}, limit(10, Unit::second)},
             {{{"remote_address", "50.0.0.5"}}, limit(0, Unit::second)},
         }});
}

TEST(RlsConformance, Example4TheDescriptorsDepthMustBeTheConfigurations) {
  const std::vector<Entry> two_entries = {{"key", "value"}, {"subkey", "subvalue"}};
  check({"example4", std::string(kExample4Flat),
         {
             {two_entries, none()},
             {{{"key", "value"}}, limit(300, Unit::second)},
         }});
  check({"example4", std::string(kExample4Nested),
         {
             {two_entries, limit(300, Unit::second)},
             {{{"key", "value"}}, none()},
         }});
}

TEST(RlsConformance, Example5Unlimited) {
  check({"internal", std::string(kExample5),
         {
             {{{"ldap", "cn=admin"}}, unlimited()},
             {{{"azure", "tenant-1"}}, limit(100, Unit::minute)},
             {{{"gcp", "project"}}, none()},
         }});
}

TEST(RlsConformance, Example6ShadowMode) {
  check({"example6", std::string(kExample6),
         {
             {{{"service", "auth-service"}, {"user", "user-a"}},
              limit(10, Unit::second, "", /*shadow_mode=*/true)},
             {{{"service", "auth-service"}, {"user", "user-b"}}, limit(20, Unit::second)},
             {{{"service", "auth-service"}, {"user", "user-c"}}, none()},
         }});
}

TEST(RlsConformance, Example7ReplacesIsKeptForTheService) {
  // (key_1, value_1), (user, bkthomps) alone: 5/s; (key_2, value_2), (user, bkthomps): 10/s;
  // both descriptors in one request: the 10/s limit replaces the one named specific_limit
  // (decided by the service, which sees every descriptor of the request).
  check({"example7", std::string(kExample7),
         {
             {{{"key_1", "value_1"}, {"user", "bkthomps"}},
              limit(5, Unit::second, "specific_limit")},
             {{{"key_2", "value_2"}, {"user", "bkthomps"}},
              limit(10, Unit::second, "", false, {"specific_limit"})},
             {{{"key_1", "value_1"}, {"user", "someone"}}, none()},
         }});
}

TEST(RlsConformance, Example8DetailedMetricChangesNoMatch) {
  // The README's prose says "/ sec" and key_1; its configuration says minute and key1: the
  // configuration is what is matched.
  const std::string yaml(kExample8);
  check({"example8",
         yaml,
         {
             {{{"key1", "unspecified_value"}}, limit(10, Unit::minute)},
             {{{"key1", "unspecified_value2"}}, limit(10, Unit::minute)},
             {{{"key1", "value1"}}, limit(20, Unit::minute)},
         }});
  const Domain domain = server::parse_rls_domain(yaml);
  EXPECT_TRUE(domain.root.descriptors[0].detailed_metric);
  EXPECT_FALSE(domain.root.descriptors[1].detailed_metric);
}

TEST(RlsConformance, Example9WildcardValues) {
  // As example 8, the prose says "/ sec" and key_1, the configuration minute and key1.
  check({"example9", std::string(kExample9),
         {
             {{{"key1", "value1"}}, limit(20, Unit::minute)},
             {{{"key1", "value2"}}, limit(20, Unit::minute)},
             {{{"key1", "value"}}, limit(20, Unit::minute)},
             {{{"key1", "other"}}, none()},
             {{{"key2", "value1"}}, none()},
         }});
}

TEST(RlsConformance, TheDockerComposeDemoConfiguration) {
  // The demo's curl calls: /header sends (foo), /twoheader (foo) then (bar) or (baz); the
  // file starts with a document marker, as that one does.
  check({"rl", std::string(kDockerComposeDemo),
         {
             {{{"source_cluster", "proxy"}, {"destination_cluster", "mock"}},
              limit(1, Unit::minute)},
             {{{"foo", "foo"}}, limit(2, Unit::minute)},
             {{{"foo", "foo"}, {"bar", "bar"}}, limit(3, Unit::minute)},
             {{{"foo", "foo"}, {"baz", "baz"}}, limit(1, Unit::second)},
             {{{"foo", "foo"}, {"bar", "banned"}}, limit(0, Unit::minute)},
             {{{"foo", "foo"}, {"baz", "shady"}}, limit(1, Unit::minute, "", true)},
             {{{"foo", "foo"}, {"baz", "not-so-shady"}}, limit(1, Unit::second)},
             {{{"foo", "foo"}, {"bay", "any"}}, unlimited()},
             {{{"qux", "any"}}, unlimited()},
             {{{"foo", "foo"}, {"qux", "any"}}, none()},
         }});
}

}  // namespace
}  // namespace ratekeeper::rls
