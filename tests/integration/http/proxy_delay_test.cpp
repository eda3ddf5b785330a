// The proxy with a rule that delays instead of rejecting (on_limit: delay): an admitted request
// that must wait for its place reaches the upstream only when its time comes; beyond
// max_delay it is rejected at once. A memory store whose clock stands still, a real upstream.

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <memory>
#include <thread>

#include "config.hpp"
#include "ratekeeper/core/clock.hpp"
#include "ratekeeper/http/middleware.hpp"
#include "ratekeeper/http/proxy.hpp"
#include "ratekeeper/limiter/limiter.hpp"
#include "ratekeeper/store/memory_store.hpp"
#include "support/eventually.hpp"
#include "support/http_client.hpp"
#include "support/test_upstream.hpp"

namespace ratekeeper::testing {
namespace {

using namespace std::chrono_literals;

// One request a second after the first: the second waits 1 s for its place, the third would
// wait 2 s, beyond max_delay.
constexpr const char* kPaced = R"(
logging: {decisions: {enabled: false}}
rules:
  - name: paced
    match: {path: /paced}
    on_limit: delay
    max_delay: 1500ms
    limits: [{capacity: 1, refill_rate: 1}]
)";

TEST(ProxyDelay, AWaitingRequestReachesTheUpstreamOnlyWhenItsTimeComes) {
  TestUpstream upstream;
  ManualClock clock(1'700'000'000LL * kMicrosPerSecond);
  store::MemoryStore store({.max_keys = 100, .shards = 1, .clock = &clock});
  const auto config = server::parse_config(kPaced, "proxy_delay_test.yaml");
  limiter::Limiter limiter(config.limiter, store);
  http::Middleware middleware(limiter, config.middleware);
  http::ServerOptions options;
  options.host = "127.0.0.1";
  options.port = 0;
  options.threads = 1;
  options.handle_signals = false;
  http::UpstreamOptions to;
  to.host = "127.0.0.1";
  to.port = static_cast<std::uint16_t>(upstream.port());
  http::Proxy proxy(options, to, middleware);
  ASSERT_TRUE(proxy.listen());
  std::thread runner([&proxy] { proxy.run(); });
  const int port = proxy.port();

  EXPECT_EQ(http_get(port, "/paced").status, 200);
  EXPECT_EQ(upstream.request_count(), 1u);

  const auto start = std::chrono::steady_clock::now();
  auto second = std::async(std::launch::async, [port] { return http_get(port, "/paced"); });
  // Admitted, but held: counted as delayed, and not at the upstream before its time.
  ASSERT_TRUE(eventually([&] { return proxy.proxy_stats().delayed == 1; }));
  if (std::chrono::steady_clock::now() - start < 900ms) {
    EXPECT_EQ(upstream.request_count(), 1u) << "forwarded before its time";
  }
  const auto r = second.get();
  EXPECT_EQ(r.status, 200);
  EXPECT_GE(std::chrono::steady_clock::now() - start, 990ms);
  EXPECT_EQ(upstream.request_count(), 2u);
  EXPECT_TRUE(r.header("RateLimit").has_value());

  // Two seconds ahead is beyond max_delay: the seed's 429, and the upstream never sees it.
  const auto third = http_get(port, "/paced");
  EXPECT_EQ(third.status, 429);
  EXPECT_EQ(upstream.request_count(), 2u);
  EXPECT_EQ(proxy.proxy_stats().delayed, 1u);

  proxy.stop();
  runner.join();
}

// Requests held for their turn whose clients close meanwhile are dropped: never forwarded, and
// counted. A last request, held behind all of them, reaches the upstream after their times have
// passed: only it and the first one got there.
TEST(ProxyDelay, AHeldRequestWhoseClientHasGoneIsNeverForwarded) {
  TestUpstream upstream;
  ManualClock clock(1'700'000'000LL * kMicrosPerSecond);
  store::MemoryStore store({.max_keys = 100, .shards = 1, .clock = &clock});
  const auto config = server::parse_config(R"(
logging: {decisions: {enabled: false}}
rules:
  - name: paced
    match: {path: /paced}
    on_limit: delay
    max_delay: 3s
    limits: [{capacity: 1, refill_rate: 5}]
)", "proxy_delay_test.yaml");
  limiter::Limiter limiter(config.limiter, store);
  http::Middleware middleware(limiter, config.middleware);
  http::ServerOptions options;
  options.host = "127.0.0.1";
  options.port = 0;
  options.threads = 1;
  options.handle_signals = false;
  http::UpstreamOptions to;
  to.host = "127.0.0.1";
  to.port = static_cast<std::uint16_t>(upstream.port());
  http::Proxy proxy(options, to, middleware);
  ASSERT_TRUE(proxy.listen());
  std::thread runner([&proxy] { proxy.run(); });
  const int port = proxy.port();

  EXPECT_EQ(http_get(port, "/paced").status, 200);
  constexpr int kHeld = 5;  // each 200 ms after the one before
  for (int i = 1; i <= kHeld; ++i) {
    HttpClient client(port);
    client.connect();
    client.send_raw("GET /paced HTTP/1.1\r\nHost: x\r\n\r\n");
    ASSERT_TRUE(eventually([&] { return proxy.proxy_stats().delayed == static_cast<std::uint64_t>(i); }));
    client.close();
  }
  ASSERT_TRUE(eventually([&] { return proxy.proxy_stats().held_client_gone == kHeld; }));
  const auto last = http_get(port, "/paced");  // held 1.2 s, behind the five
  EXPECT_EQ(last.status, 200);
  EXPECT_EQ(upstream.request_count(), 2u);
  EXPECT_EQ(proxy.proxy_stats().client_aborted, static_cast<std::uint64_t>(kHeld));

  proxy.stop();
  runner.join();
}

}  // namespace
}  // namespace ratekeeper::testing
