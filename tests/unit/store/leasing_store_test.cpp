// LeasingStore over a MemoryStore, on one manual clock: admissions from one grant without
// store calls, one grant in flight per key, all-or-nothing with non-leased items, a refused
// grant remembered until its retry_after, k doubling and halving, a fixed window's lease
// ending with its window, unused units back on expiry and on shutdown, several instances on
// one key never admitting more than the limit; and the pure grant and return steps.

#include <gtest/gtest.h>

#include <atomic>
#include <deque>
#include <vector>

#include "ratekeeper/core/metrics_writer.hpp"
#include "ratekeeper/algorithms/lease.hpp"
#include "algorithms/step.hpp"
#include "ratekeeper/store/leasing_store.hpp"
#include "ratekeeper/store/memory_store.hpp"

namespace ratekeeper::store {
namespace {

using algorithms::Algorithm;

// A MemoryStore that counts what reaches it and can hold grants until the test answers them.
class CountingStore final : public Store {
 public:
  explicit CountingStore(const Clock* clock) : memory(MemoryStoreOptions{.clock = clock}) {}
  void check(std::vector<CheckItem> items, std::optional<Micros> now, CheckCallback done) override {
    checks.fetch_add(1);
    if (hold_checks) {
      held.push_back([this, items = std::move(items), now, done = std::move(done)]() mutable {
        memory.check(std::move(items), now, std::move(done));
      });
      return;
    }
    memory.check(std::move(items), now, std::move(done));
  }
  std::string_view kind() const noexcept override { return "counting"; }
  bool supports_leases() const noexcept override { return true; }
  void lease_grant(const CheckItem& item, std::int64_t want, LeaseCallback done) override {
    grants.fetch_add(1);
    wants.push_back(want);
    if (hold) {
      held.push_back([this, item, want, done = std::move(done)]() mutable {
        memory.lease_grant(item, want, std::move(done));
      });
      return;
    }
    memory.lease_grant(item, want, std::move(done));
  }
  void lease_return(const CheckItem& item, std::int64_t units, Micros at, Micros reset_after,
                    LeaseReturnCallback done) override {
    returns.fetch_add(1);
    returned.fetch_add(units);
    memory.lease_return(item, units, at, reset_after, std::move(done));
  }
  void reset(std::vector<std::string> keys, ResetCallback done) override {
    memory.reset(std::move(keys), std::move(done));
  }
  void release_one() {
    auto f = std::move(held.front());
    held.pop_front();
    f();
  }

  MemoryStore memory;
  std::atomic<int> checks{0}, grants{0}, returns{0};
  std::atomic<std::int64_t> returned{0};
  std::vector<std::int64_t> wants;
  bool hold = false;         // grants wait in `held`
  bool hold_checks = false;  // checks wait in `held`
  std::deque<std::function<void()>> held;
};

struct Instance {
  explicit Instance(const Clock* clock) {
    auto s = std::make_unique<CountingStore>(clock);
    counting = s.get();
    leasing = std::make_unique<LeasingStore>(std::move(s), LeasingStoreOptions{.clock = clock});
  }
  CountingStore* counting = nullptr;
  std::unique_ptr<LeasingStore> leasing;
};

constexpr Micros kSecond = kMicrosPerSecond;

Limit window(std::int64_t limit, Micros period) { return *Limit::make(Algorithm::fixed_window, limit, period); }
Limit bucket(std::int64_t capacity, Micros interval) { return *Limit::make(Algorithm::token_bucket, capacity, interval); }

CheckItem leased(std::string key, Limit limit, std::int64_t max, Micros ttl = kSecond, std::int64_t cost = 1) {
  return CheckItem{std::move(key), limit, cost, 0, LeasePolicy{max, ttl}};
}

Result<CheckOutcome> check(Store& store, std::vector<CheckItem> items) {
  std::optional<Result<CheckOutcome>> out;
  store.check(std::move(items), std::nullopt, [&](Result<CheckOutcome> r) { out = std::move(r); });
  EXPECT_TRUE(out.has_value()) << "not answered";
  return out ? std::move(*out) : make_error(ErrorCode::timeout, "not answered");
}

bool admitted(Store& store, const CheckItem& item) {
  auto r = check(store, {item});
  EXPECT_TRUE(r) << r.error().message;
  return r && r->decision.allowed;
}

// Units counted in a fixed window key, peeked from the MemoryStore.
std::int64_t counted(MemoryStore& memory, const std::string& key, const Limit& limit) {
  auto d = memory.check_one(key, limit, 0);
  EXPECT_TRUE(d);
  return limit.capacity - d->remaining;
}

TEST(LeaseGrant, GrantsAtMostWhatIsAvailableAndDeniesBelowTheMinimum) {
  const Limit l = window(10, 1000);
  algorithms::State s;
  s.current = 7;
  auto g = algorithms::lease_grant(l, s, 100, 1, 5);
  EXPECT_EQ(g.granted, 3);
  EXPECT_TRUE(g.step.decision.allowed);
  EXPECT_EQ(g.step.state.current, 10);
  auto denied = algorithms::lease_grant(l, s, 100, 4, 5);
  EXPECT_EQ(denied.granted, 0);
  EXPECT_FALSE(denied.step.decision.allowed);
  EXPECT_EQ(denied.step.decision.retry_after, 900);  // the window's end
  EXPECT_EQ(denied.step.state.current, 7);
}

TEST(LeaseReturn, TokenBucketIsNeverFullerThanIfTheUnitsHadNotBeenTaken) {
  const Limit l = bucket(100, 1000);  // one token per ms
  const Micros t0 = 1'000'000;
  auto g = algorithms::lease_grant(l, algorithms::State{}, t0, 1, 10);
  ASSERT_EQ(g.granted, 10);
  // 4 used, 6 returned 2 ms later: the bucket as if only 4 had been taken.
  auto back = algorithms::lease_return(l, g.step.state, t0 + 2000, 6, t0, g.step.decision.reset_after);
  EXPECT_EQ(back.state.t, t0 + 4 * 1000);
  // After the grant has refilled, others consumed 10 at t0 + 20 ms: a late return gives
  // nothing back of theirs.
  auto others = algorithms::step_unchecked(l, g.step.state, t0 + 20'000, 10);
  ASSERT_TRUE(others.decision.allowed);
  auto late = algorithms::lease_return(l, others.state, t0 + 20'000, 6, t0, g.step.decision.reset_after);
  EXPECT_EQ(late.state.t, others.state.t);
}

TEST(LeaseReturn, FixedWindowGivesBackOnlyWithinTheGrantsWindow) {
  const Limit l = window(10, 1000);
  auto g = algorithms::lease_grant(l, algorithms::State{}, 100, 1, 8);
  ASSERT_EQ(g.granted, 8);
  auto back = algorithms::lease_return(l, g.step.state, 500, 5, 100, g.step.decision.reset_after);
  EXPECT_EQ(back.state.current, 3);
  // The next window's count is not the grant's.
  auto next = algorithms::lease_grant(l, algorithms::State{}, 1100, 1, 8);
  auto other = algorithms::lease_return(l, next.step.state, 1200, 5, 100, g.step.decision.reset_after);
  EXPECT_EQ(other.state.current, 8);
}

TEST(LeasingStore, AdmitsFromOneGrantWithoutStoreCalls) {
  ManualClock clock(1'000'000'000);
  Instance a(&clock);
  const auto item = leased("k", window(1000, 60 * kSecond), 64, 10 * kSecond);
  for (int i = 0; i < 200; ++i) ASSERT_TRUE(admitted(*a.leasing, item));
  EXPECT_EQ(a.counting->checks, 0);
  // k doubles from 1 up to 64: 1+2+4+8+16+32 = 63, then 64s.
  EXPECT_LE(a.counting->grants, 9);
  EXPECT_EQ(a.leasing->stats().local_admissions, 200u);
  EXPECT_GE(a.leasing->stats().units_granted, 200u);  // every admission was granted
  EXPECT_EQ(counted(a.counting->memory, "k", item.limit), static_cast<std::int64_t>(a.leasing->stats().units_granted));
}

// A reset ends the key's lease without giving its unused units back (they were taken from the
// state it deletes) and deletes the key in the store: the next admission takes a new grant,
// counted from full limits.
TEST(LeasingStore, AResetEndsTheLeaseWithoutReturningItsUnits) {
  ManualClock clock(1'000'000'000);
  Instance a(&clock);
  const auto item = leased("k", window(1000, 60 * kSecond), 64, 10 * kSecond);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(admitted(*a.leasing, item));  // grants of 1, 2, 4: 3 units left
  ASSERT_EQ(a.counting->grants, 3);
  ASSERT_EQ(counted(a.counting->memory, "k", item.limit), 7);
  std::optional<Result<std::int64_t>> out;
  a.leasing->reset({"k"}, [&](Result<std::int64_t> r) { out = std::move(r); });
  ASSERT_TRUE(out.has_value());
  ASSERT_TRUE(*out) << (*out).error().message;
  EXPECT_EQ(**out, 1);
  EXPECT_EQ(counted(a.counting->memory, "k", item.limit), 0);
  EXPECT_EQ(a.leasing->stats().leases, 0u);
  // A lease record of its own, from the first size: a grant of 1, used up.
  ASSERT_TRUE(admitted(*a.leasing, item));
  EXPECT_EQ(a.counting->grants, 4);
  a.leasing->shutdown();
  EXPECT_EQ(a.counting->returns, 0);
  EXPECT_EQ(counted(a.counting->memory, "k", item.limit), 1);
}

TEST(LeasingStore, LocalDecisionsShowTheGrantsRemainingPlusWhatIsLeftInTheLease) {
  ManualClock clock(60 * kSecond * 1000);
  Instance a(&clock);
  const auto item = leased("k", window(1000, 60 * kSecond), 64, 10 * kSecond);
  // One instance alone: the same remaining as without a lease (999, 998, ...).
  for (std::int64_t i = 1; i <= 20; ++i) {
    auto r = check(*a.leasing, {item});
    ASSERT_TRUE(r && r->decision.allowed);
    EXPECT_EQ(r->decision.remaining, 1000 - i);
    EXPECT_EQ(r->decision.reset_after, 60 * kSecond);
  }
}

TEST(LeasingStore, MetricsCountGrantsUnitsAndLocalAdmissions) {
  ManualClock clock(1'000'000'000);
  Instance a(&clock);
  const auto item = leased("k", window(1000, 3600 * kSecond), 64, 3600 * kSecond);
  for (int i = 0; i < 1 + 2 + 4 + 1; ++i) ASSERT_TRUE(admitted(*a.leasing, item));  // 7 of 8 left
  a.leasing->shutdown();
  MetricsWriter metrics;
  a.leasing->write_metrics(metrics);
  const std::string text = metrics.take();
  for (const char* line : {"ratekeeper_lease_leases_taken_total 4\n", "ratekeeper_lease_units_granted_total 15\n",
                           "ratekeeper_lease_units_returned_total 7\n", "ratekeeper_lease_returns_total 1\n",
                           "ratekeeper_lease_local_admissions_total 8\n", "ratekeeper_lease_keys 1\n"}) {
    EXPECT_NE(text.find(line), std::string::npos) << line << " not in:\n" << text;
  }
}

TEST(LeasingStore, KDoublesWhenUsedUpAndHalvesWhenMostlyUnused) {
  ManualClock clock(1'000'000'000);
  Instance a(&clock);
  const auto item = leased("k", window(1000, 3600 * kSecond), 16, kSecond);
  for (int i = 0; i < 1 + 2 + 4 + 8 + 16 + 1; ++i) ASSERT_TRUE(admitted(*a.leasing, item));
  EXPECT_EQ(a.counting->wants, (std::vector<std::int64_t>{1, 2, 4, 8, 16, 16}));
  clock.advance(2 * kSecond);  // the lease of 16, one used, expires
  ASSERT_TRUE(admitted(*a.leasing, item));
  EXPECT_EQ(a.counting->wants.back(), 8);
}

TEST(LeasingStore, OneGrantInFlightPerKeyAndTheChecksQueueBehindIt) {
  ManualClock clock(1'000'000'000);
  Instance a(&clock);
  a.counting->hold = true;
  const auto item = leased("k", window(1000, 60 * kSecond), 64, 10 * kSecond);
  std::vector<std::optional<Result<CheckOutcome>>> answers(10);
  for (auto& answer : answers) {
    a.leasing->check({item}, std::nullopt, [&answer](Result<CheckOutcome> r) { answer = std::move(r); });
  }
  EXPECT_EQ(a.counting->grants, 1);
  for (const auto& answer : answers) EXPECT_FALSE(answer.has_value());
  // The first grant (1 unit) admits one; the rest ask again, one grant at a time.
  while (!a.counting->held.empty()) {
    EXPECT_EQ(a.counting->held.size(), 1u);
    a.counting->release_one();
  }
  for (const auto& answer : answers) {
    ASSERT_TRUE(answer.has_value());
    ASSERT_TRUE(*answer);
    EXPECT_TRUE((*answer)->decision.allowed);
  }
}

TEST(LeasingStore, DeniedNonLeasedItemPutsTheLeasedUnitsBack) {
  ManualClock clock(1'000'000'000);
  Instance a(&clock);
  const auto hot = leased("hot", window(1000, 60 * kSecond), 4, 10 * kSecond);
  const CheckItem ip{"ip", window(1, 60 * kSecond), 1};
  ASSERT_TRUE(admitted(*a.leasing, hot));  // a lease of 1 unit, used up
  ASSERT_TRUE(admitted(*a.leasing, hot));  // a lease of 2, one left
  auto first = check(*a.leasing, {hot, ip});
  ASSERT_TRUE(first && first->decision.allowed);  // takes the last unit
  auto second = check(*a.leasing, {hot, ip});    // a lease of 4; ip denies: its unit goes back
  ASSERT_TRUE(second);
  EXPECT_FALSE(second->decision.allowed);
  EXPECT_TRUE(second->items[0].allowed);
  EXPECT_FALSE(second->items[1].allowed);
  const int grants = a.counting->grants;
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(admitted(*a.leasing, hot));  // all 4 units still there
  EXPECT_EQ(a.counting->grants, grants);
  EXPECT_EQ(a.leasing->stats().local_admissions, 6u);
}

// A unit taken from one lease goes back to that lease only: a check whose non-leased item is
// answered (denied) after its fixed window ended must not add the unit to the next window's
// lease, which would admit limit + 1 there.
TEST(LeasingStore, UnitsTakenInAnEndedLeaseNeverGoBackIntoTheNextOne) {
  ManualClock clock(60 * kSecond * 1000 + 59 * kSecond);  // one second before the window ends
  Instance a(&clock);
  const auto item = leased("k", window(4, 60 * kSecond), 4, 3600 * kSecond);
  const CheckItem ip{"ip", window(1, 60 * kSecond), 1};
  ASSERT_TRUE(admitted(*a.leasing, item));  // a lease of 1, used up
  ASSERT_TRUE(admitted(*a.leasing, item));  // a lease of 2, one left
  a.counting->hold_checks = true;
  std::optional<Result<CheckOutcome>> late;
  a.leasing->check({item, ip}, std::nullopt, [&](Result<CheckOutcome> r) { late = std::move(r); });
  ASSERT_EQ(a.counting->held.size(), 1u);  // the last unit taken, ip's check held
  a.counting->hold_checks = false;

  clock.advance(kSecond);  // the next window
  ASSERT_TRUE(a.counting->memory.check_one("ip", ip.limit, 1).value().allowed);  // ip: used up
  int admissions = 0;
  for (int i = 0; i < 2; ++i) admissions += admitted(*a.leasing, item) ? 1 : 0;
  a.counting->release_one();  // ip denies: the unit taken in the last window is not given back
  ASSERT_TRUE(late.has_value() && *late);
  EXPECT_FALSE((*late)->decision.allowed);
  for (int i = 0; i < 10; ++i) admissions += admitted(*a.leasing, item) ? 1 : 0;
  EXPECT_EQ(admissions, 4);
}

TEST(LeasingStore, RefusedGrantDeniesLocallyUntilItsRetryAfter) {
  ManualClock clock(60 * kSecond * 1000);  // at a window's start
  Instance a(&clock);
  const auto item = leased("k", window(3, 60 * kSecond), 8, 100 * kSecond);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(admitted(*a.leasing, item));
  const int grants = a.counting->grants;
  auto denied = check(*a.leasing, {item});
  ASSERT_TRUE(denied);
  EXPECT_FALSE(denied->decision.allowed);
  EXPECT_EQ(denied->decision.retry_after, 60 * kSecond);
  EXPECT_EQ(a.counting->grants, grants + 1);
  clock.advance(30 * kSecond);
  auto again = check(*a.leasing, {item});
  ASSERT_TRUE(again);
  EXPECT_FALSE(again->decision.allowed);
  EXPECT_EQ(again->decision.retry_after, 30 * kSecond);
  EXPECT_EQ(a.counting->grants, grants + 1);  // answered locally
  clock.advance(30 * kSecond);
  EXPECT_TRUE(admitted(*a.leasing, item));  // a new window: granted again
  EXPECT_EQ(a.counting->grants, grants + 2);
}

TEST(LeasingStore, DryTokenBucketWaitsForTheRestOfTheLeaseBeforeTheNextGrant) {
  ManualClock clock(1'000'000'000);
  Instance a(&clock);
  const auto item = leased("k", bucket(10, 1000), 8, kSecond);  // 10 tokens, one per ms
  for (int i = 0; i < 7; ++i) ASSERT_TRUE(admitted(*a.leasing, item));  // leases of 1, 2, 4
  // Asked for 8, granted the 3 left: used, then the next grant waits until 5 more refilled.
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(admitted(*a.leasing, item));
  EXPECT_EQ(a.counting->wants, (std::vector<std::int64_t>{1, 2, 4, 8}));
  auto denied = check(*a.leasing, {item});
  ASSERT_TRUE(denied);
  EXPECT_FALSE(denied->decision.allowed);
  EXPECT_EQ(denied->decision.retry_after, 5000);
  EXPECT_EQ(a.counting->grants, 4);  // answered locally
  clock.advance(5000);
  ASSERT_TRUE(admitted(*a.leasing, item));
  EXPECT_EQ(a.counting->grants, 5);
  EXPECT_EQ(a.leasing->stats().units_granted, 7u + 3u + 5u);
}

TEST(LeasingStore, FixedWindowLeaseEndsWithItsWindow) {
  ManualClock clock(60 * kSecond * 1000 + 59 * kSecond);  // one second before the window ends
  Instance a(&clock);
  const auto item = leased("k", window(100, 60 * kSecond), 8, 3600 * kSecond);
  for (int i = 0; i < 1 + 2; ++i) ASSERT_TRUE(admitted(*a.leasing, item));  // leases of 1, 2, then 4
  ASSERT_TRUE(admitted(*a.leasing, item));
  const int grants = a.counting->grants;
  clock.advance(kSecond);  // the next window: the 3 units left are not admitted in it
  ASSERT_TRUE(admitted(*a.leasing, item));
  EXPECT_EQ(a.counting->grants, grants + 1);
  EXPECT_EQ(counted(a.counting->memory, "k", item.limit), static_cast<std::int64_t>(a.counting->wants.back()));
}

TEST(LeasingStore, ExpiredLeasesUnitsGoBack) {
  ManualClock clock(1'000'000'000);
  Instance a(&clock);
  const auto item = leased("k", bucket(1000, 3600 * kSecond), 64, kSecond);  // no refill to speak of
  for (int i = 0; i < 1 + 2 + 4 + 1; ++i) ASSERT_TRUE(admitted(*a.leasing, item));  // a lease of 8, 1 used
  clock.advance(2 * kSecond);
  EXPECT_EQ(a.leasing->reap(), 1u);
  EXPECT_EQ(a.counting->returned, 7);
  EXPECT_EQ(a.leasing->stats().units_returned, 7u);
  // The bucket as the 8 admissions alone leave it.
  auto peek = a.counting->memory.check_one("k", item.limit, 0);
  ASSERT_TRUE(peek);
  EXPECT_EQ(peek->remaining, 1000 - 8);
}

TEST(LeasingStore, ShutdownReturnsUnusedUnitsAndThenPassesThrough) {
  ManualClock clock(1'000'000'000);
  Instance a(&clock);
  const auto item = leased("k", window(1000, 3600 * kSecond), 64, 3600 * kSecond);
  for (int i = 0; i < 1 + 2 + 4 + 8 + 1; ++i) ASSERT_TRUE(admitted(*a.leasing, item));  // 15 of 16 left
  EXPECT_EQ(counted(a.counting->memory, "k", item.limit), 31);
  a.leasing->shutdown();
  EXPECT_EQ(counted(a.counting->memory, "k", item.limit), 16);
  ASSERT_TRUE(admitted(*a.leasing, item));
  EXPECT_EQ(a.counting->checks, 1);
  EXPECT_EQ(counted(a.counting->memory, "k", item.limit), 17);
}

TEST(LeasingStore, SeveralInstancesNeverAdmitMoreThanTheLimit) {
  ManualClock clock(60 * kSecond * 1000);
  MemoryStore shared(MemoryStoreOptions{.clock = &clock});
  // Instances over one MemoryStore: each its own LeasingStore.
  class Forward final : public Store {
   public:
    explicit Forward(MemoryStore& m) : m_(m) {}
    void check(std::vector<CheckItem> items, std::optional<Micros> now, CheckCallback done) override {
      m_.check(std::move(items), now, std::move(done));
    }
    std::string_view kind() const noexcept override { return "forward"; }
    bool supports_leases() const noexcept override { return true; }
    void lease_grant(const CheckItem& item, std::int64_t want, LeaseCallback done) override {
      m_.lease_grant(item, want, std::move(done));
    }
    void lease_return(const CheckItem& item, std::int64_t units, Micros at, Micros reset_after,
                      LeaseReturnCallback done) override {
      m_.lease_return(item, units, at, reset_after, std::move(done));
    }

   private:
    MemoryStore& m_;
  };
  std::vector<std::unique_ptr<LeasingStore>> instances;
  for (int i = 0; i < 3; ++i) {
    instances.push_back(std::make_unique<LeasingStore>(std::make_unique<Forward>(shared),
                                                       LeasingStoreOptions{.clock = &clock}));
  }
  const auto item = leased("k", window(100, 60 * kSecond), 32, 3600 * kSecond);
  int total = 0;
  for (int i = 0; i < 600; ++i) total += admitted(*instances[static_cast<std::size_t>(i % 3)], item) ? 1 : 0;
  EXPECT_LE(total, 100);
  EXPECT_GE(total, 100 - 3 * 32);  // under-admission: at most the units in the others' leases
  for (auto& instance : instances) instance->shutdown();
  EXPECT_EQ(counted(shared, "k", item.limit), total);
}

}  // namespace
}  // namespace ratekeeper::store
