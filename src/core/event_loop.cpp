#include "ratekeeper/core/event_loop.hpp"

#include "ratekeeper/core/contained.hpp"

#include <algorithm>
#include <atomic>
#include <future>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <thread>
#include <vector>

namespace ratekeeper {
namespace asio = boost::asio;

namespace {
thread_local const void* current_loop = nullptr;
thread_local std::size_t current_context = EventLoop::kNoContext;
}

struct EventLoop::Impl {
  struct Worker {
    asio::io_context context{1};
    asio::executor_work_guard<asio::io_context::executor_type> guard{context.get_executor()};
    std::thread thread;
  };
  std::vector<std::unique_ptr<Worker>> workers;
  std::atomic<std::size_t> next{0};
};

EventLoop::EventLoop(int threads) : impl_(std::make_unique<Impl>()) {
  const int n = std::max(1, threads);
  for (int i = 0; i < n; ++i) impl_->workers.push_back(std::make_unique<Impl::Worker>());
  for (std::size_t i = 0; i < impl_->workers.size(); ++i) {
    auto* ctx = &impl_->workers[i]->context;
    impl_->workers[i]->thread = std::thread([this, ctx, i] {
      current_loop = this;
      current_context = i;
      // A handler that throws ends run(), not the thread: the exception is noted and the
      // context runs on (no restart() needed after a handler exception).
      for (;;) {
        try {
          ctx->run();
          return;
        } catch (...) {
          note_contained_exception("an event-loop handler");
        }
      }
    });
  }
}

EventLoop::~EventLoop() {
  for (auto& w : impl_->workers) {
    w->guard.reset();
    w->context.stop();
  }
  for (auto& w : impl_->workers) {
    if (w->thread.joinable()) w->thread.join();
  }
}

std::size_t EventLoop::size() const noexcept { return impl_->workers.size(); }

asio::io_context& EventLoop::next() noexcept {
  return context(impl_->next.fetch_add(1, std::memory_order_relaxed));
}

asio::io_context& EventLoop::context(std::size_t index) noexcept {
  return impl_->workers[index % impl_->workers.size()]->context;
}

void EventLoop::post(std::size_t index, std::function<void()> fn, Micros delay) {
  auto& ctx = context(index);
  if (delay <= 0) {
    asio::post(ctx, std::move(fn));
    return;
  }
  auto timer = std::make_shared<asio::steady_timer>(ctx, std::chrono::microseconds(delay));
  timer->async_wait([timer, fn = std::move(fn)](const boost::system::error_code& ec) {
    if (!ec) fn();
  });
}

void EventLoop::barrier() {
  for (std::size_t i = 0; i < size(); ++i) {
    std::promise<void> passed;
    auto future = passed.get_future();
    post(i, [&passed] { passed.set_value(); });
    future.wait();
  }
}

bool EventLoop::on_loop_thread() const noexcept { return current_loop == this; }

std::size_t EventLoop::current_index() const noexcept { return current_loop == this ? current_context : kNoContext; }

}  // namespace ratekeeper
