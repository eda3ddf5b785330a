#include "ratekeeper/store/open_store.hpp"

#include <fmt/format.h>

#include "ratekeeper/store/memory_store.hpp"

namespace ratekeeper::store {

Result<std::unique_ptr<Store>> open_store(const StoreOptions& options) {
  const std::string_view url = options.url;
  if (url == "memory://" || url == "memory:") {
    MemoryStoreOptions m;
    m.max_keys = options.max_keys;
    if (options.clock != nullptr) m.clock = options.clock;
    return std::make_unique<MemoryStore>(m);
  }
  return make_error(ErrorCode::invalid_argument,
                    fmt::format("store url '{}': unsupported scheme (memory://, redis://, unix://, "
                                "redis-cluster://, redis-sentinel://)",
                                url));
}

}  // namespace ratekeeper::store
