// Live reload's parts (server/reload.hpp) driven directly: which changed fields need a restart,
// the Reloader's swap, outcome and counters, POST /admin/reload's method and peer checks, and
// metrics that continue across limiters built from successive configurations.

#include "reload.hpp"

#include <gtest/gtest.h>

#include <future>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "config.hpp"
#include "ratekeeper/core/metrics_writer.hpp"
#include "ratekeeper/limiter/limiter.hpp"
#include "ratekeeper/store/memory_store.hpp"
#include "support/http_client.hpp"

namespace ratekeeper::server {
namespace {

using json = nlohmann::json;

constexpr std::string_view kRules = R"(
rules:
  - name: api
    limits: [{algorithm: sliding_window_log, limit: 3, window: 1h}]
)";

Generation generation(std::string_view yaml) {
  Generation g;
  g.config = parse_config(yaml);
  return g;
}

TEST(RestartFields, NoneWhenOnlyRulesChange) {
  const auto a = generation(kRules);
  const auto b = generation(R"(
rules:
  - name: api
    limits: [{algorithm: sliding_window_log, limit: 30, window: 1h}]
  - name: more
    limits: [{capacity: 1, refill_rate: 1}]
)");
  EXPECT_TRUE(restart_fields(a, b).empty());
}

TEST(RestartFields, ListenersStoreAndServerLimitsNeedARestart) {
  const auto a = generation("listen: 127.0.0.1:8080\nthreads: 2\nstore: {url: redis://127.0.0.1:6379}\n");
  const auto b = generation(
      "listen: 127.0.0.1:8081\nthreads: 3\nstore: {url: redis://127.0.0.1:6380}\n"
      "http: {max_body_bytes: 10}\nupstream: {url: http://127.0.0.1:9000}\n");
  EXPECT_EQ(restart_fields(a, b),
            (std::vector<std::string>{"listen", "threads", "store", "http", "upstream"}));
}

TEST(RestartFields, AnyStoreFieldAsWritten) {
  auto a = generation("store: {url: memory://}\n");
  auto b = generation("store: {url: memory://}\n");
  a.store_section = "url: memory://";
  b.store_section = "url: memory://\nmax_keys: 10";
  EXPECT_EQ(restart_fields(a, b), std::vector<std::string>{"store"});
}

// Every restart-only field, changed alone, is reported by its name; the fields a reload applies
// (the gRPC service's domain directory, headers and message bound) are not.
TEST(RestartFields, EachRestartOnlyFieldAloneIsReported) {
  struct Field {
    std::string yaml;  // one line of the configuration, replacing the base's line of that key
    std::string reported;
  };
  const std::vector<std::pair<std::string, std::string>> base = {
      {"listen", "listen: 127.0.0.1:8080"},
      {"threads", "threads: 2"},
      {"store", "store: {url: memory://}"},
      {"http", "http: {max_header_bytes: 8192, max_body_bytes: 1024, read_timeout: 30s, max_pipelined: 16}"},
      {"upstream", "upstream: {url: http://127.0.0.1:9000, connect_timeout: 5s, timeout: 60s, "
                   "max_idle_connections: 32, buffer_bytes: 65536, lowercase_path: false}"},
      {"admin", "admin: {listen: 127.0.0.1:9090}"},
      {"grpc", "grpc: {listen: 127.0.0.1:8081, config: domains, threads: 1, response_headers: true, "
               "max_message_bytes: 65536}"},
  };
  const auto yaml = [&](const std::string& key, const std::string& line) {
    std::string out;
    for (const auto& [k, l] : base) out += (k == key ? line : l) + "\n";
    return out + std::string(kRules);
  };
  const std::vector<std::pair<std::string, Field>> changes = {
      {"listen", {"listen: 127.0.0.1:8082", "listen"}},
      {"threads", {"threads: 3", "threads"}},
      {"store", {"store: {url: memory://, max_keys: 10}", "store"}},
      {"http", {"http: {max_header_bytes: 4096, max_body_bytes: 1024, read_timeout: 30s, max_pipelined: 16}", "http"}},
      {"http", {"http: {max_header_bytes: 8192, max_body_bytes: 10, read_timeout: 30s, max_pipelined: 16}", "http"}},
      {"http", {"http: {max_header_bytes: 8192, max_body_bytes: 1024, read_timeout: 1s, max_pipelined: 16}", "http"}},
      {"http", {"http: {max_header_bytes: 8192, max_body_bytes: 1024, read_timeout: 30s, max_pipelined: 2}", "http"}},
      {"upstream", {"upstream: {url: http://127.0.0.1:9001, connect_timeout: 5s, timeout: 60s, "
                    "max_idle_connections: 32, buffer_bytes: 65536, lowercase_path: false}", "upstream"}},
      {"upstream", {"upstream: {url: http://127.0.0.1:9000, connect_timeout: 1s, timeout: 60s, "
                    "max_idle_connections: 32, buffer_bytes: 65536, lowercase_path: false}", "upstream"}},
      {"upstream", {"upstream: {url: http://127.0.0.1:9000, connect_timeout: 5s, timeout: 1s, "
                    "max_idle_connections: 32, buffer_bytes: 65536, lowercase_path: false}", "upstream"}},
      {"upstream", {"upstream: {url: http://127.0.0.1:9000, connect_timeout: 5s, timeout: 60s, "
                    "max_idle_connections: 1, buffer_bytes: 65536, lowercase_path: false}", "upstream"}},
      {"upstream", {"upstream: {url: http://127.0.0.1:9000, connect_timeout: 5s, timeout: 60s, "
                    "max_idle_connections: 32, buffer_bytes: 4096, lowercase_path: false}", "upstream"}},
      {"upstream", {"upstream: {url: http://127.0.0.1:9000, connect_timeout: 5s, timeout: 60s, "
                    "max_idle_connections: 32, buffer_bytes: 65536, lowercase_path: true}", "upstream"}},
      {"admin", {"admin: {listen: 127.0.0.1:9091}", "admin"}},
      {"grpc", {"grpc: {listen: 127.0.0.1:8083, config: domains, threads: 1, response_headers: true, "
                "max_message_bytes: 65536}", "grpc.listen"}},
      {"grpc", {"grpc: {listen: 127.0.0.1:8081, config: domains, threads: 2, response_headers: true, "
                "max_message_bytes: 65536}", "grpc.threads"}},
      {"grpc", {"grpc: {listen: 127.0.0.1:8081, config: domains, threads: 1, response_headers: true, "
                "max_message_bytes: 65536, handshake_timeout: 1s}", "grpc.handshake_timeout"}},
      {"http", {"http: {max_header_bytes: 8192, max_body_bytes: 1024, read_timeout: 30s, max_pipelined: 16, "
                "escaped_slashes: keep}", "http"}},
      {"http", {"http: {max_header_bytes: 8192, max_body_bytes: 1024, read_timeout: 30s, max_pipelined: 16, "
                "request_timeout: 5s}", "http"}},
      {"http", {"http: {max_header_bytes: 8192, max_body_bytes: 1024, read_timeout: 30s, max_pipelined: 16, "
                "ambiguous_paths: keep}", "http"}},
      {"grpc", {"", "grpc"}},
  };
  const auto running = generation(yaml("", ""));
  for (const auto& [key, change] : changes) {
    SCOPED_TRACE(change.yaml.empty() ? "no " + key : change.yaml);
    auto next = generation(yaml(key, change.yaml));
    if (key == "store") next.store_section = "changed";  // serve keeps the section as written
    EXPECT_EQ(restart_fields(running, next), std::vector<std::string>{change.reported});
  }
  for (const std::string line :
       {"grpc: {listen: 127.0.0.1:8081, config: other, threads: 1, response_headers: true, max_message_bytes: 65536}",
        "grpc: {listen: 127.0.0.1:8081, config: domains, threads: 1, response_headers: false, max_message_bytes: 65536}",
        "grpc: {listen: 127.0.0.1:8081, config: domains, threads: 1, response_headers: true, max_message_bytes: 4096}"}) {
    SCOPED_TRACE(line);
    EXPECT_TRUE(restart_fields(running, generation(yaml("grpc", line))).empty());
  }
}

// A Reloader over generations holding only a configuration; `next` is what the build gives.
struct ReloaderFixture : ::testing::Test {
  ReloaderFixture() : current(std::make_shared<Generation>(generation(kRules))) {}

  ReloadOutcome reload() {
    std::promise<ReloadOutcome> promise;
    reloader->request([&promise](const ReloadOutcome& o) { promise.set_value(o); });
    return promise.get_future().get();
  }

  double metric(std::string_view series) const {
    return testing::metric_value(reloader->metrics_text(), series).value_or(-1);
  }

  SharedValue<Generation> current;
  std::optional<std::string> next_yaml;  // nullopt: the build throws
  int swaps = 0;
  std::unique_ptr<Reloader> reloader = std::make_unique<Reloader>(
      current,
      [this](const Generation&) -> std::shared_ptr<Generation> {
        if (!next_yaml) throw ConfigError("test.yaml", "rules[0].limits", "must be a list");
        return std::make_shared<Generation>(generation(*next_yaml));
      },
      [this](const Generation&) { ++swaps; });
};

TEST_F(ReloaderFixture, AValidFileIsSwappedInAndCounted) {
  const auto before = current.load();
  next_yaml = R"(
rules:
  - name: other
    limits: [{capacity: 1, refill_rate: 1}]
)";
  const auto outcome = reload();
  ASSERT_TRUE(outcome.ok) << outcome.error;
  EXPECT_EQ(outcome.rules, 1u);
  EXPECT_EQ(outcome.added, std::vector<std::string>{"other"});
  EXPECT_EQ(outcome.removed, std::vector<std::string>{"api"});
  EXPECT_NE(current.load(), before);
  EXPECT_EQ(current.load()->config.limiter.rules.at(0).name, "other");
  EXPECT_EQ(swaps, 1);
  EXPECT_EQ(metric(R"(ratekeeper_config_reloads_total{result="success"})"), 1);
  EXPECT_EQ(metric(R"(ratekeeper_config_reloads_total{result="failure"})"), 0);
  EXPECT_EQ(metric("ratekeeper_config_last_reload_successful"), 1);
  const auto body = json::parse(reload_json(outcome));
  EXPECT_EQ(body["status"], "reloaded");
  EXPECT_EQ(body["rules"], 1);
}

TEST_F(ReloaderFixture, AnInvalidFileKeepsTheRunningGenerationAndIsCounted) {
  const auto before = current.load();
  next_yaml.reset();
  const auto outcome = reload();
  EXPECT_FALSE(outcome.ok);
  EXPECT_EQ(outcome.error, "test.yaml: rules[0].limits: must be a list");
  EXPECT_EQ(current.load(), before);
  EXPECT_EQ(swaps, 0);
  EXPECT_EQ(metric(R"(ratekeeper_config_reloads_total{result="success"})"), 0);
  EXPECT_EQ(metric(R"(ratekeeper_config_reloads_total{result="failure"})"), 1);
  EXPECT_EQ(metric("ratekeeper_config_last_reload_successful"), 0);
  EXPECT_EQ(json::parse(reload_json(outcome))["error"], outcome.error);
}

TEST(BuildInfo, IsAGaugeOfOne) {
  MetricsWriter out;
  write_build_info(out);
  const std::string text = out.take();
  EXPECT_NE(text.find("# TYPE ratekeeper_build_info gauge"), std::string::npos);
  EXPECT_NE(text.find("} 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("compiler=\""), std::string::npos) << text;
}

// POST /admin/reload on the routes.
class AdminReloadTest : public ::testing::Test {
 protected:
  AdminReloadTest()
      : config_(parse_config(kRules)),
        limiter_(config_.limiter, store_),
        middleware_(limiter_, config_.middleware),
        api_(limiter_, middleware_, options()) {}

  ApiOptions options() {
    ApiOptions o;
    o.demo_routes = false;
    o.reload = [this](http::Responder respond) {
      ++calls_;
      respond(http::Response{200, "application/json", {}, "{}"});
    };
    return o;
  }

  http::Response send(std::string method, std::string peer) {
    http::Request request;
    request.method = std::move(method);
    request.target = "/admin/reload";
    request.peer_address = std::move(peer);
    std::optional<http::Response> answer;
    api_.handle(std::move(request), [&answer](http::Response r) { answer = std::move(r); });
    return answer.value_or(http::Response{0, {}, {}, {}});
  }

  Config config_;
  store::MemoryStore store_;
  limiter::Limiter limiter_;
  http::Middleware middleware_;
  int calls_ = 0;
  Api api_;
};

TEST_F(AdminReloadTest, FromLoopbackOnly) {
  EXPECT_EQ(send("POST", "127.0.0.1").status, 200);
  EXPECT_EQ(send("POST", "::1").status, 200);
  EXPECT_EQ(send("POST", "127.8.9.10").status, 200);
  EXPECT_EQ(calls_, 3);
  EXPECT_EQ(send("POST", "192.0.2.1").status, 403);
  EXPECT_EQ(send("POST", "2001:db8::1").status, 403);
  EXPECT_EQ(send("POST", "").status, 403);
  EXPECT_EQ(calls_, 3);
}

TEST_F(AdminReloadTest, OtherMethodsAreRefused) {
  const auto r = send("GET", "127.0.0.1");
  EXPECT_EQ(r.status, 405);
  EXPECT_EQ(calls_, 0);
}

TEST(AdminReload, WithoutTheHookTheRouteIsNotThere) {
  const auto config = parse_config(kRules);
  store::MemoryStore store;
  limiter::Limiter limiter(config.limiter, store);
  http::Middleware middleware(limiter, config.middleware);
  ApiOptions options;
  options.demo_routes = false;
  Api api(limiter, middleware, std::move(options));
  http::Request request;
  request.method = "POST";
  request.target = "/admin/reload";
  request.peer_address = "127.0.0.1";
  std::optional<http::Response> answer;
  api.handle(std::move(request), [&answer](http::Response r) { answer = std::move(r); });
  ASSERT_TRUE(answer.has_value());
  EXPECT_EQ(answer->status, 404);
}

TEST(ContinuedMetrics, RulesOfTheSameNameCountOn) {
  const auto first = parse_config(kRules);
  const auto second = parse_config(R"(
rules:
  - name: new
    limits: [{capacity: 5, refill_rate: 1}]
  - name: api
    limits: [{algorithm: sliding_window_log, limit: 5, window: 1h}]
)");
  store::MemoryStore store;
  auto old_limiter = std::make_shared<limiter::Limiter>(first.limiter, store);
  ASSERT_TRUE(old_limiter->check_sync("api", "user:a", 1));
  ASSERT_TRUE(old_limiter->check_sync("api", "user:a", 1));
  limiter::Limiter next(second.limiter, store);
  next.continue_metrics(*old_limiter);
  EXPECT_EQ(next.metrics().decisions(1, limiter::Outcome::allowed), 2u);  // api
  EXPECT_EQ(next.metrics().decisions(0, limiter::Outcome::allowed), 0u);  // new
  const auto verdict = next.check_sync("api", "user:a", 1);
  ASSERT_TRUE(verdict);
  EXPECT_EQ(verdict->decision.remaining, 2);  // the count went on in the store: 5 - 3
  EXPECT_EQ(next.metrics().decisions(1, limiter::Outcome::allowed), 3u);
  old_limiter.reset();  // the counters are shared, not borrowed
  EXPECT_EQ(next.metrics().decisions(1, limiter::Outcome::allowed), 3u);
  EXPECT_EQ(next.metrics().store_latency_count(), 3u);
}

// Answers each check only when the test says so.
class HeldStore final : public store::Store {
 public:
  void check(std::vector<store::CheckItem> items, std::optional<Micros>,
             store::CheckCallback done) override {
    held.push_back({std::move(items), std::move(done)});
  }
  std::string_view kind() const noexcept override { return "held"; }
  void answer(std::size_t i) {
    algorithms::Decision d;
    d.allowed = true;
    d.limit = held[i].first.front().limit.capacity;
    d.remaining = d.limit - 1;
    auto done = std::move(held[i].second);
    done(store::CheckOutcome{d, std::vector<algorithms::Decision>(held[i].first.size(), d)});
  }
  std::vector<std::pair<std::vector<store::CheckItem>, store::CheckCallback>> held;
};

// A reload lets the running limiter go while a shadow check (which does not hold up the
// answer) may still be in the store: the limiter lives until that check is answered.
TEST(SharedLimiter, LivesUntilItsChecksInFlightAreAnswered) {
  const auto config = parse_config(R"(
rules:
  - name: real
    limits: [{capacity: 10, refill_rate: 1}]
  - name: watch
    shadow: true
    limits: [{capacity: 10, refill_rate: 1}]
)");
  HeldStore store;
  auto owner = std::make_shared<limiter::Limiter>(config.limiter, store);
  const std::weak_ptr<limiter::Limiter> watched = owner;
  std::vector<limiter::AppliedRule> apps;
  apps.push_back(*owner->application("real", "user:a", 1));
  apps.push_back(*owner->application("watch", "user:a", 1));
  bool answered = false;
  owner->evaluate(std::move(apps), [&answered](Result<limiter::Evaluation>&& ev) {
    EXPECT_TRUE(ev);
    answered = true;
  });
  ASSERT_EQ(store.held.size(), 2u);  // the shadow batch, then the enforcing one
  ASSERT_NE(store.held[1].first.front().key.find("real"), std::string::npos);
  store.answer(1);
  EXPECT_TRUE(answered);
  owner.reset();  // the running configuration is replaced
  EXPECT_FALSE(watched.expired());  // the shadow check holds it
  store.answer(0);
  store.held.clear();
  EXPECT_TRUE(watched.expired());
}

}  // namespace
}  // namespace ratekeeper::server
