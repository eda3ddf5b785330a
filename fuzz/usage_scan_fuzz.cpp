// Fuzz target: the reading of a response body for its cost (http/usage_scan.hpp), a JSON body
// or an event stream from an upstream. The first byte picks the mode (bit 0: event stream) and
// how the rest is cut into pieces (as reads from a socket cut it); the same body fed whole
// must give the same cost, and a cost is an integer from 0 to 2^41.

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "ratekeeper/algorithms/lease.hpp"
#include "ratekeeper/http/usage_scan.hpp"
#include "require.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using ratekeeper::http::UsageScanner;
  if (size == 0) return 0;
  const bool events = (data[0] & 1) != 0;
  const std::size_t piece = 1 + (data[0] >> 1);  // 1 .. 128 bytes a read
  const std::string_view body(reinterpret_cast<const char*>(data) + 1, size - 1);

  UsageScanner whole({"usage", "total_tokens"}, events);
  whole.feed(body);
  const auto expected = whole.finish();

  UsageScanner pieces({"usage", "total_tokens"}, events);
  for (std::size_t at = 0; at < body.size(); at += piece) pieces.feed(body.substr(at, piece));
  const auto got = pieces.finish();

  ratekeeper::fuzz::require(got == expected);
  if (got) ratekeeper::fuzz::require(*got >= 0 && *got <= ratekeeper::algorithms::kMaxCharged);
  return 0;
}
