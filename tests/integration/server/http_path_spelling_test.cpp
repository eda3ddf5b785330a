// End to end: every spelling of one path is one path. Each entry (the demo API's routes, the
// reverse proxy, the decision API's request form and nginx's /v1/auth) decides on the normal
// form of the request's path (http/path.hpp): a per-endpoint rule keeps one bucket for all of
// them, the routes serve the normal path, and the upstream receives it.

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "support/http_client.hpp"
#include "support/test_upstream.hpp"

namespace ratekeeper::testing {
namespace {

using json = nlohmann::json;

// Spellings of /api/data: merged slashes, dot segments (plain and encoded), an encoded
// unreserved letter.
const std::vector<std::string> kSpellings = {
    "/api/data", "//api/data", "/api/./data", "/api/%64ata", "/api/x/../data",
    "/api/%2e%2e/api/data", "/api/export/../data", "/api//data",
};

constexpr std::string_view kRules = R"(
logging: {decisions: {enabled: false}}
rules:
  - name: api_data
    match: {path: /api/data}
    bucket: per_endpoint
    limits: [{algorithm: sliding_window_log, limit: 8, window: 1h}]
)";

TEST(HttpPathSpelling, TheDemoRoutesAndRulesShareOneBucket) {
  auto server = serve(std::string(kRules));
  HttpClient client(server->port());
  for (const auto& path : kSpellings) {
    const auto r = client.get(path);
    EXPECT_EQ(r.status, 200) << path << ": " << r.body;
    EXPECT_EQ(r.body, R"({"data":"success"})") << path;  // served as /api/data
  }
  for (const auto& path : kSpellings) EXPECT_EQ(client.get(path).status, 429) << path;
  // Out of the export route by its dot segments: the path is /api/x, which no route serves.
  for (const char* path : {"/api/export/%2e%2e/x", "/api/export/../x"}) {
    const auto r = client.get(path);
    EXPECT_EQ(r.status, 404) << path << ": " << r.body;
  }
}

TEST(HttpPathSpelling, TheAuthSubrequestSharesOneBucket) {
  auto server = serve(std::string(kRules));
  HttpClient client(server->port());
  const auto auth = [&](const std::string& uri) {
    return client.get("/v1/auth", {{"X-Original-Method", "GET"}, {"X-Original-URI", uri}});
  };
  for (const auto& path : kSpellings) EXPECT_EQ(auth(path).status, 200) << path;
  for (const auto& path : kSpellings) {
    const auto r = auth(path);
    EXPECT_EQ(r.status, 403) << path;
    EXPECT_EQ(r.header("X-RateLimit-Status").value_or(""), "429") << path;
  }
}

TEST(HttpPathSpelling, TheDecisionApiRequestFormSharesOneBucket) {
  auto server = serve(std::string(kRules));
  const auto check = [&](const std::string& path) {
    const json body{{"request", {{"method", "GET"}, {"path", path}, {"client_ip", "192.0.2.7"}}}};
    return http_post(server->port(), "/v1/check", body.dump(),
                     {{"Content-Type", "application/json"}});
  };
  for (const auto& path : kSpellings) EXPECT_EQ(check(path).status, 200) << path;
  for (const auto& path : kSpellings) EXPECT_EQ(check(path).status, 429) << path;
}

TEST(HttpPathSpelling, TheProxySharesOneBucketAndForwardsTheNormalPath) {
  TestUpstream upstream;
  auto server = serve(fmt::format("upstream: {{url: \"http://127.0.0.1:{}\"}}\nadmin: {{listen: 127.0.0.1:0}}\n",
                                  upstream.port()) +
                      std::string(kRules));
  // The proxy's own port (the line names the upstream's after it).
  const int proxy = logged_port(*server, "listening on 127.0.0.1:");
  ASSERT_NE(proxy, 0) << server->output();
  HttpClient client(proxy);
  for (const auto& path : kSpellings) EXPECT_EQ(client.get(path).status, 200) << path;
  for (const auto& path : kSpellings) EXPECT_EQ(client.get(path).status, 429) << path;
  const auto seen = upstream.requests();
  ASSERT_EQ(seen.size(), kSpellings.size());
  for (const auto& request : seen) EXPECT_EQ(request.target, "/api/data");
}

// Spellings of /orders for an application that reads a backslash or an escaped slash as a
// separator, drops Tomcat's `;` path parameters, or decodes twice.
const std::vector<std::string> kSlashSpellings = {"/%5Corders", "/x\\..\\orders", "/%2Forders"};
const std::vector<std::string> kAmbiguousSpellings = {"/x/..;/orders", "/%25%36%66rders"};

std::string proxy_config(int upstream, std::string_view http) {
  return fmt::format("upstream: {{url: \"http://127.0.0.1:{}\"}}\nadmin: {{listen: 127.0.0.1:0}}\n{}"
                     "logging: {{decisions: {{enabled: false}}}}\n"
                     "rules:\n"
                     "  - name: orders\n"
                     "    match: {{path: /orders}}\n"
                     "    limits: [{{algorithm: fixed_window, limit: 2, window: 1h}}]\n",
                     upstream, http);
}

TEST(HttpPathSpelling, TheProxyRefusesEscapedSlashesAndAmbiguousSpellingsByDefault) {
  TestUpstream upstream;
  auto server = serve(proxy_config(upstream.port(), ""));
  const int proxy = logged_port(*server, "listening on 127.0.0.1:");
  ASSERT_NE(proxy, 0) << server->output();
  for (const auto& spellings : {kSlashSpellings, kAmbiguousSpellings}) {
    for (const auto& path : spellings) {
      HttpClient client(proxy);
      const auto r = client.get(path);
      EXPECT_EQ(r.status, 400) << path << ": " << r.body;
      EXPECT_NE(r.body.find("refused"), std::string::npos) << r.body;
    }
  }
  EXPECT_TRUE(upstream.requests().empty());
  // nginx's subrequest refuses them the same way (403 to nginx, the 400 in X-RateLimit-Status).
  const int admin = logged_port(*server, "admin endpoints on 127.0.0.1:");
  ASSERT_NE(admin, 0) << server->output();
  HttpClient auth(admin);
  for (const auto& path : kSlashSpellings) {
    const auto r = auth.get("/v1/auth", {{"X-Original-Method", "GET"}, {"X-Original-URI", path}});
    EXPECT_EQ(r.status, 403) << path << ": " << r.body;
    EXPECT_EQ(r.header("X-RateLimit-Status").value_or(""), "400") << path;
  }
}

TEST(HttpPathSpelling, UnescapedSlashesAreChargedToTheRuleTheyReach) {
  TestUpstream upstream;
  auto server = serve(proxy_config(upstream.port(), "http: {escaped_slashes: unescape}\n"));
  const int proxy = logged_port(*server, "listening on 127.0.0.1:");
  ASSERT_NE(proxy, 0) << server->output();
  std::vector<int> statuses;
  for (const auto& path : kSlashSpellings) {
    HttpClient client(proxy);
    statuses.push_back(client.get(path).status);
  }
  EXPECT_EQ(statuses, (std::vector<int>{200, 200, 429}));
  const auto seen = upstream.requests();
  ASSERT_EQ(seen.size(), 2u);
  for (const auto& request : seen) EXPECT_EQ(request.target, "/orders");
  // The ambiguous spellings stay refused.
  for (const auto& path : kAmbiguousSpellings) {
    HttpClient client(proxy);
    EXPECT_EQ(client.get(path).status, 400) << path;
  }
}

TEST(HttpPathSpelling, KeptSpellingsAreAnotherPathForwardedInNormalForm) {
  TestUpstream upstream;
  auto server = serve(proxy_config(upstream.port(),
                                   "http: {escaped_slashes: keep, ambiguous_paths: keep}\n"));
  const int proxy = logged_port(*server, "listening on 127.0.0.1:");
  ASSERT_NE(proxy, 0) << server->output();
  for (const auto& spellings : {kSlashSpellings, kAmbiguousSpellings}) {
    for (const auto& path : spellings) {
      HttpClient client(proxy);
      const auto r = client.get(path);
      EXPECT_EQ(r.status, 200) << path << ": " << r.body;
      EXPECT_FALSE(r.header("RateLimit-Policy")) << path;  // no rule: another path
    }
  }
  std::vector<std::string> targets;
  for (const auto& request : upstream.requests()) targets.push_back(request.target);
  EXPECT_EQ(targets, (std::vector<std::string>{"/%5Corders", "/x\\..\\orders", "/%2Forders",
                                               "/x/..;/orders", "/%256frders"}));
}

}  // namespace
}  // namespace ratekeeper::testing
