#pragma once
// SHA-1 (FIPS 180-4) of a byte string as 40 lowercase hex digits: the name Redis gives a
// script in its cache (EVALSHA). Pure function.

#include <string>
#include <string_view>

namespace ratekeeper::redis::detail {

std::string sha1_hex(std::string_view data);

}  // namespace ratekeeper::redis::detail
