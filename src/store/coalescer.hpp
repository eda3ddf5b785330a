#pragma once
// Coalescing of checks bound for one Redis server, shared by the stores that talk to one
// master (RedisStore per connection, RedisSentinelStore). Internal to the store layer.
//
// While max_in_flight script calls are pending, new checks wait; when one completes (and,
// with a `post` function, at the end of the current turn of the thread it posts to) the
// waiting checks go out together as one call of the batch script (lua/batch.lua), at most
// max_batch per call, identical checks as one entry. A check alone goes out as its own
// script. NOSCRIPT is answered by EVAL with the source, once per call. Every check keeps its
// own deadline: a check that waited gets what is left of it. The replies are noted in the
// store's ScriptReplies (NOSCRIPT reloads, health). Thread-safe.

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <vector>

#include "script_call.hpp"
#include "script_replies.hpp"

namespace ratekeeper::store::detail {

class Coalescer {
 public:
  struct Options {
    std::size_t max_batch = 64;     // checks per script call at most; 1: never batch
    std::size_t max_in_flight = 1;  // script calls pending before new checks wait
  };
  // Runs a function later, e.g. at the end of the current turn of an event-loop thread.
  using Post = std::function<void(std::function<void()>)>;

  // `post` empty: waiting checks go out when a call completes, from its callback.
  // `replies` may be null.
  Coalescer(ScriptSender send, Post post, Options options, ScriptReplies* replies);
  // close() must have been called, and no callback of `send` be pending.
  ~Coalescer();
  Coalescer(const Coalescer&) = delete;
  Coalescer& operator=(const Coalescer&) = delete;

  // `items` valid (validate_check); `deadline` absolute on the steady clock.
  void check(std::vector<CheckItem> items, std::optional<Micros> now, Micros deadline, CheckCallback done);

  // Nothing is sent from here on; the checks still waiting fail with unavailable.
  void close();

  std::uint64_t batches() const noexcept { return batches_.load(std::memory_order_relaxed); }
  std::uint64_t batched_checks() const noexcept { return batched_checks_.load(std::memory_order_relaxed); }

 private:
  struct Call;
  struct Batch;
  void schedule_flush();  // under no lock
  void flush();
  void send_one(Call* call, bool eval);
  void on_reply(Call* call, Result<redis::Reply> reply);
  void send_batch(Batch* batch, bool eval);
  void on_batch_reply(Batch* batch, Result<redis::Reply> reply);
  void started();
  void finished();

  ScriptSender send_;
  Post post_;
  Options options_;
  ScriptReplies* replies_;
  std::mutex mu_;
  std::vector<Call*> queued_;
  bool flush_posted_ = false;
  std::size_t in_flight_ = 0;
  bool closed_ = false;
  std::atomic<std::uint64_t> batches_{0};
  std::atomic<std::uint64_t> batched_checks_{0};
};

}  // namespace ratekeeper::store::detail
