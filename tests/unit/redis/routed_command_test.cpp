// The routing and retrying that redis::Cluster and redis::Sentinel share
// (src/redis/routed_command.hpp), driven by a scripted client on a manual clock: the backoff,
// the deadline, what is retried and what is not, and that every command completes once.

#include "redis/routed_command.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include "ratekeeper/core/clock.hpp"
#include "ratekeeper/core/event_loop.hpp"

namespace ratekeeper::redis::detail {
namespace {

using namespace std::chrono_literals;

TEST(RetryDelay, DoublesFromMinToMaxAndNeverPassesTheDeadline) {
  const RetryOptions o{1'000, 50'000};
  const Micros far = 100 * kMicrosPerSecond;
  EXPECT_EQ(retry_delay(o, 0, 0, far), 1'000);
  EXPECT_EQ(retry_delay(o, 1, 0, far), 2'000);
  EXPECT_EQ(retry_delay(o, 5, 0, far), 32'000);
  EXPECT_EQ(retry_delay(o, 6, 0, far), 50'000);  // 64 ms, capped
  EXPECT_EQ(retry_delay(o, 1'000, 0, far), 50'000);
  // Never past the deadline; none at or after it.
  EXPECT_EQ(retry_delay(o, 6, far - 7'000, far), 7'000);
  EXPECT_EQ(retry_delay(o, 0, far - 1, far), 1);
  EXPECT_EQ(retry_delay(o, 0, far, far), std::nullopt);
  EXPECT_EQ(retry_delay(o, 0, far + 1, far), std::nullopt);
  // Options out of range: at least 1 µs, max at least min.
  EXPECT_EQ(retry_delay(RetryOptions{0, 0}, 0, 0, far), 1);
  EXPECT_EQ(retry_delay(RetryOptions{-5, 0}, 3, 0, far), 1);
  EXPECT_EQ(retry_delay(RetryOptions{100, 10}, 4, 0, far), 100);
}

Reply status(std::string text) {
  Reply r;
  r.type = Reply::Type::status;
  r.str = std::move(text);
  return r;
}

Reply error_reply(std::string text) {
  Reply r;
  r.type = Reply::Type::error;
  r.str = std::move(text);
  return r;
}

// A client whose routing, transport and error replies the test scripts. Attempt n (from 0)
// goes to route's target and gets answers[n] (the last one when there are fewer).
struct ScriptedClient {
  struct Request : RoutedRequest {
    int redirect_to = 0;  // one shot: the target a redirection named
  };
  using Target = int;

  // How an attempt is answered: a reply from the server (on the loop thread), or a failure
  // on the sender's stack (not sent).
  struct Answer {
    Result<Reply> result;
    bool unsent = false;
  };

  explicit ScriptedClient(EventLoop& l) : loop(l) {}

  Result<Target> route(Request& req) {
    routes.fetch_add(1);
    if (no_route) return make_error(ErrorCode::redirect, "no master for the slot");
    return std::exchange(req.redirect_to, 0) != 0 ? 2 : 1;
  }

  void transmit(Request&, const Target& target, Micros, ReplyCallback cb) {
    Answer a;
    {
      std::lock_guard lock(mu);
      targets.push_back(target);
      a = answers.at(std::min(targets.size(), answers.size()) - 1);
    }
    if (a.unsent) {
      cb(std::move(a.result));
      return;
    }
    loop.post(0, [cb = std::move(cb), r = std::move(a.result)]() mutable { cb(std::move(r)); });
  }

  Disposition on_error_reply(Request& req, const Target&, const Reply& reply) {
    if (reply.error_code() == "LOADING")
      return Disposition::retry(Error{ErrorCode::unavailable, reply.str});
    if (reply.error_code() == "MOVED") {
      req.redirect_to = 2;
      return Disposition::resend();
    }
    if (reply.error_code() == "BAD")
      return Disposition::answer_with(Error{ErrorCode::protocol, "bad reply"});
    return Disposition::answer();
  }

  void reroute() { reroutes.fetch_add(1); }

  std::vector<int> sent_to() {
    std::lock_guard lock(mu);
    return targets;
  }

  EventLoop& loop;
  std::mutex mu;
  std::vector<Answer> answers{{status("OK")}};  // under mu
  std::vector<int> targets;                     // under mu: the target of each attempt
  bool no_route = false;
  std::atomic<int> routes{0};
  std::atomic<int> reroutes{0};
};

// The completion of one command: how many times done ran, and with what first.
struct Completion {
  std::atomic<int> calls{0};
  std::promise<Result<Reply>> promise;
  std::future<Result<Reply>> future = promise.get_future();

  ReplyCallback callback() {
    return [this](Result<Reply> r) {
      if (calls.fetch_add(1) == 0) promise.set_value(std::move(r));
    };
  }
  // The result, or nullopt when none came within 10 s.
  std::optional<Result<Reply>> get() {
    if (future.wait_for(10s) != std::future_status::ready) return std::nullopt;
    return future.get();
  }
};

struct RouterTest : ::testing::Test {
  ManualClock clock{0};
  EventLoop loop{1};
  ScriptedClient client{loop};
  std::unique_ptr<Router<ScriptedClient>> router = std::make_unique<Router<ScriptedClient>>(
      client, loop, clock, RetryOptions{100, 1'000}, "client closed");

  std::shared_ptr<ScriptedClient::Request> start(Completion& c,
                                                 Micros timeout = 10 * kMicrosPerSecond) {
    auto req = std::make_shared<ScriptedClient::Request>();
    req->done = c.callback();
    router->start(req, timeout);
    return req;
  }

  void TearDown() override {
    if (router) router->close();
    loop.barrier();  // nothing of this test runs on the loop once it returns
  }
};

TEST_F(RouterTest, ACommandThatDidNotRunIsRetriedAndAnsweredOnce) {
  client.answers = {{error_reply("LOADING Redis is loading")}, {status("OK")}};
  Completion c;
  auto req = start(c);
  auto r = c.get();
  ASSERT_TRUE(r);
  ASSERT_TRUE(*r) << r->error().message;
  EXPECT_EQ((*r)->str, "OK");
  EXPECT_EQ(client.sent_to(), (std::vector<int>{1, 1}));
  EXPECT_EQ(req->retries, 1);
  loop.barrier();
  EXPECT_EQ(c.calls.load(), 1);
}

TEST_F(RouterTest, ACommandNotSentIsRetriedAndTheClientReroutes) {
  client.answers = {{make_error(ErrorCode::circuit_open, "breaker open"), true}, {status("OK")}};
  Completion c;
  start(c);
  auto r = c.get();
  ASSERT_TRUE(r);
  ASSERT_TRUE(*r) << r->error().message;
  EXPECT_EQ((*r)->str, "OK");
  EXPECT_EQ(client.sent_to().size(), 2u);
  EXPECT_EQ(router->unsent_retries(), 1u);
  EXPECT_EQ(client.reroutes.load(), 1);
  loop.barrier();
  EXPECT_EQ(c.calls.load(), 1);
}

TEST_F(RouterTest, ACommandLostAfterBeingSentIsNotRetried) {
  // Dropped connection: it may have run. The topology may have changed: re-routed.
  client.answers = {{make_error(ErrorCode::unavailable, "connection lost")}, {status("OK")}};
  Completion lost;
  start(lost);
  auto r = lost.get();
  ASSERT_TRUE(r);
  ASSERT_FALSE(*r);
  EXPECT_EQ(r->error().code, ErrorCode::unavailable);
  EXPECT_EQ(client.sent_to().size(), 1u);
  EXPECT_EQ(client.reroutes.load(), 1);

  // Timed out: not retried either, and a slow server is no reason to re-route.
  client.targets.clear();
  client.answers = {{make_error(ErrorCode::timeout, "no reply")}, {status("OK")}};
  Completion timed_out;
  start(timed_out);
  r = timed_out.get();
  ASSERT_TRUE(r);
  ASSERT_FALSE(*r);
  EXPECT_EQ(r->error().code, ErrorCode::timeout);
  EXPECT_EQ(client.sent_to().size(), 1u);
  EXPECT_EQ(client.reroutes.load(), 1);
}

TEST_F(RouterTest, ARedirectionIsSentAtOnceToTheNamedTarget) {
  client.answers = {{error_reply("MOVED 1 127.0.0.1:2")}, {status("OK")}};
  Completion c;
  auto req = start(c);
  auto r = c.get();
  ASSERT_TRUE(r);
  ASSERT_TRUE(*r) << r->error().message;
  EXPECT_EQ(client.sent_to(), (std::vector<int>{1, 2}));
  EXPECT_EQ(req->retries, 0);  // no backoff
}

TEST_F(RouterTest, AnErrorReplyIsTheAnswerOrWhatTheClientMakesOfIt) {
  client.answers = {{error_reply("ERR unknown command")}};
  Completion plain;
  start(plain);
  auto r = plain.get();
  ASSERT_TRUE(r);
  ASSERT_TRUE(*r);
  EXPECT_TRUE((*r)->is_error());
  EXPECT_EQ((*r)->str, "ERR unknown command");

  client.answers = {{error_reply("BAD reply")}};
  Completion replaced;
  start(replaced);
  r = replaced.get();
  ASSERT_TRUE(r);
  ASSERT_FALSE(*r);
  EXPECT_EQ(r->error().code, ErrorCode::protocol);
  EXPECT_EQ(client.sent_to().size(), 2u);
}

TEST_F(RouterTest, RetriesStopAtTheDeadlineWithTheLastAttemptsError) {
  client.no_route = true;
  Completion c;
  start(c, 1 * kMicrosPerSecond);
  // Retried (every 1 ms at most) while the clock stands still before the deadline.
  const auto until = std::chrono::steady_clock::now() + 10s;
  while (client.routes.load() < 5 && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(1ms);
  ASSERT_GE(client.routes.load(), 5);
  EXPECT_EQ(c.calls.load(), 0);
  clock.advance(1 * kMicrosPerSecond);
  auto r = c.get();
  ASSERT_TRUE(r);
  ASSERT_FALSE(*r);
  EXPECT_EQ(r->error().code, ErrorCode::redirect);
  EXPECT_EQ(r->error().message, "no master for the slot");
  loop.barrier();
  EXPECT_EQ(c.calls.load(), 1);
}

TEST_F(RouterTest, ClosingAnswersCommandsWaitingForARetryAndRefusesNewOnes) {
  router = std::make_unique<Router<ScriptedClient>>(
      client, loop, clock, RetryOptions{3600 * kMicrosPerSecond, 3600 * kMicrosPerSecond},
      "client closed");
  client.no_route = true;
  Completion waiting;
  start(waiting);
  EXPECT_EQ(client.routes.load(), 1);  // now waiting an hour for its retry
  router->close();
  ASSERT_EQ(waiting.future.wait_for(0s), std::future_status::ready);  // before close() returned
  auto r = waiting.future.get();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::unavailable);
  EXPECT_EQ(r.error().message, "client closed");

  Completion after;
  start(after);
  ASSERT_EQ(after.future.wait_for(0s), std::future_status::ready);
  r = after.future.get();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::unavailable);
  EXPECT_EQ(client.routes.load(), 1);
  router.reset();  // the hour-long timer outlives the router harmlessly
  loop.barrier();
  EXPECT_EQ(waiting.calls.load(), 1);
  EXPECT_EQ(after.calls.load(), 1);
}

}  // namespace
}  // namespace ratekeeper::redis::detail
