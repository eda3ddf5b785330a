// Fuzz target: the YAML configuration loader. Any text either loads into a Config or throws
// server::ConfigError; any other exception, a crash, a hang or a huge allocation is a finding.
// A configuration that loads must also be accepted by the Limiter the server builds from it
// (which throws std::invalid_argument on rules it cannot run).

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "config.hpp"
#include "ratekeeper/limiter/limiter.hpp"
#include "ratekeeper/store/memory_store.hpp"
#include "require.hpp"

namespace {

using namespace ratekeeper;
using fuzz::require;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static store::MemoryStore store;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  if (auto d = server::parse_duration(text)) require(*d >= 0 && *d <= kMaxExact);
  server::Config config;
  try {
    config = server::parse_config(text, "fuzz.yaml");
  } catch (const server::ConfigError&) {
    return 0;
  }
  require(config.trusted_proxies.empty() == config.middleware.trusted_proxies.empty());
  limiter::Limiter limiter(config.limiter, store);  // throws (a finding) on what it refuses
  return 0;
}
