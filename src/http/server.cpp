// The Beast transport behind http::Server: the listener of server_core.hpp, one buffered
// session per connection, driven by its socket's thread alone. Sessions read ahead up to
// max_pipelined requests, hand each to the handler, and write the responses back in request
// order.

#include "ratekeeper/http/server.hpp"

#include <atomic>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <deque>

#include "ratekeeper/core/contained.hpp"
#include "ratekeeper/core/event_loop.hpp"
#include "ratekeeper/http/access_log.hpp"
#include "ratekeeper/http/headers.hpp"
#include "ratekeeper/http/latency_metrics.hpp"
#include "ratekeeper/http/path.hpp"
#include "executor_thread.hpp"
#include "lazy_deadline.hpp"
#include "read_message.hpp"
#include "request_parser.hpp"
#include "server_core.hpp"

namespace ratekeeper::http {

namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

namespace {

// After an error response that closes the connection while the client may still be sending
// (an oversized body, say), the rest is read and discarded, up to this much for this long,
// before the socket is closed: closing with unread data would reset the connection and could
// destroy the response before the client reads it.
constexpr std::size_t kLingerBytes = std::size_t{16} * 1024 * 1024;
constexpr auto kLingerTime = std::chrono::seconds(2);

// A session keeps the buffer of its last response for the next one, up to this size.
constexpr std::size_t kKeptWireBytes = std::size_t{64} * 1024;

}  // namespace

struct Server::Impl : ServerCore {
  Impl(ServerOptions o, Handler h, EventLoop& l) : ServerCore(std::move(o), l), handler(std::move(h)) {}

  std::shared_ptr<ClientConnection> make_connection(tcp::socket socket) override;

  Handler handler;
};

class Session final : public ClientConnection {
 public:
  Session(const std::shared_ptr<Server::Impl>& server, tcp::socket&& socket)
      : ClientConnection(server), server_(*server), stream_(server->accept_stream(std::move(socket), tls_)) {
    peer_of(stream_.tcp().socket(), peer_address_, peer_port_);
    beast::error_code ec;
    stream_.tcp().socket().set_option(tcp::no_delay(true), ec);
    // The body goes to the parser, not the buffer: a header and a read.
    buffer_.max_size(read_buffer_limit(server_.options.header_limit));
  }

  std::shared_ptr<Session> shared_from_this() { return self<Session>(); }

  void start() override {
    net::dispatch(stream_.get_executor(), [self = shared_from_this()] {
      if (!self->stream_.is_tls()) return self->do_read();
      // The handshake is bounded as a request's read is.
      self->stream_.expires_after(to_duration(self->server_.options.read_timeout));
      self->reading_ = true;
      self->stream_.async_handshake(net::ssl::stream_base::server, [self](beast::error_code ec) {
        self->reading_ = false;
        if (ec) {
          if (ec != net::error::operation_aborted) {
            self->server_.tls_handshake_failed(ec, self->stream_, self->peer_address_);
          }
          return self->close();
        }
        self->stream_.expires_never();  // from here, one deadline each way
        self->do_read();
      });
    });
  }

  // Graceful drain: finish what was received, read nothing more, close when idle. Marked
  // here, on the caller's thread: a response written after this returns says Connection:
  // close even when it was queued on the session's thread ahead of the rest of the drain.
  void shutdown() override {
    draining_.store(true);
    net::post(stream_.get_executor(), [self = shared_from_this()] {
      // Idle: nothing queued and no request partly received.
      const bool receiving = self->reading_ && self->parser_ && self->parser_->got_some();
      if (self->queue_.empty() && !receiving) self->close();
    });
  }

  // From any thread: close now, whatever is in flight (the server is going away).
  void abort() override {
    net::post(stream_.get_executor(), [self = shared_from_this()] { self->close(); });
  }

  // From any thread: the response to request `id`. On the connection's own thread (a store
  // answered inline, or a Redis reply arrived on the shared loop) it is handled at once;
  // from any other thread it is posted there.
  void post_response(std::uint64_t id, Response response) {
    if (on_thread_of(stream_.get_executor())) {
      const auto self = shared_from_this();  // alive until the response is handled
      return self->on_response(id, std::move(response));
    }
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
    // For the access log and the latency histograms: when the request's header was read, and
    // (with an access log) what it asked for.
    std::chrono::steady_clock::time_point start;
    Micros wall = 0;
    std::string method;
    std::string path;
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
    read_deadline_.begin(to_duration(server_.options.read_timeout), shared_from_this(), cut);
    reading_ = true;
    bhttp::async_read(stream_, buffer_, *parser_,
                      beast::bind_front_handler(&Session::on_read, shared_from_this()));
  }

  // Past a deadline with an operation under way, the connection is closed: both ways, as
  // Beast's stream closes it on a timeout.
  static void cut(const std::shared_ptr<Session>& self) {
    if (self->closed_) return;
    beast::error_code ignored;
    self->stream_.tcp().socket().close(ignored);
  }

  void on_read(beast::error_code ec, std::size_t) {
    ec = read_deadline_.done(ec);
    reading_ = false;
    if (ec) {
      read_closed_ = true;
      if (ec == bhttp::error::header_limit) {
        enqueue_error(431, R"({"error":"Request header fields too large"})", denied_unread());
      } else if (ec == bhttp::error::body_limit) {
        enqueue_error(413, R"({"error":"Payload too large"})", denied_unread());
      } else if (ec.category() == bhttp::make_error_code(bhttp::error::bad_target).category() &&
                 ec != bhttp::error::end_of_stream && ec != bhttp::error::partial_message) {
        enqueue_error(400, R"({"error":"Bad request"})", denied_unread());
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
    Request request = parser_->release();
    parser_.reset();
    if (server_.options.latency || server_.options.access_log) slot.start = std::chrono::steady_clock::now();
    if (server_.options.access_log) {
      slot.wall = wall_now();
      slot.method = request.method;
    }
    queue_.push_back(std::move(slot));

    server_.requests.fetch_add(1, std::memory_order_relaxed);
    request.peer_address = peer_address_;
    request.peer_port = peer_port_;

    auto pending = std::make_shared<Pending>(shared_from_this(), queue_.back().id);
    // The one normal form of the target (http/path.hpp): what the handler's routes dispatch on,
    // its rules match and its keys are built from. A target without one is a 400 here.
    auto target = normalize_target(request.target, server_.options.paths);
    // The access log says the path the request was decided on: its normal form, or (a 400) as sent.
    if (server_.options.access_log) queue_.back().path = target ? *target : request.target;
    if (!target) {
      pending->deliver(Response{400, "application/json", {}, bad_request_body(target.error().message)});
      pending.reset();
      do_read();
      return;
    }
    request.target = std::move(*target);
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
  // Whether the request that could not be read asked for deny_unreadable_path (its request line
  // was read), its path in the normal form the routes dispatch on.
  bool denied_unread() {
    const auto& path = server_.options.deny_unreadable_path;
    if (path.empty() || !parser_) return false;
    const std::string_view target = parser_->request().target;
    const auto normal = normalize_path(target.substr(0, target.find('?')), server_.options.paths);
    return normal && *normal == path;
  }

  // `deny`: answered 403 with X-RateLimit-Status: `status` (deny_unreadable_path).
  void enqueue_error(int status, std::string body, bool deny = false) {
    Slot slot;
    slot.id = next_id_++;
    slot.keep_alive = false;
    slot.start = std::chrono::steady_clock::now();
    slot.wall = wall_now();
    queue_.push_back(std::move(slot));
    Response response{deny ? 403 : status, "application/json", {}, std::move(body)};
    if (deny) response.headers.emplace_back("X-RateLimit-Status", std::to_string(status));
    observe(queue_.back(), response);
    fill(queue_.back(), std::move(response));
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
        if (!slot.response) {
          observe(slot, r);
          fill(slot, std::move(r));
        }
        break;
      }
    }
    do_write();
  }

  // The access log's line and the latency histogram's sample of a request answered.
  void observe(const Slot& slot, const Response& r) {
    const auto& options = server_.options;
    if (!options.access_log && !(options.latency && r.outcome)) return;
    const Micros duration = std::chrono::duration_cast<std::chrono::microseconds>(
                                std::chrono::steady_clock::now() - slot.start).count();
    if (options.latency && r.outcome) {
      options.latency->row(r.rule).request[static_cast<std::size_t>(*r.outcome)].record(duration);
    }
    if (options.access_log) {
      options.access_log->write(AccessRecord{.time = slot.wall,
                                             .client = peer_address_,
                                             .method = slot.method,
                                             .path = slot.path,
                                             .status = r.status,
                                             .rule = r.rule,
                                             .outcome = r.outcome,
                                             .duration = duration,
                                             .upstream = std::nullopt,
                                             .bytes = r.body.size()});
    }
  }

  void do_write() {
    if (writing_ || closed_ || queue_.empty() || !queue_.front().response) return;
    auto& slot = queue_.front();
    // While draining, the last response read says Connection: close.
    const bool last = draining_ && queue_.size() == 1;
    close_after_write_ = !slot.keep_alive || last || (read_closed_ && queue_.size() == 1);
    slot.response->keep_alive(!close_after_write_);
    writing_ = true;
    write_deadline_.begin(to_duration(server_.options.read_timeout), shared_from_this(), cut);
    if (!flatten(*slot.response, wire_)) {
      net::post(stream_.get_executor(),
                beast::bind_front_handler(&Session::on_write, shared_from_this(),
                                          beast::error_code(bhttp::error::bad_field), 0));
      return;
    }
    net::async_write(stream_, net::buffer(wire_),
                     beast::bind_front_handler(&Session::on_write, shared_from_this()));
  }

  // The wire form of a response, as Beast's serializer writes it, into one buffer: the socket
  // then takes one buffer however many header fields the response has, instead of one per
  // field (each costs a pass of buffer bookkeeping and an iovec). False when the serializer
  // fails.
  static bool flatten(bhttp::response<bhttp::string_body>& response, std::string& out) {
    out.clear();
    out.reserve(256 + response.body().size());
    bhttp::serializer<false, bhttp::string_body> serializer(response);
    beast::error_code ec;
    do {
      serializer.next(ec, [&](beast::error_code&, const auto& buffers) {
        std::size_t n = 0;
        for (const auto b : beast::buffers_range_ref(buffers)) {
          out.append(static_cast<const char*>(b.data()), b.size());
          n += b.size();
        }
        serializer.consume(n);
      });
      if (ec) return false;
    } while (!serializer.is_done());
    return true;
  }

  void on_write(beast::error_code ec, std::size_t) {
    ec = write_deadline_.done(ec);
    writing_ = false;
    queue_.pop_front();
    if (wire_.capacity() > kKeptWireBytes) std::string().swap(wire_);  // after a large response
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
    stream_.tcp().socket().shutdown(tcp::socket::shutdown_send, ec);
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
    read_deadline_.cancel();
    write_deadline_.cancel();
    beast::error_code ec;
    stream_.tcp().socket().shutdown(tcp::socket::shutdown_send, ec);
    stream_.tcp().socket().close(ec);
  }

  Server::Impl& server_;  // kept alive by core_
  std::shared_ptr<TlsServerContext> tls_;  // with TLS: the listener's context when accepted
  Stream stream_;
  // Reading a request and writing a response, each bounded by read_timeout (one may be under
  // way while the other is: pipelining).
  LazyDeadline read_deadline_{stream_.get_executor()};
  LazyDeadline write_deadline_{stream_.get_executor()};
  beast::flat_buffer buffer_;
  std::optional<RequestParser> parser_;
  std::string wire_;     // the response being written (one write at a time), reused
  std::string discard_;  // lingering close: what the client still sends after an error
  std::size_t lingered_ = 0;
  std::deque<Slot> queue_;
  std::uint64_t next_id_ = 0;
  std::string peer_address_;
  std::uint16_t peer_port_ = 0;
  bool reading_ = false;
  bool writing_ = false;
  bool read_closed_ = false;  // no more requests on this connection
  std::atomic<bool> draining_{false};  // set by shutdown(), from any thread
  bool closed_ = false;
  bool close_after_write_ = false;
  bool linger_ = false;  // the close after the next write lingers (see linger())
};

std::shared_ptr<ClientConnection> Server::Impl::make_connection(tcp::socket socket) {
  return std::make_shared<Session>(std::static_pointer_cast<Impl>(shared_from_this()),
                                   std::move(socket));
}

Server::Server(ServerOptions options, Handler handler)
    : loop_(options.loop ? options.loop : std::make_shared<EventLoop>(std::max(1, options.threads))),
      impl_(std::make_shared<Impl>(std::move(options), std::move(handler), *loop_)) {}

Server::~Server() {
  impl_->destroy(*loop_);
  // Then a loop of our own stops (joins its threads) as loop_ goes; a shared one runs on.
}

Result<void> Server::listen() {
  return impl_->listen();
}

std::string Server::address() const {
  return impl_->address;
}
std::uint16_t Server::port() const {
  return impl_->port;
}

void Server::run() {
  impl_->run();
}

void Server::stop() {
  impl_->stop();
}

Server::Stats Server::stats() const {
  return impl_->stats();
}

}  // namespace ratekeeper::http
