// End to end: a real nginx in front of a real upstream (a second server of the same nginx),
// asking a real `ratekeeper serve` on /v1/auth (auth_request), with the configuration
// documented in docs/nginx.md as written, only its addresses replaced by free ports.

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "support/doc_blocks.hpp"
#include "support/http_client.hpp"
#include "support/nginx_process.hpp"
#include "support/redis_server.hpp"

namespace ratekeeper::testing {
namespace {

using json = nlohmann::json;

// Replaces the one occurrence of `from` in `text` (the documented configuration must still
// have it, or the test would run some other configuration).
void replace_once(std::string& text, std::string_view from, std::string_view to) {
  const auto at = text.find(from);
  ASSERT_NE(at, std::string::npos) << "docs/nginx.md no longer has " << from;
  ASSERT_EQ(text.find(from, at + 1), std::string::npos) << "docs/nginx.md has " << from << " twice";
  text.replace(at, from.size(), to);
}

class NginxAuthRequest : public ::testing::Test {
 protected:
  void SetUp() override {
    ratekeeper_ = serve(R"(
trusted_proxies: [127.0.0.1/32]
logging: {decisions: {enabled: false}}
rules:
  - name: orders
    match: {path_prefix: /orders}
    limits: [{capacity: 3, refill_rate: 0.001}]
  - name: users
    match: {path_prefix: /users}
    identity: {type: header, header: X-User-ID}
    limits: [{capacity: 3, refill_rate: 0.001}]
)",
                        {}, 1);
    const int upstream_port = free_port();
    do {
      port_ = free_port();
    } while (port_ == upstream_port);
    std::string documented = doc_block("docs/nginx.md", "nginx");
    replace_once(documented, "server 127.0.0.1:8000;",
                 fmt::format("server 127.0.0.1:{};", upstream_port));
    replace_once(documented, "server 127.0.0.1:9090;",
                 fmt::format("server 127.0.0.1:{};", ratekeeper_->port()));
    replace_once(documented, "listen 80;", fmt::format("listen 127.0.0.1:{};", port_));
    if (HasFatalFailure()) return;
    // The app: answers every request with its URI, so that a test sees what reached it.
    const std::string app = fmt::format(
        "server {{ listen 127.0.0.1:{}; default_type text/plain; return 200 'app $request_uri'; "
        "}}\n",
        upstream_port);
    nginx_ = std::make_unique<NginxProcess>(app + documented, port_);
  }

  std::unique_ptr<ServerProcess> ratekeeper_;
  std::unique_ptr<NginxProcess> nginx_;
  int port_ = 0;
};

TEST_F(NginxAuthRequest, AdmitsWithinCapacityThenAnswersTheSeeds429) {
  HttpClient client(port_);
  for (int remaining = 2; remaining >= 0; --remaining) {
    auto r = client.get("/orders/7?page=2");
    ASSERT_EQ(r.status, 200) << r.body << nginx_->error_log();
    EXPECT_EQ(r.body, "app /orders/7?page=2");
    EXPECT_EQ(r.header("RateLimit-Policy"), R"("orders";q=3;w=3000)");
    EXPECT_EQ(r.header("RateLimit"),
              fmt::format(R"("orders";r={};t={})", remaining, (3 - remaining) * 1000));
    EXPECT_FALSE(r.header("Retry-After"));
  }
  auto denied = client.get("/orders/8");
  ASSERT_EQ(denied.status, 429) << denied.body << nginx_->error_log();
  EXPECT_EQ(denied.header("Content-Type"), "application/json");
  EXPECT_EQ(json::parse(denied.body),
            json::parse(R"({"error":"Rate limit exceeded","retryAfter":1000})"));
  EXPECT_EQ(denied.header("Retry-After"), "1000");
  EXPECT_EQ(denied.header("RateLimit"), R"("orders";r=0;t=1000)");

  // Paths no rule matches reach the app unlimited; a refused identity is ratekeeper's 400.
  auto other = client.get("/health");
  EXPECT_EQ(other.status, 200);
  EXPECT_EQ(other.body, "app /health");
  EXPECT_FALSE(other.header("RateLimit"));
  auto refused = client.get("/users/1", {{"X-User-ID", std::string(300, 'u')}});
  EXPECT_EQ(refused.status, 400) << refused.body;
  EXPECT_EQ(json::parse(refused.body).at("error"), "Bad request");
}

TEST_F(NginxAuthRequest, RatekeeperDownIsTheDocumentedFailOpenNotA429) {
  HttpClient client(port_);
  ASSERT_EQ(client.get("/orders/1").status, 200);
  ratekeeper_->signal(SIGKILL);
  ASSERT_TRUE(ratekeeper_->wait(std::chrono::seconds(10)));
  for (int i = 0; i < 5; ++i) {
    auto r = client.get("/orders/1");
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.body, "app /orders/1");
    EXPECT_EQ(r.header("X-RateLimit-Status"), "unavailable");
    EXPECT_FALSE(r.header("RateLimit"));
  }
}

}  // namespace
}  // namespace ratekeeper::testing
