// Exceptions thrown on event-loop threads, in Redis reply callbacks and by the HTTP handler
// are contained: counted, and the process goes on; an HTTP request whose handling threw is
// answered 500.

#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <chrono>
#include <future>
#include <memory>
#include <stdexcept>
#include <string>

#include "ratekeeper/core/contained.hpp"
#include "ratekeeper/core/event_loop.hpp"
#include "ratekeeper/http/server.hpp"
#include "redis/connection.hpp"
#include "support/http_client.hpp"
#include "support/redis_server.hpp"

namespace ratekeeper::testing {
namespace {

using namespace std::chrono_literals;

TEST(ContainedExceptions, AThrowingHandlerDoesNotStopTheLoop) {
  EventLoop loop(1);
  const auto before = contained_exceptions();
  loop.post(0, [] { throw std::runtime_error("handler failure"); });
  std::promise<void> ran;
  loop.post(0, [&ran] { ran.set_value(); });
  ASSERT_EQ(ran.get_future().wait_for(5s), std::future_status::ready);
  EXPECT_EQ(contained_exceptions(), before + 1);
}

TEST(ContainedExceptions, AThrowingReplyCallbackLeavesTheConnectionUsable) {
  RedisServer redis;
  auto loop = std::make_shared<EventLoop>(1);
  redis::ConnectionOptions options;
  options.endpoint.host = "127.0.0.1";
  options.endpoint.port = redis.port();
  options.command_timeout = 5 * kMicrosPerSecond;
  redis::Connection connection(*loop, options, 0);
  const auto before = contained_exceptions();
  // Three commands in one pipeline; the first callback throws, the others still get replies.
  std::promise<std::string> second, third;
  connection.command({"PING"}, [](Result<redis::Reply>) { throw std::runtime_error("callback failure"); });
  connection.command({"PING"}, [&second](Result<redis::Reply> r) {
    second.set_value(r ? r->str : r.error().message);
  });
  connection.command({"PING"}, [&third](Result<redis::Reply> r) {
    third.set_value(r ? r->str : r.error().message);
  });
  auto s = second.get_future(), t = third.get_future();
  ASSERT_EQ(s.wait_for(5s), std::future_status::ready);
  ASSERT_EQ(t.wait_for(5s), std::future_status::ready);
  EXPECT_EQ(s.get(), "PONG");
  EXPECT_EQ(t.get(), "PONG");
  EXPECT_EQ(contained_exceptions(), before + 1);
}

class ThrowingHandlers : public ::testing::Test {
 protected:
  void SetUp() override {
    http::ServerOptions options;
    options.port = 0;
    options.handle_signals = false;
    options.loop = loop_;
    server_ = std::make_unique<http::Server>(options, [this](http::Request request,
                                                             http::Responder respond) {
      if (request.target == "/inline") throw std::runtime_error("inline failure");
      if (request.target == "/later") {
        // The continuation throws on the loop, holding the responder.
        loop_->post(0, [respond = std::move(respond)] {
          throw std::runtime_error("continuation failure");
        });
        return;
      }
      respond(http::Response{200, "text/plain", {}, "ok"});
    });
    ASSERT_TRUE(server_->listen());
    runner_ = std::thread([this] { server_->run(); });
  }
  void TearDown() override {
    server_->stop();
    runner_.join();
    server_.reset();
  }

  std::shared_ptr<EventLoop> loop_ = std::make_shared<EventLoop>(1);
  std::unique_ptr<http::Server> server_;
  std::thread runner_;
};

TEST_F(ThrowingHandlers, AnInlineThrowIsAnswered500AndCounted) {
  HttpClient client(server_->port());
  EXPECT_EQ(client.get("/inline").status, 500);
  EXPECT_EQ(client.get("/fine").status, 200);
  EXPECT_EQ(server_->stats().handler_exceptions, 1u);
}

TEST_F(ThrowingHandlers, AContinuationThatThrowsOnTheLoopIsAnswered500) {
  const auto before = contained_exceptions();
  HttpClient client(server_->port());
  EXPECT_EQ(client.get("/later").status, 500);
  EXPECT_EQ(client.get("/fine").status, 200);
  EXPECT_EQ(contained_exceptions(), before + 1);
}

}  // namespace
}  // namespace ratekeeper::testing
