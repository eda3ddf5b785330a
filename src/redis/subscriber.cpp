#include "subscriber.hpp"

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
#include <mutex>

#include "connect.hpp"
#include "resp.hpp"
#include "transport.hpp"

namespace ratekeeper::redis::detail {
namespace asio = boost::asio;
using boost::system::error_code;

struct Subscriber::Impl : std::enable_shared_from_this<Impl> {
  Impl(asio::io_context& context, SubscriberOptions opts, MessageCallback message, SubscribedCallback subscribed)
      : ctx(context),
        options(std::move(opts)),
        on_message(std::move(message)),
        on_subscribed(std::move(subscribed)),
        transport(ctx, options.tls),
        resolver(ctx),
        connect_timer(ctx),
        reconnect_timer(ctx),
        ping_timer(ctx),
        read_buffer(std::size_t{16} * 1024) {
    options.reconnect_min = std::max<Micros>(1, options.reconnect_min);
    options.reconnect_max = std::max(options.reconnect_min, options.reconnect_max);
    if (options.ping_interval <= 0) options.ping_interval = 2 * kMicrosPerSecond;
    backoff = options.reconnect_min;
    status_text = fmt::format("subscribing to {}", options.endpoint.to_string());
  }

  asio::io_context& ctx;
  SubscriberOptions options;
  MessageCallback on_message;
  SubscribedCallback on_subscribed;

  // Loop thread only.
  Transport transport;
  asio::ip::tcp::resolver resolver;
  asio::steady_timer connect_timer;
  asio::steady_timer reconnect_timer;
  asio::steady_timer ping_timer;
  std::vector<char> read_buffer;
  std::string inflight;  // being written
  std::string queued;    // written once `inflight` is
  bool writing = false;
  RespReader reader;
  std::uint64_t generation = 0;  // handlers of an older connection are ignored
  Micros backoff = 0;
  bool closed = false;
  bool awaiting_auth = false;
  std::size_t confirmations_left = 0;
  bool heard = false;  // bytes received since the last PING
  bool ever_subscribed = false;

  mutable std::mutex mu;
  std::string status_text;  // under mu
  std::atomic<bool> is_subscribed{false};
  std::atomic<std::uint64_t> messages{0}, subscriptions{0}, failures{0};

  const Endpoint& endpoint() const { return options.endpoint; }

  void set_status(std::string text) {
    std::lock_guard lock(mu);
    status_text = std::move(text);
  }

  // ---- connecting ----

  void start_attempt() {
    if (closed) return;
    const std::uint64_t gen = ++generation;
    set_status(fmt::format("subscribing to {}", endpoint().to_string()));
    connect_timer.expires_after(std::chrono::microseconds(options.connect_timeout));
    connect_timer.async_wait([self = shared_from_this(), gen](const error_code& ec) {
      if (ec || gen != self->generation) return;
      self->fail(fmt::format("redis {}: no subscription within {} ms", self->endpoint().to_string(),
                             self->options.connect_timeout / kMicrosPerMilli));
    });
    transport.open(resolver, endpoint(), [self = shared_from_this(), gen](std::string error) {
      if (gen != self->generation) return;
      if (!error.empty()) {
        self->fail(fmt::format("redis {}: {}", self->endpoint().to_string(), error));
        return;
      }
      self->on_connected(gen);
    });
  }

  void on_connected(std::uint64_t gen) {
    reader.reset();
    std::string hello;
    awaiting_auth = !options.credentials.empty();
    if (awaiting_auth) {
      if (options.credentials.user.empty()) {
        std::string_view argv[] = {"AUTH", options.credentials.password};
        append_command(hello, argv);
      } else {
        std::string_view argv[] = {"AUTH", options.credentials.user, options.credentials.password};
        append_command(hello, argv);
      }
    }
    std::vector<std::string_view> argv{"SUBSCRIBE"};
    for (const auto& c : options.channels) argv.emplace_back(c);
    append_command(hello, argv);
    confirmations_left = options.channels.size();
    writing = false;
    queued.clear();
    write(gen, std::move(hello));
    do_read(gen);
  }

  // ---- writing (the handshake, then PINGs) ----

  void write(std::uint64_t gen, std::string data) {
    if (writing) {
      queued += data;
      return;
    }
    writing = true;
    inflight = std::move(data);
    transport.async_write(asio::buffer(inflight), [self = shared_from_this(), gen](const error_code& ec, std::size_t) {
      if (gen != self->generation) return;
      self->writing = false;
      if (ec) {
        self->fail(fmt::format("redis {}: write failed: {}", self->endpoint().to_string(), ec.message()));
        return;
      }
      if (!self->queued.empty()) {
        std::string next;
        next.swap(self->queued);
        self->write(gen, std::move(next));
      }
    });
  }

  void arm_ping(std::uint64_t gen) {
    ping_timer.expires_after(std::chrono::microseconds(options.ping_interval));
    ping_timer.async_wait([self = shared_from_this(), gen](const error_code& ec) {
      if (ec || gen != self->generation) return;
      if (!self->heard) {
        self->fail(fmt::format("redis {}: no reply to PING within {} ms", self->endpoint().to_string(),
                               self->options.ping_interval / kMicrosPerMilli));
        return;
      }
      self->heard = false;
      std::string ping;
      std::string_view argv[] = {"PING"};
      append_command(ping, argv);
      self->write(gen, std::move(ping));
      self->arm_ping(gen);
    });
  }

  // ---- reading ----

  void do_read(std::uint64_t gen) {
    transport.async_read_some(asio::buffer(read_buffer), [self = shared_from_this(), gen](const error_code& ec, std::size_t n) {
      self->on_read(gen, ec, n);
    });
  }

  void on_read(std::uint64_t gen, const error_code& ec, std::size_t n) {
    if (gen != generation) return;
    if (ec) {
      fail(fmt::format("redis {}: subscription lost: {}", endpoint().to_string(),
                       ec == asio::error::eof || ec == asio::ssl::error::stream_truncated
                           ? std::string("closed by server")
                           : ec.message()));
      return;
    }
    heard = true;
    if (auto ok = reader.feed(read_buffer.data(), n); !ok) {
      fail(ok.error().message);
      return;
    }
    while (true) {
      auto next = reader.next();
      if (!next) {
        fail(next.error().message);
        return;
      }
      std::optional<Reply>& reply = *next;
      if (!reply) break;
      on_reply(*reply);
      if (gen != generation) return;  // failed or closed while handling it
    }
    do_read(gen);
  }

  void on_reply(const Reply& reply) {
    if (awaiting_auth) {
      awaiting_auth = false;
      if (reply.is_error()) fail(fmt::format("redis {}: AUTH refused: {}", endpoint().to_string(), reply.str));
      return;
    }
    if (reply.is_error()) {
      fail(fmt::format("redis {}: {}", endpoint().to_string(), reply.str));
      return;
    }
    if (!reply.is_array() || reply.elements.empty()) {
      fail(fmt::format("redis {}: unexpected reply in subscribed mode: {}", endpoint().to_string(), reply.to_string()));
      return;
    }
    const std::string& kind = reply.elements[0].str;
    if (kind == "message" && reply.elements.size() == 3) {
      messages.fetch_add(1, std::memory_order_relaxed);
      if (on_message) on_message(reply.elements[1].str, reply.elements[2].str);
      return;
    }
    if (kind == "subscribe" && confirmations_left > 0 && --confirmations_left == 0) on_confirmed();
    // "pong" (the reply to PING while subscribed) and anything else: the connection is alive.
  }

  void on_confirmed() {
    connect_timer.cancel();
    backoff = options.reconnect_min;
    subscriptions.fetch_add(1, std::memory_order_relaxed);
    is_subscribed.store(true, std::memory_order_release);
    set_status(fmt::format("subscribed to {}", endpoint().to_string()));
    heard = true;
    arm_ping(generation);
    const bool first = !ever_subscribed;
    ever_subscribed = true;
    if (on_subscribed) on_subscribed(first);
  }

  // ---- failing and closing ----

  void teardown() {
    ++generation;
    transport.close();
    resolver.cancel();
    connect_timer.cancel();
    ping_timer.cancel();
    writing = false;
    queued.clear();
    awaiting_auth = false;
    is_subscribed.store(false, std::memory_order_release);
  }

  // Drops the connection and connects again after the backoff.
  void fail(std::string why) {
    teardown();
    failures.fetch_add(1, std::memory_order_relaxed);
    set_status(std::move(why));
    if (closed) return;
    const Micros delay = backoff;
    backoff = std::min(options.reconnect_max, backoff * 2);
    reconnect_timer.expires_after(std::chrono::microseconds(delay));
    reconnect_timer.async_wait([self = shared_from_this()](const error_code& ec) {
      if (!ec) self->start_attempt();
    });
  }

  void close_now() {
    closed = true;
    reconnect_timer.cancel();
    teardown();
    set_status("closed");
    on_message = nullptr;
    on_subscribed = nullptr;
  }
};

Subscriber::Subscriber(asio::io_context& context, SubscriberOptions options, MessageCallback on_message,
                       SubscribedCallback on_subscribed)
    : impl_(std::make_shared<Impl>(context, std::move(options), std::move(on_message), std::move(on_subscribed))) {
  asio::post(impl_->ctx, [self = impl_] { self->start_attempt(); });
}

Subscriber::~Subscriber() {
  detail::run_on_and_wait(impl_->ctx, [self = impl_] { self->close_now(); });
}

bool Subscriber::subscribed() const noexcept { return impl_->is_subscribed.load(std::memory_order_acquire); }

std::string Subscriber::status() const {
  std::lock_guard lock(impl_->mu);
  return impl_->status_text;
}

Subscriber::Stats Subscriber::stats() const noexcept {
  auto r = [](const std::atomic<std::uint64_t>& a) { return a.load(std::memory_order_relaxed); };
  return Stats{r(impl_->messages), r(impl_->subscriptions), r(impl_->failures)};
}

}  // namespace ratekeeper::redis::detail
