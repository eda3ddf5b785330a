#include "refresher.hpp"

#include "ratekeeper/core/contained.hpp"

namespace ratekeeper::redis::detail {

std::shared_ptr<Refresher> Refresher::start(EventLoop& loop, Micros interval, Micros gap,
                                            std::string what, Run run) {
  auto r = std::make_shared<Refresher>(loop, interval, gap, std::move(what), std::move(run));
  r->loop_.post(0, [weak = r->weak_from_this()] {
    if (auto self = weak.lock()) self->request();
  });
  r->loop_.post(
      0,
      [weak = r->weak_from_this()] {
        if (auto self = weak.lock()) self->tick();
      },
      std::max<Micros>(1, r->interval_));
  return r;
}

Refresher::Refresher(EventLoop& loop, Micros interval, Micros gap, std::string what, Run run)
    : loop_(loop), interval_(interval), gap_(gap), what_(std::move(what)), run_(std::move(run)) {}

void Refresher::request() {
  {
    std::lock_guard lock(mu_);
    if (stopped_) return;
    if (state_ != State::idle) {
      wanted_ = true;
      return;
    }
    state_ = State::running;
  }
  launch();
}

void Refresher::stop() {
  std::lock_guard lock(mu_);
  stopped_ = true;
}

std::string Refresher::last_error(std::string_view none_yet) const {
  std::lock_guard lock(mu_);
  return ended_once_ ? last_error_ : std::string(none_yet);
}

void Refresher::launch() {
  // What a run parses comes from outside: whatever it makes throw ends the run, not the
  // process (nor the refreshes to come).
  if (!contain(what_, [&] {
        run_([weak = weak_from_this()](std::string error) {
          if (auto self = weak.lock()) self->finished(std::move(error));
        });
      })) {
    finished(what_ + " failed with an exception");
  }
}

void Refresher::finished(std::string error) {
  std::lock_guard lock(mu_);
  if (stopped_ || state_ != State::running) return;
  last_error_ = std::move(error);
  ended_once_ = true;
  state_ = State::resting;
  loop_.post(
      0,
      [weak = weak_from_this()] {
        if (auto self = weak.lock()) self->rested();
      },
      std::max<Micros>(1, gap_));
}

void Refresher::rested() {
  {
    std::lock_guard lock(mu_);
    if (stopped_) return;
    if (!wanted_) {
      state_ = State::idle;
      return;
    }
    wanted_ = false;
    state_ = State::running;
  }
  launch();
}

void Refresher::tick() {
  {
    std::lock_guard lock(mu_);
    if (stopped_) return;
  }
  request();
  loop_.post(
      0,
      [weak = weak_from_this()] {
        if (auto self = weak.lock()) self->tick();
      },
      std::max<Micros>(1, interval_));
}

}  // namespace ratekeeper::redis::detail
