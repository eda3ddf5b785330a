// The decision log: fields and timestamp of a line, the line budget, sampling, and the sink
// (a library writes nothing unless given one).

#include "ratekeeper/limiter/decision_log.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "ratekeeper/limiter/limiter.hpp"
#include "ratekeeper/store/memory_store.hpp"

namespace ratekeeper::limiter {
namespace {

constexpr Micros kStart = 1'700'000'000LL * kMicrosPerSecond;

class DecisionLogTest : public ::testing::Test {
 protected:
  ManualClock clock{kStart};
  std::vector<std::string> lines;

  DecisionLogOptions options(double per_second, double burst, double sample_rate = 0) {
    DecisionLogOptions o;
    o.lines_per_second = per_second;
    o.burst = burst;
    o.allow_sample_rate = sample_rate;
    o.clock = &clock;
    o.sink = [this](std::string_view l) { lines.emplace_back(l); };
    return o;
  }

  static DecisionRecord denial() {
    DecisionRecord r;
    r.rule = "login";
    r.identity = "ip:192.0.2.7";
    r.key = "ratelimit:{ip:192.0.2.7}:login";
    r.allowed = false;
    r.limit = 5;
    r.remaining = 0;
    r.retry_after_ms = 1234;
    r.latency_us = 56;
    return r;
  }
};

TEST_F(DecisionLogTest, DenialLineHasEveryField) {
  DecisionLog log(options(100, 10));
  EXPECT_EQ(log.record(denial()), DecisionLog::Written::line);
  ASSERT_EQ(lines.size(), 1u);
  auto j = nlohmann::json::parse(lines[0]);
  EXPECT_EQ(j["rule"], "login");
  EXPECT_EQ(j["identity"], "ip:192.0.2.7");
  EXPECT_EQ(j["key"], "ratelimit:{ip:192.0.2.7}:login");
  EXPECT_EQ(j["allowed"], false);
  EXPECT_EQ(j["remaining"], 0);
  EXPECT_EQ(j["retry_after_ms"], 1234);
  EXPECT_EQ(j["latency_us"], 56);
  EXPECT_FALSE(j.contains("suppressed"));
}

TEST_F(DecisionLogTest, FloodOfDenialsIsRateLimitedAndSuppressedLinesAreCounted) {
  DecisionLog log(options(10, 5));  // 5 at once, then one line per 100 ms
  for (int i = 0; i < 1000; ++i) log.record(denial());
  EXPECT_EQ(lines.size(), 5u);
  EXPECT_EQ(log.suppressed_total(), 995u);
  clock.advance(100 * kMicrosPerMilli);
  EXPECT_EQ(log.record(denial()), DecisionLog::Written::line);
  ASSERT_EQ(lines.size(), 6u);
  EXPECT_EQ(nlohmann::json::parse(lines.back())["suppressed"], 995);
  clock.advance(100 * kMicrosPerMilli);
  log.record(denial());
  EXPECT_FALSE(nlohmann::json::parse(lines.back()).contains("suppressed"));  // reported once
}

TEST_F(DecisionLogTest, AllowsAreSampled) {
  DecisionRecord allowed = denial();
  allowed.allowed = true;
  {
    DecisionLog none(options(1000, 1000, 0.0));
    for (int i = 0; i < 100; ++i)
      EXPECT_EQ(none.record(allowed), DecisionLog::Written::not_sampled);
  }
  {
    DecisionLog all(options(1000, 1000, 1.0));
    for (int i = 0; i < 100; ++i) all.record(allowed);
    EXPECT_EQ(lines.size(), 100u);
  }
  lines.clear();
  DecisionLog some(options(1e6, 1e6, 0.5));
  for (int i = 0; i < 2000; ++i) some.record(allowed);
  EXPECT_GT(lines.size(), 700u);  // ~1000; bounds leave room for chance
  EXPECT_LT(lines.size(), 1300u);
}

TEST_F(DecisionLogTest, ClientControlledStringsStayValidJson) {
  DecisionRecord r = denial();
  r.identity = "user:\"quoted\"\n\xff";
  DecisionLog log(options(100, 10));
  log.record(r);
  ASSERT_EQ(lines.size(), 1u);
  nlohmann::json parsed;
  EXPECT_NO_THROW(parsed = nlohmann::json::parse(lines[0]));
  EXPECT_EQ(parsed["identity"].get<std::string>().substr(0, 13), "user:\"quoted\"");
  EXPECT_EQ(lines[0].find('\n'), std::string::npos);
}

TEST_F(DecisionLogTest, LineCarriesTheTimestampOfTheLogsClock) {
  DecisionLog log(options(100, 10));
  clock.set(0);
  log.record(denial());
  clock.set(951'868'799LL * kMicrosPerSecond + 999'999);  // the last microsecond of a leap day
  log.record(denial());
  clock.set(1'796'289'671LL * kMicrosPerSecond + 123'456);  // 2026-12-03T09:21:11.123456Z
  log.record(denial());
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(nlohmann::json::parse(lines[0])["ts"], "1970-01-01T00:00:00.000000Z");
  EXPECT_EQ(nlohmann::json::parse(lines[1])["ts"], "2000-02-29T23:59:59.999999Z");
  EXPECT_EQ(nlohmann::json::parse(lines[2])["ts"], "2026-12-03T09:21:11.123456Z");
  EXPECT_TRUE(lines[2].starts_with(R"({"ts":"2026-12-03T09:21:11.123456Z","rule":"login",)"))
      << lines[2];
}

TEST_F(DecisionLogTest, ALimitersClockTimesItsLogUnlessTheLogNamesOne) {
  store::MemoryStore store{
      store::MemoryStoreOptions{.max_keys = 100, .shards = 1, .clock = &clock}};
  LimiterConfig config;
  Rule rule;
  rule.name = "login";
  rule.limits = {NamedLimit{"", *algorithms::Limit::token_bucket(1, 0.001)}};
  config.rules.push_back(rule);
  config.decision_log = options(100, 10);
  config.decision_log.clock = nullptr;  // the limiter's
  clock.set(1'796'289'671LL * kMicrosPerSecond + 123'456);
  Limiter limiter(config, store, &clock);
  ASSERT_TRUE(limiter.check_sync("login", "ip:192.0.2.7", 1));
  ASSERT_TRUE(limiter.check_sync("login", "ip:192.0.2.7", 1));  // denied: logged
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(nlohmann::json::parse(lines[0])["ts"], "2026-12-03T09:21:11.123456Z");
}

TEST_F(DecisionLogTest, WithoutASinkNothingIsWritten) {
  DecisionLogOptions o = options(100, 10, 1.0);
  o.sink = nullptr;
  DecisionLog log(o);
  testing::internal::CaptureStdout();
  EXPECT_EQ(log.record(denial()), DecisionLog::Written::disabled);
  const auto out = testing::internal::GetCapturedStdout();
  EXPECT_EQ(out, "");
  EXPECT_EQ(log.written(), 0u);
}

TEST_F(DecisionLogTest, ALimiterWithoutASinkWritesNothingButCountsDecisions) {
  store::MemoryStore store{
      store::MemoryStoreOptions{.max_keys = 100, .shards = 1, .clock = &clock}};
  LimiterConfig config;
  Rule rule;
  rule.name = "api";
  rule.limits = {NamedLimit{"", *algorithms::Limit::token_bucket(1, 1)}};
  config.rules.push_back(rule);
  config.decision_log.allow_sample_rate = 1.0;  // enabled, every decision wanted, no sink
  Limiter limiter(config, store);
  testing::internal::CaptureStdout();
  for (int i = 0; i < 3; ++i) {
    AppliedRule app;
    app.rule = limiter.find_rule("api");
    app.identity = "ip:192.0.2.7";
    ASSERT_TRUE(limiter.evaluate_sync({app}));
  }
  const auto out = testing::internal::GetCapturedStdout();
  EXPECT_EQ(out, "");
  EXPECT_EQ(limiter.metrics().decisions(0, Outcome::allowed), 1u);
  EXPECT_EQ(limiter.metrics().decisions(0, Outcome::denied), 2u);
}

TEST_F(DecisionLogTest, ALimitersLogKeepsItsConfiguredLineBudget) {
  store::MemoryStore store{
      store::MemoryStoreOptions{.max_keys = 100, .shards = 1, .clock = &clock}};
  LimiterConfig config;
  Rule rule;
  rule.name = "login";
  rule.limits = {NamedLimit{"", *algorithms::Limit::token_bucket(1, 0.001)}};
  config.rules.push_back(rule);
  config.decision_log = options(4, 3);  // 3 lines at once, then one every 250 ms
  Limiter limiter(config, store);
  auto check = [&] {
    AppliedRule app;
    app.rule = limiter.find_rule("login");
    app.identity = "ip:192.0.2.7";
    auto ev = limiter.evaluate_sync({app});
    ASSERT_TRUE(ev);
  };
  auto suppressed_metric = [&] {
    const auto text = limiter.metrics_text();
    const std::string name = "\nratekeeper_decision_log_suppressed_total ";
    const auto at = text.find(name);
    return at == std::string::npos ? std::string("absent")
                                   : text.substr(at + name.size(), text.find('\n', at + 1) - at - name.size());
  };
  check();  // allowed: not sampled
  for (int i = 0; i < 10; ++i) check();  // ten denials at one instant
  EXPECT_EQ(lines.size(), 3u);            // the burst
  EXPECT_EQ(limiter.decision_log().suppressed_total(), 7u);
  EXPECT_EQ(suppressed_metric(), "7");

  clock.advance(249 * kMicrosPerMilli);
  check();
  EXPECT_EQ(lines.size(), 3u);  // not yet a line's worth of budget
  clock.advance(1 * kMicrosPerMilli);
  check();
  ASSERT_EQ(lines.size(), 4u);  // one line per 1/rate
  EXPECT_EQ(nlohmann::json::parse(lines.back())["suppressed"], 8);
  EXPECT_EQ(limiter.decision_log().suppressed_total(), 8u);
  EXPECT_EQ(suppressed_metric(), "8");

  clock.advance(250 * kMicrosPerMilli);
  check();
  check();
  ASSERT_EQ(lines.size(), 5u);
  EXPECT_FALSE(nlohmann::json::parse(lines.back()).contains("suppressed"));
  EXPECT_EQ(limiter.decision_log().suppressed_total(), 9u);
  EXPECT_EQ(suppressed_metric(), "9");
}

TEST_F(DecisionLogTest, StdoutSinkWritesOneLinePerDecision) {
  DecisionLogOptions o = options(100, 10);
  o.sink = stdout_decision_sink();
  DecisionLog log(o);
  testing::internal::CaptureStdout();
  log.record(denial());
  log.record(denial());
  const auto out = testing::internal::GetCapturedStdout();
  const auto first_end = out.find('\n');
  ASSERT_NE(first_end, std::string::npos) << out;
  EXPECT_EQ(out.find('\n', first_end + 1), out.size() - 1) << out;
  EXPECT_EQ(nlohmann::json::parse(out.substr(0, first_end))["rule"], "login");
}

TEST_F(DecisionLogTest, OutOfRangeBudgetsAreClampedNotOverflowed) {
  // A burst of 1e300 lines once overflowed the tolerance and suppressed every line.
  DecisionLog huge(options(1e300, 1e300));
  int written = 0;
  for (int i = 0; i < 1000; ++i) written += huge.record(denial()) == DecisionLog::Written::line;
  EXPECT_EQ(written, 1000);
  lines.clear();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  DecisionLog odd(options(nan, nan, nan));
  EXPECT_EQ(odd.record(denial()), DecisionLog::Written::line);  // burst at least 1
  EXPECT_EQ(odd.record(denial()), DecisionLog::Written::suppressed);
  DecisionRecord allowed = denial();
  allowed.allowed = true;
  EXPECT_EQ(odd.record(allowed), DecisionLog::Written::not_sampled);
}

}  // namespace
}  // namespace ratekeeper::limiter
