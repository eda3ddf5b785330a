#include "ratekeeper/store/store.hpp"

#include <future>

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

}  // namespace ratekeeper::store
