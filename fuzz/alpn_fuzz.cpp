// Fuzz target: the ALPN choice of the TLS listeners (core/alpn.hpp), on a client's offered
// protocol list. The first byte says whether the listener speaks h2; the rest is the list.
// Checks that the name chosen lies whole in the list, right after its own length byte, is
// "h2" (only when the listener speaks it) or "http/1.1", and that h2 wins when both are
// offered whole.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>

#include "core/alpn.hpp"
#include "require.hpp"

namespace {

using ratekeeper::fuzz::require;

// Whether `protocol` is one of the whole names of the list (walked independently).
bool offered(std::span<const unsigned char> list, std::string_view protocol) {
  std::size_t i = 0;
  while (i < list.size() && i + 1 + list[i] <= list.size()) {
    const std::size_t n = list[i];
    if (n == protocol.size() && std::memcmp(list.data() + i + 1, protocol.data(), n) == 0) return true;
    i += 1 + n;
  }
  return false;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const bool h2 = (data[0] & 1) != 0;
  const std::span<const unsigned char> list(data + 1, size - 1);
  const auto name = ratekeeper::choose_alpn(list, h2);
  const bool has_h2 = offered(list, "h2");
  const bool has_http11 = offered(list, "http/1.1");
  if (!name) {
    require(!(h2 && has_h2) && !has_http11);
    return 0;
  }
  require(name->data() > list.data() && name->data() + name->size() <= list.data() + list.size());
  require(name->data()[-1] == name->size());
  const std::string_view text(reinterpret_cast<const char*>(name->data()), name->size());
  require(text == "h2" || text == "http/1.1");
  require(text != "h2" || h2);
  require(text == "h2" || !(h2 && has_h2));
  return 0;
}
