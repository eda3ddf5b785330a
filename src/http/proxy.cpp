// The Beast transport behind http::Proxy: the listener of server_core.hpp, one proxy session
// per client connection, driven by its socket's thread alone, and one pool of idle upstream
// connections per io thread (used by that thread's sessions only: no lock).
//
// A session serves one request at a time: it reads the request's header, asks the
// Middleware, and either answers itself (a rejection) or takes an upstream connection, writes
// the request's head, relays the body piece by piece (one buffer of buffer_size per
// direction), reads the response's head and relays its body back the same way. Bodies keep
// their framing where both sides allow it (a length stays a length, chunked stays chunked; a
// body delimited by the upstream closing goes to an HTTP/1.1 client chunked).

#include "ratekeeper/http/proxy.hpp"

#include "ratekeeper/core/host_port.hpp"
#include "ratekeeper/core/metrics_writer.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <functional>
#include <chrono>
#include <optional>
#include <boost/asio/connect.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http/status.hpp>
#include <cerrno>
#include <charconv>
#include <deque>
#include <limits>
#include <memory>
#include <vector>

#include "h2_connection.hpp"
#include "executor_thread.hpp"
#include "lazy_deadline.hpp"
#include "proxy_message.hpp"
#include "read_message.hpp"
#include "ratekeeper/core/contained.hpp"
#include "ratekeeper/core/event_loop.hpp"
#include "ratekeeper/core/log_limit.hpp"
#include "ratekeeper/http/access_log.hpp"
#include "ratekeeper/http/usage_scan.hpp"
#include "ratekeeper/http/headers.hpp"
#include "ratekeeper/http/latency_metrics.hpp"
#include "ratekeeper/http/middleware.hpp"
#include "ratekeeper/http/path.hpp"
#include "request_parser.hpp"
#include "core/tls_context.hpp"
#include "server_core.hpp"

namespace ratekeeper::http {

namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

namespace {

// A rejected request whose body is not read is answered, then the connection is half-closed
// and what the client still sends is discarded, up to this much for this long: closing with
// unread data would reset the connection and could destroy the answer before it is read.
constexpr std::size_t kLingerBytes = std::size_t{16} * 1024 * 1024;
constexpr auto kLingerTime = std::chrono::seconds(2);
// The upstream's response header may be larger than a client's request header (cookies).
constexpr std::size_t kMinResponseHeaderLimit = std::size_t{64} * 1024;
// Why an exchange the sweep ended failed (its operation's own error is only "canceled").
constexpr std::string_view kTimedOut = "nothing read or written for upstream.timeout";

// What an idle client connection's read buffer may keep of its capacity.
constexpr std::size_t kIdleBuffer = std::size_t{16} * 1024;

constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";

// A body buffer: allocated on first use, at the size asked for (a body known to be shorter
// than buffer_size gets no more than its length), not zero-filled, kept until release().
class BodyBuffer {
 public:
  // At least n bytes of room (n > 0).
  char* room(std::size_t n) {
    if (size_ < n) {
      data_ = std::make_unique_for_overwrite<char[]>(n);
      size_ = n;
    }
    return data_.get();
  }
  char* data() const noexcept { return data_.get(); }
  void release() noexcept {
    data_.reset();
    size_ = 0;
  }

 private:
  std::unique_ptr<char[]> data_;
  std::size_t size_ = 0;
};

// The room a piece of body needs: the buffer size, or less when the body's length is known.
std::size_t piece_size(std::size_t buffer_size, bool length_known, std::uint64_t length) {
  return length_known && length < buffer_size ? std::max<std::size_t>(length, 1) : buffer_size;
}

struct UpstreamConnection {
  // `tls`: the upstream's client context (https), or nullptr; `buffer_limit`: the buffer's
  // max_size (read_buffer_limit).
  UpstreamConnection(const Stream::executor_type& executor, const std::shared_ptr<TlsContext>& tls,
                     std::size_t buffer_limit)
      : context(tls), stream(executor, tls ? &tls->context() : nullptr) {
    buffer.max_size(buffer_limit);
  }
  std::shared_ptr<TlsContext> context;  // outlives the stream
  Stream stream;
  beast::flat_buffer buffer;  // read but not parsed yet: empty between responses
};

// Whether an idle keep-alive connection is still usable: open, and nothing unexpected sent.
// The buffers of one write of a relayed message, towards either side: an optional head, a
// piece of the body framed as the message is (chunked: its size line before it and CRLF
// after), and the last chunk when the body ends with this write. The one place chunk framing
// is written. Unused buffers are empty and write nothing.
class Frames {
 public:
  const std::array<net::const_buffer, 5>& build(std::string_view head, const char* data, std::size_t n,
                                                bool chunked, bool last) {
    buffers_ = {};
    std::size_t i = 0;
    if (!head.empty()) buffers_[i++] = net::buffer(head.data(), head.size());
    if (n > 0) {
      if (chunked) {
        chunk_head_ = chunk_prefix(n);
        buffers_[i++] = net::buffer(chunk_head_);
      }
      buffers_[i++] = net::buffer(data, n);
      if (chunked) buffers_[i++] = net::buffer(kChunkSuffix);
    }
    if (last) buffers_[i++] = net::buffer(kLastChunk);
    return buffers_;
  }
  // The last chunk alone.
  const std::array<net::const_buffer, 5>& last_chunk() { return build({}, nullptr, 0, false, true); }

 private:
  std::string chunk_head_;
  std::array<net::const_buffer, 5> buffers_{};
};

bool still_open(UpstreamConnection& c) {
  auto& socket = c.stream.tcp().socket();
  if (!socket.is_open() || c.buffer.size() != 0) return false;
  char byte = 0;
  const auto n = ::recv(socket.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

// The idle upstream connections of one io thread, used from that thread only: the most
// recently used is taken first. At most max_idle are kept (beyond: the one idle longest is
// closed); a connection idle for idle_timeout is closed by the pool's timer, so a burst's
// connections do not stay open once the burst is over.
class UpstreamPool : public std::enable_shared_from_this<UpstreamPool> {
 public:
  UpstreamPool(const net::any_io_executor& executor, std::size_t max_idle, Micros idle_timeout)
      : max_idle_(max_idle), idle_timeout_(to_duration(idle_timeout)), timer_(executor) {}

  std::unique_ptr<UpstreamConnection> take() {
    while (!idle_.empty()) {
      auto c = std::move(idle_.back().connection);
      idle_.pop_back();
      if (still_open(*c)) return c;
    }
    return nullptr;
  }

  void put(std::unique_ptr<UpstreamConnection> c) {
    if (max_idle_ == 0) return;
    if (idle_.size() >= max_idle_) idle_.pop_front();
    c->stream.expires_never();
    idle_.push_back({std::move(c), std::chrono::steady_clock::now()});
    if (!timer_armed_) arm(idle_.front().since);
  }

  void clear() {
    idle_.clear();
    timer_.cancel();
    timer_armed_ = false;
  }

 private:
  struct Idle {
    std::unique_ptr<UpstreamConnection> connection;
    std::chrono::steady_clock::time_point since;  // put back at
  };

  // Fires when the connection idle longest has been idle for idle_timeout.
  void arm(std::chrono::steady_clock::time_point oldest) {
    timer_armed_ = true;
    timer_.expires_at(oldest + idle_timeout_);
    timer_.async_wait([weak = weak_from_this()](beast::error_code ec) {
      const auto self = weak.lock();
      if (ec || !self) return;
      self->expire();
    });
  }

  void expire() {
    timer_armed_ = false;
    const auto now = std::chrono::steady_clock::now();
    while (!idle_.empty() && now - idle_.front().since >= idle_timeout_) idle_.pop_front();
    if (!idle_.empty()) arm(idle_.front().since);
  }

  std::size_t max_idle_;
  std::chrono::steady_clock::duration idle_timeout_;
  net::steady_timer timer_;
  bool timer_armed_ = false;
  std::deque<Idle> idle_;  // oldest first
};

// Methods that change nothing when sent twice (RFC 9110 9.2.2): a request of one that failed
// at once on a reused upstream connection may go again.
bool idempotent(std::string_view method) {
  return method == "GET" || method == "HEAD" || method == "PUT" || method == "DELETE" || method == "OPTIONS" ||
         method == "TRACE";
}

// HTTP/2's connection preface (RFC 9113 3.4): what a client with prior knowledge sends first.
constexpr std::string_view kH2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

// Whether a connection's first bytes are (the start of) HTTP/2's preface. A prefix of 4 bytes
// or more is enough: no HTTP/1.1 method is "PRI ".
bool is_h2_preface(std::string_view first) {
  const std::size_t n = std::min(first.size(), kH2Preface.size());
  return n >= 4 && first.substr(0, n) == kH2Preface.substr(0, n);
}

// Whether the TLS handshake agreed on h2 (ALPN).
bool alpn_h2(Stream& stream) {
  const unsigned char* protocol = nullptr;
  unsigned int length = 0;
  SSL_get0_alpn_selected(stream.tls()->native_handle(), &protocol, &length);
  return length == 2 && protocol[0] == 'h' && protocol[1] == '2';
}

// Closes an upstream connection; it is destroyed once the operations the close cancelled have
// completed (they still refer to its stream and buffer).
void retire(std::unique_ptr<UpstreamConnection> c) {
  if (!c) return;
  beast::error_code ec;
  c->stream.tcp().socket().shutdown(tcp::socket::shutdown_both, ec);
  c->stream.tcp().socket().close(ec);
  auto executor = c->stream.get_executor();
  net::post(executor, [c = std::move(c)] {});
}

struct JsonError {
  int status;
  std::string_view body;
};
constexpr JsonError kUnreachable{502, R"({"error":"Upstream unreachable"})"};
constexpr JsonError kBadResponse{502, R"({"error":"Bad response from the upstream"})"};
constexpr JsonError kTimeout{504, R"({"error":"Upstream timed out"})"};
constexpr JsonError kBadRequest{400, R"({"error":"Bad request"})"};
constexpr JsonError kHeaderTooLarge{431, R"({"error":"Request header fields too large"})"};
constexpr JsonError kRequestTimeout{408, R"({"error":"Request body not received within http.request_timeout"})"};
constexpr JsonError kNotImplemented{501, R"({"error":"Method not implemented by the proxy"})"};
constexpr JsonError kInternal{500, R"({"error":"Internal server error"})"};

// Parses body bytes already in `buffer` into the place the parser's stream_body() gave,
// without reading: as far as they go, that place is full, or an error (in ec; need_more and
// need_buffer are none).
template <class Parser>
void parse_buffered(Parser& parser, beast::flat_buffer& buffer, beast::error_code& ec) {
  while (buffer.size() != 0 && !parser.is_done()) {
    const std::size_t used = parser.put(buffer.data(), ec);
    buffer.consume(used);
    if (ec || used == 0) break;
  }
  if (ec == bhttp::error::need_more || ec == bhttp::error::need_buffer) ec = {};
}

std::string_view reason_of(int status) {
  const auto r = bhttp::obsolete_reason(static_cast<bhttp::status>(status));
  return {r.data(), r.size()};
}

// An admitted request's reservation and the middleware (its generation: the limiter) that
// made it: settled to the cost its response reports, or released when the request ends, once,
// whichever way it ends (the destructor ends it when nothing else did); renewed every
// reservation.heartbeat() meanwhile when it holds concurrency slots.
//  - head(): the response's head is there. A rule with `response_header` takes the header's
//    cost: settled now, or, when the request holds slots, at its end (the slots are held while
//    the body streams). A rule with `response_json` starts reading the body (feed()).
//  - finish(): the response ended whole: the body's cost settled, or the header's, or the
//    reservation released.
//  - otherwise (the upstream failed, the client left, a tunnel closed): a header's cost is
//    settled (the upstream did the work), else the reservation is released: its slots given
//    back, its estimate kept.
class PendingUsage {
 public:
  PendingUsage(UsageReservation reservation, std::shared_ptr<Middleware> middleware, const net::any_io_executor& ex)
      : reservation_(std::move(reservation)), middleware_(std::move(middleware)) {
    if (reservation_.heartbeat() > 0) {
      heartbeat_ = std::make_shared<Heartbeat>(ex, reservation_, middleware_);
      Heartbeat::arm(heartbeat_);
    }
  }
  PendingUsage(const PendingUsage&) = delete;
  PendingUsage& operator=(const PendingUsage&) = delete;
  ~PendingUsage() { end(false); }

  void head(const HeaderList& fields) {
    if (!reservation_.costed() || ended_) return;
    const auto& spec = reservation_.application.rule->usage;
    auto field = [&](std::string_view name) -> std::optional<std::string_view> {
      for (const auto& [n, v] : fields) {
        if (iequals(n, name)) return v;
      }
      return std::nullopt;
    };
    if (!spec.response_header.empty()) {
      const auto cost = Middleware::header_cost(field(spec.response_header));
      if (cost || spec.response_json.empty()) {
        header_seen_ = true;
        header_cost_ = cost;
        if (!heartbeat_) end(true);
        return;
      }
    }
    const auto type = field("content-type").value_or("");
    const bool events = type.size() >= 17 && iequals(type.substr(0, 17), "text/event-stream");
    body_.emplace(split_field_path(spec.response_json).value_or(std::vector<std::string>{"?"}), events);
  }

  void feed(std::string_view bytes) {
    if (body_ && !ended_) body_->feed(bytes);
  }

  void finish() { end(true); }

 private:
  struct Heartbeat {
    Heartbeat(const net::any_io_executor& ex, UsageReservation r, std::shared_ptr<Middleware> m)
        : timer(ex), reservation(std::move(r)), middleware(std::move(m)) {}
    static void arm(const std::shared_ptr<Heartbeat>& h) {
      h->timer.expires_after(to_duration(h->reservation.heartbeat()));
      h->timer.async_wait([h](beast::error_code ec) {
        if (ec || h->stopped) return;
        h->middleware->renew(h->reservation);
        arm(h);
      });
    }
    net::steady_timer timer;
    UsageReservation reservation;
    std::shared_ptr<Middleware> middleware;
    bool stopped = false;
  };

  void end(bool complete) {
    if (ended_) return;
    ended_ = true;
    if (heartbeat_) {
      heartbeat_->stopped = true;
      heartbeat_->timer.cancel();
    }
    const auto& spec = reservation_.application.rule->usage;
    if (header_seen_) return middleware_->settle(reservation_, header_cost_, spec.response_header);
    if (body_ && complete) return middleware_->settle(reservation_, body_->finish(), spec.response_json);
    middleware_->release(reservation_);
  }

  UsageReservation reservation_;
  std::shared_ptr<Middleware> middleware_;
  std::optional<UsageScanner> body_;  // the body is read for the cost (usage.response_json)
  bool header_seen_ = false;           // usage.response_header was read (a valid cost or none)
  std::optional<std::int64_t> header_cost_;
  bool ended_ = false;
  std::shared_ptr<Heartbeat> heartbeat_;
};

void settle_usage(std::unique_ptr<PendingUsage>& usage, const HeaderList& fields) {
  if (usage) usage->head(fields);
}

// A piece of the response's body, on its way to the client.
void feed_usage(std::unique_ptr<PendingUsage>& usage, std::string_view bytes) {
  if (usage) usage->feed(bytes);
}

// The response has ended whole.
void finish_usage(std::unique_ptr<PendingUsage>& usage) {
  if (!usage) return;
  usage->finish();
  usage.reset();
}

}  // namespace

// A request being served, for its access log line and latency samples (Proxy::Impl::observe).
struct Served {
  bool active = false;
  std::chrono::steady_clock::time_point start;
  std::chrono::steady_clock::time_point upstream_sent;
  Micros wall = 0;
  int status = 0;
  std::string rule;
  std::optional<RequestOutcome> outcome;
  std::optional<Micros> upstream;
  std::uint64_t bytes = 0;
};

Micros since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t).count();
}

// How opening an upstream connection ended (Proxy::Impl::open_upstream).
struct UpstreamOpened {
  enum Result { ok, unreachable, timeout } result = ok;
  beast::error_code ec;
  std::string why;  // a TLS handshake's failure, in words
};

struct Proxy::Impl : ServerCore {
  Impl(ServerOptions o, UpstreamOptions u, MiddlewareSource m, EventLoop& l)
      : ServerCore(std::move(o), l), upstream(std::move(u)), middleware(std::move(m)), loop(l) {
    paths = options.paths;
    paths.lowercase = upstream.lowercase_path;
    pools.reserve(loop.size());
    for (std::size_t i = 0; i < loop.size(); ++i) {
      pools.push_back(std::make_shared<UpstreamPool>(loop.context(i).get_executor(), upstream.max_idle,
                                                     upstream.idle_timeout));
    }
    beast::error_code ec;
    const auto address = net::ip::make_address(upstream.host, ec);
    if (!ec) literal = tcp::endpoint(address, upstream.port);
    if (upstream.tls.enabled) {
      auto context = make_tls_context(upstream.tls);
      if (context) {
        upstream_tls = std::move(*context);
      } else {
        tls_error = context.error();
      }
    }
  }

  std::shared_ptr<ClientConnection> make_connection(tcp::socket socket) override;

  UpstreamPool& pool_of(const net::any_io_executor& executor) {
    auto* context = &net::query(executor, net::execution::context);
    for (std::size_t i = 0; i < loop.size(); ++i) {
      if (&loop.context(i) == context) return *pools[i];
    }
    return *pools[0];  // not reached: every socket belongs to one of the loop's contexts
  }

  void count(std::atomic<std::uint64_t>& counter) { counter.fetch_add(1, std::memory_order_relaxed); }

  // An upstream failure the client is answered for (502, 504): counted, and logged (a burst,
  // then a line a second saying how many were left out) with the request, the upstream and
  // the reason.
  void upstream_failed(const JsonError& error, std::atomic<std::uint64_t>& counter, const beast::error_code& ec,
                       std::string why, std::string_view method, std::string_view target, std::string_view via) {
    count(counter);
    std::uint64_t suppressed = 0;
    if (!failure_log.admit(suppressed)) return;
    const std::string reason = !why.empty() ? std::move(why) : ec ? ec.message() : std::string("an unexpected response");
    spdlog::warn("proxy: {} {} for {} {}{}: upstream {}:{}: {}{}", error.status,
                 error.status == 504 ? "(timeout)" : "(bad gateway)", method, target, via, upstream.host,
                 upstream.port, reason,
                 suppressed > 0 ? fmt::format(" ({} similar lines left out)", suppressed) : std::string());
  }

  // A response under way the upstream broke off (closed, stalled past upstream.timeout, sent
  // what is not HTTP): counted and logged, rate-bounded with the other upstream failures; the
  // client's response cannot be completed.
  void upstream_cut_off(const beast::error_code& ec, bool timed_out, std::string_view method, std::string_view target,
                        std::string_view via) {
    count(upstream_aborted);
    std::uint64_t suppressed = 0;
    if (!failure_log.admit(suppressed)) return;
    spdlog::warn("proxy: the response to {} {}{} was cut off: upstream {}:{}: {}{}", method, target, via, upstream.host,
                 upstream.port,
                 timed_out ? std::string(kTimedOut)
                           : ec ? ec.message() : std::string("the body broke off"),
                 suppressed > 0 ? fmt::format(" ({} similar lines left out)", suppressed) : std::string());
  }

  // An HTTP/2 connection the proxy ended for the client's error (a flood, a protocol error):
  // counted by error code and logged (rate-bounded), with the client and what the frame layer
  // said.
  void h2_ended(std::uint32_t code, std::string_view reason, std::string_view peer) {
    if (code < h2_goaways.size()) count(h2_goaways[code]);
    std::uint64_t suppressed = 0;
    if (!h2_log.admit(suppressed)) return;
    spdlog::warn("proxy: HTTP/2 connection of {} ended with GOAWAY {}{}{}", peer, h2_error_name(code),
                 reason.empty() ? std::string() : fmt::format(": {}", reason),
                 suppressed > 0 ? fmt::format(" ({} similar lines left out)", suppressed) : std::string());
  }

  // A client that took none of its response for upstream.timeout (HTTP/1.1: a write did not
  // complete; HTTP/2: its flow-control window stayed shut): the response is given up (the
  // connection closed; over HTTP/2 the stream reset), logged (rate-bounded). Counted by the
  // caller.
  void client_stalled(std::string_view peer, std::string_view method, std::string_view target, bool h2) {
    std::uint64_t suppressed = 0;
    if (!client_log.admit(suppressed)) return;
    spdlog::warn("proxy: the response to {} {}{} of {} was given up: the client let none of it through for "
                 "upstream.timeout{}{}",
                 method, target, h2 ? " (HTTP/2)" : "", peer,
                 h2 ? " (its flow-control window shut, or its connection unread); the stream is reset"
                    : "; the connection is closed",
                 suppressed > 0 ? fmt::format(" ({} similar lines left out)", suppressed) : std::string());
  }

  // An HTTP/2 connection that read none of what was written to it for upstream.timeout:
  // closed, logged (rate-bounded) with the client_stalled lines. Counted by the caller.
  void h2_unread(std::string_view peer, std::size_t open_streams) {
    std::uint64_t suppressed = 0;
    if (!client_log.admit(suppressed)) return;
    spdlog::warn("proxy: HTTP/2 connection of {} closed: it read none of what was written to it for "
                 "upstream.timeout ({} streams open){}",
                 peer, open_streams,
                 suppressed > 0 ? fmt::format(" ({} similar lines left out)", suppressed) : std::string());
  }

  // The record of a request whose head was just read (active only when something observes it:
  // an access log or the latency histograms).
  Served begin_served() const {
    Served served;
    if (!options.access_log && !options.latency) return served;
    served.active = true;
    served.start = std::chrono::steady_clock::now();
    if (options.access_log) served.wall = wall_now();
    return served;
  }

  // A request served: its latency samples and access log line.
  void observe(const Served& served, std::string_view peer, std::string_view method, std::string_view path) {
    const Micros duration = since(served.start);
    if (options.latency) {
      auto& row = options.latency->row(served.rule);
      row.request[static_cast<std::size_t>(served.outcome.value_or(RequestOutcome::unmatched))].record(duration);
      if (served.upstream) row.upstream.record(*served.upstream);
    }
    if (options.access_log) {
      options.access_log->write(AccessRecord{.time = served.wall,
                                             .client = peer,
                                             .method = method,
                                             .path = path,
                                             .status = served.status,
                                             .rule = served.rule,
                                             .outcome = served.outcome,
                                             .duration = duration,
                                             .upstream = served.upstream,
                                             .bytes = served.bytes});
    }
  }

  // Opens `c` (a new connection): resolves the upstream's name (unless it is an address),
  // connects within connect_timeout, sets TCP_NODELAY and, for https, sends SNI and handshakes
  // (the certificate verified), within connect_timeout again. `done` runs on c's thread, once,
  // unless `abandoned()` says by then that its caller let `c` go (nothing of `c` is touched
  // then); the caller keeps `resolver` alive.
  void open_upstream(UpstreamConnection& c, tcp::resolver& resolver, std::function<bool()> abandoned,
                     std::function<void(const UpstreamOpened&)> done) {
    c.stream.expires_after(to_duration(upstream.connect_timeout));
    auto connected = [this, &c, abandoned, done](beast::error_code ec) {
      if (abandoned()) return;
      if (ec) return done(UpstreamOpened{ec == beast::error::timeout ? UpstreamOpened::timeout : UpstreamOpened::unreachable, ec, {}});
      count(opened);
      beast::error_code ignored;
      c.stream.tcp().socket().set_option(tcp::no_delay(true), ignored);
      if (!c.stream.is_tls()) return done(UpstreamOpened{});
      c.stream.expires_after(to_duration(upstream.connect_timeout));
      SSL* ssl = c.stream.tls()->native_handle();
      if (std::string error = prepare_client_handshake(ssl, upstream.tls, upstream.host); !error.empty()) {
        count(upstream_tls_failures);
        return done(UpstreamOpened{UpstreamOpened::unreachable, {}, "TLS handshake failed: " + error});
      }
      c.stream.async_handshake(net::ssl::stream_base::client, [this, &c, abandoned, done](beast::error_code e) {
        if (abandoned()) return;
        if (e == net::error::operation_aborted) return done(UpstreamOpened{UpstreamOpened::unreachable, e, {}});
        if (e == beast::error::timeout) return done(UpstreamOpened{UpstreamOpened::timeout, e, {}});
        if (e) {
          count(upstream_tls_failures);
          return done(UpstreamOpened{UpstreamOpened::unreachable, e,
                                     "TLS handshake failed: " + handshake_failure(c.stream.tls()->native_handle(), e)});
        }
        done(UpstreamOpened{});
      });
    };
    if (literal) {
      c.stream.tcp().async_connect(*literal, connected);
      return;
    }
    resolver.async_resolve(upstream.host, std::to_string(upstream.port),
                           [&c, abandoned, connected, done](beast::error_code ec,
                                                            const tcp::resolver::results_type& results) {
                             if (abandoned()) return;
                             if (ec) return done(UpstreamOpened{UpstreamOpened::unreachable, ec, {}});
                             c.stream.tcp().async_connect(results, [connected](beast::error_code e, const tcp::endpoint&) {
                               connected(e);
                             });
                           });
  }

  // Bytes of body held between a read and its write, over all sessions; its high-water mark.
  void hold(std::size_t n) {
    const auto now = buffered.fetch_add(n, std::memory_order_relaxed) + n;
    auto high = buffered_high.load(std::memory_order_relaxed);
    while (now > high && !buffered_high.compare_exchange_weak(high, now)) {
    }
  }
  void release(std::size_t n) { buffered.fetch_sub(n, std::memory_order_relaxed); }

  UpstreamOptions upstream;
  PathOptions paths;  // the server's, lower-cased as the upstream says
  MiddlewareSource middleware;
  EventLoop& loop;
  std::optional<tcp::endpoint> literal;  // the upstream's address when given as one
  std::shared_ptr<TlsContext> upstream_tls;  // https: the client context of every connection
  std::optional<Error> tls_error;            // https: why the context could not be made
  std::string_view scheme() const noexcept { return options.tls ? "https" : "http"; }
  // An upstream connection's read buffer: a response's header, a piece of its body, a read.
  std::size_t upstream_buffer_limit() const noexcept {
    return read_buffer_limit(std::max(options.header_limit, kMinResponseHeaderLimit), upstream.buffer_size);
  }
  std::vector<std::shared_ptr<UpstreamPool>> pools;  // by loop context index
  LogLimit failure_log{"proxy: upstream failures (502, 504, responses cut off)"};

  std::atomic<std::uint64_t> forwarded{0};
  std::atomic<std::uint64_t> answered_by_limiter{0};
  std::atomic<std::uint64_t> delayed{0};
  std::atomic<std::uint64_t> held_client_gone{0};
  std::atomic<std::uint64_t> upstream_unreachable{0};
  std::atomic<std::uint64_t> upstream_timeout{0};
  std::atomic<std::uint64_t> upstream_bad_response{0};
  std::atomic<std::uint64_t> upstream_aborted{0};
  std::atomic<std::uint64_t> client_aborted{0};
  std::atomic<std::uint64_t> opened{0};
  std::atomic<std::uint64_t> reused{0};
  std::atomic<std::uint64_t> upstream_tls_failures{0};
  std::atomic<std::uint64_t> upgrades{0};
  std::atomic<std::uint64_t> tunnels_open{0};
  std::array<std::atomic<std::uint64_t>, kTunnelEnds> tunnels_closed{};  // by TunnelEnd
  LogLimit tunnel_log{"proxy: upgraded connections ended by a time bound or a failed write"};
  std::atomic<std::uint64_t> h2_connections{0};
  std::array<std::atomic<std::uint64_t>, 14> h2_goaways{};  // by error code
  std::atomic<std::uint64_t> h2_stalled{0};
  LogLimit h2_log{"proxy: HTTP/2 connections ended for the client's error"};
  // Responses given up: the client took none of them for upstream.timeout.
  LogLimit client_log{"proxy: responses given up, their client reading none of them"};
  std::atomic<std::uint64_t> buffered{0};
  std::atomic<std::uint64_t> buffered_high{0};
};

class ProxySession final : public ClientConnection {
 public:
  ProxySession(const std::shared_ptr<Proxy::Impl>& proxy, tcp::socket&& socket)
      : ClientConnection(proxy),
        proxy_(*proxy),
        client_(proxy->accept_stream(std::move(socket), tls_)),
        executor_(client_.get_executor()),
        pool_(proxy_.pool_of(client_.get_executor())),
        delay_timer_(client_.get_executor()),
        body_timer_(client_.get_executor()),
        tunnel_timer_(client_.get_executor()),
        client_read_deadline_(client_.get_executor()),
        client_write_deadline_(client_.get_executor()),
        up_deadline_(client_.get_executor()),
        resolver_(client_.get_executor()) {
    peer_of(client_.tcp().socket(), peer_address_, peer_port_);
    beast::error_code ec;
    client_.tcp().socket().set_option(tcp::no_delay(true), ec);
    client_buf_.max_size(read_buffer_limit(proxy_.options.header_limit, proxy_.upstream.buffer_size));
  }

  ~ProxySession() override {
    proxy_.release(held_);
    end_tunnel();
  }

  void start() override {
    net::dispatch(client_.get_executor(), [self = self<ProxySession>()] {
      if (!self->client_.is_tls()) return self->proxy_.options.http2 ? self->read_preface() : self->read_request();
      // The handshake is bounded as a request's header is.
      self->client_.expires_after(to_duration(self->proxy_.options.read_timeout));
      self->client_.async_handshake(net::ssl::stream_base::server, [self](beast::error_code ec) {
        if (self->closed()) return;
        if (ec) {
          self->proxy_.tls_handshake_failed(ec, self->client_, self->peer_address_);
          return self->close();
        }
        self->client_.expires_never();  // from here, the client deadlines bound each operation
        if (self->proxy_.options.http2 && alpn_h2(self->client_)) return self->start_h2({});
        self->read_request();
      });
    });
  }

  // Marked here, on the caller's thread (see ClientConnection::shutdown()).
  void shutdown() override {
    draining_.store(true);
    net::post(executor_, [self = self<ProxySession>()] {
      const bool receiving = self->req_ && self->req_->got_some();
      // An upgraded connection has no request boundary to stop at: it closes now.
      if (self->tunnel_) return self->close_tunnel(TunnelEnd::shutdown);
      if (self->phase_ == Phase::awaiting && !receiving) self->close();
    });
  }

  void abort() override {
    net::post(executor_, [self = self<ProxySession>()] {
      if (self->tunnel_) return self->close_tunnel(TunnelEnd::shutdown);
      self->close();
    });
  }

 private:
  using Self = std::shared_ptr<ProxySession>;
  template <class F>
  auto bind(F f) {
    return [self = self<ProxySession>(), f](auto&&... args) {
      (self.get()->*f)(std::forward<decltype(args)>(args)...);
    };
  }

  // ---- the protocol ----------------------------------------------------------------------

  // A plain connection's first bytes: HTTP/2's connection preface (h2c with prior knowledge)
  // hands the connection to an HTTP/2 session; anything else is HTTP/1.1, parsed from them.
  void read_preface() {
    client_read_begins(proxy_.options.read_timeout);
    client_.async_read_some(client_buf_.prepare(4096), [self = self<ProxySession>()](beast::error_code ec, std::size_t n) {
      ec = self->client_read_done(ec);
      if (self->closed()) return;
      if (ec) return self->close();
      self->client_buf_.commit(n);
      const auto data = self->client_buf_.data();
      const std::string_view first(static_cast<const char*>(data.data()), data.size());
      if (is_h2_preface(first)) {
        std::string received(first);
        self->client_buf_.consume(self->client_buf_.size());
        return self->start_h2(std::move(received));
      }
      self->read_request();
    });
  }

  void start_h2(std::string received);

  // ---- the request ---------------------------------------------------------------------

  void read_request() {
    if (closed()) return;
    if (draining_) return close();
    enter(Phase::awaiting);
    body_deadline_.reset();
    req_.emplace(static_cast<std::uint32_t>(proxy_.options.header_limit),
                 std::numeric_limits<std::uint64_t>::max(), true);
    client_read_begins(proxy_.options.read_timeout);
    async_read_message(client_, client_buf_, *req_, ReadUntil::header, bind(&ProxySession::on_request_header));
  }

  void on_request_header(beast::error_code ec, std::size_t) {
    ec = client_read_done(ec);
    if (closed()) return;
    if (ec) {
      if (ec == bhttp::error::header_limit) return answer_error(kHeaderTooLarge, false);
      if (ec.category() == bhttp::make_error_code(bhttp::error::bad_target).category() &&
          ec != bhttp::error::end_of_stream && ec != bhttp::error::partial_message) {
        return answer_error(kBadRequest, false);
      }
      return close();
    }
    enter(Phase::handling);
    begin_served();
    proxy_.requests.fetch_add(1, std::memory_order_relaxed);
    Request& request = req_->request();
    version_ = req_->version();
    keep_alive_ = req_->keep_alive();
    head_request_ = request.method == "HEAD";
    const std::string_view method = request.method;
    idempotent_ = idempotent(method);
    const auto length = req_->content_length();
    request_framing_ = req_->chunked() ? Framing::chunked
                       : length        ? Framing::length
                                       : Framing::none;
    request_length_ = length.value_or(0);
    request_body_ = req_->chunked() || request_length_ > 0;
    last_upstream_request_ = request_body_ && body_unexpected(method);
    expect_continue_ = false;
    if (auto expect = request.header("Expect")) expect_continue_ = iequals(*expect, "100-continue");
    // An upgrade (WebSocket) is relayed for a request without body: after the upstream's 101
    // the connection carries the new protocol's bytes.
    upgrade_.clear();
    if (proxy_.upstream.upgrades && version_ == 11 && !request_body_) {
      upgrade_ = requested_upgrade(request.headers, proxy_.upstream.upgrade_protocols);
    }

    if (request.method == "CONNECT") return answer_error(kNotImplemented, false);
    auto target = normalize_target(request.target, proxy_.paths);
    if (!target) {
      return answer_local(400, "application/json", bad_request_body(target.error().message), {},
                          false);
    }
    request.target = std::move(*target);
    request.peer_address = peer_address_;
    request.peer_port = peer_port_;
    remove_connection_named(request.headers);  // decided on as the upstream will receive it

    auto executor = client_.get_executor();
    const bool returned = contain("the proxy's middleware", [&] {
      // The middleware of the moment, held until its decision is delivered.
      std::shared_ptr<Middleware> middleware = proxy_.middleware();
      Middleware& decider = *middleware;
      decider.handle(request, [self = self<ProxySession>(), executor,
                               middleware = std::move(middleware)](MiddlewareResult r) mutable {
        if (on_thread_of(executor)) return self->on_decision(std::move(r), std::move(middleware));
        net::dispatch(executor, [self, r = std::move(r), middleware]() mutable {
          self->on_decision(std::move(r), std::move(middleware));
        });
      });
    });
    if (!returned) {
      proxy_.handler_exceptions.fetch_add(1, std::memory_order_relaxed);
      // A decision delivered inline before the throw is under way: nothing more can be said.
      if (decided_ == req_id_) return close();
      decided_ = req_id_;  // a decision delivered later is ignored
      answer_error(kInternal, false);
    }
  }

  void on_decision(MiddlewareResult&& result, std::shared_ptr<Middleware> middleware) {
    if (closed() || decided_ == req_id_) return;
    decided_ = req_id_;
    served_.outcome = result.outcome;
    served_.rule = std::move(result.rule);
    usage_.reset();
    if (result.usage) {
      usage_ = std::make_unique<PendingUsage>(std::move(*result.usage), std::move(middleware), client_.get_executor());
    }
    if (!result.admitted) {
      proxy_.count(proxy_.answered_by_limiter);
      // The body of a rejected request is not read: without one, the connection goes on.
      return answer_local(result.status, result.content_type, result.body,
                          std::move(result.headers), !request_body_);
    }
    limiter_fields_ = std::move(result.headers);
    if (result.delay > 0) {
      proxy_.count(proxy_.delayed);
      delay_timer_.expires_after(to_duration(result.delay));
      delay_timer_.async_wait([self = self<ProxySession>()](beast::error_code ec) {
        if (!ec && !self->closed()) self->forward();
      });
      watch_held_client();
      return;
    }
    forward();
  }

  // A request held for its turn (on_limit: delay) whose client closes meanwhile is dropped:
  // never forwarded. Its charge stays (the limiter consumed it at admission). Bytes from the
  // client (its body, a pipelined request) end the watch: the client is there.
  void watch_held_client() {
    watching_held_ = true;
    client_.tcp().socket().async_wait(tcp::socket::wait_read, [self = self<ProxySession>()](beast::error_code ec) {
      self->watching_held_ = false;
      if (self->closed() || ec == net::error::operation_aborted) return;
      char byte;
      const auto n = ::recv(self->client_.tcp().socket().native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
      if (!ec && n > 0) return;  // data: the client is there
      if (n < 0 && !ec && (errno == EAGAIN || errno == EWOULDBLOCK)) return self->watch_held_client();
      self->proxy_.count(self->proxy_.held_client_gone);
      self->client_gone();
    });
  }

  // ---- the upstream connection ---------------------------------------------------------

  void forward() {
    // Stop watching a held client (watch_held_client): its read side is the request's again.
    if (watching_held_) {
      beast::error_code ignored;
      client_.tcp().socket().cancel(ignored);
    }
    retried_ = false;
    up_ = pool_.take();
    if (up_) {
      reused_ = true;
      proxy_.count(proxy_.reused);
      return send_head();
    }
    connect();
  }

  void connect() {
    reused_ = false;
    up_ = std::make_unique<UpstreamConnection>(client_.get_executor(), proxy_.upstream_tls,
                                               proxy_.upstream_buffer_limit());
    auto* connecting = up_.get();
    proxy_.open_upstream(*up_, resolver_, [self = self<ProxySession>(), connecting] {
      return self->closed() || self->up_.get() != connecting;
    }, [self = self<ProxySession>()](const UpstreamOpened& opened) {
      switch (opened.result) {
        case UpstreamOpened::ok: return self->send_head();
        case UpstreamOpened::timeout: return self->upstream_failed(kTimeout, self->proxy_.upstream_timeout, opened.ec);
        case UpstreamOpened::unreachable:
          return self->upstream_failed(kUnreachable, self->proxy_.upstream_unreachable, opened.ec, opened.why);
      }
    });
  }

  void send_head() {
    const Request& request = req_->request();
    write_upstream_request_head(head_, request.method, request.target, request.headers,
                                Forwarding(peer_address_, proxy_.scheme(), upgrade_, last_upstream_request_), request_framing_,
                                request_length_);
    // The body bytes read along with the header go out with it, in one write (not when the
    // client waits for 100 Continue).
    std::size_t n = 0;
    beast::error_code body_ec;
    if (request_body_ && !expect_continue_ && !req_->is_done() && client_buf_.size() != 0) {
      const std::size_t room = request_room();
      req_->stream_body(up_body_.room(room), room);
      parse_buffered(*req_, client_buf_, body_ec);
      n = body_ec ? 0 : req_->streamed();  // a malformed chunk: the head only, then 400
    }
    const bool chunked = request_framing_ == Framing::chunked;
    if (n > 0) hold(n);
    const bool last = !body_ec && chunked && req_->is_done();
    if (last) request_framing_ = Framing::none;  // written: relay_request_body() does not again
    served_.upstream_sent = std::chrono::steady_clock::now();
    // A new connection still holds its connect timeout (a pooled one has none): upstream_begins
    // bounds what follows.
    if (!reused_) up_->stream.expires_never();
    upstream_begins();
    net::async_write(up_->stream, up_frames_.build(head_, up_body_.data(), n, chunked, last),
                     [self = self<ProxySession>(), head = head_.size(), bad_body = bool(body_ec)](
                         beast::error_code ec, std::size_t written) {
                       ec = self->upstream_done(ec);
                       self->release_held();
                       self->on_head_sent(ec, written >= head, bad_body);
                     });
  }

  std::size_t request_room() const {
    return piece_size(proxy_.upstream.buffer_size, request_framing_ == Framing::length,
                      request_length_);
  }

  // A write of the request to the upstream failed: slower than upstream.timeout it is a 504,
  // as a response header that slow is; otherwise a 502.
  void upstream_write_failed(beast::error_code ec) {
    if (ec == beast::error::timeout) return upstream_failed(kTimeout, proxy_.upstream_timeout, ec);
    upstream_failed(kBadResponse, proxy_.upstream_bad_response, ec);
  }

  // An idle connection the upstream closed meanwhile fails at once: an idempotent request
  // without body goes again, once, on a new connection.
  bool retry() {
    if (!reused_ || retried_ || request_body_ || !idempotent_) return false;
    retried_ = true;
    drop_upstream();
    connect();
    return true;
  }

  // `head_sent`: the head went whole (the write may have failed in the body after it);
  // `bad_body`: the body bytes sent with it ended in a malformed chunk.
  void on_head_sent(beast::error_code ec, bool head_sent, bool bad_body) {
    if (closed()) return;
    if (ec && !head_sent && ec != beast::error::timeout) {
      if (retry()) return;
      return upstream_failed(kUnreachable, proxy_.upstream_unreachable, ec);
    }
    proxy_.count(proxy_.forwarded);
    if (ec) return upstream_write_failed(ec);
    if (bad_body) {
      // The upstream's request is cut short, the client told why.
      drop_upstream();
      return answer_error(kBadRequest, false);
    }
    if (!request_body_) return read_response_header();
    if (expect_continue_) {
      expect_continue_ = false;
      client_write_begins(proxy_.options.read_timeout);
      net::async_write(client_, net::buffer(kContinue), [self = self<ProxySession>()](
                                                            beast::error_code e, std::size_t) {
        e = self->client_write_done(e);
        if (self->closed()) return;
        if (e) return self->client_gone();
        self->relay_request_body();
      });
      return;
    }
    relay_request_body();
  }

  // ---- the request body, client → upstream ---------------------------------------------

  void relay_request_body() {
    if (req_->is_done()) {
      body_timer_.cancel();
      if (request_framing_ != Framing::chunked) return read_response_header();
      upstream_begins();
      net::async_write(up_->stream, up_frames_.last_chunk(),
                       [self = self<ProxySession>()](beast::error_code ec, std::size_t) {
                         ec = self->upstream_done(ec);
                         if (self->closed()) return;
                         if (ec) return self->upstream_write_failed(ec);
                         self->read_response_header();
                       });
      return;
    }
    const std::size_t room = request_room();
    // Beast reads at most the room a buffer has (512 bytes at least): as much as the body's.
    client_buf_.reserve(proxy_.upstream.buffer_size);
    req_->stream_body(up_body_.room(room), room);
    // Each read within read_timeout, the whole body within request_timeout of its first read:
    // then body_timer_ cancels the read (the stream's own timeout would close the socket, and
    // the 408 could not be written).
    const auto now = std::chrono::steady_clock::now();
    if (!body_deadline_) {
      body_deadline_ = now + to_duration(proxy_.options.request_timeout);
      body_timer_.expires_at(*body_deadline_);
      body_timer_.async_wait([self = self<ProxySession>()](beast::error_code ec) {
        if (ec || self->closed() || !self->reading_body_) return;
        beast::error_code ignored;
        self->client_.tcp().socket().cancel(ignored);
      });
    }
    if (now >= *body_deadline_) return request_timed_out();
    client_read_begins(proxy_.options.read_timeout);
    reading_body_ = true;
    async_read_message(client_, client_buf_, *req_, ReadUntil::some, bind(&ProxySession::on_request_body));
  }

  void on_request_body(beast::error_code ec, std::size_t) {
    ec = client_read_done(ec);
    reading_body_ = false;
    if (closed()) return;
    if (ec == bhttp::error::need_buffer) ec = {};
    if (ec) {
      if (ec.category() == bhttp::make_error_code(bhttp::error::bad_target).category() &&
          ec != bhttp::error::end_of_stream && ec != bhttp::error::partial_message) {
        // A malformed chunk: the upstream's request is cut short, the client told why.
        drop_upstream();
        return answer_error(kBadRequest, false);
      }
      if (ec == net::error::operation_aborted && body_deadline_ &&
          std::chrono::steady_clock::now() >= *body_deadline_) {
        return request_timed_out();
      }
      return client_gone();
    }
    const std::size_t n = req_->streamed();
    if (n == 0) return relay_request_body();
    body_started_ = true;
    write_body(*up_, up_body_.data(), n, request_framing_ == Framing::chunked,
               bind(&ProxySession::on_request_body_sent));
  }

  void on_request_body_sent(beast::error_code ec, std::size_t) {
    ec = upstream_done(ec);
    release_held();
    if (closed()) return;
    if (ec) return upstream_write_failed(ec);
    relay_request_body();
  }

  // Writes n bytes of body at data (chunk-framed or not) to the upstream connection.
  template <class Handler>
  void write_body(UpstreamConnection& to, const char* data, std::size_t n, bool chunked,
                  Handler&& handler) {
    hold(n);
    upstream_begins();
    net::async_write(to.stream, up_frames_.build({}, data, n, chunked, false), std::forward<Handler>(handler));
  }

  // ---- the response, upstream → client -------------------------------------------------

  void read_response_header() {
    res_.emplace(static_cast<std::uint32_t>(
        std::max(proxy_.options.header_limit, kMinResponseHeaderLimit)));
    if (head_request_) res_->skip(true);
    upstream_begins();
    async_read_message(up_->stream, up_->buffer, *res_, ReadUntil::header, bind(&ProxySession::on_response_header));
  }

  void on_response_header(beast::error_code ec, std::size_t) {
    ec = upstream_done(ec);
    if (closed()) return;
    if (ec == beast::error::timeout) return upstream_failed(kTimeout, proxy_.upstream_timeout, ec);
    if (ec) {
      if (retry()) return;
      return upstream_failed(kBadResponse, proxy_.upstream_bad_response, ec);
    }
    const int status = res_->status();
    served_.upstream = since(served_.upstream_sent);
    served_.status = status;
    if (status == 101) {
      // Only an upgrade asked for may be switched to.
      if (upgrade_.empty()) return upstream_failed(kBadResponse, proxy_.upstream_bad_response);
      return switch_protocols();
    }
    if (status >= 100 && status < 200) return read_response_header();  // interim: not relayed
    settle_usage(usage_, res_->fields());

    body_expected_ = !head_request_ && status != 204 && status != 304;
    const auto length = res_->content_length();
    std::uint64_t head_length = 0;
    if (!body_expected_) {
      response_framing_ = Framing::none;
      if (head_request_ && length) {
        response_framing_ = Framing::length;
        head_length = *length;
      }
    } else if (length) {  // never with chunked: the parser refuses both
      response_framing_ = Framing::length;
      head_length = *length;
    } else {  // chunked, or until the upstream closes
      response_framing_ = version_ == 10 ? Framing::close : Framing::chunked;
    }
    upstream_reusable_ = res_->keep_alive() && !last_upstream_request_ &&
                         (res_->chunked() || length || !body_expected_);
    client_keep_ = keep_alive_ && !draining_ && response_framing_ != Framing::close &&
                   req_->is_done();
    response_length_ = head_length;
    write_client_response_head(head_, version_, status, res_->reason(), res_->fields(),
                               limiter_fields_, response_framing_, head_length, client_keep_);
    enter(Phase::responding);
    // The body bytes read along with the header go out with it, in one write.
    beast::error_code body_ec;
    std::size_t n = 0;
    if (body_expected_ && !res_->is_done() && up_->buffer.size() != 0) {
      const std::size_t room = response_room();
      res_->stream_body(down_body_.room(room), room);
      parse_buffered(*res_, up_->buffer, body_ec);
      n = res_->streamed();
    }
    write_to_client(true, n, bool(body_ec));
  }

  // One gather write to the client: the response's head (with_head), then n bytes of body
  // from down_body_ (chunk-framed when the response is), then the last chunk when the
  // upstream's body is complete. `failed`: the upstream's response broke off after these
  // bytes; the connection closes once they are written.
  void write_to_client(bool with_head, std::size_t n, bool failed) {
    if (n > 0) hold(n);
    if (n > 0) feed_usage(usage_, std::string_view(down_body_.data(), n));
    served_.bytes += n;
    const bool chunked = response_framing_ == Framing::chunked;
    const bool last = !failed && chunked && body_expected_ && res_->is_done();
    if (last) response_framing_ = Framing::none;  // written: finish_response() does not again
    client_write_begins(proxy_.upstream.timeout);
    net::async_write(client_, down_frames_.build(with_head ? std::string_view(head_) : std::string_view(),
                                                 down_body_.data(), n, chunked, last), [self = self<ProxySession>(), failed](beast::error_code e,
                                                                              std::size_t) {
      e = self->client_write_done(e);
      self->release_held();
      if (self->closed()) return;
      if (e) return self->client_gone(e);
      if (failed) {
        self->cut_off({});
        return self->close();
      }
      self->relay_response_body();
    });
  }

  std::size_t response_room() const {
    return piece_size(proxy_.upstream.buffer_size, response_framing_ == Framing::length,
                      response_length_);
  }

  void relay_response_body() {
    if (!body_expected_ || res_->is_done()) return finish_response();
    const std::size_t room = response_room();
    up_->buffer.reserve(proxy_.upstream.buffer_size);
    res_->stream_body(down_body_.room(room), room);
    upstream_begins();
    async_read_message(up_->stream, up_->buffer, *res_, ReadUntil::some, bind(&ProxySession::on_response_body));
  }

  void on_response_body(beast::error_code ec, std::size_t) {
    ec = upstream_done(ec);
    if (closed()) return;
    if (ec == bhttp::error::need_buffer) ec = {};
    // A body delimited by the upstream closing ends with end_of_stream once complete.
    if (ec == bhttp::error::end_of_stream && res_->is_done()) ec = {};
    const std::size_t n = res_->streamed();
    if (ec && n == 0) {
      // The upstream broke off mid-body (closed, stalled, garbage): the client's response
      // cannot be completed, its connection is closed.
      cut_off(ec);
      return close();
    }
    if (n == 0) return relay_response_body();
    write_to_client(false, n, bool(ec));
  }

  void finish_response() {
    if (response_framing_ == Framing::chunked) {
      response_framing_ = Framing::none;  // written once
      client_write_begins(proxy_.upstream.timeout);
      net::async_write(client_, down_frames_.last_chunk(),
                       [self = self<ProxySession>()](beast::error_code e, std::size_t) {
                         e = self->client_write_done(e);
                         if (self->closed()) return;
                         if (e) return self->client_gone(e);
                         self->finish_response();
                       });
      return;
    }
    finish_usage(usage_);
    // Back to the pool only when both messages completed cleanly.
    if (upstream_reusable_ && req_->is_done() && up_->buffer.size() == 0) {
      pool_.put(std::move(up_));
    }
    drop_upstream();
    next_request();
  }

  void next_request() {
    end_served();
    ++req_id_;
    res_.reset();
    reuse_fields(std::move(limiter_fields_));
    limiter_fields_.clear();
    body_started_ = false;
    // A keep-alive connection waiting for its next request holds no body buffers: many idle
    // clients cost little.
    up_body_.release();
    down_body_.release();
    if (client_buf_.capacity() > kIdleBuffer) client_buf_.shrink_to_fit();
    if (client_keep_) return read_request();
    graceful_close();
  }

  // ---- an upgraded connection (WebSocket): bytes both ways --------------------------------

  void switch_protocols() {
    enter(Phase::responding);
    proxy_.count(proxy_.upgrades);
    write_client_upgrade_head(head_, res_->reason(), res_->fields(), limiter_fields_);
    client_write_begins(proxy_.upstream.timeout);
    net::async_write(client_, net::buffer(head_), [self = self<ProxySession>()](beast::error_code ec, std::size_t) {
      ec = self->client_write_done(ec);
      if (self->closed()) return;
      if (ec) return self->client_gone(ec);
      self->start_tunnel();
    });
  }

  // From here the connection is the upgraded protocol's: what either side sends goes to the
  // other as it is, until one of them closes or the tunnel's time bounds end it. The bytes
  // already read past either head go first.
  void start_tunnel() {
    end_served();  // the upgrade's line: the tunnel that follows is not a request
    tunnel_ = true;
    proxy_.tunnels_open.fetch_add(1, std::memory_order_relaxed);
    client_.expires_never();
    up_->stream.expires_never();
    tunnel_started_ = tunnel_active_ = std::chrono::steady_clock::now();
    arm_tunnel_timer();
    if (draining_) return close_tunnel(TunnelEnd::shutdown);
    tunnel_relay(client_, client_buf_, up_->stream);
    tunnel_relay(up_->stream, up_->buffer, client_);
  }

  // One direction: writes what `buffer` holds to `to`, then reads more from `from`.
  void tunnel_relay(Stream& from, beast::flat_buffer& buffer, Stream& to) {
    if (closed()) return;
    if (buffer.size() != 0) {
      net::async_write(to, buffer.data(), [self = self<ProxySession>(), &from, &buffer, &to](
                                               beast::error_code ec, std::size_t n) {
        if (self->closed()) return;
        if (ec) return self->close_tunnel(TunnelEnd::error, ec);
        buffer.consume(n);
        self->tunnel_relay(from, buffer, to);
      });
      return;
    }
    constexpr std::size_t kTunnelRead = std::size_t{16} * 1024;
    from.async_read_some(buffer.prepare(kTunnelRead), [self = self<ProxySession>(), &from, &buffer, &to](
                                                          beast::error_code ec, std::size_t n) {
      if (self->closed()) return;
      buffer.commit(n);
      if (n > 0) self->tunnel_active_ = std::chrono::steady_clock::now();
      // Either side closing (or resetting) ends the tunnel.
      if (ec && n == 0) return self->close_tunnel(&from == &self->client_ ? TunnelEnd::client : TunnelEnd::upstream);
      self->tunnel_relay(from, buffer, to);
    });
  }

  void arm_tunnel_timer() {
    const auto end = std::min(tunnel_active_ + to_duration(proxy_.upstream.tunnel_idle_timeout),
                              tunnel_started_ + to_duration(proxy_.upstream.tunnel_max_duration));
    tunnel_timer_.expires_at(end);
    tunnel_timer_.async_wait([self = self<ProxySession>()](beast::error_code ec) {
      if (ec || self->closed()) return;
      const auto now = std::chrono::steady_clock::now();
      if (now >= self->tunnel_started_ + to_duration(self->proxy_.upstream.tunnel_max_duration)) {
        return self->close_tunnel(TunnelEnd::max_duration);
      }
      if (now >= self->tunnel_active_ + to_duration(self->proxy_.upstream.tunnel_idle_timeout)) {
        return self->close_tunnel(TunnelEnd::idle);
      }
      self->arm_tunnel_timer();
    });
  }

  // ---- answers of the proxy itself ---------------------------------------------------------

  // The request's method and target as the logs name them ("-" before its head was read).
  std::string_view logged_method() {
    return req_ && req_->is_header_done() ? std::string_view(req_->request().method) : std::string_view("-");
  }
  std::string_view logged_target() {
    return req_ && req_->is_header_done() ? std::string_view(req_->request().target) : std::string_view("-");
  }

  void cut_off(const beast::error_code& ec) {
    proxy_.upstream_cut_off(ec, ec == beast::error::timeout, logged_method(), logged_target(), "");
  }

  void upstream_failed(const JsonError& error, std::atomic<std::uint64_t>& counter,
                       beast::error_code ec = {}, std::string why = {}) {
    proxy_.upstream_failed(error, counter, ec, std::move(why), logged_method(), logged_target(), "");
    drop_upstream();
    answer_error(error, true);
  }

  void answer_error(const JsonError& error, bool keep) {
    answer_local(error.status, "application/json", error.body, {}, keep);
  }

  // A response of the proxy's own; the connection goes on when `keep` and the request has
  // been read whole.
  void answer_local(int status, std::string_view content_type, std::string_view body,
                    HeaderList fields, bool keep) {
    usage_.reset();  // an admitted request answered here (the upstream failed): released
    if (phase_ == Phase::responding) return close();  // nothing else can be said any more
    begin_served();  // a no-op when the request's header was read
    served_.status = status;
    served_.bytes = body.size();
    client_keep_ = keep && keep_alive_ && !draining_ && req_ && req_->is_header_done() &&
                   (!request_body_ || req_->is_done());
    fields.emplace_back("Server", "ratekeeper");
    if (!content_type.empty()) fields.emplace_back("Content-Type", std::string(content_type));
    head_ = response_head(version_, status, reason_of(status), fields, Framing::length,
                          body.size(), client_keep_);
    reuse_fields(std::move(fields));
    head_ += body;
    client_write_begins(proxy_.options.read_timeout);
    net::async_write(client_, net::buffer(head_), [self = self<ProxySession>()](
                                                      beast::error_code ec, std::size_t) {
      ec = self->client_write_done(ec);
      if (self->closed()) return;
      if (ec) return self->close();
      if (self->client_keep_) return self->next_request();
      self->end_served();
      self->linger();
    });
  }

  // ---- closing -------------------------------------------------------------------------

  // `ec`: why a write of the response failed; a timeout (the client took none of it for
  // upstream.timeout) is logged.
  void client_gone(const beast::error_code& ec = {}) {
    proxy_.count(proxy_.client_aborted);
    if (ec == beast::error::timeout) proxy_.client_stalled(peer_address_, logged_method(), logged_target(), false);
    close();
  }

  // The body did not arrive within request_timeout: the upstream's request is cut short, the
  // client told why (if nothing of the response has gone to it yet), and the connection closes.
  void request_timed_out() {
    proxy_.count(proxy_.client_aborted);
    drop_upstream();
    if (phase_ == Phase::responding) return close();
    answer_error(kRequestTimeout, false);
  }

  void graceful_close() {
    beast::error_code ec;
    client_.tcp().socket().shutdown(tcp::socket::shutdown_send, ec);
    close();
  }

  // Half-closes, then reads and discards what the client still sends until it closes, the
  // byte budget is spent or the time is up; then closes.
  void linger() {
    beast::error_code ec;
    client_.tcp().socket().shutdown(tcp::socket::shutdown_send, ec);
    if (ec) return close();
    lingered_ = 0;
    client_.expires_after(kLingerTime);
    read_discard();
  }

  void read_discard() {
    constexpr std::size_t kDiscard = std::size_t{16} * 1024;
    client_.async_read_some(net::buffer(down_body_.room(kDiscard), kDiscard), [self = self<ProxySession>()](
                                                         beast::error_code ec, std::size_t n) {
      self->lingered_ += n;
      if (ec || self->closed() || self->lingered_ >= kLingerBytes) return self->close();
      self->read_discard();
    });
  }

  void drop_upstream() { retire(std::move(up_)); }

  // An operation on the upstream connection begins, bounded by upstream.timeout; its handler
  // reads its error through upstream_done.
  void upstream_begins() {
    up_deadline_.begin(to_duration(proxy_.upstream.timeout), self<ProxySession>(), [](const Self& self) {
      if (self->closed() || !self->up_) return;
      beast::error_code ignored;
      self->up_->stream.tcp().socket().close(ignored);
    });
  }
  beast::error_code upstream_done(beast::error_code ec) { return up_deadline_.done(ec); }

  // The same for the client connection, bounded by `timeout`: one deadline for its reads
  // (read_timeout) and one for its writes (upstream.timeout for a response relayed,
  // read_timeout for one the proxy answers), so that each keeps its own timeout.
  void client_read_begins(Micros timeout) { client_begins(client_read_deadline_, timeout); }
  void client_write_begins(Micros timeout) { client_begins(client_write_deadline_, timeout); }
  void client_begins(LazyDeadline& deadline, Micros timeout) {
    deadline.begin(to_duration(timeout), self<ProxySession>(), [](const Self& self) {
      if (self->closed()) return;
      beast::error_code ignored;
      self->client_.tcp().socket().close(ignored);
    });
  }
  beast::error_code client_read_done(beast::error_code ec) { return client_read_deadline_.done(ec); }
  beast::error_code client_write_done(beast::error_code ec) { return client_write_deadline_.done(ec); }

  void close() {
    if (closed()) return;
    phase_ = Phase::closed;
    usage_.reset();  // a request cut short: released
    end_served();  // a request cut short: its line says what was sent (status 0: nothing)
    end_tunnel();
    delay_timer_.cancel();
    tunnel_timer_.cancel();
    body_timer_.cancel();
    client_read_deadline_.cancel();
    client_write_deadline_.cancel();
    up_deadline_.cancel();
    resolver_.cancel();
    drop_upstream();
    beast::error_code ec;
    client_.tcp().socket().shutdown(tcp::socket::shutdown_send, ec);
    client_.tcp().socket().close(ec);
  }

  // ---- what a request leaves behind: its access log line and latency samples ----------------

  void begin_served() {
    if (!served_.active) served_ = proxy_.begin_served();
  }

  void end_served() {
    if (!served_.active) return;
    served_.active = false;
    const bool has_request = req_ && req_->is_header_done();
    proxy_.observe(served_, peer_address_, has_request ? std::string_view(req_->request().method) : std::string_view(),
                   has_request ? std::string_view(req_->request().target) : std::string_view());
  }

  // Ends the tunnel: counted by why; a time bound or a failed write is logged (a burst, then a
  // line a second), the sides closing as they may is not.
  void close_tunnel(TunnelEnd why, beast::error_code ec = {}) {
    tunnel_end_ = why;
    if (tunnel_ && (why == TunnelEnd::idle || why == TunnelEnd::max_duration || why == TunnelEnd::error)) {
      std::uint64_t suppressed = 0;
      if (proxy_.tunnel_log.admit(suppressed)) {
        const auto lasted = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() -
                                                                             tunnel_started_);
        spdlog::info("proxy: tunnel of {} closed after {}s: {}{}", peer_address_, lasted.count(),
                     why == TunnelEnd::idle           ? "no byte either way for upstream.tunnel_idle_timeout"
                     : why == TunnelEnd::max_duration ? "upstream.tunnel_max_duration reached"
                                                      : "a write failed: " + ec.message(),
                     suppressed > 0 ? fmt::format(" ({} similar lines left out)", suppressed) : std::string());
      }
    }
    close();
  }

  void end_tunnel() {
    if (!tunnel_) return;
    tunnel_ = false;
    proxy_.tunnels_open.fetch_sub(1, std::memory_order_relaxed);
    proxy_.count(proxy_.tunnels_closed[static_cast<std::size_t>(tunnel_end_)]);
  }

  void hold(std::size_t n) {
    proxy_.hold(n);
    held_ += n;
  }
  void release_held() {
    proxy_.release(held_);
    held_ = 0;
  }

  Proxy::Impl& proxy_;  // kept alive by core_
  std::shared_ptr<TlsServerContext> tls_;  // with TLS: the listener's context when accepted
  Stream client_;  // moved to an HTTP/2 session when the client asks for HTTP/2
  Stream::executor_type executor_;  // the connection's thread, whoever has its stream
  UpstreamPool& pool_;
  net::steady_timer delay_timer_;
  net::steady_timer body_timer_;  // request_timeout of the request's body
  net::steady_timer tunnel_timer_;  // an upgraded connection's idle and total time
  LazyDeadline client_read_deadline_;   // the client connection's reads (after a TLS handshake)
  LazyDeadline client_write_deadline_;  // and writes
  LazyDeadline up_deadline_;      // the upstream connection's, upstream.timeout each
  bool reading_body_ = false;     // a read of the request's body is under way
  bool watching_held_ = false;    // watch_held_client's wait is under way
  tcp::resolver resolver_;
  beast::flat_buffer client_buf_;
  std::optional<RequestParser> req_;
  std::optional<ResponseParser> res_;
  std::unique_ptr<UpstreamConnection> up_;
  BodyBuffer up_body_;    // client → upstream, one piece at a time
  BodyBuffer down_body_;  // upstream → client
  std::string head_;
  Frames up_frames_;    // the writes to the upstream (head, request body)
  Frames down_frames_;  // the writes to the client (head, response body)
  HeaderList limiter_fields_;
  std::unique_ptr<PendingUsage> usage_;  // the request's reservation, settled by its response's head
  std::string peer_address_;
  std::uint16_t peer_port_ = 0;
  std::size_t held_ = 0;
  std::size_t lingered_ = 0;
  std::uint64_t request_length_ = 0;
  std::uint64_t response_length_ = 0;  // the body's, when response_framing_ is length
  std::uint64_t req_id_ = 0;
  std::uint64_t decided_ = std::numeric_limits<std::uint64_t>::max();
  Framing request_framing_ = Framing::none;
  Framing response_framing_ = Framing::none;
  int version_ = 11;
  bool keep_alive_ = true;
  bool client_keep_ = false;
  bool head_request_ = false;
  bool expect_continue_ = false;
  bool body_expected_ = true;
  bool upstream_reusable_ = false;
  bool reused_ = false;
  bool retried_ = false;
  bool idempotent_ = false;
  bool body_started_ = false;
  // When the request's body must have arrived (request_timeout after its first read).
  std::optional<std::chrono::steady_clock::time_point> body_deadline_;
  bool request_body_ = false;    // the request has a body to relay
  bool last_upstream_request_ = false;  // a body with a method that has none: Connection: close
  std::string upgrade_;          // the protocol the request asks to upgrade to (empty: none)
  bool tunnel_ = false;          // upgraded: relaying bytes both ways (counted in tunnels_open)
  TunnelEnd tunnel_end_ = TunnelEnd::error;  // why the tunnel ends (closed by another path: error)
  Served served_;  // the request being served, for its access log line and latency samples
  std::chrono::steady_clock::time_point tunnel_started_;
  std::chrono::steady_clock::time_point tunnel_active_;  // the last byte read either way
  std::atomic<bool> draining_{false};  // set by shutdown(), from any thread
  // Where the session is: waiting for a request's header, handling a request (deciding,
  // held, forwarding), writing its response (the head went to the client: nothing else can
  // be answered), or closed. One value, changed by enter() and close(); nothing leaves closed.
  enum class Phase : std::uint8_t { awaiting, handling, responding, closed };
  Phase phase_ = Phase::awaiting;
  void enter(Phase next) noexcept {
    if (phase_ != Phase::closed) phase_ = next;
  }
  bool closed() const noexcept { return phase_ == Phase::closed; }
};

// ---- HTTP/2 to clients ------------------------------------------------------------------------
//
// One client connection speaking HTTP/2 (ALPN h2 over TLS, or h2c with prior knowledge): its
// frames go through H2Connection; each request stream is decided by the middleware as a
// request of its own and, admitted, forwarded to the upstream over HTTP/1.1 (a connection of
// the pool per stream in flight). A request's body arrives whole (up to http.max_body_bytes)
// before it is forwarded; the response's body is streamed back, read from the upstream only
// while the stream's buffer holds less than upstream.buffer_bytes (the client's flow control
// paces the upstream).
class H2ProxySession final : public ClientConnection {
 public:
  H2ProxySession(std::shared_ptr<Proxy::Impl> proxy, Stream&& client, std::shared_ptr<TlsServerContext> tls,
                 std::string received, std::string peer_address, std::uint16_t peer_port)
      : ClientConnection(proxy),
        proxy_(*proxy),
        tls_(std::move(tls)),
        client_(std::move(client)),
        pool_(proxy_.pool_of(client_.get_executor())),
        resolver_(client_.get_executor()),
        sweep_timer_(client_.get_executor()),
        received_(std::move(received)),
        peer_address_(std::move(peer_address)),
        peer_port_(peer_port),
        h2_(limits(proxy_),
            H2Connection::Events{
                .request = [this](std::int32_t id, Request r) { on_request(id, std::move(r)); },
                .closed = [this](std::int32_t id) { on_stream_closed(id); },
                .drained = [this](std::int32_t id) { on_drained(id); },
                .ended = [this](std::uint32_t code, std::string_view reason) {
                  proxy_.h2_ended(code, reason, peer_address_);
                },
            }) {}

  void start() override {
    net::dispatch(client_.get_executor(), [self = self<H2ProxySession>()] {
      self->proxy_.count(self->proxy_.h2_connections);
      const std::string first = std::move(self->received_);
      self->feed(first);
      if (self->closed_) return;
      self->read();
      self->sweep();
    });
  }

  void shutdown() override {
    draining_.store(true);
    net::post(client_.get_executor(), [self = self<H2ProxySession>()] {
      if (self->closed_) return;
      self->h2_.go_away();  // no new streams; those open finish
      self->flush();
    });
  }

  void abort() override {
    net::post(client_.get_executor(), [self = self<H2ProxySession>()] { self->close(); });
  }

 private:
  // A request stream forwarded (or about to be) to the upstream.
  struct Exchange {
    std::int32_t id = 0;
    Request request;
    Served served;
    HeaderList limiter_fields;
    // Its reservation, settled by the response's head. This and the delay's timer, seldom
    // there, are held apart: an exchange is allocated for every stream, and at their size it
    // would take malloc's slow path.
    std::unique_ptr<PendingUsage> usage;
    std::unique_ptr<UpstreamConnection> up;
    std::optional<ResponseParser> res;
    std::unique_ptr<net::steady_timer> delay;
    BodyBuffer body;
    std::string head;
    // While an operation on the upstream connection is under way, when it times out
    // (upstream.timeout); the sweep closes the connection then. Unset between operations.
    std::chrono::steady_clock::time_point up_deadline{};
    bool timed_out = false;    // the sweep closed the upstream connection: its operation timed out
    bool gone = false;         // the client's stream closed: nothing more is done for it
    bool reading = false;      // a read of the response body is under way
    bool waiting_room = false; // the response body waits for the stream's buffer to drain
    // While waiting for room: when the client's window has been shut too long (upstream.timeout
    // from when it began to wait); the sweep resets the stream then.
    std::chrono::steady_clock::time_point room_deadline{};
    bool reused = false;
    bool retried = false;
    bool head_request = false;

    ~Exchange() { reuse_fields(std::move(limiter_fields)); }
  };
  using ExchangePtr = std::shared_ptr<Exchange>;

  static H2Limits limits(const Proxy::Impl& proxy) {
    H2Limits l;
    l.header_limit = proxy.options.header_limit;
    l.body_limit = proxy.options.body_limit;
    return l;
  }

  // ---- the connection ------------------------------------------------------------------------

  void feed(std::string_view bytes) {
    in_frames_ = true;
    if (!h2_.receive(bytes)) going_ = true;  // a protocol error or a flood: GOAWAY, then close
    in_frames_ = false;
    flush();
  }

  void read() {
    if (closed_ || going_) return;
    // An idle connection (no stream open) is bounded as a keep-alive one, from when its last
    // stream was: frames that open no stream (PING, SETTINGS, WINDOW_UPDATE) do not keep it.
    // With streams open, a client that sends nothing (no frame, no window update) for as long
    // as a request's body or an upstream's answer may take is gone.
    const auto now = std::chrono::steady_clock::now();
    if (h2_.open_streams() == 0) {
      client_.expires_at(active_at_ + to_duration(proxy_.options.read_timeout));
    } else {
      active_at_ = now;
      client_.expires_at(now + to_duration(std::max(proxy_.options.request_timeout, proxy_.upstream.timeout)));
    }
    client_.async_read_some(net::buffer(in_), [self = self<H2ProxySession>()](beast::error_code ec, std::size_t n) {
      if (self->closed_) return;
      if (ec) return self->close();
      self->feed(std::string_view(self->in_.data(), n));
      self->read();
    });
  }

  // Writes what the frame layer has to send. Not from inside the frame layer (its events): the
  // caller of receive() or take_output() flushes once it returns.
  void flush() {
    if (closed_ || writing_ || in_frames_) return;
    out_.clear();
    in_frames_ = true;
    h2_.take_output(out_);
    in_frames_ = false;
    if (out_.empty()) {
      if (going_ || !h2_.alive() || (draining_ && h2_.open_streams() == 0)) close();
      return;
    }
    writing_ = true;
    write_began_ = std::chrono::steady_clock::now();
    net::async_write(client_, net::buffer(out_), [self = self<H2ProxySession>()](beast::error_code ec, std::size_t) {
      self->writing_ = false;
      if (self->closed_) return;
      if (ec) return self->close();
      self->flush();
    });
  }

  // Every second (or every quarter of the shorter timeout, when that is less): the streams
  // whose request is not whole within http.request_timeout of its first frame are answered
  // 408, and the upstream operations under way longer than upstream.timeout are cut. One timer
  // for the session, where a timer per operation would be armed and cancelled several times a
  // stream.
  void sweep() {
    const auto timeout = to_duration(proxy_.options.request_timeout);
    using Duration = std::chrono::steady_clock::duration;
    const auto every = std::min<Duration>({std::chrono::seconds(1), timeout / 4, to_duration(proxy_.upstream.timeout) / 4});
    sweep_timer_.expires_after(every);
    sweep_timer_.async_wait([self = self<H2ProxySession>(), timeout](beast::error_code ec) {
      if (ec || self->closed_) return;
      const auto now = std::chrono::steady_clock::now();
      self->in_frames_ = true;
      const std::size_t late = self->h2_.expire(now - timeout);
      self->in_frames_ = false;
      if (late > 0) {
        self->proxy_.client_aborted.fetch_add(late, std::memory_order_relaxed);
        self->flush();
      }
      std::vector<ExchangePtr> stalled;
      for (const auto& [id, x] : self->exchanges_) {
        if (x->up && x->up_deadline != std::chrono::steady_clock::time_point{} && x->up_deadline <= now) {
          // Its operation completes now, as cancelled, and reads timed_out.
          x->timed_out = true;
          x->up_deadline = {};
          x->up->stream.tcp().close();
        }
        if (x->waiting_room && x->room_deadline <= now) stalled.push_back(x);
      }
      // A client that lets none of a response through (its window shut) holds the stream's
      // upstream connection and buffer no longer than an upstream that sends nothing would.
      for (const auto& x : stalled) self->stall(*x);
      if (!stalled.empty()) self->flush();
      // Nor does one that reads none of the bytes written to it, however many frames it sends
      // (which move the read deadline): a write under way for upstream.timeout ends the
      // connection, as over HTTP/1.1.
      if (self->writing_ && now - self->write_began_ >= to_duration(self->proxy_.upstream.timeout)) {
        self->proxy_.count(self->proxy_.client_aborted);
        self->proxy_.h2_unread(self->peer_address_, self->h2_.open_streams());
        return self->close();
      }
      self->sweep();
    });
  }

  // An operation on the exchange's upstream connection begins (its deadline: upstream.timeout
  // from now) or has completed.
  void upstream_begins(Exchange& x) const {
    x.up_deadline = std::chrono::steady_clock::now() + to_duration(proxy_.upstream.timeout);
  }
  static void upstream_done(Exchange& x) { x.up_deadline = {}; }

  void close() {
    if (closed_) return;
    closed_ = true;
    sweep_timer_.cancel();
    for (auto& [id, x] : exchanges_) drop(*x);
    exchanges_.clear();
    resolver_.cancel();
    beast::error_code ec;
    client_.tcp().socket().shutdown(tcp::socket::shutdown_send, ec);
    client_.tcp().socket().close(ec);
  }

  // ---- a request stream ----------------------------------------------------------------------

  void on_request(std::int32_t id, Request request) {
    proxy_.requests.fetch_add(1, std::memory_order_relaxed);
    auto x = std::make_shared<Exchange>();
    x->id = id;
    x->served = proxy_.begin_served();
    x->head_request = request.method == "HEAD";
    request.peer_address = peer_address_;
    request.peer_port = peer_port_;
    exchanges_[id] = x;
    // CONNECT has no :path: answered 501 as over HTTP/1.1, before its target is looked at.
    const bool connect = request.method == "CONNECT";
    auto target = connect ? Result<std::string>(std::string()) : normalize_target(request.target, proxy_.paths);
    if (connect || !target) {
      x->request = std::move(request);
      return answer(*x, !target ? 400 : kNotImplemented.status, "application/json",
                    !target ? bad_request_body(target.error().message) : std::string(kNotImplemented.body), {});
    }
    request.target = std::move(*target);
    x->request = std::move(request);
    auto executor = client_.get_executor();
    const bool returned = contain("the proxy's middleware", [&] {
      std::shared_ptr<Middleware> middleware = proxy_.middleware();
      Middleware& decider = *middleware;
      decider.handle(x->request, [self = self<H2ProxySession>(), x, executor,
                                  middleware = std::move(middleware)](MiddlewareResult r) mutable {
        if (on_thread_of(executor)) return self->on_decision(x, std::move(r), std::move(middleware));
        net::dispatch(executor, [self, x, r = std::move(r), middleware]() mutable {
          self->on_decision(x, std::move(r), std::move(middleware));
        });
      });
    });
    if (!returned) {
      proxy_.handler_exceptions.fetch_add(1, std::memory_order_relaxed);
      answer(*x, kInternal.status, "application/json", std::string(kInternal.body), {});
    }
  }

  void on_decision(const ExchangePtr& x, MiddlewareResult&& result, std::shared_ptr<Middleware> middleware) {
    if (closed_ || x->gone || x->served.status != 0) return;
    x->served.outcome = result.outcome;
    x->served.rule = std::move(result.rule);
    if (result.usage) {
      x->usage = std::make_unique<PendingUsage>(std::move(*result.usage), std::move(middleware), client_.get_executor());
    }
    if (!result.admitted) {
      proxy_.count(proxy_.answered_by_limiter);
      return answer(*x, result.status, result.content_type, std::move(result.body), std::move(result.headers));
    }
    x->limiter_fields = std::move(result.headers);
    if (result.delay > 0) {
      proxy_.count(proxy_.delayed);
      x->delay = std::make_unique<net::steady_timer>(client_.get_executor());
      x->delay->expires_after(to_duration(result.delay));
      x->delay->async_wait([self = self<H2ProxySession>(), x](beast::error_code ec) {
        if (!ec && !self->closed_ && !x->gone) self->forward(x);
      });
      return;
    }
    forward(x);
  }

  // The proxy's own answer on a stream.
  void answer(Exchange& x, int status, std::string_view content_type, std::string body, HeaderList fields) {
    fields.emplace_back("server", "ratekeeper");
    x.served.status = status;
    x.served.bytes = body.size();
    h2_.respond(x.id, Response{status, std::string(content_type), std::move(fields), std::move(body)});
    flush();
  }

  void forward(const ExchangePtr& x) {
    x->up = pool_.take();
    if (x->up) {
      x->reused = true;
      proxy_.count(proxy_.reused);
      return send(x);
    }
    connect(x);
  }

  void connect(const ExchangePtr& x) {
    x->reused = false;
    x->up = std::make_unique<UpstreamConnection>(client_.get_executor(), proxy_.upstream_tls,
                                                 proxy_.upstream_buffer_limit());
    auto* connecting = x->up.get();
    proxy_.open_upstream(*x->up, resolver_, [self = self<H2ProxySession>(), x, connecting] {
      return self->closed_ || x->gone || x->up.get() != connecting;
    }, [self = self<H2ProxySession>(), x](const UpstreamOpened& opened) {
      switch (opened.result) {
        case UpstreamOpened::ok: return self->send(x);
        case UpstreamOpened::timeout: return self->failed(*x, kTimeout, self->proxy_.upstream_timeout, opened.ec);
        case UpstreamOpened::unreachable:
          return self->failed(*x, kUnreachable, self->proxy_.upstream_unreachable, opened.ec, opened.why);
      }
    });
  }

  void send(const ExchangePtr& x) {
    const Request& r = x->request;
    const bool bodyless_method = body_unexpected(r.method);
    const Framing framing = r.body.empty() && bodyless_method ? Framing::none : Framing::length;
    write_upstream_request_head(x->head, r.method, r.target, r.headers,
                                Forwarding(peer_address_, proxy_.scheme(), {}, bodyless_method && !r.body.empty()),
                                framing, r.body.size());
    x->served.upstream_sent = std::chrono::steady_clock::now();
    // A new connection still holds its connect timeout; the session's sweep bounds what follows
    // (a pooled connection has none).
    if (!x->reused) x->up->stream.expires_never();
    upstream_begins(*x);
    const std::array<net::const_buffer, 2> buffers{net::buffer(x->head), net::buffer(r.body)};
    net::async_write(x->up->stream, buffers, [self = self<H2ProxySession>(), x](beast::error_code ec, std::size_t) {
      upstream_done(*x);
      if (self->closed_ || x->gone) return;
      if (ec) {
        if (x->timed_out) return self->failed(*x, kTimeout, self->proxy_.upstream_timeout, ec, std::string(kTimedOut));
        if (self->retry(x)) return;
        return self->failed(*x, kUnreachable, self->proxy_.upstream_unreachable, ec);
      }
      self->proxy_.count(self->proxy_.forwarded);
      self->read_head(x);
    });
  }

  // A reused connection the upstream closed meanwhile fails at once: a request without body
  // that changes nothing goes again, once, on a new connection.
  bool retry(const ExchangePtr& x) {
    if (!x->reused || x->retried || !x->request.body.empty() || !idempotent(x->request.method)) return false;
    x->retried = true;
    drop(*x);
    connect(x);
    return true;
  }

  void read_head(const ExchangePtr& x) {
    x->res.emplace(static_cast<std::uint32_t>(std::max(proxy_.options.header_limit, kMinResponseHeaderLimit)));
    if (x->head_request) x->res->skip(true);
    upstream_begins(*x);
    async_read_message(x->up->stream, x->up->buffer, *x->res, ReadUntil::header,
                             [self = self<H2ProxySession>(), x](beast::error_code ec, std::size_t) {
                               upstream_done(*x);
                               if (self->closed_ || x->gone) return;
                               self->on_head(x, ec);
                             });
  }

  void on_head(const ExchangePtr& x, beast::error_code ec) {
    if (ec && x->timed_out) return failed(*x, kTimeout, proxy_.upstream_timeout, ec, std::string(kTimedOut));
    if (ec) {
      if (retry(x)) return;
      return failed(*x, kBadResponse, proxy_.upstream_bad_response, ec);
    }
    const int status = x->res->status();
    if (status == 101) return failed(*x, kBadResponse, proxy_.upstream_bad_response, {});  // no upgrade over h2
    if (status >= 100 && status < 200) return read_head(x);
    settle_usage(x->usage, x->res->fields());
    x->served.upstream = since(x->served.upstream_sent);
    x->served.status = status;
    const bool body = !x->head_request && status != 204 && status != 304 && !x->res->is_done();
    response_fields_.clear();
    each_client_response_field(x->res->fields(), x->limiter_fields,
                               [this](std::string_view n, std::string_view v) { response_fields_.add(n, v); });
    if (const auto length = x->res->content_length(); length && (x->head_request || body)) {
      const fmt::format_int text(*length);
      response_fields_.add("content-length", std::string_view(text.data(), text.size()));
    }
    h2_.respond(x->id, status, response_fields_, body);
    if (!body) {
      release(*x);
    } else {
      relay(x);
    }
    flush();
  }

  // The response body, upstream → stream, while the stream's buffer has room.
  void relay(const ExchangePtr& x) {
    if (x->res->is_done()) return release(*x);
    if (h2_.buffered(x->id) >= proxy_.upstream.buffer_size) {
      x->waiting_room = true;  // on_drained() resumes
      x->room_deadline = std::chrono::steady_clock::now() + to_duration(proxy_.upstream.timeout);
      return;
    }
    const auto length = x->res->content_length();
    const std::size_t room = piece_size(proxy_.upstream.buffer_size, length.has_value(), length.value_or(0));
    x->res->stream_body(x->body.room(room), room);
    beast::error_code ec;
    parse_buffered(*x->res, x->up->buffer, ec);
    if (ec) return aborted(*x, ec);
    if (const std::size_t n = x->res->streamed(); n > 0) {
      x->served.bytes += n;
      feed_usage(x->usage, std::string_view(x->body.data(), n));
      h2_.body(x->id, std::string_view(x->body.data(), n), x->res->is_done());
      flush();
      return relay(x);
    }
    x->up->buffer.reserve(room);
    x->res->stream_body(x->body.room(room), room);
    upstream_begins(*x);
    x->reading = true;
    async_read_message(x->up->stream, x->up->buffer, *x->res, ReadUntil::some,
                           [self = self<H2ProxySession>(), x](beast::error_code ec, std::size_t) {
                             upstream_done(*x);
                             x->reading = false;
                             if (self->closed_ || x->gone) return;
                             if (ec == bhttp::error::need_buffer) ec = {};
                             if (ec == bhttp::error::end_of_stream && x->res->is_done()) ec = {};
                             const std::size_t n = x->res->streamed();
                             if (n > 0) {
                               x->served.bytes += n;
                               feed_usage(x->usage, std::string_view(x->body.data(), n));
                               self->h2_.body(x->id, std::string_view(x->body.data(), n), !ec && x->res->is_done());
                               self->flush();
                             }
                             if (ec) return self->aborted(*x, ec);
                             self->relay(x);
                           });
  }

  void on_drained(std::int32_t id) {
    const auto it = exchanges_.find(id);
    if (it == exchanges_.end() || !it->second->waiting_room) return;
    it->second->waiting_room = false;
    it->second->room_deadline = {};
    // Resumed after the frames are out: not inside the frame layer's callback.
    net::post(client_.get_executor(), [self = self<H2ProxySession>(), x = it->second] {
      if (!self->closed_ && !x->gone) self->relay(x);
    });
  }

  // An exchange's upstream connection goes back to the pool when its response was read whole
  // and the connection may carry another; any other is closed. The stream may close first (its
  // last DATA frame written by the flush that relayed the end of the body): the connection is
  // still reusable then.
  void release(Exchange& x) {
    finish_usage(x.usage);
    const bool last = !x.request.body.empty() && body_unexpected(x.request.method);  // Connection: close
    if (x.up && x.res && x.res->is_done() && x.res->keep_alive() && !last && x.up->buffer.size() == 0) {
      pool_.put(std::move(x.up));
    }
    drop(x);
  }

  void failed(Exchange& x, const JsonError& error, std::atomic<std::uint64_t>& counter, beast::error_code ec,
              std::string why = {}) {
    proxy_.upstream_failed(error, counter, ec, std::move(why), x.request.method, x.request.target, " (HTTP/2)");
    x.usage.reset();  // answered here: released
    drop(x);
    answer(x, error.status, "application/json", std::string(error.body), {});
  }

  // The upstream broke off mid-body: the stream is reset.
  void aborted(Exchange& x, const beast::error_code& ec) {
    proxy_.upstream_cut_off(ec, x.timed_out, x.request.method, x.request.target, " (HTTP/2)");
    drop(x);
    h2_.reset(x.id);
    flush();
  }

  void drop(Exchange& x) {
    if (x.delay) x.delay->cancel();
    retire(std::move(x.up));
  }

  // The stream's client let none of its response through for upstream.timeout: reset, its
  // upstream connection closed (the rest of the body is not read).
  void stall(Exchange& x) {
    x.waiting_room = false;
    x.room_deadline = {};
    proxy_.count(proxy_.h2_stalled);
    proxy_.client_stalled(peer_address_, x.request.method, x.request.target, true);
    x.usage.reset();  // cut short, it reports nothing: released, the estimate stays
    drop(x);
    h2_.reset(x.id);
  }

  void on_stream_closed(std::int32_t id) {
    const auto it = exchanges_.find(id);
    if (it == exchanges_.end()) return;
    auto x = it->second;
    exchanges_.erase(it);
    x->gone = true;
    active_at_ = std::chrono::steady_clock::now();
    if (x->up) {
      // Closed before its response was relayed whole (reset by the client, or the proxy).
      if (x->served.status == 0 || !x->res || !x->res->is_done()) {
        proxy_.count(proxy_.client_aborted);
        x->usage.reset();  // a body cut short reports nothing: released, the estimate stays
      }
      release(*x);
    }
    if (x->served.active) {
      x->served.active = false;
      proxy_.observe(x->served, peer_address_, x->request.method, x->request.target);
    }
    if (draining_ && h2_.open_streams() == 0) {
      net::post(client_.get_executor(), [self = self<H2ProxySession>()] { self->flush(); });
    }
  }

  Proxy::Impl& proxy_;  // kept alive by core_
  std::shared_ptr<TlsServerContext> tls_;  // the client stream's, with TLS
  Stream client_;
  UpstreamPool& pool_;
  tcp::resolver resolver_;
  net::steady_timer sweep_timer_;  // requests not whole within request_timeout: 408
  std::string received_;  // read by the session that saw HTTP/2 asked for: fed first
  std::string peer_address_;
  std::uint16_t peer_port_ = 0;
  H2Connection h2_;
  H2Fields response_fields_;  // a response head's fields, rebuilt in place for each stream
  std::map<std::int32_t, ExchangePtr> exchanges_;
  std::array<char, 16 * 1024> in_{};
  std::string out_;
  bool writing_ = false;
  std::chrono::steady_clock::time_point write_began_{};  // of the write under way, if writing_
  bool in_frames_ = false;  // inside the frame layer (its events run): no flush
  bool going_ = false;  // the frame layer ends the connection: close once its GOAWAY is out
  // When the connection last had a stream open (or began): idle from then on.
  std::chrono::steady_clock::time_point active_at_ = std::chrono::steady_clock::now();
  bool closed_ = false;
  std::atomic<bool> draining_{false};
};

void ProxySession::start_h2(std::string received) {
  client_read_deadline_.cancel();  // the HTTP/2 session bounds its own reads
  client_write_deadline_.cancel();
  auto h2 = std::make_shared<H2ProxySession>(std::static_pointer_cast<Proxy::Impl>(proxy_.shared_from_this()),
                                             std::move(client_), std::move(tls_), std::move(received), peer_address_,
                                             peer_port_);
  phase_ = Phase::closed;  // this session is done: its socket is the HTTP/2 session's
  if (!proxy_.adopt(h2)) return;  // stopping: the socket closes with the session
  h2->start();
}

std::shared_ptr<ClientConnection> Proxy::Impl::make_connection(tcp::socket socket) {
  return std::make_shared<ProxySession>(std::static_pointer_cast<Impl>(shared_from_this()),
                                        std::move(socket));
}

Result<UpstreamOptions> parse_upstream_url(std::string_view url) {
  auto bad = [&](std::string_view why) {
    return make_error(ErrorCode::invalid_argument, fmt::format("upstream url '{}': {}", url, why));
  };
  UpstreamOptions options;
  std::string_view rest;
  if (url.size() >= 8 && iequals(url.substr(0, 8), "https://")) {
    rest = url.substr(8);
    options.tls.enabled = true;
    options.port = 443;
  } else if (url.size() >= 7 && iequals(url.substr(0, 7), "http://")) {
    rest = url.substr(7);
  } else {
    return bad("expected http://host[:port] or https://host[:port]");
  }
  if (rest.ends_with('/')) rest.remove_suffix(1);
  if (rest.empty()) return bad("no host");
  if (rest.find_first_of("/?#@ \t\r\n") != std::string_view::npos) {
    return bad("only scheme://host[:port]: no path, query, fragment or credentials");
  }
  const auto split = split_host_port(rest);
  if (!split) return bad(split.error().message);
  const std::string_view host = split->host;
  if (!split->bracketed && host.find(':') != std::string_view::npos) return bad("an IPv6 address goes in brackets");
  if (host.empty()) return bad("no host");
  if (split->port) {
    const auto port = parse_port(*split->port);
    if (!port) return bad(port.error().message);
    options.port = *port;
  }
  options.host = std::string(host);
  return options;
}

Proxy::Proxy(ServerOptions server, UpstreamOptions upstream, Middleware& middleware)
    : Proxy(std::move(server), std::move(upstream), [&middleware] {
        // Not owned: the caller keeps it alive.
        return std::shared_ptr<Middleware>(std::shared_ptr<void>(), &middleware);
      }) {}

Proxy::Proxy(ServerOptions server, UpstreamOptions upstream, MiddlewareSource middleware)
    : loop_(server.loop ? server.loop : std::make_shared<EventLoop>(std::max(1, server.threads))),
      impl_(std::make_shared<Impl>(std::move(server), std::move(upstream), std::move(middleware),
                                   *loop_)) {
  if (impl_->upstream.buffer_size == 0) impl_->upstream.buffer_size = 1;
}

Proxy::~Proxy() {
  impl_->destroy(*loop_);
  // The idle upstream connections close on their own threads.
  for (std::size_t i = 0; i < loop_->size(); ++i) {
    loop_->post(i, [self = impl_, i] { self->pools[i]->clear(); });
  }
  if (!loop_->on_loop_thread()) loop_->barrier();
}

Result<void> Proxy::listen() {
  if (impl_->tls_error) return std::unexpected(*impl_->tls_error);
  return impl_->listen();
}
std::string Proxy::address() const {
  return impl_->address;
}
std::uint16_t Proxy::port() const {
  return impl_->port;
}
void Proxy::run() {
  impl_->run();
}
void Proxy::stop() {
  impl_->stop();
}
Server::Stats Proxy::stats() const {
  return impl_->stats();
}

ProxyStats Proxy::proxy_stats() const {
  const auto& im = *impl_;
  auto get = [](const std::atomic<std::uint64_t>& a) { return a.load(std::memory_order_relaxed); };
  ProxyStats s;
  s.forwarded = get(im.forwarded);
  s.answered_by_limiter = get(im.answered_by_limiter);
  s.delayed = get(im.delayed);
  s.held_client_gone = get(im.held_client_gone);
  s.upstream_unreachable = get(im.upstream_unreachable);
  s.upstream_timeout = get(im.upstream_timeout);
  s.upstream_bad_response = get(im.upstream_bad_response);
  s.upstream_aborted = get(im.upstream_aborted);
  s.client_aborted = get(im.client_aborted);
  s.upstream_connections_opened = get(im.opened);
  s.upstream_connections_reused = get(im.reused);
  s.upstream_tls_failures = get(im.upstream_tls_failures);
  s.upgrades = get(im.upgrades);
  s.tunnels_open = get(im.tunnels_open);
  for (std::size_t i = 0; i < s.tunnels_closed.size(); ++i) s.tunnels_closed[i] = get(im.tunnels_closed[i]);
  s.http2_connections = get(im.h2_connections);
  for (std::size_t i = 0; i < s.http2_goaways.size(); ++i) s.http2_goaways[i] = get(im.h2_goaways[i]);
  s.http2_streams_stalled = get(im.h2_stalled);
  s.buffered_bytes_high_water = get(im.buffered_high);
  return s;
}

std::string_view to_string(TunnelEnd end) noexcept {
  switch (end) {
    case TunnelEnd::client: return "client";
    case TunnelEnd::upstream: return "upstream";
    case TunnelEnd::idle: return "idle";
    case TunnelEnd::max_duration: return "max_duration";
    case TunnelEnd::error: return "error";
    case TunnelEnd::shutdown: return "shutdown";
  }
  return "unknown";
}

void write_proxy_metrics(MetricsWriter& out, const Proxy& proxy) {
  const auto s = proxy.proxy_stats();
  out.counter("ratekeeper_proxy_forwarded_total", "Admitted requests sent to the upstream.", s.forwarded);
  out.counter("ratekeeper_proxy_answered_by_limiter_total",
              "Requests answered by the rate limiter (429, 400, 500), never sent upstream.", s.answered_by_limiter);
  out.counter("ratekeeper_proxy_delayed_total", "Requests forwarded after waiting for their turn (on_limit: delay).",
              s.delayed);
  out.counter("ratekeeper_proxy_held_client_gone_total",
              "Requests held for their turn (on_limit: delay) whose client closed meanwhile: not forwarded.",
              s.held_client_gone);
  constexpr std::string_view kErrors = "Requests the upstream could not answer, by kind.";
  out.counter("ratekeeper_proxy_upstream_errors_total", kErrors, s.upstream_unreachable, {{"kind", "unreachable"}});
  out.counter("ratekeeper_proxy_upstream_errors_total", kErrors, s.upstream_timeout, {{"kind", "timeout"}});
  out.counter("ratekeeper_proxy_upstream_errors_total", kErrors, s.upstream_bad_response, {{"kind", "bad_response"}});
  out.counter("ratekeeper_proxy_upstream_errors_total", kErrors, s.upstream_aborted, {{"kind", "aborted"}});
  out.counter("ratekeeper_proxy_client_aborted_total", "Requests whose client went away before their response ended.",
              s.client_aborted);
  constexpr std::string_view kConnections =
      "Upstream connections used for a request, new or taken from the keep-alive pool.";
  out.counter("ratekeeper_proxy_upstream_connections_total", kConnections, s.upstream_connections_opened,
              {{"state", "opened"}});
  out.counter("ratekeeper_proxy_upstream_connections_total", kConnections, s.upstream_connections_reused,
              {{"state", "reused"}});
  out.counter("ratekeeper_proxy_upstream_tls_failures_total",
              "https upstream: TLS handshakes that failed (answered 502, counted as unreachable too).",
              s.upstream_tls_failures);
  out.counter("ratekeeper_proxy_upgrades_total", "Upgrades (WebSocket) the upstream accepted with 101.", s.upgrades);
  out.gauge("ratekeeper_proxy_tunnels_open", "Upgraded connections relaying bytes now.",
            static_cast<std::int64_t>(s.tunnels_open));
  for (std::size_t i = 0; i < s.tunnels_closed.size(); ++i) {
    out.counter("ratekeeper_proxy_tunnels_closed_total",
                "Upgraded connections ended, by why: client or upstream closed, idle (tunnel_idle_timeout), "
                "max_duration (tunnel_max_duration), error (a write failed), shutdown.",
                s.tunnels_closed[i], {{"reason", to_string(static_cast<TunnelEnd>(i))}});
  }
  out.counter("ratekeeper_proxy_http2_connections_total",
              "Client connections that spoke HTTP/2 (h2 by ALPN, or h2c with prior knowledge).", s.http2_connections);
  for (std::uint32_t code = 1; code < s.http2_goaways.size(); ++code) {
    out.counter("ratekeeper_proxy_http2_goaways_total",
                "HTTP/2 connections ended by the proxy for the client's error (a flood, a protocol error), by "
                "the GOAWAY's error code.",
                s.http2_goaways[code], {{"error", h2_error_name(code)}});
  }
  out.counter("ratekeeper_proxy_http2_streams_stalled_total",
              "HTTP/2 streams reset because their client let none of the response through for upstream.timeout.",
              s.http2_streams_stalled);
}

}  // namespace ratekeeper::http
