#pragma once
// Objects kept for reuse on a hot path: acquire() hands out a released one (or makes one),
// release() takes it back with whatever capacity it grew. Addresses are stable, and every
// object lives as long as the pool, so one never released is not lost. The pool grows to the
// most objects in use at once. Not thread-safe: its owner guards it.

#include <memory>
#include <vector>

namespace ratekeeper {

template <class T>
class ReusePool {
 public:
  T* acquire() {
    if (free_.empty()) return all_.emplace_back(std::make_unique<T>()).get();
    T* t = free_.back();
    free_.pop_back();
    return t;
  }
  void release(T* t) { free_.push_back(t); }

 private:
  std::vector<std::unique_ptr<T>> all_;
  std::vector<T*> free_;
};

}  // namespace ratekeeper
