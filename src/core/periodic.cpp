#include "ratekeeper/core/periodic.hpp"

#include <mutex>

#include "ratekeeper/core/event_loop.hpp"

namespace ratekeeper {

struct Periodic::State {
  // Held while a step runs: stop() waits for it. Recursive: a step may call its done (or
  // stop()) before it returns.
  mutable std::recursive_mutex mu;
  bool stopped = false;
  std::uint64_t runs = 0;
  EventLoop* loop;
  std::function<Micros()> every;
  Step step;

  static void schedule(const std::shared_ptr<State>& s, Micros after) {
    s->loop->post(0, [s] {
      const std::lock_guard lock(s->mu);
      if (s->stopped) return;
      ++s->runs;
      s->step([s] {
        const std::lock_guard again(s->mu);
        if (!s->stopped) schedule(s, s->every());
      });
    }, after);
  }
};

Periodic::Periodic(EventLoop& loop, Micros first, std::function<Micros()> every, Step step)
    : state_(std::make_shared<State>()) {
  state_->loop = &loop;
  state_->every = std::move(every);
  state_->step = std::move(step);
  State::schedule(state_, first);
}

Periodic::Periodic(EventLoop& loop, Micros every, Step step)
    : Periodic(loop, every, [every] { return every; }, std::move(step)) {}

Periodic::~Periodic() { stop(); }

void Periodic::stop() {
  const std::lock_guard lock(state_->mu);
  state_->stopped = true;
}

std::uint64_t Periodic::runs() const {
  const std::lock_guard lock(state_->mu);
  return state_->runs;
}

}  // namespace ratekeeper
