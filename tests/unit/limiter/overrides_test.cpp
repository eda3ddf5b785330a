// Per-identity overrides: how a factor scales each kind of limit, the table's entries, and a
// limiter applying them (tiers, parents, removal, refreshes that fail or arrive out of order).

#include <gtest/gtest.h>

#include <deque>
#include <future>

#include <fmt/format.h>

#include "ratekeeper/limiter/limiter.hpp"
#include "ratekeeper/limiter/overrides.hpp"
#include "ratekeeper/store/memory_store.hpp"

namespace ratekeeper::limiter {
namespace {

using algorithms::Algorithm;
using algorithms::Limit;

template <class T, class Call>
T answer_of(Call&& call) {
  std::promise<T> promise;
  auto future = promise.get_future();
  call([&promise](T r) { promise.set_value(std::move(r)); });
  return future.get();
}

TEST(OverrideScaling, ATokenBucketScalesItsBurstAndItsRate) {
  const Limit bucket = *Limit::make(Algorithm::token_bucket, 10, 100'000);  // 10, 10/s
  EXPECT_EQ(scale_limit(bucket, 10, 1), (Limit{Algorithm::token_bucket, 100, 10'000}));
  EXPECT_EQ(scale_limit(bucket, 0.5, 1), (Limit{Algorithm::token_bucket, 5, 200'000}));
  EXPECT_NEAR(scale_limit(bucket, 3, 1).rate_per_second(), 30, 0.001);  // the interval rounded to a µs
  // Never below the cost of one request, never past C·T's bound.
  EXPECT_EQ(scale_limit(bucket, 0.001, 3).capacity, 3);
  const Limit wide = *Limit::make(Algorithm::token_bucket, 1'000'000, algorithms::kMaxHorizon / 1'000'000);
  const Limit huge = scale_limit(wide, kMaxOverrideFactor, 1);
  EXPECT_LE(huge.capacity * huge.period, algorithms::kMaxHorizon);
  EXPECT_TRUE(Limit::make(huge.algorithm, huge.capacity, huge.period));
}

TEST(OverrideScaling, WindowsAndConcurrencyScaleTheirLimitAndKeepTheirPeriod) {
  for (auto algorithm : {Algorithm::fixed_window, Algorithm::sliding_window_log, Algorithm::sliding_window_counter}) {
    const Limit window = *Limit::make(algorithm, 100, 60 * kMicrosPerSecond);
    EXPECT_EQ(scale_limit(window, 2.5, 1), (Limit{algorithm, 250, 60 * kMicrosPerSecond}));
    EXPECT_EQ(scale_limit(window, 0.001, 1).capacity, 1);
    EXPECT_EQ(scale_limit(window, kMaxOverrideFactor, 1).capacity, 100'000'000);
  }
  const Limit slots = *Limit::make(Algorithm::concurrency, 4, 60 * kMicrosPerSecond);
  EXPECT_EQ(scale_limit(slots, 2, 1), (Limit{Algorithm::concurrency, 8, 60 * kMicrosPerSecond}));
  EXPECT_EQ(scale_limit(slots, kMaxOverrideFactor, 1).capacity, algorithms::kMaxConcurrency);
}

TEST(OverrideEntries, AnOverrideGoesThroughItsEntryAndBack) {
  const Override o{"api", "user:42", 10, "enterprise trial", "127.0.0.1", 1'765'000'000'000'000};
  EXPECT_EQ(override_field(o.rule, o.identity), "api:user:42");
  auto back = parse_override(override_field(o.rule, o.identity), override_value(o));
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(back->rule, o.rule);
  EXPECT_EQ(back->identity, o.identity);
  EXPECT_EQ(back->factor, o.factor);
  EXPECT_EQ(back->note, o.note);
  EXPECT_EQ(back->set_by, o.set_by);
  EXPECT_EQ(back->set_at, o.set_at);
}

TEST(OverrideEntries, EntriesThatDoNotDescribeAnOverrideAreRefused) {
  const std::string value = R"({"factor": 2})";
  EXPECT_TRUE(parse_override("api:user:1", value));
  EXPECT_FALSE(parse_override("nocolon", value));
  EXPECT_FALSE(parse_override(":user:1", value));
  EXPECT_FALSE(parse_override("bad rule:user:1", value));
  EXPECT_FALSE(parse_override("api:", value));  // no identity
  EXPECT_FALSE(parse_override("api:user:1", "not json"));
  EXPECT_FALSE(parse_override("api:user:1", "[2]"));
  EXPECT_FALSE(parse_override("api:user:1", R"({"factor": "2"})"));
  EXPECT_FALSE(parse_override("api:user:1", R"({"factor": 0})"));
  EXPECT_FALSE(parse_override("api:user:1", R"({"factor": 1e7})"));
  EXPECT_FALSE(parse_override("api:user:1", R"({"factor": 2, "note": ")" + std::string(300, 'x') + "\"}"));
  EXPECT_FALSE(parse_override("api:user:1", R"({"factor": 2, "set_at_us": 9000000000000000000})"));
  EXPECT_FALSE(parse_override("api:user:1", R"({"factor": 2, "set_at_us": -1})"));
}

Rule user_rule(std::string name, Policy limits) {
  Rule r;
  r.name = std::move(name);
  r.identity = {IdentityKind::header, "X-User-ID", "", "user"};
  r.limits = std::move(limits);
  return r;
}

Policy window_of(std::int64_t limit) {
  return {{"", *Limit::make(Algorithm::fixed_window, limit, 3600 * kMicrosPerSecond)}};
}

class OverridesTest : public ::testing::Test {
 protected:
  std::shared_ptr<Limiter> make(std::vector<Rule> rules) {
    LimiterConfig config;
    config.rules = std::move(rules);
    return std::make_shared<Limiter>(config, store_);
  }
  Result<store::TableWrite> set(Limiter& l, std::string rule, std::string identity, double factor) {
    return answer_of<Result<store::TableWrite>>([&](auto done) {
      l.set_override(Override{std::move(rule), std::move(identity), factor, "", "test", 0}, std::move(done));
    });
  }
  std::int64_t admitted(Limiter& l, std::string_view rule, std::string_view identity, int asks,
                        std::string_view parent = {}) {
    std::int64_t n = 0;
    for (int i = 0; i < asks; ++i) {
      auto app = l.application(rule, identity, 1, {}, parent);
      EXPECT_TRUE(app) << app.error().message;
      if (!app) return -1;
      auto ev = l.evaluate_sync({*app});
      EXPECT_TRUE(ev) << ev.error().message;
      if (ev && ev->allowed) ++n;
    }
    return n;
  }
  store::MemoryStore store_;
};

TEST_F(OverridesTest, AnOverrideScalesOneIdentitysLimitsUntilItIsRemoved) {
  auto l = make({user_rule("api", window_of(5))});
  auto written = set(*l, "api", "user:big", 3);
  ASSERT_TRUE(written) << written.error().message;
  EXPECT_FALSE(written->existed);
  EXPECT_EQ(l->overrides().version(), written->version);  // in effect here before the answer
  EXPECT_EQ(admitted(*l, "api", "user:big", 20), 15);
  EXPECT_EQ(admitted(*l, "api", "user:small", 20), 5);
  auto ev = l->evaluate_sync({*l->application("api", "user:big", 0)});
  ASSERT_TRUE(ev);
  EXPECT_EQ(ev->rules[0].factor, 3);
  EXPECT_EQ(ev->rules[0].limits[0].limit.capacity, 15);

  auto removed = answer_of<Result<bool>>([&](auto done) { l->remove_override("api", "user:big", std::move(done)); });
  ASSERT_TRUE(removed && *removed);
  EXPECT_EQ(l->overrides().table(), nullptr);  // none in effect: nothing to look up
  ev = l->evaluate_sync({*l->application("api", "user:big", 0)});
  ASSERT_TRUE(ev);
  EXPECT_EQ(ev->rules[0].factor, 1);
  EXPECT_EQ(ev->rules[0].limits[0].limit.capacity, 5);
  EXPECT_EQ(admitted(*l, "api", "user:big", 3), 0);  // 15 counted, above the rule's 5
  removed = answer_of<Result<bool>>([&](auto done) { l->remove_override("api", "user:big", std::move(done)); });
  ASSERT_TRUE(removed);
  EXPECT_FALSE(*removed);
}

TEST_F(OverridesTest, ATieredRulesOverrideScalesTheTierOfTheRequest) {
  Rule tiered = user_rule("tiered", {});
  tiered.tiered = true;
  auto l = make({tiered});
  ASSERT_TRUE(set(*l, "tiered", "user:7", 2));
  auto app = l->application("tiered", "user:7", 0, "pro");
  ASSERT_TRUE(app);
  auto ev = l->evaluate_sync({*app});
  ASSERT_TRUE(ev);
  const Policy& pro = *l->tiers().policy("pro");
  ASSERT_EQ(ev->rules[0].limits.size(), pro.size());
  for (std::size_t i = 0; i < pro.size(); ++i) {
    EXPECT_EQ(ev->rules[0].limits[i].limit, scale_limit(pro[i].limit, 2, 1)) << i;
  }
}

TEST_F(OverridesTest, AParentsOverrideScalesItsLimitsAndNotItsChildrens) {
  Rule members = user_rule("members", window_of(4));
  members.parent = ParentSpec{{IdentityKind::header, "X-Org-ID", "", "org"}, window_of(6)};
  auto l = make({members});
  ASSERT_TRUE(set(*l, "members", "org:acme", 2));  // the organisation: 12
  std::int64_t total = 0;
  for (int user = 0; user < 4; ++user) {
    const std::int64_t n = admitted(*l, "members", fmt::format("user:{}", user), 10, "org:acme");
    EXPECT_LE(n, 4);
    total += n;
  }
  EXPECT_EQ(total, 12);
  auto ev = l->evaluate_sync({*l->application("members", "user:0", 0, {}, "org:acme")});
  ASSERT_TRUE(ev);
  EXPECT_EQ(ev->rules[0].factor, 1);
  EXPECT_EQ(ev->rules[0].parent_factor, 2);
  EXPECT_EQ(ev->rules[0].limits[0].limit.capacity, 4);
  EXPECT_EQ(ev->rules[0].limits[1].limit.capacity, 12);
}

TEST_F(OverridesTest, AnOverrideOfAnUnknownRuleOrOutOfRangeIsRefused) {
  auto l = make({user_rule("api", window_of(5))});
  auto unknown = set(*l, "nope", "user:1", 2);
  ASSERT_FALSE(unknown);
  EXPECT_EQ(unknown.error().code, ErrorCode::invalid_argument);
  EXPECT_FALSE(set(*l, "api", "user:1", 0));
  EXPECT_FALSE(set(*l, "api", "user:1", 2e6));
  EXPECT_FALSE(set(*l, "api", "", 2));
  EXPECT_FALSE(set(*l, "api", std::string(300, 'u'), 2));
  EXPECT_EQ(l->overrides().table(), nullptr);
}

TEST_F(OverridesTest, AReloadedLimiterKeepsTheOverridesInEffect) {
  auto first = make({user_rule("api", window_of(5))});
  ASSERT_TRUE(set(*first, "api", "user:big", 2));
  auto second = make({user_rule("api", window_of(5))});
  second->share_overrides(*first);
  EXPECT_EQ(admitted(*second, "api", "user:big", 20), 10);
}

// A store whose table reads answer when the test says so (or fail), around a MemoryStore.
class HeldReads final : public store::Store {
 public:
  void check(std::vector<store::CheckItem> items, std::optional<Micros> now, store::CheckCallback done) override {
    inner.check(std::move(items), now, std::move(done));
  }
  std::string_view kind() const noexcept override { return "memory"; }
  bool supports_tables() const noexcept override { return true; }
  void read_table(std::string key, std::int64_t known, store::TableCallback done) override {
    if (fail) return done(make_error(ErrorCode::unavailable, "connection refused"));
    // The answer as the table is now, given later.
    inner.read_table(std::move(key), known, [this, done = std::move(done)](Result<std::optional<store::SharedTable>> r) {
      held.push_back([r = std::move(r), done]() mutable { done(std::move(r)); });
    });
  }
  void write_table(std::string key, std::string field, std::optional<std::string> value, std::size_t max,
                   store::TableWriteCallback done) override {
    inner.write_table(std::move(key), std::move(field), std::move(value), max, std::move(done));
  }
  store::MemoryStore inner;
  std::deque<std::function<void()>> held;
  bool fail = false;
};

TEST(OverridesRefresh, AnOlderReadArrivingLastDoesNotReplaceANewerTable) {
  HeldReads store;
  LimiterConfig config;
  config.rules = {user_rule("api", window_of(5))};
  auto l = std::make_shared<Limiter>(config, store);
  const std::string key = l->overrides_key();
  auto write = [&](std::optional<std::string> value) {
    return answer_of<Result<store::TableWrite>>([&](auto done) {
      store.inner.write_table(key, "api:user:1", std::move(value), kMaxOverrides, std::move(done));
    });
  };
  ASSERT_TRUE(write(override_value({"api", "user:1", 2, "", "", 0})));
  std::vector<Result<bool>> answers;
  l->refresh_overrides([&](Result<bool> r) { answers.push_back(std::move(r)); });  // reads factor 2
  ASSERT_TRUE(write(override_value({"api", "user:1", 3, "", "", 0})));
  l->refresh_overrides([&](Result<bool> r) { answers.push_back(std::move(r)); });  // reads factor 3
  ASSERT_EQ(store.held.size(), 2u);
  store.held[1]();  // the newer answers first
  store.held[0]();
  ASSERT_EQ(answers.size(), 2u);
  ASSERT_TRUE(answers[0] && answers[1]);
  EXPECT_TRUE(*answers[0]);
  EXPECT_FALSE(*answers[1]);  // the older one is left out
  auto table = l->overrides().table();
  ASSERT_NE(table, nullptr);
  ASSERT_NE(table->find("api", "user:1"), nullptr);
  EXPECT_EQ(table->find("api", "user:1")->factor, 3);
}

TEST(OverridesRefresh, AFailedReadKeepsTheTableInEffectAndIsCounted) {
  HeldReads store;
  LimiterConfig config;
  config.rules = {user_rule("api", window_of(5))};
  auto l = std::make_shared<Limiter>(config, store);
  ASSERT_TRUE(answer_of<Result<store::TableWrite>>([&](auto done) {
    store.inner.write_table(l->overrides_key(), "api:user:1", override_value({"api", "user:1", 2, "", "", 0}),
                            kMaxOverrides, std::move(done));
  }));
  std::optional<Result<bool>> answer;
  l->refresh_overrides([&](Result<bool> r) { answer = std::move(r); });
  ASSERT_EQ(store.held.size(), 1u);
  store.held[0]();
  ASSERT_TRUE(answer && *answer && **answer);
  store.fail = true;
  l->refresh_overrides([&](Result<bool> r) { answer = std::move(r); });
  ASSERT_TRUE(answer);
  EXPECT_FALSE(*answer);
  ASSERT_NE(l->overrides().table(), nullptr);
  EXPECT_EQ(l->overrides().table()->size, 1u);
  const std::string metrics = l->metrics_text();
  EXPECT_NE(metrics.find("ratekeeper_overrides 1"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("ratekeeper_overrides_refreshes_total{result=\"failed\"} 1"), std::string::npos) << metrics;
}

TEST(OverridesRefresh, EntriesThatDoNotParseAreLeftOutAndCounted) {
  Overrides overrides;
  EXPECT_EQ(overrides.apply(7, {{"api:user:1", R"({"factor": 2})"}, {"api:user:2", "garbage"}, {"broken", "{}"}}),
            2u);
  auto table = overrides.table();
  ASSERT_NE(table, nullptr);
  EXPECT_EQ(table->size, 1u);
  EXPECT_EQ(table->version, 7);
  EXPECT_NE(table->find("api", "user:1"), nullptr);
  EXPECT_EQ(table->find("api", "user:2"), nullptr);
}

}  // namespace
}  // namespace ratekeeper::limiter
