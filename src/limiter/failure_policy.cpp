#include "ratekeeper/limiter/failure_policy.hpp"

#include <algorithm>
#include <future>

#include "ratekeeper/algorithms/step.hpp"

namespace ratekeeper::limiter {

std::string_view to_string(FailureMode mode) noexcept {
  switch (mode) {
    case FailureMode::allow: return "allow";
    case FailureMode::deny: return "deny";
    case FailureMode::local: return "local";
  }
  return "unknown";
}

std::optional<FailureMode> parse_failure_mode(std::string_view name) noexcept {
  for (auto m : {FailureMode::allow, FailureMode::deny, FailureMode::local}) {
    if (name == to_string(m)) return m;
  }
  return std::nullopt;
}

algorithms::Limit divide_limit(const algorithms::Limit& limit, int instances) {
  if (instances <= 1) return limit;
  algorithms::Limit out = limit;
  out.capacity = std::max<std::int64_t>(1, limit.capacity / instances);
  if (limit.algorithm == algorithms::Algorithm::token_bucket) {
    // Each instance refills at 1/instances of the rate: one token every period·instances.
    out.period = limit.period * instances;
  }
  return out;
}

GuardedStore::GuardedStore(store::Store& store, FailurePolicy policy)
    : store_(&store), policy_(policy) {
  if (policy_.mode == FailureMode::local) {
    local_ = std::make_unique<store::MemoryStore>();
  }
}

Result<Verdict> GuardedStore::fallback(std::vector<store::CheckItem> items, std::optional<Micros> now,
                                       Error error) {
  failures_.fetch_add(1, std::memory_order_relaxed);
  Verdict v;
  v.by_failure_policy = true;
  v.store_error = std::move(error);
  switch (policy_.mode) {
    case FailureMode::allow:
    case FailureMode::deny: {
      const bool allow = policy_.mode == FailureMode::allow;
      for (const auto& item : items) {
        Decision d;
        d.allowed = allow;
        d.limit = item.limit.capacity;
        d.remaining = allow ? item.limit.capacity : 0;
        d.retry_after = allow ? 0 : policy_.deny_retry_after;
        v.items.push_back(d);
      }
      v.decision = algorithms::combine(v.items);
      return v;
    }
    case FailureMode::local: {
      for (auto& item : items) {
        item.limit = divide_limit(item.limit, policy_.instances);
        item.cost = std::min(item.cost, item.limit.capacity);
      }
      auto outcome = local_->check_batch(items, now);
      if (!outcome) return std::unexpected(outcome.error());
      v.decision = outcome->decision;
      v.items = std::move(outcome->items);
      return v;
    }
  }
  return v;
}

void GuardedStore::check(std::vector<store::CheckItem> items, std::optional<Micros> now,
                         VerdictCallback done) {
  // The items are kept for the fallback only when the store fails.
  auto copy = std::make_shared<std::vector<store::CheckItem>>(items);
  store_->check(std::move(items), now,
                [this, copy, now, done = std::move(done)](Result<store::CheckOutcome> r) {
                  if (r) {
                    done(Verdict{r->decision, std::move(r->items), false, std::nullopt});
                  } else if (!r.error().is_store_failure()) {
                    done(std::unexpected(r.error()));
                  } else {
                    done(fallback(std::move(*copy), now, r.error()));
                  }
                });
}

Result<Verdict> GuardedStore::check_sync(std::vector<store::CheckItem> items, std::optional<Micros> now) {
  std::promise<Result<Verdict>> promise;
  auto future = promise.get_future();
  check(std::move(items), now, [&promise](Result<Verdict> r) { promise.set_value(std::move(r)); });
  return future.get();
}

}  // namespace ratekeeper::limiter
