// End to end: /admin/keys on `ratekeeper serve` over a real redis-server. GET shows one
// identity's keys under a rule and what each has left, consuming nothing; DELETE resets them:
// the identity is admitted again at once (the denial the server cached included), and an
// audit line names who asked. Missing or bad parameters are 400s with their reason, other
// methods 405; a per-endpoint rule's keys are named by the endpoint's normal path, however
// the path is spelled.

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "support/doc_blocks.hpp"
#include "support/http_client.hpp"
#include "support/redis_server.hpp"

namespace ratekeeper::testing {
namespace {

using json = nlohmann::json;

constexpr std::string_view kRules = R"(rules:
  - name: api
    limits: [{capacity: 2, refill_rate: 0.001}]
  - name: pages
    match: {path_prefix: /pages/}
    bucket: per_endpoint
    identity: {type: ip}
    limits: [{capacity: 5, refill_rate: 0.001}]
)";

HttpResponse check(HttpClient& client, std::string_view rule, std::string_view identity) {
  return client.post("/v1/check", json{{"rule", rule}, {"identity", identity}}.dump());
}

HttpResponse keys(HttpClient& client, std::string method, std::string query) {
  return client.request(HttpRequest{std::move(method), "/admin/keys?" + query, {}, {}});
}

// Each query of `cases` sent to GET `path`: a 400 whose body says the reason given with it.
void expect_refused(HttpClient& client, std::string_view path,
                    const std::vector<std::pair<std::string, std::string>>& cases) {
  for (const auto& [query, reason] : cases) {
    const auto r = client.get(std::string(path) + "?" + query);
    EXPECT_EQ(r.status, 400) << query;
    EXPECT_NE(r.body.find(reason), std::string::npos) << query << ": " << r.body;
  }
}

TEST(AdminKeys, InspectionShowsWhatIsLeftAndAResetAdmitsAgain) {
  RedisServer redis;
  const auto process = serve(std::string(kRules), redis.url());
  ServerProcess& server = *process;
  HttpClient client(server.port());
  for (int i = 0; i < 2; ++i) ASSERT_EQ(check(client, "api", "user:42").status, 200);
  for (int i = 0; i < 2; ++i) ASSERT_EQ(check(client, "api", "user:42").status, 429);  // the second: cached

  for (int i = 0; i < 2; ++i) {  // twice: the first consumed nothing
    const auto seen = keys(client, "GET", "rule=api&identity=user%3A42");
    ASSERT_EQ(seen.status, 200) << seen.body;
    const auto body = json::parse(seen.body);
    EXPECT_EQ(body["rule"], "api");
    EXPECT_EQ(body["identity"], "user:42");
    ASSERT_EQ(body["limits"].size(), 1u);
    EXPECT_EQ(body["limits"][0]["key"], "ratelimit:{user:42}:api");
    EXPECT_EQ(body["limits"][0]["policy"], "api");
    EXPECT_EQ(body["limits"][0]["algorithm"], "token_bucket");
    EXPECT_EQ(body["limits"][0]["limit"], 2);
    EXPECT_EQ(body["limits"][0]["remaining"], 0);
    EXPECT_GT(body["limits"][0]["reset_after_ms"].get<std::int64_t>(), 1'000'000);
  }
  EXPECT_EQ(redis.command({"EXISTS", "ratelimit:{user:42}:api"}), "1");

  const auto reset = keys(client, "DELETE", "rule=api&identity=user:42");
  ASSERT_EQ(reset.status, 200) << reset.body;
  const auto body = json::parse(reset.body);
  EXPECT_EQ(body["keys"], json::array({"ratelimit:{user:42}:api"}));
  EXPECT_EQ(body["existed"], 1);
  EXPECT_EQ(redis.command({"EXISTS", "ratelimit:{user:42}:api"}), "0");
  EXPECT_EQ(check(client, "api", "user:42").status, 200);
  EXPECT_EQ(json::parse(keys(client, "GET", "rule=api&identity=user:42").body)["limits"][0]["remaining"], 1);
  EXPECT_NE(server.log().find("admin: 127.0.0.1 reset the keys of user:42 under rule 'api' (1 key(s), 1 held state)"),
            std::string::npos)
      << server.log();

  // Nothing held: nothing deleted, and said so.
  const auto again = keys(client, "DELETE", "rule=api&identity=user:7");
  ASSERT_EQ(again.status, 200) << again.body;
  EXPECT_EQ(json::parse(again.body)["existed"], 0);
}

// A store that cannot answer: 503 with the reason, and a log line naming the call.
TEST(AdminKeys, AStoreFailureIsA503AndALogLine) {
  RedisServer redis;
  const auto process = serve(std::string(kRules), redis.url());
  ServerProcess& server = *process;
  HttpClient client(server.port());
  ASSERT_EQ(keys(client, "GET", "rule=api&identity=user:42").status, 200);
  redis.stop();
  const auto seen = keys(client, "GET", "rule=api&identity=user:42");
  EXPECT_EQ(seen.status, 503) << seen.body;
  const auto reset = keys(client, "DELETE", "rule=api&identity=user:42");
  EXPECT_EQ(reset.status, 503) << reset.body;
  EXPECT_NE(server.log().find("admin: inspection of user:42 under rule 'api' asked by 127.0.0.1 failed"),
            std::string::npos)
      << server.log();
  EXPECT_NE(server.log().find("admin: reset of user:42 under rule 'api' asked by 127.0.0.1 failed"), std::string::npos)
      << server.log();
}

TEST(AdminKeys, APerEndpointRulesKeysAreNamedByTheNormalPath) {
  RedisServer redis;
  const auto process = serve(std::string(kRules), redis.url());
  ServerProcess& server = *process;
  HttpClient client(server.port());
  const auto counted = client.post(
      "/v1/check", json{{"request", {{"method", "GET"}, {"path", "/pages/a"}, {"client_ip", "192.0.2.9"}}}}.dump());
  ASSERT_EQ(counted.status, 200) << counted.body;
  const auto missing = keys(client, "GET", "rule=pages&identity=ip:192.0.2.9");
  EXPECT_EQ(missing.status, 400);
  EXPECT_NE(missing.body.find("endpoint"), std::string::npos) << missing.body;
  // Another spelling of /pages/a: the same key the request was counted on.
  const auto seen = keys(client, "GET", "rule=pages&identity=ip:192.0.2.9&endpoint=/pages/x/../%61");
  ASSERT_EQ(seen.status, 200) << seen.body;
  const auto body = json::parse(seen.body);
  EXPECT_EQ(body["limits"][0]["key"], "ratelimit:{ip:192.0.2.9}:pages:/pages/a");
  EXPECT_EQ(body["limits"][0]["remaining"], 4);
  const auto reset = keys(client, "DELETE", "rule=pages&identity=ip:192.0.2.9&endpoint=/pages/a");
  ASSERT_EQ(reset.status, 200) << reset.body;
  EXPECT_EQ(json::parse(reset.body)["existed"], 1);
}

TEST(AdminKeys, BadRequestsAreRefusedWithTheirReason) {
  RedisServer redis;
  const auto process = serve(std::string(kRules), redis.url());
  ServerProcess& server = *process;
  HttpClient client(server.port());
  expect_refused(client, "/admin/keys",
                 {{"identity=user:1", "`rule` must be given"},
                  {"rule=api", "`identity` must be given"},
                  {"rule=nope&identity=user:1", "unknown rule"},
                  {"rule=api&identity=" + std::string(300, 'x'), "identity"},
                  {"rule=pages&identity=ip:127.0.0.1&endpoint=/a%00b", "endpoint"}});
  const auto post = keys(client, "POST", "rule=api&identity=user:1");
  EXPECT_EQ(post.status, 405);
  EXPECT_EQ(post.header("Allow"), "GET, DELETE");
}

// /admin/top: the identities a rule denied most, this instance's count, the denials its denial
// cache answered included, as docs/configuration.md shows it; bad parameters are 400s.
TEST(AdminTop, TheIdentitiesARuleDeniedMostComeFirst) {
  RedisServer redis;
  const auto process = serve(std::string(kRules), redis.url());
  ServerProcess& server = *process;
  HttpClient client(server.port());
  for (int i = 0; i < 6; ++i) check(client, "api", "user:1");
  for (int i = 0; i < 3; ++i) check(client, "api", "user:2");
  check(client, "api", "user:3");
  const auto r = client.get("/admin/top?rule=api");
  ASSERT_EQ(r.status, 200) << r.body;
  const auto body = json::parse(r.body);
  EXPECT_EQ(body["rule"], "api");
  EXPECT_EQ(body["minutes"], 5);
  EXPECT_EQ(body["denials"], 5);
  ASSERT_EQ(body["identities"].size(), 2u);
  EXPECT_EQ(body["identities"][0], json({{"identity", "user:1"}, {"denied_at_least", 4}, {"denied_at_most", 4}}));
  EXPECT_EQ(body["identities"][1], json({{"identity", "user:2"}, {"denied_at_least", 1}, {"denied_at_most", 1}}));
  std::string documented;
  for (const auto& block : fenced_blocks(std::filesystem::path(RATEKEEPER_SOURCE_DIR) / "docs/configuration.md")) {
    if (block.marker == "admin-top-answer") documented = block.text;
  }
  EXPECT_EQ(body, json::parse(documented, nullptr, false)) << documented;
  EXPECT_EQ(json::parse(client.get("/admin/top?rule=api&n=1&minutes=1").body)["identities"].size(), 1u);
  expect_refused(client, "/admin/top",
                 {{"", "`rule` must be given"},
                  {"rule=nope", "unknown rule"},
                  {"rule=api&minutes=0", "`minutes` must be a whole number from 1 to 15"},
                  {"rule=api&minutes=16", "`minutes`"},
                  {"rule=api&n=ten", "`n` must be a whole number from 1 to 1000"},
                  {"rule=api&n=5x", "`n`"}});
}

// A documented answer and an actual one, each limit's reset_after_ms (when the key is full
// again: it depends on when the session runs) checked to lie within its window and set aside.
json comparable(json answer) {
  if (answer.contains("limits")) {
    for (auto& limit : answer["limits"]) {
      const auto reset = limit.at("reset_after_ms").get<std::int64_t>();
      EXPECT_GE(reset, 0);
      EXPECT_LE(reset, limit.at("window_ms").get<std::int64_t>());
      limit.erase("reset_after_ms");
    }
  }
  return answer;
}

// The documented session (docs/configuration.md), run against its documented configuration on
// a real redis-server after the two requests it speaks of: each `$ curl` line's request, and
// the answer written under it.
TEST(AdminKeys, TheDocumentedSessionAnswersAsWritten) {
  // The session's configuration: the YAML block right before it.
  std::string config, session, last_yaml;
  for (const auto& block : fenced_blocks(std::filesystem::path(RATEKEEPER_SOURCE_DIR) / "docs/configuration.md")) {
    if (block.language == "yaml") last_yaml = block.text;
    if (block.marker == "admin-keys-session") {
      config = last_yaml;
      session = block.text;
    }
  }
  ASSERT_FALSE(config.empty());
  ASSERT_FALSE(session.empty());
  RedisServer redis;
  const auto process = serve(config, redis.url());
  ServerProcess& server = *process;
  HttpClient client(server.port());
  for (int i = 0; i < 2; ++i) ASSERT_EQ(check(client, "api", "user:42").status, 200);

  std::istringstream lines(session);
  std::string command, documented;
  int asked = 0;
  while (std::getline(lines, command) && std::getline(lines, documented)) {
    ASSERT_TRUE(command.starts_with("$ curl -s ")) << command;
    const std::string method = command.find("-X DELETE") != std::string::npos ? "DELETE" : "GET";
    const std::string origin = "http://127.0.0.1:8080";
    const auto from = command.find(origin);
    ASSERT_NE(from, std::string::npos) << command;
    const std::string target = command.substr(from + origin.size(), command.rfind('\'') - from - origin.size());
    const auto answer = client.request(HttpRequest{method, target, {}, {}});
    ASSERT_EQ(answer.status, 200) << command << ": " << answer.body;
    EXPECT_EQ(comparable(json::parse(answer.body)), comparable(json::parse(documented, nullptr, false)))
        << command << "\nanswered:   " << answer.body << "\ndocumented: " << documented;
    ++asked;
  }
  EXPECT_EQ(asked, 3);
}

}  // namespace
}  // namespace ratekeeper::testing
