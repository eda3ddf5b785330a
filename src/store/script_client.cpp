#include "script_client.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <memory>

namespace ratekeeper::store::detail {

ScriptClient::ScriptClient(ScriptSender send, ScriptHealth* health, const Clock* clock)
    : send_(std::move(send)), health_(health), clock_(&clock_or_system(clock)) {}

void ScriptClient::send(ScriptCall& call, bool eval) const {
  if (call.argv.script() == nullptr) {
    auto done = std::move(call.done);
    done(make_error(ErrorCode::protocol, "the lua script of this call is not embedded"));
    return;
  }
  call.evaluated = call.evaluated || eval;
  const Micros left = std::max<Micros>(1, call.deadline - clock_->steady());
  send_(call.slot, call.argv.argv(eval), left, [this, &call](Result<redis::Reply> reply) {
    if (!call.evaluated && is_noscript(reply)) {
      if (health_ != nullptr) health_->reloaded();
      send(call, true);
      return;
    }
    if (health_ != nullptr) health_->answered(reply);
    // `done` may end the call's owner, and so the call.
    auto done = std::move(call.done);
    done(std::move(reply));
  });
}

namespace {

// A call of its own, with the items its argument vector points into, alive until answered.
template <class Callback>
struct OwnedCall {
  std::vector<CheckItem> items;
  std::vector<Micros> reset_after;
  ScriptCall call;
  Callback done;
};

template <auto Parse, class Callback, class Build>
void run_owned(const ScriptClient& client, std::uint16_t slot, std::vector<CheckItem> items,
               std::vector<Micros> reset_after, Micros deadline, Callback done, Build build) {
  auto owned = std::make_shared<OwnedCall<Callback>>(
      OwnedCall<Callback>{std::move(items), std::move(reset_after), ScriptCall{}, std::move(done)});
  build(*owned);
  owned->call.deadline = deadline;
  owned->call.slot = slot;
  // The call keeps itself alive until its final reply.
  owned->call.done = [owned](Result<redis::Reply> reply) mutable {
    auto done = std::move(owned->done);
    const std::size_t n = owned->items.size();
    owned.reset();
    if (!reply) {
      done(std::unexpected(std::move(reply.error())));
      return;
    }
    done(Parse(*reply, n));
  };
  client.send(owned->call);
}

}  // namespace

void run_check(const ScriptClient& client, std::uint16_t slot, std::vector<CheckItem> items,
               std::optional<Micros> now, Micros deadline, CheckCallback done) {
  auto build = [now](auto& o) { o.call.argv.check(o.items, now); };
  if (may_delay(items)) {
    run_owned<parse_delayed_outcome>(client, slot, std::move(items), {}, deadline, std::move(done), build);
  } else {
    run_owned<parse_outcome>(client, slot, std::move(items), {}, deadline, std::move(done), build);
  }
}

void run_timed_check(const ScriptClient& client, std::uint16_t slot, std::vector<CheckItem> items,
                     std::optional<Micros> now, Micros deadline, TimedCallback done) {
  run_owned<parse_timed_outcome>(client, slot, std::move(items), {}, deadline, std::move(done),
                                 [now](auto& o) { o.call.argv.multi_at(o.items, now); });
}

void run_refund(const ScriptClient& client, std::uint16_t slot, std::vector<CheckItem> items,
                std::vector<Micros> reset_after, Micros at, std::optional<Micros> now, Micros deadline,
                RefundCallback done) {
  run_owned<parse_refund>(client, slot, std::move(items), std::move(reset_after), deadline, std::move(done),
                          [at, now](auto& o) { o.call.argv.refund(o.items, o.reset_after, at, now); });
}

}  // namespace ratekeeper::store::detail
