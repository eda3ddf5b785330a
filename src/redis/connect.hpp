#pragma once
// Opening a socket to a Redis endpoint, shared by the pipelined Connection and the sentinel
// Subscriber. Internal to src/redis.

#include <boost/asio/generic/stream_protocol.hpp>
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

}  // namespace ratekeeper::redis::detail
