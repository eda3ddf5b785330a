#pragma once
// A Redis reply as a C++ value, parsed from hiredis' reader output in one place.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ratekeeper/core/error.hpp"

namespace ratekeeper::redis {

struct Reply {
  enum class Type : std::uint8_t { string, status, error, integer, nil, array };

  Type type = Type::nil;
  std::int64_t integer = 0;  // Type::integer
  std::string str;           // string, status and error
  std::vector<Reply> elements;  // array

  bool is_error() const noexcept { return type == Type::error; }
  bool is_integer() const noexcept { return type == Type::integer; }
  bool is_array() const noexcept { return type == Type::array; }
  // "MOVED 3999 127.0.0.1:6381" → "MOVED"; empty unless an error.
  std::string_view error_code() const noexcept;
  // Debug form: integers in decimal, errors prefixed "(error) ", arrays in brackets.
  std::string to_string() const;
};

// The error an error reply stands for: ErrorCode::auth when the server refused the
// connection's credentials or rights (NOAUTH, WRONGPASS, NOPERM: a password set or an ACL
// changed on the server), ErrorCode::reply for any other.
Error reply_error(const Reply& reply);

}  // namespace ratekeeper::redis
