// End to end: requests, signals and resource exhaustion that once stopped or stalled the
// server. Each test drives a real `ratekeeper serve` process over real sockets.

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "support/eventually.hpp"
#include "support/http_client.hpp"
#include "support/redis_server.hpp"

namespace ratekeeper::testing {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;

constexpr const char* kDemoRules = R"(
rules:
  - name: export
    match: {path_prefix: /api/export/}
    limits:
      - capacity: 100
        refill_rate: 1
  - name: search
    match: {path: /api/search}
    identity: {type: header, header: X-User-ID}
    limits:
      - capacity: 100
        refill_rate: 1
  - name: profile
    match: {path: /api/profile}
    identity: {type: header, header: X-User-ID}
    limits:
      - capacity: 100
        refill_rate: 1
)";

bool logged(const ServerProcess& server, std::string_view text) {
  return (server.output() + server.errors()).find(text) != std::string::npos;
}

// CPU time (user + system) the process has used so far.
std::chrono::milliseconds cpu_time(pid_t pid) {
  std::ifstream in(fmt::format("/proc/{}/stat", pid));
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // Fields after the command name (which may hold spaces) start after the last ')'.
  std::istringstream fields(stat.substr(stat.rfind(')') + 2));
  std::string field;
  long utime = 0, stime = 0;
  for (int i = 3; i <= 15 && fields >> field; ++i) {
    if (i == 14) utime = std::stol(field);
    if (i == 15) stime = std::stol(field);
  }
  const long ticks = ::sysconf(_SC_CLK_TCK);
  return std::chrono::milliseconds((utime + stime) * 1000 / ticks);
}

// Invalid UTF-8 echoed into a JSON reply: with a Redis store the reply is built in the Redis
// completion, where a throw once ended the process.
TEST(HttpHardening, InvalidUtf8IsEchoedReplacedAndTheServerGoesOn) {
  RedisServer redis;
  auto server = serve(kDemoRules, redis.url());
  HttpClient client(server->port());
  const std::string replacement = "\xEF\xBF\xBD";

  auto exported = client.get("/api/export/%ff");
  ASSERT_EQ(exported.status, 200) << exported.body;
  EXPECT_EQ(json::parse(exported.body).at("export"), replacement);

  auto searched = client.get("/api/search?q=%ff", {{"X-User-ID", "u1"}});
  ASSERT_EQ(searched.status, 200) << searched.body;
  EXPECT_EQ(json::parse(searched.body).at("query"), replacement);

  auto profile = client.get("/api/profile", {{"X-User-ID", "a\xff"}});
  ASSERT_EQ(profile.status, 200) << profile.body;
  EXPECT_EQ(json::parse(profile.body).at("profile").at("user_id"), "a" + replacement);

  EXPECT_EQ(http_get(server->port(), "/healthz").status, 200);
  EXPECT_FALSE(server->wait(0ms).has_value()) << server->errors();
}

// Beast's own header container refuses a field value of 64 KiB or more by throwing; the
// server's parser takes any field within the configured header limit.
TEST(HttpHardening, HeaderFieldsOf64KiBAndMoreWithinTheLimitAreServed) {
  auto server = serve(std::string("http: {max_header_bytes: 1048576}\n") + kDemoRules);
  // The test client is built on the same container: the requests are written by hand.
  auto status = [&](std::string_view target, std::string_view header, std::size_t size) {
    HttpClient conn(server->port());
    conn.send_raw(fmt::format("GET {} HTTP/1.1\r\nHost: x\r\n{}: {}\r\nConnection: close\r\n\r\n",
                              target, header, std::string(size, 'a')));
    const auto response = conn.read_until_close();
    return response.size() >= 12 ? response.substr(9, 3) : "'" + response + "'";
  };
  EXPECT_EQ(status("/api/export/report", "X-Padding", 70'000), "200");
  // Longer than an identity may be: a 400 naming the header, no crash.
  EXPECT_EQ(status("/api/search?q=x", "X-User-ID", 65'535), "400");
  EXPECT_EQ(status("/api/export/report", "X-Padding", 1'100'000), "431");
  EXPECT_EQ(http_get(server->port(), "/healthz").status, 200);
  EXPECT_FALSE(server->wait(0ms).has_value()) << server->errors();
}

// RFC 9112 framing: no Host or two (HTTP/1.1), two Host fields (HTTP/1.0), a Content-Length
// list, Transfer-Encoding in HTTP/1.0: each a 400 that closes the connection; an HTTP/1.0
// request without Host is served.
TEST(HttpHardening, AmbiguousHostAndFramingAre400AndClose) {
  auto server = serve(kDemoRules);
  const char* refused[] = {
      "GET /api/data HTTP/1.1\r\n\r\n",
      "GET /api/data HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
      "GET /api/data HTTP/1.0\r\nHost: a\r\nHost: a\r\n\r\n",
      "POST /auth/login HTTP/1.1\r\nHost: a\r\nContent-Length: 0, 0\r\n\r\n",
      "POST /auth/login HTTP/1.0\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
  };
  for (const char* bytes : refused) {
    HttpClient client(server->port());
    const auto r = client.raw(bytes);
    EXPECT_EQ(r.status, 400) << bytes;
    EXPECT_EQ(r.header("Connection").value_or(""), "close") << bytes;
  }
  HttpClient client(server->port());
  EXPECT_EQ(client.raw("GET /api/data HTTP/1.0\r\n\r\n").status, 200);
}

TEST(HttpHardening, SighupIsLoggedAndTheServerGoesOn) {
  auto server = serve(kDemoRules);
  server->signal(SIGHUP);
  EXPECT_FALSE(server->wait(500ms).has_value()) << "SIGHUP ended the server";
  EXPECT_EQ(http_get(server->port(), "/healthz").status, 200);
  EXPECT_TRUE(logged(*server, "SIGHUP")) << server->output() << server->errors();
}

// Slow clients (slowloris): a request's whole head, and on the server's routes its body too,
// must arrive within read_timeout, however it trickles in; then the connection is closed, and
// the server goes on serving.
TEST(HttpHardening, ARequestTricklingPastReadTimeoutIsClosed) {
  auto server = serve(std::string("http: {read_timeout: 500ms}\n") + kDemoRules);
  const auto head = trickle_until_closed(server->port(), "GET /healthz HTTP/1.1\r\nHost: x\r\n", "X-Slow: 1\r\n",
                                         100ms, 15s);
  EXPECT_TRUE(head.has_value()) << "the connection was still open";
  const auto body = trickle_until_closed(
      server->port(), "POST /v1/check HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 5000\r\n\r\n",
      " ", 100ms, 15s);
  EXPECT_TRUE(body.has_value()) << "the connection was still open";
  EXPECT_EQ(http_get(server->port(), "/healthz").status, 200);
}

// read_timeout bounds each request's reading and each response's writing, not the connection:
// requests 150 ms apart on one keep-alive connection go on past it.
TEST(HttpHardening, KeepAliveRequestsEachWithinReadTimeoutOutlastItTogether) {
  auto server = serve(std::string("http: {read_timeout: 400ms}\n") + kDemoRules);
  HttpClient client(server->port());
  for (int i = 0; i < 6; ++i) {  // 6 × 150 ms: 900 ms on one connection
    std::this_thread::sleep_for(150ms);
    EXPECT_EQ(client.get("/healthz").status, 200) << "request " << i;
  }
  EXPECT_EQ(client.connections_opened(), 1u);
}

// A client that sends its whole oversized body at once, then reads: the 413 must reach it,
// and its body must be taken (read and discarded), not cut off by a reset caused by
// closing with the body unread.
TEST(HttpHardening, OversizedBodySentAtOnceStillGets413) {
  auto server = serve(std::string("http: {max_body_bytes: 1024}\n") + kDemoRules);
  const std::string body(8 * 1024 * 1024, 'x');  // more than the socket buffers hold
  for (int attempt = 0; attempt < 3; ++attempt) {
    HttpClient conn(server->port());
    const auto sent = conn.send_raw(
        fmt::format("POST /v1/check HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                    "Content-Length: {}\r\n\r\n{}",
                    body.size(), body));
    EXPECT_GT(sent, body.size()) << "attempt " << attempt << ": the upload was cut off";
    const auto response = conn.read_until_close();
    ASSERT_TRUE(response.starts_with("HTTP/1.1 413"))
        << "attempt " << attempt << ": '" << response.substr(0, 80) << "'";
  }
  EXPECT_EQ(http_get(server->port(), "/healthz").status, 200);
}

// The server lingers after such an answer, reading what the client still sends, but only for
// a while: a client that keeps its side open and trickles bytes has its connection closed (a
// write of its then fails, reset).
TEST(HttpHardening, AClientLeftOpenAfterAnErrorIsClosedAfterTheLingerTime) {
  auto server = serve(std::string("http: {max_body_bytes: 1024}\n") + kDemoRules);
  const auto left = write_after_answer_until_closed(
      server->port(),
      "POST /v1/check HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 5000\r\n\r\n",
      10s);  // lingering: 2 s
  EXPECT_TRUE(left.answer.starts_with("HTTP/1.1 413")) << left.answer.substr(0, 80);
  EXPECT_TRUE(left.closed) << "the server still read the client's bytes 10 s after its answer";
}

// Out of file descriptors, the server keeps serving the connections it has, does not spin
// on accept, counts the failures, and accepts again once descriptors are free.
TEST(HttpHardening, OutOfDescriptorsServesOpenConnectionsWithoutSpinningAndRecovers) {
  auto server = serve(kDemoRules, {}, /*threads=*/1, /*max_open_files=*/32);
  HttpClient established(server->port());
  ASSERT_EQ(established.get("/healthz").status, 200);

  // More connections than the server has descriptors for: the rest wait in the backlog.
  std::vector<std::unique_ptr<HttpClient>> idle;
  for (int i = 0; i < 40; ++i) {
    idle.push_back(std::make_unique<HttpClient>(server->port()));
    idle.back()->connect();
  }
  // The server has run into the limit.
  ASSERT_TRUE(eventually([&] {
    const auto errors = metric_value(established.get("/metrics").body, "ratekeeper_http_accept_errors_total");
    return errors && *errors > 0;
  }));

  const auto cpu_before = cpu_time(server->pid());
  const auto wall_before = std::chrono::steady_clock::now();
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(established.get("/healthz").status, 200) << "request " << i;
    std::this_thread::sleep_for(150ms);
  }
  const auto wall = std::chrono::steady_clock::now() - wall_before;
  const auto cpu = cpu_time(server->pid()) - cpu_before;
  // A server retrying accept at once burns a whole core for the whole interval.
  EXPECT_LT(cpu.count(), std::chrono::duration_cast<std::chrono::milliseconds>(wall).count() / 4)
      << "the server spun while out of descriptors";

  auto metrics = established.get("/metrics");
  const auto errors = metric_value(metrics.body, "ratekeeper_http_accept_errors_total");
  ASSERT_TRUE(errors.has_value()) << metrics.body;
  EXPECT_GT(*errors, 0);

  idle.clear();  // descriptors are freed: connections waiting, then new ones, are served
  EXPECT_TRUE(eventually([&] {
    try {
      return http_get(server->port(), "/healthz").status == 200;
    } catch (const std::exception&) {
      return false;
    }
  }, 10s)) << "the server did not accept again";
  EXPECT_TRUE(logged(*server, "accepting connections")) << server->output() << server->errors();
}

}  // namespace
}  // namespace ratekeeper::testing
