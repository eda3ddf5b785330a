#include "server_core.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <boost/asio/post.hpp>
#include <cerrno>
#include <csignal>
#include <vector>

#include "ratekeeper/core/contained.hpp"
#include "ratekeeper/core/event_loop.hpp"
#include "core/tls_context.hpp"

namespace ratekeeper::http {

namespace net = boost::asio;
using tcp = net::ip::tcp;
using error_code = boost::system::error_code;

namespace {

// Accepting again after the process or system ran out of descriptors (or memory) waits, from
// the first delay doubling up to the last, instead of failing at once in a loop.
constexpr auto kAcceptBackoffMin = std::chrono::milliseconds(10);
constexpr auto kAcceptBackoffMax = std::chrono::milliseconds(500);
// Accept errors are logged at most once per interval, with how many happened.
constexpr auto kAcceptLogInterval = std::chrono::seconds(10);

// Accept errors are the system's (errno values): compared by value, without constructing
// other error categories to compare with.
bool out_of_resources(const error_code& ec) {
  const int e = ec.value();
  return e == EMFILE || e == ENFILE || e == ENOBUFS || e == ENOMEM;
}

}  // namespace

std::string format_endpoint(const tcp::endpoint& ep) {
  const auto addr = ep.address();
  if (addr.is_v6()) return fmt::format("[{}]:{}", addr.to_string(), ep.port());
  return fmt::format("{}:{}", addr.to_string(), ep.port());
}

void peer_of(const tcp::socket& socket, std::string& address, std::uint16_t& port) {
  error_code ec;
  const auto peer = socket.remote_endpoint(ec);
  if (ec) return;
  auto addr = peer.address();
  if (addr.is_v6() && addr.to_v6().is_v4_mapped()) {
    addr = net::ip::make_address_v4(net::ip::v4_mapped, addr.to_v6());
  }
  address = addr.to_string();
  port = peer.port();
}

ClientConnection::ClientConnection(std::shared_ptr<ServerCore> core) : core_(std::move(core)) {}

ClientConnection::~ClientConnection() {
  core_->unregister(this);
}

ServerCore::ServerCore(ServerOptions o, EventLoop& l)
    : options(std::move(o)),
      loop_(l),
      home_(loop_.context(0)),
      acceptor_(home_),
      signals_(home_),
      drain_timer_(home_),
      accept_timer_(home_) {}

void ServerCore::do_accept() {
  // The connection's socket belongs to the next thread round-robin; it runs there.
  acceptor_.async_accept(loop_.next(), [self = shared_from_this()](error_code ec, tcp::socket s) {
    self->on_accept(ec, std::move(s));
  });
}

void ServerCore::on_accept(error_code ec, tcp::socket socket) {
  if (ec == net::error::operation_aborted || !acceptor_.is_open()) return;
  if (ec) return on_accept_error(ec);
  accept_backoff_ = std::chrono::milliseconds(0);
  {
    std::shared_ptr<ClientConnection> connection;
    {
      std::lock_guard lock(mu_);
      if (stopping_) return;
      connection = make_connection(std::move(socket));
      connections_.emplace(connection.get(), connection);
    }
    accepted_.fetch_add(1, std::memory_order_relaxed);
    auto* c = connection.get();
    c->start();
  }
  do_accept();
}

// Out of descriptors, the pending connection stays queued and accepting again at once fails
// again at once: a spin. Instead accepting waits, backing off, while the connections already
// open are served; it resumes by itself once descriptors are free.
void ServerCore::on_accept_error(const error_code& ec) {
  accept_errors_.fetch_add(1, std::memory_order_relaxed);
  const auto now = std::chrono::steady_clock::now();
  if (out_of_resources(ec)) {
    accept_backoff_ = accept_backoff_.count() == 0
                          ? kAcceptBackoffMin
                          : std::min(accept_backoff_ * 2, kAcceptBackoffMax);
  } else {
    accept_backoff_ = kAcceptBackoffMin;  // other errors (a connection reset while queued)
  }
  const auto total = accept_errors_.load(std::memory_order_relaxed);
  if (now - accept_logged_at_ >= kAcceptLogInterval) {
    accept_logged_at_ = now;
    spdlog::warn("accepting connections on {}: {}; retrying every {} ms at most ({} accept "
                 "error(s) since the last report)",
                 address, ec.message(), accept_backoff_.count(), total - accept_errors_logged_);
    accept_errors_logged_ = total;
  }
  accept_timer_.expires_after(accept_backoff_);
  accept_timer_.async_wait([self = shared_from_this()](error_code wait_ec) {
    if (!wait_ec && self->acceptor_.is_open()) self->do_accept();
  });
}

void ServerCore::wait_signal() {
  signals_.async_wait([self = shared_from_this()](error_code wait_ec, int signo) {
    if (wait_ec) return;
    if (signo == SIGHUP) {
      if (self->options.on_reload) {
        spdlog::info("SIGHUP received: reloading the configuration");
        contain("the SIGHUP reload hook", [&] { self->options.on_reload(); });
      } else {
        spdlog::warn("SIGHUP received: the configuration is not reloaded while running; serving "
                     "on with the configuration loaded at start");
      }
      self->wait_signal();
      return;
    }
    self->stop();
  });
}

void ServerCore::stop() {
  net::post(home_, [self = shared_from_this()] { self->on_stop(); });
}

void ServerCore::on_stop() {
  std::vector<std::shared_ptr<ClientConnection>> live;
  {
    std::lock_guard lock(mu_);
    if (stopping_) return;
    stopping_ = true;
    for (auto& [ptr, weak] : connections_) {
      if (auto c = weak.lock()) live.push_back(std::move(c));
    }
  }
  // Connections learn of the drain before the acceptor closes (shutdown() marks each before
  // returning): whoever sees a connection refused can rely on every response written
  // afterwards saying Connection: close.
  for (auto& c : live) c->shutdown();
  live.clear();
  error_code ec;
  acceptor_.close(ec);
  accept_timer_.cancel();
  signals_.cancel(ec);
  drain_timer_.expires_after(to_duration(options.drain_timeout));
  drain_timer_.async_wait([self = shared_from_this()](error_code wait_ec) {
    if (!wait_ec) self->finish();  // drain timeout: abandon what is left
  });
  std::lock_guard lock(mu_);
  if (connections_.empty()) net::post(home_, [self = shared_from_this()] { self->finish(); });
}

void ServerCore::finish() {
  drain_timer_.cancel();
  std::lock_guard lock(mu_);
  finished_ = true;
  finished_cv_.notify_all();
}

bool ServerCore::adopt(const std::shared_ptr<ClientConnection>& c) {
  std::lock_guard lock(mu_);
  if (stopping_) return false;
  connections_.emplace(c.get(), c);
  return true;
}

void ServerCore::unregister(ClientConnection* c) {
  std::lock_guard lock(mu_);
  connections_.erase(c);
  if (stopping_ && connections_.empty() && !destroying.load()) {
    net::post(home_, [self = shared_from_this()] { self->finish(); });
  }
}

void ServerCore::destroy(EventLoop& loop) {
  destroying.store(true);
  // Close the listener and whatever the drain left; connections still referenced by pending
  // work (a store callback) end when it completes, and keep the core alive until then.
  std::vector<std::shared_ptr<ClientConnection>> live;
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    for (auto& [ptr, weak] : connections_) {
      if (auto c = weak.lock()) live.push_back(std::move(c));
    }
  }
  net::post(home_, [self = shared_from_this()] {
    error_code ec;
    self->acceptor_.close(ec);
    self->accept_timer_.cancel();
    self->signals_.cancel(ec);
    self->drain_timer_.cancel();
  });
  for (auto& c : live) c->abort();
  live.clear();
  // Twice: the closes run, then the completions they cancelled.
  if (!loop.on_loop_thread()) {
    loop.barrier();
    loop.barrier();
  }
}

Stream ServerCore::accept_stream(tcp::socket&& socket, std::shared_ptr<TlsServerContext>& tls) {
  if (!options.tls) return Stream(std::move(socket));
  tls = options.tls();
  return Stream(std::move(socket), tls->context());
}

void ServerCore::tls_handshake_failed(const error_code& ec, Stream& stream, const std::string& peer) {
  tls_handshake_failures.fetch_add(1, std::memory_order_relaxed);
  std::uint64_t suppressed = 0;
  if (!tls_log_.admit(suppressed)) return;
  const std::string why = ec == boost::beast::error::timeout
                              ? std::string("timed out")
                              : handshake_failure(stream.tls()->native_handle(), ec);
  spdlog::warn("TLS handshake with {} on {} failed: {}{}", peer.empty() ? "a client" : peer, address, why,
               suppressed > 0 ? fmt::format(" ({} more failed handshakes not logged)", suppressed) : "");
}

Result<void> ServerCore::listen() {
  error_code ec;
  tcp::resolver resolver(home_);
  auto results = resolver.resolve(options.host, std::to_string(options.port),
                                  tcp::resolver::passive | tcp::resolver::numeric_service, ec);
  if (ec || results.empty()) {
    return make_error(ErrorCode::invalid_argument,
                      fmt::format("listen address {}:{}: {}", options.host, options.port,
                                  ec ? ec.message() : "no address"));
  }
  const tcp::endpoint endpoint = results.begin()->endpoint();
  acceptor_.open(endpoint.protocol(), ec);
  if (!ec) acceptor_.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) acceptor_.bind(endpoint, ec);
  if (!ec) acceptor_.listen(net::socket_base::max_listen_connections, ec);
  if (ec) {
    error_code ignored;
    acceptor_.close(ignored);
    return make_error(ErrorCode::unavailable, fmt::format("cannot listen on {}: {}",
                                                          format_endpoint(endpoint), ec.message()));
  }
  if (options.handle_signals) {
    signals_.add(SIGINT, ec);
    if (!ec) signals_.add(SIGTERM, ec);
    if (!ec) signals_.add(SIGHUP, ec);
    if (ec) {
      return make_error(ErrorCode::unavailable,
                        "cannot handle SIGINT/SIGTERM/SIGHUP: " + ec.message());
    }
  }
  const auto local = acceptor_.local_endpoint(ec);
  address = format_endpoint(local);
  port = local.port();
  return {};
}

void ServerCore::run() {
  net::post(home_, [self = shared_from_this()] {
    self->do_accept();
    if (self->options.handle_signals) self->wait_signal();
  });
  std::unique_lock lock(mu_);
  finished_cv_.wait(lock, [this] { return finished_; });
}

Server::Stats ServerCore::stats() const {
  Server::Stats s;
  s.connections_accepted = accepted_.load(std::memory_order_relaxed);
  s.requests = requests.load(std::memory_order_relaxed);
  s.accept_errors = accept_errors_.load(std::memory_order_relaxed);
  s.handler_exceptions = handler_exceptions.load(std::memory_order_relaxed);
  s.tls_handshake_failures = tls_handshake_failures.load(std::memory_order_relaxed);
  std::lock_guard lock(mu_);
  s.connections_open = connections_.size();
  return s;
}

}  // namespace ratekeeper::http
