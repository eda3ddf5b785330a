#include "redis/connection.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/generic/stream_protocol.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <deque>
#include <future>
#include <limits>
#include <mutex>

#include "ratekeeper/core/contained.hpp"
#include "ratekeeper/core/event_loop.hpp"
#include "connect.hpp"
#include "resp.hpp"
#include "transport.hpp"

namespace ratekeeper::redis {
namespace asio = boost::asio;
using boost::system::error_code;

namespace {

constexpr Micros kNever = std::numeric_limits<Micros>::max();
constexpr std::size_t kReadChunk = std::size_t{64} * 1024;

// The peer closed the connection: EOF, or over TLS a close without close_notify.
bool closed_by_server(const error_code& ec) {
  return ec == asio::error::eof || ec == asio::ssl::error::stream_truncated;
}

}  // namespace

std::string_view to_string(ConnectionState state) noexcept {
  switch (state) {
    case ConnectionState::connecting: return "connecting";
    case ConnectionState::connected: return "connected";
    case ConnectionState::backing_off: return "backing off";
    case ConnectionState::closed: return "closed";
  }
  return "unknown";
}

struct Connection::Impl : std::enable_shared_from_this<Impl> {
  struct Pending {
    ReplyCallback done;  // empty once completed (timed out): the reply is discarded
    Micros deadline = 0;
    bool probe = false;
  };

  Impl(asio::io_context& context, ConnectionOptions opts)
      : ctx(context),
        options(std::move(opts)),
        clock(clock_or_system(options.clock)),
        breaker(options.breaker),
        transport(ctx, options.tls),
        resolver(ctx),
        deadline_timer(ctx),
        connect_timer(ctx),
        reconnect_timer(ctx),
        read_buffer(kReadChunk) {
    if (options.broken_after <= 0) options.broken_after = std::max<Micros>(options.command_timeout, 200 * kMicrosPerMilli);
    backoff = options.reconnect_min;
  }

  asio::io_context& ctx;
  ConnectionOptions options;
  const Clock& clock;
  CircuitBreaker breaker;

  // Shared with callers, under `mu`.
  mutable std::mutex mu;
  ConnectionState state = ConnectionState::connecting;
  std::string write_buf;
  std::deque<Pending> pending;
  bool writing = false;
  bool kick_posted = false;
  Micros armed_deadline = kNever;  // when the deadline timer fires next
  Micros min_new_deadline = kNever;
  Error last_error{ErrorCode::unavailable, "connecting"};

  // Loop thread only.
  detail::Transport transport;
  asio::ip::tcp::resolver resolver;
  asio::steady_timer deadline_timer;
  asio::steady_timer connect_timer;
  asio::steady_timer reconnect_timer;
  std::vector<char> read_buffer;
  std::string inflight;
  detail::RespReader reader;
  std::uint64_t generation = 0;  // handlers of an older connection attempt are ignored
  int handshake_left = 0;
  std::vector<std::string> handshake_names;
  Micros backoff = 0;
  bool ever_connected = false;
  Micros connected_at = 0;

  std::atomic<std::uint64_t> commands{0};
  std::atomic<std::uint64_t> writes{0};
  std::atomic<std::uint64_t> timeouts{0};
  std::atomic<std::uint64_t> reconnects{0};
  std::atomic<ConnectionState> public_state{ConnectionState::connecting};

  void set_state(ConnectionState s) {  // under mu
    state = s;
    public_state.store(s, std::memory_order_release);
  }

  void finish(ReplyCallback& done, bool probe, Result<Reply> result) {
    if (result) {
      breaker.on_success(probe);
    } else {
      if (result.error().code == ErrorCode::timeout) timeouts.fetch_add(1, std::memory_order_relaxed);
      breaker.on_failure(probe, clock.steady());
    }
    // The callback is the caller's code: whatever it throws must not break this connection's
    // bookkeeping (other replies of the same read are still to be delivered).
    contain("a Redis reply callback", [&] { done(std::move(result)); });
  }

  // ---- callers ----

  void enqueue(std::span<const std::string_view> argv, ReplyCallback done, Micros timeout) {
    const Micros now = clock.steady();
    const auto admission = breaker.admit(now);
    if (!admission.admitted) {
      done(make_error(ErrorCode::circuit_open,
                      fmt::format("redis {}: circuit breaker open", options.endpoint.to_string())));
      return;
    }
    const Micros deadline = now + (timeout > 0 ? timeout : options.command_timeout);
    bool kick = false;
    {
      std::unique_lock lock(mu);
      if (state == ConnectionState::backing_off || state == ConnectionState::closed) {
        Error err = state == ConnectionState::closed
                        ? Error{ErrorCode::unavailable, fmt::format("redis {}: connection closed",
                                                                    options.endpoint.to_string())}
                        : last_error;
        lock.unlock();
        finish(done, admission.probe, std::unexpected(std::move(err)));
        return;
      }
      detail::append_command(write_buf, argv);
      pending.push_back(Pending{std::move(done), deadline, admission.probe});
      commands.fetch_add(1, std::memory_order_relaxed);
      if (deadline < min_new_deadline) min_new_deadline = deadline;
      if (!kick_posted && ((state == ConnectionState::connected && !writing) || deadline < armed_deadline)) {
        kick_posted = true;
        kick = true;
      }
    }
    if (kick) asio::post(ctx, [self = shared_from_this()] { self->on_kick(); });
  }

  // ---- loop thread ----

  void on_kick() {
    bool arm = false;
    Micros arm_at = kNever;
    {
      std::lock_guard lock(mu);
      kick_posted = false;
      if (min_new_deadline < armed_deadline) {
        armed_deadline = min_new_deadline;
        arm_at = armed_deadline;
        arm = true;
      }
      min_new_deadline = kNever;
      if (state == ConnectionState::connected) start_write_locked();
    }
    if (arm) arm_deadline_timer(arm_at);
  }

  // Under mu, loop thread: moves the queued commands into one write.
  void start_write_locked() {
    if (writing || write_buf.empty()) return;
    inflight.clear();
    inflight.swap(write_buf);
    writing = true;
    do_write(generation);
  }

  void do_write(std::uint64_t gen) {
    writes.fetch_add(1, std::memory_order_relaxed);
    transport.async_write(asio::buffer(inflight), [self = shared_from_this(), gen](const error_code& ec, std::size_t) {
      self->on_write(gen, ec);
    });
  }

  void on_write(std::uint64_t gen, const error_code& ec) {
    if (gen != generation) return;
    if (ec) {
      fail_connection(Error{ErrorCode::unavailable, fmt::format("redis {}: write failed: {}",
                                                                options.endpoint.to_string(), ec.message())});
      return;
    }
    std::lock_guard lock(mu);
    writing = false;
    if (state == ConnectionState::connected) start_write_locked();
  }

  void arm_deadline_timer(Micros at) {
    // Deadlines are instants of `clock`; the timer that checks them wakes by the system's
    // steady clock, after the time left (a manual clock that has not moved far enough leaves
    // the command pending and the timer re-armed).
    deadline_timer.expires_after(std::chrono::microseconds(std::max<Micros>(1, at - clock.steady())));
    deadline_timer.async_wait([self = shared_from_this()](const error_code& ec) {
      if (!ec) self->on_deadline();
    });
  }

  void on_deadline() {
    const Micros now = clock.steady();
    std::vector<Pending> expired;
    bool broken = false;
    Micros next = kNever;
    {
      std::lock_guard lock(mu);
      armed_deadline = kNever;
      for (auto& p : pending) {
        if (!p.done) continue;
        if (p.deadline <= now) {
          expired.push_back(Pending{std::move(p.done), p.deadline, p.probe});
          p.done = nullptr;
        } else {
          next = std::min(next, p.deadline);
        }
      }
      if (state == ConnectionState::connected && !pending.empty()) {
        // Commands queued while connecting were sent only at connected_at.
        const Micros sent_by = std::max(pending.front().deadline, connected_at + options.command_timeout);
        const Micros limit = sent_by + options.broken_after;
        if (limit <= now) {
          broken = true;
        } else {
          next = std::min(next, limit);
        }
      }
      if (min_new_deadline < next) next = min_new_deadline;
      min_new_deadline = kNever;
      if (!broken && next != kNever) armed_deadline = next;
    }
    for (auto& p : expired) {
      finish(p.done, p.probe,
             make_error(ErrorCode::timeout, fmt::format("redis {}: no reply within the deadline",
                                                        options.endpoint.to_string())));
    }
    if (broken) {
      fail_connection(Error{ErrorCode::unavailable,
                            fmt::format("redis {}: no reply for {} ms past a deadline, reconnecting",
                                        options.endpoint.to_string(), options.broken_after / kMicrosPerMilli)});
      return;
    }
    if (next != kNever) arm_deadline_timer(next);
  }

  // ---- connecting ----

  void start_attempt() {
    ++generation;
    {
      std::lock_guard lock(mu);
      if (state == ConnectionState::closed) return;
      set_state(ConnectionState::connecting);
    }
    const std::uint64_t gen = generation;
    connect_timer.expires_after(std::chrono::microseconds(options.connect_timeout));
    connect_timer.async_wait([self = shared_from_this(), gen](const error_code& ec) {
      if (ec || gen != self->generation) return;
      self->fail_connection(Error{ErrorCode::unavailable,
                                  fmt::format("redis {}: {} timed out after {} ms",
                                              self->options.endpoint.to_string(),
                                              self->transport.in_tls_handshake()
                                                  ? "TLS handshake (is it a TLS port?)"
                                                  : "connect",
                                              self->options.connect_timeout / kMicrosPerMilli)});
    });
    transport.open(resolver, options.endpoint, [self = shared_from_this(), gen](std::string error) {
      if (gen != self->generation) return;
      if (!error.empty()) {
        self->fail_connection(
            Error{ErrorCode::unavailable, fmt::format("redis {}: {}", self->options.endpoint.to_string(), error)});
        return;
      }
      self->on_connected(gen);
    });
  }

  void on_connected(std::uint64_t gen) {
    reader.reset();
    // Handshake: AUTH, SELECT, the extra commands, or a PING so a frozen server is noticed.
    std::string hello;
    handshake_names.clear();
    if (!options.credentials.empty()) {
      if (options.credentials.user.empty()) {
        std::string_view argv[] = {"AUTH", options.credentials.password};
        detail::append_command(hello, argv);
      } else {
        std::string_view argv[] = {"AUTH", options.credentials.user, options.credentials.password};
        detail::append_command(hello, argv);
      }
      handshake_names.emplace_back("AUTH");
    }
    if (options.db != 0) {
      const std::string db = std::to_string(options.db);
      std::string_view argv[] = {"SELECT", db};
      detail::append_command(hello, argv);
      handshake_names.push_back("SELECT " + db);
    }
    for (const auto& cmd : options.on_connect) {
      std::vector<std::string_view> argv(cmd.begin(), cmd.end());
      detail::append_command(hello, argv);
      handshake_names.push_back(cmd.empty() ? std::string{} : cmd[0]);
    }
    if (handshake_names.empty()) {
      std::string_view argv[] = {"PING"};
      detail::append_command(hello, argv);
      handshake_names.emplace_back("PING");
    }
    handshake_left = static_cast<int>(handshake_names.size());
    {
      std::lock_guard lock(mu);
      writing = true;
    }
    inflight = std::move(hello);
    do_write(gen);
    do_read(gen);
  }

  void on_handshake_reply(const Reply& reply) {
    const std::size_t index = handshake_names.size() - static_cast<std::size_t>(handshake_left);
    --handshake_left;
    if (reply.is_error()) {
      const std::string& what = handshake_names[index];
      const bool auth = what == "AUTH" || what.starts_with("SELECT") || reply_error(reply).code == ErrorCode::auth;
      fail_connection(Error{auth ? ErrorCode::auth : ErrorCode::reply,
                            fmt::format("redis {}: {} refused: {}", options.endpoint.to_string(), what, reply.str)});
      return;
    }
    if (handshake_left > 0) return;
    connect_timer.cancel();
    connected_at = clock.steady();
    backoff = options.reconnect_min;
    if (ever_connected) reconnects.fetch_add(1, std::memory_order_relaxed);
    ever_connected = true;
    bool arm = false;
    Micros arm_at = kNever;
    {
      std::lock_guard lock(mu);
      set_state(ConnectionState::connected);
      last_error = Error{ErrorCode::unavailable, "ok"};
      start_write_locked();
      // Commands queued while connecting may be overdue for the broken-connection check.
      if (!pending.empty() && armed_deadline == kNever) {
        armed_deadline = pending.front().deadline;
        arm_at = armed_deadline;
        arm = true;
      }
    }
    if (arm) arm_deadline_timer(arm_at);
  }

  void do_read(std::uint64_t gen) {
    transport.async_read_some(asio::buffer(read_buffer), [self = shared_from_this(), gen](const error_code& ec, std::size_t n) {
      self->on_read(gen, ec, n);
    });
  }

  // A reader's error, with the server it came from.
  Error named(const Error& e) const {
    return Error{e.code, fmt::format("redis {}: {}", options.endpoint.to_string(), e.message)};
  }

  void on_read(std::uint64_t gen, const error_code& ec, std::size_t n) {
    if (gen != generation) return;
    if (ec) {
      fail_connection(Error{ErrorCode::unavailable,
                            fmt::format("redis {}: connection lost: {}", options.endpoint.to_string(),
                                        closed_by_server(ec) ? std::string("closed by server") : ec.message())});
      return;
    }
    if (auto ok = reader.feed(read_buffer.data(), n); !ok) {
      fail_connection(named(ok.error()));
      return;
    }
    replies.clear();
    while (true) {
      auto next = reader.next();
      if (!next) {
        fail_connection(named(next.error()));
        return;
      }
      std::optional<Reply>& reply = *next;
      if (!reply) break;
      if (handshake_left > 0) {
        on_handshake_reply(*reply);
        if (gen != generation) return;
        continue;
      }
      replies.push_back(std::move(*reply));
    }
    if (!replies.empty()) {
      completing.clear();
      bool unexpected = false;
      {
        std::lock_guard lock(mu);
        for (std::size_t i = 0; i < replies.size(); ++i) {
          if (pending.empty()) {
            unexpected = true;
            break;
          }
          completing.push_back(std::move(pending.front()));
          pending.pop_front();
        }
      }
      for (std::size_t i = 0; i < completing.size(); ++i) {
        if (completing[i].done) finish(completing[i].done, completing[i].probe, std::move(replies[i]));
      }
      completing.clear();
      if (unexpected) {
        fail_connection(Error{ErrorCode::protocol, fmt::format("redis {}: reply without a command",
                                                               options.endpoint.to_string())});
        return;
      }
      if (gen != generation) return;
    }
    do_read(gen);
  }

  std::vector<Reply> replies;
  std::vector<Pending> completing;

  // Drops the socket, fails everything pending and schedules a reconnect.
  void fail_connection(const Error& error) {
    ++generation;
    transport.close();
    resolver.cancel();
    connect_timer.cancel();
    handshake_left = 0;
    std::deque<Pending> failed;
    bool closed = false;
    {
      std::lock_guard lock(mu);
      failed.swap(pending);
      write_buf.clear();
      writing = false;
      closed = state == ConnectionState::closed;
      if (!closed) set_state(ConnectionState::backing_off);
      last_error = error;
      if (last_error.code != ErrorCode::auth) last_error.code = ErrorCode::unavailable;
    }
    Error for_pending = error;
    if (for_pending.code == ErrorCode::protocol || for_pending.code == ErrorCode::timeout) {
      for_pending.code = ErrorCode::unavailable;
    }
    for (auto& p : failed) {
      if (p.done) finish(p.done, p.probe, std::unexpected(for_pending));
    }
    if (closed) return;
    const Micros delay = backoff;
    backoff = std::min(options.reconnect_max, std::max<Micros>(1, backoff * 2));
    reconnect_timer.expires_after(std::chrono::microseconds(delay));
    reconnect_timer.async_wait([self = shared_from_this()](const error_code& ec) {
      if (!ec) self->start_attempt();
    });
  }

  void close_now() {
    {
      std::lock_guard lock(mu);
      set_state(ConnectionState::closed);
    }
    reconnect_timer.cancel();
    deadline_timer.cancel();
    fail_connection(Error{ErrorCode::unavailable,
                          fmt::format("redis {}: connection closed", options.endpoint.to_string())});
  }
};

Connection::Connection(EventLoop& loop, ConnectionOptions options, std::size_t context)
    : impl_(std::make_shared<Impl>(context == EventLoop::kNoContext ? loop.next() : loop.context(context),
                                   std::move(options))) {
  asio::post(impl_->ctx, [self = impl_] { self->start_attempt(); });
}

Connection::~Connection() {
  detail::run_on_and_wait(impl_->ctx, [self = impl_] { self->close_now(); });
}

void Connection::command(std::span<const std::string_view> argv, ReplyCallback done, Micros timeout) {
  impl_->enqueue(argv, std::move(done), timeout);
}

Result<Reply> Connection::command_sync(std::span<const std::string_view> argv, Micros timeout) {
  std::promise<Result<Reply>> promise;
  auto future = promise.get_future();
  command(argv, [&promise](Result<Reply> r) { promise.set_value(std::move(r)); }, timeout);
  return future.get();
}

ConnectionState Connection::state() const noexcept { return impl_->public_state.load(std::memory_order_acquire); }

CircuitBreaker::State Connection::breaker_state() const noexcept { return impl_->breaker.state(impl_->clock.steady()); }

std::string Connection::status() const {
  const auto breaker = breaker_state();
  std::lock_guard lock(impl_->mu);
  if (impl_->state == ConnectionState::connected) {
    if (breaker == CircuitBreaker::State::closed) return "ok";
    return fmt::format("redis {}: circuit breaker {}", impl_->options.endpoint.to_string(),
                       breaker == CircuitBreaker::State::open ? "open" : "half-open");
  }
  if (impl_->state == ConnectionState::backing_off) return impl_->last_error.message;
  return fmt::format("redis {}: {}", impl_->options.endpoint.to_string(), to_string(impl_->state));
}

const ConnectionOptions& Connection::options() const noexcept { return impl_->options; }

Connection::Stats Connection::stats() const noexcept {
  Stats s;
  s.commands = impl_->commands.load(std::memory_order_relaxed);
  s.writes = impl_->writes.load(std::memory_order_relaxed);
  s.timeouts = impl_->timeouts.load(std::memory_order_relaxed);
  s.reconnects = impl_->reconnects.load(std::memory_order_relaxed);
  s.breaker_opened = impl_->breaker.opened_count();
  return s;
}

}  // namespace ratekeeper::redis
