// http::Proxy over real sockets, in process, in front of the scripted TestUpstream: rules
// applied to any path, denied requests never forwarded, header rewriting, chunked bodies,
// keep-alive reuse, upstream failures (502/504) and client aborts, smuggling refused, paths
// normalised, and bodies streamed with bounded memory. The limiter runs on a MemoryStore with
// a manual clock: no refill during a test.

#include "ratekeeper/http/proxy.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <fstream>
#include <future>
#include <thread>

#include "config.hpp"
#include "ratekeeper/core/metrics_writer.hpp"
#include "ratekeeper/http/middleware.hpp"
#include "ratekeeper/store/memory_store.hpp"
#include "support/http_client.hpp"
#include "support/test_upstream.hpp"

namespace ratekeeper::testing {
namespace {

constexpr Micros kStart = 1'700'000'000LL * kMicrosPerSecond;

const char* kRules = R"(
logging: {decisions: {enabled: false}}
rules:
  - name: orders
    match: {path: /orders}
    limits: [{capacity: 5, refill_rate: 1}]
  - name: hop
    match: {path_prefix: /hop}
    limits: [{capacity: 1000, refill_rate: 1}]
  - name: keyed
    match: {path: /keyed}
    identity: {type: api_key}
    limits: [{capacity: 1, refill_rate: 1}]
)";

// A socket to 127.0.0.1:port, by hand.
int connect_to(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    throw std::runtime_error("connect failed");
  }
  timeval tv{20, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  return fd;
}

bool send_all(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    const auto n = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n <= 0) return false;
    bytes.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

// A response read by hand: the head as text, the body (Content-Length) counted, not kept.
struct Counted {
  std::string head;
  std::uint64_t body_bytes = 0;
  std::uint64_t body_checksum = checksum({});
};

// For HEAD: the head only.
Counted read_counted(int fd, bool head_only = false) {
  Counted out;
  std::string buffer;
  char piece[65536];
  std::size_t end = std::string::npos;
  while ((end = buffer.find("\r\n\r\n")) == std::string::npos) {
    const auto n = ::recv(fd, piece, sizeof piece, 0);
    if (n <= 0) throw std::runtime_error("closed before the response header");
    buffer.append(piece, static_cast<std::size_t>(n));
  }
  out.head = buffer.substr(0, end + 4);
  if (head_only) {
    out.body_bytes = buffer.size() - out.head.size();  // bytes that should not be there
    return out;
  }
  const auto cl = out.head.find("Content-Length: ");
  if (cl == std::string::npos) throw std::runtime_error("no Content-Length: " + out.head);
  const std::uint64_t length = std::stoull(out.head.substr(cl + 16));
  std::string_view rest = std::string_view(buffer).substr(end + 4);
  out.body_bytes = rest.size();
  out.body_checksum = checksum(rest, out.body_checksum);
  while (out.body_bytes < length) {
    const auto n = ::recv(fd, piece, sizeof piece, 0);
    if (n <= 0) throw std::runtime_error("closed mid-body");
    out.body_bytes += static_cast<std::uint64_t>(n);
    out.body_checksum = checksum({piece, static_cast<std::size_t>(n)}, out.body_checksum);
  }
  return out;
}

// The process's resident set, from /proc/self/status (kB).
std::uint64_t rss_kb() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6));
  }
  return 0;
}

class ProxyTest : public ::testing::Test {
 protected:
  void start(http::UpstreamOptions upstream_options = {}, const char* yaml = kRules,
             int threads = 1) {
    config_ = server::parse_config(yaml, "proxy_test.yaml");
    limiter_ = std::make_unique<limiter::Limiter>(config_.limiter, store_);
    middleware_ = std::make_unique<http::Middleware>(*limiter_, config_.middleware);
    http::ServerOptions options;
    options.host = "127.0.0.1";
    options.port = 0;
    options.threads = threads;
    options.handle_signals = false;
    options.header_limit = 4096;
    options.read_timeout = read_timeout_;
    options.request_timeout = request_timeout_;
    if (upstream_options.host.empty()) {
      upstream_options.host = "127.0.0.1";
      upstream_options.port = static_cast<std::uint16_t>(upstream_.port());
    }
    proxy_ = std::make_unique<http::Proxy>(options, upstream_options, *middleware_);
    ASSERT_TRUE(proxy_->listen());
    port_ = proxy_->port();
    runner_ = std::thread([this] { proxy_->run(); });
  }

  void TearDown() override {
    if (proxy_) {
      proxy_->stop();
      runner_.join();
      proxy_.reset();
    }
  }

  http::ProxyStats stats() const { return proxy_->proxy_stats(); }

  TestUpstream upstream_;
  ManualClock clock_{kStart};
  store::MemoryStore store_{store::MemoryStoreOptions{.max_keys = 1000, .shards = 1, .clock = &clock_}};
  server::Config config_;
  std::unique_ptr<limiter::Limiter> limiter_;
  std::unique_ptr<http::Middleware> middleware_;
  std::unique_ptr<http::Proxy> proxy_;
  std::thread runner_;
  int port_ = 0;
  Micros read_timeout_ = 30 * kMicrosPerSecond;
  Micros request_timeout_ = 60 * kMicrosPerSecond;
};

// Capacity 5, twelve at once: exactly five reach the upstream; the others get the 429 with its
// body and Retry-After. Paths no rule matches are forwarded unlimited.
TEST_F(ProxyTest, RuleLimitsABurstExactlyAndDeniedRequestsNeverReachTheUpstream) {
  start({}, kRules, 2);
  std::vector<std::future<HttpResponse>> burst;
  for (int i = 0; i < 12; ++i) {
    burst.push_back(std::async(std::launch::async, [this] { return http_get(port_, "/orders"); }));
  }
  int ok = 0, limited = 0;
  for (auto& f : burst) {
    const auto r = f.get();
    if (r.status == 200) {
      ++ok;
      EXPECT_EQ(r.body, "ok");
      EXPECT_TRUE(r.header("RateLimit").has_value());
    } else {
      ++limited;
      EXPECT_EQ(r.status, 429);
      EXPECT_EQ(r.body, R"({"error":"Rate limit exceeded","retryAfter":1})");
      EXPECT_EQ(r.header("Retry-After"), "1");
      EXPECT_EQ(r.header("Content-Type"), "application/json");
    }
  }
  EXPECT_EQ(ok, 5);
  EXPECT_EQ(limited, 7);
  EXPECT_EQ(upstream_.request_count(), 5u);

  HttpClient client(port_);
  for (int i = 0; i < 20; ++i) {
    const auto r = client.get("/other");
    ASSERT_EQ(r.status, 200);
    EXPECT_FALSE(r.header("RateLimit").has_value());
  }
  EXPECT_EQ(upstream_.request_count(), 25u);
  EXPECT_EQ(stats().forwarded, 25u);
  EXPECT_EQ(stats().answered_by_limiter, 7u);
}

// Every spelling of /orders, and of /orders/, is charged to the rule on /orders and reaches the
// upstream in normal form; /ORDERS is another path unless lowercase_path.
TEST_F(ProxyTest, EverySpellingOfAPathIsLimitedAndForwardedNormalised) {
  start();
  HttpClient client(port_);
  for (std::string spelling : {"//orders", "/./orders", "/%2e/orders", "/x/../orders"}) {
    const auto r = client.get(spelling);
    EXPECT_EQ(r.status, 200) << spelling;
    ASSERT_FALSE(upstream_.requests().empty());
    EXPECT_EQ(upstream_.requests().back().target, "/orders") << spelling;
  }
  // With a trailing slash, another path the rule on /orders also matches.
  EXPECT_EQ(client.get("/orders//").status, 200);
  EXPECT_EQ(upstream_.requests().back().target, "/orders/");
  EXPECT_EQ(client.get("/x/..//orders?q=%2e").status, 429);
  EXPECT_EQ(client.get("/%6Frders/.").status, 429);
  EXPECT_EQ(client.get("/ORDERS").status, 200);
  EXPECT_EQ(upstream_.requests().back().target, "/ORDERS");
  EXPECT_EQ(upstream_.request_count(), 6u);
  EXPECT_EQ(client.get("/or%zzders").status, 400);
  EXPECT_EQ(upstream_.request_count(), 6u);
}

TEST_F(ProxyTest, LowercasePathMatchesAndForwardsTheLowerCasePath) {
  http::UpstreamOptions options;
  options.lowercase_path = true;
  start(options);
  HttpClient client(port_);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(client.get(i % 2 ? "/ORDERS?Q=A" : "/Orders").status, 200);
    EXPECT_EQ(upstream_.requests().back().target, i % 2 ? "/orders?Q=A" : "/orders");
  }
  EXPECT_EQ(client.get("/ORDERS").status, 429);
  EXPECT_EQ(upstream_.request_count(), 5u);
}

// Hop-by-hop fields and fields named in Connection are removed both ways, except those the
// proxy vouches for; X-Forwarded-* set; the limiter's RateLimit fields replace the upstream's.
TEST_F(ProxyTest, RewritesHeadersBothWays) {
  start();
  HttpClient client(port_);
  const auto r = client.raw(
      "GET /hop-by-hop HTTP/1.1\r\nHost: app.example\r\n"
      "Connection: keep-alive, X-Forwarded-For, X-Drop, X-Forwarded-Host, RateLimit\r\n"
      "X-Drop: 1\r\nX-Keep: 2\r\nKeep-Alive: timeout=5\r\nTE: trailers\r\n"
      "Proxy-Authorization: Basic eA==\r\nX-Forwarded-For: 203.0.113.9\r\n"
      "X-Forwarded-For: 198.51.100.1\r\nX-Forwarded-Proto: https\r\n\r\n");
  ASSERT_EQ(r.status, 200);
  ASSERT_EQ(upstream_.request_count(), 1u);
  const auto seen = upstream_.requests().front();
  EXPECT_EQ(seen.header("X-Forwarded-For"), "203.0.113.9, 198.51.100.1, 127.0.0.1");
  EXPECT_EQ(seen.header("X-Forwarded-Proto"), "http");
  EXPECT_EQ(seen.header("X-Forwarded-Host"), "app.example");
  EXPECT_EQ(seen.header("Host"), "app.example");
  EXPECT_EQ(seen.header("X-Keep"), "2");
  for (const char* gone : {"X-Drop", "Keep-Alive", "TE", "Proxy-Authorization", "Connection"}) {
    EXPECT_FALSE(seen.header(gone).has_value()) << gone;
  }
  EXPECT_EQ(r.header("X-Upstream"), "kept");
  for (const char* gone : {"X-Secret", "Keep-Alive", "Proxy-Authenticate"}) {
    EXPECT_FALSE(r.header(gone).has_value()) << gone;
  }
  EXPECT_EQ(r.header("RateLimit"), "\"hop\";r=999;t=1");
  EXPECT_EQ(r.header("RateLimit-Policy"), "\"hop\";q=1000;w=1000");
}

// A field the client names in Connection is not sent on, so the rules do not decide on it: an
// API key named there is neither counted nor seen by the application, and the request is the
// client address's, as without a key. Keys the application receives are counted.
TEST_F(ProxyTest, AnIdentityNamedInConnectionIsNeitherCountedNorSentOn) {
  start();
  HttpClient client(port_);
  EXPECT_EQ(client.get("/keyed").status, 200);  // the client address's one request
  for (const char* key : {"sk_1", "sk_2"}) {
    const auto r = client.raw(fmt::format("GET /keyed HTTP/1.1\r\nHost: a\r\nX-API-Key: {}\r\n"
                                          "Connection: keep-alive, X-API-Key\r\n\r\n", key));
    EXPECT_EQ(r.status, 429) << key;
  }
  EXPECT_EQ(upstream_.request_count(), 1u);
  const auto keyed = client.raw("GET /keyed HTTP/1.1\r\nHost: a\r\nX-API-Key: sk_1\r\n\r\n");
  EXPECT_EQ(keyed.status, 200);  // a key of its own
  ASSERT_EQ(upstream_.request_count(), 2u);
  EXPECT_EQ(upstream_.requests().back().header("X-API-Key"), "sk_1");
  // Sent twice, the key would be counted once and forwarded twice: refused.
  const auto twice = client.raw("GET /keyed HTTP/1.1\r\nHost: a\r\nX-API-Key: sk_3\r\nX-API-Key: sk_1\r\n\r\n");
  EXPECT_EQ(twice.status, 400);
  EXPECT_EQ(upstream_.request_count(), 2u);
}

// A GET with a body, which an application may read as the next request on the connection, is
// sent on with Connection: close, and its upstream connection is not given to the next request.
TEST_F(ProxyTest, ABodyOnAMethodWithoutOneEndsItsUpstreamConnection) {
  start();
  HttpClient client(port_);
  const auto r = client.raw("GET /other HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello");
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.header("X-Body-Bytes"), "5");
  ASSERT_EQ(upstream_.request_count(), 1u);
  EXPECT_EQ(upstream_.requests().back().header("Connection"), "close");
  ASSERT_EQ(client.get("/other").status, 200);  // the client's connection is kept
  ASSERT_EQ(upstream_.request_count(), 2u);
  EXPECT_FALSE(upstream_.requests().back().header("Connection").has_value());
  EXPECT_EQ(upstream_.connections(), 2u);
  EXPECT_EQ(client.connections_opened(), 1u);
  ASSERT_EQ(client.post("/other", "hello").status, 200);  // a method with a body: reused
  EXPECT_EQ(upstream_.connections(), 2u);
  EXPECT_EQ(stats().upstream_connections_reused, 1u);
}

// An HTTP/1.0 request without Host is sent on as HTTP/1.1 with one, empty (RFC 9112 3.2).
TEST_F(ProxyTest, AnHttp10RequestWithoutHostIsSentOnWithAnEmptyHost) {
  start();
  HttpClient client(port_);
  const auto r = client.raw("GET /hop-by-hop HTTP/1.0\r\n\r\n");
  ASSERT_EQ(r.status, 200);
  ASSERT_EQ(upstream_.request_count(), 1u);
  const auto seen = upstream_.requests().front();
  EXPECT_EQ(seen.header("Host"), "");
  EXPECT_FALSE(seen.header("X-Forwarded-Host").has_value());
}

TEST_F(ProxyTest, ChunkedBodiesStayChunkedBothWays) {
  start();
  HttpClient client(port_);
  const auto up = client.raw(
      "POST /upload HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
      "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n");
  ASSERT_EQ(up.status, 200);
  const auto seen = upstream_.requests().back();
  EXPECT_TRUE(seen.chunked);
  EXPECT_EQ(seen.body, "hello world");
  EXPECT_EQ(up.header("X-Body-Bytes"), "11");

  const auto down = client.get("/chunked/200000");
  ASSERT_EQ(down.status, 200);
  EXPECT_EQ(down.header("Transfer-Encoding"), "chunked");
  ASSERT_EQ(down.body.size(), 200000u);
  for (std::size_t i = 0; i < down.body.size(); ++i) {
    ASSERT_EQ(down.body[i], pattern_byte(i)) << i;
  }
  const auto length = client.post("/upload", std::string(1000, 'x'));
  EXPECT_EQ(length.header("X-Body-Bytes"), "1000");
  EXPECT_FALSE(upstream_.requests().back().chunked);
  EXPECT_EQ(upstream_.connections(), 1u);
}

TEST_F(ProxyTest, SequentialRequestsReuseOneUpstreamConnection) {
  start();
  HttpClient client(port_);
  for (int i = 0; i < 10; ++i) ASSERT_EQ(client.get("/other").status, 200);
  HttpClient second(port_);  // another client, the same pooled connection
  ASSERT_EQ(second.get("/other").status, 200);
  EXPECT_EQ(upstream_.connections(), 1u);
  EXPECT_EQ(stats().upstream_connections_opened, 1u);
  EXPECT_EQ(stats().upstream_connections_reused, 10u);
}

// An idle pooled connection the upstream has closed is not used: the request goes on a new one.
TEST_F(ProxyTest, IdleConnectionClosedByTheUpstreamIsReplaced) {
  start();
  HttpClient client(port_);
  ASSERT_EQ(client.get("/then-close").status, 200);
  ASSERT_TRUE(upstream_.wait_for([&] { return upstream_.open_connections() == 0; }));
  EXPECT_EQ(client.get("/other").status, 200);
  EXPECT_EQ(stats().upstream_connections_reused, 0u);  // seen closed in the pool
  EXPECT_EQ(client.get("/then-close").status, 200);
  EXPECT_EQ(client.get("/other").status, 200);  // the upstream's close may not have arrived yet
  EXPECT_EQ(upstream_.connections(), 3u);
  EXPECT_EQ(stats().upstream_bad_response, 0u);
}

// A reused connection the upstream closes on receiving the request: an idempotent request
// without body is sent again on a new connection; any other is answered 502.
TEST_F(ProxyTest, RequestFailingOnAReusedConnectionIsRetriedOnceWhenIdempotent) {
  start();
  HttpClient client(port_);
  ASSERT_EQ(client.get("/drop-next").status, 200);
  EXPECT_EQ(client.get("/other").status, 200);
  EXPECT_EQ(upstream_.connections(), 2u);
  EXPECT_EQ(stats().upstream_connections_reused, 1u);
  EXPECT_EQ(stats().upstream_bad_response, 0u);
  ASSERT_EQ(upstream_.request_count(), 3u);  // /other twice
  EXPECT_EQ(upstream_.requests()[1].target, "/other");
  EXPECT_EQ(upstream_.requests()[2].target, "/other");

  ASSERT_EQ(client.get("/drop-next").status, 200);
  EXPECT_EQ(client.request({"POST", "/other", {}, ""}).status, 502);
  EXPECT_EQ(stats().upstream_bad_response, 1u);
  EXPECT_EQ(upstream_.request_count(), 5u);
}

// stop(): the request in flight completes, its response says Connection: close, idle
// connections are closed, and run() returns.
TEST_F(ProxyTest, StopDrainsTheRequestInFlight) {
  start();
  HttpClient idle(port_);
  ASSERT_EQ(idle.get("/other").status, 200);
  auto in_flight = std::async(std::launch::async, [this] { return http_get(port_, "/sleep/200"); });
  ASSERT_TRUE(upstream_.wait_for([&] { return upstream_.request_count() == 2; }));
  proxy_->stop();
  const auto r = in_flight.get();
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.header("Connection"), "close");
  runner_.join();  // before the drain timeout (10 s): every connection closed
  EXPECT_EQ(proxy_->stats().connections_open, 0u);
  proxy_.reset();
}

TEST_F(ProxyTest, HeadAndExpectContinue) {
  start();
  HttpClient client(port_);
  const int fd = connect_to(port_);
  // HEAD: the length of the body a GET would get, no body; the connection stays in step.
  ASSERT_TRUE(send_all(fd, "HEAD /stream/1234 HTTP/1.1\r\nHost: x\r\n\r\n"));
  const auto head = read_counted(fd, true);
  EXPECT_NE(head.head.find("HTTP/1.1 200 "), std::string::npos) << head.head;
  EXPECT_NE(head.head.find("Content-Length: 1234"), std::string::npos) << head.head;
  EXPECT_EQ(head.body_bytes, 0u);
  ASSERT_TRUE(send_all(fd, "GET /stream/3 HTTP/1.1\r\nHost: x\r\n\r\n"));
  const auto get = read_counted(fd);
  EXPECT_NE(get.head.find("Content-Length: 3"), std::string::npos) << get.head;
  EXPECT_EQ(get.body_bytes, 3u);

  ASSERT_TRUE(send_all(fd, "POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n"
                           "Expect: 100-continue\r\n\r\n"));
  char buf[64] = {};
  const auto n = ::recv(fd, buf, sizeof buf - 1, 0);
  ASSERT_GT(n, 0);
  EXPECT_EQ(std::string_view(buf, static_cast<std::size_t>(n)), "HTTP/1.1 100 Continue\r\n\r\n");
  ASSERT_TRUE(send_all(fd, "abc"));
  const auto r = read_counted(fd);
  EXPECT_NE(r.head.find("X-Body-Bytes: 3"), std::string::npos) << r.head;
  EXPECT_FALSE(upstream_.requests().back().header("Expect").has_value());
  ::close(fd);
}

// 204 and 304 have no body, whatever their fields say: nothing is awaited, the connections
// stay in step.
TEST_F(ProxyTest, NoContentAndNotModifiedHaveNoBody) {
  start();
  const int fd = connect_to(port_);
  for (const int status : {204, 304, 204}) {
    ASSERT_TRUE(send_all(fd, fmt::format("GET /status/{} HTTP/1.1\r\nHost: x\r\n\r\n", status)));
    const auto r = read_counted(fd, true);
    EXPECT_TRUE(r.head.starts_with(fmt::format("HTTP/1.1 {} ", status))) << r.head;
    EXPECT_EQ(r.body_bytes, 0u);
  }
  ASSERT_TRUE(send_all(fd, "GET /stream/3 HTTP/1.1\r\nHost: x\r\n\r\n"));
  EXPECT_EQ(read_counted(fd).body_bytes, 3u);
  ::close(fd);
  EXPECT_EQ(upstream_.connections(), 1u);
}

TEST_F(ProxyTest, UnreachableUpstreamIs502) {
  int closed_port = 0;
  {
    TestUpstream gone;
    closed_port = gone.port();
  }
  http::UpstreamOptions options;
  options.host = "127.0.0.1";
  options.port = static_cast<std::uint16_t>(closed_port);
  start(options);
  const auto r = http_get(port_, "/other");
  EXPECT_EQ(r.status, 502);
  EXPECT_EQ(r.body, R"({"error":"Upstream unreachable"})");
  EXPECT_EQ(stats().upstream_unreachable, 1u);
  MetricsWriter metrics;
  http::write_proxy_metrics(metrics, *proxy_);
  EXPECT_NE(metrics.text().find("ratekeeper_proxy_upstream_errors_total{kind=\"unreachable\"} 1"), std::string::npos)
      << metrics.text();
}

TEST_F(ProxyTest, SlowUpstreamIs504) {
  http::UpstreamOptions options;
  options.timeout = 50 * kMicrosPerMilli;
  start(options);
  HttpClient client(port_);
  const auto r = client.get("/sleep/250");
  EXPECT_EQ(r.status, 504);
  EXPECT_EQ(r.body, R"({"error":"Upstream timed out"})");
  EXPECT_EQ(stats().upstream_timeout, 1u);
  EXPECT_EQ(client.get("/other").status, 200);  // the client's connection goes on
}

// An upstream that takes none of the request's body for upstream.timeout is a 504, as one slow
// to answer is.
TEST_F(ProxyTest, AnUpstreamTooSlowToTakeTheBodyIs504) {
  http::UpstreamOptions options;
  options.timeout = 50 * kMicrosPerMilli;
  start(options);
  HttpClient client(port_);
  client.connect();
  constexpr std::size_t kBody = std::size_t{64} << 20;  // past every socket buffer on the way
  client.send_raw(fmt::format("POST /stall-body/1000 HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n", kBody));
  const std::string piece(1 << 20, 'b');
  for (std::size_t sent = 0; sent < kBody && client.send_raw(piece) == piece.size(); sent += piece.size()) {
  }
  const auto answer = client.read_until_close();
  EXPECT_TRUE(answer.starts_with("HTTP/1.1 504")) << answer.substr(0, 100);
  EXPECT_EQ(stats().upstream_timeout, 1u);
  EXPECT_EQ(stats().upstream_bad_response, 0u);
}

TEST_F(ProxyTest, GarbageOrCloseBeforeTheHeaderIs502) {
  start();
  HttpClient client(port_);
  for (const char* path : {"/garbage", "/close-in-header"}) {
    const auto r = client.get(path);
    EXPECT_EQ(r.status, 502) << path;
    EXPECT_EQ(r.body, R"({"error":"Bad response from the upstream"})");
  }
  EXPECT_EQ(stats().upstream_bad_response, 2u);
  EXPECT_EQ(client.get("/other").status, 200);
}

// The response has begun: the client's connection is closed (it sees a short body), and the
// proxy serves on.
TEST_F(ProxyTest, UpstreamClosingMidBodyClosesTheClientConnection) {
  start();
  HttpClient client(port_);
  client.connect();
  client.send_raw("GET /close-in-body HTTP/1.1\r\nHost: x\r\n\r\n");
  const auto got = client.read_until_close();
  EXPECT_NE(got.find("Content-Length: 1000000"), std::string::npos);
  EXPECT_LT(got.size(), 10000u);
  EXPECT_EQ(stats().upstream_aborted, 1u);
  EXPECT_EQ(http_get(port_, "/other").status, 200);
}

TEST_F(ProxyTest, ClientAbortMidUploadReleasesTheUpstreamConnection) {
  start();
  const int fd = connect_to(port_);
  ASSERT_TRUE(send_all(fd, "POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 10000000\r\n\r\n"));
  ASSERT_TRUE(send_all(fd, std::string(100000, 'u')));
  ASSERT_TRUE(upstream_.wait_for([&] { return upstream_.connections() == 1; }));
  ::close(fd);
  EXPECT_TRUE(upstream_.wait_for([&] { return upstream_.cut_off() == 1; }));
  EXPECT_TRUE(upstream_.wait_for([&] { return stats().client_aborted == 1; }));
  EXPECT_EQ(upstream_.open_connections(), 0u);
}

// A slow client: its head must arrive within read_timeout, however it trickles in.
TEST_F(ProxyTest, AHeadTricklingPastReadTimeoutIsClosed) {
  read_timeout_ = 500 * kMicrosPerMilli;
  start();
  const auto received = trickle_until_closed(port_, "GET /x HTTP/1.1\r\nHost: x\r\n", "X-Slow: 1\r\n",
                                             std::chrono::milliseconds(100), std::chrono::seconds(15));
  EXPECT_TRUE(received.has_value()) << "the connection was still open";
  EXPECT_EQ(upstream_.requests().size(), 0u);
}

// read_timeout bounds each request's reading, not the connection: requests 150 ms apart on
// one keep-alive connection go on past it, each read within it.
TEST_F(ProxyTest, KeepAliveRequestsEachWithinReadTimeoutOutlastItTogether) {
  read_timeout_ = 400 * kMicrosPerMilli;
  start();
  HttpClient client(port_);
  for (int i = 0; i < 6; ++i) {  // 6 × 150 ms: 900 ms on one connection
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    EXPECT_EQ(client.get("/x").status, 200) << "request " << i;
  }
  EXPECT_EQ(client.connections_opened(), 1u);
}

// Each piece of a body arrives within read_timeout, but the whole body not within
// request_timeout: 408, the upstream's request cut short, the connection closed.
TEST_F(ProxyTest, ABodyTricklingPastRequestTimeoutIs408AndClosed) {
  read_timeout_ = 5 * kMicrosPerSecond;
  request_timeout_ = 500 * kMicrosPerMilli;
  start();
  const auto received =
      trickle_until_closed(port_, "POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n", "u",
                           std::chrono::milliseconds(100), std::chrono::seconds(15));
  ASSERT_TRUE(received.has_value()) << "the connection was still open";
  EXPECT_TRUE(received->starts_with("HTTP/1.1 408")) << *received;
  EXPECT_TRUE(upstream_.wait_for([&] { return upstream_.cut_off() == 1; }));
  EXPECT_EQ(upstream_.open_connections(), 0u);
}

// After an error answered with a close, the proxy half-closes and reads what the client still
// sends (so that the answer is not lost to a reset), but only for a while: a client that keeps
// its side open and trickles bytes has its connection closed all the same (a write of its then
// fails, reset).
TEST_F(ProxyTest, AClientLeftOpenAfterAnErrorIsClosedAfterTheLingerTime) {
  start();
  const auto left = write_after_answer_until_closed(port_, "GET /x HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
                                                    std::chrono::seconds(10));  // lingering: 2 s
  EXPECT_TRUE(left.answer.starts_with("HTTP/1.1 400")) << left.answer;
  EXPECT_TRUE(left.closed) << "the proxy still read the client's bytes 10 s after its answer";
}

TEST_F(ProxyTest, ClientAbortMidDownloadReleasesTheUpstreamConnection) {
  start();
  const int fd = connect_to(port_);
  ASSERT_TRUE(send_all(fd, "GET /stream/100000000000 HTTP/1.1\r\nHost: x\r\n\r\n"));
  char buf[65536];
  std::size_t got = 0;
  while (got < 1000000) {
    const auto n = ::recv(fd, buf, sizeof buf, 0);
    ASSERT_GT(n, 0);
    got += static_cast<std::size_t>(n);
  }
  ::close(fd);
  EXPECT_TRUE(upstream_.wait_for([&] { return upstream_.cut_off() == 1; }));
  EXPECT_TRUE(upstream_.wait_for([&] { return stats().client_aborted == 1; }));
  EXPECT_EQ(upstream_.open_connections(), 0u);
}

// A malformed chunk in a request body, arriving with the header: the client is told 400
// and its connection closes; the upstream's request is cut short, not counted as its fault.
TEST_F(ProxyTest, MalformedChunkInTheRequestBodyIs400) {
  start();
  HttpClient client(port_);
  const auto r = client.raw(
      "POST /upload HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
      "5\r\nhello\r\nzz\r\n\r\n");
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.body, R"({"error":"Bad request"})");
  EXPECT_EQ(r.header("Connection"), "close");
  EXPECT_EQ(stats().upstream_bad_response, 0u);
  EXPECT_EQ(stats().client_aborted, 0u);
}

TEST_F(ProxyTest, SmugglingAndOversizedHeadersAreRefusedBeforeAnythingIsForwarded) {
  start();
  const char* smuggled[] = {
      "POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"
      "0\r\n\r\nGET /orders HTTP/1.1\r\nHost: x\r\n\r\n",
      "POST /upload HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n"
      "0\r\n\r\n",
      "POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhello",
      "POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello",
      "POST /upload HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, gzip\r\n\r\n0\r\n\r\n",
      // A coding before chunked that the proxy would drop when re-framing the body.
      "POST /upload HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
      "POST /upload HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
      "POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 0, 0\r\n\r\n",
      "POST /upload HTTP/1.0\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
      "GET /orders HTTP/1.1\r\n\r\n",
      "GET /orders HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n",
      "GET /orders HTTP/1.0\r\nHost: x\r\nHost: y\r\n\r\n",
  };
  for (const char* bytes : smuggled) {
    HttpClient client(port_);
    const auto r = client.raw(bytes);
    EXPECT_EQ(r.status, 400) << bytes;
    EXPECT_EQ(r.body, R"({"error":"Bad request"})");
  }
  HttpClient client(port_);
  const auto big = client.raw("GET /other HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(8000, 'b') +
                              "\r\n\r\n");
  EXPECT_EQ(big.status, 431);
  HttpClient connect(port_);
  EXPECT_EQ(connect.raw("CONNECT x:443 HTTP/1.1\r\nHost: x:443\r\n\r\n").status, 501);
  // Spellings an application may serve as a ruled request, never forwarded: a fragment, a
  // method with a lower-case letter.
  for (const char* bytes : {"GET /orders#x HTTP/1.1\r\nHost: x\r\n\r\n", "get /orders HTTP/1.1\r\nHost: x\r\n\r\n",
                            "Post /orders HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"}) {
    HttpClient client(port_);
    const auto r = client.raw(bytes);
    EXPECT_EQ(r.status, 400) << bytes;
    EXPECT_NE(r.body.find("detail"), std::string::npos) << r.body;
  }
  EXPECT_EQ(upstream_.request_count(), 0u);
  EXPECT_EQ(upstream_.connections(), 0u);
}

// 128 MiB up and 128 MiB down through one connection (2048 buffers each way): what the proxy holds at once stays a few
// buffers (its high-water mark), and so does the process's resident memory.
// A chunk's size line that never ends, from either side, is refused once it outgrows a header,
// a piece of body and a read: the client's with 400, the upstream's as a response cut off.
TEST_F(ProxyTest, AChunkLineThatNeverEndsIsRefusedFromEitherSide) {
  start();
  HttpClient client(port_);
  client.connect();
  client.send_raw("POST /upload HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5;");
  const std::string endless(64 * 1024, 'a');
  for (int i = 0; i < 64 && client.send_raw(endless) == endless.size(); ++i) {
  }
  const auto answer = client.read_until_close();
  EXPECT_TRUE(answer.starts_with("HTTP/1.1 400")) << answer.substr(0, 100);

  HttpClient second(port_);
  second.connect();
  second.send_raw("GET /endless-chunk-line HTTP/1.1\r\nHost: x\r\n\r\n");
  const auto cut = second.read_until_close();  // the head relayed, then the connection closed
  EXPECT_TRUE(cut.starts_with("HTTP/1.1 200")) << cut.substr(0, 100);
  EXPECT_LT(cut.size(), 1024u);
  EXPECT_EQ(stats().upstream_aborted, 1u);
  EXPECT_EQ(HttpClient(port_).get("/other").status, 200);
}

TEST_F(ProxyTest, StreamsLargeBodiesBothWaysWithBoundedMemory) {
  http::UpstreamOptions options;
  options.buffer_size = std::size_t{64} * 1024;
  start(options);
#if defined(RATEKEEPER_ASAN_BUILD) || defined(__SANITIZE_THREAD__)
  constexpr std::uint64_t kSize = std::uint64_t{32} << 20;
#else
  constexpr std::uint64_t kSize = std::uint64_t{128} << 20;
#endif
  [[maybe_unused]] const auto rss_before = rss_kb();  // compared in plain builds only
  const int fd = connect_to(port_);
  ASSERT_TRUE(send_all(fd, "POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: " +
                               std::to_string(kSize) + "\r\n\r\n"));
  // The download is the same pattern: one checksum for both.
  std::uint64_t sum = checksum({});
  for (std::uint64_t sent = 0; sent < kSize; sent += kPatternPiece) {
    const auto piece = pattern(sent, kPatternPiece);
    sum = checksum(piece, sum);
    ASSERT_TRUE(send_all(fd, piece));
  }
  const auto up = read_counted(fd);
  EXPECT_NE(up.head.find("X-Body-Bytes: " + std::to_string(kSize)), std::string::npos) << up.head;
  EXPECT_EQ(upstream_.requests().back().body_checksum, sum);

  ASSERT_TRUE(send_all(fd, "GET /stream/" + std::to_string(kSize) + " HTTP/1.1\r\nHost: x\r\n\r\n"));
  const auto down = read_counted(fd);
  EXPECT_EQ(down.body_bytes, kSize);
  EXPECT_EQ(down.body_checksum, sum);
  ::close(fd);

  EXPECT_LE(stats().buffered_bytes_high_water, 2 * options.buffer_size);
  EXPECT_GT(stats().buffered_bytes_high_water, 0u);
#if !defined(RATEKEEPER_ASAN_BUILD) && !defined(__SANITIZE_THREAD__)
  EXPECT_LT(rss_kb(), rss_before + 64 * 1024) << "resident memory grew with the body size";
#endif
}

}  // namespace
}  // namespace ratekeeper::testing
