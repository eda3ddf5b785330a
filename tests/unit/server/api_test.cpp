// The server's routes (server/api.hpp) driven directly: every answer is a well-formed
// response, whatever bytes the request or the store's messages hold.

#include "api.hpp"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "config.hpp"
#include "ratekeeper/http/middleware.hpp"
#include "ratekeeper/limiter/limiter.hpp"
#include "ratekeeper/store/memory_store.hpp"

namespace ratekeeper::server {
namespace {

using json = nlohmann::json;

// A memory store whose health is set by the test.
class HealthStore final : public store::Store {
 public:
  void check(std::vector<store::CheckItem> items, std::optional<Micros> now,
             store::CheckCallback done) override {
    inner_.check(std::move(items), now, std::move(done));
  }
  std::string_view kind() const noexcept override { return "test"; }
  store::StoreHealth health() const override { return health_; }

  store::StoreHealth health_;

 private:
  store::MemoryStore inner_;
};

class ApiTest : public ::testing::Test {
 protected:
  ApiTest()
      : config_(server::parse_config(R"(
rules:
  - name: export
    match: {path_prefix: /api/export/}
    limits: [{capacity: 100, refill_rate: 1}]
  - name: search
    match: {path: /api/search}
    identity: {type: header, header: X-User-ID}
    limits: [{capacity: 100, refill_rate: 1}]
)")),
        limiter_(config_.limiter, store_),
        middleware_(limiter_, config_.middleware),
        api_(limiter_, middleware_) {}

  http::Response get(std::string target, http::HeaderList headers = {}) {
    http::Request request;
    request.method = "GET";
    request.target = std::move(target);
    request.headers = std::move(headers);
    request.peer_address = "192.0.2.1";
    std::optional<http::Response> answer;
    api_.handle(std::move(request), [&answer](http::Response r) { answer = std::move(r); });
    EXPECT_TRUE(answer.has_value()) << "the memory store answers inline";
    return answer.value_or(http::Response{0, {}, {}, {}});
  }

  server::Config config_;
  HealthStore store_;
  limiter::Limiter limiter_;
  http::Middleware middleware_;
  Api api_;
};

TEST_F(ApiTest, InvalidUtf8FromTheRequestIsReplacedInTheReply) {
  const std::string replacement = "\xEF\xBF\xBD";
  auto exported = get("/api/export/%ff%fe");
  ASSERT_EQ(exported.status, 200) << exported.body;
  EXPECT_EQ(json::parse(exported.body).at("export"), replacement + replacement);
  auto searched = get("/api/search?q=ok%c3", {{"X-User-ID", "u"}});
  ASSERT_EQ(searched.status, 200) << searched.body;
  EXPECT_EQ(json::parse(searched.body).at("query"), "ok" + replacement);
}

TEST_F(ApiTest, ReadinessWithAnInvalidUtf8StoreMessageIsStillJson) {
  store_.health_ = {false, "ERR \xff\xfe from the store"};
  auto ready = get("/readyz");
  EXPECT_EQ(ready.status, 503);
  const auto body = json::parse(ready.body);
  EXPECT_EQ(body.at("status"), "not ready");
  EXPECT_EQ(body.at("reason"), "ERR \xEF\xBF\xBD\xEF\xBF\xBD from the store");
}

}  // namespace
}  // namespace ratekeeper::server
