#pragma once
// Coalescing of the checks one lane of RedisStore sends to one destination (a server, or a
// cluster slot). Internal to the store layer.
//
// While max_in_flight script calls are pending, new checks wait; when one completes (and,
// with a `post` function, at the end of the current turn of the thread it posts to) the
// waiting checks go out together as one call of the batch script (lua/batch.lua), at most
// max_batch per call, identical checks as one entry. A check alone goes out as its own
// script, and so does every check that may wait for its turn (store::may_delay). Calls go through the store's ScriptClient (NOSCRIPT → EVAL once per call). Every
// check keeps its own deadline: a check that waited gets what is left of it.
//
// The coalescer owns its checks and calls, from check() until their callbacks ran, and
// reuses them (and their argument buffers) for later checks. Thread-safe.

#include <atomic>
#include <cstdint>
#include <memory>
#include <functional>
#include <mutex>
#include <optional>
#include <vector>

#include "ratekeeper/core/reuse_pool.hpp"
#include "script_client.hpp"

namespace ratekeeper::store::detail {

class Coalescer {
 public:
  struct Options {
    std::size_t max_batch = 64;     // checks per script call at most; 1: never batch
    std::size_t max_in_flight = 1;  // script calls pending before new checks wait
    std::uint16_t slot = 0;         // where its calls go (ScriptSender)
    // Only checks of the same keys share a batch call. A cluster slot being migrated answers
    // a call naming keys on both nodes with TRYAGAIN until the migration ends: a batch of
    // one key set behaves as one check of it does.
    bool same_keys_only = false;
  };
  // Runs a function later, e.g. at the end of the current turn of an event-loop thread.
  using Post = std::function<void(std::function<void()>)>;

  // `post` empty: waiting checks go out when a call completes, from its callback.
  // `client` must outlive the coalescer.
  Coalescer(const ScriptClient& client, Post post, Options options);
  // close() must have been called, and no callback of the client's sender be pending.
  ~Coalescer();
  Coalescer(const Coalescer&) = delete;
  Coalescer& operator=(const Coalescer&) = delete;

  // `items` valid (validate_check); `deadline` absolute on the client's steady clock.
  void check(std::vector<CheckItem> items, std::optional<Micros> now, Micros deadline, CheckCallback done);

  // Nothing is sent from here on; the checks still waiting fail with unavailable.
  void close();

  std::uint64_t batches() const noexcept { return batches_.load(std::memory_order_relaxed); }
  std::uint64_t batched_checks() const noexcept { return batched_checks_.load(std::memory_order_relaxed); }

 private:
  struct Check;
  struct Batch;

  void schedule_flush();  // under no lock
  void flush();
  Batch* started(bool batch);  // a call goes out: its batch when it is one
  void finished();              // a call was answered
  void send_one(Check* check);
  void on_reply(Check* check, Result<redis::Reply> reply);
  void send_batch(Batch* batch);
  void on_batch_reply(Batch* batch, Result<redis::Reply> reply);

  const ScriptClient& client_;
  Post post_;
  Options options_;
  std::mutex mu_;
  // Checks and batches kept for reuse: in use from acquire() to release(). Under mu_.
  ReusePool<Check> check_pool_;
  ReusePool<Batch> batch_pool_;
  std::vector<Check*> queued_;
  bool flush_posted_ = false;
  std::size_t in_flight_ = 0;
  bool closed_ = false;
  std::atomic<std::uint64_t> batches_{0};
  std::atomic<std::uint64_t> batched_checks_{0};
};

}  // namespace ratekeeper::store::detail
