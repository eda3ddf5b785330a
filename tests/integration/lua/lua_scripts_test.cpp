// The Redis scripts (lua/*.lua, embedded in the library) against a real redis-server: the
// same decisions as algorithms::step / step_all, the same state lifetimes as Step::expires_at,
// and the storage each algorithm promises.

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <atomic>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "algorithms/step.hpp"
#include "ratekeeper/algorithms/token_bucket.hpp"
#include "store/redis/lua_scripts.hpp"
#include "support/redis_server.hpp"
#include "support/script_runner.hpp"

namespace ratekeeper {
namespace {

using algorithms::Algorithm;
using algorithms::Decision;
using algorithms::Limit;
using algorithms::State;
using testing::RedisConnection;
using testing::RedisReply;
using testing::ScriptRunner;

constexpr Algorithm kAlgorithms[] = {Algorithm::token_bucket, Algorithm::sliding_window_log,
                                     Algorithm::sliding_window_counter, Algorithm::fixed_window};

// One redis-server and one connection for the whole file; every test uses keys of its own.
testing::RedisServer& server() {
  static testing::RedisServer s;
  return s;
}

RedisConnection& connection() {
  static RedisConnection c(server().host(), server().port());
  return c;
}

ScriptRunner& runner() {
  static ScriptRunner r(connection());
  return r;
}

std::string fresh_key(const std::string& what) {
  static std::atomic<int> next{0};
  return "test:{" + what + ":" + std::to_string(next++) + "}";
}

Limit make_limit(Algorithm a, std::int64_t capacity, Micros period) {
  auto l = Limit::make(a, capacity, period);
  if (!l) throw std::runtime_error(l.error().message);
  return *l;
}

Micros ceil_ms(Micros us) { return (us + kMicrosPerMilli - 1) / kMicrosPerMilli; }

// What a store keeps between two steps: the stepped state, or nothing once it is absent.
State stored(const algorithms::Step& s) { return s.expires_at == 0 ? State{} : s.state; }

// An embedded script under observation: the algorithm code is the embedded one, unchanged;
// a prologue records the expiry each write asks for (SET ... PX|PXAT, PEXPIRE, PEXPIREAT)
// instead of applying it, and the script's last line, the call of its entry, is wrapped to
// return, with the reply, each key's recorded expiry and whether the key exists. Keys thus
// never expire on Redis's wall clock while their state still counts at the simulated `now`.
// (That Redis applies the expiries is checked by the tests further down.)
std::string observing_sha(const std::string& script) {
  static std::map<std::string, std::string> shas;
  if (auto it = shas.find(script); it != shas.end()) return it->second;
  std::string source(*store::lua_script(script));
  const std::size_t last = source.rfind("\nreturn ");
  if (last == std::string::npos) throw std::runtime_error(script + ": no entry call");
  const std::string call = source.substr(last + 8);
  source.erase(last + 1);
  const std::string prologue =
      "local redis_call = redis.call\n"
      "local asked_expiry = {}\n"
      "local redis = setmetatable({call = function(command, key, ...)\n"
      "  local args = {...}\n"
      "  if key == nil then return redis_call(command) end\n"
      "  if command == 'SET' and (args[2] == 'PX' or args[2] == 'PXAT') then\n"
      "    asked_expiry[key] = args[2] .. ' ' .. args[3]\n"
      "    return redis_call('SET', key, args[1])\n"
      "  end\n"
      "  if command == 'PEXPIRE' or command == 'PEXPIREAT' then\n"
      "    asked_expiry[key] = (command == 'PEXPIRE' and 'PX ' or 'PXAT ') .. args[1]\n"
      "    return 1\n"
      "  end\n"
      "  return redis_call(command, key, ...)\n"
      "end}, {__index = redis})\n";
  source = prologue + source + "local reply = " + call +
           "local expiry, exists = {}, {}\n"
           "for i, key in ipairs(KEYS) do\n"
           "  expiry[i] = asked_expiry[key] or ''\n"
           "  exists[i] = redis_call('EXISTS', key)\n"
           "end\n"
           "return {reply, expiry, exists}\n";
  const RedisReply loaded = connection().command({"SCRIPT", "LOAD", source});
  if (loaded.type != RedisReply::Type::string) throw std::runtime_error(loaded.text);
  return shas.emplace(script, loaded.text).first->second;
}

// One observed script call: the reply, and per key the expiry asked for ("PX <ms>",
// "PXAT <ms>", or "" when none) and whether the key exists afterwards.
struct Observed {
  std::vector<std::int64_t> reply;
  std::vector<std::string> expiry;
  std::vector<std::int64_t> exists;
};

Observed run_observed(const std::string& script, const std::vector<std::string>& keys,
                      const std::vector<std::string>& args) {
  std::vector<std::string> eval{"EVALSHA", observing_sha(script), std::to_string(keys.size())};
  eval.insert(eval.end(), keys.begin(), keys.end());
  eval.insert(eval.end(), args.begin(), args.end());
  const RedisReply r = connection().command(eval);
  if (r.type != RedisReply::Type::array || r.elements.size() != 3) {
    throw std::runtime_error(script + ": " + r.text);
  }
  Observed out;
  out.reply = testing::integers(r.elements[0]);
  for (const auto& e : r.elements[1].elements) out.expiry.push_back(e.text);
  out.exists = testing::integers(r.elements[2]);
  return out;
}

// The key's lifetime after a step: deleted when the state is absent; otherwise, when the
// step consumed, set to expires_at − now rounded up to the millisecond; otherwise left as it
// was (peeks and denials never extend a key's life).
void check_lifetime(const Observed& o, std::size_t i, Micros now, Micros expires_at, bool consumed) {
  if (expires_at == 0) {
    RC_ASSERT(o.exists[i] == 0);
    return;
  }
  RC_ASSERT(o.exists[i] == 1);
  const std::string expected = consumed ? "PX " + std::to_string(ceil_ms(expires_at - now)) : "";
  RC_ASSERT(o.expiry[i] == expected);
}

// Limits whose numbers exercise both small windows (many roll-overs, W = 1 µs) and large
// realistic ones.
rc::Gen<Limit> gen_limit(Algorithm a) {
  return rc::gen::map(
      rc::gen::tuple(rc::gen::weightedOneOf<std::int64_t>({{4, rc::gen::inRange<std::int64_t>(1, 8)},
                                                           {1, rc::gen::inRange<std::int64_t>(1, 600)}}),
                     rc::gen::weightedOneOf<Micros>({{3, rc::gen::inRange<Micros>(1, 40)},
                                                     {2, rc::gen::inRange<Micros>(1'000, 5'000'000)},
                                                     {1, rc::gen::inRange<Micros>(1, 3'600'000'000)}})),
      [a](std::tuple<std::int64_t, Micros> t) {
        return make_limit(a, std::get<0>(t), std::get<1>(t));
      });
}

rc::Gen<Algorithm> gen_algorithm() {
  return rc::gen::element(Algorithm::token_bucket, Algorithm::sliding_window_log,
                          Algorithm::sliding_window_counter, Algorithm::fixed_window);
}

// A starting instant: near zero, or near today's clock in µs.
rc::Gen<Micros> gen_start() {
  return rc::gen::weightedOneOf<Micros>(
      {{1, rc::gen::inRange<Micros>(0, 100)},
       {3, rc::gen::inRange<Micros>(1'700'000'000'000'000, 1'700'000'100'000'000)}});
}

// The next instant: mostly forward within a few horizons, sometimes the same microsecond,
// sometimes backwards (never below 0).
Micros next_now(Micros now, Micros horizon) {
  const Micros step = *rc::gen::weightedOneOf<Micros>(
      {{6, rc::gen::inRange<Micros>(0, horizon / 4 + 2)},
       {3, rc::gen::inRange<Micros>(0, 2 * horizon + 2)},
       {2, rc::gen::just<Micros>(0)},
       {1, rc::gen::inRange<Micros>(-horizon - 1, 0)}});
  return std::max<Micros>(0, now + step);
}

void differential_single(const Limit& limit) {
  const Algorithm a = limit.algorithm;
  const std::string key = fresh_key("diff");
  Micros now = *gen_start();
  const int steps = *rc::gen::inRange(1, 40);
  State state;
  for (int i = 0; i < steps; ++i) {
    const std::int64_t cost = *rc::gen::weightedOneOf<std::int64_t>(
        {{4, rc::gen::inRange<std::int64_t>(1, std::min<std::int64_t>(limit.capacity, 3) + 1)},
         {1, rc::gen::just<std::int64_t>(0)},
         {2, rc::gen::inRange<std::int64_t>(0, limit.capacity + 1)}});
    auto expected = algorithms::step(limit, state, now, cost);
    RC_ASSERT(expected.has_value());
    const Observed o = run_observed(std::string(to_string(a)), {key},
                                    testing::single_args(limit, cost, now));
    RC_ASSERT(o.reply.size() == 5u);
    RC_ASSERT(testing::decision_at(o.reply, 0) == expected->decision);
    check_lifetime(o, 0, now, expected->expires_at, expected->decision.allowed && cost > 0);
    state = stored(*expected);
    now = next_now(now, limit.horizon());
  }
}

RC_GTEST_PROP(LuaScripts, TokenBucketDecidesAsTheCppAlgorithm, ()) {
  differential_single(*gen_limit(Algorithm::token_bucket));
}

RC_GTEST_PROP(LuaScripts, SlidingWindowLogDecidesAsTheCppAlgorithm, ()) {
  differential_single(*gen_limit(Algorithm::sliding_window_log));
}

RC_GTEST_PROP(LuaScripts, SlidingWindowCounterDecidesAsTheCppAlgorithm, ()) {
  differential_single(*gen_limit(Algorithm::sliding_window_counter));
}

RC_GTEST_PROP(LuaScripts, FixedWindowDecidesAsTheCppAlgorithm, ()) {
  differential_single(*gen_limit(Algorithm::fixed_window));
}

// Quotas per day, month or year: limits up to 2^40 per window of up to 2^45 µs, where the
// sliding window counter's count × time products leave the range of exact doubles (the
// sliding window log keeps one entry per unit: its long windows are checked below).
rc::Gen<Limit> gen_long_window(Algorithm a) {
  constexpr Micros day = 86'400 * kMicrosPerSecond;
  return rc::gen::map(
      rc::gen::tuple(rc::gen::weightedOneOf<std::int64_t>(
                         {{1, rc::gen::inRange<std::int64_t>(1, 1'000)},
                          {1, rc::gen::element<std::int64_t>(100'000, 1'000'000, std::int64_t{algorithms::kMaxWindowLimit})},
                          {2, rc::gen::inRange<std::int64_t>(1, algorithms::kMaxWindowLimit + 1)}}),
                     rc::gen::weightedOneOf<Micros>({{2, rc::gen::element<Micros>(Micros{day}, 30 * day, 365 * day,
                                                                                    Micros{algorithms::kMaxWindow})},
                                                     {1, rc::gen::inRange<Micros>(1, algorithms::kMaxWindow + 1)}})),
      [a](std::tuple<std::int64_t, Micros> t) { return make_limit(a, std::get<0>(t), std::get<1>(t)); });
}

RC_GTEST_PROP(LuaScripts, FixedWindowOfLongWindowsDecidesAsTheCppAlgorithm, ()) {
  differential_single(*gen_long_window(Algorithm::fixed_window));
}

RC_GTEST_PROP(LuaScripts, SlidingWindowCounterOfLongWindowsDecidesAsTheCppAlgorithm, ()) {
  differential_single(*gen_long_window(Algorithm::sliding_window_counter));
}

// The previous window's weight previous·(W − e)/W where doubles would round: the product
// needs more than 53 bits and the quotient is an integer or within 1/W of one. Built as W =
// g·h, previous = g·u, W − e = m·h + δ: the quotient is u·m + δ·previous/W. The request that
// fits exactly, one unit more, and the wait for it decide as in C++.
RC_GTEST_PROP(LuaScripts, SlidingWindowCounterWeighsExactlyWhereDoublesRound, ()) {
  const auto g = *rc::gen::inRange<std::int64_t>(1 << 10, 1 << 20);
  const auto h = *rc::gen::inRange<std::int64_t>(1, algorithms::kMaxWindow / g + 1);
  const auto u = *rc::gen::inRange<std::int64_t>(1, algorithms::kMaxWindowLimit / g + 1);
  const auto m = *rc::gen::inRange<std::int64_t>(1, g);
  const Micros window = g * h;
  const std::int64_t previous = g * u;
  const Micros weight = std::clamp<Micros>(m * h + *rc::gen::inRange<Micros>(-1, 2), 1, window);
  const std::int64_t quota = *rc::gen::inRange<std::int64_t>(previous, algorithms::kMaxWindowLimit + 1);
  const Limit limit = make_limit(Algorithm::sliding_window_counter, quota, window);
  const std::string key = fresh_key("swc-round");
  const Micros start = (1'700'000'000'000'000 / window + 1) * window;
  State state;
  auto both = [&](Micros now, std::int64_t cost) {
    auto expected = algorithms::step(limit, state, now, cost);
    RC_ASSERT(expected.has_value());
    const Observed o = run_observed("sliding_window_counter", {key}, testing::single_args(limit, cost, now));
    RC_ASSERT(testing::decision_at(o.reply, 0) == expected->decision);
    state = stored(*expected);
    return expected->decision;
  };
  RC_ASSERT(both(start, previous).allowed);
  const Micros now = start + window + (window - weight);
  const Decision peek = both(now, 0);
  both(now, std::min(quota, peek.remaining + 1));
  both(now, peek.remaining);
  both(now, 1);
}

// 100000 per day and 1000000 per 30 days load in every window script and count exactly: the
// limit is reached, the next unit waits exactly as long as in C++, and the previous
// window's weight decays as in C++. (The log of a million entries is filled by C++ only:
// here a thousand of them.)
TEST(LuaScripts, DailyAndMonthlyQuotasCountExactly) {
  constexpr Micros day = 86'400 * kMicrosPerSecond;
  for (Algorithm a : {Algorithm::fixed_window, Algorithm::sliding_window_counter, Algorithm::sliding_window_log}) {
    for (const auto& [quota, window] : {std::pair<std::int64_t, Micros>{100'000, day}, {1'000'000, 30 * day}}) {
      SCOPED_TRACE(std::string(to_string(a)) + " " + std::to_string(quota) + " per " + std::to_string(window));
      const Limit limit = make_limit(a, quota, window);
      const std::string key = fresh_key("quota");
      const Micros start = (1'700'000'000'000'000 / window + 1) * window;
      const bool fill = a != Algorithm::sliding_window_log || quota <= 100'000;
      State state;
      auto both = [&](Micros now, std::int64_t cost) {
        auto expected = algorithms::step(limit, state, now, cost);
        ASSERT_TRUE(expected) << expected.error().message;
        // Observed: a key must not expire on Redis's clock while it counts at this `now`.
        const Observed o = run_observed(std::string(to_string(a)), {key}, testing::single_args(limit, cost, now));
        EXPECT_EQ(testing::decision_at(o.reply, 0), expected->decision) << "cost " << cost << " at " << now;
        state = stored(*expected);
      };
      // A log takes at most kMaxLogCost units a check: larger costs go in several checks.
      auto take = [&](Micros at, std::int64_t cost) {
        const std::int64_t most = a == Algorithm::sliding_window_log ? algorithms::kMaxLogCost : cost;
        for (std::int64_t taken = 0; taken < cost; taken += most) both(at, std::min(most, cost - taken));
      };
      const Micros now = start + window / 3;
      take(now, fill ? quota - 1 : 1'000);
      both(now + 1, 1);
      both(now + 1, 1);
      both(now + 1, 0);
      for (Micros e : {Micros{0}, Micros{1}, window / 7, window / 2, window - 1}) {
        both(start + window + e, 0);
        both(start + window + e, 1);
        take(start + window + e, fill ? quota / 3 : 1'000);
      }
      both(start + 3 * window, 0);
      EXPECT_EQ(connection().integer({"EXISTS", key}), 0);  // the state is absent: deleted
    }
  }
}

RC_GTEST_PROP(LuaScripts, MultiDecidesAsStepAll, ()) {
  const int n = *rc::gen::inRange(2, 4);
  std::vector<Limit> limits;
  std::vector<std::string> keys;
  const std::string tag = fresh_key("multi");
  Micros horizon = 1;
  for (int i = 0; i < n; ++i) {
    limits.push_back(*gen_limit(*gen_algorithm()));
    keys.push_back(tag + ":" + std::to_string(i));
    horizon = std::max(horizon, limits.back().horizon());
  }
  std::vector<State> states(n);
  Micros now = *gen_start();
  const int steps = *rc::gen::inRange(1, 30);
  for (int s = 0; s < steps; ++s) {
    std::vector<std::int64_t> costs;
    for (const Limit& l : limits) {
      costs.push_back(*rc::gen::weightedOneOf<std::int64_t>(
          {{4, rc::gen::inRange<std::int64_t>(1, std::min<std::int64_t>(l.capacity, 2) + 1)},
           {1, rc::gen::inRange<std::int64_t>(0, l.capacity + 1)}}));
    }
    auto expected = algorithms::step_all(limits, states, now, costs);
    RC_ASSERT(expected.has_value());
    const Observed o = run_observed("multi", keys, testing::multi_args(limits, costs, now));
    RC_ASSERT(o.reply.size() == 5u * (n + 1));
    RC_ASSERT(testing::decision_at(o.reply, 0) == expected->decision);
    for (int i = 0; i < n; ++i) {
      RC_ASSERT(testing::decision_at(o.reply, 5 * (i + 1)) == expected->items[i]);
      check_lifetime(o, i, now, expected->expires_at[i], expected->decision.allowed && costs[i] > 0);
      states[i] = expected->expires_at[i] == 0 ? State{} : expected->states[i];
    }
    now = next_now(now, horizon);
  }
}

// "multi_delay" against step_all with max_delays: the same decisions, the same delay, the
// same states and key lifetimes, over mostly token buckets (some window limits: never a delay)
// whose max_delays are 0, within a few horizons, or the largest.
RC_GTEST_PROP(LuaScripts, MultiDelayDecidesAsStepAllWithMaxDelays, ()) {
  const int n = *rc::gen::inRange(1, 4);
  std::vector<Limit> limits;
  std::vector<std::string> keys;
  std::vector<Micros> max_delays;
  const std::string tag = fresh_key("multi_delay");
  Micros horizon = 1;
  for (int i = 0; i < n; ++i) {
    const Algorithm a = *rc::gen::weightedOneOf<Algorithm>(
        {{6, rc::gen::just(Algorithm::token_bucket)}, {1, gen_algorithm()}});
    limits.push_back(*gen_limit(a));
    keys.push_back(tag + ":" + std::to_string(i));
    horizon = std::max(horizon, limits.back().horizon());
  }
  for (int i = 0; i < n; ++i) {
    max_delays.push_back(*rc::gen::weightedOneOf<Micros>(
        {{2, rc::gen::just<Micros>(0)},
         {4, rc::gen::inRange<Micros>(1, std::min(algorithms::kMaxDelay, 2 * horizon) + 1)},
         {1, rc::gen::just(algorithms::kMaxDelay)}}));
  }
  if (std::all_of(max_delays.begin(), max_delays.end(), [](Micros m) { return m == 0; })) max_delays[0] = 1;
  std::vector<State> states(n);
  Micros now = *gen_start();
  const int steps = *rc::gen::inRange(1, 30);
  bool delayed = false;
  for (int s = 0; s < steps; ++s) {
    std::vector<std::int64_t> costs;
    for (const Limit& l : limits) {
      costs.push_back(*rc::gen::weightedOneOf<std::int64_t>(
          {{4, rc::gen::inRange<std::int64_t>(1, std::min<std::int64_t>(l.capacity, 2) + 1)},
           {1, rc::gen::inRange<std::int64_t>(0, l.capacity + 1)}}));
    }
    auto expected = algorithms::step_all(limits, states, now, costs, max_delays);
    RC_ASSERT(expected.has_value());
    const Observed o = run_observed("multi_delay", keys, testing::multi_delay_args(limits, costs, max_delays, now));
    RC_ASSERT(o.reply.size() == 5u * (n + 1) + 1);
    const Micros delay = o.reply.back();
    RC_ASSERT(delay == expected->decision.delay);
    auto told = [&](std::size_t offset) {
      Decision d = testing::decision_at(o.reply, offset);
      d.delay = delay;
      return d;
    };
    RC_ASSERT(told(0) == expected->decision);
    for (int i = 0; i < n; ++i) {
        RC_ASSERT(told(5 * (i + 1)) == expected->items[i]);
      check_lifetime(o, i, now, expected->expires_at[i], expected->decision.allowed && costs[i] > 0);
      states[i] = expected->expires_at[i] == 0 ? State{} : expected->states[i];
    }
    delayed = delayed || delay > 0;
    now = next_now(now, horizon);
  }
  RC_CLASSIFY(delayed, "some check delayed");
}

// Fixed case of the property above: the check waits for the largest wait its limits need,
// wherever that limit is among them (here the first: it needs 3 s, the second 1 s).
TEST(LuaScripts, MultiDelayWaitsForTheLargestWaitNotTheLastOne) {
  const Micros second = kMicrosPerSecond;
  const Micros t0 = 1'700'000'000'000'000;
  const Limit slow = *Limit::make(Algorithm::token_bucket, 1, 4 * second);  // 1 every 4 s
  const Limit fast = *Limit::make(Algorithm::token_bucket, 2, second);
  const std::string tag = fresh_key("multi_delay_largest");
  const std::vector<std::string> keys{tag + ":slow", tag + ":fast"};
  ASSERT_EQ(run_observed("token_bucket", {keys[0]}, testing::single_args(slow, 1, t0 - second)).reply[0], 1);
  ASSERT_EQ(run_observed("token_bucket", {keys[1]}, testing::single_args(fast, 2, t0)).reply[0], 1);
  const std::vector<State> states{algorithms::token_bucket::step(slow, {}, t0 - second, 1).state,
                                  algorithms::token_bucket::step(fast, {}, t0, 2).state};
  const std::vector limits{slow, fast};
  const std::vector<std::int64_t> costs{1, 1};
  const std::vector<Micros> max_delays{algorithms::kMaxDelay, algorithms::kMaxDelay};
  const auto expected = algorithms::step_all(limits, states, t0, costs, max_delays);
  ASSERT_TRUE(expected);
  ASSERT_EQ(expected->decision.delay, 3 * second);
  const Observed o = run_observed("multi_delay", keys, testing::multi_delay_args(limits, costs, max_delays, t0));
  ASSERT_EQ(o.reply.size(), 5u * 3 + 1);
  EXPECT_EQ(o.reply.back(), 3 * second);
  EXPECT_EQ(o.reply[0], 1);  // admitted, to be sent in 3 s
}

// A call whose `now` carries a deadline on the server's clock ("now:deadline") that has passed
// when it runs does nothing: a TIMEOUT error, no key written; before its deadline it runs as
// without one. Every entry but the refund, which the store never bounds.
TEST(LuaScripts, ACallRunAfterItsDeadlineDoesNothing) {
  const RedisReply time = connection().command({"TIME"});
  ASSERT_EQ(time.elements.size(), 2u);
  const Micros server = std::stoll(time.elements[0].text) * kMicrosPerSecond + std::stoll(time.elements[1].text);
  const Limit bucket = make_limit(Algorithm::token_bucket, 5, kMicrosPerSecond);
  const Limit window = make_limit(Algorithm::fixed_window, 5, 60 * kMicrosPerSecond);
  struct Case {
    std::string script;
    std::size_t keys;
    std::vector<std::string> args;
    std::size_t now_at;  // index in args
  };
  const std::vector<Limit> two{bucket, window};
  const std::vector<std::int64_t> costs{1, 1};
  const std::vector<Case> cases = {
      {"token_bucket", 1, testing::single_args(bucket, 1, -1), 3},
      {"fixed_window", 1, testing::single_args(window, 1, 1'000'000), 3},
      {"multi", 2, testing::multi_args(two, costs, -1), 0},
      {"multi_at", 2, testing::multi_args(two, costs, -1), 0},
      {"multi_delay", 2, testing::multi_delay_args(two, costs, std::vector<Micros>{kMicrosPerSecond, 0}, -1), 0},
      {"batch", 1, {"-1", "1", "0", "5", std::to_string(kMicrosPerSecond), "1", "1"}, 0},
      {"lease", 1, {"0", "5", std::to_string(kMicrosPerSecond), "1", "2", "-1"}, 5},
  };
  for (const auto& c : cases) {
    for (const bool late : {true, false}) {
      std::vector<std::string> keys;
      for (std::size_t k = 0; k < c.keys; ++k) keys.push_back(fresh_key("deadline_" + c.script));
      std::vector<std::string> args = c.args;
      const Micros deadline = late ? server - kMicrosPerSecond : server + 3600 * kMicrosPerSecond;
      args[c.now_at] += ":" + std::to_string(deadline);
      std::vector<std::string> eval{"EVAL", std::string(*store::lua_script(c.script)), std::to_string(keys.size())};
      eval.insert(eval.end(), keys.begin(), keys.end());
      eval.insert(eval.end(), args.begin(), args.end());
      const RedisReply r = connection().command(eval);
      if (late) {
        EXPECT_EQ(r.type, RedisReply::Type::error) << c.script;
        EXPECT_TRUE(r.text.starts_with("TIMEOUT ratekeeper:")) << c.script << ": " << r.text;
        for (const auto& key : keys) EXPECT_EQ(connection().integer({"EXISTS", key}), 0) << c.script;
      } else {
        EXPECT_EQ(r.type, RedisReply::Type::array) << c.script << ": " << r.text;
        EXPECT_EQ(connection().integer({"EXISTS", keys[0]}), 1) << c.script;
      }
    }
  }
  const RedisReply bad = connection().command(
      {"EVAL", std::string(*store::lua_script("token_bucket")), "1", fresh_key("deadline_bad"), "5", "1000000", "1", "-1:x"});
  EXPECT_EQ(bad.type, RedisReply::Type::error);
  EXPECT_NE(bad.text.find("deadline must be an integer"), std::string::npos) << bad.text;
}

// The scripts refuse what algorithms::validate_cost refuses: a sliding window log check of
// more than kMaxLogCost units (one entry each), before any work.
TEST(LuaScripts, ASlidingWindowLogCheckTakesAtMostMaxLogCost) {
  const Limit log = make_limit(Algorithm::sliding_window_log, 100'000, 60 * kMicrosPerSecond);
  const std::string key = fresh_key("log_cost");
  const auto call = [&](std::int64_t cost) {
    return connection().command({"EVAL", std::string(*store::lua_script("sliding_window_log")), "1", key,
                                 std::to_string(log.capacity), std::to_string(log.period), std::to_string(cost), "-1"});
  };
  const RedisReply refused = call(algorithms::kMaxLogCost + 1);
  EXPECT_EQ(refused.type, RedisReply::Type::error);
  EXPECT_NE(refused.text.find("sliding window log"), std::string::npos) << refused.text;
  EXPECT_EQ(connection().integer({"EXISTS", key}), 0);
  EXPECT_EQ(call(algorithms::kMaxLogCost).type, RedisReply::Type::array);
  EXPECT_EQ(connection().integer({"ZCARD", key}), algorithms::kMaxLogCost);
}

TEST(LuaScripts, EmbedsEveryScriptAndEachLoads) {
  std::set<std::string> names;
  for (const auto& s : store::lua_scripts()) {
    names.emplace(s.name);
    const RedisReply r = connection().command({"SCRIPT", "LOAD", std::string(s.source)});
    EXPECT_EQ(r.type, RedisReply::Type::string) << s.name << ": " << r.text;
  }
  EXPECT_EQ(names, (std::set<std::string>{"token_bucket", "sliding_window_log",
                                          "sliding_window_counter", "fixed_window", "multi", "batch", "multi_at",
                                          "multi_delay", "refund", "lease", "reset", "reserve",
                                          "settle", "renew", "table_read", "table_write"}));
}

// A settlement reads its record only when it is one: a key of another type or another
// format (a counter, a truncated record) is no reservation, and is left as it is.
TEST(LuaScripts, ASettlementOfWhatIsNotARecordChangesNothing) {
  const auto* reserve = store::find_lua_script("reserve");
  const auto* settle = store::find_lua_script("settle");
  ASSERT_NE(reserve, nullptr);
  ASSERT_NE(settle, nullptr);
  const std::string record = "lua:{settle}:r:reservation:x", key = "lua:{settle}:r";
  connection().command({"DEL", record, key});
  auto settle_call = [&](std::string actual) {
    return connection().command({"EVAL", std::string(settle->source), "2", record, key, "1000000000000", "0", "10",
                                 "1000000", std::move(actual)});
  };
  const std::vector<std::string> not_records = {"12", "R1;", "R1;5;3:ab", "R1;5;99:lua:{settle}:r:1:2",
                                                "R1;5;13:lua:{settle}:r:1"};
  for (const auto& value : not_records) {
    connection().command({"SET", record, value});
    const RedisReply r = settle_call("0");
    ASSERT_EQ(r.type, RedisReply::Type::integer) << value << ": " << r.text;
    EXPECT_EQ(r.integer, 0) << value;
    EXPECT_EQ(connection().command({"GET", record}).text, value);
  }
  connection().command({"DEL", record});
  connection().command({"HSET", record, "at", "1"});
  EXPECT_EQ(settle_call("0").integer, 0);
  EXPECT_EQ(connection().integer({"EXISTS", record}), 1);
  connection().command({"DEL", record});

  // A record written by "reserve" at an explicit time: settled once, then gone.
  const RedisReply reserved = connection().command(
      {"EVAL", std::string(reserve->source), "2", record, key, "1000000000000", "60000000", "1", "1", "0", "10", "1000000",
       "4"});
  ASSERT_EQ(reserved.type, RedisReply::Type::array) << reserved.text;
  EXPECT_EQ(connection().command({"GET", record}).text, "R1;1000000000000;14:lua:{settle}:r:4:4000000");
  EXPECT_EQ(settle_call("1").integer, 1);
  EXPECT_EQ(connection().integer({"EXISTS", record}), 0);
  EXPECT_EQ(connection().command({"GET", key}).text, "1000001000000");  // one token taken, not four
  EXPECT_EQ(settle_call("1").integer, 0);

  // The record holds the keys it is told to (here the second, after a sliding window log of
  // another rule, which it need not and cannot hold).
  const std::string log = "lua:{settle}:other";
  connection().command({"DEL", log, key});
  const RedisReply two = connection().command({"EVAL", std::string(reserve->source), "3", record, log, key,
                                               "1000000000000", "60000000", "2", "1", "1", "5", "1000000", "1", "0",
                                               "10", "1000000", "4"});
  ASSERT_EQ(two.type, RedisReply::Type::array) << two.text;
  EXPECT_EQ(connection().command({"GET", record}).text, "R1;1000000000000;14:lua:{settle}:r:4:4000000");
  EXPECT_EQ(connection().integer({"ZCARD", log}), 1);
  const RedisReply wrong = connection().command({"EVAL", std::string(reserve->source), "3", record, log, key,
                                                 "1000000000000", "60000000", "1", "2", "1", "5", "1000000", "1",
                                                 "0", "10", "1000000", "4"});
  EXPECT_EQ(wrong.type, RedisReply::Type::error);  // a sliding window log cannot be recorded
}

// The reset script deletes the keys it is given, whatever they hold, and answers how many
// existed; it asks for at least one key and no argument.
TEST(LuaScripts, ResetDeletesItsKeysAndCountsThoseThatExisted) {
  const auto* script = store::find_lua_script("reset");
  ASSERT_NE(script, nullptr);
  const std::string a = "lua:{reset}:a", b = "lua:{reset}:b", c = "lua:{reset}:c";
  connection().command({"SET", a, "1"});
  connection().command({"ZADD", b, "1", "m"});
  connection().command({"DEL", c});
  const RedisReply r = connection().command({"EVAL", std::string(script->source), "3", a, b, c});
  ASSERT_EQ(r.type, RedisReply::Type::integer) << r.text;
  EXPECT_EQ(r.integer, 2);
  EXPECT_EQ(connection().integer({"EXISTS", a, b, c}), 0);
  EXPECT_EQ(connection().command({"EVAL", std::string(script->source), "0"}).type, RedisReply::Type::error);
  EXPECT_EQ(connection().command({"EVAL", std::string(script->source), "1", a, "x"}).type, RedisReply::Type::error);
}

// PTTL right after a first admitted request, for each key type, equals the C++ expires_at −
// now rounded up to the millisecond; and the key is deleted by the step that makes the
// state absent.
TEST(LuaScripts, KeyLivesExactlyUntilItsStateIsAbsent) {
  const Micros now = 1'700'000'000'123'000;
  // Periods whose lifetimes end inside a millisecond and on one (rounding up changes nothing).
  for (const auto& [a, period] : std::vector<std::pair<Algorithm, Micros>>{
           {Algorithm::token_bucket, 2'500'333},
           {Algorithm::token_bucket, 2'500'000},
           {Algorithm::sliding_window_log, 2'500'333},
           {Algorithm::sliding_window_log, 2'500'000},
           {Algorithm::sliding_window_counter, 2'500'333},
           {Algorithm::sliding_window_counter, 2'500'000},
           {Algorithm::fixed_window, 2'500'333},
           {Algorithm::fixed_window, 2'500'000}}) {
    SCOPED_TRACE(std::string(to_string(a)) + " " + std::to_string(period));
    const Limit limit = make_limit(a, 3, period);
    const std::string key = fresh_key("ttl");
    auto first = algorithms::step(limit, {}, now, 2);
    ASSERT_TRUE(first);
    const std::int64_t before = connection().server_time_us() / 1000;
    EXPECT_EQ(runner().check(key, limit, 2, now), first->decision);
    const std::int64_t after = connection().server_time_us() / 1000;
    const long long pttl = connection().integer({"PTTL", key});
    const long long expire_time = connection().integer({"PEXPIRETIME", key});
    const Micros ttl = ceil_ms(first->expires_at - now);
    EXPECT_LE(pttl, ttl);
    EXPECT_GE(expire_time - ttl, before);
    EXPECT_LE(expire_time - ttl, after);

    // The first instant at which the state is absent: a peek there deletes the key.
    auto peek = algorithms::step(limit, first->state, first->expires_at, 0);
    ASSERT_TRUE(peek);
    EXPECT_EQ(peek->expires_at, 0);
    EXPECT_EQ(runner().check(key, limit, 0, first->expires_at), peek->decision);
    EXPECT_EQ(connection().integer({"EXISTS", key}), 0);
  }
}

// On the server's clock the expiry is absolute: expires_at rounded up to the millisecond.
TEST(LuaScripts, ServerClockExpiryIsExpiresAtRoundedUpToTheMillisecond) {
  for (Algorithm a : kAlgorithms) {
    SCOPED_TRACE(std::string(to_string(a)));
    const std::int64_t before = connection().server_time_us();
    // A window long enough that the key outlives the checks below (the fixed window's key
    // lives until its window ends, and the window is aligned on the server's clock).
    Micros period = 3'600'000'777;
    while (period - before % period < 60'000'000) period += 1'000'003;
    const Limit limit = make_limit(a, 4, period);
    const std::string key = fresh_key("ttl-server");
    const Decision d = runner().check(key, limit, 1, std::nullopt);
    const std::int64_t after = connection().server_time_us();
    ASSERT_TRUE(d.allowed);
    // reset_after is expires_at − now for a state holding one admitted unit.
    const long long expire_time = connection().integer({"PEXPIRETIME", key});
    EXPECT_GE(expire_time, ceil_ms(before + d.reset_after));
    EXPECT_LE(expire_time, ceil_ms(after + d.reset_after));
  }
}

TEST(LuaScripts, ServerClockTokenBucketAdmitsCapacityThenDenies) {
  const Limit limit = make_limit(Algorithm::token_bucket, 5, 60'000'000);  // one token a minute
  const std::string key = fresh_key("time");
  for (int i = 0; i < 5; ++i) {
    const Decision d = runner().check(key, limit, 1, std::nullopt);
    EXPECT_TRUE(d.allowed) << "request " << i;
    EXPECT_EQ(d.remaining, 4 - i);
  }
  const Decision denied = runner().check(key, limit, 1, std::nullopt);
  EXPECT_FALSE(denied.allowed);
  EXPECT_EQ(denied.remaining, 0);
  EXPECT_GT(denied.retry_after, 0);
  EXPECT_LE(denied.retry_after, 60'000'000);
}

TEST(LuaScripts, SlidingLogMembersAreUniqueForManyUnitsAtOneMicrosecond) {
  const Limit limit = make_limit(Algorithm::sliding_window_log, 5'000, 60'000'000);
  const std::string key = fresh_key("log");
  const Micros now = 1'700'000'000'000'000;
  std::int64_t admitted = 0;
  // Several calls at the same microsecond, some above one ZADD batch, one through "multi",
  // and a few at the next microsecond.
  for (std::int64_t cost : {1, 300, 1'000, 7, 1}) {
    ASSERT_TRUE(runner().check(key, limit, cost, now).allowed);
    admitted += cost;
  }
  const std::int64_t multi_cost = 42;
  auto all = runner().check_all({key}, std::span(&limit, 1), std::span(&multi_cost, 1), now);
  ASSERT_TRUE(all[0].allowed);
  admitted += multi_cost;
  for (std::int64_t cost : {2, 3}) {
    ASSERT_TRUE(runner().check(key, limit, cost, now + 1).allowed);
    admitted += cost;
  }
  EXPECT_EQ(connection().integer({"ZCARD", key}), admitted);
  const RedisReply members = connection().command({"ZRANGE", key, "0", "-1", "WITHSCORES"});
  ASSERT_EQ(members.elements.size(), static_cast<std::size_t>(2 * admitted));
  std::set<std::string> unique;
  for (std::size_t i = 0; i < members.elements.size(); i += 2) {
    const std::string& member = members.elements[i].text;
    unique.insert(member);
    // "<time><k, 3 digits>" for the first thousand at one time, "<time>:<k>" beyond.
    const std::string& time = members.elements[i + 1].text;
    EXPECT_EQ(member.substr(0, time.size()), time);
    const std::string k = member.substr(time.size());
    EXPECT_TRUE(k.size() == 3 || (k.size() > 4 && k[0] == ':')) << member;
  }
  EXPECT_EQ(unique.size(), static_cast<std::size_t>(admitted));
  const Decision d = runner().check(key, limit, 0, now + 1);
  EXPECT_EQ(d.remaining, limit.capacity - admitted);
}

// The raw content of a key: its type, value and expiry.
std::string raw_state(const std::string& key) {
  const std::string type = connection().command({"TYPE", key}).text;
  std::string out = type + " expires " + std::to_string(connection().integer({"PEXPIRETIME", key}));
  if (type == "string") {
    out += " " + connection().command({"GET", key}).text;
  } else if (type == "zset") {
    for (const auto& e : connection().command({"ZRANGE", key, "0", "-1", "WITHSCORES"}).elements) {
      out += " " + e.text;
    }
  }
  return out;
}

TEST(LuaScripts, MultiDenialConsumesNothingFromTheOtherLimits) {
  const Micros now = 1'700'000'000'000'000;
  const std::string tag = fresh_key("multi-deny");
  const std::vector<std::string> keys{tag + ":tb", tag + ":log", tag + ":swc", tag + ":fw"};
  const std::vector<Limit> limits{make_limit(Algorithm::token_bucket, 10, 60'000'000),
                                  make_limit(Algorithm::sliding_window_log, 10, 60'000'000),
                                  make_limit(Algorithm::sliding_window_counter, 10, 60'000'000),
                                  make_limit(Algorithm::fixed_window, 2, 60'000'000)};
  // Some use of every limit; the fixed window is then full.
  const std::vector<std::int64_t> first{3, 3, 3, 2};
  auto warm = runner().check_all(keys, limits, first, now);
  ASSERT_TRUE(warm[0].allowed);
  std::vector<State> states(limits.size());
  auto expected_warm = algorithms::step_all(limits, states, now, first);
  ASSERT_TRUE(expected_warm);
  for (std::size_t i = 0; i < limits.size(); ++i) states[i] = expected_warm->states[i];

  std::map<std::string, std::string> before;
  for (const auto& k : keys) before[k] = raw_state(k);

  const std::vector<std::int64_t> costs{1, 1, 1, 1};
  auto denied = runner().check_all(keys, limits, costs, now + 10);
  EXPECT_FALSE(denied[0].allowed);
  EXPECT_FALSE(denied[4].allowed);
  for (const auto& k : keys) EXPECT_EQ(raw_state(k), before[k]) << k;

  // The limits that would have admitted report a peek: their state, nothing consumed.
  for (std::size_t i = 0; i < 3; ++i) {
    auto peek = algorithms::step(limits[i], states[i], now + 10, 0);
    ASSERT_TRUE(peek);
    EXPECT_TRUE(denied[i + 1].allowed);
    EXPECT_EQ(denied[i + 1], peek->decision) << keys[i];
  }
  auto expected = algorithms::step_all(limits, states, now + 10, costs);
  ASSERT_TRUE(expected);
  EXPECT_EQ(denied[0], expected->decision);
}

TEST(LuaScripts, KeyOfAnotherAlgorithmCountsAsAbsent) {
  const Micros now = 1'700'000'000'000'000;
  for (Algorithm writer : kAlgorithms) {
    for (Algorithm reader : kAlgorithms) {
      if (writer == reader) continue;
      const std::string key = fresh_key("mixed");
      ASSERT_TRUE(runner().check(key, make_limit(writer, 5, 1'000'000), 5, now).allowed);
      const Limit limit = make_limit(reader, 5, 1'000'000);
      auto fresh = algorithms::step(limit, {}, now, 5);
      ASSERT_TRUE(fresh);
      EXPECT_EQ(runner().check(key, limit, 5, now), fresh->decision)
          << to_string(writer) << " then " << to_string(reader);
    }
  }
}

TEST(LuaScripts, InvalidArgumentsAreErrors) {
  const std::string key = fresh_key("invalid");
  auto error = [&](const std::string& script, std::vector<std::string> keys,
                   std::vector<std::string> args) {
    const RedisReply r = runner().run(script, keys, args);
    EXPECT_TRUE(r.is_error()) << script;
    return r.text;
  };
  EXPECT_NE(error("token_bucket", {key}, {"5", "1000", "6", "0"}).find("exceeds capacity"),
            std::string::npos);
  EXPECT_NE(error("fixed_window", {key}, {"5", "1000", "-1", "0"}).find("cost"), std::string::npos);
  EXPECT_NE(error("sliding_window_log", {key}, {"0", "1000", "0", "0"}).find("capacity"),
            std::string::npos);
  EXPECT_NE(error("sliding_window_counter", {key}, {"5", "0", "1", "0"}).find("period"),
            std::string::npos);
  EXPECT_NE(error("token_bucket", {key}, {"5", "1000", "1", "-2"}).find("now"), std::string::npos);
  EXPECT_NE(error("token_bucket", {key}, {"5", "1000", "1.5", "0"}).find("integer"),
            std::string::npos);
  EXPECT_NE(error("token_bucket", {key}, {"5", "1000", "1"}).find("arguments"), std::string::npos);
  EXPECT_NE(error("multi", {key, key}, {"0", "0", "5", "1000", "1", "3", "5", "1000", "1"})
                .find("twice"),
            std::string::npos);
  EXPECT_NE(error("multi", {key}, {"0", "7", "5", "1000", "1"}).find("algorithm"), std::string::npos);
  EXPECT_NE(error("multi", {key}, {"0", "0", "5", "1000"}).find("expected"), std::string::npos);
  EXPECT_NE(error("multi_delay", {key}, {"0", "0", "5", "1000", "1", "-1"}).find("max_delay"), std::string::npos);
  EXPECT_NE(error("multi_delay", {key}, {"0", "0", "5", "1000", "1", "3600000001"}).find("max_delay"),
            std::string::npos);
  EXPECT_NE(error("multi_delay", {key}, {"0", "0", "5", "1000", "1", "0.5"}).find("integer"), std::string::npos);
  EXPECT_NE(error("multi_delay", {key}, {"0", "0", "5", "1000", "1"}).find("max_delay_us per key"),
            std::string::npos);
  EXPECT_EQ(connection().integer({"EXISTS", key}), 0);
}

TEST(LuaScripts, MultiOfNoKeysAdmits) {
  const auto reply = runner().run_integers("multi", {}, {"0"});
  EXPECT_EQ(reply, (std::vector<std::int64_t>{1, 0, 0, 0, 0}));
}


// ---- "multi_at" and "refund": the refund of a check whose keys span Redis Cluster slots ----

// ARGV of "refund" for one key: the consumption's instant, the refund's, then the limit, the
// cost consumed and the reset_after of the admitted decision (testing::refund_args).
std::vector<std::string> refund_args(const Limit& limit, std::int64_t cost, Micros reset_after, Micros at,
                                     std::optional<Micros> now) {
  return testing::refund_args(std::span(&limit, 1), std::span(&cost, 1), std::span(&reset_after, 1), at, now);
}

// The refund's reply for one key: whether it gave state back, and the peek after it.
struct Refunded {
  bool refunded = false;
  Decision peek;
};

Refunded refund_one(const std::string& key, const Limit& limit, std::int64_t cost, Micros reset_after, Micros at,
                    std::optional<Micros> now) {
  const auto reply = runner().run_integers("refund", {key}, refund_args(limit, cost, reset_after, at, now));
  if (reply.size() != 6) throw std::runtime_error("refund: expected 6 integers");
  return {reply[0] == 1, testing::decision_at(reply, 1)};
}

// Whether a consumption at `at` still counts at `now`, per algorithm.
bool still_counts(const Limit& limit, const algorithms::Step& consumed, Micros at, Micros now) {
  const Micros w = limit.period;
  switch (limit.algorithm) {
    case Algorithm::token_bucket:
      return consumed.expires_at > now;  // the bucket's tat
    case Algorithm::fixed_window:
      return now / w == at / w;
    case Algorithm::sliding_window_counter:
      return now / w <= at / w + 1;
    case Algorithm::sliding_window_log:
      return at > now - w;
    case Algorithm::concurrency:  // held until released, not refunded
      return false;
  }
  return false;
}

// A state built by random admitted and denied steps; then an admitted consumption at `at`;
// then, at `now` >= at, its refund: the key is left as if the consumption had never been
// (the peek after the refund is the C++ peek of the state before it), and it lives until
// that state's expires_at. Time moves forward only (a clock that goes backwards across a
// window is the documented case where a window refund gives nothing back).
void refund_undoes_the_consumption(Algorithm a) {
  const Limit limit = *gen_limit(a);
  const std::string key = fresh_key("refund");
  Micros now = *gen_start();
  State state;
  Micros expires_at = 0;  // of the key, as last asked for
  auto forward = [&](Micros t) {
    return t + *rc::gen::weightedOneOf<Micros>({{4, rc::gen::inRange<Micros>(0, limit.horizon() / 4 + 2)},
                                               {2, rc::gen::just<Micros>(0)},
                                               {1, rc::gen::inRange<Micros>(0, 2 * limit.horizon() + 2)}});
  };
  const int steps = *rc::gen::inRange(0, 12);
  for (int i = 0; i < steps; ++i) {
    const std::int64_t cost = *rc::gen::inRange<std::int64_t>(0, limit.capacity + 1);
    auto expected = algorithms::step(limit, state, now, cost);
    RC_ASSERT(expected.has_value());
    const Observed o = run_observed(std::string(to_string(a)), {key}, testing::single_args(limit, cost, now));
    RC_ASSERT(testing::decision_at(o.reply, 0) == expected->decision);
    if (expected->decision.allowed && cost > 0) expires_at = expected->expires_at;
    state = stored(*expected);
    now = forward(now);
  }
  const Micros at = now;
  const auto before = algorithms::step(limit, state, at, 0);
  RC_ASSERT(before.has_value());
  RC_PRE(before->decision.remaining > 0);
  const std::int64_t cost = *rc::gen::inRange<std::int64_t>(1, before->decision.remaining + 1);
  const auto consumed = algorithms::step(limit, state, at, cost);
  RC_ASSERT(consumed.has_value());
  RC_ASSERT(consumed->decision.allowed);
  const Observed o = run_observed(std::string(to_string(a)), {key}, testing::single_args(limit, cost, at));
  RC_ASSERT(testing::decision_at(o.reply, 0) == consumed->decision);
  expires_at = consumed->expires_at;

  now = forward(at);
  const auto expected = algorithms::step(limit, state, now, 0);  // as if never consumed
  RC_ASSERT(expected.has_value());
  const Observed r =
      run_observed("refund", {key}, refund_args(limit, cost, consumed->decision.reset_after, at, now));
  RC_ASSERT(r.reply.size() == 6u);
  RC_ASSERT((r.reply[0] == 1) == still_counts(limit, *consumed, at, now));
  RC_ASSERT(testing::decision_at(r.reply, 1) == expected->decision);
  if (expected->expires_at == 0) {
    RC_ASSERT(r.exists[0] == 0);
  } else {
    RC_ASSERT(r.exists[0] == 1);
    // Either the lifetime it had, when that is still the right one, or the new one.
    if (r.expiry[0].empty()) {
      RC_ASSERT(expires_at == expected->expires_at);
    } else {
      RC_ASSERT(r.expiry[0] == "PX " + std::to_string(ceil_ms(expected->expires_at - now)));
    }
  }
  // And the key goes on as the C++ algorithm from the state without the consumption.
  const Micros later = forward(now);
  const std::int64_t next_cost = *rc::gen::inRange<std::int64_t>(0, limit.capacity + 1);
  const auto next = algorithms::step(limit, stored(*expected), later, next_cost);
  RC_ASSERT(next.has_value());
  const Observed n = run_observed(std::string(to_string(a)), {key}, testing::single_args(limit, next_cost, later));
  RC_ASSERT(testing::decision_at(n.reply, 0) == next->decision);
}

RC_GTEST_PROP(LuaRefund, TokenBucketRefundLeavesTheStateBeforeTheConsumption, ()) {
  refund_undoes_the_consumption(Algorithm::token_bucket);
}

RC_GTEST_PROP(LuaRefund, SlidingWindowLogRefundLeavesTheStateBeforeTheConsumption, ()) {
  refund_undoes_the_consumption(Algorithm::sliding_window_log);
}

RC_GTEST_PROP(LuaRefund, SlidingWindowCounterRefundLeavesTheStateBeforeTheConsumption, ()) {
  refund_undoes_the_consumption(Algorithm::sliding_window_counter);
}

RC_GTEST_PROP(LuaRefund, FixedWindowRefundLeavesTheStateBeforeTheConsumption, ()) {
  refund_undoes_the_consumption(Algorithm::fixed_window);
}

// Other checks drew on the bucket between the consumption and its refund: the refund then
// leaves the bucket between the state with the consumption and the state without it (the
// C++ algorithm over the same checks without the refunded one), never fuller.
RC_GTEST_PROP(LuaRefund, TokenBucketRefundAfterOtherChecksNeverGivesMoreThanWithoutTheConsumption, ()) {
  const Limit limit = *gen_limit(Algorithm::token_bucket);
  const std::string key = fresh_key("refund-tb-between");
  const Micros at = *gen_start();
  State with, without;
  if (*rc::gen::arbitrary<bool>()) {  // some earlier use
    const std::int64_t cost = *rc::gen::inRange<std::int64_t>(1, limit.capacity + 1);
    with = without = algorithms::step(limit, {}, at, cost)->state;
    run_observed("token_bucket", {key}, testing::single_args(limit, cost, at));
  }
  const auto before = algorithms::step(limit, with, at, 0);
  RC_PRE(before->decision.remaining > 0);
  const std::int64_t cost = *rc::gen::inRange<std::int64_t>(1, before->decision.remaining + 1);
  const auto consumed = algorithms::step(limit, with, at, cost);
  with = consumed->state;
  run_observed("token_bucket", {key}, testing::single_args(limit, cost, at));
  Micros now = at;
  const int others = *rc::gen::inRange(1, 5);
  for (int i = 0; i < others; ++i) {
    now += *rc::gen::inRange<Micros>(0, limit.horizon() / 2 + 2);
    const std::int64_t c = *rc::gen::inRange<std::int64_t>(0, limit.capacity + 1);
    auto w = algorithms::step(limit, with, now, c);
    const Observed o = run_observed("token_bucket", {key}, testing::single_args(limit, c, now));
    RC_ASSERT(testing::decision_at(o.reply, 0) == w->decision);
    if (w->decision.allowed) {
      with = w->state;
      // The same check without the refunded consumption admits too (its bucket is fuller).
      without = algorithms::step(limit, without, now, c)->state;
    }
  }
  now += *rc::gen::inRange<Micros>(0, limit.horizon() / 4 + 2);
  const Observed r = run_observed("refund", {key}, refund_args(limit, cost, consumed->decision.reset_after, at, now));
  RC_ASSERT(r.reply.size() == 6u);
  const Micros stored_tat = r.exists[0] == 1 ? std::stoll(connection().command({"GET", key}).text) : 0;
  const Micros tat = std::max(stored_tat, now);
  RC_ASSERT(tat <= std::max(with.t, now));
  RC_ASSERT(tat >= std::max(without.t, now));
  // Nothing drew on the bucket after all (only peeks and denials): exactly without it.
  if (with.t == consumed->state.t) RC_ASSERT(tat == std::max(without.t, now));
}

// One key's part of a check across slots, as RedisClusterStore runs it ("multi_at"): whether it
// admitted, and what a refund of it needs.
struct Consumed {
  bool allowed = false;
  Micros at = 0;
  Micros reset_after = 0;
};

Consumed consume(const std::string& key, const Limit& limit, std::int64_t cost, Micros now) {
  const auto reply =
      runner().run_integers("multi_at", {key}, testing::multi_args(std::span(&limit, 1), std::span(&cost, 1), now));
  if (reply.size() != 11) throw std::runtime_error("multi_at: expected 11 integers");
  return {reply[5] == 1, reply[10], reply[9]};
}

// Checks that consumed from one bucket and were then denied by another slot: every refund
// gives back its own consumption whatever the order the refunds arrive in. An earlier
// consumption's refund lowers the bucket's tat below what a later consumption left; that
// later consumption is still held all the same. (The figures: a bucket of 20 that
// refills 0.01 per second, 24 checks, all denied in the end.)
TEST(LuaRefund, TokenBucketRefundsGiveBackEveryConsumptionInAnyOrder) {
  const Limit limit = make_limit(Algorithm::token_bucket, 20, 100'000'000);
  const Micros t0 = 1'700'000'000'000'000;
  for (const bool oldest_first : {true, false}) {
    SCOPED_TRACE(oldest_first ? "the oldest consumption refunded first" : "the newest refunded first");
    const std::string key = fresh_key("refund-order");
    std::vector<Consumed> consumed;
    for (int i = 0; i < 24; ++i) {
      const Consumed c = consume(key, limit, 1, t0 + i * 10);
      if (c.allowed) consumed.push_back(c);
    }
    ASSERT_EQ(consumed.size(), 20u);
    if (!oldest_first) std::reverse(consumed.begin(), consumed.end());
    Micros now = t0 + 1'000;
    for (const Consumed& c : consumed) {
      const Refunded r = refund_one(key, limit, 1, c.reset_after, c.at, now);
      EXPECT_TRUE(r.refunded) << "consumption at " << c.at;
      now += 1'000;
    }
    // Full again: the little that refilled meanwhile is not counted twice.
    EXPECT_EQ(runner().check(key, limit, 0, now).remaining, 20);
    EXPECT_EQ(connection().integer({"EXISTS", key}), 0);
  }
}

// ---- Refunds in any order, against a reference model ----
//
// A consumption still held is one the key's state still counts:
// - windows: exactly its cost, in the window it was counted in (fixed window: until that
//   window ends; sliding window counter: until it has left the previous window; sliding
//   window log: its entries, until they leave the window). A refund takes exactly that out,
//   so after any interleaving the key is the state built from the consumptions that were
//   not refunded: the reference model below.
// - token bucket: GCRA keeps only the end of the line of consumptions (tat), which refill
//   oldest first. A consumption that left tat_c holds min(cost·T, tat_c − now, tat − now)
//   (refill reaches its end by tat_c at the latest, and it never holds more than the bucket
//   owes); the refund gives that back. The model applies that rule to its own tat and checks
//   what it promises against the bucket rebuilt from the consumptions not refunded (GCRA
//   over them in order): equal when every consumption was refunded (full), and otherwise
//   within what refilled between each refunded consumption and its refund.

// A consumption that can be refunded: an admitted "multi_at" call.
struct Held {
  Micros at = 0;
  std::int64_t cost = 0;
  Micros reset_after = 0;
};

// The state the consumptions `live` (admitted, not refunded, oldest first) leave at `now`,
// for a window algorithm, with time moving forward only.
State windows_state(const Limit& limit, const std::vector<Held>& live, Micros now) {
  const Micros w = limit.period;
  const Micros aligned = now / w * w;
  State s;
  for (const Held& h : live) {
    const Micros start = h.at / w * w;
    switch (limit.algorithm) {
      case Algorithm::fixed_window:
        if (start == aligned) s.current += h.cost;
        break;
      case Algorithm::sliding_window_counter:
        if (start == aligned) s.current += h.cost;
        if (start + w == aligned) s.previous += h.cost;
        break;
      case Algorithm::sliding_window_log:
        if (h.at > now - w) s.log.insert(s.log.end(), static_cast<std::size_t>(h.cost), h.at);
        break;
      case Algorithm::token_bucket:
      case Algorithm::concurrency: break;
    }
  }
  std::sort(s.log.begin(), s.log.end());
  if (s.current > 0 || s.previous > 0) s.t = aligned;
  return s;
}

// GCRA over `live` in order: the bucket without the refunded consumptions.
Micros bucket_without_refunded(const Limit& limit, const std::vector<Held>& live) {
  Micros tat = 0;
  for (const Held& h : live) tat = std::max(tat, h.at) + h.cost * limit.period;
  return tat;
}

void refunds_in_any_order(Algorithm a) {
  const Limit limit = *gen_limit(a);
  const std::string key = fresh_key("refund-any-order");
  const bool bucket = a == Algorithm::token_bucket;
  const std::string name(to_string(a));
  Micros now = *gen_start();
  std::vector<Held> live;      // oldest first
  Micros tat = 0;              // token bucket: the model's
  Micros drift = 0;            // token bucket: the bound on how far it may be from the bucket without refunds
  std::string expiry;          // the last expiry asked for the key ("PX <ms>"), and when
  Micros expiry_asked_at = 0;

  // The model's state at `now`.
  auto model = [&] {
    if (!bucket) return windows_state(limit, live, now);
    State s;
    if (tat > now) s.t = tat;
    return s;
  };
  // After every call: the key's existence and lifetime are the model's.
  auto check_key = [&](const Observed& o) {
    if (!o.expiry[0].empty()) {
      expiry = o.expiry[0];
      expiry_asked_at = now;
    }
    const auto peek = algorithms::step(limit, model(), now, 0);
    RC_ASSERT(peek.has_value());
    if (peek->expires_at == 0) {
      RC_ASSERT(o.exists[0] == 0);
    } else {
      RC_ASSERT(o.exists[0] == 1);
      RC_ASSERT(expiry == "PX " + std::to_string(ceil_ms(peek->expires_at - expiry_asked_at)));
    }
    if (bucket) {
      RC_ASSERT(o.exists[0] == 0 || connection().command({"GET", key}).text == std::to_string(tat));
      // Full when nothing is held any more; otherwise close to the bucket without the refunds.
      const Micros owed = std::max<Micros>(0, tat - now);
      const Micros owed_without = std::max<Micros>(0, bucket_without_refunded(limit, live) - now);
      if (live.empty()) RC_ASSERT(owed == 0);
      RC_ASSERT(std::abs(owed - owed_without) <= drift);
    }
  };

  const int steps = *rc::gen::inRange(1, 40);
  for (int i = 0; i < steps; ++i) {
    const int op = *rc::gen::weightedOneOf<int>(
        {{4, rc::gen::just(0)}, {live.empty() ? 0 : 4, rc::gen::just(1)}, {3, rc::gen::just(2)}, {1, rc::gen::just(3)}});
    if (op == 0) {  // a check's part on this slot consumes
      const std::int64_t cost = *rc::gen::weightedOneOf<std::int64_t>(
          {{4, rc::gen::inRange<std::int64_t>(1, std::min<std::int64_t>(limit.capacity, 3) + 1)},
           {1, rc::gen::inRange<std::int64_t>(1, limit.capacity + 1)}});
      const auto expected = algorithms::step(limit, model(), now, cost);
      RC_ASSERT(expected.has_value());
      const Observed o = run_observed("multi_at", {key}, testing::multi_args(std::span(&limit, 1),
                                                                             std::span(&cost, 1), now));
      RC_ASSERT(o.reply.size() == 11u);
      RC_ASSERT(testing::decision_at(o.reply, 5) == expected->decision);
      RC_ASSERT(o.reply[10] == now);
      if (expected->decision.allowed) {
        live.push_back({now, cost, expected->decision.reset_after});
        if (bucket) tat = expected->state.t;
      }
      check_key(o);
    } else if (op == 1) {  // another slot denied it: its refund, whichever is due
      const auto k = static_cast<std::size_t>(*rc::gen::inRange<std::size_t>(0, live.size()));
      const Held h = live[k];
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
      bool held = false;
      if (bucket) {
        const Micros gives = std::min({h.cost * limit.period, h.at + h.reset_after - now, tat - now});
        held = gives > 0;
        if (held) tat -= gives;
        drift += std::min(h.cost * limit.period, now - h.at);
      } else {
        held = windows_state(limit, {h}, now) != State{};
      }
      const Observed o = run_observed("refund", {key}, refund_args(limit, h.cost, h.reset_after, h.at, now));
      RC_ASSERT(o.reply.size() == 6u);
      RC_ASSERT((o.reply[0] == 1) == held);
      RC_ASSERT(testing::decision_at(o.reply, 1) == algorithms::step(limit, model(), now, 0)->decision);
      check_key(o);
    } else if (op == 2) {  // time passes
      now += *rc::gen::weightedOneOf<Micros>({{2, rc::gen::just<Micros>(0)},
                                              {4, rc::gen::inRange<Micros>(0, limit.horizon() / 4 + 2)},
                                              {1, rc::gen::inRange<Micros>(0, 2 * limit.horizon() + 2)}});
    } else {  // a peek
      const Observed o = run_observed(name, {key}, testing::single_args(limit, 0, now));
      RC_ASSERT(testing::decision_at(o.reply, 0) == algorithms::step(limit, model(), now, 0)->decision);
      check_key(o);
    }
  }
}

RC_GTEST_PROP(LuaRefund, TokenBucketRefundsInAnyOrderMatchTheModel, ()) {
  refunds_in_any_order(Algorithm::token_bucket);
}

RC_GTEST_PROP(LuaRefund, SlidingWindowLogRefundsInAnyOrderMatchTheModel, ()) {
  refunds_in_any_order(Algorithm::sliding_window_log);
}

RC_GTEST_PROP(LuaRefund, SlidingWindowCounterRefundsInAnyOrderMatchTheModel, ()) {
  refunds_in_any_order(Algorithm::sliding_window_counter);
}

RC_GTEST_PROP(LuaRefund, FixedWindowRefundsInAnyOrderMatchTheModel, ()) {
  refunds_in_any_order(Algorithm::fixed_window);
}

TEST(LuaRefund, MultiAtIsMultiFollowedByTheInstantItDecidedAt) {
  const Micros now = 1'700'000'000'000'000;
  const std::vector<Limit> limits{make_limit(Algorithm::token_bucket, 5, 1'000'000),
                                  make_limit(Algorithm::fixed_window, 1, 60'000'000)};
  const std::vector<std::int64_t> costs{2, 1};
  for (std::size_t n : {1u, 2u}) {
    const std::string a = fresh_key("multi-at"), b = fresh_key("multi-at");
    const std::vector<std::string> keys_a{a + ":tb", a + ":fw"}, keys_b{b + ":tb", b + ":fw"};
    const auto limits_n = std::span(limits).first(n);
    const auto costs_n = std::span(costs).first(n);
    const std::vector<std::string> ka(keys_a.begin(), keys_a.begin() + n), kb(keys_b.begin(), keys_b.begin() + n);
    const auto multi = runner().run_integers("multi", ka, testing::multi_args(limits_n, costs_n, now));
    auto at = runner().run_integers("multi_at", kb, testing::multi_args(limits_n, costs_n, now));
    ASSERT_EQ(at.size(), multi.size() + 1);
    EXPECT_EQ(at.back(), now);
    at.pop_back();
    EXPECT_EQ(at, multi);
  }
  // On the server's clock: its TIME.
  const std::string key = fresh_key("multi-at-time");
  const std::int64_t before = connection().server_time_us();
  const auto at = runner().run_integers("multi_at", {key}, testing::multi_args(std::span(limits).first(1),
                                                                                 std::span(costs).first(1),
                                                                                 std::nullopt));
  const std::int64_t after = connection().server_time_us();
  ASSERT_EQ(at.size(), 11u);
  EXPECT_GE(at.back(), before);
  EXPECT_LE(at.back(), after);
}

// The consumption of a check on the server's clock, refunded on the server's clock with the
// instant "multi_at" reported: every key is as before, lifetimes included.
TEST(LuaRefund, ServerClockRefundRestoresEveryAlgorithmsState) {
  // The windows are aligned on the server's clock (one hour here): a run that crossed the end
  // of one cannot compare states, whatever the refund did; it runs again on fresh keys (the
  // next run starts just after the boundary, so it cannot cross one).
  for (int attempt = 0;; ++attempt) {
    ASSERT_LT(attempt, 2) << "two runs in a row crossed the end of an hour-long window";
    const std::string tag = fresh_key("refund-time");
    const std::vector<std::string> keys{tag + ":tb", tag + ":log", tag + ":swc", tag + ":fw"};
    const std::vector<Limit> limits{make_limit(Algorithm::token_bucket, 10, 60'000'000),
                                    make_limit(Algorithm::sliding_window_log, 10, 3'600'000'000),
                                    make_limit(Algorithm::sliding_window_counter, 10, 3'600'000'000),
                                    make_limit(Algorithm::fixed_window, 10, 3'600'000'000)};
    // Some earlier use, then the state to come back to.
    const std::int64_t started = connection().server_time_us();
    ASSERT_TRUE(runner().check_all(keys, limits, std::vector<std::int64_t>{3, 3, 3, 3}, std::nullopt)[0].allowed);
    std::map<std::string, std::string> before;
    for (const auto& k : keys) before[k] = raw_state(k);
    const std::vector<std::int64_t> costs{2, 4, 2, 5};
    const auto consumed = runner().run_integers("multi_at", keys, testing::multi_args(limits, costs, std::nullopt));
    ASSERT_EQ(consumed.size(), 26u);
    ASSERT_EQ(consumed[0], 1);
    std::vector<Micros> reset_after;
    for (std::size_t i = 0; i < keys.size(); ++i) reset_after.push_back(consumed[5 * (i + 1) + 4]);
    const auto refund =
        runner().run_integers("refund", keys, testing::refund_args(limits, costs, reset_after, consumed.back(), std::nullopt));
    ASSERT_EQ(refund.size(), 24u);
    const Micros window = limits[3].period;
    if (started / window != connection().server_time_us() / window) continue;
    for (std::size_t i = 0; i < keys.size(); ++i) {
      EXPECT_EQ(refund[6 * i], 1) << keys[i];
      EXPECT_EQ(raw_state(keys[i]), before[keys[i]]) << keys[i];
      EXPECT_EQ(refund[6 * i + 3], 7) << keys[i] << ": remaining after the refund";
    }
    return;
  }
}

TEST(LuaRefund, RefundOfAPeekOrOfAnAbsentKeyChangesNothing) {
  const Micros now = 1'700'000'000'000'000;
  for (Algorithm a : kAlgorithms) {
    SCOPED_TRACE(std::string(to_string(a)));
    const Limit limit = make_limit(a, 5, 60'000'000);
    const std::string key = fresh_key("refund-peek");
    const Decision consumed = runner().check(key, limit, 2, now);
    ASSERT_TRUE(consumed.allowed);
    const std::string before = raw_state(key);
    // A peek consumed nothing: its refund gives nothing back.
    const Refunded peek = refund_one(key, limit, 0, 0, now, now);
    EXPECT_FALSE(peek.refunded);
    EXPECT_EQ(peek.peek.remaining, 3);
    EXPECT_EQ(raw_state(key), before);
    // A key that is gone (expired, evicted) stays absent: the refund never creates state.
    const std::string absent = fresh_key("refund-absent");
    const Refunded gone = refund_one(absent, limit, 2, consumed.reset_after, now, now);
    EXPECT_FALSE(gone.refunded);
    EXPECT_EQ(gone.peek.remaining, 5);
    EXPECT_EQ(connection().integer({"EXISTS", absent}), 0);
  }
}

// A key whose state no longer holds the consumption (it expired meanwhile) is left alone,
// even when other checks have written it again since.
TEST(LuaRefund, NothingIsGivenBackOnceTheConsumptionNoLongerCounts) {
  const Micros at = 1'700'000'000'000'000;
  const Micros period = 1'000'000;
  for (Algorithm a : kAlgorithms) {
    SCOPED_TRACE(std::string(to_string(a)));
    const Limit limit = make_limit(a, 4, period);
    const std::string key = fresh_key("refund-late");
    const Decision consumed = runner().check(key, limit, 2, at);
    ASSERT_TRUE(consumed.allowed);
    // Long after: the consumption has expired; another check consumed afresh.
    const Micros later = at + 3 * limit.horizon();
    ASSERT_TRUE(runner().check(key, limit, 3, later).allowed);
    const std::string before = raw_state(key);
    const Refunded r = refund_one(key, limit, 2, consumed.reset_after, at, later);
    EXPECT_FALSE(r.refunded);
    EXPECT_EQ(r.peek.remaining, 1);
    EXPECT_EQ(raw_state(key), before);
  }
}

// Windows: a consumption counted in the window that has just ended is not taken off the new
// window's count (fixed window), and is taken off the previous window's count (sliding
// window counter), where it still weighs.
TEST(LuaRefund, WindowsRefundTheWindowTheConsumptionWasCountedIn) {
  const Micros window = 60'000'000;
  const Micros at = 1'700'000'040'000'000 / window * window + window - 1'000;  // 1 ms before the end
  const Micros now = at + 2'000;                                               // 1 ms into the next
  {
    const Limit limit = make_limit(Algorithm::fixed_window, 10, window);
    const std::string key = fresh_key("refund-fw-roll");
    const Decision consumed = runner().check(key, limit, 4, at);
    ASSERT_TRUE(consumed.allowed);
    ASSERT_TRUE(runner().check(key, limit, 3, now).allowed);  // another client, next window
    const std::string before = raw_state(key);
    const Refunded r = refund_one(key, limit, 4, consumed.reset_after, at, now);
    EXPECT_FALSE(r.refunded);
    EXPECT_EQ(r.peek.remaining, 7);
    EXPECT_EQ(raw_state(key), before);
  }
  {
    const Limit limit = make_limit(Algorithm::sliding_window_counter, 10, window);
    const std::string key = fresh_key("refund-swc-roll");
    ASSERT_TRUE(runner().check(key, limit, 1, at).allowed);
    const Decision consumed = runner().check(key, limit, 4, at);  // the one to refund
    ASSERT_TRUE(consumed.allowed);
    ASSERT_TRUE(runner().check(key, limit, 2, now).allowed);  // another client, next window
    const Refunded r = refund_one(key, limit, 4, consumed.reset_after, at, now);
    EXPECT_TRUE(r.refunded);
    const std::string t = std::to_string(now / window * window);
    EXPECT_EQ(connection().command({"GET", key}).text, t + ":2:1");
    State expected;
    expected.t = now / window * window;
    expected.current = 2;
    expected.previous = 1;
    EXPECT_EQ(r.peek, algorithms::step(limit, expected, now, 0)->decision);
  }
}

TEST(LuaRefund, NeverGivesBackMoreThanTheStateHolds) {
  const Micros now = 1'700'000'000'000'000;
  for (Algorithm a : kAlgorithms) {
    SCOPED_TRACE(std::string(to_string(a)));
    const Limit limit = make_limit(a, 10, 60'000'000);
    const std::string key = fresh_key("refund-floor");
    const Decision consumed = runner().check(key, limit, 2, now);
    ASSERT_TRUE(consumed.allowed);
    // Told that 7 were consumed, it gives back the 2 there are: the state is empty again.
    const Refunded r = refund_one(key, limit, 7, consumed.reset_after, now, now);
    EXPECT_TRUE(r.refunded);
    EXPECT_EQ(r.peek.remaining, 10);
    EXPECT_EQ(connection().integer({"EXISTS", key}), 0);
  }
  // The log gives back entries stamped with the consumption's instant only.
  const Limit log = make_limit(Algorithm::sliding_window_log, 10, 60'000'000);
  const std::string key = fresh_key("refund-log");
  ASSERT_TRUE(runner().check(key, log, 3, now).allowed);
  const Decision consumed = runner().check(key, log, 2, now + 5);
  ASSERT_TRUE(consumed.allowed);
  const Refunded r = refund_one(key, log, 4, consumed.reset_after, now + 5, now + 5);
  EXPECT_TRUE(r.refunded);
  EXPECT_EQ(r.peek.remaining, 7);
  EXPECT_EQ(connection().integer({"ZCOUNT", key, std::to_string(now), std::to_string(now)}), 3);
  EXPECT_EQ(connection().integer({"ZCOUNT", key, std::to_string(now + 5), std::to_string(now + 5)}), 0);
}

// The log's newest entries leave: the key then expires with the newest entry that remains.
TEST(LuaRefund, SlidingLogKeyExpiresWithItsNewestRemainingEntry) {
  const Limit limit = make_limit(Algorithm::sliding_window_log, 10, 3'600'000'000);
  const std::string key = fresh_key("refund-log-ttl");
  const std::int64_t first = connection().server_time_us();
  ASSERT_TRUE(runner().check(key, limit, 2, std::nullopt).allowed);
  const long long first_expiry = connection().integer({"PEXPIRETIME", key});
  const auto consumed =
      runner().run_integers("multi_at", {key}, testing::multi_args(std::span(&limit, 1),
                                                                   std::vector<std::int64_t>{3}, std::nullopt));
  ASSERT_EQ(consumed.size(), 11u);
  ASSERT_GT(consumed.back(), first);
  const Refunded r = refund_one(key, limit, 3, consumed[9], consumed.back(), std::nullopt);
  EXPECT_TRUE(r.refunded);
  EXPECT_EQ(connection().integer({"ZCARD", key}), 2);
  EXPECT_EQ(connection().integer({"PEXPIRETIME", key}), first_expiry);
}

TEST(LuaRefund, InvalidArgumentsAreErrorsAndTouchNothing) {
  const std::string key = fresh_key("refund-invalid");
  auto error = [&](std::vector<std::string> keys, std::vector<std::string> args) {
    const RedisReply r = runner().run("refund", keys, args);
    EXPECT_TRUE(r.is_error());
    return r.text;
  };
  EXPECT_NE(error({key}, {"0", "0", "0", "5", "1000", "1"}).find("expected"), std::string::npos);
  EXPECT_NE(error({key}, {"-1", "0", "0", "5", "1000", "1", "0"}).find("at must be"), std::string::npos);
  EXPECT_NE(error({key}, {"0", "-2", "0", "5", "1000", "1", "0"}).find("now"), std::string::npos);
  EXPECT_NE(error({key}, {"0", "0", "9", "5", "1000", "1", "0"}).find("algorithm"), std::string::npos);
  EXPECT_NE(error({key}, {"0", "0", "0", "5", "1000", "6", "0"}).find("exceeds capacity"), std::string::npos);
  EXPECT_NE(error({key}, {"0", "0", "0", "5", "1000", "1", "-1"}).find("reset_after"), std::string::npos);
  EXPECT_NE(error({key, key}, {"0", "0", "0", "5", "1000", "1", "0", "0", "5", "1000", "1", "0"}).find("twice"),
            std::string::npos);
  EXPECT_EQ(connection().integer({"EXISTS", key}), 0);
}


// One entry of a "batch" call: keys (indices into a key set), their costs, and how many
// identical checks it stands for.
struct BatchEntry {
  std::vector<std::size_t> keys;
  std::vector<std::int64_t> costs;
  std::size_t repeats = 1;
};

// A decision as the batch script replies it, 4 integers: allowed, remaining, retry_after,
// reset_after; a check's reply: its keys' decisions, in order.
using KeyDecisions = std::vector<std::int64_t>;

// The arguments of a "batch" call of `entries` over `keys` at `now` (lua/batch.lua): the
// distinct (limit, cost) pairs, then per entry its limit number, or 0, n, repeats and n numbers.
std::vector<std::string> batch_args(const std::vector<Limit>& limits, const std::vector<BatchEntry>& entries,
                                    Micros now) {
  std::vector<std::pair<Limit, std::int64_t>> distinct;
  auto number = [&](const Limit& l, std::int64_t cost) {
    for (std::size_t i = 0; i < distinct.size(); ++i) {
      if (distinct[i].first == l && distinct[i].second == cost) return i + 1;
    }
    distinct.emplace_back(l, cost);
    return distinct.size();
  };
  std::vector<std::string> numbers;
  for (const auto& e : entries) {
    if (e.keys.size() == 1 && e.repeats == 1) {
      numbers.push_back(std::to_string(number(limits[e.keys[0]], e.costs[0])));
      continue;
    }
    numbers.insert(numbers.end(), {"0", std::to_string(e.keys.size()), std::to_string(e.repeats)});
    for (std::size_t i = 0; i < e.keys.size(); ++i) numbers.push_back(std::to_string(number(limits[e.keys[i]], e.costs[i])));
  }
  std::vector<std::string> args{std::to_string(now), std::to_string(distinct.size())};
  for (const auto& [l, cost] : distinct) {
    args.insert(args.end(), {std::to_string(static_cast<int>(l.algorithm)), std::to_string(l.capacity),
                             std::to_string(l.period), std::to_string(cost)});
  }
  args.insert(args.end(), numbers.begin(), numbers.end());
  return args;
}

// The "batch" call of `entries` over `keys` at `now`: per entry, the replies it returned.
std::vector<std::vector<KeyDecisions>> run_batch(const std::vector<std::string>& keys, const std::vector<Limit>& limits,
                                                 const std::vector<BatchEntry>& entries, Micros now) {
  std::vector<std::string> batch_keys;
  for (const auto& e : entries) {
    for (std::size_t k : e.keys) batch_keys.push_back(keys[k]);
  }
  const RedisReply r = runner().run("batch", batch_keys, batch_args(limits, entries, now));
  if (r.type != RedisReply::Type::array) throw std::runtime_error("batch: " + r.text);
  const auto flat = testing::integers(r);
  std::size_t at = 0;
  auto take = [&](std::size_t n) {
    if (at + n > flat.size()) throw std::runtime_error("batch: reply too short");
    KeyDecisions d(flat.begin() + static_cast<std::ptrdiff_t>(at), flat.begin() + static_cast<std::ptrdiff_t>(at + n));
    at += n;
    return d;
  };
  std::vector<std::vector<KeyDecisions>> out;
  for (const auto& e : entries) {
    out.emplace_back();
    const Limit& l = limits[e.keys[0]];
    if (e.keys.size() == 1 && e.repeats == 1 && l.algorithm == Algorithm::token_bucket) {
      // One integer: reset_after r when admitted, −1 − r when denied; the rest follows from
      // the limit (τ = capacity·interval).
      const std::int64_t packed = take(1).at(0);
      const std::int64_t tau = l.capacity * l.period;
      const std::int64_t r = packed >= 0 ? packed : -1 - packed;
      if (packed >= 0) {
        out.back().push_back({1, (tau - r) / l.period, 0, r});
      } else {
        out.back().push_back({0, std::max<std::int64_t>(0, tau - r) / l.period, r + e.costs[0] * l.period - tau, r});
      }
    } else if (e.keys.size() == 1 && e.repeats == 1) {
      out.back().push_back(take(4));
    } else if (e.keys.size() == 1 && l.algorithm == Algorithm::token_bucket) {
      // Closed form: {admitted, first decision, denial}; the k-th admitted one has remaining
      // lower by k·cost and reset_after longer by k·cost·interval than the first.
      const std::int64_t admitted = take(1).at(0);
      if (admitted > 0) {
        const KeyDecisions first = take(4);
        for (std::int64_t k = 0; k < admitted; ++k) {
          KeyDecisions d = first;
          d[1] -= k * e.costs[0];
          d[3] += k * e.costs[0] * l.period;
          out.back().push_back(d);
        }
      }
      if (admitted < static_cast<std::int64_t>(e.repeats)) out.back().push_back(take(4));
    } else {
      const std::int64_t answered = take(1).at(0);
      for (std::int64_t c = 0; c < answered; ++c) out.back().push_back(take(4 * e.keys.size()));
    }
  }
  if (at != flat.size()) throw std::runtime_error("batch: reply too long");
  return out;
}

// The same checks one script call each (single or multi), as RedisStore sends them alone,
// their keys' decisions as the batch script gives them (allowed, remaining, retry_after,
// reset_after per key).
KeyDecisions run_alone(const std::vector<std::string>& keys, const std::vector<Limit>& limits, const BatchEntry& e,
                       Micros now) {
  auto four = [](const std::vector<std::int64_t>& r, std::size_t at) {
    return KeyDecisions{r.at(at), r.at(at + 2), r.at(at + 3), r.at(at + 4)};
  };
  if (e.keys.size() == 1) {
    return four(runner().run_integers(algorithms::to_string(limits[e.keys[0]].algorithm), {keys[e.keys[0]]},
                                      testing::single_args(limits[e.keys[0]], e.costs[0], now)),
                0);
  }
  std::vector<std::string> ks;
  std::vector<Limit> ls;
  for (std::size_t k : e.keys) {
    ks.push_back(keys[k]);
    ls.push_back(limits[k]);
  }
  const auto r = runner().run_integers("multi", ks, testing::multi_args(ls, e.costs, now));
  KeyDecisions out;
  for (std::size_t k = 0; k < e.keys.size(); ++k) {
    const auto d = four(r, 5 * (k + 1));
    out.insert(out.end(), d.begin(), d.end());
  }
  return out;
}

// Whether the check a batch reply stands for was admitted: all its keys.
bool admitted(const KeyDecisions& d) {
  for (std::size_t i = 0; i < d.size(); i += 4) {
    if (d[i] != 1) return false;
  }
  return true;
}

TEST(LuaScripts, BatchDecidesAndStoresAsSeparateCallsInOrder) {
  const Micros now = 1'700'000'000'000'000;
  for (Algorithm a : kAlgorithms) {
    SCOPED_TRACE(std::string(algorithms::to_string(a)));
    const std::vector<Limit> limits{make_limit(a, 3, 10'000'000), make_limit(a, 5, 20'000'000),
                                    make_limit(Algorithm::token_bucket, 4, 1'000'000)};
    // The same key in several entries, a multi-key entry, repeats past the limit, a peek.
    const std::vector<BatchEntry> entries{{{0}, {1}, 2},       {{0, 1}, {1, 2}, 2}, {{1}, {1}, 1},
                                          {{2, 0}, {1, 1}, 1}, {{0}, {0}, 1},       {{1}, {2}, 3}};
    std::vector<std::string> batched, alone;
    for (std::size_t i = 0; i < limits.size(); ++i) {
      const std::string tag = fresh_key("batch");
      batched.push_back(tag + ":" + std::to_string(i));
      alone.push_back(fresh_key("alone") + ":" + std::to_string(i));
    }
    // Some earlier state, written the usual way, in both key sets.
    for (const auto* keys : {&batched, &alone}) run_alone(*keys, limits, {{0, 1}, {1, 1}, 1}, now - 1'000'000);

    const auto replies = run_batch(batched, limits, entries, now);
    ASSERT_EQ(replies.size(), entries.size());
    for (std::size_t e = 0; e < entries.size(); ++e) {
      // Replies up to and including the first denial; the repeats after it are denied alike.
      ASSERT_GE(replies[e].size(), 1u);
      ASSERT_LE(replies[e].size(), entries[e].repeats);
      for (std::size_t r = 0; r < entries[e].repeats; ++r) {
        const auto expected = run_alone(alone, limits, entries[e], now);
        const auto& got = replies[e][std::min(r, replies[e].size() - 1)];
        EXPECT_EQ(got, expected) << "entry " << e << " repeat " << r;
        if (r + 1 < replies[e].size()) {
          EXPECT_TRUE(admitted(got)) << "a denial ends the entry's replies";
        }
      }
    }
    // Same stored state, same absolute expiry (PEXPIRETIME: both relative to the same `now`
    // would give the same milliseconds; written a few ms apart on the wall clock, allow 1 s).
    for (std::size_t i = 0; i < limits.size(); ++i) {
      const std::string type = connection().command({"TYPE", batched[i]}).text;
      EXPECT_EQ(type, connection().command({"TYPE", alone[i]}).text) << i;
      if (type == "string") {
        EXPECT_EQ(connection().command({"GET", batched[i]}).text, connection().command({"GET", alone[i]}).text) << i;
      } else if (type == "zset") {
        EXPECT_EQ(connection().integer({"ZCARD", batched[i]}), connection().integer({"ZCARD", alone[i]})) << i;
      }
      const long long ttl_batched = connection().integer({"PTTL", batched[i]});
      const long long ttl_alone = connection().integer({"PTTL", alone[i]});
      EXPECT_EQ(ttl_batched < 0, ttl_alone < 0) << i;
      EXPECT_LE(std::llabs(ttl_batched - ttl_alone), 1000) << i;
    }
  }
}

// A bucket's key holding what is not a count of µs (digits) reads as a full bucket, in the
// single-key script and in a batch; a count is read (the comparison says something).
TEST(LuaScripts, ABucketHoldingWhatIsNotACountOfMicrosecondsReadsAsFull) {
  const Micros now = 1'700'000'000'000'000;
  const Limit l = make_limit(Algorithm::token_bucket, 5, 1'000'000);
  const std::string owing_three = std::to_string(now + 3'000'000);
  for (const std::string& value : {std::string("garbage"), std::string("-5"), std::string("1.5"), std::string("nan"),
                                  std::string("inf"), std::string("-inf"), std::string("1e400"),
                                  std::string("12abc"), std::string(""),
                                  owing_three + ".5", owing_three}) {
    SCOPED_TRACE("value '" + value + "'");
    const std::int64_t remaining = value == owing_three ? 1 : 4;
    const std::string single = fresh_key("not-a-count");
    connection().command({"SET", single, value});
    const auto r = runner().run_integers("token_bucket", {single}, testing::single_args(l, 1, now));
    ASSERT_EQ(r.size(), 5u);
    EXPECT_EQ(r[0], 1);
    EXPECT_EQ(r[2], remaining);
    const std::string batched = fresh_key("not-a-count");
    connection().command({"SET", batched, value});
    const auto replies = run_batch({batched}, {l}, {{{0}, {1}, 1}}, now);
    ASSERT_EQ(replies.size(), 1u);
    ASSERT_EQ(replies[0].size(), 1u);
    EXPECT_EQ(replies[0][0], (KeyDecisions{1, remaining, 0, (5 - remaining) * 1'000'000}));
    // Two identical checks: the closed form, which reads the key another way.
    const std::string repeated = fresh_key("not-a-count");
    connection().command({"SET", repeated, value});
    const auto twice = run_batch({repeated}, {l}, {{{0}, {1}, 2}}, now);
    ASSERT_EQ(twice.size(), 1u);
    ASSERT_EQ(twice[0].size(), 2u);
    EXPECT_EQ(twice[0][1], (KeyDecisions{1, remaining - 1, 0, (6 - remaining) * 1'000'000}));
  }
}

TEST(LuaScripts, BatchRepeatsStopAtTheFirstDenial) {
  const std::string key = fresh_key("batch-repeats");
  const Limit limit = make_limit(Algorithm::fixed_window, 3, 60'000'000);
  const auto replies = run_batch({key}, {limit}, {{{0}, {1}, 10}}, 1'700'000'000'000'000);
  ASSERT_EQ(replies.size(), 1u);
  ASSERT_EQ(replies[0].size(), 4u);  // three admitted, then the first denial
  for (std::size_t r = 0; r < 3; ++r) {
    EXPECT_EQ(replies[0][r][0], 1);
    EXPECT_EQ(replies[0][r][1], static_cast<std::int64_t>(2 - r));  // remaining
  }
  EXPECT_EQ(replies[0][3][0], 0);
  EXPECT_GT(replies[0][3][2], 0);  // retry_after
}

TEST(LuaScripts, BatchArgumentsAreCheckedBeforeAnythingIsWritten) {
  const std::string key = fresh_key("batch-invalid");
  // A valid first entry, an invalid second one (cost above capacity): an error, nothing stored.
  const RedisReply r = runner().run("batch", {key, key},
                                    {"1700000000000000", "2", "0", "5", "1000000", "1", "0", "5", "1000000", "9", "1",
                                     "2"});
  EXPECT_TRUE(r.is_error());
  EXPECT_NE(r.text.find("exceeds capacity"), std::string::npos) << r.text;
  EXPECT_EQ(connection().integer({"EXISTS", key}), 0);
  // Keys and entries that do not match, a limit number out of range, a key twice in a check.
  for (const auto& [keys, args] : std::vector<std::pair<std::vector<std::string>, std::vector<std::string>>>{
           {{key}, {"1700000000000000", "1", "0", "5", "1000000", "1", "1", "1"}},
           {{key, key}, {"1700000000000000", "1", "0", "5", "1000000", "1", "1"}},
           {{key}, {"1700000000000000", "1", "0", "5", "1000000", "1", "2"}},
           {{key}, {"1700000000000000", "1", "0", "5", "1000000", "1", "x"}},
           {{key}, {"1700000000000000", "1", "0", "5", "1000000", "1"}},
           {{key}, {"1700000000000000", "2", "0", "5", "1000000", "1", "1"}},
           {{key, key}, {"1700000000000000", "1", "0", "5", "1000000", "1", "0", "2", "1", "1", "1"}},
           {{key}, {"1700000000000000", "1", "0", "5", "1000000", "1", "0", "2", "1", "1", "1"}}}) {
    const RedisReply wrong = runner().run("batch", keys, args);
    EXPECT_TRUE(wrong.is_error()) << fmt::format("{}", fmt::join(args, " "));
  }
  EXPECT_EQ(connection().integer({"EXISTS", key}), 0);
}


TEST(LuaScripts, BatchAnswersRepeatedTokenBucketChecksInClosedForm) {
  const std::string key = fresh_key("batch-closed-form");
  const Micros now = 1'700'000'000'000'000;
  // Seven checks of cost 2 on a full bucket of 5: two admitted, then denials.
  const RedisReply r =
      runner().run("batch", {key}, {std::to_string(now), "1", "0", "5", "1000000", "2", "0", "1", "7", "1"});
  ASSERT_EQ(r.type, RedisReply::Type::array) << r.text;
  const auto flat = testing::integers(r);
  EXPECT_EQ(flat, (std::vector<std::int64_t>{2, 1, 3, 0, 2'000'000, 0, 1, 1'000'000, 4'000'000}));
  EXPECT_EQ(connection().command({"GET", key}).text, std::to_string(now + 4'000'000));
  // Peeks on the now partly used bucket: all admitted, nothing stored.
  const RedisReply peeks =
      runner().run("batch", {key}, {std::to_string(now), "1", "0", "5", "1000000", "0", "0", "1", "3", "1"});
  EXPECT_EQ(testing::integers(peeks), (std::vector<std::int64_t>{3, 1, 1, 0, 4'000'000}));
  EXPECT_EQ(connection().command({"GET", key}).text, std::to_string(now + 4'000'000));
}

}  // namespace
}  // namespace ratekeeper
