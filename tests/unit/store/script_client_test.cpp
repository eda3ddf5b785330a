// The script client (store/script_client.hpp) against a scripted sender: the argument
// vectors of "multi_at" and "refund" (the calls behind a refund across Redis Cluster slots),
// FCALL and the loading of the library, the fallbacks to scripts, the NOSCRIPT → EVAL
// fallback, and the parsing of their replies.

#include "store/redis/script_client.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "store/redis/lua_scripts.hpp"
#include "store/redis/lease_script.hpp"

namespace ratekeeper::store::detail {
namespace {

using algorithms::Algorithm;

redis::Reply integer(std::int64_t v) {
  redis::Reply r;
  r.type = redis::Reply::Type::integer;
  r.integer = v;
  return r;
}

redis::Reply array(const std::vector<std::int64_t>& values) {
  redis::Reply r;
  r.type = redis::Reply::Type::array;
  for (auto v : values) r.elements.push_back(integer(v));
  return r;
}

redis::Reply error(const std::string& text) {
  redis::Reply r;
  r.type = redis::Reply::Type::error;
  r.str = text;
  return r;
}

// The server's clock in a TIME reply.
redis::Reply time_reply(Micros at) {
  redis::Reply r;
  r.type = redis::Reply::Type::array;
  for (const Micros part : {at / kMicrosPerSecond, at % kMicrosPerSecond}) {
    redis::Reply e;
    e.type = redis::Reply::Type::string;
    e.str = std::to_string(part);
    r.elements.push_back(std::move(e));
  }
  return r;
}

// A TIME (the client's sample of the server's clock): counted, and answered with `server_time`
// when set, else never (the calls then carry no deadline).
bool clock_sample(std::span<const std::string_view> argv, redis::ReplyCallback& done, int& samples,
                  std::optional<Micros> server_time) {
  if (argv.empty() || argv[0] != "TIME") return false;
  ++samples;
  if (server_time) done(time_reply(*server_time));
  return true;
}

// Records each command it is given and answers with the next scripted reply.
struct ScriptedSender {
  std::vector<std::vector<std::string>> sent;
  std::vector<redis::Reply> replies;
  int samples = 0;
  std::optional<Micros> server_time;

  std::vector<std::uint16_t> slots;

  ScriptSender sender() {
    return [this](std::uint16_t slot, std::span<const std::string_view> argv, Micros, redis::ReplyCallback done) {
      if (clock_sample(argv, done, samples, server_time)) return;
      slots.push_back(slot);
      sent.emplace_back(argv.begin(), argv.end());
      const redis::Reply reply = replies.at(sent.size() - 1);
      done(reply);
    };
  }
};

std::vector<CheckItem> items() {
  return {{"a:{x}:1", *algorithms::Limit::make(Algorithm::token_bucket, 10, 1000), 2},
          {"a:{x}:2", *algorithms::Limit::make(Algorithm::fixed_window, 5, 60'000'000), 1}};
}

ManualClock clock(0);

Micros far() { return clock.steady() + 60'000'000; }

TEST(ScriptClient, TimedCheckSendsMultiAtAndParsesTheInstant) {
  ScriptedSender s;
  s.replies = {array({1, 5, 3, 0, 9, /*first*/ 1, 10, 8, 0, 2000, /*second*/ 1, 5, 4, 0, 9, /*at*/ 1234})};
  std::optional<Result<TimedOutcome>> got;
  const auto batch = items();
  ScriptClient client(s.sender(), nullptr, &clock, false);
  run_timed_check(client, 7, batch, std::nullopt, far(), [&](Result<TimedOutcome> r) { got = std::move(r); });
  ASSERT_EQ(s.sent.size(), 1u);
  EXPECT_EQ(s.slots, (std::vector<std::uint16_t>{7}));
  EXPECT_EQ(s.sent[0][1], find_lua_script("multi_at")->sha);
  const std::vector<std::string> expected{"EVALSHA", s.sent[0][1], "2", "a:{x}:1", "a:{x}:2", "-1",
                                          "0",       "10",         "1000", "2",     "3",       "5",
                                          "60000000", "1"};
  EXPECT_EQ(s.sent[0], expected);
  ASSERT_TRUE(got && *got) << (got ? got->error().message : "no answer");
  EXPECT_EQ((*got)->at, 1234);
  EXPECT_TRUE((*got)->outcome.decision.allowed);
  ASSERT_EQ((*got)->outcome.items.size(), 2u);
  EXPECT_EQ((*got)->outcome.items[0].reset_after, 2000);
  EXPECT_EQ((*got)->outcome.items[1].remaining, 4);
}

TEST(ScriptClient, RefundSendsTheInstantsAndResetAfterAndFallsBackToEvalOnce) {
  ScriptedSender s;
  s.replies = {error("NOSCRIPT No matching script"), array({1, 1, 10, 10, 0, 0, 0, 1, 5, 5, 0, 0})};
  ScriptHealth replies;
  ScriptClient client(s.sender(), &replies, &clock, false);
  std::optional<Result<RefundOutcome>> got;
  const std::vector<Micros> reset_after{2000, 59'000'000};
  run_refund(client, 3, items(), reset_after, 777, 1000, far(), [&](Result<RefundOutcome> r) { got = std::move(r); });
  ASSERT_EQ(s.sent.size(), 2u);
  EXPECT_EQ(s.sent[0][0], "EVALSHA");
  EXPECT_EQ(s.sent[1][0], "EVAL");
  EXPECT_EQ(s.sent[1][1], *lua_script("refund"));
  EXPECT_EQ(s.slots, (std::vector<std::uint16_t>{3, 3}));
  const std::vector<std::string> args(s.sent[1].begin() + 2, s.sent[1].end());
  const std::vector<std::string> expected{"2", "a:{x}:1", "a:{x}:2", "777", "1000", "0",        "10", "1000",
                                          "2", "2000",    "3",       "5",   "60000000", "1", "59000000"};
  EXPECT_EQ(args, expected);
  EXPECT_EQ(replies.noscript_reloads(), 1u);
  ASSERT_TRUE(got && *got) << (got ? got->error().message : "no answer");
  EXPECT_EQ((*got)->refunded, (std::vector<bool>{true, false}));
  EXPECT_EQ((*got)->items[0].remaining, 10);
  EXPECT_EQ((*got)->items[1].limit, 5);
}

TEST(ScriptClient, ASecondNoscriptIsAnError) {
  ScriptedSender s;
  s.replies = {error("NOSCRIPT No matching script"), error("NOSCRIPT No matching script")};
  std::optional<Result<RefundOutcome>> got;
  ScriptClient client(s.sender(), nullptr, &clock, false);
  run_refund(client, 0, items(), {1, 1}, 0, std::nullopt, far(), [&](Result<RefundOutcome> r) { got = std::move(r); });
  EXPECT_EQ(s.sent.size(), 2u);
  ASSERT_TRUE(got);
  ASSERT_FALSE(*got);
  EXPECT_EQ(got->error().code, ErrorCode::reply);
}

redis::Reply ok() {
  redis::Reply r;
  r.type = redis::Reply::Type::status;
  r.str = "OK";
  return r;
}

const std::vector<std::int64_t> kTimed{1, 5, 3, 0, 9, 1, 10, 8, 0, 2000, 1, 5, 4, 0, 9, 1234};

// A "multi_at" call through `client`; its answer.
std::optional<Result<TimedOutcome>> timed_check(ScriptClient& client) {
  std::optional<Result<TimedOutcome>> got;
  run_timed_check(client, 5, items(), std::nullopt, far(), [&](Result<TimedOutcome> r) { got = std::move(r); });
  return got;
}

// FCALL of the script's function; a server without the library gets it (FUNCTION LOAD on the
// call's slot) and the call once more.
TEST(ScriptClient, FcallLoadsTheLibraryWhereItIsMissingAndCallsAgain) {
  ScriptedSender s;
  s.replies = {error("ERR Function not found"), ok(), array(kTimed), array(kTimed)};
  ScriptHealth health;
  ScriptClient client(s.sender(), &health, &clock);
  auto got = timed_check(client);
  ASSERT_EQ(s.sent.size(), 3u);
  EXPECT_EQ(s.sent[0][0], "FCALL");
  EXPECT_EQ(s.sent[0][1], find_lua_script("multi_at")->function);
  EXPECT_EQ(s.sent[1], (std::vector<std::string>{"FUNCTION", "LOAD", std::string(lua_library().source)}));
  EXPECT_EQ(s.sent[2], s.sent[0]);
  EXPECT_EQ(s.slots, (std::vector<std::uint16_t>{5, 5, 5}));
  ASSERT_TRUE(got && *got) << (got ? got->error().message : "no answer");
  EXPECT_EQ((*got)->at, 1234);
  EXPECT_EQ(health.library_loads(), 1u);
  // Loaded: the next call is one FCALL.
  got = timed_check(client);
  ASSERT_EQ(s.sent.size(), 4u);
  EXPECT_EQ(s.sent[3][0], "FCALL");
  EXPECT_TRUE(client.functions());
}

// Loaded by another call meanwhile: FUNCTION LOAD says so, and the call goes again. A
// function still missing after the load (the call ran on a node importing its slot, through
// ASK, where the load went to the slot's owner) sends this call as a script, EVALSHA then
// EVAL with its source, which reach the node the call is redirected to; later calls still
// go as FCALL.
TEST(ScriptClient, ALibraryLoadedMeanwhileIsUsedAndASecondMissingFunctionSendsTheCallAsAScript) {
  ScriptedSender s;
  s.replies = {error("ERR Function not found"), error("ERR Library 'x' already exists"),
               error("ERR Function not found"), error("NOSCRIPT No matching script."), array(kTimed)};
  ScriptClient client(s.sender(), nullptr, &clock);
  auto got = timed_check(client);
  ASSERT_EQ(s.sent.size(), 5u);
  EXPECT_EQ(s.sent[2][0], "FCALL");
  EXPECT_EQ(s.sent[3][0], "EVALSHA");
  EXPECT_EQ(s.sent[4][0], "EVAL");
  ASSERT_TRUE(got);
  EXPECT_TRUE(*got);
  EXPECT_TRUE(client.functions());
}

// A server that refuses FCALL (an ACL, Redis before 7) or FUNCTION LOAD: the call goes as a
// script, and so does every later call.
TEST(ScriptClient, RefusedFunctionsFallBackToScriptsForGood) {
  for (const auto& refusal :
       {std::vector<redis::Reply>{error("NOPERM this user has no permissions to run the 'fcall' command")},
        std::vector<redis::Reply>{error("ERR unknown command 'FCALL', with args beginning with: ")},
        std::vector<redis::Reply>{error("ERR Function not found"),
                                  error("NOPERM this user has no permissions to run the 'function|load' command")}}) {
    ScriptedSender s;
    s.replies = refusal;
    s.replies.insert(s.replies.end(), {error("NOSCRIPT No matching script"), array(kTimed), array(kTimed)});
    ScriptHealth health;
    ScriptClient client(s.sender(), &health, &clock);
    auto got = timed_check(client);
    const std::size_t refused = refusal.size();
    ASSERT_EQ(s.sent.size(), refused + 2);
    EXPECT_EQ(s.sent[refused][0], "EVALSHA");
    EXPECT_EQ(s.sent[refused + 1][0], "EVAL");
    ASSERT_TRUE(got && *got) << (got ? got->error().message : "no answer");
    EXPECT_FALSE(client.functions());
    EXPECT_EQ(health.functions_refusals(), 1u);
    got = timed_check(client);
    ASSERT_EQ(s.sent.size(), refused + 3);
    EXPECT_EQ(s.sent.back()[0], "EVALSHA");
    ASSERT_TRUE(got && *got);
  }
}

// Under maxmemory Redis refuses an FCALL that may write before it runs: that call goes as a
// script (which is refused only its writes); functions stay in use.
TEST(ScriptClient, OutOfMemorySendsThatCallAsAScript) {
  ScriptedSender s;
  s.replies = {error("OOM command not allowed when used memory > 'maxmemory'."), array(kTimed), array(kTimed)};
  ScriptClient client(s.sender(), nullptr, &clock);
  auto got = timed_check(client);
  ASSERT_EQ(s.sent.size(), 2u);
  EXPECT_EQ(s.sent[1][0], "EVALSHA");
  ASSERT_TRUE(got && *got);
  EXPECT_TRUE(client.functions());
  got = timed_check(client);
  EXPECT_EQ(s.sent.back()[0], "FCALL");
}

// No answer to FUNCTION LOAD in time: the call's answer.
TEST(ScriptClient, ALoadWithoutAnswerIsTheCallsAnswer) {
  ScriptedSender s;
  s.replies = {error("ERR Function not found")};
  bool timed_out = false;
  ScriptSender sender = [&](std::uint16_t slot, std::span<const std::string_view> argv, Micros,
                            redis::ReplyCallback done) {
    if (clock_sample(argv, done, s.samples, std::nullopt)) return;
    s.slots.push_back(slot);
    s.sent.emplace_back(argv.begin(), argv.end());
    if (s.sent.size() == 1) {
      done(s.replies[0]);
    } else {
      timed_out = true;
      done(make_error(ErrorCode::timeout, "no reply in time"));
    }
  };
  ScriptClient client(sender, nullptr, &clock);
  auto got = timed_check(client);
  ASSERT_TRUE(timed_out);
  ASSERT_EQ(s.sent.size(), 2u);
  ASSERT_TRUE(got);
  ASSERT_FALSE(*got);
  EXPECT_EQ(got->error().code, ErrorCode::timeout);
  EXPECT_TRUE(client.functions());
}

// An error reply is a reply error, or an auth error when it refuses the connection's rights
// or credentials (redis::reply_error).
TEST(ScriptClient, MalformedRepliesAreProtocolErrorsAndErrorRepliesReplyOrAuthErrors) {
  EXPECT_EQ(parse_timed_outcome(error("ERR ratekeeper: bad"), 1).error().code, ErrorCode::reply);
  // "multi" of one item without the instant.
  EXPECT_EQ(parse_timed_outcome(array({1, 5, 4, 0, 1, 1, 5, 4, 0, 1}), 1).error().code, ErrorCode::protocol);
  auto one = parse_timed_outcome(array({1, 5, 4, 0, 1, 1, 5, 4, 0, 1, 42}), 1);
  ASSERT_TRUE(one) << one.error().message;
  EXPECT_EQ(one->at, 42);
  redis::Reply text = array({1, 5, 4, 0, 1, 1});
  text.elements[5].type = redis::Reply::Type::string;
  EXPECT_EQ(parse_refund(text, 1).error().code, ErrorCode::protocol);
  EXPECT_EQ(parse_refund(array({1, 5, 4, 0, 1}), 1).error().code, ErrorCode::protocol);
  EXPECT_EQ(parse_refund(error("ERR unknown"), 1).error().code, ErrorCode::reply);
  for (const char* refusal : {"NOPERM this user has no permissions", "NOAUTH Authentication required.",
                              "WRONGPASS invalid username-password pair"}) {
    EXPECT_EQ(parse_refund(error(refusal), 1).error().code, ErrorCode::auth) << refusal;
    EXPECT_EQ(parse_timed_outcome(error(refusal), 1).error().code, ErrorCode::auth) << refusal;
  }
  EXPECT_EQ(parse_refund(error("NOPERMISSION x"), 1).error().code, ErrorCode::reply);
}

// Once the server's clock is sampled (TIME), a check, a cross-slot part and a lease grant
// carry their deadline on it ("now:deadline", the deadline at the latest the server's clock
// reading when the caller gives up); a refund never does; before the sample nothing does.
TEST(ScriptClient, CallsButRefundsCarryTheirDeadlineOnTheServersClock) {
  const Micros server = 1'700'000'000'000'000;
  const Micros left = 60'000'000;  // far()
  const auto deadline_of = [&](const std::string& now_arg) -> std::optional<Micros> {
    const auto colon = now_arg.find(':');
    if (colon == std::string::npos) return std::nullopt;
    return std::stoll(now_arg.substr(colon + 1));
  };
  Micros started = 0;
  const auto expect_bounded = [&](const std::string& now_arg, const std::string& now) {
    const auto deadline = deadline_of(now_arg);
    ASSERT_TRUE(deadline) << now_arg;
    EXPECT_EQ(now_arg.substr(0, now_arg.find(':')), now);
    // The server's clock when the call was sent (T at the sample, plus what has passed since),
    // and `left`.
    EXPECT_GE(*deadline, server + left) << now_arg;
    EXPECT_LE(*deadline, server + left + (ServerClock::steady_now() - started)) << now_arg;
  };

  ScriptedSender unsampled;
  unsampled.replies = {array({1, 5, 3, 0, 9, 1, 10, 8, 0, 2000, 1, 5, 4, 0, 9, 1234})};
  ScriptClient before(unsampled.sender(), nullptr, &clock, false);
  run_timed_check(before, 7, items(), std::nullopt, far(), [](Result<TimedOutcome>) {});
  EXPECT_EQ(unsampled.samples, 1);
  ASSERT_EQ(unsampled.sent.size(), 1u);
  EXPECT_EQ(unsampled.sent[0][5], "-1");  // no answer to TIME yet: no deadline

  ScriptedSender s;
  s.server_time = server;
  started = ServerClock::steady_now();
  s.replies = {array({1, 5, 3, 0, 9, 1, 10, 8, 0, 2000, 1, 5, 4, 0, 9, 1234}),
               array({1, 1, 10, 10, 0, 0, 0, 1, 5, 5, 0, 0}),
               array({4, 1, 10, 6, 0, 400, 1234}),
               array({1, 5, 3, 0, 9, 1, 10, 8, 0, 2000, 1, 5, 4, 0, 9, 1234})};
  ScriptClient client(s.sender(), nullptr, &clock, false);
  std::optional<Result<TimedOutcome>> timed;
  run_timed_check(client, 7, items(), std::nullopt, far(), [&](Result<TimedOutcome> r) { timed = std::move(r); });
  ASSERT_TRUE(timed && *timed) << (timed ? timed->error().message : "no answer");
  ASSERT_EQ(s.sent.size(), 1u);
  expect_bounded(s.sent[0][5], "-1");

  run_refund(client, 3, items(), std::vector<Micros>{2000, 59'000'000}, 777, std::nullopt, far(),
             [](Result<RefundOutcome>) {});
  ASSERT_EQ(s.sent.size(), 2u);
  EXPECT_EQ(s.sent[1][6], "-1");  // the refund's `now`, unbounded

  const CheckItem leased{"a:{x}:1", *algorithms::Limit::make(Algorithm::token_bucket, 10, 1000), 1};
  std::optional<Result<LeaseGrant>> grant;
  run_lease_grant(client, 3, leased, 4, 5000, far(), [&](Result<LeaseGrant> r) { grant = std::move(r); });
  ASSERT_EQ(s.sent.size(), 3u);
  ASSERT_EQ(s.sent[2].size(), 2u + 1 + 1 + 6);
  expect_bounded(s.sent[2].back(), "5000");  // an explicit `now` keeps it; the deadline is the server's

  run_timed_check(client, 7, items(), 42, far(), [](Result<TimedOutcome>) {});
  ASSERT_EQ(s.sent.size(), 4u);
  expect_bounded(s.sent[3][5], "42");
  EXPECT_EQ(s.samples, 1);  // one sample for all of them
}

// A call Redis ran after its deadline answers TIMEOUT: a timeout for the caller, not a
// failure of the scripts (the store stays ready).
TEST(ScriptClient, ACallRunAfterItsDeadlineIsATimeout) {
  ScriptedSender s;
  s.replies = {error("TIMEOUT ratekeeper: the call ran 12 us after its deadline: nothing done")};
  ScriptHealth health;
  ScriptClient client(s.sender(), &health, &clock, false);
  std::optional<Result<TimedOutcome>> got;
  run_timed_check(client, 7, items(), std::nullopt, far(), [&](Result<TimedOutcome> r) { got = std::move(r); });
  ASSERT_TRUE(got);
  ASSERT_FALSE(*got);
  EXPECT_EQ(got->error().code, ErrorCode::timeout);
  EXPECT_FALSE(health.failing());
}

}  // namespace
}  // namespace ratekeeper::store::detail
