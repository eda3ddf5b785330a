#include "ratekeeper/core/periodic.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <mutex>
#include <thread>

#include "ratekeeper/core/event_loop.hpp"

namespace ratekeeper {
namespace {

// Waits (bounded) until `ready` holds.
template <class F>
bool eventually(F ready) {
  for (int i = 0; i < 1000 && !ready(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  return ready();
}

TEST(Periodic, RunsAgainEachTimeAStepIsDoneUntilStoppedFromInside) {
  EventLoop loop(1);
  std::atomic<int> runs{0};
  Periodic* self = nullptr;
  std::promise<void> ready;
  auto go = ready.get_future().share();
  Periodic periodic(loop, 1'000, [&](Periodic::Done done) {
    go.wait();
    if (++runs == 3) self->stop();
    done();
  });
  self = &periodic;
  ready.set_value();
  ASSERT_TRUE(eventually([&] { return runs.load() == 3; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(30));  // 30 periods: no fourth run
  loop.barrier();
  EXPECT_EQ(runs.load(), 3);
  EXPECT_EQ(periodic.runs(), 3u);
}

TEST(Periodic, AStepThatIsNotDoneIsNotRepeatedAndALateDoneAfterStopIsIgnored) {
  auto owned = std::make_unique<EventLoop>(1);
  EventLoop& loop = *owned;
  std::atomic<int> runs{0};
  std::mutex mu;
  Periodic::Done held;
  Periodic periodic(loop, 0, [] { return Micros{1'000}; }, [&](Periodic::Done done) {
    ++runs;
    const std::lock_guard lock(mu);
    held = std::move(done);  // answered later, from elsewhere
  });
  auto take = [&](Periodic::Done& from) {
    const std::lock_guard lock(mu);
    Periodic::Done done = from;
    return done;
  };
  ASSERT_TRUE(eventually([&] { return runs.load() == 1; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(runs.load(), 1);  // waits for its done
  take(held)();  // called without `mu`: the step takes it, under the Periodic's lock
  ASSERT_TRUE(eventually([&] { return runs.load() == 2; }));
  periodic.stop();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  loop.barrier();
  owned.reset();  // the loop goes (as a module's does at close): a late done must not touch it
  take(held)();
  EXPECT_EQ(runs.load(), 2);
}

TEST(Periodic, StopReturnsOnlyAfterTheRunningStep) {
  EventLoop loop(1);
  std::promise<void> started;
  std::atomic<bool> finished{false};
  Periodic periodic(loop, 0, [] { return Micros{1'000'000}; }, [&](Periodic::Done) {
    started.set_value();
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    finished = true;
  });
  started.get_future().wait();
  periodic.stop();
  EXPECT_TRUE(finished.load());  // what the step used may go now
}

}  // namespace
}  // namespace ratekeeper
