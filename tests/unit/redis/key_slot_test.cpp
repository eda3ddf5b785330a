#include "redis/key_slot.hpp"

#include <gtest/gtest.h>

#include "ratekeeper/limiter/keys.hpp"

namespace ratekeeper::redis {
namespace {

// Reference values from the Redis Cluster specification and CLUSTER KEYSLOT.
TEST(KeySlot, Crc16MatchesTheClusterSpecificationCheckValue) {
  EXPECT_EQ(crc16("123456789"), 0x31C3);
}

TEST(KeySlot, MatchesClusterKeyslotForPlainKeys) {
  EXPECT_EQ(key_slot("foo"), 12182);
  EXPECT_EQ(key_slot("bar"), 5061);
}

TEST(KeySlot, HashesOnlyTheFirstNonEmptyTag) {
  EXPECT_EQ(hash_tag("{user1000}.following"), "user1000");
  EXPECT_EQ(hash_tag("foo{}{bar}"), "foo{}{bar}");
  EXPECT_EQ(hash_tag("foo{{bar}}zap"), "{bar");
  EXPECT_EQ(hash_tag("foo{bar}{zap}"), "bar");
  EXPECT_EQ(key_slot("{user1000}.following"), key_slot("{user1000}.followers"));
}

TEST(KeySlot, EveryKeyOfOneIdentityIsInOneSlot) {
  auto a = limiter::make_key("ratelimit", "user:42", "api", "per_second");
  auto b = limiter::make_key("ratelimit", "user:42", "api", "per_hour");
  auto c = limiter::make_key("ratelimit", "user:42", "search");
  ASSERT_TRUE(a && b && c);
  EXPECT_EQ(key_slot(*a), key_slot(*b));
  EXPECT_EQ(key_slot(*a), key_slot(*c));
}

}  // namespace
}  // namespace ratekeeper::redis
