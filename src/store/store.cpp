#include "ratekeeper/store/store.hpp"

#include <future>

namespace ratekeeper::store {

Result<CheckOutcome> Store::check_sync(std::vector<CheckItem> items, std::optional<Micros> now) {
  std::promise<Result<CheckOutcome>> promise;
  auto future = promise.get_future();
  check(std::move(items), now, [&promise](Result<CheckOutcome> r) { promise.set_value(std::move(r)); });
  return future.get();
}

}  // namespace ratekeeper::store
