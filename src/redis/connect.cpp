#include "connect.hpp"

#include <boost/asio/error.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/post.hpp>
#include <future>
#include <memory>
#include <vector>

namespace ratekeeper::redis::detail {
namespace asio = boost::asio;
using Socket = asio::generic::stream_protocol::socket;
using Target = asio::generic::stream_protocol::endpoint;

namespace {

struct Attempt {
  Socket& socket;
  std::vector<Target> targets;
  std::function<void(std::string)> done;
};

void try_target(const std::shared_ptr<Attempt>& attempt, std::size_t index) {
  boost::system::error_code ignored;
  attempt->socket.close(ignored);
  const Target target = attempt->targets[index];
  attempt->socket.async_connect(target, [attempt, index](const boost::system::error_code& ec) {
    if (!ec) {
      attempt->done({});
    } else if (index + 1 < attempt->targets.size() && ec != asio::error::operation_aborted) {
      // (Aborted: the owner closed the socket, it may already be another attempt's.)
      try_target(attempt, index + 1);
    } else {
      attempt->done("connect failed: " + ec.message());
    }
  });
}

void open_targets(Socket& socket, std::vector<Target> targets, std::function<void(std::string)> done) {
  try_target(std::make_shared<Attempt>(Attempt{socket, std::move(targets), std::move(done)}), 0);
}

}  // namespace

void async_open(Socket& socket, asio::ip::tcp::resolver& resolver, const Endpoint& endpoint,
                std::function<void(std::string error)> done) {
  if (endpoint.is_unix()) {
    open_targets(socket, {Target(asio::local::stream_protocol::endpoint(endpoint.path))}, std::move(done));
    return;
  }
  boost::system::error_code ec;
  const auto address = asio::ip::make_address(endpoint.host, ec);
  if (!ec) {
    open_targets(socket, {Target(asio::ip::tcp::endpoint(address, static_cast<unsigned short>(endpoint.port)))},
                 std::move(done));
    return;
  }
  resolver.async_resolve(endpoint.host, std::to_string(endpoint.port),
                         [&socket, done = std::move(done)](const boost::system::error_code& rec,
                                                          const asio::ip::tcp::resolver::results_type& results) mutable {
                           if (rec || results.empty()) {
                             done("cannot resolve: " + (rec ? rec.message() : std::string("no address")));
                             return;
                           }
                           std::vector<Target> targets;
                           for (const auto& r : results) targets.emplace_back(r.endpoint());
                           open_targets(socket, std::move(targets), std::move(done));
                         });
}

void run_on_and_wait(asio::io_context& context, const std::function<void()>& fn) {
  if (context.get_executor().running_in_this_thread()) {
    fn();
    return;
  }
  std::promise<void> ran;
  auto done = ran.get_future();
  asio::post(context, [&fn, &ran] {
    fn();
    ran.set_value();
  });
  done.wait();
}

}  // namespace ratekeeper::redis::detail
