#pragma once
// The fuzz targets' assertion: a property that does not hold aborts, which libFuzzer reports
// as a crash with the input (assert() would vanish under NDEBUG).

#include <cstdlib>

namespace ratekeeper::fuzz {

inline void require(bool ok) {
  if (!ok) std::abort();
}

}  // namespace ratekeeper::fuzz
