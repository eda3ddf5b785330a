// Key naming: <prefix>:{<identity>}:<rule>[:<limit>], identities escaped so that the hash tag
// cannot be broken and no identity can spell another one's key.

#include <gtest/gtest.h>

#include <tuple>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <string>

#include "ratekeeper/limiter/keys.hpp"

namespace ratekeeper::limiter {
namespace {

std::string must_key(std::string_view prefix, std::string_view identity, std::string_view rule,
                     std::string_view limit_name = {}) {
  auto key = make_key(prefix, identity, rule, limit_name);
  EXPECT_TRUE(key) << key.error().message;
  return key.value_or("");
}

// Reverses the percent-encoding.
std::string unescape(std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size()) {
      out.push_back(static_cast<char>(std::stoi(std::string(s.substr(i + 1, 2)), nullptr, 16)));
      i += 2;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

// The Redis Cluster hash tag: between the first '{' and the first '}' after it.
std::string hash_tag(std::string_view key) {
  const auto open = key.find('{');
  if (open == std::string_view::npos) return std::string(key);
  const auto close = key.find('}', open + 1);
  if (close == std::string_view::npos || close == open + 1) return std::string(key);
  return std::string(key.substr(open + 1, close - open - 1));
}

TEST(Keys, FollowThePrefixIdentityRuleConvention) {
  EXPECT_EQ(must_key(kDefaultPrefix, "ip:192.0.2.7", "api"), "ratelimit:{ip:192.0.2.7}:api");
  EXPECT_EQ(must_key(kDefaultPrefix, "user:123", "search"), "ratelimit:{user:123}:search");
  EXPECT_EQ(must_key("rk", "user:123", "search", "per_hour"), "rk:{user:123}:search:per_hour");
  EXPECT_EQ(must_key(kDefaultPrefix, "2001:db8::1", "api"), "ratelimit:{2001:db8::1}:api");
}

TEST(Keys, EveryKeyOfOneIdentitySharesItsHashTag) {
  const std::string a = must_key(kDefaultPrefix, "user:42", "api", "per_second");
  const std::string b = must_key(kDefaultPrefix, "user:42", "api", "per_hour");
  const std::string c = must_key(kDefaultPrefix, "user:42", "login");
  EXPECT_EQ(hash_tag(a), "user:42");
  EXPECT_EQ(hash_tag(b), hash_tag(a));
  EXPECT_EQ(hash_tag(c), hash_tag(a));
}

TEST(Keys, BracesPercentSpacesControlAndNonAsciiBytesAreEscaped) {
  EXPECT_EQ(escape_identity("a{b}c").value(), "a%7Bb%7Dc");
  EXPECT_EQ(escape_identity("100%").value(), "100%25");
  EXPECT_EQ(escape_identity("a b").value(), "a%20b");
  EXPECT_EQ(escape_identity(std::string("a\0b", 3)).value(), "a%00b");
  EXPECT_EQ(escape_identity("tab\there").value(), "tab%09here");
  EXPECT_EQ(escape_identity("\x7f").value(), "%7F");
  EXPECT_EQ(escape_identity("caf\xc3\xa9").value(), "caf%C3%A9");
  EXPECT_EQ(escape_identity("user:alice@example.com").value(), "user:alice@example.com");
}

TEST(Keys, AnIdentityCannotEndTheHashTagEarly) {
  // Without escaping, "x}:api" would make the tag "x" and collide with identity "x".
  const std::string attack = must_key(kDefaultPrefix, "x}:other", "api");
  EXPECT_EQ(hash_tag(attack), "x%7D:other");
  EXPECT_NE(attack, must_key(kDefaultPrefix, "x", "other:api"));
  EXPECT_NE(hash_tag(attack), hash_tag(must_key(kDefaultPrefix, "x", "api")));
}

TEST(Keys, AnIdentityCannotSpellAnotherIdentitysEscapedForm) {
  // The '%' of an already escaped-looking identity is itself escaped.
  EXPECT_NE(must_key(kDefaultPrefix, "a%7Db", "api"), must_key(kDefaultPrefix, "a}b", "api"));
}

TEST(Keys, PrefixAndNamesCannotMoveTheHashTag) {
  for (auto [prefix, rule, limit] : {std::tuple{"rl{x}", "api", ""}, std::tuple{"rl", "a}pi", ""},
                                     std::tuple{"rl", "api", "{per_s"}, std::tuple{"rl", "a pi", ""},
                                     std::tuple{"", "api", ""}, std::tuple{"rl", "", ""}}) {
    auto key = make_key(prefix, "ip:192.0.2.7", rule, limit);
    ASSERT_FALSE(key) << prefix << " " << rule << " " << limit << " → " << *key;
    EXPECT_EQ(key.error().code, ErrorCode::invalid_argument);
  }
  EXPECT_EQ(*make_key("app:rl", "ip:192.0.2.7", "api:/v1", "pro:per_s"), "app:rl:{ip:192.0.2.7}:api:/v1:pro:per_s");
}

TEST(Keys, EmptyAndOverlongIdentitiesAreInvalidArguments) {
  auto empty = escape_identity("");
  ASSERT_FALSE(empty);
  EXPECT_EQ(empty.error().code, ErrorCode::invalid_argument);
  EXPECT_NE(empty.error().message.find("identity"), std::string::npos);

  EXPECT_TRUE(escape_identity(std::string(kMaxIdentityBytes, 'a')));
  auto long_id = escape_identity(std::string(kMaxIdentityBytes + 1, 'a'));
  ASSERT_FALSE(long_id);
  EXPECT_EQ(long_id.error().code, ErrorCode::invalid_argument);
  EXPECT_NE(long_id.error().message.find("identity"), std::string::npos);
  // The limit applies to the escaped form: 100 spaces become 300 bytes.
  EXPECT_FALSE(escape_identity(std::string(100, ' ')));
}

RC_GTEST_PROP(KeysProperty, EscapingIsReversibleAndKeepsTheTagIntact, (const std::string& identity)) {
  RC_PRE(!identity.empty());
  auto escaped = escape_identity(identity);
  if (!escaped) {
    RC_ASSERT(escaped.error().code == ErrorCode::invalid_argument);
    return;
  }
  RC_ASSERT(escaped->size() <= kMaxIdentityBytes);
  RC_ASSERT(std::none_of(escaped->begin(), escaped->end(), [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return c == '{' || c == '}' || u <= 0x20 || u >= 0x7f;
  }));
  RC_ASSERT(unescape(*escaped) == identity);
  const std::string key = must_key(kDefaultPrefix, identity, "api");
  RC_ASSERT(hash_tag(key) == *escaped);
}

RC_GTEST_PROP(KeysProperty, DistinctIdentitiesGetDistinctKeys,
              (const std::string& a, const std::string& b)) {
  RC_PRE(!a.empty() && !b.empty() && a != b);
  auto ka = make_key(kDefaultPrefix, a, "api");
  auto kb = make_key(kDefaultPrefix, b, "api");
  RC_PRE(ka.has_value() && kb.has_value());
  RC_ASSERT(*ka != *kb);
}

}  // namespace
}  // namespace ratekeeper::limiter
