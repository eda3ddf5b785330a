#pragma once
// Objects kept for reuse per thread, on paths that would otherwise allocate them for every
// request: take() hands out one given back earlier on the calling thread (with whatever
// capacity it grew), give() keeps one for the next take() there, up to Kept of them; more are
// dropped. An object given back on another thread than it was taken on joins that thread's
// cache. Once a thread's cache is destroyed (the thread ends), give() drops and take() finds
// nothing.

#include <cstddef>
#include <utility>
#include <vector>

namespace ratekeeper {

template <class T, std::size_t Kept>
class ThreadCache {
 public:
  // Moves a kept one into `into` and answers true; false (and `into` untouched) when none is.
  static bool take(T& into) {
    if (gone) return false;
    auto& kept = cache().kept;
    if (kept.empty()) return false;
    into = std::move(kept.back());
    kept.pop_back();
    return true;
  }

  // Keeps `t` (moved from), or leaves it to the caller to destroy.
  static void give(T&& t) noexcept {
    if (gone) return;
    auto& kept = cache().kept;
    if (kept.size() >= Kept) return;
    try {
      kept.push_back(std::move(t));
    } catch (...) {
      // Out of memory: not kept.
    }
  }

 private:
  struct Cache {
    std::vector<T> kept;
    ~Cache() { gone = true; }
  };
  static Cache& cache() {
    thread_local Cache c;
    return c;
  }
  // Trivially destructible, so readable until the thread ends, after its cache is gone.
  static inline thread_local bool gone = false;
};

}  // namespace ratekeeper
