// End to end: graceful drain. On SIGTERM the server stops accepting, finishes the request in
// flight (here one waiting on a paused Redis), closes idle keep-alive connections and exits 0.

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>
#include <signal.h>

#include <cctype>
#include <chrono>
#include <fstream>
#include <future>
#include <sstream>
#include <memory>
#include <string>
#include <thread>

#include "support/eventually.hpp"
#include "support/http_client.hpp"
#include "support/redis_server.hpp"
#include "support/test_upstream.hpp"

namespace ratekeeper::testing {
namespace {

using Clock = std::chrono::steady_clock;

bool wait_for_output(const ServerProcess& server, const std::string& text,
                     std::chrono::seconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    if ((server.output() + server.log()).find(text) != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

TEST(HttpLifecycle, SigtermFinishesTheRequestInFlightAndExitsZero) {
  RedisServer redis;
  ServerProcess::Options o;
  // The store deadline keeps the request in flight for a while once Redis stops answering.
  o.config_yaml = fmt::format(R"(
logging: {{level: debug}}
store:
  url: {}
  command_timeout: 1500ms
rules:
  - name: api
    match: {{path: /api/data}}
    on_store_error: allow
    limits:
      - capacity: 10
        refill_rate: 1
)",
                              redis.url());
  ServerProcess server(std::move(o));

  HttpClient idle(server.port());  // a kept-alive connection with nothing to do
  ASSERT_EQ(idle.get("/api/data").status, 200);

  redis.pause();
  auto in_flight = std::async(
      std::launch::async, [port = server.port()] { return http_get(port, "/api/data?in-flight"); });
  // The server has read the request (it logs each one at debug level) and is waiting on Redis.
  ASSERT_TRUE(wait_for_output(server, "GET /api/data?in-flight", std::chrono::seconds(20)))
      << server.output();

  const auto signalled = Clock::now();
  server.signal(SIGTERM);
  const auto response = in_flight.get();
  EXPECT_EQ(response.status, 200) << response.body;  // answered by the failure policy
  EXPECT_EQ(response.body, R"({"data":"success"})");
  EXPECT_EQ(response.header("Connection"), "close");

  const auto status = server.wait(std::chrono::seconds(20));
  ASSERT_TRUE(status.has_value()) << "still running:\n" << server.output();
  EXPECT_EQ(*status, 0) << server.output() << server.errors();
  // Drained well before the 10 s drain timeout: the idle connection did not hold it up.
  EXPECT_LT(Clock::now() - signalled, std::chrono::seconds(8));
  redis.resume();

  // Nothing listens any more.
  EXPECT_THROW(http_get(server.port(), "/healthz"), std::runtime_error);
}

TEST(HttpLifecycle, SigintOnAnIdleServerExitsZero) {
  ServerProcess::Options o;
  o.config_yaml = "rules: []\n";
  ServerProcess server(std::move(o));
  HttpClient idle(server.port());
  ASSERT_EQ(idle.get("/healthz").status, 200);
  server.signal(SIGINT);
  const auto status = server.wait(std::chrono::seconds(20));
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ(*status, 0) << server.errors();
}

// The packaged configuration (/etc/ratekeeper/ratekeeper.yaml) serves the decision API and
// ratekeeper's own endpoints, not the seed's demo API: that is served only when asked for.
TEST(HttpLifecycle, ThePackagedConfigurationServesNoDemoApi) {
  RedisServer redis;
  std::ifstream file(std::string(RATEKEEPER_SOURCE_DIR) + "/packaging/ratekeeper.yaml");
  ASSERT_TRUE(file) << "packaging/ratekeeper.yaml";
  std::stringstream text;
  text << file.rdbuf();
  ServerProcess::Options o;
  o.config_yaml = text.str();
  o.store_url = redis.url();
  o.demo_api = false;  // the file as packaged
  ServerProcess server(std::move(o));
  HttpClient client(server.port());
  EXPECT_EQ(client.get("/healthz").status, 200);
  for (const char* path : {"/api/data", "/api/profile", "/api/search?q=x", "/api/export/x"}) {
    EXPECT_EQ(client.get(path).status, 404) << path;
  }
  EXPECT_EQ(client.post("/auth/login", "{}").status, 404);

  // The same file asking for the demo API serves it.
  ServerProcess::Options demo;
  demo.config_yaml = text.str() + "\ndemo_api: true\n";
  demo.store_url = redis.url();
  demo.demo_api = false;
  ServerProcess demo_server(std::move(demo));
  EXPECT_EQ(HttpClient(demo_server.port()).get("/api/data").status, 200);
}

// A 502 of the proxy leaves a log line with the request, the upstream and the reason; a run
// of them is bounded (a burst, then one line a second naming how many were left out).
TEST(HttpLifecycle, TheProxysBadGatewaysAreLoggedRateLimited) {
  int closed_port = 0;
  { closed_port = TestUpstream().port(); }  // nothing listens there any more
  auto server = serve(fmt::format("upstream: {{url: \"http://127.0.0.1:{}\"}}\nadmin: {{listen: 127.0.0.1:0}}\nrules: []\n",
                                  closed_port));
  const auto out = server->log();
  const auto at = out.find("listening on 127.0.0.1:");
  ASSERT_NE(at, std::string::npos) << out;
  const int proxy = std::stoi(out.substr(at + std::string_view("listening on 127.0.0.1:").size()));
  for (int i = 0; i < 20; ++i) {
    HttpClient client(proxy);
    EXPECT_EQ(client.get("/orders/" + std::to_string(i)).status, 502);
  }
  const auto log = server->output() + server->errors();
  const auto expected = fmt::format("proxy: 502 (bad gateway) for GET /orders/0: upstream 127.0.0.1:{}: ",
                                    closed_port);
  EXPECT_NE(log.find(expected), std::string::npos) << log;
  std::size_t lines = 0;
  for (auto pos = log.find("proxy: 502"); pos != std::string::npos; pos = log.find("proxy: 502", pos + 1)) ++lines;
  EXPECT_GE(lines, 1u);
  EXPECT_LT(lines, 20u) << log;  // bounded: not one line per request

  // The end of the burst is not lost: once the rate allows a line, the count of those left out
  // is written on its own. Every 502 is a line or counted in one.
  const std::string_view report = " lines left out since the last: proxy: upstream failures";
  std::string full;
  ASSERT_TRUE(eventually([&] {
    full = server->output() + server->errors();
    return full.find(report) != std::string::npos;
  })) << full;
  std::uint64_t told = 0;
  for (const std::string_view marker : {std::string_view(" similar lines left out)"), report}) {
    for (auto pos = full.find(marker); pos != std::string::npos; pos = full.find(marker, pos + 1)) {
      auto start = pos;
      while (start > 0 && std::isdigit(static_cast<unsigned char>(full[start - 1]))) --start;
      told += std::stoull(full.substr(start, pos - start));
    }
  }
  EXPECT_EQ(lines + told, 20u) << full;

  // Connections open to the proxy count with the admin listener's own.
  std::vector<std::unique_ptr<HttpClient>> idle;
  for (int i = 0; i < 3; ++i) {
    idle.push_back(std::make_unique<HttpClient>(proxy));
    idle.back()->connect();
  }
  HttpClient admin(logged_port(*server, "admin endpoints on 127.0.0.1:"));
  std::optional<double> open;
  EXPECT_TRUE(eventually([&] {
    open = metric_value(admin.get("/metrics").body, "ratekeeper_http_connections_open");
    return open == 4.0;
  })) << open.value_or(-1);
}

// The store's password never reaches the log: the url is logged with "***" in its place.
// A Redis that cannot be reached leaves log lines, with the reason: once at start (not only
// /readyz), and for the checks the failure policy answers (rate-limited).
TEST(HttpLifecycle, AnUnreachableStoreIsLoggedAtStartAndForEachPolicyAnswer) {
  int closed_port = 0;
  { closed_port = RedisServer().port(); }  // stopped: nothing listens there any more
  ServerProcess::Options o;
  o.config_yaml = R"(store: {connect_timeout: 200ms}
rules:
  - name: api
    match: {path: /api/data}
    on_store_error: allow
    limits: [{capacity: 5, refill_rate: 1}]
)";
  o.store_url = fmt::format("redis://127.0.0.1:{}", closed_port);
  ServerProcess server(std::move(o));
  const auto start_line = fmt::format("store redis://127.0.0.1:{} not reachable", closed_port);
  ASSERT_TRUE(wait_for_output(server, start_line, std::chrono::seconds(20))) << server.log();
  EXPECT_NE(server.log().find("checks are answered by the failure policy"), std::string::npos);

  HttpClient client(server.port());
  for (int i = 0; i < 20; ++i) {
    const auto r = client.get("/api/data");
    EXPECT_EQ(r.status, 200);
    // Admitted by the policy: the limit is stated, no remaining quota is claimed.
    EXPECT_TRUE(r.header("RateLimit-Policy").has_value());
    EXPECT_FALSE(r.header("RateLimit").has_value()) << *r.header("RateLimit");
  }
  const auto log = server.log();
  EXPECT_NE(log.find("answered by the failure policy: api (allow)"), std::string::npos) << log;
  std::size_t lines = 0;
  for (auto pos = log.find("answered by the failure policy: api");
       pos != std::string::npos; pos = log.find("answered by the failure policy: api", pos + 1)) {
    ++lines;
  }
  EXPECT_LT(lines, 20u) << log;  // bounded, not one per request
}

TEST(HttpLifecycle, TheStorePasswordIsNotLogged) {
  RedisServer::Options ro;
  ro.args = {"--requirepass", "pw-not-for-logs"};
  ro.password = "pw-not-for-logs";
  RedisServer redis(ro);
  ServerProcess::Options o;
  o.config_yaml = "rules: []\n";
  o.store_url = fmt::format("redis://default:pw-not-for-logs@127.0.0.1:{}", redis.port());
  ServerProcess server(std::move(o));
  HttpClient client(server.port());
  ASSERT_EQ(client.get("/healthz").status, 200);
  server.signal(SIGTERM);
  ASSERT_TRUE(server.wait(std::chrono::seconds(20)).has_value());
  const std::string log = server.output() + server.errors();
  EXPECT_NE(log.find(fmt::format("redis://default:***@127.0.0.1:{}", redis.port())), std::string::npos) << log;
  EXPECT_EQ(log.find("pw-not-for-logs"), std::string::npos) << log;
}

// logging.format: json: every line of the server's own log (stderr) is one JSON object with
// its time (with the zone's offset), level and message; the decision log is on stdout, apart.
TEST(HttpLifecycle, JsonLogLinesOnStderrAndTheDecisionLogOnStdout) {
  ServerProcess::Options o;
  o.config_yaml = R"(
logging: {format: json, decisions: {enabled: true}}
rules:
  - name: api
    match: {path: /api/data}
    limits: [{capacity: 1, refill_rate: 0.001}]
)";
  ServerProcess server(std::move(o));
  HttpClient client(server.port());
  EXPECT_EQ(client.get("/api/data").status, 200);
  EXPECT_EQ(client.get("/api/data").status, 429);
  server.signal(SIGTERM);
  ASSERT_EQ(server.wait(std::chrono::seconds(20)), 0) << server.log();

  std::istringstream log(server.log());
  int lines = 0;
  bool listening = false;
  for (std::string line; std::getline(log, line);) {
    ++lines;
    nlohmann::json j;
    ASSERT_NO_THROW(j = nlohmann::json::parse(line)) << line;
    ASSERT_TRUE(j.contains("time") && j.contains("level") && j.contains("message")) << line;
    EXPECT_FALSE(j.contains("rule")) << "a decision in the server's log: " << line;
    const std::string time = j.at("time");
    EXPECT_EQ(time.size(), std::string_view("2026-12-05T04:11:13.123+00:00").size()) << time;
    EXPECT_TRUE(time[time.size() - 6] == '+' || time[time.size() - 6] == '-') << time;
    listening = listening || j.at("message").get<std::string>().starts_with("listening on ");
  }
  EXPECT_GT(lines, 2);
  EXPECT_TRUE(listening) << server.log();

  std::istringstream decisions(server.output());
  int denied = 0;
  for (std::string line; std::getline(decisions, line);) {
    const auto j = nlohmann::json::parse(line);  // only decision lines on stdout
    EXPECT_EQ(j.at("rule"), "api") << line;
    denied += j.at("allowed") == false ? 1 : 0;
  }
  EXPECT_EQ(denied, 1) << server.output();
}

}  // namespace
}  // namespace ratekeeper::testing
