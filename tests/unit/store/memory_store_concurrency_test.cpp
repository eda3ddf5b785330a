// MemoryStore under several threads: one hot key on the system clock, and many keys with
// batches across shards, insertions and reclamation running at the same time.

#include <gtest/gtest.h>

#include <fmt/format.h>

#include <atomic>
#include <barrier>
#include <random>
#include <thread>
#include <vector>

#include "ratekeeper/store/memory_store.hpp"

namespace ratekeeper::store {
namespace {

using algorithms::Algorithm;

constexpr int kThreads = 4;

TEST(MemoryStoreConcurrency, ThreadsOnOneKeyAdmitNoMoreThanTheBucketAllows) {
  MemoryStore store;
  // 50 tokens, 200 per second.
  const Limit limit = *Limit::token_bucket(50, 200);
  const Micros run_for = 300 * kMicrosPerMilli;
  std::atomic<std::int64_t> admitted{0};
  std::atomic<std::int64_t> errors{0};
  std::barrier start(kThreads + 1);
  std::atomic<Micros> deadline{0};

  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&] {
      start.arrive_and_wait();
      const Micros until = deadline.load();
      std::int64_t mine = 0;
      while (SystemClock::instance().now() < until) {
        auto d = store.check_one("ratelimit:{ip:192.0.2.7}:api", limit, 1);
        if (!d) {
          errors.fetch_add(1);
        } else if (d->allowed) {
          ++mine;
        }
      }
      admitted.fetch_add(mine);
    });
  }
  const Micros begin = SystemClock::instance().now();
  deadline.store(begin + run_for);
  start.arrive_and_wait();
  for (auto& t : threads) t.join();
  const Micros elapsed = SystemClock::instance().now() - begin;

  EXPECT_EQ(errors.load(), 0);
  // The burst, then one token per interval of the time that actually passed (+1 for the
  // boundary: a token that comes due exactly at the last decision).
  EXPECT_GE(admitted.load(), 50);
  EXPECT_LE(admitted.load(), 50 + elapsed / limit.period + 1) << "elapsed " << elapsed << " µs";
}

TEST(MemoryStoreConcurrency, ManyKeysAndBatchesCountExactlyUnderContention) {
  MemoryStore store;
  constexpr int kKeys = 64;
  constexpr std::int64_t kLimit = 300;
  constexpr int kOps = 6000;
  const Limit limit = *Limit::window(Algorithm::fixed_window, kLimit, 60 * kMicrosPerSecond);
  const Micros now = 1'700'000'000'000'000;  // one instant: every admission stays counted
  std::vector<std::string> keys;
  for (int i = 0; i < kKeys; ++i) keys.push_back(fmt::format("ratelimit:{{user:{}}}:api", i));

  std::vector<std::vector<std::int64_t>> admitted(kThreads, std::vector<std::int64_t>(kKeys, 0));
  std::atomic<std::int64_t> errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(static_cast<unsigned>(t + 1));
      std::uniform_int_distribution<int> pick(0, kKeys - 1);
      for (int op = 0; op < kOps; ++op) {
        const int a = pick(rng);
        if (op % 3 != 0) {
          auto d = store.check_one(keys[static_cast<std::size_t>(a)], limit, 1, now);
          if (!d) errors.fetch_add(1);
          else if (d->allowed) ++admitted[t][a];
          continue;
        }
        // A batch of three distinct keys, in random order, so that shard locks are taken
        // for overlapping sets from every thread.
        int b = pick(rng), c = pick(rng);
        while (b == a) b = pick(rng);
        while (c == a || c == b) c = pick(rng);
        std::vector<CheckItem> items{{keys[static_cast<std::size_t>(a)], limit, 1},
                                     {keys[static_cast<std::size_t>(b)], limit, 1},
                                     {keys[static_cast<std::size_t>(c)], limit, 1}};
        auto r = store.check_batch(items, now);
        if (!r) {
          errors.fetch_add(1);
        } else if (r->decision.allowed) {
          ++admitted[t][a];
          ++admitted[t][b];
          ++admitted[t][c];
        }
      }
    });
  }
  for (auto& th : threads) th.join();

  EXPECT_EQ(errors.load(), 0);
  std::int64_t total = 0;
  for (int k = 0; k < kKeys; ++k) {
    std::int64_t sum = 0;
    for (int t = 0; t < kThreads; ++t) sum += admitted[t][k];
    total += sum;
    EXPECT_LE(sum, kLimit) << keys[k];
    // What the threads saw admitted is exactly what the store counted.
    auto peek = store.check_one(keys[k], limit, 0, now);
    ASSERT_TRUE(peek);
    EXPECT_EQ(peek->remaining, kLimit - sum) << keys[k];
  }
  EXPECT_GT(total, 0);
  EXPECT_EQ(store.stats().keys, static_cast<std::uint64_t>(kKeys));
}

TEST(MemoryStoreConcurrency, InsertionsReclaimExpiredKeysWhileOtherThreadsRun) {
  ManualClock clock(1'000'000);
  MemoryStore store(MemoryStoreOptions{.max_keys = 4096, .clock = &clock});
  // Every key expires one millisecond after its only request.
  const Limit limit = *Limit::make(Algorithm::token_bucket, 1, kMicrosPerMilli);
  constexpr int kInsertsPerThread = 5000;
  std::atomic<std::int64_t> unexpected{0};
  std::atomic<std::int64_t> full{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kInsertsPerThread; ++i) {
        if (t == 0 && i % 100 == 0) clock.advance(kMicrosPerMilli / 2);
        auto d = store.check_one(fmt::format("ratelimit:{{user:{}-{}}}:api", t, i), limit, 1);
        if (!d && d.error().code == ErrorCode::store_full) {
          full.fetch_add(1);
        } else if (!d || !d->allowed) {
          unexpected.fetch_add(1);
        }
      }
    });
  }
  for (auto& th : threads) th.join();

  EXPECT_EQ(unexpected.load(), 0);
  const auto stats = store.stats();
  EXPECT_LE(stats.keys, 4096u);
  EXPECT_GT(stats.reclaimed, 0u);
  EXPECT_EQ(stats.rejected_full, static_cast<std::uint64_t>(full.load()));
  EXPECT_EQ(stats.keys + stats.reclaimed + stats.rejected_full,
            static_cast<std::uint64_t>(kThreads * kInsertsPerThread));
}

}  // namespace
}  // namespace ratekeeper::store
