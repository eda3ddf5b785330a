// `ratekeeper bench` and `ratekeeper script` run as the built executable: the JSON counts of
// a run add up, a single key admits exactly its capacity, bad arguments fail with a message.

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "support/redis_server.hpp"

namespace {

struct Ran {
  int status = -1;     // exit status, -1 if the process did not exit normally
  std::string output;  // stdout and stderr together
};

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

Ran run_cli(const std::vector<std::string>& args) {
  std::string cmd = shell_quote(RATEKEEPER_BINARY);
  for (const auto& a : args) cmd += " " + shell_quote(a);
  cmd += " 2>&1";
  Ran ran;
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (pipe == nullptr) return ran;
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, pipe)) > 0) ran.output.append(buf, n);
  const int status = ::pclose(pipe);
  ran.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return ran;
}

// Runs `bench ... --json` and returns its one JSON line.
nlohmann::json run_bench_json(std::vector<std::string> args) {
  args.insert(args.begin(), "bench");
  args.push_back("--json");
  Ran ran = run_cli(args);
  EXPECT_EQ(ran.status, 0) << ran.output;
  auto j = nlohmann::json::parse(ran.output, nullptr, /*allow_exceptions=*/false);
  EXPECT_FALSE(j.is_discarded()) << ran.output;
  return j;
}

void expect_counts_add_up(const nlohmann::json& j, std::int64_t requests) {
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(j["requests"].get<std::int64_t>(), requests);
  EXPECT_EQ(j["allowed"].get<std::int64_t>() + j["denied"].get<std::int64_t>() +
                j["errors"].get<std::int64_t>(),
            requests);
  EXPECT_GT(j["decisions_per_s"].get<double>(), 0);
  const auto& l = j["latency_us"];
  EXPECT_LE(l["p50"].get<double>(), l["p99"].get<double>());
  EXPECT_LE(l["p99"].get<double>(), l["p999"].get<double>());
  EXPECT_LE(l["p999"].get<double>(), l["max"].get<double>());
}

TEST(BenchCli, MemoryRunCountsAddUpToRequests) {
  auto j = run_bench_json({"--store", "memory://", "--keys", "50", "--requests", "20000",
                           "--concurrency", "8", "--capacity", "5", "--rate", "100"});
  expect_counts_add_up(j, 20000);
  EXPECT_EQ(j["errors"].get<std::int64_t>(), 0);
  EXPECT_GT(j["allowed"].get<std::int64_t>(), 0);
  EXPECT_GT(j["denied"].get<std::int64_t>(), 0);
  EXPECT_EQ(j["kind"], "memory");
}

TEST(BenchCli, MemoryOneKeyCapacityTenAllowsExactlyTen) {
  auto j = run_bench_json({"--store", "memory://", "--keys", "1", "--requests", "5000",
                           "--capacity", "10", "--rate", "0.000001"});
  expect_counts_add_up(j, 5000);
  EXPECT_EQ(j["allowed"].get<std::int64_t>(), 10);
  EXPECT_EQ(j["denied"].get<std::int64_t>(), 4990);
  EXPECT_EQ(j["errors"].get<std::int64_t>(), 0);
}

TEST(BenchCli, MemoryFourThreadsOneFixedWindowAllowsExactlyItsLimit) {
  auto j = run_bench_json({"--store", "memory://", "--algorithm", "fixed_window", "--keys", "1",
                           "--requests", "20000", "--threads", "4", "--concurrency", "4",
                           "--limit", "10", "--window-ms", "3600000"});
  expect_counts_add_up(j, 20000);
  EXPECT_EQ(j["allowed"].get<std::int64_t>(), 10);
  EXPECT_EQ(j["errors"].get<std::int64_t>(), 0);
}

TEST(BenchCli, InvalidArgumentsExitNonZeroWithAMessage) {
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{"--requests", "0"}, "--requests must be >= 1"},
      {{"--concurrency", "0"}, "--concurrency must be >= 1"},
      {{"--keys", "0"}, "--keys must be between 1"},
      {{"--algorithm", "leaky"}, "unknown --algorithm 'leaky'"},
      {{"--limit", "10"}, "--limit and --window-ms apply to window algorithms"},
      {{"--algorithm", "fixed_window", "--capacity", "10"}, "--capacity and --rate apply to token_bucket"},
      {{"--capacity", "10", "--cost", "11"}, "exceeds capacity 10"},
      {{"--rate", "0"}, "refill_rate must be a finite number > 0"},
      {{"--store", "nosuch://x"}, "unsupported scheme"},
      {{"--requests", "many"}, "--requests"},
      {{"--no-such-option"}, "--no-such-option"},
  };
  for (const auto& c : cases) {
    std::vector<std::string> args = {"bench"};
    args.insert(args.end(), c.args.begin(), c.args.end());
    Ran ran = run_cli(args);
    EXPECT_NE(ran.status, 0) << c.message;
    EXPECT_NE(ran.output.find(c.message), std::string::npos)
        << "expected '" << c.message << "' in: " << ran.output;
  }
}

// One redis-server for the Redis runs of this file; each test uses its own key space by
// flushing first.
class BenchCliRedis : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { server_ = new ratekeeper::testing::RedisServer(); }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  void SetUp() override { ASSERT_EQ(server_->command({"FLUSHALL"}), "OK"); }

  static ratekeeper::testing::RedisServer* server_;
};
ratekeeper::testing::RedisServer* BenchCliRedis::server_ = nullptr;

TEST_F(BenchCliRedis, RedisRunCountsAddUpToRequests) {
  auto j = run_bench_json({"--store", server_->url(), "--keys", "50", "--requests", "5000",
                           "--concurrency", "16", "--capacity", "5", "--rate", "1"});
  expect_counts_add_up(j, 5000);
  EXPECT_EQ(j["errors"].get<std::int64_t>(), 0) << j.dump();
  EXPECT_EQ(j["kind"], "redis");
  // Every key received at least one request and so exists in Redis (5000 draws over 50 keys).
  EXPECT_EQ(server_->command({"EVAL", "return #redis.call('KEYS', 'ratelimit:{bench:*}:bench')", "0"}),
            "50");
}

TEST_F(BenchCliRedis, RedisOneKeyCapacityTenAllowsExactlyTen) {
  auto j = run_bench_json({"--store", server_->url(), "--keys", "1", "--requests", "2000",
                           "--concurrency", "32", "--capacity", "10", "--rate", "0.000001"});
  expect_counts_add_up(j, 2000);
  EXPECT_EQ(j["allowed"].get<std::int64_t>(), 10);
  EXPECT_EQ(j["denied"].get<std::int64_t>(), 1990);
  EXPECT_EQ(j["errors"].get<std::int64_t>(), 0) << j.dump();
}

TEST_F(BenchCliRedis, RedisOneSlidingWindowLogKeyAllowsExactlyItsLimit) {
  auto j = run_bench_json({"--store", server_->url(), "--algorithm", "sliding_window_log", "--keys",
                           "1", "--requests", "1000", "--concurrency", "20", "--limit", "10",
                           "--window-ms", "3600000"});
  expect_counts_add_up(j, 1000);
  EXPECT_EQ(j["allowed"].get<std::int64_t>(), 10);
  EXPECT_EQ(j["errors"].get<std::int64_t>(), 0) << j.dump();
}

// --settle-cost: each decision reserves --cost and is settled to the actual cost, so a bucket
// that refills nothing admits what its capacity holds at the settled cost: 10 reservations
// of 10 fill 100 only while they are open; settled to 1 each, one key admits 91 of them (the
// 91st needs 10 with 90 settled).
TEST_F(BenchCliRedis, SettledReservationsAreChargedTheirActualCost) {
  auto j = run_bench_json({"--store", server_->url(), "--keys", "1", "--requests", "300", "--concurrency", "1",
                           "--capacity", "100", "--rate", "0.000001", "--cost", "10", "--settle-cost", "1"});
  expect_counts_add_up(j, 300);
  EXPECT_EQ(j["errors"].get<std::int64_t>(), 0) << j.dump();
  EXPECT_EQ(j["allowed"].get<std::int64_t>(), 91);
  EXPECT_EQ(j["settle_cost"].get<std::int64_t>(), 1);
  EXPECT_EQ(server_->command({"EVAL", "return #redis.call('KEYS', 'ratelimit:{bench:*}:bench:reservation:*')", "0"}),
            "0");
  const auto refused = run_cli({"bench", "--store", server_->url(), "--algorithm", "sliding_window_log", "--limit",
                                "10", "--window-ms", "1000", "--settle-cost", "1"});
  EXPECT_NE(refused.status, 0);
  EXPECT_NE(refused.output.find("--settle-cost"), std::string::npos) << refused.output;
}

// --hold-slots: each decision also takes one of N concurrency slots in the same reservation
// and releases it once admitted, so one slot admits every request of a sequential run
// (a slot never released would admit only the first); with --settle-cost the limit is
// settled too (91 of 300, as above), and no record or slot is left behind.
TEST_F(BenchCliRedis, HeldSlotsAreReleasedAfterEachRequest) {
  auto j = run_bench_json({"--store", server_->url(), "--keys", "1", "--requests", "300", "--concurrency", "1",
                           "--capacity", "1000000", "--rate", "1000000", "--hold-slots", "1"});
  expect_counts_add_up(j, 300);
  EXPECT_EQ(j["errors"].get<std::int64_t>(), 0) << j.dump();
  EXPECT_EQ(j["allowed"].get<std::int64_t>(), 300);
  EXPECT_EQ(j["hold_slots"].get<std::int64_t>(), 1);
  EXPECT_FALSE(j.contains("settle_cost"));
  EXPECT_EQ(server_->command({"EVAL", "return redis.call('ZCARD', 'ratelimit:{bench:0}:bench:slots')", "0"}), "0");

  ASSERT_EQ(server_->command({"FLUSHALL"}), "OK");
  j = run_bench_json({"--store", server_->url(), "--keys", "1", "--requests", "300", "--concurrency", "1",
                      "--capacity", "100", "--rate", "0.000001", "--cost", "10", "--settle-cost", "1", "--hold-slots",
                      "1"});
  expect_counts_add_up(j, 300);
  EXPECT_EQ(j["errors"].get<std::int64_t>(), 0) << j.dump();
  EXPECT_EQ(j["allowed"].get<std::int64_t>(), 91);
  EXPECT_EQ(j["settle_cost"].get<std::int64_t>(), 1);
  EXPECT_EQ(j["hold_slots"].get<std::int64_t>(), 1);
  EXPECT_EQ(server_->command({"EVAL", "return #redis.call('KEYS', 'ratelimit:{bench:*}:bench:reservation:*')", "0"}),
            "0");
  EXPECT_EQ(server_->command({"EVAL", "return redis.call('ZCARD', 'ratelimit:{bench:0}:bench:slots')", "0"}), "0");

  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const std::vector<Case> refused = {
      {{"--hold-slots", "-1"}, "--hold-slots must be between 1 and 1048576"},
      {{"--hold-slots", "1048577"}, "--hold-slots must be between 1 and 1048576"},
      {{"--hold-slots", "1", "--algorithm", "sliding_window_log", "--limit", "10", "--window-ms", "1000"},
       "--hold-slots: the reservation holds the bench's limit too"},
      {{"--hold-slots", "1", "--lease-max", "5"}, "--hold-slots: the reservation holds the bench's limit too"},
  };
  for (const auto& c : refused) {
    std::vector<std::string> args = {"bench", "--store", server_->url()};
    args.insert(args.end(), c.args.begin(), c.args.end());
    const Ran ran = run_cli(args);
    EXPECT_NE(ran.status, 0) << c.message;
    EXPECT_NE(ran.output.find(c.message), std::string::npos) << "expected '" << c.message << "' in: " << ran.output;
  }
}

TEST(BenchCli, MemoryHeldSlotIsReleasedAfterEachRequest) {
  auto j = run_bench_json({"--store", "memory://", "--keys", "1", "--requests", "300", "--concurrency", "1",
                           "--capacity", "10", "--rate", "0.000001", "--hold-slots", "1"});
  expect_counts_add_up(j, 300);
  EXPECT_EQ(j["errors"].get<std::int64_t>(), 0) << j.dump();
  EXPECT_EQ(j["allowed"].get<std::int64_t>(), 10);
  EXPECT_EQ(j["hold_slots"].get<std::int64_t>(), 1);
}

TEST(BenchCli, UnixSocketRunAllowsExactlyCapacity) {
  const auto socket = std::filesystem::temp_directory_path() /
                      ("ratekeeper-bench-" + std::to_string(::getpid()) + ".sock");
  ratekeeper::testing::RedisServer server({.args = {"--unixsocket", socket.string()},
                                           .port = 0,
                                           .password = {}});
  auto j = run_bench_json({"--store", "unix://" + socket.string(), "--keys", "1", "--requests",
                           "500", "--concurrency", "8", "--capacity", "10", "--rate", "0.000001"});
  expect_counts_add_up(j, 500);
  EXPECT_EQ(j["allowed"].get<std::int64_t>(), 10);
  EXPECT_EQ(j["errors"].get<std::int64_t>(), 0) << j.dump();
}

TEST(BenchCli, UnreachableRedisExitsNonZeroSayingNotReady) {
  const int port = ratekeeper::testing::free_port();
  Ran ran = run_cli({"bench", "--store", "redis://127.0.0.1:" + std::to_string(port),
                     "--ready-timeout-ms", "300"});
  EXPECT_NE(ran.status, 0);
  EXPECT_NE(ran.output.find("is not ready after 300 ms"), std::string::npos) << ran.output;
}

TEST_F(BenchCliRedis, TokenBucketScriptLoadsIntoRedisAndAdmits) {
  Ran ran = run_cli({"script", "token_bucket"});
  ASSERT_EQ(ran.status, 0) << ran.output;
  const std::string sha = server_->command({"SCRIPT", "LOAD", ran.output});
  ASSERT_EQ(sha.size(), 40u) << sha;
  // The argument layout bench/redis_baseline.sh gives redis-benchmark:
  // KEYS[1], capacity, period_us, cost, now_us (-1: the server's clock).
  const std::string reply =
      server_->command({"EVALSHA", sha, "1", "ratelimit:{bench:1}:bench", "10", "1000", "1", "-1"});
  EXPECT_EQ(reply.substr(0, reply.find('\n')), "1") << reply;  // allowed
}

TEST(ScriptCli, ListNamesTheTokenBucketScript) {
  Ran ran = run_cli({"script", "--list"});
  EXPECT_EQ(ran.status, 0);
  EXPECT_NE(ran.output.find("token_bucket\n"), std::string::npos) << ran.output;
}

TEST(ScriptCli, UnknownScriptExitsNonZeroNamingIt) {
  Ran ran = run_cli({"script", "no_such_script"});
  EXPECT_NE(ran.status, 0);
  EXPECT_NE(ran.output.find("unknown script 'no_such_script'"), std::string::npos) << ran.output;
}

}  // namespace
