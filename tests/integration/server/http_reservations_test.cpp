// End to end: reservations through the decision API of two `ratekeeper serve` instances over
// one real redis-server. A check with `reserve` takes an estimate and answers an id that
// either instance settles to the actual cost, once; a settlement the store cannot take is a
// 503 and a log line (the estimate stays charged).

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

#include <map>
#include <string>

#include <sstream>

#include "support/doc_blocks.hpp"
#include "support/http_client.hpp"
#include "support/redis_server.hpp"

namespace ratekeeper::testing {
namespace {

using json = nlohmann::json;

constexpr std::string_view kRules = R"(rules:
  - name: completions
    limits:
      - {name: burst, capacity: 1000, refill_rate: 0.001}
      - {name: hourly, algorithm: fixed_window, limit: 100000, window: 400d}
  - name: sliding
    limits: [{algorithm: sliding_window_log, limit: 5, window: 1m}]
)";

HttpResponse reserve(HttpClient& client, std::int64_t estimate) {
  return client.post("/v1/check",
                     json{{"rule", "completions"}, {"identity", "key:k-42"}, {"cost", estimate}, {"reserve", true}}.dump());
}

HttpResponse settle(HttpClient& client, const std::string& id, std::int64_t actual) {
  return client.post("/v1/settle",
                     json{{"rule", "completions"}, {"identity", "key:k-42"}, {"reservation", id}, {"cost", actual}}.dump());
}

std::int64_t remaining(HttpClient& client) {
  const auto peek =
      client.post("/v1/check", json{{"rule", "completions"}, {"identity", "key:k-42"}, {"cost", 0}}.dump());
  return json::parse(peek.body).at("remaining").get<std::int64_t>();
}

// The reservation id of an admitted check, or a failure that shows the answer.
std::string reservation_of(const HttpResponse& answer) {
  EXPECT_EQ(answer.status, 200) << answer.body;
  const auto body = json::parse(answer.body, nullptr, false);
  if (!body.is_object() || !body.contains("reservation")) {
    ADD_FAILURE() << "no reservation in: " << answer.body;
    return {};
  }
  return body["reservation"];
}

TEST(Reservations, OneInstanceReservesAnotherSettlesOnce) {
  RedisServer redis;
  const auto a = serve(std::string(kRules), redis.url());
  const auto b = serve(std::string(kRules), redis.url());
  HttpClient first(a->port());
  HttpClient second(b->port());

  const std::string id = reservation_of(reserve(first, 400));
  ASSERT_FALSE(id.empty());
  EXPECT_EQ(remaining(second), 600);
  const auto settled = settle(second, id, 150);
  ASSERT_EQ(settled.status, 200) << settled.body;
  EXPECT_EQ(json::parse(settled.body).at("settled"), true);
  EXPECT_EQ(remaining(first), 850);
  const auto again = settle(first, id, 10);
  ASSERT_EQ(again.status, 200) << again.body;
  EXPECT_EQ(json::parse(again.body).at("settled"), false);
  EXPECT_EQ(remaining(first), 850);

  // Above the estimate: charged beyond what the bucket holds, which then owes and denies.
  const std::string big = reservation_of(reserve(first, 800));
  ASSERT_FALSE(big.empty());
  ASSERT_EQ(json::parse(settle(second, big, 1200).body).at("settled"), true);
  EXPECT_EQ(remaining(first), 0);
  EXPECT_EQ(reserve(second, 1).status, 429);
  // The record lives in the identity's slot, under the rule, and is gone once settled.
  EXPECT_EQ(redis.command({"EXISTS", fmt::format("ratelimit:{{key:k-42}}:completions:reservation:{}", id)}), "0");

  // A rule that cannot be reserved is a 400 that says why.
  const auto refused = first.post(
      "/v1/check", json{{"rule", "sliding"}, {"identity", "key:k-42"}, {"reserve", true}}.dump());
  EXPECT_EQ(refused.status, 400) << refused.body;
  EXPECT_NE(refused.body.find("cannot be reserved"), std::string::npos) << refused.body;
}

TEST(Reservations, ASettlementTheStoreCannotTakeIsA503AndALogLine) {
  RedisServer redis;
  const auto process = serve(std::string(kRules), redis.url());
  HttpClient client(process->port());
  const auto reserved = reserve(client, 5);
  ASSERT_EQ(reserved.status, 200) << reserved.body;
  redis.stop();
  const auto failed = settle(client, json::parse(reserved.body).at("reservation"), 1);
  EXPECT_EQ(failed.status, 503) << failed.body;
  EXPECT_NE(process->log().find("reservation of key:k-42 under rule 'completions' not settled"), std::string::npos)
      << process->log();
}

// The documented session (docs/decision-api.md), run against the documented configuration:
// the same answers, the documented reservation id standing for the one answered.
TEST(Reservations, TheDocumentedSessionAnswersAsWritten) {
  std::string session;
  for (const auto& block : fenced_blocks(RATEKEEPER_SOURCE_DIR "/docs/decision-api.md")) {
    if (block.marker == "reservation-session") session = block.text;
  }
  ASSERT_FALSE(session.empty());
  RedisServer redis;
  const auto process = serve(doc_block("docs/decision-api.md", "yaml"), redis.url());
  HttpClient client(process->port());
  const std::string documented_id = "5f0c1e9a7b3d4c2e8f6a1b0c9d8e7f60";
  std::string id;
  std::istringstream lines(session);
  std::string command, documented;
  int asked = 0;
  while (std::getline(lines, command) && std::getline(lines, documented)) {
    const std::string prefix = "$ curl -s localhost:8080";
    ASSERT_TRUE(command.starts_with(prefix)) << command;
    const auto target_end = command.find(" -d '");
    ASSERT_NE(target_end, std::string::npos) << command;
    const std::string target = command.substr(prefix.size(), target_end - prefix.size());
    std::string body = command.substr(target_end + 5, command.size() - target_end - 6);
    if (!id.empty()) {
      for (auto at = body.find(documented_id); at != std::string::npos; at = body.find(documented_id)) {
        body.replace(at, documented_id.size(), id);
      }
    }
    const auto answer = client.post(target, body);
    ASSERT_EQ(answer.status, 200) << command << ": " << answer.body;
    auto answered = json::parse(answer.body);
    if (answered.contains("reservation")) {
      id = answered["reservation"];
      answered["reservation"] = documented_id;
    }
    EXPECT_EQ(answered, json::parse(documented)) << command << "\nanswered:   " << answer.body;
    ++asked;
  }
  EXPECT_EQ(asked, 3);
}

// The documented session of a concurrency limit (docs/decision-api.md), run against the
// documented configuration with the documented rule added: the same answers, each documented
// reservation id standing for the one answered in its place, and a denial's reset_after_ms
// (the time since the slots were taken) left out.
TEST(Reservations, TheDocumentedConcurrencySessionAnswersAsWritten) {
  std::string session, fragment;
  for (const auto& block : fenced_blocks(RATEKEEPER_SOURCE_DIR "/docs/decision-api.md")) {
    if (block.marker == "concurrency-session") session = block.text;
    if (block.marker == "yaml: config fragment of rules" && block.text.find("name: streams") != std::string::npos) {
      fragment = block.text;
    }
  }
  ASSERT_FALSE(session.empty());
  ASSERT_FALSE(fragment.empty());
  YAML::Node config = YAML::Load(doc_block("docs/decision-api.md", "yaml"));
  config["rules"].push_back(YAML::Load(fragment));
  RedisServer redis;
  const auto process = serve(YAML::Dump(config), redis.url());
  HttpClient client(process->port());
  std::map<std::string, std::string> ids;  // documented → answered
  std::istringstream lines(session);
  std::string command, documented;
  int asked = 0;
  while (std::getline(lines, command) && std::getline(lines, documented)) {
    const std::string prefix = "$ curl -s localhost:8080";
    ASSERT_TRUE(command.starts_with(prefix)) << command;
    const auto target_end = command.find(" -d '");
    ASSERT_NE(target_end, std::string::npos) << command;
    const std::string target = command.substr(prefix.size(), target_end - prefix.size());
    auto body = json::parse(command.substr(target_end + 5, command.size() - target_end - 6));
    if (body.contains("reservation")) {
      ASSERT_TRUE(ids.contains(body["reservation"])) << command;
      body["reservation"] = ids[body["reservation"]];
    }
    auto expected = json::parse(documented);
    const auto answer = client.post(target, body.dump());
    ASSERT_EQ(answer.status, expected.value("allowed", true) ? 200 : 429) << command << ": " << answer.body;
    auto answered = json::parse(answer.body);
    if (expected.contains("reservation")) {
      ASSERT_TRUE(answered.contains("reservation")) << answer.body;
      ids[expected["reservation"]] = answered["reservation"];
      answered["reservation"] = expected["reservation"];
    }
    if (!expected.value("allowed", true)) {
      answered.erase("reset_after_ms");
      expected.erase("reset_after_ms");
    }
    EXPECT_EQ(answered, expected) << command << "\nanswered:   " << answer.body;
    ++asked;
  }
  EXPECT_EQ(asked, 7);
}

}  // namespace
}  // namespace ratekeeper::testing
