// End to end: live reload of `ratekeeper serve`'s configuration on a real redis-server.
// SIGHUP and POST /admin/reload re-read the file; a valid one is swapped in between requests
// (a load over keep-alive connections sees no failure while it happens), rules keep their
// counts in the store when their names are unchanged, an invalid file keeps the running
// configuration and is counted as a failure, and what needs a restart is logged and kept.
// Also `ratekeeper check-config`.

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "support/http_client.hpp"
#include "support/redis_server.hpp"
#include "support/test_upstream.hpp"

namespace ratekeeper::testing {
namespace {

using Clock = std::chrono::steady_clock;
using json = nlohmann::json;

// Replaces the file at once (as a configuration management tool would): a reload reads the
// old text or the new, never a part of it.
void rewrite(const std::filesystem::path& path, const std::string& text) {
  const auto staged = path.string() + ".next";
  std::ofstream(staged, std::ios::binary | std::ios::trunc) << text;
  std::filesystem::rename(staged, path);
}

double metric(int port, std::string_view series) {
  const auto response = http_get(port, "/metrics");
  EXPECT_EQ(response.status, 200);
  return metric_value(response.body, series).value_or(-1);
}

double reloads(int port, std::string_view result) {
  return metric(port, fmt::format("ratekeeper_config_reloads_total{{result=\"{}\"}}", result));
}

// Waits until the reload counter `result` reaches `count` (a SIGHUP's reload runs after the
// signal is delivered); false at the deadline.
bool wait_for_reloads(int port, std::string_view result, double count) {
  const auto deadline = Clock::now() + std::chrono::seconds(20);
  while (Clock::now() < deadline) {
    if (reloads(port, result) >= count) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

HttpResponse check(HttpClient& client, std::string_view rule, std::string_view identity) {
  return client.post("/v1/check", json{{"rule", rule}, {"identity", identity}}.dump());
}

std::string redis_rule(const RedisServer& redis, std::string_view rules) {
  return fmt::format("store: {{url: {}, command_timeout: 2s}}\nrules:\n{}", redis.url(), rules);
}

// The load's rules: one it checks by name, and a shadow rule over the requests it describes
// (a shadow check may still be in the store when its answer has gone and a reload has let
// its configuration go).
constexpr std::string_view kLoadRule = R"(  - name: load
    limits: [{capacity: 1000000, refill_rate: 1000}]
  - name: watch
    match: {path_prefix: /watched}
    shadow: true
    limits: [{capacity: 1000000, refill_rate: 1000}]
)";

TEST(ConfigReload, UnderLoadNoRequestFailsAndTheNewRulesApply) {
  RedisServer redis;
  const auto rules = [&](int counted_limit, bool removed, bool added, int variant) {
    std::string text = std::string(kLoadRule) + fmt::format(R"(  - name: counted
    limits: [{{algorithm: sliding_window_log, limit: {}, window: 1h}}]
  - name: churn
    limits: [{{algorithm: sliding_window_log, limit: {}, window: 1h}}]
)",
                                                             counted_limit, 100 + variant);
    if (removed) {
      text += "  - name: removed\n    limits: [{algorithm: sliding_window_log, limit: 10, window: 1h}]\n";
    }
    if (added) {
      text += "  - name: added\n    limits: [{algorithm: sliding_window_log, limit: 10, window: 1h}]\n";
    }
    return redis_rule(redis, text);
  };
  const auto process = serve(rules(3, true, false, 0));
  ServerProcess& server = *process;
  const int port = server.port();

  // Before: `counted` allows 3 of an identity; `removed` exists, `added` does not.
  HttpClient client(port);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(check(client, "counted", "user:x").status, 200) << i;
  ASSERT_EQ(check(client, "counted", "user:x").status, 429);
  ASSERT_EQ(check(client, "removed", "user:x").status, 200);
  ASSERT_EQ(check(client, "added", "user:x").status, 400);

  // The load: threads over keep-alive connections, each answer 200 (or 429), none failing.
  constexpr int kThreads = 4;
  std::atomic<bool> stop{false};
  std::atomic<int> requests{0};
  std::atomic<int> failures{0};
  std::vector<std::string> failure_text(kThreads);
  std::vector<std::thread> load;
  for (int t = 0; t < kThreads; ++t) {
    load.emplace_back([&, t] {
      try {
        HttpClient c(port);
        int i = 0;
        while (!stop.load()) {
          const int kind = i++ % 3;
          const auto r =
              kind == 0   ? check(c, "load", fmt::format("user:{}", t))
              : kind == 1 ? c.post("/v1/check", R"({"request":{"method":"GET","path":"/watched"}})")
                          : c.get("/healthz");
          if (r.status != 200 && r.status != 429) {
            failures.fetch_add(1);
            failure_text[t] = fmt::format("{} {}", r.status, r.body);
          }
          requests.fetch_add(1);
        }
      } catch (const std::exception& e) {
        failures.fetch_add(1);
        failure_text[t] = e.what();
      }
    });
  }
  while (requests.load() < 50) std::this_thread::yield();

  // Reloads while it runs: by SIGHUP and by POST /admin/reload, in turn.
  constexpr int kReloads = 10;
  const int before = requests.load();
  for (int i = 1; i <= kReloads; ++i) {
    rewrite(server.config_path(), rules(3, true, false, i));
    if (i % 2 == 1) {
      server.signal(SIGHUP);
    } else {
      const auto r = http_post(port, "/admin/reload", "");
      ASSERT_EQ(r.status, 200) << r.body;
    }
    ASSERT_TRUE(wait_for_reloads(port, "success", i)) << server.output();
    const int at = requests.load();
    while (requests.load() < at + 200) std::this_thread::yield();  // requests between reloads
  }
  // The last: `counted` raised from 3 to 6, `added` added, `removed` removed.
  rewrite(server.config_path(), rules(6, false, true, 0));
  const auto last = http_post(port, "/admin/reload", "");
  ASSERT_EQ(last.status, 200) << last.body;
  const int at = requests.load();
  while (requests.load() < at + 20) std::this_thread::yield();
  stop = true;
  for (auto& t : load) t.join();

  EXPECT_EQ(failures.load(), 0) << fmt::format("{}", fmt::join(failure_text, " | "));
  EXPECT_GT(requests.load() - before, kReloads * 200);
  EXPECT_EQ(reloads(port, "success"), kReloads + 1);
  EXPECT_EQ(reloads(port, "failure"), 0);
  EXPECT_GT(metric(port, R"(ratekeeper_decisions_total{rule="watch",outcome="allowed"})"), 0);
  const auto body = json::parse(last.body);
  EXPECT_EQ(body["rules"], 5);
  EXPECT_EQ(body["added"], json::array({"added"}));
  EXPECT_EQ(body["removed"], json::array({"removed"}));
  EXPECT_EQ(body["needs_restart"], json::array());

  // After: the 3 units taken stay taken, 3 more of the new 6 are allowed.
  for (int i = 0; i < 3; ++i) EXPECT_EQ(check(client, "counted", "user:x").status, 200) << i;
  EXPECT_EQ(check(client, "counted", "user:x").status, 429);
  EXPECT_EQ(check(client, "added", "user:x").status, 200);
  const auto gone = check(client, "removed", "user:x");
  EXPECT_EQ(gone.status, 400);
  EXPECT_NE(gone.body.find("unknown rule `removed`"), std::string::npos) << gone.body;
}

TEST(ConfigReload, AnUnchangedRuleKeepsItsCountAndMetrics) {
  RedisServer redis;
  const auto config = [&](int other_limit) {
    return redis_rule(redis, fmt::format(R"(  - name: kept
    match: {{path: /api/kept}}
    limits: [{{algorithm: sliding_window_log, limit: 5, window: 1h}}]
  - name: other
    match: {{path: /api/other}}
    limits: [{{algorithm: token_bucket, capacity: {}, refill_rate: 0.001}}]
)",
                                         other_limit)) +
           "demo_api: true\n";  // in the rewritten file too
  };
  const auto process = serve(config(2));
  ServerProcess& server = *process;
  const int port = server.port();
  HttpClient client(port);
  for (int i = 0; i < 2; ++i) ASSERT_EQ(check(client, "kept", "user:k").status, 200);
  // A denial the denial cache holds until the reload.
  for (int i = 0; i < 2; ++i) ASSERT_EQ(check(client, "other", "user:k").status, 200);
  ASSERT_EQ(check(client, "other", "user:k").status, 429);
  ASSERT_GE(metric(port, "ratekeeper_denial_cache_entries"), 1);
  // Requests the middleware answered (no rule applies to them: unmatched).
  for (int i = 0; i < 2; ++i) ASSERT_EQ(client.get("/api/data").status, 200);
  ASSERT_EQ(metric(port, R"(ratekeeper_http_requests_total{result="unmatched"})"), 2);

  rewrite(server.config_path(), config(3));
  const auto r = http_post(port, "/admin/reload", "");
  ASSERT_EQ(r.status, 200) << r.body;

  const auto kept = check(client, "kept", "user:k");
  ASSERT_EQ(kept.status, 200);
  EXPECT_EQ(json::parse(kept.body)["remaining"], 2);  // 5 - 3: the count went on
  EXPECT_EQ(metric(port, R"(ratekeeper_decisions_total{rule="kept",outcome="allowed"})"), 3);
  EXPECT_EQ(metric(port, R"(ratekeeper_decisions_total{rule="other",outcome="denied"})"), 1);
  EXPECT_EQ(metric(port, "ratekeeper_denial_cache_entries"), 0);
  ASSERT_EQ(client.get("/api/data").status, 200);
  EXPECT_EQ(metric(port, R"(ratekeeper_http_requests_total{result="unmatched"})"), 3);
  // `other` now holds 3: the third unit is admitted.
  EXPECT_EQ(check(client, "other", "user:k").status, 200);
}

TEST(ConfigReload, AnInvalidFileKeepsTheRunningConfigurationAndIsCounted) {
  RedisServer redis;
  const auto config = [&](std::string_view limit) {
    return redis_rule(redis, fmt::format(R"(  - name: api
    limits: [{{algorithm: sliding_window_log, limit: {}, window: 1h}}]
)",
                                         limit));
  };
  const auto process = serve(config("2"));
  ServerProcess& server = *process;
  const int port = server.port();
  HttpClient client(port);
  ASSERT_EQ(check(client, "api", "user:i").status, 200);
  ASSERT_EQ(metric(port, "ratekeeper_config_last_reload_successful"), 1);

  rewrite(server.config_path(), config("two"));
  const auto refused = http_post(port, "/admin/reload", "");
  EXPECT_EQ(refused.status, 422) << refused.body;
  const auto error = json::parse(refused.body)["error"].get<std::string>();
  EXPECT_NE(error.find(server.config_path().string()), std::string::npos) << error;
  EXPECT_NE(error.find("rules[0].limits[0].limit"), std::string::npos) << error;
  EXPECT_EQ(reloads(port, "failure"), 1);
  EXPECT_EQ(reloads(port, "success"), 0);
  EXPECT_EQ(metric(port, "ratekeeper_config_last_reload_successful"), 0);
  const auto log = server.output() + server.errors();
  EXPECT_NE(log.find("configuration reload failed"), std::string::npos) << log;
  EXPECT_NE(log.find("rules[0].limits[0].limit"), std::string::npos) << log;

  server.signal(SIGHUP);  // the same file, by signal
  ASSERT_TRUE(wait_for_reloads(port, "failure", 2)) << server.output();

  // The running configuration decides: limit 2.
  EXPECT_EQ(check(client, "api", "user:i").status, 200);
  EXPECT_EQ(check(client, "api", "user:i").status, 429);

  rewrite(server.config_path(), config("4"));
  const auto accepted = http_post(port, "/admin/reload", "");
  ASSERT_EQ(accepted.status, 200) << accepted.body;
  EXPECT_EQ(reloads(port, "success"), 1);
  EXPECT_EQ(reloads(port, "failure"), 2);
  EXPECT_EQ(metric(port, "ratekeeper_config_last_reload_successful"), 1);
  EXPECT_EQ(check(client, "api", "user:i").status, 200);
  EXPECT_EQ(check(client, "api", "user:i").status, 200);
  EXPECT_EQ(check(client, "api", "user:i").status, 429);
}

// A FIFO at the configuration path (or any file that is not a regular one) is refused at once:
// by a reload (counted, the running configuration kept, later reloads and SIGTERM unaffected),
// by serve at start and by check-config. Opening it never waits for a writer.
TEST(ConfigReload, AFifoAtTheConfigurationPathIsRefusedAtOnce) {
  const std::string config = "rules:\n  - name: api\n    limits: [{algorithm: sliding_window_log, limit: 2, window: 1h}]\n";
  const auto process = serve(config);
  ServerProcess& server = *process;
  const int port = server.port();
  const auto fifo = server.config_path().string() + ".fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::filesystem::rename(fifo, server.config_path());

  for (int i = 1; i <= 2; ++i) {
    const auto refused = http_post(port, "/admin/reload", "");
    EXPECT_EQ(refused.status, 422) << refused.body;
    EXPECT_NE(refused.body.find("not a regular file"), std::string::npos) << refused.body;
    EXPECT_EQ(reloads(port, "failure"), i);
  }
  server.signal(SIGHUP);
  ASSERT_TRUE(wait_for_reloads(port, "failure", 3)) << server.output();

  const auto checked = run_ratekeeper({"check-config", server.config_path().string()});
  EXPECT_EQ(checked.exit_code, 2);
  EXPECT_NE(checked.errors.find("not a regular file"), std::string::npos) << checked.errors;
  const auto started = run_ratekeeper({"serve", "--config", server.config_path().string(),
                                       "--listen", "127.0.0.1:0"});
  EXPECT_EQ(started.exit_code, 2);
  EXPECT_NE(started.errors.find("not a regular file"), std::string::npos) << started.errors;

  server.signal(SIGTERM);
  const auto status = server.wait(std::chrono::seconds(20));
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ(*status, 0) << server.errors();
}

TEST(ConfigReload, WhatNeedsARestartIsLoggedAndKept) {
  RedisServer first;
  RedisServer second;
  const auto config = [](const RedisServer& redis, int header_bytes, int limit) {
    return fmt::format(R"(store: {{url: {}, command_timeout: 2s}}
http: {{max_header_bytes: {}}}
rules:
  - name: api
    limits: [{{algorithm: sliding_window_log, limit: {}, window: 1h}}]
)",
                       redis.url(), header_bytes, limit);
  };
  const auto process = serve(config(first, 8192, 3));
  ServerProcess& server = *process;
  const int port = server.port();
  HttpClient client(port);
  ASSERT_EQ(check(client, "api", "user:r").status, 200);

  rewrite(server.config_path(), config(second, 16384, 4));
  const auto r = http_post(port, "/admin/reload", "");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json::parse(r.body)["needs_restart"], json::array({"store", "http"}));
  const auto log = server.output() + server.errors();
  EXPECT_NE(log.find("`store` changed"), std::string::npos) << log;
  EXPECT_NE(log.find("`http` changed"), std::string::npos) << log;

  // The rest applied (limit 4), counted on in the first store: 1 + 3 = 4.
  for (int i = 0; i < 3; ++i) EXPECT_EQ(check(client, "api", "user:r").status, 200) << i;
  EXPECT_EQ(check(client, "api", "user:r").status, 429);
  EXPECT_EQ(second.command({"DBSIZE"}), "0");
  EXPECT_NE(first.command({"DBSIZE"}), "0");
}

TEST(ConfigReload, SighupNoLongerEndsTheProcess) {
  const auto process = serve("rules:\n  - name: api\n    limits: [{capacity: 5, refill_rate: 1}]\n");
  ServerProcess& server = *process;
  server.signal(SIGHUP);
  ASSERT_TRUE(wait_for_reloads(server.port(), "success", 1)) << server.output();
  server.signal(SIGHUP);
  ASSERT_TRUE(wait_for_reloads(server.port(), "success", 2)) << server.output();
  EXPECT_FALSE(server.wait(std::chrono::milliseconds(0)).has_value());
  EXPECT_EQ(http_get(server.port(), "/healthz").status, 200);
}

TEST(ConfigReload, OnlyPostReloads) {
  const auto process = serve("rules:\n  - name: api\n    limits: [{capacity: 5, refill_rate: 1}]\n");
  ServerProcess& server = *process;
  const auto r = http_get(server.port(), "/admin/reload");
  EXPECT_EQ(r.status, 405);
  EXPECT_EQ(r.header("Allow"), "POST");
  EXPECT_EQ(reloads(server.port(), "success"), 0);
}

TEST(ConfigReload, MetricsCarryTheBuildInfo) {
  const auto process = serve("rules:\n  - name: api\n    limits: [{capacity: 5, refill_rate: 1}]\n");
  ServerProcess& server = *process;
  const auto text = http_get(server.port(), "/metrics").body;
  EXPECT_NE(text.find("# TYPE ratekeeper_build_info gauge"), std::string::npos) << text;
  EXPECT_NE(text.find("ratekeeper_build_info{version=\""), std::string::npos) << text;
  const auto version = run_ratekeeper({"--version"}).output;  // "ratekeeper X.Y.Z"
  ASSERT_GT(version.size(), 11u);
  const auto number = version.substr(11, version.find_first_of("\r\n") - 11);
  EXPECT_NE(text.find(fmt::format("ratekeeper_build_info{{version=\"{}\"", number)),
            std::string::npos)
      << text;
  EXPECT_GT(metric(server.port(), "ratekeeper_config_last_reload_success_timestamp_seconds"), 0);
}

// With an upstream the proxy decides by the configuration of the moment too; the own
// endpoints, POST /admin/reload among them, are on the admin listener.
TEST(ConfigReload, TheProxyFollowsAReload) {
  TestUpstream upstream;
  const auto config = [&](int limit) {
    return fmt::format(R"(upstream: {{url: http://127.0.0.1:{}}}
admin: {{listen: 127.0.0.1:0}}
rules:
  - name: orders
    match: {{path: /orders}}
    limits: [{{algorithm: sliding_window_log, limit: {}, window: 1h}}]
)",
                       upstream.port(), limit);
  };
  const auto process = serve(config(2));
  ServerProcess& server = *process;
  const std::string out = server.log();
  constexpr std::string_view kAdmin = "admin endpoints on 127.0.0.1:";
  const auto at = out.find(kAdmin);
  ASSERT_NE(at, std::string::npos) << out;
  const int admin = std::stoi(out.substr(at + kAdmin.size()));
  // The proxy's own port (the log line names the upstream's after it).
  constexpr std::string_view kProxy = "listening on 127.0.0.1:";
  const auto proxy_at = out.find(kProxy);
  ASSERT_NE(proxy_at, std::string::npos) << out;
  const int proxy = std::stoi(out.substr(proxy_at + kProxy.size()));

  HttpClient client(proxy);
  EXPECT_EQ(client.get("/orders").status, 200);
  EXPECT_EQ(client.get("/orders").status, 200);
  EXPECT_EQ(client.get("/orders").status, 429);

  rewrite(server.config_path(), config(4));
  server.signal(SIGHUP);
  ASSERT_TRUE(wait_for_reloads(admin, "success", 1)) << server.output();
  EXPECT_EQ(client.get("/orders").status, 200);
  EXPECT_EQ(client.get("/orders").status, 200);
  EXPECT_EQ(client.get("/orders").status, 429);

  rewrite(server.config_path(), config(5));
  const auto r = http_post(admin, "/admin/reload", "");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(client.get("/orders").status, 200);
  EXPECT_EQ(client.get("/orders").status, 429);
  // The proxy's listener serves no own endpoint: the request goes to the upstream.
  EXPECT_EQ(http_post(proxy, "/admin/reload", "").status, 200);
  EXPECT_EQ(reloads(admin, "success"), 2);
  EXPECT_EQ(upstream.request_count(), 6u);
}

TEST(CheckConfig, AValidFileIsSummarised) {
  const auto path = write_temp_file("valid.yaml", R"(listen: 127.0.0.1:8088
rules:
  - name: per_ip
    limits: [{algorithm: sliding_window_log, limit: 10, window: 1m}]
  - name: per_user
    identity: {type: header, header: X-User-ID}
    limits: [{capacity: 20, refill_rate: 2}]
  - name: members
    identity: {type: header, header: X-User-ID}
    limits: [{algorithm: concurrency, limit: 4, slot_ttl: 30s}]
    parent:
      identity: {type: header, header: X-Org-ID, prefix: org}
      limits: [{algorithm: fixed_window, limit: 100, window: 1m}]
)");
  const auto result = run_ratekeeper({"check-config", path.string()});
  EXPECT_EQ(result.exit_code, 0) << result.errors;
  EXPECT_NE(result.output.find("    limits: concurrency 4 in flight, slot_ttl 30s"), std::string::npos)
      << result.output;
  EXPECT_NE(result.output.find("    parent: identity header (X-Org-ID), limits: fixed_window 100 per 1m"),
            std::string::npos)
      << result.output;
  EXPECT_NE(result.output.find("configuration is valid"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("rules: 3"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("per_ip"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("sliding_window_log 10 per 1m"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("per_user"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("listen: 127.0.0.1:8088"), std::string::npos) << result.output;
}

TEST(CheckConfig, AnInvalidFileNamesTheFileAndField) {
  const auto path = write_temp_file("invalid.yaml", R"(rules:
  - name: api
    limits: [{capacity: 20, refill_rat: 2}]
)");
  const auto result = run_ratekeeper({"check-config", path.string()});
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_NE(result.errors.find(path.string()), std::string::npos) << result.errors;
  EXPECT_NE(result.errors.find("rules[0].limits[0]"), std::string::npos) << result.errors;
  EXPECT_EQ(result.output.find("configuration is valid"), std::string::npos) << result.output;
}

// check-config refuses every store url that `serve` refuses, with the same reason: both load
// the file through one reader, which checks the store as opening it would.
TEST(CheckConfig, RefusesTheStoreUrlsServeRefuses) {
  const std::vector<std::pair<std::string, std::string>> urls = {
      {"redis:/127.0.0.1:6379", "unsupported scheme"},
      {"redis+tls://127.0.0.1:6379", "unsupported scheme"},
      {"redis://127.0.0.1:6379x", "port"},
      {"redis-cluster://127.0.0.1:70000", "port"},
  };
  for (const auto& [url, reason] : urls) {
    SCOPED_TRACE(url);
    const auto path = write_temp_file("store-url.yaml", fmt::format(R"(store: {{url: "{}"}}
rules:
  - name: api
    limits: [{{capacity: 20, refill_rate: 2}}]
)",
                                                                     url));
    const auto checked = run_ratekeeper({"check-config", path.string()});
    EXPECT_EQ(checked.exit_code, 2) << checked.output;
    EXPECT_NE(checked.errors.find("store.url"), std::string::npos) << checked.errors;
    EXPECT_NE(checked.errors.find(reason), std::string::npos) << checked.errors;
    const auto served = run_ratekeeper({"serve", "--config", path.string()});
    EXPECT_NE(served.exit_code, 0) << served.output;
    EXPECT_NE(served.errors.find(reason), std::string::npos) << served.errors;
  }
}

TEST(CheckConfig, AMissingFileIsSaidSo) {
  const auto path = fresh_dir("check-config") / "absent.yaml";
  const auto result = run_ratekeeper({"check-config", path.string()});
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_NE(result.errors.find(path.string()), std::string::npos) << result.errors;
  EXPECT_NE(result.errors.find("cannot open"), std::string::npos) << result.errors;
}

TEST(CheckConfig, TheGrpcServiceDomainFilesAreChecked) {
  const auto dir = fresh_dir("check-config-grpc");
  std::filesystem::create_directories(dir / "domains");
  std::ofstream(dir / "domains" / "edge.yaml") << R"(domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: fortnight, requests_per_unit: 10}
)";
  std::ofstream(dir / "ratekeeper.yaml") << "grpc:\n  listen: 127.0.0.1:0\n  config: domains\n";
  const auto invalid = run_ratekeeper({"check-config", (dir / "ratekeeper.yaml").string()});
  EXPECT_EQ(invalid.exit_code, 2);
  EXPECT_NE(invalid.errors.find("edge.yaml"), std::string::npos) << invalid.errors;
  EXPECT_NE(invalid.errors.find("descriptors[0].rate_limit.unit"), std::string::npos)
      << invalid.errors;

  std::ofstream(dir / "domains" / "edge.yaml", std::ios::trunc) << R"(domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 10}
)";
  const auto valid = run_ratekeeper({"check-config", (dir / "ratekeeper.yaml").string()});
  EXPECT_EQ(valid.exit_code, 0) << valid.errors;
  EXPECT_NE(valid.output.find("1 domain(s)"), std::string::npos) << valid.output;
  EXPECT_NE(valid.output.find("edge"), std::string::npos) << valid.output;
}

}  // namespace
}  // namespace ratekeeper::testing
