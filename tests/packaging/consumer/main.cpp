// Three checks of one key against a token bucket of 2 in the in-process store, at one
// instant: two admitted, the third denied for one refill interval (1 s).
#include <ratekeeper/store/memory_store.hpp>

#include <cstdio>

int main() {
  using namespace ratekeeper;
  auto limit = algorithms::Limit::token_bucket(2, 1.0);
  if (!limit) {
    std::printf("limit: %s\n", limit.error().message.c_str());
    return 1;
  }
  store::MemoryStore memory;
  const Micros now = 1'000'000'000;
  for (int i = 0; i < 3; ++i) {
    auto decision = memory.check_one("ip:192.0.2.7", *limit, 1, now);
    if (!decision) {
      std::printf("check: %s\n", decision.error().message.c_str());
      return 1;
    }
    std::printf("%s remaining=%lld retry_after_us=%lld\n", decision->allowed ? "allowed" : "denied",
                static_cast<long long>(decision->remaining), static_cast<long long>(decision->retry_after));
  }
  return 0;
}
