// The background refresh of redis::Cluster's slot map and redis::Sentinel's master
// (src/redis/refresher.hpp): one run at a time, requests coalesced, a gap between runs, a
// periodic run, exceptions contained, nothing after stop().

#include "redis/refresher.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "ratekeeper/core/event_loop.hpp"

namespace ratekeeper::redis::detail {
namespace {

using namespace std::chrono_literals;

// Runs that the test ends by hand (or at once, with `immediate`).
struct Runs {
  std::mutex mu;
  std::condition_variable cv;
  int started = 0;
  std::vector<Refresher::Done> pending;
  std::vector<std::chrono::steady_clock::time_point> started_at;
  bool immediate = false;
  bool throw_next = false;

  Refresher::Run run() {
    return [this](Refresher::Done done) {
      bool now = false;
      {
        std::lock_guard lock(mu);
        ++started;
        started_at.push_back(std::chrono::steady_clock::now());
        if (std::exchange(throw_next, false)) {
          cv.notify_all();
          throw std::runtime_error("malformed reply");
        }
        now = immediate;
        if (!now) pending.push_back(std::move(done));
        // Under the lock: a waiter that sees the count may end the test and destroy `cv`
        // as soon as the lock is free.
        cv.notify_all();
      }
      if (now) done("");
    };
  }
  bool wait_started(int n) {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, 10s, [&] { return started >= n; });
  }
  int count() {
    std::lock_guard lock(mu);
    return started;
  }
  void finish(std::string error = "") {
    Refresher::Done done;
    {
      std::lock_guard lock(mu);
      ASSERT_FALSE(pending.empty());
      done = std::move(pending.front());
      pending.erase(pending.begin());
    }
    done(std::move(error));
  }
};

constexpr Micros kHour = 3600 * kMicrosPerSecond;

TEST(Refresher, RequestsDuringARunCoalesceIntoOneNextRun) {
  EventLoop loop(1);
  Runs runs;
  auto r = Refresher::start(loop, kHour, 1 * kMicrosPerMilli, "a test refresh", runs.run());
  ASSERT_TRUE(runs.wait_started(1));
  r->request();
  r->request();
  r->request();
  loop.barrier();
  EXPECT_EQ(runs.count(), 1);  // one run at a time
  runs.finish();
  ASSERT_TRUE(runs.wait_started(2));  // one more for the three requests
  runs.finish();
  // An observation window, not a wait: twenty gaps in which no run may start (nothing else
  // asked, the periodic run is an hour away).
  std::this_thread::sleep_for(20ms);
  loop.barrier();
  EXPECT_EQ(runs.count(), 2);
  EXPECT_EQ(r->last_error("none"), "");
  r->stop();
}

TEST(Refresher, TheNextRunWaitsTheGapAfterThePreviousEnded) {
  EventLoop loop(1);
  Runs runs;
  auto r = Refresher::start(loop, kHour, 200 * kMicrosPerMilli, "a test refresh", runs.run());
  ASSERT_TRUE(runs.wait_started(1));
  EXPECT_EQ(r->last_error("none yet"), "none yet");
  r->request();
  const auto ended = std::chrono::steady_clock::now();
  runs.finish("node down");
  EXPECT_EQ(r->last_error("none yet"), "node down");
  ASSERT_TRUE(runs.wait_started(2));
  std::lock_guard lock(runs.mu);
  EXPECT_GE(runs.started_at[1] - ended, 200ms);
  r->stop();
}

TEST(Refresher, RunsPeriodicallyWhenNothingAsks) {
  EventLoop loop(1);
  Runs runs;
  runs.immediate = true;
  auto r = Refresher::start(loop, 10 * kMicrosPerMilli, 1 * kMicrosPerMilli, "a test refresh",
                            runs.run());
  EXPECT_TRUE(runs.wait_started(3));
  r->stop();
}

TEST(Refresher, ARunThatThrowsEndsWithAnErrorAndTheNextOneRuns) {
  EventLoop loop(1);
  Runs runs;
  runs.throw_next = true;
  auto r = Refresher::start(loop, kHour, 1 * kMicrosPerMilli, "a test refresh", runs.run());
  ASSERT_TRUE(runs.wait_started(1));
  loop.barrier();
  EXPECT_EQ(r->last_error(""), "a test refresh failed with an exception");
  r->request();  // within the gap or after it: the next run starts when the gap has passed
  ASSERT_TRUE(runs.wait_started(2));
  runs.finish();
  EXPECT_EQ(r->last_error(""), "");
  r->stop();
}

TEST(Refresher, NothingRunsAfterStopAndTheEndOfARunInProgressIsIgnored) {
  EventLoop loop(1);
  Runs runs;
  auto r = Refresher::start(loop, 5 * kMicrosPerMilli, 1 * kMicrosPerMilli, "a test refresh",
                            runs.run());
  ASSERT_TRUE(runs.wait_started(1));
  r->stop();
  runs.finish("late");
  EXPECT_EQ(r->last_error("none"), "none");
  r->request();
  // An observation window, not a wait: several periods in which no run may start.
  std::this_thread::sleep_for(30ms);
  loop.barrier();
  EXPECT_EQ(runs.count(), 1);
  r.reset();
  // Its timers may still fire in this window: they must find it gone (ASan checks).
  std::this_thread::sleep_for(10ms);
  loop.barrier();
}

}  // namespace
}  // namespace ratekeeper::redis::detail
