#include "ratekeeper/store/store.hpp"

#include <fmt/format.h>

#include <future>

#include "ratekeeper/algorithms/lease.hpp"

namespace ratekeeper::store {

Result<CheckOutcome> Store::check_sync(std::vector<CheckItem> items, std::optional<Micros> now) {
  std::promise<Result<CheckOutcome>> promise;
  auto future = promise.get_future();
  check(std::move(items), now, [&promise](Result<CheckOutcome> r) { promise.set_value(std::move(r)); });
  return future.get();
}

void Store::lease_grant(const CheckItem&, std::int64_t, LeaseCallback done) {
  done(make_error(ErrorCode::invalid_argument, "this store does not grant leases"));
}

void Store::lease_return(const CheckItem&, std::int64_t, Micros, Micros, LeaseReturnCallback done) {
  done(make_error(ErrorCode::invalid_argument, "this store does not grant leases"));
}

void Store::reset(std::vector<std::string>, ResetCallback done) {
  done(make_error(ErrorCode::invalid_argument, "this store cannot reset keys"));
}

void Store::reserve(std::string, Micros, std::vector<CheckItem>, std::optional<Micros>, CheckCallback done) {
  done(make_error(ErrorCode::invalid_argument, "this store does not hold reservations"));
}

void Store::settle(std::string, std::vector<CheckItem>, std::optional<Micros>, SettleCallback done) {
  done(make_error(ErrorCode::invalid_argument, "this store does not hold reservations"));
}

Result<void> validate_reservation(std::string_view record, Micros ttl, std::span<const CheckItem> items,
                                  bool settling) {
  if (record.empty() || items.empty()) {
    return make_error(ErrorCode::invalid_argument, "a reservation needs a record and at least one key");
  }
  if (!settling && (ttl < 1 || ttl > algorithms::kMaxHorizon)) {
    return make_error(ErrorCode::invalid_argument, fmt::format("a reservation's ttl must be between 1 and "
                                                               "2^51 us, got {}", ttl));
  }
  for (std::size_t i = 0; i < items.size(); ++i) {
    const CheckItem& item = items[i];
    if (!algorithms::reservable(item.limit.algorithm)) {
      return make_error(ErrorCode::invalid_argument,
                        fmt::format("{} limits cannot be reserved (token bucket and fixed window can)",
                                    algorithms::to_string(item.limit.algorithm)));
    }
    if (item.key == record) {
      return make_error(ErrorCode::invalid_argument, fmt::format("the record '{}' is one of the keys", record));
    }
    for (std::size_t j = 0; j < i; ++j) {
      if (items[j].key == item.key) {
        return make_error(ErrorCode::invalid_argument, fmt::format("key '{}' appears twice", item.key));
      }
    }
    if (settling) {
      if (item.cost < 0 || item.cost > algorithms::kMaxCharged) {
        return make_error(ErrorCode::invalid_argument,
                          fmt::format("the actual cost must be between 0 and 2^41, got {}", item.cost));
      }
    } else if (auto ok = algorithms::validate_cost(item.limit, item.cost); !ok) {
      return std::unexpected(ok.error());
    }
  }
  return {};
}

}  // namespace ratekeeper::store
