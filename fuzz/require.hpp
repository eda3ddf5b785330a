#pragma once
// The fuzz targets' assertion: a property that does not hold prints where it failed and aborts,
// which libFuzzer reports as a crash with the input (assert() would vanish under NDEBUG).

#include <cstdio>
#include <cstdlib>
#include <source_location>

namespace ratekeeper::fuzz {

inline void require(bool ok, std::source_location where = std::source_location::current()) {
  if (ok) return;
  std::fprintf(stderr, "fuzz: property failed at %s:%u\n", where.file_name(),
               static_cast<unsigned>(where.line()));
  std::abort();
}

}  // namespace ratekeeper::fuzz
