#pragma once
// Opening and closing the sockets of the pipelined Connection and the sentinel Subscriber.
// Internal to src/redis.

#include <boost/asio/generic/stream_protocol.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <functional>
#include <string>

#include "ratekeeper/redis/url.hpp"

namespace ratekeeper::redis::detail {

// Connects `socket` to `endpoint`: a unix socket path, a numeric address, or a host name
// resolved with `resolver`, each of its addresses tried in turn. `done` runs on the socket's
// executor with an empty string on success, or why it failed ("cannot resolve: …",
// "connect failed: …"). The caller keeps `socket` and `resolver` alive until then (e.g. by
// capturing their owner in `done`) and discards completions of attempts it has abandoned.
void async_open(boost::asio::generic::stream_protocol::socket& socket, boost::asio::ip::tcp::resolver& resolver,
                const Endpoint& endpoint, std::function<void(std::string error)> done);

// Runs `fn` on `context`'s thread and returns once it has run: at once when called on that
// thread, otherwise posted there and waited for (the thread must be running). For the
// destructors, which close the socket where its handlers run.
void run_on_and_wait(boost::asio::io_context& context, const std::function<void()>& fn);

}  // namespace ratekeeper::redis::detail
