// What a caller can ask of one evaluation beyond the rules: the limits of an application given
// with it, the shadow rules' outcomes in the answer, and a store failure answered by no policy
// (FailureMode::error).

#include <gtest/gtest.h>

#include "ratekeeper/limiter/keys.hpp"
#include "ratekeeper/limiter/limiter.hpp"
#include "ratekeeper/store/memory_store.hpp"

namespace ratekeeper::limiter {
namespace {

using algorithms::Algorithm;
using algorithms::Limit;

constexpr Micros kStart = 1'700'000'000LL * kMicrosPerSecond;

Limit window(std::int64_t n) { return *Limit::window(Algorithm::fixed_window, static_cast<double>(n), 60 * kMicrosPerSecond); }

Rule rule(std::string name, Policy limits, bool shadow = false) {
  Rule r;
  r.name = std::move(name);
  r.limits = std::move(limits);
  r.shadow = shadow;
  return r;
}

class FailingStore final : public store::Store {
 public:
  void check(std::vector<store::CheckItem>, std::optional<Micros>, store::CheckCallback done) override {
    done(make_error(ErrorCode::unavailable, "connection refused"));
  }
  std::string_view kind() const noexcept override { return "failing"; }
};

class EvaluateOptionsTest : public ::testing::Test {
 protected:
  ManualClock clock{kStart};
  store::MemoryStore store{store::MemoryStoreOptions{.max_keys = 1000, .shards = 2, .clock = &clock}};

  static LimiterConfig config(std::vector<Rule> rules) {
    LimiterConfig c;
    c.rules = std::move(rules);
    return c;
  }
  static AppliedRule app(const Limiter& l, std::string_view name, std::string identity,
                         const Policy* limits = nullptr) {
    AppliedRule a;
    a.rule = l.find_rule(name);
    a.identity = std::move(identity);
    a.limits = limits;
    return a;
  }
};

TEST_F(EvaluateOptionsTest, LimitsGivenWithTheApplicationReplaceTheRulesOwn) {
  Limiter l(config({rule("r", {{"", window(100)}})}), store, &clock);
  const Policy two{{"", window(2)}};
  for (int i = 0; i < 2; ++i) {
    auto ev = l.evaluate_sync({app(l, "r", "user:1", &two)});
    ASSERT_TRUE(ev);
    EXPECT_TRUE(ev->allowed);
    EXPECT_EQ(ev->rules[0].decision.limit, 2);
  }
  auto third = l.evaluate_sync({app(l, "r", "user:1", &two)});
  ASSERT_TRUE(third);
  EXPECT_FALSE(third->allowed);
  // The rule's own limit counts on the same key: 2 of 100 taken.
  auto own = l.evaluate_sync({app(l, "r", "user:1")});
  ASSERT_TRUE(own);
  EXPECT_TRUE(own->allowed);
  EXPECT_EQ(own->rules[0].decision.limit, 100);
  EXPECT_EQ(own->rules[0].decision.remaining, 97);
}

TEST_F(EvaluateOptionsTest, ShadowOutcomesAreInTheAnswerOnlyWhenAskedFor) {
  Limiter l(config({rule("enforced", {{"", window(5)}}), rule("watched", {{"", window(1)}}, true)}),
            store, &clock);
  auto both = [&](EvaluateOptions options) {
    return l.evaluate_sync({app(l, "enforced", "user:1"), app(l, "watched", "user:1")}, options);
  };
  auto first = both({.with_shadow = true});
  ASSERT_TRUE(first);
  ASSERT_EQ(first->rules.size(), 1u);
  ASSERT_EQ(first->shadow.size(), 1u);
  EXPECT_TRUE(first->shadow[0].decision.allowed);
  EXPECT_EQ(first->shadow[0].rule, l.find_rule("watched"));

  auto second = both({.with_shadow = true});
  ASSERT_TRUE(second);
  EXPECT_TRUE(second->allowed);  // a shadow rule never denies
  ASSERT_EQ(second->shadow.size(), 1u);
  EXPECT_FALSE(second->shadow[0].decision.allowed);
  EXPECT_EQ(second->shadow[0].decision.remaining, 0);

  auto without = both({});
  ASSERT_TRUE(without);
  EXPECT_TRUE(without->shadow.empty());
  EXPECT_EQ(l.metrics().decisions(1, Outcome::shadow_denied), 2u);  // still counted
}

TEST_F(EvaluateOptionsTest, ShadowOnlyEvaluationWaitsForTheShadowRules) {
  Limiter l(config({rule("watched", {{"", window(1)}}, true)}), store, &clock);
  auto ev = l.evaluate_sync({app(l, "watched", "user:1")}, {.with_shadow = true});
  ASSERT_TRUE(ev);
  EXPECT_TRUE(ev->rules.empty());
  ASSERT_EQ(ev->shadow.size(), 1u);
  EXPECT_EQ(ev->shadow[0].decision.remaining, 0);
}

TEST_F(EvaluateOptionsTest, FailureModeErrorAnswersTheStoresError) {
  FailingStore failing;
  Rule r = rule("r", {{"", window(5)}});
  r.on_store_error = FailureMode::error;
  Rule open = rule("open", {{"", window(5)}});
  open.on_store_error = FailureMode::allow;
  Limiter l(config({r, open}), failing, &clock);
  auto ev = l.evaluate_sync({app(l, "r", "user:1"), app(l, "open", "user:1")});
  ASSERT_FALSE(ev);
  EXPECT_EQ(ev.error().code, ErrorCode::unavailable);
  auto allowed = l.evaluate_sync({app(l, "open", "user:1")});
  ASSERT_TRUE(allowed);
  EXPECT_TRUE(allowed->by_failure_policy);
  EXPECT_EQ(to_string(FailureMode::error), "error");
  EXPECT_FALSE(parse_failure_mode("error"));  // not a mode a configuration names
}

}  // namespace
}  // namespace ratekeeper::limiter
