#include "support/script_runner.hpp"

#include <fmt/format.h>
#include <hiredis/hiredis.h>

#include <stdexcept>

#include "store/redis/lua_scripts.hpp"
#include "store/redis/script_argv.hpp"
#include "store/redis/script_client.hpp"

namespace ratekeeper::testing {
namespace {

RedisReply convert(const redisReply* r) {
  RedisReply out;
  switch (r->type) {
    case REDIS_REPLY_INTEGER:
      out.type = RedisReply::Type::integer;
      out.integer = r->integer;
      break;
    case REDIS_REPLY_STRING:
      out.type = RedisReply::Type::string;
      out.text.assign(r->str, r->len);
      break;
    case REDIS_REPLY_STATUS:
      out.type = RedisReply::Type::status;
      out.text.assign(r->str, r->len);
      break;
    case REDIS_REPLY_ERROR:
      out.type = RedisReply::Type::error;
      out.text.assign(r->str, r->len);
      break;
    case REDIS_REPLY_ARRAY:
      out.type = RedisReply::Type::array;
      for (std::size_t i = 0; i < r->elements; ++i) out.elements.push_back(convert(r->element[i]));
      break;
    default: break;
  }
  return out;
}

redis::Reply to_reply(const RedisReply& r) {
  redis::Reply out;
  switch (r.type) {
    case RedisReply::Type::nil: out.type = redis::Reply::Type::nil; break;
    case RedisReply::Type::integer: out.type = redis::Reply::Type::integer; break;
    case RedisReply::Type::string: out.type = redis::Reply::Type::string; break;
    case RedisReply::Type::status: out.type = redis::Reply::Type::status; break;
    case RedisReply::Type::error: out.type = redis::Reply::Type::error; break;
    case RedisReply::Type::array: out.type = redis::Reply::Type::array; break;
  }
  out.integer = r.integer;
  out.str = r.text;
  for (const auto& e : r.elements) out.elements.push_back(to_reply(e));
  return out;
}

RedisReply from_reply(const redis::Reply& r) {
  RedisReply out;
  switch (r.type) {
    case redis::Reply::Type::nil: out.type = RedisReply::Type::nil; break;
    case redis::Reply::Type::integer: out.type = RedisReply::Type::integer; break;
    case redis::Reply::Type::string: out.type = RedisReply::Type::string; break;
    case redis::Reply::Type::status: out.type = RedisReply::Type::status; break;
    case redis::Reply::Type::error: out.type = RedisReply::Type::error; break;
    case redis::Reply::Type::array: out.type = RedisReply::Type::array; break;
  }
  out.integer = r.integer;
  out.text = r.str;
  for (const auto& e : r.elements) out.elements.push_back(from_reply(e));
  return out;
}

const store::LuaScript& embedded(std::string_view name) {
  const store::LuaScript* script = store::find_lua_script(name);
  if (script == nullptr) throw std::runtime_error(fmt::format("no embedded script named '{}'", name));
  return *script;
}

// ARGV of a call ScriptArgv encodes for `items`: what follows numkeys and the keys.
std::vector<std::string> argv_of(const store::detail::ScriptArgv& argv, std::size_t items) {
  const auto args = argv.args().subspan(1 + items);
  return {args.begin(), args.end()};
}

std::vector<store::CheckItem> items_of(std::span<const algorithms::Limit> limits,
                                       std::span<const std::int64_t> costs) {
  std::vector<store::CheckItem> items;
  for (std::size_t i = 0; i < limits.size(); ++i) items.push_back({fmt::format("k{}", i), limits[i], costs[i]});
  return items;
}

}  // namespace

RedisConnection::RedisConnection(const std::string& host, int port) {
  timeval tv{5, 0};
  context_ = redisConnectWithTimeout(host.c_str(), port, tv);
  if (context_ == nullptr || context_->err != 0) {
    const std::string why = context_ != nullptr ? context_->errstr : "out of memory";
    if (context_ != nullptr) redisFree(context_);
    throw std::runtime_error(fmt::format("cannot connect to redis on {}:{}: {}", host, port, why));
  }
  redisSetTimeout(context_, tv);
}

RedisConnection::~RedisConnection() { redisFree(context_); }

RedisReply RedisConnection::command(const std::vector<std::string>& argv) {
  std::vector<const char*> ptrs;
  std::vector<std::size_t> lens;
  for (const auto& a : argv) {
    ptrs.push_back(a.data());
    lens.push_back(a.size());
  }
  auto* r = static_cast<redisReply*>(
      redisCommandArgv(context_, static_cast<int>(argv.size()), ptrs.data(), lens.data()));
  if (r == nullptr) throw std::runtime_error(fmt::format("redis connection error: {}", context_->errstr));
  RedisReply out = convert(r);
  freeReplyObject(r);
  return out;
}

std::vector<RedisReply> RedisConnection::pipeline(
    const std::vector<std::vector<std::string>>& commands) {
  for (const auto& argv : commands) {
    std::vector<const char*> ptrs;
    std::vector<std::size_t> lens;
    for (const auto& a : argv) {
      ptrs.push_back(a.data());
      lens.push_back(a.size());
    }
    if (redisAppendCommandArgv(context_, static_cast<int>(argv.size()), ptrs.data(), lens.data()) !=
        REDIS_OK) {
      throw std::runtime_error(fmt::format("redis connection error: {}", context_->errstr));
    }
  }
  std::vector<RedisReply> out;
  for (std::size_t i = 0; i < commands.size(); ++i) {
    void* reply = nullptr;
    if (redisGetReply(context_, &reply) != REDIS_OK || reply == nullptr) {
      throw std::runtime_error(fmt::format("redis connection error: {}", context_->errstr));
    }
    out.push_back(convert(static_cast<redisReply*>(reply)));
    freeReplyObject(reply);
  }
  return out;
}

long long RedisConnection::integer(const std::vector<std::string>& argv) {
  RedisReply r = command(argv);
  if (r.type != RedisReply::Type::integer) {
    throw std::runtime_error(fmt::format("{}: expected an integer reply, got '{}'", argv.at(0), r.text));
  }
  return r.integer;
}

std::int64_t RedisConnection::server_time_us() {
  RedisReply r = command({"TIME"});
  if (r.type != RedisReply::Type::array || r.elements.size() != 2) {
    throw std::runtime_error("TIME: unexpected reply");
  }
  return std::stoll(r.elements[0].text) * 1'000'000 + std::stoll(r.elements[1].text);
}

std::string ScriptRunner::sha(std::string_view script) {
  const store::LuaScript& s = embedded(script);
  RedisReply loaded = connection_.command({"SCRIPT", "LOAD", std::string(s.source)});
  if (loaded.type != RedisReply::Type::string || loaded.text != s.sha) {
    throw std::runtime_error(fmt::format("SCRIPT LOAD {}: {}", script, loaded.text));
  }
  return std::string(s.sha);
}

RedisReply ScriptRunner::run(std::string_view script, const std::vector<std::string>& keys,
                             const std::vector<std::string>& args) {
  // Through the store's script client (EVALSHA, EVAL once after NOSCRIPT), over this
  // synchronous connection: the client's callbacks run before send() returns.
  (void)embedded(script);
  const store::detail::ScriptClient client(
      [this](std::uint16_t, std::span<const std::string_view> argv, Micros, redis::ReplyCallback done) {
        done(to_reply(connection_.command(std::vector<std::string>(argv.begin(), argv.end()))));
      },
      nullptr, nullptr);
  std::optional<Result<redis::Reply>> reply;
  store::detail::ScriptCall call;
  call.argv.call(script, keys, args);
  call.deadline = client.steady() + 60 * kMicrosPerSecond;
  call.done = [&reply](Result<redis::Reply> r) { reply = std::move(r); };
  client.send(call);
  if (!reply || !*reply) {
    throw std::runtime_error(fmt::format("script {}: {}", script, reply ? reply->error().message : "no reply"));
  }
  return from_reply(**reply);
}

std::vector<std::int64_t> ScriptRunner::run_integers(std::string_view script,
                                                     const std::vector<std::string>& keys,
                                                     const std::vector<std::string>& args) {
  return integers(run(script, keys, args));
}

algorithms::Decision ScriptRunner::check(const std::string& key, const algorithms::Limit& limit,
                                         std::int64_t cost, std::optional<std::int64_t> now) {
  auto reply = run_integers(algorithms::to_string(limit.algorithm), {key}, single_args(limit, cost, now));
  if (reply.size() != 5) throw std::runtime_error("single-key script: expected 5 integers");
  return decision_at(reply, 0);
}

std::vector<algorithms::Decision> ScriptRunner::check_all(const std::vector<std::string>& keys,
                                                          std::span<const algorithms::Limit> limits,
                                                          std::span<const std::int64_t> costs,
                                                          std::optional<std::int64_t> now) {
  auto reply = run_integers("multi", keys, multi_args(limits, costs, now));
  if (reply.size() != 5 * (keys.size() + 1)) throw std::runtime_error("multi: unexpected reply length");
  std::vector<algorithms::Decision> out;
  for (std::size_t i = 0; i <= keys.size(); ++i) out.push_back(decision_at(reply, 5 * i));
  return out;
}

std::vector<std::string> single_args(const algorithms::Limit& limit, std::int64_t cost,
                                     std::optional<std::int64_t> now) {
  const std::vector<store::CheckItem> items{{"k", limit, cost}};
  store::detail::ScriptArgv argv;
  argv.check(items, now);
  return argv_of(argv, 1);
}

std::vector<std::string> multi_args(std::span<const algorithms::Limit> limits,
                                    std::span<const std::int64_t> costs,
                                    std::optional<std::int64_t> now) {
  // "multi_at" takes the ARGV of "multi", whatever the number of keys.
  const auto items = items_of(limits, costs);
  store::detail::ScriptArgv argv;
  argv.multi_at(items, now);
  return argv_of(argv, items.size());
}

std::vector<std::string> multi_delay_args(std::span<const algorithms::Limit> limits,
                                          std::span<const std::int64_t> costs,
                                          std::span<const std::int64_t> max_delays,
                                          std::optional<std::int64_t> now) {
  auto items = items_of(limits, costs);
  for (std::size_t i = 0; i < items.size(); ++i) items[i].max_delay = max_delays[i];
  store::detail::ScriptArgv argv;
  argv.check(items, now);
  if (argv.script() == nullptr || argv.script()->name != "multi_delay") {
    throw std::runtime_error("multi_delay_args: some max_delay must be > 0");
  }
  return argv_of(argv, items.size());
}

std::vector<std::string> refund_args(std::span<const algorithms::Limit> limits, std::span<const std::int64_t> costs,
                                     std::span<const std::int64_t> reset_after, std::int64_t at,
                                     std::optional<std::int64_t> now) {
  const auto items = items_of(limits, costs);
  store::detail::ScriptArgv argv;
  argv.refund(items, reset_after, at, now);
  return argv_of(argv, items.size());
}

std::vector<std::int64_t> integers(const RedisReply& reply) {
  if (reply.type != RedisReply::Type::array) {
    throw std::runtime_error(fmt::format("expected an array of integers, got '{}'", reply.text));
  }
  std::vector<std::int64_t> out;
  for (const auto& e : reply.elements) {
    if (e.type != RedisReply::Type::integer) {
      throw std::runtime_error("expected an array of integers, got another element");
    }
    out.push_back(e.integer);
  }
  return out;
}

algorithms::Decision decision_at(std::span<const std::int64_t> reply, std::size_t offset) {
  if (reply.size() < offset + 5) throw std::runtime_error("script reply too short for a decision");
  return algorithms::Decision{
      .allowed = reply[offset] == 1,
      .limit = reply[offset + 1],
      .remaining = reply[offset + 2],
      .retry_after = reply[offset + 3],
      .reset_after = reply[offset + 4],
  };
}

}  // namespace ratekeeper::testing
