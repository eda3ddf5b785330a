#pragma once
// Whether code runs on a connection's own thread. Internal to src/http.

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/io_context.hpp>
#include <typeinfo>

namespace ratekeeper::http {

// Whether the calling thread is the one running `executor`'s io_context. What arrives on
// that thread (a decision or a response from a store that answered on the connection's own
// thread, as RedisStore and MemoryStore do on the server's loop) is acted on at once:
// net::dispatch would run it inline too, but only after moving it into a type-erased
// function, an allocation and two moves of the whole result.
// Any other kind of executor (a strand, say) is never taken for the thread. The type is
// checked first: Boost 1.74's target<T>() casts whatever it holds without looking.
inline bool on_thread_of(const boost::asio::any_io_executor& executor) {
  using ContextExecutor = boost::asio::io_context::executor_type;
  if (executor.target_type() != typeid(ContextExecutor)) return false;
  return executor.target<ContextExecutor>()->running_in_this_thread();
}

}  // namespace ratekeeper::http
