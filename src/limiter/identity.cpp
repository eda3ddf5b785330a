#include "ratekeeper/limiter/identity.hpp"

#include <fmt/format.h>

#include <cstdint>

#include "ratekeeper/limiter/keys.hpp"

namespace ratekeeper::limiter {

Result<std::string> header_identity(std::string_view header, std::string_view prefix,
                                    std::string_view value) {
  if (value.empty()) {
    return make_error(ErrorCode::invalid_argument, fmt::format("{} must not be empty", header));
  }
  if (value.size() > kMaxIdentityBytes) {
    return make_error(ErrorCode::invalid_argument,
                      fmt::format("{} is longer than {} bytes", header, kMaxIdentityBytes));
  }
  return fmt::format("{}:{}", prefix.empty() ? std::string_view("user") : prefix, value);
}

std::string api_key_identity(std::string_view api_key) {
  // FNV-1a 64, then a final avalanche (splitmix64) so similar keys look unrelated.
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : api_key) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ULL;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebULL;
  h ^= h >> 31;
  return fmt::format("key:{:016x}", h);
}

}  // namespace ratekeeper::limiter
