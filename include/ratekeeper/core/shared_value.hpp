#pragma once
// A shared_ptr that one thread replaces while others read it: load() hands out a reference
// to the current value, store() swaps in the next. A mutex held for a pointer copy, instead
// of std::atomic<std::shared_ptr>: libstdc++ 12 unlocks that one with relaxed order after a
// load, which the memory model (and ThreadSanitizer) counts as a race with the next store.
// Thread-safe.

#include <memory>
#include <mutex>
#include <utility>

namespace ratekeeper {

template <class T>
class SharedValue {
 public:
  SharedValue() = default;
  explicit SharedValue(std::shared_ptr<T> value) : value_(std::move(value)) {}
  SharedValue(const SharedValue&) = delete;
  SharedValue& operator=(const SharedValue&) = delete;

  std::shared_ptr<T> load() const {
    std::lock_guard lock(mu_);
    return value_;
  }

  void store(std::shared_ptr<T> next) {
    {
      std::lock_guard lock(mu_);
      value_.swap(next);
    }
    // The previous value is released outside the lock.
  }

 private:
  mutable std::mutex mu_;
  std::shared_ptr<T> value_;
};

}  // namespace ratekeeper
