#pragma once
// Redis Cluster hash slot of a key: CRC16 (XMODEM) of its hash tag, mod 16384.

#include <cstdint>
#include <string_view>

namespace ratekeeper::redis {

inline constexpr std::uint16_t kClusterSlots = 16384;

std::uint16_t crc16(std::string_view data) noexcept;

// The part of `key` that is hashed: the text between the first '{' and the next '}', when
// that is not empty; the whole key otherwise.
std::string_view hash_tag(std::string_view key) noexcept;

inline std::uint16_t key_slot(std::string_view key) noexcept {
  return crc16(hash_tag(key)) & (kClusterSlots - 1);
}

}  // namespace ratekeeper::redis
