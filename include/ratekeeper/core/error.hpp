#pragma once
// Errors on the request path are values: Result<T> is std::expected<T, Error>.

#include <expected>
#include <string>
#include <string_view>

namespace ratekeeper {

enum class ErrorCode {
  invalid_argument,  // a caller's mistake: bad limit, bad cost, bad identity
  store_full,        // MemoryStore reached its key limit
  unavailable,       // the store cannot be reached (connect failed, connection lost)
  timeout,           // the deadline passed before the store answered
  circuit_open,      // the breaker is open: the store was not even asked
  protocol,          // the store answered something unparseable
  reply,             // the store answered with an error reply
  auth,              // authentication or database selection refused
  redirect,          // cluster redirection budget exhausted or topology unusable
};

std::string_view to_string(ErrorCode code) noexcept;

struct Error {
  ErrorCode code;
  std::string message;

  // True for errors that say nothing about the request itself: the failure policy applies.
  bool is_store_failure() const noexcept {
    return code != ErrorCode::invalid_argument;
  }
};

template <class T>
using Result = std::expected<T, Error>;

inline std::unexpected<Error> make_error(ErrorCode code, std::string message) {
  return std::unexpected<Error>(Error{code, std::move(message)});
}

}  // namespace ratekeeper
