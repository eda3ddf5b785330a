#pragma once
// A command routed to the server that should run it and retried until it runs or its
// deadline passes: what redis::Cluster and redis::Sentinel share (docs/design/architecture.md,
// "The Redis clients"). Every command completes exactly once: with its answer, at its
// deadline (with the error of its last attempt), or with unavailable when the router closes.
//
// Client is the routing client (compile-time hooks, no virtual calls):
//   using Target = ...;    // where one attempt goes (copyable)
//   using Request = ...;   // derives from RoutedRequest, plus the client's routing state
//   Result<Target> route(Request&);              // error: nothing to send to now (retried)
//   void transmit(Request&, const Target&, Micros left, ReplyCallback);
//   Disposition on_error_reply(Request&, const Target&, const Reply&);
//   void reroute();        // the topology may have changed: refresh it (coalesced)
//
// Thread-safe. Callbacks run on the loop's threads, or on the caller's stack when a command
// completes before anything was sent. The client closes the router, then its connections,
// before either is destroyed; closed on a loop thread, no other thread may be sending.

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "ratekeeper/core/clock.hpp"
#include "ratekeeper/core/error.hpp"
#include "ratekeeper/core/event_loop.hpp"
#include "redis/connection.hpp"

namespace ratekeeper::redis::detail {

struct RetryOptions {
  Micros retry_min = 1 * kMicrosPerMilli;
  Micros retry_max = 50 * kMicrosPerMilli;
};

// The wait before a command's retry when it has been retried `retries` times already:
// retry_min · 2^retries, at most retry_max, at most what is left before `deadline`; nullopt
// when `now` has reached the deadline (no retry: the command fails). retry_min <= 0 counts
// as 1 µs, retry_max below retry_min as retry_min. Pure.
std::optional<Micros> retry_delay(const RetryOptions& options, int retries, Micros now,
                                  Micros deadline) noexcept;

// What a client makes of an error reply it recognises.
struct Disposition {
  enum class Kind : std::uint8_t { answer, retry, resend };
  Kind kind = Kind::answer;
  // answer: the caller gets this instead of the reply (when set); retry: why the command did
  // not run, the caller's error if the deadline passes before it does.
  std::optional<Error> error;

  static Disposition answer() { return {}; }
  static Disposition answer_with(Error e) { return {Kind::answer, std::move(e)}; }
  static Disposition retry(Error why) { return {Kind::retry, std::move(why)}; }
  static Disposition resend() { return {Kind::resend, std::nullopt}; }
};

// The state of one command that every client keeps.
struct RoutedRequest {
  std::span<const std::string_view> argv;  // the caller keeps it valid until done runs
  ReplyCallback done;
  Micros deadline = 0;  // on the router's clock
  int retries = 0;
  std::size_t lane = 0;  // the loop context that retries run on
  Error last_error{ErrorCode::timeout, "deadline passed"};
  std::optional<Result<Reply>> sync_result;  // a reply given on the sender's stack
};

// Marks the command being handed to a connection on this thread, to tell a callback run
// on the sender's stack (not sent) from a reply.
inline thread_local const void* tl_sending = nullptr;

template <class Client>
class Router {
 public:
  using Request = typename Client::Request;
  using Target = typename Client::Target;
  using RequestPtr = std::shared_ptr<Request>;

  Router(Client& client, EventLoop& loop, const Clock& clock, RetryOptions options,
         std::string closed_message)
      : client_(client),
        loop_(loop),
        clock_(clock),
        options_(options),
        closed_message_(std::move(closed_message)),
        shared_(std::make_shared<Shared>()) {}

  // Commands waiting for a retry complete with unavailable now.
  ~Router() { close(); }
  Router(const Router&) = delete;
  Router& operator=(const Router&) = delete;

  const Clock& clock() const noexcept { return clock_; }

  // Starts a command: `timeout` covers every attempt.
  void start(RequestPtr req, Micros timeout) {
    req->deadline = clock_.steady() + timeout;
    send(req);
  }

  // One attempt now.
  void send(const RequestPtr& req) {
    if (closed()) {
      finish(req, make_error(ErrorCode::unavailable, closed_message_));
      return;
    }
    const Micros now = clock_.steady();
    if (now >= req->deadline) {
      finish(req, std::unexpected(req->last_error));
      return;
    }
    auto target = client_.route(*req);
    if (!target) {
      retry_later(req, std::move(target.error()));
      return;
    }
    tl_sending = req.get();
    client_.transmit(
        *req, *target, req->deadline - now, [this, req, t = *target](Result<Reply> reply) {
          if (tl_sending == req.get()) {
            req->sync_result = std::move(reply);  // failed before being sent: handled below
            return;
          }
          on_reply(req, t, std::move(reply));
        });
    tl_sending = nullptr;
    if (auto& sync = req->sync_result) {
      auto result = std::move(*sync);
      sync.reset();
      if (result) {
        on_reply(req, *target, std::move(result));
        return;
      }
      // Not sent: safe to retry, wherever the refreshed topology says.
      unsent_retries_.fetch_add(1, std::memory_order_relaxed);
      client_.reroute();
      retry_later(req, std::move(result.error()));
    }
  }

  // No more attempts: commands waiting for a retry complete with unavailable, later attempts
  // too, and (called off the loop's threads) retries already running have finished when it
  // returns. Idempotent.
  void close() {
    std::unordered_map<const Request*, RequestPtr> waiting;
    {
      std::lock_guard lock(shared_->mu);
      if (shared_->closed.exchange(true, std::memory_order_acq_rel)) return;
      waiting.swap(shared_->waiting);
    }
    for (auto& [key, req] : waiting)
      finish(req, make_error(ErrorCode::unavailable, closed_message_));
    if (!loop_.on_loop_thread()) loop_.barrier();
  }

  bool closed() const noexcept { return shared_->closed.load(std::memory_order_acquire); }

  std::uint64_t unsent_retries() const noexcept {
    return unsent_retries_.load(std::memory_order_relaxed);
  }

 private:
  // What outlives the router: the retries' timers may fire after it is gone.
  struct Shared {
    std::mutex mu;
    std::atomic<bool> closed{false};
    std::unordered_map<const Request*, RequestPtr> waiting;  // under mu
  };

  void finish(const RequestPtr& req, Result<Reply> result) {
    auto done = std::move(req->done);
    req->done = nullptr;
    if (done) done(std::move(result));
  }

  void retry_later(const RequestPtr& req, Error&& why) {
    req->last_error = std::move(why);
    const auto delay = retry_delay(options_, req->retries, clock_.steady(), req->deadline);
    if (!delay) {
      finish(req, std::unexpected(req->last_error));
      return;
    }
    ++req->retries;
    bool queued = false;
    {
      std::lock_guard lock(shared_->mu);
      if (!shared_->closed.load(std::memory_order_relaxed)) {
        shared_->waiting.emplace(req.get(), req);
        queued = true;
      }
    }
    if (!queued) {
      finish(req, std::unexpected(req->last_error));
      return;
    }
    loop_.post(
        req->lane,
        [this, weak = std::weak_ptr<Shared>(shared_), key = req.get()] {
          auto shared = weak.lock();
          if (!shared) return;
          RequestPtr req;
          {
            std::lock_guard lock(shared->mu);
            if (shared->closed.load(std::memory_order_relaxed)) return;  // close() completed it
            auto it = shared->waiting.find(key);
            if (it == shared->waiting.end()) return;
            req = std::move(it->second);
            shared->waiting.erase(it);
          }
          send(req);
        },
        *delay);
  }

  void on_reply(const RequestPtr& req, const Target& target, Result<Reply> reply) {
    if (closed()) {
      finish(req, std::move(reply));
      return;
    }
    if (!reply) {
      // A lost command may have run: not retried. The topology may have changed.
      if (reply.error().code != ErrorCode::timeout) client_.reroute();
      finish(req, std::move(reply));
      return;
    }
    if (!reply->is_error()) {
      finish(req, std::move(reply));
      return;
    }
    auto d = client_.on_error_reply(*req, target, *reply);
    switch (d.kind) {
      case Disposition::Kind::answer:
        if (d.error) {
          finish(req, std::unexpected(std::move(*d.error)));
        } else {
          finish(req, std::move(reply));
        }
        return;
      case Disposition::Kind::retry:
        retry_later(req, std::move(d.error).value_or(Error{ErrorCode::unavailable, reply->str}));
        return;
      case Disposition::Kind::resend:
        send(req);
        return;
    }
  }

  Client& client_;
  EventLoop& loop_;
  const Clock& clock_;
  RetryOptions options_;
  std::string closed_message_;
  std::shared_ptr<Shared> shared_;
  std::atomic<std::uint64_t> unsent_retries_{0};
};

}  // namespace ratekeeper::redis::detail
