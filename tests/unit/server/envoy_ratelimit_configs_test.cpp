// envoyproxy/ratelimit's own configuration files (tests/data/envoy_ratelimit, copied unchanged):
// the ones it loads load here, the ones its tests refuse are refused, naming the file and the
// field; its example directory loads as it is; and what its tests expect the wildcard and
// share_threshold files to match is what ratekeeper matches.

#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "ratekeeper/rls/descriptors.hpp"
#include "rls_config.hpp"
#include "yaml_reader.hpp"

namespace ratekeeper::server {
namespace {

namespace fs = std::filesystem;

const fs::path kData = fs::path(RATEKEEPER_SOURCE_DIR) / "tests/data/envoy_ratelimit";
const fs::path kTestConfigs = kData / "test/config";

rls::Domain load(const std::string& name) {
  const auto path = (kTestConfigs / name).string();
  return parse_rls_domain(read_file(path), path);
}

// What ratekeeper makes of each file of their test/config: nullopt loads; else the field its
// error names (envoyproxy/ratelimit's error, config_test.go, in the comment).
const std::map<std::string, std::optional<std::string>> kExpected = {
    {"basic_config.yaml", std::nullopt},
    {"duplicate_domain.yaml", std::nullopt},  // refused only beside another test-domain file
    {"merge_domain_key1.yaml", std::nullopt},
    {"merge_domain_key2.yaml", std::nullopt},
    {"metadata.yaml", std::nullopt},
    {"shadowmode_config.yaml", std::nullopt},
    {"share_threshold.yaml", std::nullopt},
    {"wildcard.yaml", std::nullopt},
    // "invalid rate limit unit 'foo'"
    {"bad_limit_unit.yaml", "descriptors[0].rate_limit.unit"},
    // "error loading config file: yaml: line 2: found unexpected end of stream"
    {"bad_yaml.yaml", ""},
    // "duplicate descriptor composite key 'test-domain.key1_value1'"
    {"duplicate_key.yaml", "descriptors[1]"},
    // "config file cannot have empty domain"
    {"empty_domain.yaml", "domain"},
    // "descriptor has empty key"
    {"empty_key.yaml", "descriptors[0].key"},
    // "config error, unknown key 'ratelimit'"
    {"misspelled_key.yaml", "descriptors[0].ratelimit"},
    // "config error, unknown key 'requestsperunit'"
    {"misspelled_key2.yaml", "descriptors[0].rate_limit.requestsperunit"},
    // "config error, yaml file contains list of type other than map: a"
    {"non_map_list.yaml", "descriptors[0]"},
    // "config error, key is not of type string: 0.25"
    {"non_string_key.yaml", "0.25"},
    // "should not have an empty replaces entry"
    {"replaces_empty.yaml", "descriptors[0].descriptors[0].rate_limit.replaces[0].name"},
    // "replaces should not contain name of same descriptor"
    {"replaces_self.yaml", "descriptors[0].descriptors[0].rate_limit.replaces[0].name"},
    // "should not specify rate limit unit when unlimited"
    {"unlimited_with_unit.yaml", "descriptors[0].rate_limit.unit"},
};

TEST(EnvoyRatelimitConfigs, EveryTestConfigurationLoadsOrIsRefusedAsTheirsIs) {
  std::set<std::string> seen;
  for (const auto& entry : fs::directory_iterator(kTestConfigs)) {
    const auto name = entry.path().filename().string();
    SCOPED_TRACE(name);
    seen.insert(name);
    const auto expected = kExpected.find(name);
    ASSERT_NE(expected, kExpected.end()) << "a fixture without its line in kExpected";
    if (!expected->second) {
      EXPECT_NO_THROW(load(name));
      continue;
    }
    try {
      load(name);
      ADD_FAILURE() << "loaded, but envoyproxy/ratelimit refuses it";
    } catch (const ConfigError& e) {
      EXPECT_EQ(e.file(), (kTestConfigs / name).string());
      EXPECT_EQ(e.field(), *expected->second) << e.what();
      EXPECT_FALSE(e.reason().empty());
      EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(seen.size(), kExpected.size()) << "a line of kExpected without its fixture";
}

// A directory holding their files as they test them together.
class EnvoyRatelimitConfigDirectory : public ::testing::Test {
 protected:
  fs::path dir_ =
      fs::temp_directory_path() /
      ("rk_envoy_configs_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
       "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());

  void SetUp() override {
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  void add(const std::string& name) { fs::copy_file(kTestConfigs / name, dir_ / name); }
};

TEST_F(EnvoyRatelimitConfigDirectory, TwoFilesOfOneDomainAreRefusedNamingTheSecond) {
  // TestDuplicateDomain: "duplicate_domain.yaml: duplicate domain 'test-domain' in config file".
  add("basic_config.yaml");
  add("duplicate_domain.yaml");
  try {
    load_rls_config(dir_.string());
    ADD_FAILURE() << "two files of domain test-domain loaded";
  } catch (const ConfigError& e) {
    EXPECT_NE(e.file().find("duplicate_domain.yaml"), std::string::npos) << e.what();
    EXPECT_EQ(e.field(), "domain") << e.what();
    EXPECT_NE(e.reason().find("test-domain"), std::string::npos) << e.what();
  }
}

TEST_F(EnvoyRatelimitConfigDirectory, FilesToMergeAreRefusedAsTheirsAreWithoutMergeDomainConfig) {
  // envoyproxy/ratelimit merges them only with MERGE_DOMAIN_CONFIG=true (TestDomainMerge);
  // ratekeeper has no such setting: one domain, one file.
  add("merge_domain_key1.yaml");
  add("merge_domain_key2.yaml");
  try {
    load_rls_config(dir_.string());
    ADD_FAILURE() << "two files of domain test-domain loaded";
  } catch (const ConfigError& e) {
    EXPECT_NE(e.file().find("merge_domain_key2.yaml"), std::string::npos) << e.what();
    EXPECT_EQ(e.field(), "domain") << e.what();
  }
}

TEST(EnvoyRatelimitConfigs, TheExampleDirectoryLoadsAsItIs) {
  const auto config = load_rls_config((kData / "examples/ratelimit/config").string());
  ASSERT_EQ(config.domains.size(), 2u);
  const rls::Domain* rl = config.find("rl");
  ASSERT_NE(rl, nullptr);
  ASSERT_NE(config.find("mongo_cps"), nullptr);
  // quota_mode and metadata of the two services.
  const std::vector<rls::Entry> service_1 = {{"service", "service_1"}};
  const rls::DescriptorNode* node = rls::match(*rl, service_1);
  ASSERT_NE(node, nullptr);
  EXPECT_TRUE(node->quota_mode);
  EXPECT_FALSE(node->shadow_mode);
  ASSERT_EQ(node->limits.size(), 1u);
  EXPECT_EQ(node->limits[0].requests_per_unit, 1u);
  EXPECT_EQ(node->limits[0].unit, rls::Unit::minute);
  const std::vector<rls::Entry> shady = {{"foo", "x"}, {"baz", "shady"}};
  node = rls::match(*rl, shady);
  ASSERT_NE(node, nullptr);
  EXPECT_TRUE(node->shadow_mode);
  EXPECT_FALSE(node->quota_mode);
}

// The node `entries` find in `domain`: its limit's requests_per_unit, or -1 for none.
long long limit_of(const rls::Domain& domain, std::vector<rls::Entry> entries) {
  const rls::DescriptorNode* node = rls::match(domain, entries);
  if (node == nullptr || node->limits.empty()) return -1;
  return node->limits[0].requests_per_unit;
}

TEST(EnvoyRatelimitConfigs, WildcardValuesMatchAsTheirTestsExpect) {
  // TestWildcardConfig.
  const auto domain = load("wildcard.yaml");
  EXPECT_EQ(limit_of(domain, {{"noVal", "foo1"}}), 20);
  EXPECT_EQ(limit_of(domain, {{"wild", "foo1"}}), 20);
  EXPECT_EQ(limit_of(domain, {{"nestedWild", "val1"}, {"wild", "goo2"}}), 20);
  EXPECT_EQ(limit_of(domain, {{"wild", "bar"}}), -1);
  EXPECT_EQ(limit_of(domain, {{"noWild", "foo1"}}), -1);
  EXPECT_EQ(limit_of(domain, {{"midWild", "barab"}}), 20);
  EXPECT_EQ(limit_of(domain, {{"midWild", "bar123b"}}), 20);
  EXPECT_EQ(limit_of(domain, {{"midWild", "barb"}}), 20);
  EXPECT_EQ(limit_of(domain, {{"midWild", "bara"}}), -1);
  EXPECT_EQ(limit_of(domain, {{"midWild", "xbarb"}}), -1);
  EXPECT_EQ(limit_of(domain, {{"multiWild", "foo123bar456baz"}}), 10);
  EXPECT_EQ(limit_of(domain, {{"multiWild", "foobarbaz"}}), 10);
  EXPECT_EQ(limit_of(domain, {{"multiWild", "foo123baz"}}), -1);
  EXPECT_EQ(limit_of(domain, {{"multiWild", "bar456baz"}}), -1);
}

// Which entries of a descriptor are counted by their wildcard (share_threshold): the pattern
// each entry is counted under, "" for its own value; empty when no limit applies.
std::vector<std::string> shared(const rls::Domain& domain, std::vector<rls::Entry> entries) {
  std::vector<const rls::DescriptorNode*> path;
  std::vector<std::string> out;
  if (rls::match(domain, entries, path) == nullptr) return out;
  for (const auto* node : path) out.push_back(node->share_threshold ? node->value : "");
  return out;
}

TEST(EnvoyRatelimitConfigs, ShareThresholdPatternsAreTheOnesTheirTestsExpect) {
  // TestShareThreshold: ShareThresholdKeyPattern of each descriptor.
  const auto domain = load("share_threshold.yaml");
  using V = std::vector<std::string>;
  EXPECT_EQ(shared(domain, {{"files", "files/a.txt"}}), V{"files/*"});
  EXPECT_EQ(shared(domain, {{"route", "api/v1"}, {"method", "GET"}}), (V{"api/*", ""}));
  EXPECT_EQ(shared(domain, {{"service", "svc/user"}, {"endpoint", "get"}}), (V{"svc/*", ""}));
  EXPECT_EQ(shared(domain, {{"nested", "parent"}, {"files", "nested/file1.txt"}}),
            (V{"", "nested/*"}));
  EXPECT_EQ(shared(domain, {{"files", "top/file1.txt"}, {"files", "nested/file1.txt"}}),
            (V{"top/*", "nested/*"}));
  EXPECT_EQ(shared(domain, {{"path", "path/foo"}, {"file", "file/doc1"}, {"type", "pdf"}}),
            (V{"path/*", "", ""}));
  EXPECT_EQ(shared(domain, {{"user", "user/alice"}, {"resource", "res/file1"}, {"action", "read"}}),
            (V{"user/*", "res/*", ""}));
  EXPECT_EQ(shared(domain, {{"file", "test1"}}), V{""});  // the exact value comes first
  EXPECT_EQ(limit_of(domain, {{"file", "test1"}}), 50);
  EXPECT_EQ(shared(domain, {{"file", "test2"}}), V{"test*"});
  EXPECT_EQ(limit_of(domain, {{"file", "test2"}}), 100);
  EXPECT_EQ(shared(domain, {{"midpath", "/api/x/v1"}}), V{"/api*v1"});
  EXPECT_EQ(shared(domain, {{"midpath", "/api/v2"}}), V{});
  EXPECT_EQ(shared(domain, {{"multiroute", "svc-a-ep-b-rpc"}}), V{"svc*ep*rpc"});
  EXPECT_EQ(shared(domain, {{"midroute", "/api/x/v2"}}), V{"/api*v2"});
  EXPECT_EQ(shared(domain, {{"tenant", "t1prod"}, {"resource", "res-x-v2"}}),
            (V{"t*prod", "res*v2"}));
}

}  // namespace
}  // namespace ratekeeper::server
