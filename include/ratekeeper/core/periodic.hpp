#pragma once
// A task repeated on an event loop: `step` runs on the loop's first context `first` µs after
// start, and again `every()` µs after each run called its `done` (a step that never calls it
// is not repeated). Used for what an instance does in the background on a clock: reading the
// shared overrides, renewing a long request's concurrency slots.
//
// stop() (from any thread, also from inside a step) returns once no step is running and none
// will start, so what a step refers to may be destroyed right after it. A step's asynchronous
// work may still call `done` later: it is then ignored. The loop must outlive the Periodic.
// A step runs under the Periodic's lock and `done` takes it: call `done` without holding a
// lock that a step takes.

#include <functional>
#include <memory>

#include "ratekeeper/core/time.hpp"

namespace ratekeeper {

class EventLoop;

class Periodic {
 public:
  using Done = std::function<void()>;
  using Step = std::function<void(Done done)>;

  Periodic(EventLoop& loop, Micros first, std::function<Micros()> every, Step step);
  Periodic(EventLoop& loop, Micros every, Step step);  // first after `every`, then every `every`
  ~Periodic();  // stop()
  Periodic(const Periodic&) = delete;
  Periodic& operator=(const Periodic&) = delete;

  void stop();
  // The steps started so far.
  std::uint64_t runs() const;

 private:
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace ratekeeper
