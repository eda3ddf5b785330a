#include "check_validation.hpp"

#include <fmt/format.h>

#include "algorithms/step.hpp"

namespace ratekeeper::store::detail {

Result<void> validate_check(std::span<const CheckItem> items, std::optional<Micros> now) {
  if (now) {
    if (auto ok = algorithms::validate_now(*now); !ok) return ok;
  }
  for (std::size_t i = 0; i < items.size(); ++i) {
    const auto& item = items[i];
    if (auto ok = algorithms::Limit::make(item.limit.algorithm, item.limit.capacity, item.limit.period); !ok) {
      return std::unexpected(ok.error());
    }
    if (auto ok = algorithms::validate_cost(item.limit, item.cost); !ok) return std::unexpected(ok.error());
    if (auto ok = algorithms::validate_max_delay(item.max_delay); !ok) return std::unexpected(ok.error());
    for (std::size_t j = 0; j < i; ++j) {
      if (items[j].key == item.key) {
        return make_error(ErrorCode::invalid_argument,
                          fmt::format("key '{}' appears twice in one check", item.key));
      }
    }
  }
  return {};
}

bool answered_locally(std::span<const CheckItem> items, std::optional<Micros> now, const CheckCallback& done) {
  if (items.empty()) {
    done(CheckOutcome{algorithms::combine({}), {}});
    return true;
  }
  if (auto ok = validate_check(items, now); !ok) {
    done(std::unexpected(ok.error()));
    return true;
  }
  if (auto ok = refuse_unheld_slots(items); !ok) {
    done(std::unexpected(ok.error()));
    return true;
  }
  return false;
}

}  // namespace ratekeeper::store::detail
