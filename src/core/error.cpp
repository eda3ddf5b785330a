#include "ratekeeper/core/error.hpp"

namespace ratekeeper {

std::string_view to_string(ErrorCode code) noexcept {
  switch (code) {
    case ErrorCode::invalid_argument: return "invalid_argument";
    case ErrorCode::store_full: return "store_full";
    case ErrorCode::unavailable: return "unavailable";
    case ErrorCode::timeout: return "timeout";
    case ErrorCode::circuit_open: return "circuit_open";
    case ErrorCode::protocol: return "protocol";
    case ErrorCode::reply: return "reply";
    case ErrorCode::auth: return "auth";
    case ErrorCode::redirect: return "redirect";
  }
  return "unknown";
}

}  // namespace ratekeeper
