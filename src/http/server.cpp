// The Beast transport behind http::Server: a listener accepting connections and handing each
// to the next thread of the event loop, one session per connection, driven by that thread
// alone (one io_context per thread: no strand needed). Sessions read ahead up to
// max_pipelined requests, hand each to the handler, and write the responses back in request
// order.

#include "ratekeeper/http/server.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <cerrno>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <unordered_map>

#include "ratekeeper/core/contained.hpp"
#include "ratekeeper/core/event_loop.hpp"
#include "request_parser.hpp"

namespace ratekeeper::http {

namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

namespace {

std::string format_endpoint(const tcp::endpoint& ep) {
  const auto addr = ep.address();
  if (addr.is_v6()) return fmt::format("[{}]:{}", addr.to_string(), ep.port());
  return fmt::format("{}:{}", addr.to_string(), ep.port());
}

std::chrono::microseconds to_duration(Micros us) {
  return std::chrono::microseconds(us);
}

// After an error response that closes the connection while the client may still be sending
// (an oversized body, say), the rest is read and discarded, up to this much for this long,
// before the socket is closed: closing with unread data would reset the connection and could
// destroy the response before the client reads it.
constexpr std::size_t kLingerBytes = std::size_t{16} * 1024 * 1024;
constexpr auto kLingerTime = std::chrono::seconds(2);

// Accepting again after the process or system ran out of descriptors (or memory) waits, from
// the first delay doubling up to the last, instead of failing at once in a loop.
constexpr auto kAcceptBackoffMin = std::chrono::milliseconds(10);
constexpr auto kAcceptBackoffMax = std::chrono::milliseconds(500);
// Accept errors are logged at most once per interval, with how many happened.
constexpr auto kAcceptLogInterval = std::chrono::seconds(10);

// Accept errors are the system's (errno values): compared by value, without constructing
// other error categories to compare with.
bool out_of_resources(const beast::error_code& ec) {
  const int e = ec.value();
  return e == EMFILE || e == ENFILE || e == ENOBUFS || e == ENOMEM;
}

}  // namespace

class Session;

struct Server::Impl : std::enable_shared_from_this<Server::Impl> {
  Impl(ServerOptions o, Handler h, EventLoop& l)
      : options(std::move(o)),
        handler(std::move(h)),
        loop(l),
        home(loop.context(0)),
        acceptor(home),
        signals(home),
        drain_timer(home),
        accept_timer(home) {}

  void do_accept();
  void on_accept(beast::error_code ec, tcp::socket socket);
  void on_accept_error(const beast::error_code& ec);
  void wait_signal();
  void stop();
  void on_stop();
  void finish();
  void unregister(Session* s);

  ServerOptions options;
  Handler handler;
  std::string address;
  std::uint16_t port = 0;

  std::atomic<std::uint64_t> accepted{0};
  std::atomic<std::uint64_t> requests{0};
  std::atomic<std::uint64_t> accept_errors{0};
  std::atomic<std::uint64_t> handler_exceptions{0};
  std::atomic<bool> destroying{false};  // nothing may be posted any more

  // Live sessions, for the drain. Sessions keep the Impl alive (shared_ptr), so they may
  // outlive the Server on a shared loop and still unregister here.
  std::mutex mu;
  std::unordered_map<Session*, std::weak_ptr<Session>> sessions;
  bool stopping = false;
  bool finished = false;  // run() may return
  std::condition_variable finished_cv;

  EventLoop& loop;  // owned by the Server or shared with it; outlives every session
  net::io_context& home;  // the listener's thread: acceptor, signals, drain timer
  tcp::acceptor acceptor;
  net::signal_set signals;
  net::steady_timer drain_timer;
  // Accept errors: backoff and rate-limited logging (listener thread only).
  net::steady_timer accept_timer;
  std::chrono::milliseconds accept_backoff{0};
  std::chrono::steady_clock::time_point accept_logged_at{};
  std::uint64_t accept_errors_logged = 0;
};

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(std::shared_ptr<Server::Impl> server, tcp::socket&& socket)
      : owner_(std::move(server)), server_(*owner_), stream_(std::move(socket)) {
    beast::error_code ec;
    const auto peer = stream_.socket().remote_endpoint(ec);
    if (!ec) {
      auto addr = peer.address();
      if (addr.is_v6() && addr.to_v6().is_v4_mapped()) {
        addr = net::ip::make_address_v4(net::ip::v4_mapped, addr.to_v6());
      }
      peer_address_ = addr.to_string();
      peer_port_ = peer.port();
    }
    stream_.socket().set_option(tcp::no_delay(true), ec);
  }

  ~Session() { server_.unregister(this); }

  void start() {
    net::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->do_read(); });
  }

  // Graceful drain: finish what was received, read nothing more, close when idle.
  void shutdown() {
    net::post(stream_.get_executor(), [self = shared_from_this()] {
      self->draining_ = true;
      // Idle: nothing queued and no request partly received.
      const bool receiving = self->reading_ && self->parser_ && self->parser_->got_some();
      if (self->queue_.empty() && !receiving) self->close();
    });
  }

  // From any thread: close now, whatever is in flight (the server is going away).
  void abort() {
    net::post(stream_.get_executor(), [self = shared_from_this()] { self->close(); });
  }

  // From any thread: the response to request `id`. On the connection's own thread (a store
  // answered inline, or a Redis reply arrived on the shared loop) it is handled at once;
  // from any other thread it is posted there.
  void post_response(std::uint64_t id, Response response) {
    net::dispatch(stream_.get_executor(),
                  [self = shared_from_this(), id, response = std::move(response)]() mutable {
                    self->on_response(id, std::move(response));
                  });
  }

 private:
  struct Slot {
    std::uint64_t id = 0;
    unsigned version = 11;
    bool keep_alive = true;
    std::optional<bhttp::response<bhttp::string_body>> response;
  };

  // Calls the responder once; a responder dropped unanswered answers 500.
  struct Pending {
    Pending(std::shared_ptr<Session> s, std::uint64_t i) : session(std::move(s)), id(i) {}
    ~Pending() {
      if (!answered.exchange(true) && !session->server_.destroying.load()) {
        session->post_response(
            id, Response{500, "application/json", {}, R"({"error":"Internal server error"})"});
      }
    }
    void deliver(Response r) {
      if (!answered.exchange(true)) session->post_response(id, std::move(r));
    }
    std::shared_ptr<Session> session;
    std::uint64_t id;
    std::atomic<bool> answered{false};
  };

  void do_read() {
    if (reading_ || read_closed_ || draining_ || closed_) return;
    if (queue_.size() >= server_.options.max_pipelined) return;
    parser_.emplace(static_cast<std::uint32_t>(server_.options.header_limit),
                    server_.options.body_limit);
    stream_.expires_after(to_duration(server_.options.read_timeout));
    reading_ = true;
    bhttp::async_read(stream_, buffer_, *parser_,
                      beast::bind_front_handler(&Session::on_read, shared_from_this()));
  }

  void on_read(beast::error_code ec, std::size_t) {
    reading_ = false;
    if (ec) {
      read_closed_ = true;
      if (ec == bhttp::error::header_limit) {
        enqueue_error(431, R"({"error":"Request header fields too large"})");
      } else if (ec == bhttp::error::body_limit) {
        enqueue_error(413, R"({"error":"Payload too large"})");
      } else if (ec.category() == bhttp::make_error_code(bhttp::error::bad_target).category() &&
                 ec != bhttp::error::end_of_stream && ec != bhttp::error::partial_message) {
        enqueue_error(400, R"({"error":"Bad request"})");
      }
      if (queue_.empty()) close();
      return;
    }
    if (closed_) return;
    Slot slot;
    slot.id = next_id_++;
    slot.version = parser_->version();
    slot.keep_alive = parser_->keep_alive();
    if (!slot.keep_alive) read_closed_ = true;
    queue_.push_back(std::move(slot));

    Request request = parser_->release();
    parser_.reset();
    server_.requests.fetch_add(1, std::memory_order_relaxed);
    request.peer_address = peer_address_;
    request.peer_port = peer_port_;

    auto pending = std::make_shared<Pending>(shared_from_this(), queue_.back().id);
    const bool returned = contain("the HTTP request handler", [&] {
      server_.handler(std::move(request),
                      [pending](Response r) { pending->deliver(std::move(r)); });
    });
    if (!returned) {
      server_.handler_exceptions.fetch_add(1, std::memory_order_relaxed);
      pending->deliver(internal_error());
    }
    pending.reset();
    do_read();
  }

  static Response internal_error() {
    return Response{500, "application/json", {}, R"({"error":"Internal server error"})"};
  }

  // A response to a request that could not be read: the connection closes after it, lingering
  // so that the client still receives it.
  void enqueue_error(int status, std::string body) {
    Slot slot;
    slot.id = next_id_++;
    slot.keep_alive = false;
    queue_.push_back(std::move(slot));
    fill(queue_.back(), Response{status, "application/json", {}, std::move(body)});
    linger_ = true;
    do_write();
  }

  // Builds the wire response; a response that cannot be built (a header Beast refuses) is
  // answered 500 instead.
  void fill(Slot& slot, Response r) {
    const bool built = contain("building an HTTP response", [&] { build(slot, std::move(r)); });
    if (!built) {
      server_.handler_exceptions.fetch_add(1, std::memory_order_relaxed);
      build(slot, internal_error());
    }
  }

  static void build(Slot& slot, Response r) {
    auto& res = slot.response.emplace();
    res.version(slot.version);
    res.result(static_cast<unsigned>(r.status));
    res.set(bhttp::field::server, "ratekeeper");
    if (!r.content_type.empty()) res.set(bhttp::field::content_type, r.content_type);
    for (auto& [name, value] : r.headers) res.insert(name, value);
    res.body() = std::move(r.body);
    res.prepare_payload();
  }

  void on_response(std::uint64_t id, Response r) {
    for (auto& slot : queue_) {
      if (slot.id == id) {
        if (!slot.response) fill(slot, std::move(r));
        break;
      }
    }
    do_write();
  }

  void do_write() {
    if (writing_ || closed_ || queue_.empty() || !queue_.front().response) return;
    auto& slot = queue_.front();
    // While draining, the last response read says Connection: close.
    const bool last = draining_ && queue_.size() == 1;
    close_after_write_ = !slot.keep_alive || last || (read_closed_ && queue_.size() == 1);
    slot.response->keep_alive(!close_after_write_);
    writing_ = true;
    stream_.expires_after(to_duration(server_.options.read_timeout));
    bhttp::async_write(stream_, *slot.response,
                       beast::bind_front_handler(&Session::on_write, shared_from_this()));
  }

  void on_write(beast::error_code ec, std::size_t) {
    writing_ = false;
    queue_.pop_front();
    if (!ec && close_after_write_ && linger_) {
      linger();
      return;
    }
    if (ec || close_after_write_) {
      close();
      return;
    }
    do_write();
    do_read();
    if (draining_ && queue_.empty()) close();
  }

  // Half-closes, then reads and discards what the client still sends until it closes, the
  // byte budget is spent or the time is up; then closes.
  void linger() {
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
    if (ec) return close();
    lingered_ = 0;
    stream_.expires_after(kLingerTime);
    read_discard();
  }

  void read_discard() {
    discard_.resize(std::size_t{16} * 1024);
    stream_.async_read_some(
        net::buffer(discard_), [self = shared_from_this()](beast::error_code ec, std::size_t n) {
          self->lingered_ += n;
          if (ec || self->closed_ || self->lingered_ >= kLingerBytes) return self->close();
          self->read_discard();
        });
  }

  void close() {
    if (closed_) return;
    closed_ = true;
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
    stream_.socket().close(ec);
  }

  std::shared_ptr<Server::Impl> owner_;
  Server::Impl& server_;
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::optional<RequestParser> parser_;
  std::string discard_;  // lingering close: what the client still sends after an error
  std::size_t lingered_ = 0;
  std::deque<Slot> queue_;
  std::uint64_t next_id_ = 0;
  std::string peer_address_;
  std::uint16_t peer_port_ = 0;
  bool reading_ = false;
  bool writing_ = false;
  bool read_closed_ = false;  // no more requests on this connection
  bool draining_ = false;
  bool closed_ = false;
  bool close_after_write_ = false;
  bool linger_ = false;  // the close after the next write lingers (see linger())
};

void Server::Impl::do_accept() {
  // The connection's socket belongs to the next thread round-robin; its session runs there.
  acceptor.async_accept(loop.next(), beast::bind_front_handler(&Impl::on_accept, shared_from_this()));
}

void Server::Impl::on_accept(beast::error_code ec, tcp::socket socket) {
  if (ec == net::error::operation_aborted || !acceptor.is_open()) return;
  if (ec) return on_accept_error(ec);
  accept_backoff = std::chrono::milliseconds(0);
  {
    std::shared_ptr<Session> session;
    {
      std::lock_guard lock(mu);
      if (stopping) return;
      session = std::make_shared<Session>(shared_from_this(), std::move(socket));
      sessions.emplace(session.get(), session);
    }
    accepted.fetch_add(1, std::memory_order_relaxed);
    session->start();
  }
  do_accept();
}

// Out of descriptors, the pending connection stays queued and accepting again at once fails
// again at once: a spin. Instead accepting waits, backing off, while the connections already
// open are served; it resumes by itself once descriptors are free.
void Server::Impl::on_accept_error(const beast::error_code& ec) {
  accept_errors.fetch_add(1, std::memory_order_relaxed);
  const auto now = std::chrono::steady_clock::now();
  const bool resources = out_of_resources(ec);
  if (resources) {
    accept_backoff = accept_backoff.count() == 0 ? kAcceptBackoffMin
                                                 : std::min(accept_backoff * 2, kAcceptBackoffMax);
  } else {
    accept_backoff = kAcceptBackoffMin;  // other errors (a connection reset while queued)
  }
  const auto total = accept_errors.load(std::memory_order_relaxed);
  if (now - accept_logged_at >= kAcceptLogInterval) {
    accept_logged_at = now;
    spdlog::warn("accepting connections on {}: {}; retrying every {} ms at most ({} accept "
                 "error(s) since the last report)",
                 address, ec.message(), accept_backoff.count(), total - accept_errors_logged);
    accept_errors_logged = total;
  }
  accept_timer.expires_after(accept_backoff);
  accept_timer.async_wait([self = shared_from_this()](beast::error_code wait_ec) {
    if (!wait_ec && self->acceptor.is_open()) self->do_accept();
  });
}

void Server::Impl::wait_signal() {
  signals.async_wait([self = shared_from_this()](beast::error_code wait_ec, int signo) {
    if (wait_ec) return;
    if (signo == SIGHUP) {
      spdlog::warn("SIGHUP received: the configuration is not reloaded while running; serving "
                   "on with the configuration loaded at start");
      self->wait_signal();
      return;
    }
    self->stop();
  });
}

void Server::Impl::stop() {
  net::post(home, [self = shared_from_this()] { self->on_stop(); });
}

void Server::Impl::on_stop() {
  std::vector<std::shared_ptr<Session>> live;
  {
    std::lock_guard lock(mu);
    if (stopping) return;
    stopping = true;
    for (auto& [ptr, weak] : sessions) {
      if (auto s = weak.lock()) live.push_back(std::move(s));
    }
  }
  // Sessions learn of the drain before the acceptor closes: whoever sees a connection refused
  // can rely on every response built afterwards saying Connection: close.
  for (auto& s : live) s->shutdown();
  live.clear();
  beast::error_code ec;
  acceptor.close(ec);
  accept_timer.cancel();
  signals.cancel(ec);
  drain_timer.expires_after(to_duration(options.drain_timeout));
  drain_timer.async_wait([self = shared_from_this()](beast::error_code wait_ec) {
    if (!wait_ec) self->finish();  // drain timeout: abandon what is left
  });
  std::lock_guard lock(mu);
  if (sessions.empty()) net::post(home, [self = shared_from_this()] { self->finish(); });
}

void Server::Impl::finish() {
  drain_timer.cancel();
  std::lock_guard lock(mu);
  finished = true;
  finished_cv.notify_all();
}

void Server::Impl::unregister(Session* s) {
  std::lock_guard lock(mu);
  sessions.erase(s);
  if (stopping && sessions.empty() && !destroying.load()) {
    net::post(home, [self = shared_from_this()] { self->finish(); });
  }
}

Server::Server(ServerOptions options, Handler handler)
    : loop_(options.loop ? options.loop : std::make_shared<EventLoop>(std::max(1, options.threads))),
      impl_(std::make_shared<Impl>(std::move(options), std::move(handler), *loop_)) {}

Server::~Server() {
  auto& im = *impl_;
  im.destroying.store(true);
  // Close the listener and whatever the drain left; sessions still referenced by pending
  // work (a store callback) end when it completes, and keep the Impl alive until then.
  std::vector<std::shared_ptr<Session>> live;
  {
    std::lock_guard lock(im.mu);
    im.stopping = true;
    for (auto& [ptr, weak] : im.sessions) {
      if (auto s = weak.lock()) live.push_back(std::move(s));
    }
  }
  net::post(im.home, [self = impl_] {
    beast::error_code ec;
    self->acceptor.close(ec);
    self->accept_timer.cancel();
    self->signals.cancel(ec);
    self->drain_timer.cancel();
  });
  for (auto& s : live) s->abort();
  live.clear();
  // Twice: the closes run, then the completions they cancelled.
  if (!loop_->on_loop_thread()) {
    loop_->barrier();
    loop_->barrier();
  }
  // Then a loop of our own stops (joins its threads) as loop_ goes; a shared one runs on.
}

Result<void> Server::listen() {
  auto& im = *impl_;
  beast::error_code ec;
  tcp::resolver resolver(im.home);
  auto results = resolver.resolve(im.options.host, std::to_string(im.options.port),
                                  tcp::resolver::passive | tcp::resolver::numeric_service, ec);
  if (ec || results.empty()) {
    return make_error(ErrorCode::invalid_argument,
                      fmt::format("listen address {}:{}: {}", im.options.host, im.options.port,
                                  ec ? ec.message() : "no address"));
  }
  const tcp::endpoint endpoint = results.begin()->endpoint();
  im.acceptor.open(endpoint.protocol(), ec);
  if (!ec) im.acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) im.acceptor.bind(endpoint, ec);
  if (!ec) im.acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec) {
    beast::error_code ignored;
    im.acceptor.close(ignored);
    return make_error(ErrorCode::unavailable, fmt::format("cannot listen on {}: {}",
                                                          format_endpoint(endpoint), ec.message()));
  }
  if (im.options.handle_signals) {
    im.signals.add(SIGINT, ec);
    if (!ec) im.signals.add(SIGTERM, ec);
    if (!ec) im.signals.add(SIGHUP, ec);
    if (ec) {
      return make_error(ErrorCode::unavailable,
                        "cannot handle SIGINT/SIGTERM/SIGHUP: " + ec.message());
    }
  }
  const auto local = im.acceptor.local_endpoint(ec);
  im.address = format_endpoint(local);
  im.port = local.port();
  return {};
}

std::string Server::address() const {
  return impl_->address;
}
std::uint16_t Server::port() const {
  return impl_->port;
}

void Server::run() {
  auto& im = *impl_;
  net::post(im.home, [self = impl_] {
    self->do_accept();
    if (self->options.handle_signals) self->wait_signal();
  });
  std::unique_lock lock(im.mu);
  im.finished_cv.wait(lock, [&im] { return im.finished; });
}

void Server::stop() {
  impl_->stop();
}

Server::Stats Server::stats() const {
  Stats s;
  s.connections_accepted = impl_->accepted.load(std::memory_order_relaxed);
  s.requests = impl_->requests.load(std::memory_order_relaxed);
  s.accept_errors = impl_->accept_errors.load(std::memory_order_relaxed);
  s.handler_exceptions = impl_->handler_exceptions.load(std::memory_order_relaxed);
  std::lock_guard lock(impl_->mu);
  s.connections_open = impl_->sessions.size();
  return s;
}

}  // namespace ratekeeper::http
