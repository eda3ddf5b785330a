#include "redis/reply.hpp"

namespace ratekeeper::redis {

std::string_view Reply::error_code() const noexcept {
  if (type != Type::error) return {};
  std::string_view s = str;
  return s.substr(0, s.find(' '));
}

Error reply_error(const Reply& reply) {
  const std::string_view code = reply.error_code();
  const bool auth = code == "NOAUTH" || code == "WRONGPASS" || code == "NOPERM";
  return Error{auth ? ErrorCode::auth : ErrorCode::reply, reply.str};
}

std::string Reply::to_string() const {
  switch (type) {
    case Type::string:
    case Type::status: return str;
    case Type::error: return "(error) " + str;
    case Type::integer: return std::to_string(integer);
    case Type::nil: return "(nil)";
    case Type::array: {
      std::string out = "[";
      for (std::size_t i = 0; i < elements.size(); ++i) {
        if (i) out += ", ";
        out += elements[i].to_string();
      }
      return out + "]";
    }
  }
  return {};
}

}  // namespace ratekeeper::redis
