#include "ratekeeper/store/redis_store.hpp"

#include <fmt/format.h>

#include <array>
#include <charconv>

#include "../redis/sha1.hpp"
#include "ratekeeper/algorithms/step.hpp"
#include "ratekeeper/redis/event_loop.hpp"
#include "ratekeeper/store/lua_scripts.hpp"

namespace ratekeeper::store {
namespace {

constexpr std::string_view kMultiScript = "multi";
constexpr std::size_t kDecisionFields = 5;
constexpr std::size_t kNumberChars = 24;

// Appends the decimal form of `v` to `buf` (capacity reserved by the caller) and returns a
// view of it.
std::string_view append_number(std::string& buf, std::int64_t v) {
  char tmp[kNumberChars];
  auto [end, ec] = std::to_chars(tmp, tmp + sizeof tmp, v);
  (void)ec;
  const std::size_t start = buf.size();
  buf.append(tmp, end);
  return std::string_view(buf).substr(start);
}

Result<Decision> to_decision(const redis::Reply* fields) {
  for (std::size_t i = 0; i < kDecisionFields; ++i) {
    if (!fields[i].is_integer()) {
      return make_error(ErrorCode::protocol,
                        fmt::format("script reply field {} is not an integer: {}", i, fields[i].to_string()));
    }
  }
  Decision d;
  d.allowed = fields[0].integer == 1;
  d.limit = fields[1].integer;
  d.remaining = fields[2].integer;
  d.retry_after = fields[3].integer;
  d.reset_after = fields[4].integer;
  return d;
}

Result<CheckOutcome> parse_outcome(const redis::Reply& reply, std::size_t items) {
  if (reply.is_error()) return make_error(ErrorCode::reply, reply.str);
  const std::size_t expected = items == 1 ? kDecisionFields : kDecisionFields * (items + 1);
  if (!reply.is_array() || reply.elements.size() != expected) {
    return make_error(ErrorCode::protocol,
                      fmt::format("script reply: expected {} integers, got {}", expected, reply.to_string()));
  }
  CheckOutcome out;
  auto combined = to_decision(reply.elements.data());
  if (!combined) return std::unexpected(combined.error());
  out.decision = *combined;
  if (items == 1) {
    out.items.push_back(out.decision);
    return out;
  }
  out.items.reserve(items);
  for (std::size_t i = 0; i < items; ++i) {
    auto d = to_decision(reply.elements.data() + kDecisionFields * (i + 1));
    if (!d) return std::unexpected(d.error());
    out.items.push_back(*d);
  }
  return out;
}

Result<void> validate(const std::vector<CheckItem>& items, std::optional<Micros> now) {
  if (now && *now < 0) {
    return make_error(ErrorCode::invalid_argument, fmt::format("now must be >= 0, got {}", *now));
  }
  for (std::size_t i = 0; i < items.size(); ++i) {
    const auto& item = items[i];
    if (auto ok = algorithms::Limit::make(item.limit.algorithm, item.limit.capacity, item.limit.period); !ok) {
      return std::unexpected(ok.error());
    }
    if (auto ok = algorithms::validate_cost(item.limit, item.cost); !ok) return std::unexpected(ok.error());
    if (items.size() > 1) {
      for (std::size_t j = 0; j < i; ++j) {
        if (items[j].key == item.key) {
          return make_error(ErrorCode::invalid_argument,
                            fmt::format("key '{}' appears twice in one check", item.key));
        }
      }
    }
  }
  return {};
}

}  // namespace

// One check in flight: owned by exactly one pending command at a time.
struct RedisStore::Call {
  std::vector<CheckItem> items;
  std::optional<Micros> now;
  CheckCallback done;
  Micros deadline = 0;  // steady clock; a retry gets what is left
  std::size_t connection = 0;
  bool retried = false;
};

RedisStoreOptions redis_store_options(const StoreOptions& options, const redis::Url& url) {
  RedisStoreOptions out;
  auto& c = out.connection;
  if (!url.endpoints.empty()) c.endpoint = url.endpoints.front();
  c.credentials = url.credentials;
  c.db = url.db;
  c.connect_timeout = options.connect_timeout;
  c.command_timeout = options.command_timeout;
  c.reconnect_min = options.reconnect_min;
  c.reconnect_max = options.reconnect_max;
  c.breaker.failures = options.breaker_failures;
  c.breaker.open_for = options.breaker_open_for;
  out.connections = std::max(1, options.io_threads);
  return out;
}

std::string RedisStore::script_sha1(std::string_view source) { return redis::detail::sha1_hex(source); }

RedisStore::RedisStore(RedisStoreOptions options) : options_(std::move(options)) {
  for (std::string_view name : {"token_bucket", "sliding_window_log", "sliding_window_counter", "fixed_window", "multi"}) {
    auto source = lua_script(name);
    if (!source) continue;
    scripts_.push_back(Script{std::string(name), std::string(*source), script_sha1(*source)});
  }
  const int n = std::max(1, options_.connections);
  loop_ = std::make_unique<redis::EventLoop>(n);
  for (int i = 0; i < n; ++i) connections_.push_back(std::make_unique<redis::Connection>(*loop_, options_.connection));
}

RedisStore::~RedisStore() {
  connections_.clear();  // fails whatever is still pending, on the loop threads
  loop_.reset();
}

const RedisStore::Script* RedisStore::script(std::string_view name) const noexcept {
  for (const auto& s : scripts_) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

void RedisStore::check(std::vector<CheckItem> items, std::optional<Micros> now, CheckCallback done) {
  if (items.empty()) {
    done(CheckOutcome{algorithms::combine({}), {}});
    return;
  }
  if (auto ok = validate(items, now); !ok) {
    done(std::unexpected(ok.error()));
    return;
  }
  auto* call = new Call{std::move(items), now, std::move(done), 0, 0, false};
  call->deadline = redis::steady_micros() + options_.connection.command_timeout;
  call->connection = connections_.size() == 1 ? 0 : next_.fetch_add(1, std::memory_order_relaxed) % connections_.size();
  send(call, false);
}

void RedisStore::send(Call* call, bool retry) {
  const std::size_t n = call->items.size();
  const Script* s = script(n == 1 ? algorithms::to_string(call->items[0].limit.algorithm) : kMultiScript);
  if (s == nullptr) {
    auto done = std::move(call->done);
    const std::string name(n == 1 ? algorithms::to_string(call->items[0].limit.algorithm) : kMultiScript);
    delete call;
    done(make_error(ErrorCode::protocol, fmt::format("lua script '{}' is not embedded", name)));
    return;
  }
  // EVALSHA sha numkeys keys... args... (EVAL with the source when retrying after NOSCRIPT).
  const std::size_t argc = n == 1 ? 3 + 1 + 4 : 3 + n + 1 + 4 * n;
  std::string numbers;
  numbers.reserve((2 + 4 * n) * kNumberChars);
  std::array<std::string_view, 8> small;
  std::vector<std::string_view> large;
  std::string_view* argv = small.data();
  if (argc > small.size()) {
    large.resize(argc);
    argv = large.data();
  }
  std::size_t a = 0;
  argv[a++] = retry ? std::string_view("EVAL") : std::string_view("EVALSHA");
  argv[a++] = retry ? std::string_view(s->source) : std::string_view(s->sha);
  argv[a++] = append_number(numbers, static_cast<std::int64_t>(n));
  for (const auto& item : call->items) argv[a++] = item.key;
  const std::int64_t now = call->now ? *call->now : -1;
  if (n == 1) {
    const auto& item = call->items[0];
    argv[a++] = append_number(numbers, item.limit.capacity);
    argv[a++] = append_number(numbers, item.limit.period);
    argv[a++] = append_number(numbers, item.cost);
    argv[a++] = append_number(numbers, now);
  } else {
    argv[a++] = append_number(numbers, now);
    for (const auto& item : call->items) {
      argv[a++] = append_number(numbers, static_cast<std::int64_t>(item.limit.algorithm));
      argv[a++] = append_number(numbers, item.limit.capacity);
      argv[a++] = append_number(numbers, item.limit.period);
      argv[a++] = append_number(numbers, item.cost);
    }
  }
  const Micros left = std::max<Micros>(1, call->deadline - redis::steady_micros());
  connections_[call->connection]->command(std::span<const std::string_view>(argv, a),
                                          [this, call](Result<redis::Reply> reply) { on_reply(call, std::move(reply)); },
                                          left);
}

void RedisStore::on_reply(Call* call, Result<redis::Reply> reply) {
  if (reply && reply->is_error() && reply->error_code() == "NOSCRIPT" && !call->retried) {
    // The server lost its script cache (restart, failover, SCRIPT FLUSH): EVAL loads it.
    call->retried = true;
    noscript_reloads_.fetch_add(1, std::memory_order_relaxed);
    send(call, true);
    return;
  }
  auto done = std::move(call->done);
  const std::size_t n = call->items.size();
  delete call;
  if (!reply) {
    done(std::unexpected(std::move(reply.error())));
    return;
  }
  done(parse_outcome(*reply, n));
}

StoreHealth RedisStore::health() const {
  for (const auto& c : connections_) {
    if (c->state() != redis::ConnectionState::connected || c->breaker_state() != redis::CircuitBreaker::State::closed) {
      return {false, c->status()};
    }
  }
  return {true, "ok"};
}

}  // namespace ratekeeper::store
