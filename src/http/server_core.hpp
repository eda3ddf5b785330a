#pragma once
// What http::Server and http::Proxy share: the listener (accepting connections and handing
// each to the next thread of the event loop, backing off when out of descriptors, logging
// accept errors at most once per interval), signals, the graceful drain, and the registry of
// live connections. Each connection runs on its socket's thread alone (one io_context per
// thread: no strand needed). A ServerCore makes its connections through make_connection().
//
// Thread-safety: stop(), stats and the registry may be used from any thread; the acceptor,
// signals and timers belong to the listener's thread (`home`).

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "ratekeeper/core/error.hpp"
#include "ratekeeper/core/log_limit.hpp"
#include "ratekeeper/http/server.hpp"
#include "stream.hpp"

namespace ratekeeper {
class EventLoop;
}

namespace ratekeeper::http {

class ServerCore;

// One client connection. Keeps its ServerCore alive and leaves its registry when destroyed.
class ClientConnection : public std::enable_shared_from_this<ClientConnection> {
 public:
  explicit ClientConnection(std::shared_ptr<ServerCore> core);
  virtual ~ClientConnection();
  ClientConnection(const ClientConnection&) = delete;
  ClientConnection& operator=(const ClientConnection&) = delete;

  // On the connection's thread, once registered.
  virtual void start() = 0;
  // From any thread. Graceful drain: finish what was received, read nothing more, close
  // when idle. The connection is marked draining before this returns (the rest runs on its
  // thread): every response it writes afterwards says Connection: close.
  virtual void shutdown() = 0;
  // From any thread: close now, whatever is in flight (the server is going away).
  virtual void abort() = 0;

 protected:
  template <class Derived>
  std::shared_ptr<Derived> self() {
    return std::static_pointer_cast<Derived>(shared_from_this());
  }

  std::shared_ptr<ServerCore> core_;
};

class ServerCore : public std::enable_shared_from_this<ServerCore> {
 public:
  ServerCore(ServerOptions options, EventLoop& loop);
  virtual ~ServerCore() = default;

  // Server's listen/run/stop/stats; destroy() is the owner's destructor (abort what is left
  // and wait for the loop to run the closes).
  Result<void> listen();
  void run();
  void stop();
  Server::Stats stats() const;
  void destroy(EventLoop& loop);

  void unregister(ClientConnection* c);
  // Registers a connection that takes over an accepted one's socket (the proxy's HTTP/2
  // session, once the HTTP/1.1 session has seen the protocol asked for). False while stopping:
  // the caller closes it.
  bool adopt(const std::shared_ptr<ClientConnection>& c);

  // The stream of an accepted connection: plain, or TLS with the listener's context of the
  // moment (ServerOptions::tls), which `tls` receives and must keep while the stream lives.
  Stream accept_stream(boost::asio::ip::tcp::socket&& socket, std::shared_ptr<TlsServerContext>& tls);
  // A client's TLS handshake failed (or timed out): counted, and logged at most once a second
  // with the reason.
  void tls_handshake_failed(const boost::system::error_code& ec, Stream& stream, const std::string& peer);

  ServerOptions options;
  std::string address;
  std::uint16_t port = 0;
  std::atomic<std::uint64_t> requests{0};
  std::atomic<std::uint64_t> handler_exceptions{0};
  std::atomic<std::uint64_t> tls_handshake_failures{0};
  std::atomic<bool> destroying{false};  // nothing may be posted any more

 protected:
  // A connection for an accepted socket (on the listener's thread; the socket belongs to the
  // connection's thread).
  virtual std::shared_ptr<ClientConnection> make_connection(boost::asio::ip::tcp::socket socket) = 0;

 private:
  void do_accept();
  void on_accept(boost::system::error_code ec, boost::asio::ip::tcp::socket socket);
  void on_accept_error(const boost::system::error_code& ec);
  void wait_signal();
  void on_stop();
  void finish();

  std::atomic<std::uint64_t> accepted_{0};
  std::atomic<std::uint64_t> accept_errors_{0};
  LogLimit tls_log_{"TLS handshakes failed", 1, 5};

  // Live connections, for the drain. Connections keep the core alive (shared_ptr), so they
  // may outlive the Server on a shared loop and still unregister here.
  mutable std::mutex mu_;
  std::unordered_map<ClientConnection*, std::weak_ptr<ClientConnection>> connections_;
  bool stopping_ = false;
  bool finished_ = false;  // run() may return
  std::condition_variable finished_cv_;

  EventLoop& loop_;  // owned by the Server or shared with it; outlives every connection
  boost::asio::io_context& home_;  // the listener's thread: acceptor, signals, drain timer
  boost::asio::ip::tcp::acceptor acceptor_;
  boost::asio::signal_set signals_;
  boost::asio::steady_timer drain_timer_;
  // Accept errors: backoff and rate-limited logging (listener thread only).
  boost::asio::steady_timer accept_timer_;
  std::chrono::milliseconds accept_backoff_{0};
  std::chrono::steady_clock::time_point accept_logged_at_{};
  std::uint64_t accept_errors_logged_ = 0;
};

// "127.0.0.1:8080", "[::1]:8080".
std::string format_endpoint(const boost::asio::ip::tcp::endpoint& ep);

// The peer's address (IPv4-mapped IPv6 as IPv4) and port; empty and 0 when unknown.
void peer_of(const boost::asio::ip::tcp::socket& socket, std::string& address, std::uint16_t& port);

// The wall clock in Unix microseconds (the access log's time).
inline Micros wall_now() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch()).count();
}

inline std::chrono::microseconds to_duration(Micros us) {
  return std::chrono::microseconds(us);
}

}  // namespace ratekeeper::http
