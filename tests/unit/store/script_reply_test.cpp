// Script replies into decisions (store/script_reply.hpp): the batch script's flat reply, its
// closed form for a repeated token bucket check, and replies that cannot be the script's.

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <tuple>
#include <vector>

#include "store/redis/script_reply.hpp"

namespace ratekeeper::store::detail {
namespace {

using algorithms::Algorithm;

redis::Reply integers(const std::vector<std::int64_t>& values) {
  redis::Reply r;
  r.type = redis::Reply::Type::array;
  for (auto v : values) {
    redis::Reply e;
    e.type = redis::Reply::Type::integer;
    e.integer = v;
    r.elements.push_back(e);
  }
  return r;
}

// One token bucket key (10 tokens, one per 100 ms) checked `repeats` times at cost 2.
struct Repeated {
  std::vector<CheckItem> items{
      {"k", *algorithms::Limit::make(Algorithm::token_bucket, 10, 100'000), 2}};
  std::vector<BatchEntry> entries;
  explicit Repeated(std::size_t repeats) : entries{{&items, repeats}} {}
};

TEST(ScriptReply, RepeatedTokenBucketCheckUnfoldsFromItsClosedForm) {
  Repeated r(4);
  // Three admitted, the first leaving 8 tokens and full again in 200 ms; the fourth denied.
  const auto out = parse_batch(integers({3, 1, 8, 0, 200'000, 0, 2, 100'000, 800'000}), r.entries);
  ASSERT_EQ(out.size(), 4u);
  for (std::int64_t k = 0; k < 3; ++k) {
    const auto& o = out[static_cast<std::size_t>(k)];
    ASSERT_TRUE(o) << o.error().message;
    EXPECT_TRUE(o->decision.allowed);
    EXPECT_EQ(o->decision.remaining, 8 - 2 * k);
    EXPECT_EQ(o->decision.reset_after, 200'000 + 200'000 * k);
  }
  ASSERT_TRUE(out[3]);
  EXPECT_FALSE(out[3]->decision.allowed);
  EXPECT_EQ(out[3]->decision.retry_after, 100'000);
}

// Found while writing fuzz/resp_fuzz, reproduced by it (corpus/resp/crash-compact-overflow,
// UBSan: signed integer overflow in the batch reply parser): the k-th admitted check
// was computed as remaining − k·cost and reset_after + k·cost·interval from the first
// decision of the reply, overflowing (undefined behaviour) for extreme values, and giving
// negative remaining counts for a first decision that could not have admitted the others.
TEST(ScriptReply, RepeatedCheckReplyThatCannotBeTheScriptsIsAProtocolError) {
  constexpr auto kMin = std::numeric_limits<std::int64_t>::min();
  constexpr auto kMax = std::numeric_limits<std::int64_t>::max();
  for (const auto& first :
       {std::vector<std::int64_t>{1, kMin, 0, 100'000},
        std::vector<std::int64_t>{1, 8, 0, kMax},
        std::vector<std::int64_t>{1, 1, 0, 200'000}}) {  // 3 × 2 tokens from 1 left
    Repeated r(3);
    std::vector<std::int64_t> fields{3};
    fields.insert(fields.end(), first.begin(), first.end());
    const auto out = parse_batch(integers(fields), r.entries);
    ASSERT_EQ(out.size(), 3u);
    for (const auto& o : out) {
      ASSERT_FALSE(o) << "remaining " << o->decision.remaining << ", reset_after "
                      << o->decision.reset_after;
      EXPECT_EQ(o.error().code, ErrorCode::protocol);
    }
  }
}

// The flat batch reply: a one-key token bucket check's one integer (reset_after; the rest
// follows from its limit), a one-key window check's 4 integers (its limit is the check's own
// capacity), then a two-key check repeated twice: the number answered, then per check its
// keys' decisions, combined as the script combines them.
TEST(ScriptReply, BatchReplyIsReadEntryByEntry) {
  const Limit ten = *algorithms::Limit::make(Algorithm::token_bucket, 10, 100'000);
  const Limit five = *algorithms::Limit::make(Algorithm::fixed_window, 5, 1'000'000);
  std::vector<CheckItem> one{{"a", ten, 1}};
  std::vector<CheckItem> window{{"w", five, 1}};
  std::vector<CheckItem> two{{"b", ten, 1}, {"c", five, 1}};
  const std::vector<BatchEntry> entries{{&one, 1}, {&window, 1}, {&two, 2}};
  const auto out = parse_batch(integers({300'000,                              // a
                                         1, 3, 0, 700'000,                     // w
                                         2,                                    // two answered
                                         1, 9, 0, 100'000, 1, 4, 0, 900'000,   // b, c
                                         1, 8, 0, 200'000, 0, 4, 900'000, 900'000}),
                               entries);
  ASSERT_EQ(out.size(), 4u);  // a, w, then the two checks of b and c
  ASSERT_TRUE(out[0] && out[1]);
  EXPECT_EQ(out[0]->decision, (Decision{true, 10, 7, 0, 300'000}));
  EXPECT_EQ(out[0]->items, std::vector<Decision>{out[0]->decision});
  EXPECT_EQ(out[1]->decision, (Decision{true, 5, 3, 0, 700'000}));
  ASSERT_TRUE(out[2] && out[3]);
  // Admitted: the limit with the fewest remaining (c), the longest reset_after.
  EXPECT_EQ(out[2]->decision, (Decision{true, 5, 4, 0, 900'000}));
  EXPECT_EQ(out[2]->items.at(0), (Decision{true, 10, 9, 0, 100'000}));
  // Denied by c: its limit, remaining and retry_after.
  EXPECT_EQ(out[3]->decision, (Decision{false, 5, 4, 900'000, 900'000}));
}

// A token bucket's one integer, as token_bucket::step decides from the state it implies: an
// admission (reset_after), a denial (−1 − reset_after) with a token short and with the
// bucket over-full (its capacity lowered since), an admission of cost 0 (a peek).
TEST(ScriptReply, TokenBucketDecisionInOneIntegerIsTheAlgorithms) {
  const Limit ten = *algorithms::Limit::make(Algorithm::token_bucket, 10, 100'000);  // τ = 1 s
  for (const auto& [packed, cost, expected] : std::vector<std::tuple<std::int64_t, std::int64_t, Decision>>{
           {1'000'000, 1, Decision{true, 10, 0, 0, 1'000'000}},
           {-1 - 950'000, 1, Decision{false, 10, 0, 50'000, 950'000}},
           {-1 - 950'000, 2, Decision{false, 10, 0, 150'000, 950'000}},
           {-1 - 3'000'000, 1, Decision{false, 10, 0, 2'100'000, 3'000'000}},
           {250'000, 0, Decision{true, 10, 7, 0, 250'000}}}) {
    std::vector<CheckItem> one{{"a", ten, cost}};
    const std::vector<BatchEntry> entries{{&one, 1}};
    const auto out = parse_batch(integers({packed}), entries);
    ASSERT_EQ(out.size(), 1u);
    ASSERT_TRUE(out[0]) << packed << ": " << out[0].error().message;
    EXPECT_EQ(out[0]->decision, expected) << packed;
  }
}

// An integer the script cannot have sent: an admission that moved the TAT back (below cost ×
// interval), an admission beyond τ, a denial the state it implies would admit, values
// beyond Lua's exact integers.
TEST(ScriptReply, TokenBucketIntegerTheScriptCannotSendFailsTheCheck) {
  const Limit ten = *algorithms::Limit::make(Algorithm::token_bucket, 10, 100'000);
  std::vector<CheckItem> one{{"a", ten, 1}};
  const std::vector<BatchEntry> entries{{&one, 1}};
  for (const std::int64_t packed : {std::int64_t{50'000}, std::int64_t{1'000'001}, std::int64_t{-1 - 100'000},
                                    std::int64_t{1} << 54, -(std::int64_t{1} << 54),
                                    std::numeric_limits<std::int64_t>::min(),
                                    std::numeric_limits<std::int64_t>::max()}) {
    const auto out = parse_batch(integers({packed}), entries);
    ASSERT_EQ(out.size(), 1u);
    ASSERT_FALSE(out[0]) << packed;
    EXPECT_EQ(out[0].error().code, ErrorCode::protocol);
  }
}

TEST(ScriptReply, BatchReplyOfAnotherShapeFailsEveryCheck) {
  const Limit ten = *algorithms::Limit::make(Algorithm::token_bucket, 10, 100'000);
  const Limit window = *algorithms::Limit::make(Algorithm::fixed_window, 10, 1'000'000);
  std::vector<CheckItem> one{{"a", window, 1}};  // one key once: 4 integers
  std::vector<CheckItem> two{{"b", ten, 1}, {"c", ten, 1}};
  const std::vector<BatchEntry> entries{{&one, 1}, {&two, 3}};
  for (const auto& fields : {
           std::vector<std::int64_t>{1, 9, 0, 100'000},                                   // an entry missing
           std::vector<std::int64_t>{1, 9, 0, 100'000, 1, 1, 9, 0, 1, 1, 9, 0, 1, 7},    // one too many
           std::vector<std::int64_t>{2, 9, 0, 100'000, 1, 1, 9, 0, 1, 1, 9, 0, 1},        // allowed is 2
           std::vector<std::int64_t>{1, 9, 0, 100'000, 4, 1, 9, 0, 1, 1, 9, 0, 1},        // 4 of 3 answered
           std::vector<std::int64_t>{1, 9, 0, 100'000, 1, 1, 9, 0, 1, 1, 9, 0, 1},        // 1 of 3, admitted
           std::vector<std::int64_t>{1, 9, 0, 100'000, 2, 0, 9, 5, 1, 1, 9, 0, 1,         // a denial, then more
                                     1, 9, 0, 1, 1, 9, 0, 1}}) {
    const auto out = parse_batch(integers(fields), entries);
    ASSERT_EQ(out.size(), 4u);  // one, and three of two
    for (const auto& o : out) {
      ASSERT_FALSE(o);
      EXPECT_EQ(o.error().code, ErrorCode::protocol);
    }
  }
}

// "multi_delay": "multi"'s reply, then the delay, carried by every decision of an admission.
TEST(ScriptReply, DelayedCheckReplyCarriesItsDelay) {
  const Limit l = *algorithms::Limit::make(Algorithm::token_bucket, 10, 100'000);
  const std::vector<CheckItem> items{{"a", l, 1, 1'000'000}, {"b", l, 1, 0}};
  const auto ok = parse_check_outcome(
      integers({1, 10, 0, 0, 1'300'000, 1, 10, 0, 0, 1'300'000, 1, 10, 5, 0, 600'000, 300'000}), items);
  ASSERT_TRUE(ok) << ok.error().message;
  EXPECT_TRUE(ok->decision.allowed);
  EXPECT_EQ(ok->decision.delay, 300'000);
  ASSERT_EQ(ok->items.size(), 2u);
  EXPECT_EQ(ok->items[0].delay, 300'000);
  EXPECT_EQ(ok->items[1].delay, 300'000);
  EXPECT_EQ(ok->items[1].remaining, 5);

  // A denial with a delay, a negative delay, one beyond kMaxDelay, a missing delay: not the script's.
  for (const auto& bad : {std::vector<std::int64_t>{0, 10, 0, 5, 9, 0, 10, 0, 5, 9, 1, 10, 5, 0, 6, 1},
                          std::vector<std::int64_t>{1, 10, 0, 0, 9, 1, 10, 0, 0, 9, 1, 10, 5, 0, 6, -1},
                          std::vector<std::int64_t>{1, 10, 0, 0, 9, 1, 10, 0, 0, 9, 1, 10, 5, 0, 6,
                                                    algorithms::kMaxDelay + 1},
                          std::vector<std::int64_t>{1, 10, 0, 0, 9, 1, 10, 0, 0, 9, 1, 10, 5, 0, 6}}) {
    const auto r = parse_check_outcome(integers(bad), items);
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code, ErrorCode::protocol);
  }
  // A check that may not wait is read as "multi"'s reply, without a delay.
  const std::vector<CheckItem> plain{{"a", l, 1}, {"b", l, 1}};
  const auto multi = parse_check_outcome(integers({1, 10, 0, 0, 9, 1, 10, 0, 0, 9, 1, 10, 5, 0, 6}), plain);
  ASSERT_TRUE(multi);
  EXPECT_EQ(multi->decision.delay, 0);
}

}  // namespace
}  // namespace ratekeeper::store::detail
