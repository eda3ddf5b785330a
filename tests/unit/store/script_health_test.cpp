// What a Redis store learns from its script replies (store/script_health.hpp): the NOSCRIPT
// count, the health rule on a manual clock, and the error text made safe to show.

#include "store/redis/script_health.hpp"

#include <gtest/gtest.h>

#include <string>

namespace ratekeeper::store::detail {
namespace {

Result<redis::Reply> error_reply(std::string text) {
  redis::Reply r;
  r.type = redis::Reply::Type::error;
  r.str = std::move(text);
  return r;
}

Result<redis::Reply> integer_reply(std::int64_t v) {
  redis::Reply r;
  r.type = redis::Reply::Type::integer;
  r.integer = v;
  return r;
}

constexpr Micros kWindow = 10 * kMicrosPerSecond;

TEST(ScriptHealth, AnErrorReplyMakesTheStoreNotReadyForTheWindowWhateverSucceedsMeanwhile) {
  ManualClock clock(1'000'000);
  ScriptHealth replies({kWindow}, &clock);
  EXPECT_FALSE(replies.failing());
  replies.answered(integer_reply(1));
  EXPECT_FALSE(replies.failing());

  replies.answered(error_reply("OOM command not allowed when used memory > 'maxmemory'."));
  auto why = replies.failing();
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("OOM command not allowed"), std::string::npos) << *why;
  // Denials and peeks still succeed under noeviction: they do not make the store ready.
  clock.advance(kWindow / 2);
  replies.answered(integer_reply(1));
  EXPECT_TRUE(replies.failing());
  clock.advance(kWindow / 2 - 1);
  EXPECT_TRUE(replies.failing());
  clock.advance(1);
  EXPECT_FALSE(replies.failing());

  // Another error starts the window again, with its own text.
  replies.answered(error_reply("NOPERM this user has no permissions to run the 'evalsha' command"));
  why = replies.failing();
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("NOPERM"), std::string::npos) << *why;
  EXPECT_EQ(why->find("OOM"), std::string::npos) << *why;
}

// Timeouts and lost connections are the connection's to report (state, circuit breaker).
TEST(ScriptHealth, FailuresWithoutAReplyAreNotCounted) {
  ManualClock clock(0);
  ScriptHealth replies({kWindow}, &clock);
  replies.answered(make_error(ErrorCode::timeout, "deadline passed"));
  replies.answered(make_error(ErrorCode::unavailable, "connection lost"));
  EXPECT_FALSE(replies.failing());
}

TEST(ScriptHealth, CountsNoscriptReloads) {
  ScriptHealth replies;
  replies.reloaded();
  replies.reloaded();
  EXPECT_EQ(replies.noscript_reloads(), 2u);
  EXPECT_FALSE(replies.failing());
}

TEST(ScriptHealth, TheErrorTextIsBoundedAndValidUtf8) {
  ManualClock clock(0);
  ScriptHealth replies({kWindow}, &clock);
  replies.answered(error_reply("ERR key '\xff\xfe' " + std::string(100'000, 'x')));
  const auto why = replies.failing();
  ASSERT_TRUE(why);
  EXPECT_LT(why->size(), 400u);
  EXPECT_NE(why->find("ERR key '\xEF\xBF\xBD\xEF\xBF\xBD'"), std::string::npos) << *why;
  EXPECT_EQ(why->substr(why->size() - 3), "...");
}

TEST(BoundedText, KeepsValidUtf8AndReplacesEveryInvalidByte) {
  EXPECT_EQ(bounded_text("plain ascii", 100), "plain ascii");
  EXPECT_EQ(bounded_text("caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80", 100),
            "caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80");
  const std::string r = "\xEF\xBF\xBD";
  EXPECT_EQ(bounded_text(std::string("a\xFF") + "b", 100), "a" + r + "b");
  EXPECT_EQ(bounded_text("\xC0\xAF", 100), r + r);                  // overlong '/'
  EXPECT_EQ(bounded_text("\xED\xA0\x80", 100), r + r + r);          // a surrogate
  EXPECT_EQ(bounded_text("\xF4\x90\x80\x80", 100), r + r + r + r);  // above U+10FFFF
  EXPECT_EQ(bounded_text("end \xE2\x82", 100), "end " + r + r);     // a sequence cut short
  EXPECT_EQ(bounded_text("\x80", 100), r);
}

TEST(BoundedText, CutsAtACharacterBoundary) {
  EXPECT_EQ(bounded_text("abcdef", 6), "abcdef");
  EXPECT_EQ(bounded_text("abcdefg", 6), "abcdef...");
  // "é" is two bytes: it does not fit after five, and is not split.
  EXPECT_EQ(bounded_text("abcde\xC3\xA9", 6), "abcde...");
  EXPECT_EQ(bounded_text("abcd\xC3\xA9", 6), "abcd\xC3\xA9");
  EXPECT_EQ(bounded_text("", 6), "");
}

}  // namespace
}  // namespace ratekeeper::store::detail
