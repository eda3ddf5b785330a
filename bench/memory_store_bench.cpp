// MemoryStore::check_one token bucket decisions: one hot key, 1,000 keys and 1,000,000 keys,
// on 1 and 2 threads. `now` comes from a counter (the clock read is not measured), except in
// the *_SystemClock variants, which read the system clock on every decision.

#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "ratekeeper/store/memory_store.hpp"

namespace {

using ratekeeper::Micros;
using ratekeeper::algorithms::Limit;
using ratekeeper::store::MemoryStore;
using ratekeeper::store::MemoryStoreOptions;

// 1000 tokens, 1000 per second: keys stay live, most decisions are admissions.
const Limit& bench_limit() {
  static const Limit limit = *Limit::token_bucket(1000, 1000);
  return limit;
}

// A store already holding `count` keys, built once per key count and shared by the threads.
struct Fixture {
  std::unique_ptr<MemoryStore> store;
  std::vector<std::string> keys;
};

Fixture& fixture(std::size_t count) {
  static std::mutex mutex;
  static std::vector<std::pair<std::size_t, std::unique_ptr<Fixture>>> fixtures;
  std::lock_guard lock(mutex);
  for (auto& [n, f] : fixtures) {
    if (n == count) return *f;
  }
  auto f = std::make_unique<Fixture>();
  // The default options (64 shards), with room for the 1,000,000-key case.
  f->store = std::make_unique<MemoryStore>(
      MemoryStoreOptions{.max_keys = std::max<std::size_t>(MemoryStoreOptions{}.max_keys, 2 * count)});
  f->keys.reserve(count);
  for (std::size_t i = 0; i < count; ++i) {
    f->keys.push_back(fmt::format("ratelimit:{{user:{}}}:api", 100000 + i));
    (void)f->store->check_one(f->keys.back(), bench_limit(), 1, Micros{1});
  }
  fixtures.emplace_back(count, std::move(f));
  return *fixtures.back().second;
}

// Each thread walks its own slice of the keys, so two threads do not share a hot key
// (except in the one-key case, where sharing it is the point).
template <bool kSystemClock>
void run(benchmark::State& state, std::size_t key_count) {
  Fixture& f = fixture(key_count);
  const std::size_t n = f.keys.size();
  std::size_t i = (n / static_cast<std::size_t>(state.threads())) *
                  static_cast<std::size_t>(state.thread_index());
  Micros now = 1'000'000;
  std::int64_t allowed = 0;
  for (auto _ : state) {
    auto d = kSystemClock ? f.store->check_one(f.keys[i], bench_limit(), 1)
                          : f.store->check_one(f.keys[i], bench_limit(), 1, now++);
    allowed += d && d->allowed;
    if (++i == n) i = 0;
  }
  benchmark::DoNotOptimize(allowed);
  state.SetItemsProcessed(state.iterations());
}

void BM_CheckOne_HotKey(benchmark::State& state) { run<false>(state, 1); }
void BM_CheckOne_1kKeys(benchmark::State& state) { run<false>(state, 1'000); }
void BM_CheckOne_1MKeys(benchmark::State& state) { run<false>(state, 1'000'000); }
void BM_CheckOne_HotKey_SystemClock(benchmark::State& state) { run<true>(state, 1); }
void BM_CheckOne_1kKeys_SystemClock(benchmark::State& state) { run<true>(state, 1'000); }

}  // namespace

BENCHMARK(BM_CheckOne_HotKey)->Threads(1)->Threads(2)->UseRealTime();
BENCHMARK(BM_CheckOne_1kKeys)->Threads(1)->Threads(2)->UseRealTime();
BENCHMARK(BM_CheckOne_1MKeys)->Threads(1)->Threads(2)->UseRealTime();
BENCHMARK(BM_CheckOne_HotKey_SystemClock)->Threads(1)->Threads(2)->UseRealTime();
BENCHMARK(BM_CheckOne_1kKeys_SystemClock)->Threads(1)->Threads(2)->UseRealTime();

BENCHMARK_MAIN();
