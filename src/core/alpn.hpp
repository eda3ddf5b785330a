#pragma once
// ALPN on the listeners (RFC 7301 3.1): the protocol a TLS listener answers a client's offer
// with. The offer is bytes from outside: a ProtocolNameList, each name a length byte and then
// its bytes. Internal (core/tls.cpp's selection callback; fuzz/alpn_fuzz.cpp).

#include <optional>
#include <span>

namespace ratekeeper {

// "h2" when `h2` and the client offers it, else "http/1.1" when offered, else nothing. The
// name returned lies in `offered` (OpenSSL answers with a pointer into the client's list). A
// list cut short is read up to its last whole name.
std::optional<std::span<const unsigned char>> choose_alpn(std::span<const unsigned char> offered, bool h2) noexcept;

}  // namespace ratekeeper
