// Every algorithm against a small, obviously correct reference model on random sequences of
// (time step >= 0, cost in [0, C]); and the multi-limit rules on random limits and states.

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <map>
#include <vector>

#include "algorithm_test_support.hpp"

namespace ratekeeper::testing {
namespace {

struct Op {
  Micros dt;
  std::int64_t cost;
};

struct Expected {
  bool allowed;
  std::int64_t remaining;
  Micros retry_after;
  Micros reset_after;
};

// Token bucket as a token count, in units of 1/T token so the arithmetic is exact:
// one unit per microsecond, C·T units when full, n·T units per request of cost n.
class ReferenceBucket {
 public:
  ReferenceBucket(std::int64_t capacity, Micros interval)
      : c_(capacity), t_(interval), units_(capacity * interval) {}

  Expected at(Micros now, std::int64_t cost) {
    if (last_ >= 0) units_ = std::min(c_ * t_, units_ + (now - last_));
    last_ = now;
    const bool allowed = units_ >= cost * t_;
    if (allowed) units_ -= cost * t_;
    return {allowed, units_ / t_, allowed ? 0 : cost * t_ - units_, c_ * t_ - units_};
  }

 private:
  std::int64_t c_;
  Micros t_;
  std::int64_t units_;
  Micros last_ = -1;
};

// Sliding log as the list of admitted timestamps; an entry counts while now − W < ts.
class ReferenceLog {
 public:
  ReferenceLog(std::int64_t limit, Micros window) : l_(limit), w_(window) {}

  Expected at(Micros now, std::int64_t cost) {
    // Time never goes backwards here: an entry out of the window stays out.
    std::erase_if(stamps_, [&](Micros ts) { return ts <= now - w_; });
    const bool allowed = live(now) + cost <= l_;
    if (allowed) stamps_.insert(stamps_.end(), static_cast<std::size_t>(cost), now);
    Micros retry = 0;
    if (!allowed) {
      // The first instant at which enough entries have left the window.
      while (live(now + retry) + cost > l_) ++retry;
    }
    Micros reset = 0;
    while (live(now + reset) > 0) ++reset;
    return {allowed, l_ - live(now), retry, reset};
  }

 private:
  std::int64_t live(Micros now) const {
    return std::count_if(stamps_.begin(), stamps_.end(), [&](Micros ts) { return ts > now - w_; });
  }
  std::int64_t l_;
  Micros w_;
  std::vector<Micros> stamps_;
};

// Fixed window and sliding window counter from a count of admitted units per window index.
class ReferenceWindows {
 public:
  ReferenceWindows(bool sliding, std::int64_t limit, Micros window)
      : sliding_(sliding), l_(limit), w_(window) {}

  Expected at(Micros now, std::int64_t cost) {
    const bool allowed = fits(now, cost);
    if (allowed) counts_[now / w_] += cost;
    Micros retry = 0;
    if (!allowed) {
      while (!fits(now + retry, cost)) ++retry;
    }
    Micros reset = 0;
    while (weighs(now + reset)) ++reset;
    return {allowed, remaining(now), retry, reset};
  }

 private:
  std::int64_t count(std::int64_t index) const {
    auto it = counts_.find(index);
    return it == counts_.end() ? 0 : it->second;
  }
  // previous·(W − elapsed) + units·W, compared with L·W: the weighted estimate, times W.
  std::int64_t scaled(Micros now, std::int64_t extra) const {
    const std::int64_t k = now / w_;
    const Micros elapsed = now - k * w_;
    const std::int64_t previous = sliding_ ? count(k - 1) : 0;
    return previous * (w_ - elapsed) + (count(k) + extra) * w_;
  }
  bool fits(Micros now, std::int64_t cost) const { return scaled(now, cost) <= l_ * w_; }
  std::int64_t remaining(Micros now) const {
    return std::max<std::int64_t>(0, (l_ * w_ - scaled(now, 0)) / w_);
  }
  bool weighs(Micros now) const {
    const std::int64_t k = now / w_;
    return count(k) > 0 || (sliding_ && count(k - 1) > 0);
  }
  bool sliding_;
  std::int64_t l_;
  Micros w_;
  std::map<std::int64_t, std::int64_t> counts_;
};

rc::Gen<std::vector<Op>> ops(std::int64_t capacity, Micros horizon) {
  return rc::gen::container<std::vector<Op>>(rc::gen::construct<Op>(
      rc::gen::weightedOneOf<Micros>({{3, rc::gen::just<Micros>(0)},
                                       {6, rc::gen::inRange<Micros>(0, horizon + 1)},
                                       {1, rc::gen::inRange<Micros>(0, 3 * horizon)}}),
      rc::gen::inRange<std::int64_t>(0, capacity + 1)));
}

// Runs the algorithm and the model side by side and compares every field of every decision.
template <class Model>
void compare(const Limit& limit, Model model, const std::vector<Op>& sequence, Micros start) {
  State state;
  Micros now = start;
  for (const Op& op : sequence) {
    now += op.dt;
    auto step = algorithms::step(limit, state, now, op.cost);
    RC_ASSERT(step.has_value());
    const Expected want = model.at(now, op.cost);
    const Decision& got = step->decision;
    RC_ASSERT(got.allowed == want.allowed);
    RC_ASSERT(got.limit == limit.capacity);
    RC_ASSERT(got.remaining == want.remaining);
    RC_ASSERT(got.retry_after == want.retry_after);
    RC_ASSERT(got.reset_after == want.reset_after);
    RC_ASSERT(step->expires_at == (want.reset_after > 0 ? now + want.reset_after : 0));
    if (op.cost == 0 || !got.allowed) {
      // Nothing consumed: the stored state answers every later question as before.
      RC_ASSERT(algorithms::step(limit, step->state, now + 1, 1)->decision ==
                algorithms::step(limit, state, now + 1, 1)->decision);
    }
    state = step->state;
  }
}

RC_GTEST_PROP(AlgorithmsProperty, TokenBucketMatchesTokenCounting, ()) {
  const auto capacity = *rc::gen::inRange<std::int64_t>(1, 21);
  const auto interval = *rc::gen::inRange<Micros>(1, 200);
  const Limit limit = *Limit::make(Algorithm::token_bucket, capacity, interval);
  const auto sequence = *ops(capacity, capacity * interval);
  const auto start = *rc::gen::inRange<Micros>(0, 1'000'000);
  compare(limit, ReferenceBucket(capacity, interval), sequence, start);
}

RC_GTEST_PROP(AlgorithmsProperty, SlidingWindowLogMatchesTimestampList, ()) {
  const auto limit_n = *rc::gen::inRange<std::int64_t>(1, 21);
  const auto window = *rc::gen::inRange<Micros>(1, 200);
  const Limit limit = *Limit::make(Algorithm::sliding_window_log, limit_n, window);
  const auto sequence = *ops(limit_n, window);
  const auto start = *rc::gen::inRange<Micros>(0, 1'000'000);
  compare(limit, ReferenceLog(limit_n, window), sequence, start);
}

RC_GTEST_PROP(AlgorithmsProperty, FixedWindowMatchesCountsPerWindow, ()) {
  const auto limit_n = *rc::gen::inRange<std::int64_t>(1, 21);
  const auto window = *rc::gen::inRange<Micros>(1, 200);
  const Limit limit = *Limit::make(Algorithm::fixed_window, limit_n, window);
  const auto sequence = *ops(limit_n, window);
  const auto start = *rc::gen::inRange<Micros>(0, 1'000'000);
  compare(limit, ReferenceWindows(false, limit_n, window), sequence, start);
}

RC_GTEST_PROP(AlgorithmsProperty, SlidingWindowCounterMatchesWeightedCounts, ()) {
  const auto limit_n = *rc::gen::inRange<std::int64_t>(1, 21);
  const auto window = *rc::gen::inRange<Micros>(1, 200);
  const Limit limit = *Limit::make(Algorithm::sliding_window_counter, limit_n, window);
  const auto sequence = *ops(limit_n, window);
  const auto start = *rc::gen::inRange<Micros>(0, 1'000'000);
  compare(limit, ReferenceWindows(true, limit_n, window), sequence, start);
}

rc::Gen<Limit> any_limit() {
  return rc::gen::apply(
      [](Algorithm a, std::int64_t c, Micros p) { return *Limit::make(a, c, p); },
      rc::gen::element(Algorithm::token_bucket, Algorithm::sliding_window_log,
                       Algorithm::sliding_window_counter, Algorithm::fixed_window),
      rc::gen::inRange<std::int64_t>(1, 11), rc::gen::inRange<Micros>(1, 100));
}

// A clock that goes backwards never admits what the latest time seen would not.
RC_GTEST_PROP(AlgorithmsProperty, AnEarlierClockNeverAdmitsMore, ()) {
  const Limit limit = *any_limit();
  const auto sequence = *ops(limit.capacity, limit.horizon());
  State state;
  Micros now = 1'000'000;
  for (const Op& op : sequence) {
    now += op.dt;
    state = algorithms::step(limit, state, now, op.cost)->state;
  }
  const auto back = *rc::gen::inRange<Micros>(1, 3 * limit.horizon() + 1);
  const auto cost = *rc::gen::inRange<std::int64_t>(1, limit.capacity + 1);
  const auto earlier = algorithms::step(limit, state, now - back, cost);
  const auto latest = algorithms::step(limit, state, now, cost);
  RC_ASSERT(earlier.has_value() && latest.has_value());
  if (earlier->decision.allowed) RC_ASSERT(latest->decision.allowed);
}

// Several limits, each with a state built by its own random history, then one step_all.
RC_GTEST_PROP(AlgorithmsProperty, StepAllIsAllOrNothing, ()) {
  const auto limits = *rc::gen::container<std::vector<Limit>>(*rc::gen::inRange(1, 4), any_limit());
  std::vector<State> states;
  Micros now = 1'000'000;
  for (const Limit& limit : limits) {
    State state;
    Micros t = now;
    for (const Op& op : *ops(limit.capacity, limit.horizon())) {
      t += op.dt;
      state = algorithms::step(limit, state, t, op.cost)->state;
    }
    now = std::max(now, t);
    states.push_back(state);
  }
  now += *rc::gen::inRange<Micros>(0, 50);
  std::vector<std::int64_t> costs;
  for (const Limit& limit : limits) costs.push_back(*rc::gen::inRange<std::int64_t>(0, limit.capacity + 1));

  auto multi = algorithms::step_all(limits, states, now, costs);
  RC_ASSERT(multi.has_value());
  std::vector<Step> alone;
  bool all_allowed = true;
  for (std::size_t i = 0; i < limits.size(); ++i) {
    alone.push_back(*algorithms::step(limits[i], states[i], now, costs[i]));
    all_allowed = all_allowed && alone[i].decision.allowed;
  }
  RC_ASSERT(multi->decision.allowed == all_allowed);
  RC_ASSERT(multi->items.size() == limits.size());
  RC_ASSERT(multi->states.size() == limits.size());
  for (std::size_t i = 0; i < limits.size(); ++i) {
    if (all_allowed) {
      // Every limit consumes exactly as it would alone.
      RC_ASSERT(multi->items[i] == alone[i].decision);
      RC_ASSERT(multi->states[i] == alone[i].state);
      RC_ASSERT(multi->expires_at[i] == alone[i].expires_at);
    } else {
      // No limit consumes: every state is what a peek leaves, denied items are their own.
      const Step peek = *algorithms::step(limits[i], states[i], now, 0);
      RC_ASSERT(multi->states[i] == peek.state);
      RC_ASSERT(multi->expires_at[i] == peek.expires_at);
      RC_ASSERT(multi->items[i] == (alone[i].decision.allowed ? peek.decision : alone[i].decision));
    }
  }
  RC_ASSERT(multi->decision == algorithms::combine(multi->items));
  if (!all_allowed) {
    // The combined retry_after is exactly when the same batch succeeds.
    const Micros retry = multi->decision.retry_after;
    RC_ASSERT(retry > 0);
    RC_ASSERT(!algorithms::step_all(limits, states, now + retry - 1, costs)->decision.allowed);
    RC_ASSERT(algorithms::step_all(limits, states, now + retry, costs)->decision.allowed);
  }
}

rc::Gen<Decision> any_decision() {
  return rc::gen::apply(
      [](bool allowed, std::int64_t limit, std::int64_t remaining, Micros retry, Micros reset) {
        return Decision{allowed, limit, std::min(remaining, limit), allowed ? 0 : retry + 1, reset};
      },
      rc::gen::arbitrary<bool>(), rc::gen::inRange<std::int64_t>(1, 100),
      rc::gen::inRange<std::int64_t>(0, 100), rc::gen::inRange<Micros>(0, 1000),
      rc::gen::inRange<Micros>(0, 1000));
}

RC_GTEST_PROP(AlgorithmsProperty, CombineFollowsItsDocumentedRules, ()) {
  const auto items = *rc::gen::nonEmpty(rc::gen::container<std::vector<Decision>>(any_decision()));
  const Decision d = algorithms::combine(items);
  const bool all = std::all_of(items.begin(), items.end(), [](const Decision& x) { return x.allowed; });
  RC_ASSERT(d.allowed == all);
  Micros max_reset = 0;
  for (const auto& x : items) max_reset = std::max(max_reset, x.reset_after);
  RC_ASSERT(d.reset_after == max_reset);
  if (all) {
    // The limit with the fewest remaining units speaks.
    const auto binding = std::min_element(items.begin(), items.end(), [](const auto& a, const auto& b) {
      return a.remaining < b.remaining;
    });
    RC_ASSERT(d.remaining == binding->remaining);
    RC_ASSERT(d.retry_after == 0);
  } else {
    // The limit that frees up last speaks.
    Micros max_retry = 0;
    for (const auto& x : items) max_retry = std::max(max_retry, x.retry_after);
    RC_ASSERT(d.retry_after == max_retry);
    RC_ASSERT(std::any_of(items.begin(), items.end(), [&](const Decision& x) {
      return x.retry_after == max_retry && x.limit == d.limit && x.remaining == d.remaining;
    }));
  }
}

}  // namespace
}  // namespace ratekeeper::testing
