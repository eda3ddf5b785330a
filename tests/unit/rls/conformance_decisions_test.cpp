// Conformance with envoyproxy/ratelimit, decided: the README's examples (rls_readme_examples.hpp,
// whose matching conformance_test checks) answered by the service as the README says they are
// limited. A limit of N per unit admits N requests of a window and answers OVER_LIMIT to the
// next; each value of a key without value (or matching a wildcard) has a counter of its own;
// unlimited and unmatched descriptors are OK without a limit; `replaces` and shadow_mode as
// the README explains them.

#include <gtest/gtest.h>

#include <string>

#include "ratekeeper/store/memory_store.hpp"
#include "rls_readme_examples.hpp"
#include "rls_service.hpp"

namespace ratekeeper::rls {
namespace {

using namespace ratekeeper::testing::rls_examples;
using ratekeeper::testing::Entries;
using ratekeeper::testing::rls_request;
using ratekeeper::testing::RlsService;

constexpr Micros kSecond = kMicrosPerSecond;
constexpr Micros kMinute = 60 * kSecond;
constexpr Micros kDay = 86'400 * kSecond;
// 2023-11-14 12:00:00 UTC: the start of a second, a minute, an hour.
constexpr Micros kStart = (19'675LL * 86'400 + 12 * 3'600) * kSecond;

constexpr auto kOk = pb::RateLimitResponse::OK;
constexpr auto kOver = pb::RateLimitResponse::OVER_LIMIT;

class RlsConformanceDecisions : public ::testing::Test {
 protected:
  ManualClock clock{kStart};
  store::MemoryStore store{
      store::MemoryStoreOptions{.max_keys = 10'000, .shards = 2, .clock = &clock}};

  RlsService service(std::string_view yaml) { return RlsService({yaml}, store, clock); }

  // `n` requests answered OK with n-1, n-2, … 0 remaining, then one OVER_LIMIT.
  static void expect_limit(RlsService& rls, const pb::RateLimitRequest& request, std::uint32_t n) {
    for (std::uint32_t i = 1; i <= n; ++i) {
      const auto r = rls.answer(request);
      ASSERT_EQ(r.overall_code(), kOk) << "request " << i << " of " << n;
      ASSERT_TRUE(r.statuses(0).has_current_limit());
      ASSERT_EQ(r.statuses(0).current_limit().requests_per_unit(), n);
      ASSERT_EQ(r.statuses(0).limit_remaining(), n - i);
    }
    const auto over = rls.answer(request);
    EXPECT_EQ(over.overall_code(), kOver) << "request " << n + 1 << " of " << n;
    EXPECT_EQ(over.statuses(0).code(), kOver);
  }

  // Every one of `times` requests answered OK with no limit on any descriptor.
  static void expect_no_limit(RlsService& rls, const pb::RateLimitRequest& request, int times = 3) {
    for (int i = 0; i < times; ++i) {
      const auto r = rls.answer(request);
      EXPECT_EQ(r.overall_code(), kOk);
      for (const auto& s : r.statuses()) {
        EXPECT_EQ(s.code(), kOk);
        EXPECT_FALSE(s.has_current_limit());
      }
    }
  }
};

TEST_F(RlsConformanceDecisions, Example1EachListedValueHasItsOwn500PerSecond) {
  auto rls = service(kExample1);
  const auto users = rls_request("mongo_cps", {{{"database", "users"}}});
  expect_limit(rls, users, 500);
  expect_limit(rls, rls_request("mongo_cps", {{{"database", "default"}}}), 500);
  expect_no_limit(rls, rls_request("mongo_cps", {{{"database", "orders"}}}));
  clock.advance(kSecond);
  EXPECT_EQ(rls.code(users), kOk);
}

TEST_F(RlsConformanceDecisions, Example2MarketingMessagesFivePerDayPerNumber) {
  auto rls = service(kExample2);
  const Entries marketing = {{"message_type", "marketing"}, {"to_number", "2061111111"}};
  expect_limit(rls, rls_request("messaging", {marketing}), 5);
  // Another number has five of its own; the number's own limit is counted apart.
  expect_limit(
      rls, rls_request("messaging", {{{"message_type", "marketing"}, {"to_number", "2062222222"}}}),
      5);
  expect_limit(rls, rls_request("messaging", {{{"to_number", "2061111111"}}}), 100);
  expect_no_limit(rls, rls_request("messaging", {{{"message_type", "marketing"}}}));
  clock.advance(kDay);
  EXPECT_EQ(rls.code(rls_request("messaging", {marketing})), kOk);
}

TEST_F(RlsConformanceDecisions, Example2BothDescriptorsInOneRequestStopAtTheStricter) {
  auto rls = service(kExample2);
  const auto both =
      rls_request("messaging", {{{"message_type", "marketing"}, {"to_number", "2061111111"}},
                                {{"to_number", "2061111111"}}});
  for (int i = 0; i < 5; ++i) EXPECT_EQ(rls.code(both), kOk);
  const auto over = rls.answer(both);
  EXPECT_EQ(over.overall_code(), kOver);
  EXPECT_EQ(over.statuses(0).code(), kOver);
  EXPECT_EQ(over.statuses(1).code(), kOk);
  EXPECT_EQ(over.statuses(1).limit_remaining(), 95u);
}

TEST_F(RlsConformanceDecisions, Example3EachRemoteAddressItsOwnLimitAndOneRefused) {
  auto rls = service(kExample3);
  expect_limit(rls, rls_request("edge_proxy_per_ip", {{{"remote_address", "50.0.0.1"}}}), 10);
  expect_limit(rls, rls_request("edge_proxy_per_ip", {{{"remote_address", "50.0.0.2"}}}), 10);
  const auto refused = rls_request("edge_proxy_per_ip", {{{"remote_address", "50.0.0.5"}}});
  for (int i = 0; i < 3; ++i) {
    const auto r = rls.answer(refused);
    EXPECT_EQ(r.overall_code(), kOver);
    EXPECT_EQ(r.statuses(0).current_limit().requests_per_unit(), 0u);
  }
  clock.advance(kSecond);
  EXPECT_EQ(rls.code(refused), kOver);
  EXPECT_EQ(rls.code(rls_request("edge_proxy_per_ip", {{{"remote_address", "50.0.0.1"}}})), kOk);
}

TEST_F(RlsConformanceDecisions, Example4TheLimitAppliesAtItsOwnDepthOnly) {
  const Entries two = {{"key", "value"}, {"subkey", "subvalue"}};
  auto flat = service(kExample4Flat);
  expect_no_limit(flat, rls_request("example4", {two}));
  expect_limit(flat, rls_request("example4", {{{"key", "value"}}}), 300);

  auto nested = service(kExample4Nested);
  expect_no_limit(nested, rls_request("example4", {{{"key", "value"}}}));
  expect_limit(nested, rls_request("example4", {two}), 300);
  // Each subkey value has its own.
  expect_limit(nested, rls_request("example4", {{{"key", "value"}, {"subkey", "other"}}}), 300);
}

TEST_F(RlsConformanceDecisions, Example5UnlimitedIsNeverLimited) {
  auto rls = service(kExample5);
  expect_no_limit(rls, rls_request("internal", {{{"ldap", "cn=admin"}}}), 1'000);
  expect_limit(rls, rls_request("internal", {{{"azure", "tenant-1"}}}), 100);
  expect_no_limit(rls, rls_request("internal", {{{"gcp", "project"}}}));
  // With a limited descriptor, the unlimited one changes nothing.
  const auto r =
      rls.answer(rls_request("internal", {{{"ldap", "cn=admin"}}, {{"azure", "tenant-1"}}}));
  EXPECT_EQ(r.overall_code(), kOver);
  EXPECT_EQ(r.statuses(0).code(), kOk);
  EXPECT_FALSE(r.statuses(0).has_current_limit());
}

TEST_F(RlsConformanceDecisions, Example6ShadowModeUserIsCountedButNeverRefused) {
  auto rls = service(kExample6);
  const auto user_a = rls_request("example6", {{{"service", "auth-service"}, {"user", "user-a"}}});
  for (std::uint32_t i = 1; i <= 15; ++i) {
    const auto r = rls.answer(user_a);
    EXPECT_EQ(r.overall_code(), kOk) << i;
    EXPECT_EQ(r.statuses(0).code(), kOk) << i;
    EXPECT_EQ(r.statuses(0).current_limit().requests_per_unit(), 10u);
    EXPECT_EQ(r.statuses(0).limit_remaining(), i <= 10 ? 10 - i : 0u) << i;
  }
  expect_limit(rls, rls_request("example6", {{{"service", "auth-service"}, {"user", "user-b"}}}),
               20);
  expect_no_limit(rls,
                  rls_request("example6", {{{"service", "auth-service"}, {"user", "user-c"}}}));
}

TEST_F(RlsConformanceDecisions, Example7TheReplacingLimitAloneAppliesWhenBothMatch) {
  auto rls = service(kExample7);
  const Entries specific = {{"key_1", "value_1"}, {"user", "bkthomps"}};
  const Entries replacing = {{"key_2", "value_2"}, {"user", "bkthomps"}};
  // Together: 10 per second, the 5 per second not applied.
  const auto both = rls_request("example7", {specific, replacing});
  for (std::uint32_t i = 1; i <= 10; ++i) {
    const auto r = rls.answer(both);
    ASSERT_EQ(r.overall_code(), kOk) << i;
    EXPECT_FALSE(r.statuses(0).has_current_limit());
    EXPECT_EQ(r.statuses(1).current_limit().requests_per_unit(), 10u);
  }
  EXPECT_EQ(rls.code(both), kOver);
  // "this will not affect the 5 / sec limit": alone, the first has all of its 5.
  expect_limit(rls, rls_request("example7", {specific}), 5);
  clock.advance(kSecond);
  expect_limit(rls, rls_request("example7", {replacing}), 10);
}

TEST_F(RlsConformanceDecisions, Example8EachUnspecifiedValueHasItsOwnLimit) {
  auto rls = service(kExample8);
  expect_limit(rls, rls_request("example8", {{{"key1", "unspecified_value"}}}), 10);
  expect_limit(rls, rls_request("example8", {{{"key1", "unspecified_value2"}}}), 10);
  expect_limit(rls, rls_request("example8", {{{"key1", "value1"}}}), 20);
  clock.advance(kMinute);
  EXPECT_EQ(rls.code(rls_request("example8", {{{"key1", "unspecified_value"}}})), kOk);
}

TEST_F(RlsConformanceDecisions, Example9EachValueAWildcardMatchesIsCountedOnItsOwn) {
  auto rls = service(kExample9);
  expect_limit(rls, rls_request("example9", {{{"key1", "value1"}}}), 20);
  expect_limit(rls, rls_request("example9", {{{"key1", "value2"}}}), 20);
  expect_limit(rls, rls_request("example9", {{{"key1", "value"}}}), 20);
  expect_no_limit(rls, rls_request("example9", {{{"key1", "other"}}}));
}

TEST_F(RlsConformanceDecisions, TheDockerComposeDemoAnswersItsCurlCalls) {
  auto rls = service(kDockerComposeDemo);
  // /header: (foo), 2 per minute.
  expect_limit(rls, rls_request("rl", {{{"foo", "foo"}}}), 2);
  // /twoheader: (foo, bar) 3 per minute; (foo, baz) 1 per second.
  expect_limit(rls, rls_request("rl", {{{"foo", "foo"}, {"bar", "bar"}}}), 3);
  expect_limit(rls, rls_request("rl", {{{"foo", "foo"}, {"baz", "baz"}}}), 1);
  // Banned: over from the first request.
  EXPECT_EQ(rls.code(rls_request("rl", {{{"foo", "foo"}, {"bar", "banned"}}})), kOver);
  // Shady: 1 per minute in shadow mode, never refused.
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(rls.code(rls_request("rl", {{{"foo", "foo"}, {"baz", "shady"}}})), kOk);
  }
  expect_no_limit(rls, rls_request("rl", {{{"foo", "foo"}, {"bay", "any"}}}));
  expect_no_limit(rls, rls_request("rl", {{{"qux", "any"}}}));
  expect_limit(
      rls, rls_request("rl", {{{"source_cluster", "proxy"}, {"destination_cluster", "mock"}}}), 1);
}

}  // namespace
}  // namespace ratekeeper::rls
