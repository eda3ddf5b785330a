#pragma once
// Tests' direct line to the Lua scripts: a synchronous hiredis connection and a runner that
// calls the embedded scripts (store/lua_scripts.hpp) with the calling convention of
// RedisStore, encoded and sent by the store's own script client. Not thread-safe.

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ratekeeper/algorithms/decision.hpp"
#include "ratekeeper/algorithms/limit.hpp"

struct redisContext;

namespace ratekeeper::testing {

struct RedisReply {
  enum class Type { nil, integer, string, status, error, array };
  Type type = Type::nil;
  long long integer = 0;
  std::string text;  // string, status and error replies
  std::vector<RedisReply> elements;

  bool is_error() const { return type == Type::error; }
};

class RedisConnection {
 public:
  RedisConnection(const std::string& host, int port);  // throws when it cannot connect
  ~RedisConnection();
  RedisConnection(const RedisConnection&) = delete;
  RedisConnection& operator=(const RedisConnection&) = delete;

  // Throws on a connection error; a Redis error is a reply of Type::error.
  RedisReply command(const std::vector<std::string>& argv);
  // The reply of a command that answers an integer; throws on any other reply.
  long long integer(const std::vector<std::string>& argv);
  // Sends every command in one write, then reads the replies in order.
  std::vector<RedisReply> pipeline(const std::vector<std::vector<std::string>>& commands);
  // Redis's clock (TIME) in microseconds.
  std::int64_t server_time_us();

 private:
  redisContext* context_ = nullptr;
};

// Runs the embedded scripts through the store's script client (EVALSHA, EVAL once after
// NOSCRIPT).
class ScriptRunner {
 public:
  explicit ScriptRunner(RedisConnection& connection) : connection_(connection) {}

  // The SHA1 of a script, loaded into Redis (for EVALSHA in MULTI).
  std::string sha(std::string_view script);

  RedisReply run(std::string_view script, const std::vector<std::string>& keys,
                 const std::vector<std::string>& args);
  // As run(), for a script that answers integers; throws with Redis's message otherwise.
  std::vector<std::int64_t> run_integers(std::string_view script, const std::vector<std::string>& keys,
                                         const std::vector<std::string>& args);

  // The single-key script of limit.algorithm. `now` absent: the server's clock (-1).
  algorithms::Decision check(const std::string& key, const algorithms::Limit& limit, std::int64_t cost,
                             std::optional<std::int64_t> now);
  // The "multi" script: the combined decision first, then one per key.
  std::vector<algorithms::Decision> check_all(const std::vector<std::string>& keys,
                                              std::span<const algorithms::Limit> limits,
                                              std::span<const std::int64_t> costs,
                                              std::optional<std::int64_t> now);

 private:
  RedisConnection& connection_;
};

// ARGV of a single-key script and of "multi", in the convention RedisStore uses.
std::vector<std::string> single_args(const algorithms::Limit& limit, std::int64_t cost,
                                     std::optional<std::int64_t> now);
std::vector<std::string> multi_args(std::span<const algorithms::Limit> limits,
                                    std::span<const std::int64_t> costs,
                                    std::optional<std::int64_t> now);
// ARGV of "multi_delay" (now, then per key algorithm, capacity, period, cost, max_delay).
std::vector<std::string> multi_delay_args(std::span<const algorithms::Limit> limits,
                                          std::span<const std::int64_t> costs,
                                          std::span<const std::int64_t> max_delays,
                                          std::optional<std::int64_t> now);
// ARGV of "refund" (at, now, then per key algorithm, capacity, period, cost, reset_after).
std::vector<std::string> refund_args(std::span<const algorithms::Limit> limits, std::span<const std::int64_t> costs,
                                     std::span<const std::int64_t> reset_after, std::int64_t at,
                                     std::optional<std::int64_t> now);

// The integers of an array reply; throws with the reply's text on anything else.
std::vector<std::int64_t> integers(const RedisReply& reply);

// The five integers at `offset` of a script's reply, as a Decision.
algorithms::Decision decision_at(std::span<const std::int64_t> reply, std::size_t offset);

}  // namespace ratekeeper::testing
