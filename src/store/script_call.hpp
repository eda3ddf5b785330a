#pragma once
// One call of the embedded Lua scripts (lua/*.lua) over a batch of check items: argument
// checks shared by every Redis store, the EVALSHA/EVAL argument vector of the calling
// convention documented in lua/single.lua and lua/multi.lua, and the parsing of the reply.
// Internal to the store layer; used by the cluster and sentinel stores. Not thread-safe
// (one ScriptCall belongs to one check at a time).

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ratekeeper/core/error.hpp"
#include "ratekeeper/redis/connection.hpp"
#include "ratekeeper/redis/reply.hpp"
#include "ratekeeper/redis/url.hpp"
#include "ratekeeper/store/open_store.hpp"
#include "ratekeeper/store/store.hpp"
#include "script_replies.hpp"

namespace ratekeeper::store::detail {

// The checks MemoryStore applies before touching state: now >= 0, each limit valid, each
// cost within its limit, no key twice.
Result<void> validate_check(std::span<const CheckItem> items, std::optional<Micros> now);

// Answers, through `done`, the checks no Redis call is needed for: an empty batch (admitted)
// and invalid arguments (validate_check). Returns true when it answered.
bool answered_locally(std::span<const CheckItem> items, std::optional<Micros> now,
                      const CheckCallback& done);

// The connection settings every Redis store derives from StoreOptions and its URL
// (credentials, db, deadlines, reconnect backoff, breaker).
redis::ConnectionOptions connection_options(const StoreOptions& options, const redis::Url& url);

// The health settings every Redis store derives from StoreOptions.
ReplyHealthOptions reply_health_options(const StoreOptions& options);

// An embedded script with the SHA1 Redis knows it by.
struct EmbeddedScript {
  std::string_view name;
  std::string_view source;
  std::string sha;
};

// The script that serves `items`: the algorithm's own script for one item, "multi" otherwise.
// nullptr when it is not embedded.
const EmbeddedScript* script_for(std::span<const CheckItem> items) noexcept;

// The argument vector of one script call. The views point into `items` (which must outlive
// the call and not move) and into this object's own buffer.
class ScriptCall {
 public:
  ScriptCall(std::vector<CheckItem> items, std::optional<Micros> now);

  // Builds EVALSHA (or EVAL with the source, after NOSCRIPT). Errors: protocol when the
  // script is not embedded.
  Result<std::span<const std::string_view>> argv(bool eval);

  const std::vector<CheckItem>& items() const noexcept { return items_; }
  const std::optional<Micros>& now() const noexcept { return now_; }
  std::vector<CheckItem>& items() noexcept { return items_; }

  // True once EVAL was used: a second NOSCRIPT is an error.
  bool evaluated() const noexcept { return evaluated_; }

 private:
  std::vector<CheckItem> items_;
  std::optional<Micros> now_;
  std::string numbers_;
  std::vector<std::string_view> argv_;
  bool evaluated_ = false;
};

// One entry of a batch script call: a check, or `repeats` identical checks issued one after
// the other.
struct BatchEntry {
  const std::vector<CheckItem>* items = nullptr;
  std::size_t repeats = 1;
};

// The argument vector of one call of the batch script (lua/batch.lua): several independent
// checks, all with the same `now`, evaluated one after the other in one script call. The
// views point into the entries' items (which must outlive the call and not move) and into
// this object's own buffer.
class BatchArgv {
 public:
  // Builds EVALSHA (or EVAL with the source) over `entries`, in order. Errors: protocol when
  // the batch script is not embedded.
  Result<std::span<const std::string_view>> build(std::span<const BatchEntry> entries, std::optional<Micros> now,
                                                  bool eval);

 private:
  std::string numbers_;
  std::vector<std::string_view> argv_;
};

// A batch script reply → for each entry, one outcome per repetition, each parsed as
// parse_outcome does. An error reply (or a malformed one) gives every check that error.
std::vector<std::vector<Result<CheckOutcome>>> parse_batch(const redis::Reply& reply,
                                                           std::span<const BatchEntry> entries);

// The five integers at `fields` as a Decision; protocol error when one is not an integer.
Result<Decision> to_decision(const redis::Reply* fields);

// True when the reply says the server does not know the script (EVALSHA → EVAL).
bool is_noscript(const Result<redis::Reply>& reply) noexcept;

// The reply to a script call sent as EVALSHA, or as EVAL once `evaluated`: true when it asks
// for the call again as EVAL (NOSCRIPT, not evaluated yet), counted in `replies`; otherwise it
// is the call's final reply, noted in `replies` (health). `replies` may be null.
bool needs_eval(const Result<redis::Reply>& reply, bool evaluated, ScriptReplies* replies);

// A script reply for `items` items → decisions. An error reply is ErrorCode::reply.
Result<CheckOutcome> parse_outcome(const redis::Reply& reply, std::size_t items);

}  // namespace ratekeeper::store::detail

namespace ratekeeper::store::detail {

// Sends one command to wherever the store's topology says (a cluster slot's master, the
// sentinel-resolved master) with the given deadline in microseconds from now.
using ScriptSender =
    std::function<void(std::span<const std::string_view> argv, Micros timeout, redis::ReplyCallback done)>;

// Runs `call` through `send`: EVALSHA, and after NOSCRIPT (a node that restarted, a promoted
// replica, SCRIPT FLUSH) EVAL with the source once, which also loads it on that node. The
// deadline is absolute on the steady clock. `done` is called exactly once. The replies are
// noted in `replies` (may be null).
void run_script(std::shared_ptr<ScriptCall> call, Micros deadline, ScriptSender send, CheckCallback done,
                ScriptReplies* replies);

}  // namespace ratekeeper::store::detail
