#include "script_client.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <memory>

namespace ratekeeper::store::detail {

ScriptClient::ScriptClient(ScriptSender send, ScriptHealth* health, const Clock* clock, bool functions)
    : send_(std::move(send)), health_(health), clock_(&clock_or_system(clock)), functions_(functions) {}

namespace {

bool error_starts_with(const Result<redis::Reply>& reply, std::string_view prefix) noexcept {
  return reply && reply->is_error() && reply->str.starts_with(prefix);
}

// FCALL of a function the server does not have.
bool is_no_function(const Result<redis::Reply>& reply) noexcept {
  return error_starts_with(reply, "ERR Function not found");
}

// The server will not run functions for us: no such command (Redis before 7, renamed), or
// an ACL that refuses it.
bool refuses_command(const Result<redis::Reply>& reply) noexcept {
  return reply && reply->is_error() &&
         (reply->error_code() == "NOPERM" || reply->str.starts_with("ERR unknown command") ||
          reply->str.starts_with("ERR unknown subcommand"));
}

// Out of memory under maxmemory: Redis refuses FCALL (and FUNCTION LOAD) of a function that
// may write before it runs, while a script (EVALSHA) is refused only the writes it makes.
bool is_oom(const Result<redis::Reply>& reply) noexcept {
  return reply && reply->is_error() && reply->error_code() == "OOM";
}

}  // namespace

void ScriptClient::send(ScriptCall& call) const {
  if (call.argv.script() == nullptr) {
    auto done = std::move(call.done);
    done(make_error(ErrorCode::protocol, "the lua script of this call is not embedded"));
    return;
  }
  call.loaded = false;
  sample_clock(call.slot, std::max<Micros>(1, call.deadline - clock_->steady()));
  dispatch(call, functions() ? Invocation::fcall : Invocation::evalsha);
}

void ScriptClient::sample_clock(std::uint16_t slot, Micros timeout) const {
  if (!server_clock().start_sample()) return;
  static const std::string_view kTime[] = {"TIME"};
  const Micros sent = ServerClock::steady_now();
  send_(slot, kTime, timeout, [this, sent](Result<redis::Reply> reply) {
    if (reply) {
      server_clock().sampled(sent, *reply);
    } else {
      server_clock().failed();
    }
  });
}

void ScriptClient::dispatch(ScriptCall& call, Invocation how) const {
  call.sent = how;
  const Micros left = std::max<Micros>(1, call.deadline - clock_->steady());
  if (call.argv.boundable()) {
    if (const auto deadline = server_clock().deadline_in(left)) call.argv.bound(*deadline);
  }
  send_(call.slot, call.argv.argv(how), left, [this, &call](Result<redis::Reply> reply) {
    switch (call.sent) {
      case Invocation::fcall:
        if (is_no_function(reply)) {
          if (!call.loaded) {
            load_library(call);
            return;
          }
          // Loaded where the call is routed, yet missing where it ran: a node importing the
          // slot, reached through ASK, never had it. This call goes as a script, which EVAL
          // carries wherever the call is redirected.
          dispatch(call, Invocation::evalsha);
          return;
        }
        if (refuses_command(reply)) {
          refused(reply->str);
          dispatch(call, Invocation::evalsha);
          return;
        }
        // This call as a script: a denial or a peek, which writes nothing, is still answered.
        if (is_oom(reply)) {
          dispatch(call, Invocation::evalsha);
          return;
        }
        break;
      case Invocation::evalsha:
        if (is_noscript(reply)) {
          if (health_ != nullptr) health_->reloaded();
          dispatch(call, Invocation::eval);
          return;
        }
        break;
      case Invocation::eval: break;
    }
    finish(call, std::move(reply));
  });
}

void ScriptClient::load_library(ScriptCall& call) const {
  call.loaded = true;
  static const std::string_view kLoad[] = {"FUNCTION", "LOAD", lua_library().source};
  const Micros left = std::max<Micros>(1, call.deadline - clock_->steady());
  send_(call.slot, kLoad, left, [this, &call](Result<redis::Reply> reply) {
    if (!reply) {  // no answer in time, connection lost: the call's answer
      finish(call, std::move(reply));
      return;
    }
    // Loaded, or loaded meanwhile by another call.
    if (!reply->is_error() || reply->str.find("already exists") != std::string::npos) {
      if (health_ != nullptr) health_->library_loaded();
      dispatch(call, Invocation::fcall);
      return;
    }
    if (!is_oom(reply)) refused(reply->str);
    dispatch(call, Invocation::evalsha);
  });
}

void ScriptClient::refused(std::string_view why) const {
  if (functions_.exchange(false, std::memory_order_relaxed) && health_ != nullptr) health_->functions_refused(why);
}

void ScriptClient::finish(ScriptCall& call, Result<redis::Reply> reply) const {
  // Run after its deadline on the server's clock, the call did nothing (ScriptArgv::bound): a
  // timeout, as if its reply had come too late, not an error of the scripts.
  if (reply && reply->is_error() && reply->error_code() == "TIMEOUT") {
    reply = make_error(ErrorCode::timeout, reply->str);
  }
  if (health_ != nullptr) health_->answered(reply);
  // `done` may end the call's owner, and so the call.
  auto done = std::move(call.done);
  done(std::move(reply));
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
