// Fuzz target: the HTTP/2 frame layer of the proxy (src/http/h2_connection.hpp) without
// sockets. The input follows the client's connection preface: its first byte sets how many
// bytes each receive() takes (1-256), the rest is what the client sends. Every request that
// comes out whole is answered at once, its body given in two pieces; the output is taken after
// each receive. The server's first frame is its SETTINGS; a request never carries a body over
// the limit, nor fields over the header limit; the streams open stay within what may be open
// (the limit, and the streams being answered); a refused input ends the connection with a
// GOAWAY among the frames sent.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "http/h2_connection.hpp"
#include "require.hpp"

namespace {

using namespace ratekeeper;

constexpr std::string_view kPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

// Whether `out` (the server's frames, whole) holds a frame of `type`.
bool has_frame(std::string_view out, std::uint8_t type) {
  while (out.size() >= 9) {
    const std::size_t length = (static_cast<std::uint8_t>(out[0]) << 16) | (static_cast<std::uint8_t>(out[1]) << 8) |
                               static_cast<std::uint8_t>(out[2]);
    if (static_cast<std::uint8_t>(out[3]) == type) return true;
    if (out.size() < 9 + length) return false;
    out.remove_prefix(9 + length);
  }
  return false;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::size_t step = std::size_t{data[0]} + 1;
  const std::string_view input(reinterpret_cast<const char*>(data + 1), size - 1);
  http::H2Limits limits;
  limits.header_limit = 1024;
  limits.body_limit = 4096;
  limits.max_concurrent_streams = 8;
  http::H2Connection* self = nullptr;
  http::H2Connection h2(limits, http::H2Connection::Events{
                                    .request =
                                        [&](std::int32_t id, http::Request r) {
                                          fuzz::require(r.body.size() <= limits.body_limit);
                                          std::size_t fields = 0;
                                          for (const auto& [n, v] : r.headers) fields += n.size() + v.size() + 32;
                                          fuzz::require(fields <= limits.header_limit);
                                          self->respond(id, 200, {{"content-type", "text/plain"}}, true);
                                          self->body(id, r.target, false);
                                          self->body(id, r.method, true);
                                        },
                                    .closed = [](std::int32_t) {},
                                    .drained = [](std::int32_t) {},
                                    .ended =
                                        [](std::uint32_t code, std::string_view reason) {
                                          // Said only for an error, in words fit for a log line.
                                          fuzz::require(code != 0);
                                          for (const char c : reason) fuzz::require(c >= 0x20 && c < 0x7f);
                                        },
                                });
  self = &h2;
  std::string out;
  h2.take_output(out);
  fuzz::require(out.size() >= 9 && out[3] == 0x4);  // SETTINGS first
  std::string all = std::string(kPreface);
  all.append(input);
  std::string_view rest = all;
  while (!rest.empty()) {
    const auto piece = rest.substr(0, step);
    rest.remove_prefix(piece.size());
    const bool ok = h2.receive(piece);
    std::string sent;
    h2.take_output(sent);
    // Streams within the limit, and the ones being answered.
    fuzz::require(h2.open_streams() <= limits.max_concurrent_streams + 1);
    if (!ok) {
      fuzz::require(has_frame(sent, 0x7));  // GOAWAY
      break;
    }
  }
  return 0;
}
