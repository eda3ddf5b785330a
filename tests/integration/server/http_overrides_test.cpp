// End to end: /admin/overrides on two `ratekeeper serve` processes sharing a real redis-server.
// An override set on one is listed by both, applied by the other within its refresh, exactly
// (the requests of both servers together admit the overridden limit), and removed from either;
// each change leaves an audit line. Bad bodies and parameters are 400s with their reason, a
// dead store a 503 and log lines (the admin call's and the refresh's).

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <yaml-cpp/yaml.h>

#include <nlohmann/json.hpp>
#include <set>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "support/doc_blocks.hpp"
#include "support/eventually.hpp"
#include "support/http_client.hpp"
#include "support/openapi.hpp"
#include "support/redis_server.hpp"

namespace ratekeeper::testing {
namespace {

using json = nlohmann::json;

constexpr std::string_view kConfig = R"(overrides: {refresh: 50ms}
rules:
  - name: api
    limits: [{algorithm: fixed_window, limit: 2, window: 1h}]
)";

HttpResponse check(HttpClient& client, std::string_view identity) {
  return client.post("/v1/check", json{{"rule", "api"}, {"identity", identity}}.dump());
}

HttpResponse put_override(HttpClient& client, const json& body) {
  return client.request(HttpRequest{"PUT", "/admin/overrides", {}, body.dump()});
}

// The limit the server applies to `identity` now (read without consuming).
std::int64_t limit_of(HttpClient& client, std::string_view identity) {
  const auto r = client.get(fmt::format("/admin/keys?rule=api&identity={}", identity));
  if (r.status != 200) return -1;
  return json::parse(r.body)["limits"][0]["limit"].get<std::int64_t>();
}

TEST(Overrides, SetOnOneServerTheOtherAppliesItExactlyWithinItsRefresh) {
  RedisServer redis;
  const auto a = serve(std::string(kConfig), redis.url());
  const auto b = serve(std::string(kConfig), redis.url());
  HttpClient ca(a->port());
  HttpClient cb(b->port());
  ASSERT_EQ(limit_of(cb, "user:42"), 2);

  const auto set = put_override(ca, {{"rule", "api"}, {"identity", "user:42"}, {"factor", 3}, {"note", "trial"}});
  ASSERT_EQ(set.status, 200) << set.body;
  const auto body = json::parse(set.body);
  EXPECT_EQ(body["factor"], 3);
  EXPECT_EQ(body["replaced"], false);
  EXPECT_EQ(body["set_by"], "127.0.0.1");
  EXPECT_NE(a->log().find(R"(admin: 127.0.0.1 set the override of user:42 under rule 'api' to x3 (note: "trial"))"),
            std::string::npos)
      << a->log();
  EXPECT_EQ(limit_of(ca, "user:42"), 6);  // in effect on the server that set it at once
  EXPECT_TRUE(eventually([&] { return limit_of(cb, "user:42") == 6; }));

  const auto listed = cb.get("/admin/overrides");
  ASSERT_EQ(listed.status, 200) << listed.body;
  const auto list = json::parse(listed.body)["overrides"];
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0]["rule"], "api");
  EXPECT_EQ(list[0]["identity"], "user:42");
  EXPECT_EQ(list[0]["factor"], 3);
  EXPECT_EQ(list[0]["note"], "trial");

  // 10 asked of both servers in turn: the 6 of the override, not 2, not 12.
  int admitted = 0;
  for (int i = 0; i < 10; ++i) {
    const auto r = check(i % 2 == 0 ? ca : cb, "user:42");
    ASSERT_TRUE(r.status == 200 || r.status == 429) << r.status << " " << r.body;
    admitted += r.status == 200 ? 1 : 0;
  }
  EXPECT_EQ(admitted, 6);
  EXPECT_EQ(check(ca, "user:7").status, 200);  // another identity: the rule's 2
  EXPECT_EQ(check(ca, "user:7").status, 200);
  EXPECT_EQ(check(cb, "user:7").status, 429);

  const auto replaced = put_override(cb, {{"rule", "api"}, {"identity", "user:42"}, {"factor", 10}});
  ASSERT_EQ(replaced.status, 200) << replaced.body;
  EXPECT_EQ(json::parse(replaced.body)["replaced"], true);
  EXPECT_TRUE(eventually([&] { return limit_of(ca, "user:42") == 20; }));

  const auto removed = cb.request(HttpRequest{"DELETE", "/admin/overrides?rule=api&identity=user%3A42", {}, {}});
  ASSERT_EQ(removed.status, 200) << removed.body;
  EXPECT_EQ(json::parse(removed.body)["removed"], true);
  EXPECT_NE(b->log().find("admin: 127.0.0.1 removed the override of user:42 under rule 'api'"), std::string::npos)
      << b->log();
  EXPECT_TRUE(eventually([&] { return limit_of(ca, "user:42") == 2; }));
  EXPECT_EQ(check(ca, "user:42").status, 429);  // the 6 counted stay counted
  const auto again = ca.request(HttpRequest{"DELETE", "/admin/overrides?rule=api&identity=user:42", {}, {}});
  ASSERT_EQ(again.status, 200) << again.body;
  EXPECT_EQ(json::parse(again.body)["removed"], false);
  EXPECT_EQ(json::parse(ca.get("/admin/overrides").body)["overrides"].size(), 0u);
  const auto metrics = ca.get("/metrics");
  EXPECT_NE(metrics.body.find("ratekeeper_overrides 0"), std::string::npos) << metrics.body;
  EXPECT_NE(metrics.body.find("ratekeeper_overrides_refreshes_total{result=\"changed\"}"), std::string::npos);
}

TEST(Overrides, BadBodiesAndParametersAreRefusedWithTheirReason) {
  RedisServer redis;
  const auto server = serve(std::string(kConfig), redis.url());
  HttpClient client(server->port());
  const std::vector<std::pair<std::string, std::string>> bodies = {
      {"{", "not valid JSON"},
      {"[]", "must be a JSON object"},
      {R"({"identity": "user:1", "factor": 2})", "`rule` must be"},
      {R"({"rule": "api", "factor": 2})", "`identity` must be"},
      {R"({"rule": "api", "identity": "user:1"})", "`factor` must be a number"},
      {R"({"rule": "api", "identity": "user:1", "factor": "2"})", "`factor` must be a number"},
      {R"({"rule": "api", "identity": "user:1", "factor": 0})", "factor must be a number from"},
      {R"({"rule": "api", "identity": "user:1", "factor": 2000000})", "factor must be a number from"},
      {R"({"rule": "nope", "identity": "user:1", "factor": 2})", "unknown rule 'nope'"},
      {R"({"rule": "api", "identity": "user:1", "factor": 2, "note": 3})", "`note` must be a string"},
      {R"({"rule": "api", "identity": "user:1", "factor": 2, "scope": "all"})", "unknown field `scope`"},
      {R"({"rule": "api", "identity": ")" + std::string(300, 'x') + R"(", "factor": 2})", "identity:"},
  };
  for (const auto& [body, reason] : bodies) {
    const auto r = client.request(HttpRequest{"PUT", "/admin/overrides", {}, body});
    EXPECT_EQ(r.status, 400) << body;
    EXPECT_NE(r.body.find(reason), std::string::npos) << body << ": " << r.body;
  }
  for (const auto& query : {"rule=api", "identity=user:1", "rule=&identity=user:1"}) {
    const auto r = client.request(HttpRequest{"DELETE", fmt::format("/admin/overrides?{}", query), {}, {}});
    EXPECT_EQ(r.status, 400) << query << ": " << r.body;
  }
  const auto post = client.post("/admin/overrides", "{}");
  EXPECT_EQ(post.status, 405);
  EXPECT_EQ(post.header("Allow"), "GET, PUT, DELETE");
  EXPECT_EQ(json::parse(client.get("/admin/overrides").body)["overrides"].size(), 0u);  // nothing was written
}

TEST(Overrides, AStoreFailureIsA503AndTheRefreshSaysSoInTheLog) {
  RedisServer redis;
  const auto server = serve(std::string(kConfig), redis.url());
  HttpClient client(server->port());
  ASSERT_EQ(put_override(client, {{"rule", "api"}, {"identity", "user:42"}, {"factor", 2}}).status, 200);
  redis.stop();
  const auto set = put_override(client, {{"rule", "api"}, {"identity", "user:43"}, {"factor", 2}});
  EXPECT_EQ(set.status, 503) << set.body;
  EXPECT_EQ(client.get("/admin/overrides").status, 503);
  EXPECT_NE(server->log().find("admin: override of user:43 under rule 'api' asked by 127.0.0.1 failed"),
            std::string::npos)
      << server->log();
  EXPECT_TRUE(eventually([&] {
    return server->log().find("overrides: the table could not be read, the 1 held stay in effect") != std::string::npos;
  })) << server->log();
}

// docs/openapi.yaml lists the fields of the answers: every required field is there, and
// nothing else.
TEST(Overrides, AnswersHaveTheFieldsTheOpenApiFileDescribes) {
  const auto required = [](const char* schema) { return testing::openapi_required(schema); };
  const auto keys = [](const json& object) { return testing::json_keys(object); };
  RedisServer redis;
  const auto server = serve(std::string(kConfig), redis.url());
  HttpClient client(server->port());
  const auto set = put_override(client, {{"rule", "api"}, {"identity", "user:1"}, {"factor", 2}});
  ASSERT_EQ(set.status, 200) << set.body;
  auto with_replaced = required("Override");
  with_replaced.insert("replaced");
  EXPECT_EQ(keys(json::parse(set.body)), with_replaced);
  EXPECT_EQ(required("OverrideRequest"), (std::set<std::string>{"rule", "identity", "factor"}));
  const auto list = json::parse(client.get("/admin/overrides").body);
  EXPECT_EQ(keys(list), required("OverrideList"));
  ASSERT_EQ(list["overrides"].size(), 1u);
  EXPECT_EQ(keys(list["overrides"][0]), required("Override"));
  const auto removed = client.request(HttpRequest{"DELETE", "/admin/overrides?rule=api&identity=user:1", {}, {}});
  EXPECT_EQ(keys(json::parse(removed.body)), required("OverrideRemoval"));
}

// A documented answer and an actual one with what depends on when the session runs (the
// time an override was set, the table's version) checked for its form and set aside.
json comparable(json answer) {
  if (answer.contains("set_at")) {
    EXPECT_TRUE(std::regex_match(answer["set_at"].get<std::string>(), std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)")))
        << answer;
    answer.erase("set_at");
  }
  if (answer.contains("in_effect_version")) {
    EXPECT_GT(answer["in_effect_version"].get<std::int64_t>(), 0);
    answer.erase("in_effect_version");
  }
  if (answer.contains("overrides")) {
    for (auto& o : answer["overrides"]) o = comparable(o);
  }
  return answer;
}

// The documented session (docs/configuration.md, "Per-identity overrides") against the
// configuration of the session before it, on a real redis-server: each `$ curl` line's
// request (method, target, body) and the answer written under it.
TEST(Overrides, TheDocumentedSessionAnswersAsWritten) {
  std::string config, session, last_yaml;
  for (const auto& block : fenced_blocks(std::filesystem::path(RATEKEEPER_SOURCE_DIR) / "docs/configuration.md")) {
    if (block.language == "yaml") last_yaml = block.text;
    if (block.marker == "admin-overrides-session") {
      config = last_yaml;
      session = block.text;
    }
  }
  ASSERT_FALSE(config.empty());
  ASSERT_FALSE(session.empty());
  RedisServer redis;
  const auto server = serve(config, redis.url());
  HttpClient client(server->port());
  std::istringstream lines(session);
  std::string command, documented;
  int asked = 0;
  const std::regex curl(R"(^\$ curl -s (?:-X (\w+) )?'?(http://127\.0\.0\.1:8080[^' ]+)'?(?: -d '(.*)')?$)");
  while (std::getline(lines, command) && std::getline(lines, documented)) {
    std::smatch m;
    ASSERT_TRUE(std::regex_match(command, m, curl)) << command;
    const std::string method = m[1].matched ? m[1].str() : "GET";
    const std::string target = m[2].str().substr(std::string_view("http://127.0.0.1:8080").size());
    const auto answer = client.request(HttpRequest{method, target, {}, m[3].str()});
    ASSERT_EQ(answer.status, 200) << command << ": " << answer.body;
    EXPECT_EQ(comparable(json::parse(answer.body)), comparable(json::parse(documented, nullptr, false)))
        << command << "\nanswered:   " << answer.body << "\ndocumented: " << documented;
    ++asked;
  }
  EXPECT_EQ(asked, 4);
}

}  // namespace
}  // namespace ratekeeper::testing
