#include "coalescer.hpp"

#include <algorithm>
#include <utility>

#include "ratekeeper/core/contained.hpp"
#include "ratekeeper/redis/circuit_breaker.hpp"

namespace ratekeeper::store::detail {

// One check: owned by the queue, then by exactly one pending command (or one batch).
struct Coalescer::Call {
  ScriptCall script;  // the items, `now`, and the argument vector of a call of its own
  CheckCallback done;
  Micros deadline = 0;  // steady clock
  bool retried = false;
};

// Checks sent together in one call of the batch script; identical checks share one entry.
struct Coalescer::Batch {
  std::vector<BatchEntry> entries;
  std::vector<std::vector<Call*>> calls;  // per entry, in issue order
  BatchArgv argv;
  Micros deadline = 0;  // the earliest of the calls'
  bool retried = false;
};

Coalescer::Coalescer(ScriptSender send, Post post, Options options, ScriptReplies* replies)
    : send_(std::move(send)), post_(std::move(post)), options_(options), replies_(replies) {
  options_.max_batch = std::max<std::size_t>(1, options_.max_batch);
  options_.max_in_flight = std::max<std::size_t>(1, options_.max_in_flight);
}

Coalescer::~Coalescer() { close(); }

void Coalescer::close() {
  std::vector<Call*> left;
  {
    std::lock_guard lock(mu_);
    closed_ = true;
    left.swap(queued_);
  }
  for (Call* call : left) {
    auto done = std::move(call->done);
    delete call;
    done(make_error(ErrorCode::unavailable, "redis store closed"));
  }
}

void Coalescer::check(std::vector<CheckItem> items, std::optional<Micros> now, Micros deadline, CheckCallback done) {
  auto* call = new Call{ScriptCall(std::move(items), now), std::move(done), deadline, false};
  {
    std::lock_guard lock(mu_);
    if (closed_) {
      auto d = std::move(call->done);
      delete call;
      d(make_error(ErrorCode::unavailable, "redis store closed"));
      return;
    }
    queued_.push_back(call);
  }
  schedule_flush();
}

void Coalescer::schedule_flush() {
  if (!post_) {
    flush();
    return;
  }
  {
    std::lock_guard lock(mu_);
    if (std::exchange(flush_posted_, true)) return;
  }
  post_([this] { flush(); });
}

void Coalescer::flush() {
  std::vector<Call*> calls;
  {
    std::lock_guard lock(mu_);
    flush_posted_ = false;
    // Enough in flight: what is queued goes with the next completion, in fewer, larger calls.
    if (closed_ || in_flight_ >= options_.max_in_flight || queued_.empty()) return;
    calls.swap(queued_);
  }
  // Runs of calls with the same `now` (the script takes one), at most max_batch each.
  for (std::size_t i = 0; i < calls.size();) {
    std::size_t j = i + 1;
    while (j < calls.size() && j - i < options_.max_batch && calls[j]->script.now() == calls[i]->script.now()) ++j;
    started();
    if (j - i == 1) {
      send_one(calls[i], false);
    } else {
      auto* batch = new Batch;
      batch->deadline = calls[i]->deadline;
      for (std::size_t k = i; k < j; ++k) {
        const auto& items = calls[k]->script.items();
        // Identical to an earlier check of the batch (typically one client's key): one entry.
        std::size_t e = 0;
        while (e < batch->entries.size() && *batch->entries[e].items != items) ++e;
        if (e == batch->entries.size()) {
          batch->entries.push_back({&items, 0});
          batch->calls.emplace_back();
        }
        ++batch->entries[e].repeats;
        batch->calls[e].push_back(calls[k]);
        batch->deadline = std::min(batch->deadline, calls[k]->deadline);
      }
      batches_.fetch_add(1, std::memory_order_relaxed);
      batched_checks_.fetch_add(j - i, std::memory_order_relaxed);
      send_batch(batch, false);
    }
    i = j;
  }
}

void Coalescer::started() {
  std::lock_guard lock(mu_);
  ++in_flight_;
}

void Coalescer::finished() {
  {
    std::lock_guard lock(mu_);
    --in_flight_;
    if (queued_.empty() || closed_) return;
  }
  schedule_flush();
}

void Coalescer::send_one(Call* call, bool eval) {
  // EVALSHA sha numkeys keys... args... (EVAL with the source after NOSCRIPT).
  auto argv = call->script.argv(eval);
  if (!argv) {
    on_reply(call, std::unexpected(argv.error()));
    return;
  }
  const Micros left = std::max<Micros>(1, call->deadline - SystemClock::instance().steady());
  send_(*argv, left, [this, call](Result<redis::Reply> reply) { on_reply(call, std::move(reply)); });
}

void Coalescer::on_reply(Call* call, Result<redis::Reply> reply) {
  if (needs_eval(reply, call->retried, replies_)) {
    // The server lost its script cache (restart, failover, SCRIPT FLUSH): EVAL loads it.
    call->retried = true;
    send_one(call, true);
    return;
  }
  auto done = std::move(call->done);
  const std::size_t n = call->script.items().size();
  delete call;
  finished();
  if (!reply) {
    done(std::unexpected(std::move(reply.error())));
    return;
  }
  done(parse_outcome(*reply, n));
}

void Coalescer::send_batch(Batch* batch, bool eval) {
  const auto& now = batch->calls.front().front()->script.now();
  auto argv = batch->argv.build(batch->entries, now, eval);
  if (!argv) {
    on_batch_reply(batch, std::unexpected(argv.error()));
    return;
  }
  const Micros left = std::max<Micros>(1, batch->deadline - SystemClock::instance().steady());
  send_(*argv, left, [this, batch](Result<redis::Reply> reply) { on_batch_reply(batch, std::move(reply)); });
}

void Coalescer::on_batch_reply(Batch* batch, Result<redis::Reply> reply) {
  if (needs_eval(reply, batch->retried, replies_)) {
    batch->retried = true;
    send_batch(batch, true);
    return;
  }
  std::vector<std::vector<Result<CheckOutcome>>> outcomes;
  if (reply) outcomes = parse_batch(*reply, batch->entries);
  std::vector<std::vector<Call*>> calls = std::move(batch->calls);
  delete batch;
  finished();
  for (std::size_t e = 0; e < calls.size(); ++e) {
    for (std::size_t r = 0; r < calls[e].size(); ++r) {
      auto done = std::move(calls[e][r]->done);
      delete calls[e][r];
      // Each check's callback runs whatever the others do.
      contain("a coalesced check's callback", [&] {
        if (reply) {
          done(std::move(outcomes[e][r]));
        } else {
          done(std::unexpected(reply.error()));
        }
      });
    }
  }
}

}  // namespace ratekeeper::store::detail
