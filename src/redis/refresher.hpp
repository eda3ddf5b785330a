#pragma once
// A background refresh on an event loop (the Cluster's slot map, the Sentinel's master): one
// run at a time; requests made while one runs coalesce into the next, which starts at least
// `gap` after the previous one ended; and a run every `interval` when nothing asked for one.
// A run is asynchronous: `run(done)` starts it and `done(error)` ends it ("" on success), on
// any thread; an exception thrown by `run` ends that run with an error.
//
// Thread-safe. Timers hold the refresher weakly: once stop() returned, no run starts and the
// end of a run in progress is ignored; the refresher may then be destroyed (also by a timer
// of its own that was running meanwhile).

#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "ratekeeper/core/event_loop.hpp"
#include "ratekeeper/core/time.hpp"

namespace ratekeeper::redis::detail {

class Refresher : public std::enable_shared_from_this<Refresher> {
 public:
  using Done = std::function<void(std::string error)>;
  using Run = std::function<void(Done done)>;

  // The first run starts on the loop at once. `loop` must outlive the refresher's timers (as every
  // handler posted to it).
  static std::shared_ptr<Refresher> start(EventLoop& loop, Micros interval, Micros gap,
                                          std::string what, Run run);

  Refresher(EventLoop& loop, Micros interval, Micros gap, std::string what, Run run);

  void request();  // a run now, or next after the one in progress (coalesced)
  void stop();
  // "" when the last run succeeded; why it failed; `none_yet` before the first one ended.
  std::string last_error(std::string_view none_yet) const;

 private:
  enum class State : std::uint8_t { idle, running, resting };

  void launch();
  void finished(std::string error);
  void rested();
  void tick();

  EventLoop& loop_;
  const Micros interval_;
  const Micros gap_;
  const std::string what_;  // for the log of a contained exception
  const Run run_;
  mutable std::mutex mu_;
  State state_ = State::idle;  // under mu_
  bool wanted_ = false;        // under mu_
  bool stopped_ = false;       // under mu_
  bool ended_once_ = false;    // under mu_
  std::string last_error_;     // under mu_
};

}  // namespace ratekeeper::redis::detail
