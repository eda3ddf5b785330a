#pragma once
// A pub/sub subscription to one Redis server: it connects, sends AUTH (when credentials are
// given) and SUBSCRIBE, and hands every message on the subscribed channels to a callback.
// When the connection fails, or the server stops answering the PING sent every
// ping_interval, it connects again after a backoff that doubles from reconnect_min to
// reconnect_max (reset once subscribed). Several servers are listened to with one Subscriber
// each.
//
// Runs on one io_context; callbacks run on that context's thread and must not block.
// Thread-safe: the destructor may run on any thread, and no callback runs once it returns.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "ratekeeper/core/time.hpp"
#include "ratekeeper/redis/tls.hpp"
#include "ratekeeper/redis/url.hpp"

namespace boost::asio {
class io_context;
}

namespace ratekeeper::redis::detail {

struct SubscriberOptions {
  Endpoint endpoint;
  Credentials credentials;
  std::shared_ptr<TlsContext> tls;  // set: TLS over TCP
  std::vector<std::string> channels;
  Micros connect_timeout = 1 * kMicrosPerSecond;  // connect, AUTH and SUBSCRIBE confirmation
  Micros reconnect_min = 50 * kMicrosPerMilli;
  Micros reconnect_max = 2 * kMicrosPerSecond;
  Micros ping_interval = 2 * kMicrosPerSecond;  // silence for twice this drops the connection
};

class Subscriber {
 public:
  using MessageCallback = std::function<void(std::string_view channel, std::string_view message)>;
  // Called each time the subscription is confirmed; `first` is false after a reconnection,
  // when messages may have been missed.
  using SubscribedCallback = std::function<void(bool first)>;

  // Starts connecting at once.
  Subscriber(boost::asio::io_context& context, SubscriberOptions options, MessageCallback on_message,
             SubscribedCallback on_subscribed = {});
  ~Subscriber();  // closes the connection; waits for the context's thread unless called on it
  Subscriber(const Subscriber&) = delete;
  Subscriber& operator=(const Subscriber&) = delete;

  bool subscribed() const noexcept;
  std::string status() const;  // "subscribed to <endpoint>" or the last error

  struct Stats {
    std::uint64_t messages = 0;       // messages received on the subscribed channels
    std::uint64_t subscriptions = 0;  // subscriptions confirmed (the first one included)
    std::uint64_t failures = 0;       // connections lost or attempts failed
  };
  Stats stats() const noexcept;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace ratekeeper::redis::detail
