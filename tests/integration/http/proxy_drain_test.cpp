// http::Proxy's graceful drain over real sockets, in process: the store holds a decision while
// the proxy stops, then delivers it from another thread.

#include <gtest/gtest.h>

#include <future>
#include <memory>
#include <thread>

#include "config.hpp"
#include "ratekeeper/core/event_loop.hpp"
#include "ratekeeper/http/middleware.hpp"
#include "ratekeeper/http/proxy.hpp"
#include "ratekeeper/store/store.hpp"
#include "support/http_client.hpp"
#include "support/test_upstream.hpp"

namespace ratekeeper::testing {
namespace {

// Answers the check only when the test says so, from the test's thread (as a store with
// threads of its own does).
class HeldStore final : public store::Store {
 public:
  void check(std::vector<store::CheckItem>, std::optional<Micros>,
             store::CheckCallback done) override {
    held.set_value(std::move(done));
  }
  std::string_view kind() const noexcept override { return "held"; }
  std::promise<store::CheckCallback> held;
};

// The drain begins when the proxy's thread handles stop(). A decision delivered from another
// thread right after, while that handling has not yet finished, is answered with Connection:
// close. The order is made certain by holding the loop's only thread busy: stop() and then
// the decision are queued behind it, in that order.
TEST(ProxyDrain, ClosesTheConnectionOfAnAnswerQueuedRightAfterStop) {
  TestUpstream upstream;
  auto config = server::parse_config(R"(
logging: {decisions: {enabled: false}}
rules:
  - name: all
    match: {path_prefix: /}
    limits: [{capacity: 5, refill_rate: 1}]
)",
                                     "proxy_drain_test.yaml");
  HeldStore store;
  limiter::Limiter limiter(config.limiter, store);
  http::Middleware middleware(limiter, config.middleware);
  auto loop = std::make_shared<EventLoop>(1);
  http::ServerOptions options;
  options.host = "127.0.0.1";
  options.port = 0;
  options.handle_signals = false;
  options.loop = loop;
  http::UpstreamOptions upstream_options;
  upstream_options.host = "127.0.0.1";
  upstream_options.port = static_cast<std::uint16_t>(upstream.port());
  http::Proxy proxy(options, upstream_options, middleware);
  ASSERT_TRUE(proxy.listen());
  const int port = proxy.port();
  std::thread runner([&proxy] { proxy.run(); });

  auto in_flight = std::async(std::launch::async, [port] { return http_get(port, "/orders"); });
  auto decision = store.held.get_future();
  ASSERT_EQ(decision.wait_for(std::chrono::seconds(20)), std::future_status::ready);

  std::promise<void> busy;
  std::promise<void> release;
  loop->post(0, [&busy, gate = release.get_future().share()] {
    busy.set_value();
    gate.wait();
  });
  busy.get_future().wait();
  proxy.stop();
  const algorithms::Decision denied{.allowed = false,
                                    .limit = 5,
                                    .remaining = 0,
                                    .retry_after = kMicrosPerSecond,
                                    .reset_after = 5 * kMicrosPerSecond};
  decision.get()(store::CheckOutcome{denied, {denied}});
  release.set_value();

  const auto response = in_flight.get();
  EXPECT_EQ(response.status, 429);
  EXPECT_EQ(response.header("Connection"), "close");
  runner.join();
  EXPECT_EQ(proxy.stats().connections_open, 0u);
  EXPECT_EQ(upstream.request_count(), 0u);
}

}  // namespace
}  // namespace ratekeeper::testing
