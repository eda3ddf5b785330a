// What per-identity overrides cost a decision in process: Limiter::evaluate_sync of one rule
// over a MemoryStore, 1,000 identities in turn, with no override in effect, with 10,000 in
// effect that none of the identities has, and with 10,000 that every identity has (its limits
// scaled per decision). A decision never reads the overrides from the store, so this is their
// whole cost; the store's part is the same in the three.
//
//   build/bench/limiter_overrides_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true

#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ratekeeper/limiter/limiter.hpp"
#include "ratekeeper/store/memory_store.hpp"

namespace {

using namespace ratekeeper;

struct Fixture {
  store::MemoryStore store;
  std::shared_ptr<limiter::Limiter> limiter;
  std::vector<limiter::AppliedRule> apps;
};

enum class Overrides { none, others, every };

std::unique_ptr<Fixture> make_fixture(Overrides overrides) {
  auto f = std::make_unique<Fixture>();
  limiter::LimiterConfig config;
  limiter::Rule rule;
  rule.name = "api";
  rule.identity = {limiter::IdentityKind::header, "X-User-ID", "", "user"};
  rule.limits = {{"", *algorithms::Limit::token_bucket(1'000'000, 1'000'000)}};
  config.rules = {rule};
  f->limiter = std::make_shared<limiter::Limiter>(config, f->store);
  std::vector<std::pair<std::string, std::string>> entries;
  if (overrides != Overrides::none) {
    for (int i = 0; i < 10'000; ++i) {
      const std::string identity =
          overrides == Overrides::every ? fmt::format("user:{}", i) : fmt::format("user:other-{}", i);
      entries.emplace_back(limiter::override_field("api", identity),
                           limiter::override_value({"api", identity, 2, "", "", 0}));
    }
  }
  f->limiter->overrides().apply(overrides == Overrides::none ? 0 : 1, entries);
  for (int i = 0; i < 1000; ++i) f->apps.push_back(*f->limiter->application("api", fmt::format("user:{}", i), 1));
  return f;
}

void run(benchmark::State& state, Overrides overrides) {
  const auto f = make_fixture(overrides);
  std::size_t i = 0;
  for (auto _ : state) {
    auto ev = f->limiter->evaluate_sync({f->apps[i]});
    benchmark::DoNotOptimize(ev);
    if (++i == f->apps.size()) i = 0;
  }
}

void BM_Evaluate_NoOverride(benchmark::State& state) { run(state, Overrides::none); }
void BM_Evaluate_10kOverridesOfOthers(benchmark::State& state) { run(state, Overrides::others); }
void BM_Evaluate_10kOverridesOfEach(benchmark::State& state) { run(state, Overrides::every); }

BENCHMARK(BM_Evaluate_NoOverride);
BENCHMARK(BM_Evaluate_10kOverridesOfOthers);
BENCHMARK(BM_Evaluate_10kOverridesOfEach);

}  // namespace

BENCHMARK_MAIN();
