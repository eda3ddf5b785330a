// The Limiter over a MemoryStore with a manual clock: multi-rule and multi-limit
// all-or-nothing, shadow rules, tiers, per-endpoint buckets, failure policies, decision API.

#include "ratekeeper/limiter/limiter.hpp"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "ratekeeper/algorithms/lease.hpp"
#include "ratekeeper/limiter/keys.hpp"
#include "ratekeeper/store/memory_store.hpp"

namespace ratekeeper::limiter {
namespace {

using algorithms::Algorithm;
using algorithms::Limit;

constexpr Micros kStart = 1'700'000'000LL * kMicrosPerSecond;

Limit bucket(double capacity, double per_second) {
  return *Limit::token_bucket(capacity, per_second);
}

Rule ip_rule(std::string name, Policy limits) {
  Rule r;
  r.name = std::move(name);
  r.limits = std::move(limits);
  return r;
}

// A store that cannot answer: what a dead Redis looks like to the limiter.
class FailingStore final : public store::Store {
 public:
  void check(std::vector<store::CheckItem>, std::optional<Micros>,
             store::CheckCallback done) override {
    ++calls;
    done(make_error(ErrorCode::unavailable, "connection refused"));
  }
  void reserve(store::ReservationRecord, std::vector<store::CheckItem>, std::optional<Micros>,
               store::CheckCallback done) override {
    ++calls;
    done(make_error(ErrorCode::unavailable, "connection refused"));
  }
  std::string_view kind() const noexcept override { return "failing"; }
  store::StoreHealth health() const override { return {false, "connection refused"}; }
  int calls = 0;
};

class LimiterTest : public ::testing::Test {
 protected:
  ManualClock clock{kStart};
  store::MemoryStore store{
      store::MemoryStoreOptions{.max_keys = 10'000, .shards = 4, .clock = &clock}};
  std::vector<std::string> log_lines;

  LimiterConfig config(std::vector<Rule> rules) {
    LimiterConfig c;
    c.rules = std::move(rules);
    c.decision_log.sink = [this](std::string_view line) { log_lines.emplace_back(line); };
    c.decision_log.clock = &clock;
    return c;
  }

  static AppliedRule app(const Limiter& l, std::string_view rule, std::string identity) {
    AppliedRule a;
    a.rule = l.find_rule(rule);
    a.identity = std::move(identity);
    return a;
  }

  // The remaining units of a key without consuming (cost 0 peeks).
  std::int64_t remaining(const std::string& key, const Limit& limit) {
    auto d = store.check_one(key, limit, 0);
    EXPECT_TRUE(d);
    return d ? d->remaining : -1;
  }
};

TEST_F(LimiterTest, RequestDeniedByRuleBConsumesNothingFromRuleA) {
  Limiter l(config({ip_rule("a", {{"", bucket(10, 1)}}), ip_rule("b", {{"", bucket(1, 0.001)}})}),
            store);
  auto both = [&] {
    return l.evaluate_sync({app(l, "a", "ip:192.0.2.7"), app(l, "b", "ip:192.0.2.7")});
  };
  auto first = both();
  ASSERT_TRUE(first);
  EXPECT_TRUE(first->allowed);
  const auto key_a = *make_key("ratelimit", "ip:192.0.2.7", "a");
  EXPECT_EQ(remaining(key_a, bucket(10, 1)), 9);

  for (int i = 0; i < 5; ++i) {
    auto denied = both();
    ASSERT_TRUE(denied);
    EXPECT_FALSE(denied->allowed);
    ASSERT_EQ(denied->rules.size(), 2u);
    EXPECT_TRUE(denied->rules[0].decision.allowed);   // a alone would admit
    EXPECT_FALSE(denied->rules[1].decision.allowed);  // b denies
  }
  EXPECT_EQ(remaining(key_a, bucket(10, 1)), 9);  // nothing consumed from a by the denials
  EXPECT_EQ(l.metrics().decisions(1, Outcome::denied), 5u);
}

// The admin's inspection reads each limit's key and what is left, consuming and counting
// nothing; a reset deletes the keys, and the identity's next request starts from full limits.
TEST_F(LimiterTest, InspectionConsumesNothingAndAResetStartsFromFullLimits) {
  const auto hourly = *Limit::window(Algorithm::fixed_window, 3, 3600 * kMicrosPerSecond);
  Limiter l(config({ip_rule("api", {{"burst", bucket(2, 0.001)}, {"hourly", hourly}})}), store);
  auto inspect = [&](std::string identity) {
    Result<RuleOutcome> out = make_error(ErrorCode::unavailable, "not answered");
    l.inspect(app(l, "api", std::move(identity)), [&](Result<RuleOutcome> r) { out = std::move(r); });
    return out;
  };
  auto reset = [&](std::string identity) {
    Result<Limiter::ResetOutcome> out = make_error(ErrorCode::unavailable, "not answered");
    l.reset(app(l, "api", std::move(identity)), [&](Result<Limiter::ResetOutcome> r) { out = std::move(r); });
    return out;
  };
  auto request = [&] { return l.evaluate_sync({app(l, "api", "ip:192.0.2.7")}); };

  ASSERT_TRUE(request()->allowed);
  const std::size_t logged = log_lines.size();
  for (int i = 0; i < 3; ++i) {
    auto seen = inspect("ip:192.0.2.7");
    ASSERT_TRUE(seen) << seen.error().message;
    ASSERT_EQ(seen->limits.size(), 2u);
    EXPECT_EQ(seen->limits[0].key, "ratelimit:{ip:192.0.2.7}:api:burst");
    EXPECT_EQ(seen->limits[0].policy_name, "api.burst");
    EXPECT_EQ(seen->limits[0].decision.remaining, 1);
    EXPECT_EQ(seen->limits[1].key, "ratelimit:{ip:192.0.2.7}:api:hourly");
    EXPECT_EQ(seen->limits[1].decision.remaining, 2);
    EXPECT_EQ(seen->decision.remaining, 1);
  }
  EXPECT_EQ(l.metrics().decisions(0, Outcome::allowed), 1u);
  EXPECT_EQ(log_lines.size(), logged);

  ASSERT_TRUE(request()->allowed);
  ASSERT_FALSE(request()->allowed);
  auto done = reset("ip:192.0.2.7");
  ASSERT_TRUE(done) << done.error().message;
  EXPECT_EQ(done->keys, (std::vector<std::string>{"ratelimit:{ip:192.0.2.7}:api:burst",
                                                 "ratelimit:{ip:192.0.2.7}:api:hourly"}));
  EXPECT_EQ(done->existed, 2);
  auto after = request();
  ASSERT_TRUE(after->allowed);
  EXPECT_EQ(after->rules[0].limits[0].decision.remaining, 1);
  EXPECT_EQ(after->rules[0].limits[1].decision.remaining, 2);

  // An identity never seen: nothing held, nothing deleted; a bad one is refused.
  auto fresh = reset("ip:198.51.100.1");
  ASSERT_TRUE(fresh);
  EXPECT_EQ(fresh->existed, 0);
  EXPECT_EQ(inspect("ip:198.51.100.1")->limits[0].decision.remaining, 2);
  auto bad = inspect("");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, ErrorCode::invalid_argument);
}

// A reserved check takes the estimate from every limit of the rule and answers the id its
// record is under; a settlement brings each limit to the actual cost, once.
TEST_F(LimiterTest, AReservationIsSettledToTheActualCostOnce) {
  const auto hourly = *Limit::window(Algorithm::fixed_window, 100, 3600 * kMicrosPerSecond);
  Limiter l(config({ip_rule("api", {{"burst", bucket(10, 0.001)}, {"hourly", hourly}})}), store, &clock);
  auto reserve = [&](std::int64_t estimate) {
    Result<Verdict> out = make_error(ErrorCode::unavailable, "not answered");
    l.reserve("api", "ip:192.0.2.7", estimate, 60 * kMicrosPerSecond, [&](Result<Verdict> r) { out = std::move(r); });
    return out;
  };
  auto settle = [&](const std::string& id, std::int64_t actual) {
    Result<bool> out = make_error(ErrorCode::unavailable, "not answered");
    l.settle(app(l, "api", "ip:192.0.2.7"), id, actual, [&](Result<bool> r) { out = std::move(r); });
    return out;
  };
  const auto burst = *make_key("ratelimit", "ip:192.0.2.7", "api", "burst");
  const auto hour = *make_key("ratelimit", "ip:192.0.2.7", "api", "hourly");

  auto first = reserve(6);
  ASSERT_TRUE(first) << first.error().message;
  EXPECT_TRUE(first->decision.allowed);
  EXPECT_TRUE(valid_reservation_id(first->reservation)) << first->reservation;
  EXPECT_EQ(remaining(burst, bucket(10, 0.001)), 4);
  EXPECT_EQ(remaining(hour, hourly), 94);
  auto settled = settle(first->reservation, 2);
  ASSERT_TRUE(settled) << settled.error().message;
  EXPECT_TRUE(*settled);
  EXPECT_EQ(remaining(burst, bucket(10, 0.001)), 8);
  EXPECT_EQ(remaining(hour, hourly), 98);
  EXPECT_FALSE(*settle(first->reservation, 0));
  EXPECT_EQ(remaining(burst, bucket(10, 0.001)), 8);

  // Above the estimate, beyond what is left: the bucket owes, the next checks wait.
  auto second = reserve(1);
  ASSERT_TRUE(second && second->decision.allowed);
  EXPECT_NE(second->reservation, first->reservation);
  EXPECT_TRUE(*settle(second->reservation, 20));
  auto owes = l.evaluate_sync({app(l, "api", "ip:192.0.2.7")});
  ASSERT_TRUE(owes);
  EXPECT_FALSE(owes->allowed);
  auto denied = reserve(1);
  ASSERT_TRUE(denied);
  EXPECT_FALSE(denied->decision.allowed);
  EXPECT_TRUE(denied->reservation.empty());

  // Never settled: its record expires with its ttl, the estimate stays.
  clock.advance(30'000 * kMicrosPerSecond);  // the debt is paid and the bucket full again
  auto lapsed = reserve(3);
  ASSERT_TRUE(lapsed && lapsed->decision.allowed);
  clock.advance(61 * kMicrosPerSecond);
  EXPECT_FALSE(*settle(lapsed->reservation, 0));
  EXPECT_EQ(remaining(burst, bucket(10, 0.001)), 7);
  EXPECT_EQ(l.metrics().reservations(0, Reservation::reserved), 3u);
  EXPECT_EQ(l.metrics().reservations(0, Reservation::settled), 2u);
  EXPECT_EQ(l.metrics().reservations(0, Reservation::unknown), 2u);
  EXPECT_NE(l.metrics_text().find("ratekeeper_reserved_cost_total{rule=\"api\"} 10\n"), std::string::npos);
  EXPECT_NE(l.metrics_text().find("ratekeeper_settled_cost_total{rule=\"api\"} 22\n"), std::string::npos);
}

TEST_F(LimiterTest, ReservationsAreRefusedWhereTheyCannotBeSettled) {
  Rule shadow = ip_rule("shadow", {{"", bucket(10, 1)}});
  shadow.shadow = true;
  const auto log = *Limit::window(Algorithm::sliding_window_log, 5, kMicrosPerSecond);
  Limiter l(config({ip_rule("api", {{"", bucket(10, 1)}}), shadow, ip_rule("log", {{"", log}})}), store, &clock);
  auto reserve = [&](std::string_view rule) {
    Result<Verdict> out = make_error(ErrorCode::unavailable, "not answered");
    l.reserve(rule, "ip:192.0.2.7", 1, kMicrosPerSecond, [&](Result<Verdict> r) { out = std::move(r); });
    return out;
  };
  for (const auto* rule : {"shadow", "log"}) {
    auto r = reserve(rule);
    ASSERT_FALSE(r) << rule;
    EXPECT_EQ(r.error().code, ErrorCode::invalid_argument) << rule;
  }
  EXPECT_NE(reserve("log").error().message.find("cannot be reserved"), std::string::npos);
  // One application reserves beside others, checked with them all-or-nothing (a sliding
  // window log included); two cannot both reserve.
  auto a = app(l, "api", "ip:192.0.2.7");
  a.reservation = new_reservation_id();
  a.reservation_ttl = kMicrosPerSecond;
  auto with_others = l.evaluate_sync({app(l, "log", "ip:192.0.2.7"), a, app(l, "api", "ip:192.0.2.8")});
  ASSERT_TRUE(with_others) << with_others.error().message;
  EXPECT_TRUE(with_others->allowed);
  EXPECT_EQ(with_others->reservation, a.reservation);
  Result<bool> settled = false;
  l.settle(app(l, "api", "ip:192.0.2.7"), a.reservation, 0, [&](Result<bool> r) { settled = std::move(r); });
  ASSERT_TRUE(settled && *settled);
  EXPECT_EQ(remaining(*make_key("ratelimit", "ip:192.0.2.7", "api"), bucket(10, 1)), 10);
  EXPECT_EQ(remaining(*make_key("ratelimit", "ip:192.0.2.8", "api"), bucket(10, 1)), 9);
  auto b = app(l, "api", "ip:192.0.2.8");
  b.reservation = new_reservation_id();
  b.reservation_ttl = kMicrosPerSecond;
  auto two = l.evaluate_sync({a, b});
  ASSERT_FALSE(two);
  EXPECT_EQ(two.error().code, ErrorCode::invalid_argument);
  // A settlement needs a well-formed id and a cost within bounds.
  for (const auto& [id, actual] : std::vector<std::pair<std::string, std::int64_t>>{
           {"not-an-id", 1}, {std::string(32, 'A'), 1}, {std::string(32, 'a'), -1},
           {std::string(32, 'a'), algorithms::kMaxCharged + 1}}) {
    Result<bool> out = true;
    l.settle(app(l, "api", "ip:192.0.2.7"), id, actual, [&](Result<bool> r) { out = std::move(r); });
    ASSERT_FALSE(out) << id << " " << actual;
    EXPECT_EQ(out.error().code, ErrorCode::invalid_argument);
  }
}

TEST_F(LimiterTest, MultiLimitPolicyUsesOneKeyPerLimitInOneHashTag) {
  Limiter l(config({ip_rule("api", {{"burst", bucket(2, 10)},
                                    {"hourly", *Limit::window(Algorithm::sliding_window_counter, 3,
                                                              3600 * kMicrosPerSecond)}})}),
            store);
  auto ev = l.evaluate_sync({app(l, "api", "ip:192.0.2.7")});
  ASSERT_TRUE(ev);
  ASSERT_EQ(ev->rules[0].limits.size(), 2u);
  EXPECT_EQ(ev->rules[0].limits[0].key, "ratelimit:{ip:192.0.2.7}:api:burst");
  EXPECT_EQ(ev->rules[0].limits[1].key, "ratelimit:{ip:192.0.2.7}:api:hourly");
  EXPECT_EQ(ev->rules[0].limits[0].policy_name, "api.burst");
}

// Evaluations on one thread reuse the outcomes of earlier ones (their vectors and strings):
// each answer holds its own rules, limits, keys, tiers and flags, whatever came before it.
// The callback reads the evaluation in place, as the middleware does.
TEST_F(LimiterTest, AnEvaluationLeavesNothingToTheNextOneOnItsThread) {
  Rule search;
  search.name = "search";
  search.tiered = true;
  auto c = config({ip_rule("api", {{"burst", bucket(5, 1)}, {"hourly", bucket(50, 0.01)}}),
                   ip_rule("one", {{"", bucket(3, 1)}}), search});
  Limiter l(std::move(c), store);
  FailingStore dead;
  Limiter failing(config({ip_rule("one", {{"", bucket(3, 1)}})}), dead);
  const std::string long_identity = "user:" + std::string(40, 'x');

  auto in_place = [](Limiter& limiter, std::vector<AppliedRule> apps, auto&& read) {
    bool called = false;
    limiter.evaluate(std::move(apps), [&](Result<Evaluation>&& ev) {
      called = true;
      ASSERT_TRUE(ev);
      read(*ev);
    });
    EXPECT_TRUE(called);  // the memory store and the failing one answer inline
  };
  for (int round = 0; round < 2; ++round) {
    in_place(l, {app(l, "api", long_identity), app(l, "one", long_identity)}, [&](const Evaluation& ev) {
      ASSERT_EQ(ev.rules.size(), 2u);
      ASSERT_EQ(ev.rules[0].limits.size(), 2u);
      EXPECT_EQ(ev.rules[0].limits[1].key, "ratelimit:{" + long_identity + "}:api:hourly");
      EXPECT_EQ(ev.rules[0].limits[1].policy_name, "api.hourly");
      EXPECT_EQ(ev.rules[1].limits[0].key, "ratelimit:{" + long_identity + "}:one");
    });
    in_place(failing, {app(failing, "one", "ip:192.0.2.7")}, [&](const Evaluation& ev) {
      EXPECT_TRUE(ev.by_failure_policy);
      ASSERT_EQ(ev.rules.size(), 1u);
      EXPECT_TRUE(ev.rules[0].by_failure_policy);
    });
    in_place(l, {[&] {
               AppliedRule a = app(l, "search", "user:alice");
               a.tier = "pro";
               return a;
             }()},
             [&](const Evaluation& ev) {
               ASSERT_EQ(ev.rules.size(), 1u);
               EXPECT_EQ(ev.rules[0].tier, "pro");
               ASSERT_EQ(ev.rules[0].limits.size(), 1u);
               EXPECT_EQ(ev.rules[0].limits[0].key, "ratelimit:{user:alice}:search:pro");
               EXPECT_EQ(ev.rules[0].limits[0].policy_name, "search.pro");
             });
    in_place(l, {app(l, "one", "ip:192.0.2.7")}, [&](const Evaluation& ev) {
      EXPECT_FALSE(ev.by_failure_policy);
      EXPECT_FALSE(ev.store_error.has_value());
      EXPECT_TRUE(ev.allowed);
      ASSERT_EQ(ev.rules.size(), 1u);
      const RuleOutcome& one = ev.rules[0];
      EXPECT_EQ(one.rule, l.find_rule("one"));
      EXPECT_EQ(one.identity, "ip:192.0.2.7");
      EXPECT_TRUE(one.tier.empty());
      EXPECT_FALSE(one.by_failure_policy);
      ASSERT_EQ(one.limits.size(), 1u);
      EXPECT_EQ(one.limits[0].key, "ratelimit:{ip:192.0.2.7}:one");
      EXPECT_EQ(one.limits[0].policy_name, "one");
      EXPECT_EQ(one.limits[0].decision.remaining, 2 - round);
    });
  }
}

TEST_F(LimiterTest, DecisionLogNamesTheKeyOfTheBindingLimit) {
  const auto hourly = *Limit::window(Algorithm::fixed_window, 2, 3600 * kMicrosPerSecond);
  Limiter l(config({ip_rule("a", {{"burst", bucket(5, 10)}, {"hourly", hourly}}),
                    ip_rule("b", {{"burst", bucket(1, 0.001)},
                                  {"hourly", *Limit::window(Algorithm::fixed_window, 100,
                                                            3600 * kMicrosPerSecond)}})}),
            store);
  // Rule a: the hourly limit (index 1) runs out first; rule b: the burst (index 0).
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(l.evaluate_sync({app(l, "a", "ip:192.0.2.7")})->allowed);
  auto a = l.evaluate_sync({app(l, "a", "ip:192.0.2.7")});
  ASSERT_TRUE(a);
  EXPECT_FALSE(a->allowed);
  EXPECT_EQ(a->rules[0].binding, 1u);
  ASSERT_TRUE(l.evaluate_sync({app(l, "b", "ip:192.0.2.7")})->allowed);
  auto b = l.evaluate_sync({app(l, "b", "ip:192.0.2.7")});
  ASSERT_TRUE(b);
  EXPECT_FALSE(b->allowed);
  EXPECT_EQ(b->rules[0].binding, 0u);
  ASSERT_EQ(log_lines.size(), 2u);  // the two denials
  EXPECT_EQ(nlohmann::json::parse(log_lines[0])["key"], "ratelimit:{ip:192.0.2.7}:a:hourly");
  EXPECT_EQ(nlohmann::json::parse(log_lines[1])["key"], "ratelimit:{ip:192.0.2.7}:b:burst");
}

// A store answering `delay` after it was asked, on the manual clock.
class SlowStore final : public store::Store {
 public:
  SlowStore(store::Store& inner, ManualClock& clock, Micros delay)
      : inner_(&inner), clock_(&clock), delay_(delay) {}
  void check(std::vector<store::CheckItem> items, std::optional<Micros> now,
             store::CheckCallback done) override {
    clock_->advance(delay_);
    inner_->check(std::move(items), now, std::move(done));
  }
  std::string_view kind() const noexcept override { return "slow"; }
  store::StoreHealth health() const override { return inner_->health(); }

 private:
  store::Store* inner_;
  ManualClock* clock_;
  Micros delay_;
};

TEST_F(LimiterTest, LatencyIsTheStoreRoundTripOnTheLimitersClock) {
  SlowStore slow(store, clock, 1234);
  Limiter l(config({ip_rule("api", {{"", bucket(1, 0.001)}})}), slow, &clock);
  auto first = l.evaluate_sync({app(l, "api", "ip:192.0.2.7")});
  ASSERT_TRUE(first);
  EXPECT_EQ(first->latency, 1234);
  auto denied = l.evaluate_sync({app(l, "api", "ip:192.0.2.7")});
  ASSERT_TRUE(denied);
  EXPECT_FALSE(denied->allowed);
  ASSERT_EQ(log_lines.size(), 1u);
  EXPECT_EQ(nlohmann::json::parse(log_lines[0])["latency_us"], 1234);
  EXPECT_EQ(l.metrics().store_latency_count(), 2u);
}

TEST_F(LimiterTest, MultiLimitPolicyIsAllOrNothing) {
  const auto hourly = *Limit::window(Algorithm::sliding_window_counter, 3, 3600 * kMicrosPerSecond);
  Limiter l(config({ip_rule("api", {{"burst", bucket(2, 10)}, {"hourly", hourly}})}), store);
  auto once = [&] { return l.evaluate_sync({app(l, "api", "user:1")}); };
  EXPECT_TRUE(once()->allowed);
  EXPECT_TRUE(once()->allowed);
  auto burst_denied = once();  // the burst bucket is empty; the hourly window must not count it
  EXPECT_FALSE(burst_denied->allowed);
  EXPECT_EQ(remaining("ratelimit:{user:1}:api:hourly", hourly), 1);
  clock.advance(kMicrosPerSecond);
  EXPECT_TRUE(once()->allowed);  // third unit of the hour
  clock.advance(kMicrosPerSecond);
  auto hourly_denied = once();
  EXPECT_FALSE(hourly_denied->allowed);
  EXPECT_EQ(remaining("ratelimit:{user:1}:api:burst", bucket(2, 10)), 2);   // burst not consumed
  EXPECT_GT(hourly_denied->decision.retry_after, 1000 * kMicrosPerSecond);  // the hour decides
}

TEST_F(LimiterTest, ShadowRuleNeverRejectsButCountsAndLogs) {
  Rule shadow = ip_rule("shadow", {{"", bucket(1, 0.001)}});
  shadow.shadow = true;
  Limiter l(config({ip_rule("real", {{"", bucket(100, 1)}}), shadow}), store);
  for (int i = 0; i < 4; ++i) {
    auto ev = l.evaluate_sync({app(l, "real", "ip:192.0.2.7"), app(l, "shadow", "ip:192.0.2.7")});
    ASSERT_TRUE(ev);
    EXPECT_TRUE(ev->allowed);
    ASSERT_EQ(ev->rules.size(), 1u);  // headers come from enforcing rules only
  }
  EXPECT_EQ(l.metrics().decisions(1, Outcome::allowed), 1u);
  EXPECT_EQ(l.metrics().decisions(1, Outcome::shadow_denied), 3u);
  EXPECT_EQ(l.metrics().decisions(0, Outcome::allowed), 4u);
  int shadow_lines = 0;
  for (const auto& line : log_lines) {
    if (line.find("\"shadow\":true") != std::string::npos) ++shadow_lines;
  }
  EXPECT_EQ(shadow_lines, 3);
}

TEST_F(LimiterTest, ShadowDenialDoesNotBlockRealRules) {
  Rule shadow = ip_rule("shadow", {{"", bucket(1, 0.001)}});
  shadow.shadow = true;
  Limiter l(config({ip_rule("real", {{"", bucket(3, 0.001)}}), shadow}), store);
  int allowed = 0;
  for (int i = 0; i < 5; ++i) {
    auto ev = l.evaluate_sync({app(l, "real", "ip:1.2.3.4"), app(l, "shadow", "ip:1.2.3.4")});
    allowed += ev->allowed ? 1 : 0;
  }
  EXPECT_EQ(allowed, 3);  // exactly the real rule's capacity
}

TEST_F(LimiterTest, CheckApiAnswersShadowRulesAllowed) {
  Rule shadow = ip_rule("shadow", {{"", bucket(1, 0.001)}});
  shadow.shadow = true;
  Limiter l(config({shadow}), store);
  ASSERT_TRUE(l.check_sync("shadow", "ip:1.2.3.4", 1)->decision.allowed);
  auto v = l.check_sync("shadow", "ip:1.2.3.4", 1);
  ASSERT_TRUE(v);
  EXPECT_TRUE(v->decision.allowed);
  EXPECT_EQ(l.metrics().decisions(0, Outcome::shadow_denied), 1u);
}

TEST_F(LimiterTest, CheckApiReportsExactRetryAndResetTimes) {
  Limiter l(config({ip_rule("api", {{"", bucket(2, 0.5)}})}), store);  // one token every 2 s
  auto a = l.check_sync("api", "user:7", 1);
  ASSERT_TRUE(a);
  EXPECT_TRUE(a->decision.allowed);
  EXPECT_EQ(a->decision.limit, 2);
  EXPECT_EQ(a->decision.remaining, 1);
  EXPECT_EQ(a->decision.reset_after, 2 * kMicrosPerSecond);
  ASSERT_TRUE(l.check_sync("api", "user:7", 1)->decision.allowed);
  clock.advance(500 * kMicrosPerMilli);
  auto d = l.check_sync("api", "user:7", 1);
  ASSERT_TRUE(d);
  EXPECT_FALSE(d->decision.allowed);
  EXPECT_EQ(d->decision.retry_after, 1500 * kMicrosPerMilli);
  EXPECT_FALSE(d->by_failure_policy);
}

TEST_F(LimiterTest, CheckApiRejectsUnknownRuleAndBadCosts) {
  Limiter l(config({ip_rule("api", {{"", bucket(5, 1)}})}), store);
  auto unknown = l.check_sync("nope", "user:1", 1);
  ASSERT_FALSE(unknown);
  EXPECT_EQ(unknown.error().code, ErrorCode::invalid_argument);
  EXPECT_NE(unknown.error().message.find("nope"), std::string::npos);

  auto negative = l.check_sync("api", "user:1", -1);
  ASSERT_FALSE(negative);
  EXPECT_EQ(negative.error().code, ErrorCode::invalid_argument);

  auto too_big = l.check_sync("api", "user:1", 6);
  ASSERT_FALSE(too_big);
  EXPECT_EQ(too_big.error().code, ErrorCode::invalid_argument);

  auto empty_identity = l.check_sync("api", "", 1);
  ASSERT_FALSE(empty_identity);
  EXPECT_EQ(empty_identity.error().code, ErrorCode::invalid_argument);

  auto peek = l.check_sync("api", "user:1", 0);  // cost 0 peeks
  ASSERT_TRUE(peek);
  EXPECT_EQ(peek->decision.remaining, 5);
}

TEST_F(LimiterTest, TieredRuleUsesTierLimitsAndUnknownTierFallsBackToDefault) {
  Rule search;
  search.name = "search";
  search.tiered = true;
  auto c = config({search});
  c.tiers.users = {{"alice", "pro"}};
  Limiter l(std::move(c), store);

  auto free_user = l.check_sync("search", "user:bob", 1);
  ASSERT_TRUE(free_user);
  EXPECT_EQ(free_user->decision.limit, 60);
  auto pro = l.check_sync("search", "user:alice", 1);
  EXPECT_EQ(pro->decision.limit, 600);
  auto enterprise = l.check_sync("search", "user:carol", 1, "enterprise");
  EXPECT_EQ(enterprise->decision.limit, 6000);
  auto unknown = l.check_sync("search", "user:dave", 1, "platinum");
  ASSERT_TRUE(unknown);
  EXPECT_EQ(unknown->decision.limit, 60);

  auto ev = l.evaluate_sync({[&] {
    AppliedRule a = app(l, "search", "user:alice");
    a.tier = "pro";
    return a;
  }()});
  ASSERT_TRUE(ev);
  EXPECT_EQ(ev->rules[0].tier, "pro");
  EXPECT_EQ(ev->rules[0].limits[0].key, "ratelimit:{user:alice}:search:pro");
  EXPECT_EQ(ev->rules[0].limits[0].policy_name, "search.pro");
}

TEST_F(LimiterTest, FreeTierRefillsOneTokenPerSecond) {
  Rule search;
  search.name = "search";
  search.tiered = true;
  Limiter l(config({search}), store);
  for (int i = 0; i < 60; ++i) ASSERT_TRUE(l.check_sync("search", "user:x", 1)->decision.allowed);
  auto denied = l.check_sync("search", "user:x", 1);
  EXPECT_FALSE(denied->decision.allowed);
  EXPECT_EQ(denied->decision.retry_after, kMicrosPerSecond);
  clock.advance(kMicrosPerSecond);
  EXPECT_TRUE(l.check_sync("search", "user:x", 1)->decision.allowed);
}

TEST_F(LimiterTest, PerEndpointBucketsAreSeparateSharedBucketsAreNot) {
  Rule per = ip_rule("per", {{"", bucket(1, 0.001)}});
  per.bucket = BucketScope::per_endpoint;
  Rule shared = ip_rule("shared", {{"", bucket(1, 0.001)}});
  Limiter l(config({per, shared}), store);
  auto with_path = [&](std::string_view rule, std::string path) {
    AppliedRule a = app(l, rule, "ip:1.2.3.4");
    a.endpoint = std::move(path);
    return l.evaluate_sync({a});
  };
  auto p1 = with_path("per", "/api/a");
  EXPECT_TRUE(p1->allowed);
  EXPECT_EQ(p1->rules[0].limits[0].key, "ratelimit:{ip:1.2.3.4}:per:/api/a");
  EXPECT_TRUE(with_path("per", "/api/b")->allowed);
  EXPECT_FALSE(with_path("per", "/api/a")->allowed);
  EXPECT_TRUE(with_path("shared", "/api/a")->allowed);
  EXPECT_FALSE(with_path("shared", "/api/b")->allowed);
}

TEST_F(LimiterTest, IpFallbackUsesItsOwnLimits) {
  Rule r = ip_rule("api", {{"", bucket(10, 1)}});
  r.identity.kind = IdentityKind::user_or_ip;
  r.identity.header = "X-User-ID";
  r.ip_limits = {{"", bucket(2, 1)}};
  Limiter l(config({r}), store);
  EXPECT_EQ(l.check_sync("api", "user:1", 1)->decision.limit, 10);
  EXPECT_EQ(l.check_sync("api", "ip:192.0.2.1", 1)->decision.limit, 2);
}

TEST(ValidateTest, AValidConfigurationHasNoIssue) {
  LimiterConfig c;
  c.rules.push_back(ip_rule("a", {{"", bucket(5, 1)}}));
  Rule tiered;
  tiered.name = "t";
  tiered.tiered = true;
  c.rules.push_back(tiered);
  EXPECT_TRUE(validate(c).empty());
}

TEST(ValidateTest, EveryIssueIsNamedWithTheFieldAsTheConfigurationWritesIt) {
  LimiterConfig c;
  c.prefix = "has space";
  c.rules.push_back(ip_rule("ok", {{"", bucket(5, 1)}}));
  c.rules.push_back(ip_rule("bad name", {{"", bucket(5, 1)}}));
  c.rules.push_back(ip_rule("multi", {{"x", bucket(5, 1)}, {"", bucket(5, 1)}, {"x", bucket(5, 1)}}));
  Rule costly = ip_rule("costly", {{"", bucket(2, 1)}});
  costly.cost = 3;
  c.rules.push_back(costly);
  c.rules.push_back(ip_rule("ok", {{"", bucket(5, 1)}}));
  Rule tiered;
  tiered.name = "tiered";
  tiered.tiered = true;
  tiered.limits = {{"", bucket(5, 1)}};
  c.rules.push_back(tiered);
  c.tiers.users["bob"] = "gold";
  c.tiers.default_tier = "silver";
  const auto issues = validate(c);
  std::vector<std::string> fields;
  for (const auto& issue : issues) fields.push_back(issue.field);
  EXPECT_EQ(fields, (std::vector<std::string>{"key_prefix", "tiers.default", "tiers.users.bob",
                                               "rules[1].name", "rules[2].limits[1].name",
                                               "rules[2].limits[2].name", "rules[3].cost",
                                               "rules[4].name", "rules[5].limits"}));
  ASSERT_EQ(issues.size(), fields.size());
  EXPECT_NE(issues[2].reason.find("unknown tier 'gold'"), std::string::npos);
  EXPECT_NE(issues[4].reason.find("required field missing"), std::string::npos);
  EXPECT_NE(issues[5].reason.find("duplicate limit name 'x'"), std::string::npos);
  EXPECT_NE(issues[6].reason.find("exceeds capacity"), std::string::npos);
  EXPECT_NE(issues[7].reason.find("duplicate rule name 'ok'"), std::string::npos);
}

TEST_F(LimiterTest, ConstructorRejectsInvalidRules) {
  EXPECT_THROW(Limiter(config({ip_rule("a", {})}), store), std::invalid_argument);
  EXPECT_THROW(
      Limiter(config({ip_rule("a", {{"", bucket(1, 1)}}), ip_rule("a", {{"", bucket(1, 1)}})}),
              store),
      std::invalid_argument);
  Rule costly = ip_rule("costly", {{"", bucket(2, 1)}});
  costly.cost = 3;
  EXPECT_THROW(Limiter(config({costly}), store), std::invalid_argument);
  EXPECT_THROW(Limiter(config({ip_rule("bad name", {{"", bucket(1, 1)}})}), store),
               std::invalid_argument);
  EXPECT_THROW(Limiter(config({ip_rule("m", {{"x", bucket(1, 1)}, {"x", bucket(2, 1)}})}), store),
               std::invalid_argument);
}

Rule delay_rule(std::string name, Policy limits, Micros max_delay) {
  Rule r = ip_rule(std::move(name), std::move(limits));
  r.on_limit = OnLimit::delay;
  r.max_delay = max_delay;
  return r;
}

// A request over a delay rule's limit is admitted with the wait its place needs, up to
// max_delay; with a reject rule applying too, the whole request waits (one send time) and
// is admitted only while the reject rule has room.
TEST_F(LimiterTest, DelayRuleAdmitsWithTheWaitOfItsPlaceUpToMaxDelay) {
  Limiter l(config({delay_rule("slow", {{"", bucket(2, 1)}}, 2 * kMicrosPerSecond),
                    ip_rule("plain", {{"", bucket(3, 1)}})}),
            store, &clock);
  auto slow = [&] { return l.evaluate_sync({app(l, "slow", "ip:192.0.2.7")}); };
  auto both = [&] { return l.evaluate_sync({app(l, "slow", "ip:192.0.2.8"), app(l, "plain", "ip:192.0.2.8")}); };
  for (Micros expected : {Micros{0}, Micros{0}, kMicrosPerSecond, 2 * kMicrosPerSecond}) {
    auto ev = slow();
    ASSERT_TRUE(ev);
    EXPECT_TRUE(ev->allowed);
    EXPECT_EQ(ev->decision.delay, expected);
    EXPECT_EQ(ev->rules.at(0).decision.delay, expected);
  }
  auto beyond = slow();
  ASSERT_TRUE(beyond);
  EXPECT_FALSE(beyond->allowed);
  EXPECT_EQ(beyond->decision.delay, 0);
  EXPECT_EQ(beyond->decision.retry_after, 3 * kMicrosPerSecond);

  // slow needs 0, 0, 1 s; plain (3 a second) has room for three, stepped at each send time.
  for (Micros expected : {Micros{0}, Micros{0}, kMicrosPerSecond}) {
    auto ev = both();
    ASSERT_TRUE(ev);
    EXPECT_TRUE(ev->allowed);
    EXPECT_EQ(ev->decision.delay, expected);
  }
  const auto plain_key = *make_key("ratelimit", "ip:192.0.2.8", "plain");
  EXPECT_EQ(remaining(plain_key, bucket(3, 1)), 0);  // the third is owed from its send time
  // Now plain (a reject rule) needs a wait: nobody may wait for it, so the request is denied.
  auto denied = both();
  ASSERT_TRUE(denied);
  EXPECT_FALSE(denied->allowed);
  EXPECT_FALSE(denied->rules.at(1).decision.allowed);
}

// An admission that waits is logged with its wait (rounded up to the millisecond) and counted.
TEST_F(LimiterTest, DelayedAdmissionIsLoggedAndCountedWithItsWait) {
  auto c = config({delay_rule("slow", {{"", bucket(1, 1)}}, 2 * kMicrosPerSecond)});
  c.decision_log.allow_sample_rate = 1;
  Limiter l(std::move(c), store, &clock);
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(l.evaluate_sync({app(l, "slow", "ip:192.0.2.7")}));
  ASSERT_EQ(log_lines.size(), 2u);
  EXPECT_FALSE(nlohmann::json::parse(log_lines[0]).contains("delay_ms"));  // at once
  EXPECT_EQ(nlohmann::json::parse(log_lines[1])["delay_ms"], 1000);
  EXPECT_EQ(nlohmann::json::parse(log_lines[1])["allowed"], true);
  EXPECT_EQ(l.metrics().delayed(0), 1u);
  EXPECT_EQ(l.metrics().decisions(0, Outcome::allowed), 2u);
}

TEST(ValidateTest, DelayNeedsAMaxDelayAndTokenBucketLimits) {
  LimiterConfig c;
  c.rules.push_back(delay_rule("ok", {{"", bucket(5, 1)}}, kMicrosPerSecond));
  c.rules.push_back(delay_rule("no_max", {{"", bucket(5, 1)}}, 0));
  c.rules.push_back(delay_rule("too_long", {{"", bucket(5, 1)}}, algorithms::kMaxDelay + 1));
  c.rules.push_back(delay_rule("window", {{"a", bucket(5, 1)}, {"b", *Limit::window(Algorithm::fixed_window, 5, kMicrosPerSecond)}},
                               kMicrosPerSecond));
  Rule reject_with_max = ip_rule("reject", {{"", bucket(5, 1)}});
  reject_with_max.max_delay = kMicrosPerSecond;
  c.rules.push_back(reject_with_max);
  Rule tiered = delay_rule("tiered", {}, kMicrosPerSecond);
  tiered.tiered = true;
  c.rules.push_back(tiered);
  c.tiers.levels["hourly"] = {{"", *Limit::window(Algorithm::sliding_window_counter, 100, 3600 * kMicrosPerSecond)}};
  const auto issues = validate(c);
  std::vector<std::string> fields;
  for (const auto& issue : issues) fields.push_back(issue.field);
  EXPECT_EQ(fields, (std::vector<std::string>{"rules[1].max_delay", "rules[2].max_delay", "rules[3].on_limit",
                                               "rules[4].max_delay", "rules[5].on_limit"}));
  ASSERT_EQ(issues.size(), 5u);
  EXPECT_NE(issues[0].reason.find("required with on_limit: delay"), std::string::npos);
  EXPECT_NE(issues[2].reason.find("('b') is fixed_window"), std::string::npos);
  EXPECT_NE(issues[3].reason.find("only with on_limit: delay"), std::string::npos);
  EXPECT_NE(issues[4].reason.find("tier 'hourly'"), std::string::npos);
}

// A concurrency limit's slot is held by a reservation: a check without one is refused; one
// with it takes one slot whatever its cost, given back by a release (the rate limits stay as
// reserved) or a settlement; a renewal keeps it.
TEST_F(LimiterTest, AConcurrencySlotIsHeldByAReservationUntilReleased) {
  const auto slots = *Limit::make(Algorithm::concurrency, 1, 30 * kMicrosPerSecond);
  Limiter l(config({ip_rule("api", {{"rate", bucket(10, 0.001)}, {"slots", slots}})}), store, &clock);
  auto plain = l.check_sync("api", "ip:192.0.2.7", 3);
  ASSERT_FALSE(plain);
  EXPECT_EQ(plain.error().code, ErrorCode::invalid_argument);
  EXPECT_NE(plain.error().message.find("reserve"), std::string::npos) << plain.error().message;
  EXPECT_TRUE(l.check_sync("api", "ip:192.0.2.7", 0));  // a peek holds nothing

  auto reserve = [&] {
    Result<Verdict> out = make_error(ErrorCode::unavailable, "not answered");
    l.reserve("api", "ip:192.0.2.7", 3, kMicrosPerSecond, [&](Result<Verdict> r) { out = std::move(r); });
    return out;
  };
  auto answer = [](auto call) {
    Result<bool> out = make_error(ErrorCode::unavailable, "not answered");
    call([&](Result<bool> r) { out = std::move(r); });
    return out;
  };
  auto first = reserve();
  ASSERT_TRUE(first) << first.error().message;
  EXPECT_TRUE(first->decision.allowed);
  ASSERT_FALSE(first->reservation.empty());
  auto busy = reserve();
  ASSERT_TRUE(busy);
  EXPECT_FALSE(busy->decision.allowed);
  EXPECT_EQ(busy->decision.retry_after, algorithms::kConcurrencyRetryAfter);
  EXPECT_TRUE(busy->reservation.empty());

  // The record outlives its slot (30 s, above the 1 s asked for): renewed after 20 s.
  clock.advance(20 * kMicrosPerSecond);
  auto renewed = answer([&](auto done) { l.renew(app(l, "api", "ip:192.0.2.7"), first->reservation, kMicrosPerSecond, done); });
  ASSERT_TRUE(renewed) << renewed.error().message;
  EXPECT_TRUE(*renewed);
  clock.advance(20 * kMicrosPerSecond);
  EXPECT_FALSE(reserve()->decision.allowed);  // renewed: held 30 s from then

  auto released = answer([&](auto done) { l.settle(app(l, "api", "ip:192.0.2.7"), first->reservation, std::nullopt, done); });
  ASSERT_TRUE(released) << released.error().message;
  EXPECT_TRUE(*released);
  AppliedRule look = app(l, "api", "ip:192.0.2.7");
  look.cost = 0;
  auto peek = l.evaluate_sync({look});
  ASSERT_TRUE(peek);
  EXPECT_EQ(peek->rules[0].limits[0].decision.remaining, 7);  // 3 reserved, kept
  EXPECT_EQ(peek->rules[0].limits[1].decision.remaining, 1);  // the slot back
  EXPECT_EQ(l.metrics().reservations(0, Reservation::released), 1u);
  EXPECT_EQ(l.metrics().reservations(0, Reservation::renewed), 1u);
  auto second = reserve();
  ASSERT_TRUE(second);
  EXPECT_TRUE(second->decision.allowed);
}

TEST(ValidateTest, ConcurrencyLimitsTakeOneSlotAndAreNotShadowed) {
  const auto slots = *Limit::make(Algorithm::concurrency, 1, 30 * kMicrosPerSecond);
  LimiterConfig c;
  Rule costly;
  costly.name = "costly";
  costly.cost = 5;  // takes 5 from the bucket, one slot
  costly.limits = {{"rate", *Limit::token_bucket(10, 1)}, {"slots", slots}};
  Rule shadow = costly;
  shadow.name = "shadow";
  shadow.shadow = true;
  c.rules = {costly, shadow};
  const auto issues = validate(c);
  ASSERT_EQ(issues.size(), 1u);
  EXPECT_EQ(issues[0].field, "rules[1].shadow");
  EXPECT_NE(issues[0].reason.find("holds no concurrency slot"), std::string::npos) << issues[0].reason;
}

// A rule with a parent: the parent's limits are checked with the child's, in the parent's
// slot; a denial by either charges neither; each child has its own keys, the parent one.
TEST_F(LimiterTest, AParentAndItsChildrenAreChargedAllOrNothing) {
  Rule members = ip_rule("members", {{"", bucket(3, 0.001)}});
  members.identity = {IdentityKind::header, "X-User-ID", "", "user"};
  members.parent = ParentSpec{{IdentityKind::header, "X-Org-ID", "", "org"}, {{"", bucket(5, 0.001)}}};
  Limiter l(config({members}), store, &clock);
  auto member = [&](std::string user, std::int64_t cost = 1) {
    AppliedRule a = app(l, "members", std::move(user));
    a.parent = "org:acme";
    a.cost = cost;
    return l.evaluate_sync({a});
  };
  const auto first = member("user:a");
  ASSERT_TRUE(first) << first.error().message;
  ASSERT_EQ(first->rules[0].limits.size(), 2u);
  const auto& child = first->rules[0].limits[0];
  const auto& parent = first->rules[0].limits[1];
  EXPECT_EQ(child.policy_name, "members");
  EXPECT_EQ(parent.policy_name, "members.parent");
  EXPECT_TRUE(parent.parent);
  EXPECT_EQ(child.key, "ratelimit:{org:acme}:members:user:a");
  EXPECT_EQ(parent.key, "ratelimit:{org:acme}:members:parent");
  EXPECT_TRUE(member("user:a")->allowed);
  EXPECT_TRUE(member("user:a")->allowed);
  // a's own limit (3) denies: the parent is not charged.
  EXPECT_FALSE(member("user:a")->allowed);
  EXPECT_EQ(remaining("ratelimit:{org:acme}:members:parent", bucket(5, 0.001)), 2);
  EXPECT_TRUE(member("user:b")->allowed);
  EXPECT_TRUE(member("user:b")->allowed);
  // The parent (5) denies: b is not charged either.
  const auto over = member("user:b");
  EXPECT_FALSE(over->allowed);
  EXPECT_TRUE(over->rules[0].limits[0].decision.allowed);
  EXPECT_FALSE(over->rules[0].limits[1].decision.allowed);
  EXPECT_EQ(remaining("ratelimit:{org:acme}:members:user:b", bucket(3, 0.001)), 1);
  // Another organisation is not charged for acme's.
  AppliedRule other = app(l, "members", "user:a");
  other.parent = "org:other";
  EXPECT_TRUE(l.evaluate_sync({other})->allowed);

  // The decision API's form: the parent is required, and refused for a rule without one.
  EXPECT_FALSE(l.application("members", "user:a", 1));
  EXPECT_TRUE(l.application("members", "user:a", 1, {}, "org:acme"));
  // A reset of one member leaves the parent's keys.
  std::optional<Result<Limiter::ResetOutcome>> reset;
  l.reset(*l.application("members", "user:b", 0, {}, "org:acme"), [&](auto r) { reset = std::move(r); });
  ASSERT_TRUE(reset && *reset);
  EXPECT_EQ((*reset)->keys, (std::vector<std::string>{"ratelimit:{org:acme}:members:user:b"}));
  EXPECT_EQ(remaining("ratelimit:{org:acme}:members:parent", bucket(5, 0.001)), 0);
}

class FailurePolicyTest : public LimiterTest {
 protected:
  FailingStore failing;

  Rule rule(std::string name, FailureMode mode, Limit limit) {
    Rule r = ip_rule(std::move(name), {{"", limit}});
    r.on_store_error = mode;
    return r;
  }
};

TEST_F(FailurePolicyTest, AllowRuleFailsOpenAndIsCounted) {
  Limiter l(config({rule("open", FailureMode::allow, bucket(5, 1))}), failing, &clock);
  auto ev = l.evaluate_sync({app(l, "open", "ip:1.2.3.4")});
  ASSERT_TRUE(ev);
  EXPECT_TRUE(ev->allowed);
  EXPECT_TRUE(ev->by_failure_policy);
  ASSERT_TRUE(ev->store_error);
  EXPECT_EQ(ev->store_error->code, ErrorCode::unavailable);
  EXPECT_EQ(l.metrics().decisions(0, Outcome::failure_policy), 1u);
  EXPECT_EQ(l.metrics().store_errors(ErrorCode::unavailable), 1u);
}

// A reservation the failure policy answered was never recorded: there is nothing to settle.
TEST_F(FailurePolicyTest, AReservationAnsweredByTheFailurePolicyHoldsNoId) {
  Limiter l(config({rule("open", FailureMode::allow, bucket(5, 1))}), failing, &clock);
  Result<Verdict> out = make_error(ErrorCode::unavailable, "not answered");
  l.reserve("open", "ip:1.2.3.4", 1, kMicrosPerSecond, [&](Result<Verdict> r) { out = std::move(r); });
  ASSERT_TRUE(out) << out.error().message;
  EXPECT_TRUE(out->decision.allowed);
  EXPECT_TRUE(out->by_failure_policy);
  EXPECT_TRUE(out->reservation.empty());
  EXPECT_EQ(failing.calls, 1);
}

// The local failure policy holds no slot: a concurrency limit is only peeked, so it admits.
TEST_F(FailurePolicyTest, ALocalPolicyHoldsNoConcurrencySlot) {
  Rule r = rule("local", FailureMode::local, bucket(6, 0.001));
  r.limits = {{"rate", bucket(6, 0.001)}, {"slots", *Limit::make(Algorithm::concurrency, 1, kMicrosPerSecond)}};
  Limiter l(config({r}), failing, &clock);
  for (int i = 0; i < 3; ++i) {
    Result<Verdict> out = make_error(ErrorCode::unavailable, "not answered");
    l.reserve("local", "ip:1.2.3.4", 1, kMicrosPerSecond, [&](Result<Verdict> v) { out = std::move(v); });
    ASSERT_TRUE(out) << out.error().message;
    EXPECT_TRUE(out->decision.allowed);
    EXPECT_TRUE(out->by_failure_policy);
    EXPECT_TRUE(out->reservation.empty());
  }
}

TEST_F(FailurePolicyTest, DenyRuleFailsClosedWithRetryAfter) {
  auto c = config({rule("closed", FailureMode::deny, bucket(5, 1))});
  c.deny_retry_after = 3 * kMicrosPerSecond;
  Limiter l(std::move(c), failing, &clock);
  auto v = l.check_sync("closed", "ip:1.2.3.4", 1);
  ASSERT_TRUE(v);
  EXPECT_FALSE(v->decision.allowed);
  EXPECT_TRUE(v->by_failure_policy);
  EXPECT_EQ(v->decision.retry_after, 3 * kMicrosPerSecond);
}

TEST_F(FailurePolicyTest, LocalRuleDividesLimitsByInstances) {
  auto c = config({rule("local", FailureMode::local, bucket(6, 0.001))});
  c.instances = 3;
  Limiter l(std::move(c), failing, &clock);
  int allowed = 0;
  for (int i = 0; i < 5; ++i) {
    auto ev = l.evaluate_sync({app(l, "local", "ip:1.2.3.4")});
    ASSERT_TRUE(ev);
    EXPECT_TRUE(ev->by_failure_policy);
    allowed += ev->allowed ? 1 : 0;
  }
  EXPECT_EQ(allowed, 2);  // 6 / 3 instances
}

TEST_F(FailurePolicyTest, DenyingPolicyKeepsLocalRulesFromConsuming) {
  Limiter l(config({rule("local", FailureMode::local, bucket(2, 0.001)),
                    rule("closed", FailureMode::deny, bucket(5, 1))}),
            failing, &clock);
  for (int i = 0; i < 3; ++i) {
    auto ev = l.evaluate_sync({app(l, "local", "ip:1.2.3.4"), app(l, "closed", "ip:1.2.3.4")});
    ASSERT_TRUE(ev);
    EXPECT_FALSE(ev->allowed);
  }
  // The local bucket was only peeked: both units are still there.
  EXPECT_TRUE(l.evaluate_sync({app(l, "local", "ip:1.2.3.4")})->allowed);
  EXPECT_TRUE(l.evaluate_sync({app(l, "local", "ip:1.2.3.4")})->allowed);
  EXPECT_FALSE(l.evaluate_sync({app(l, "local", "ip:1.2.3.4")})->allowed);
}

TEST_F(FailurePolicyTest, EachRuleAnswersWithItsOwnPolicy) {
  Limiter l(config({rule("open", FailureMode::allow, bucket(5, 1)),
                    rule("closed", FailureMode::deny, bucket(5, 1))}),
            failing, &clock);
  auto open = l.evaluate_sync({app(l, "open", "ip:1.2.3.4")});
  EXPECT_TRUE(open->allowed);
  auto both = l.evaluate_sync({app(l, "open", "ip:1.2.3.4"), app(l, "closed", "ip:1.2.3.4")});
  EXPECT_FALSE(both->allowed);
  EXPECT_EQ(failing.calls, 2);  // one store call per request, whatever the number of rules
}

}  // namespace
}  // namespace ratekeeper::limiter
