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

void Store::read_table(std::string, std::int64_t, TableCallback done) {
  done(make_error(ErrorCode::invalid_argument, "this store holds no shared table"));
}

void Store::write_table(std::string, std::string, std::optional<std::string>, std::size_t, TableWriteCallback done) {
  done(make_error(ErrorCode::invalid_argument, "this store holds no shared table"));
}

void Store::reserve(ReservationRecord, std::vector<CheckItem>, std::optional<Micros>, CheckCallback done) {
  done(make_error(ErrorCode::invalid_argument, "this store does not hold reservations"));
}

void Store::settle(std::string, std::vector<CheckItem>, std::optional<Micros>, SettleCallback done) {
  done(make_error(ErrorCode::invalid_argument, "this store does not hold reservations"));
}

void Store::renew(std::string, std::vector<CheckItem>, Micros, std::optional<Micros>, SettleCallback done) {
  done(make_error(ErrorCode::invalid_argument, "this store does not hold reservations"));
}

std::unexpected<Error> unheld_slot(std::string_view key) {
  return make_error(ErrorCode::invalid_argument,
                    fmt::format("'{}' is a concurrency limit: its slot is taken by a reservation, which releases it",
                                key));
}

Result<void> refuse_unheld_slots(std::span<const CheckItem> items) {
  for (const auto& item : items) {
    if (item.limit.algorithm == algorithms::Algorithm::concurrency && item.cost > 0) return unheld_slot(item.key);
  }
  return {};
}

namespace {

Result<void> distinct_keys(std::string_view record, std::span<const CheckItem> items) {
  if (record.empty() || items.empty()) {
    return make_error(ErrorCode::invalid_argument, "a reservation needs a record and at least one key");
  }
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (items[i].key == record) {
      return make_error(ErrorCode::invalid_argument, fmt::format("the record '{}' is one of the keys", record));
    }
    for (std::size_t j = 0; j < i; ++j) {
      if (items[j].key == items[i].key) {
        return make_error(ErrorCode::invalid_argument, fmt::format("key '{}' appears twice", items[i].key));
      }
    }
  }
  return {};
}

Result<void> reservable(const CheckItem& item) {
  if (!algorithms::reservable(item.limit.algorithm)) {
    return make_error(ErrorCode::invalid_argument,
                      fmt::format("{} limits cannot be reserved (token bucket, fixed window and concurrency can)",
                                  algorithms::to_string(item.limit.algorithm)));
  }
  return {};
}

}  // namespace

Result<void> validate_reservation(const ReservationRecord& record, std::span<const CheckItem> items) {
  if (auto ok = distinct_keys(record.key, items); !ok) return ok;
  if (record.ttl < 1 || record.ttl > algorithms::kMaxHorizon) {
    return make_error(ErrorCode::invalid_argument, fmt::format("a reservation's ttl must be between 1 and "
                                                               "2^51 us, got {}", record.ttl));
  }
  if (record.first >= items.size() || record.count == 0) {
    return make_error(ErrorCode::invalid_argument, "a reservation's record holds at least one of its items");
  }
  for (std::size_t i = record.first; i < record.end(items.size()); ++i) {
    if (auto ok = reservable(items[i]); !ok) return ok;
  }
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (auto ok = algorithms::validate_cost(items[i].limit, items[i].cost); !ok) return std::unexpected(ok.error());
    const bool held = i >= record.first && i < record.end(items.size());
    if (!held && items[i].limit.algorithm == algorithms::Algorithm::concurrency && items[i].cost > 0) {
      return unheld_slot(items[i].key);
    }
  }
  return {};
}

Result<void> validate_settlement(std::string_view record, std::span<const CheckItem> items) {
  if (auto ok = distinct_keys(record, items); !ok) return ok;
  for (const auto& item : items) {
    if (auto ok = reservable(item); !ok) return ok;
    if (item.cost != kAsEstimated && (item.cost < 0 || item.cost > algorithms::kMaxCharged)) {
      return make_error(ErrorCode::invalid_argument,
                        fmt::format("the actual cost must be between 0 and 2^41, got {}", item.cost));
    }
  }
  return {};
}

Result<void> validate_renewal(std::string_view record, std::span<const CheckItem> items, Micros ttl) {
  if (auto ok = distinct_keys(record, items); !ok) return ok;
  if (ttl < 1 || ttl > algorithms::kMaxHorizon) {
    return make_error(ErrorCode::invalid_argument,
                      fmt::format("a reservation's ttl must be between 1 and 2^51 us, got {}", ttl));
  }
  for (const auto& item : items) {
    if (auto ok = reservable(item); !ok) return ok;
  }
  return {};
}

}  // namespace ratekeeper::store
