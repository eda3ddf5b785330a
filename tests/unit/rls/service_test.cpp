// rls::Service, Envoy's ShouldRateLimit over the Limiter: each test a domain file and the
// requests Envoy would send, answered over a MemoryStore (or a store that fails) at the time of
// a ManualClock.

#include "ratekeeper/rls/service.hpp"

#include <gtest/gtest.h>

#include <string>

#include "redis/key_slot.hpp"
#include "ratekeeper/store/memory_store.hpp"
#include "rls_service.hpp"

namespace ratekeeper::rls {
namespace {

using ratekeeper::testing::Entries;
using ratekeeper::testing::has_header;
using ratekeeper::testing::header;
using ratekeeper::testing::micros;
using ratekeeper::testing::RlsService;
using Request = pb::RateLimitRequest;
using Response = pb::RateLimitResponse;
using DescriptorStatus = pb::RateLimitResponse::DescriptorStatus;
using RateLimit = pb::RateLimitResponse::RateLimit;

constexpr Micros kSecond = kMicrosPerSecond;
constexpr Micros kDay = 86'400 * kSecond;
// 2023-11-14 12:34:56.789 UTC, day 19675 since the epoch: windows aligned at the epoch end
// 0.211 s (second), 3.211 s (minute), 25 min 3.211 s (hour) and 11 h 25 min 3.211 s (day)
// later; weeks of 7 days from the epoch (a Thursday) 1 day later still, months of 30 days 4.
constexpr Micros kStart = 19'675 * kDay + ((12 * 60 + 34) * 60 + 56) * kSecond + 789'000;
constexpr Micros kToNextSecond = 211'000;
constexpr Micros kToNextMinute = 3 * kSecond + 211'000;
constexpr Micros kToNextHour = (25 * 60 + 3) * kSecond + 211'000;
constexpr Micros kToNextDay = ((11 * 60 + 25) * 60 + 3) * kSecond + 211'000;
constexpr Micros kToNextWeek = kDay + kToNextDay;
constexpr Micros kToNextMonth = 4 * kDay + kToNextDay;

constexpr auto kOk = Response::OK;
constexpr auto kOver = Response::OVER_LIMIT;

Request request(std::initializer_list<Entries> descriptors, std::uint32_t hits_addend = 0) {
  return ratekeeper::testing::rls_request("d", descriptors, hits_addend);
}

// "name: 3 per MINUTE" (no name: "3 per MINUTE"); "none" without current_limit.
std::string limit_of(const DescriptorStatus& status) {
  if (!status.has_current_limit()) return "none";
  const auto& l = status.current_limit();
  std::string out = l.name().empty() ? "" : l.name() + ": ";
  return out + std::to_string(l.requests_per_unit()) + " per " + RateLimit::Unit_Name(l.unit());
}

// The value of `name` in metrics_text(), e.g. `ratekeeper_rls_descriptors_total{result="ok"}`.
std::string metric(const Service& service, std::string_view name) {
  const std::string text = service.metrics_text();
  const std::string prefix = std::string(name) + " ";
  for (std::size_t at = 0; at < text.size();) {
    const std::size_t end = text.find('\n', at);
    const std::string_view line(text.data() + at,
                                (end == std::string::npos ? text.size() : end) - at);
    if (line.starts_with(prefix)) return std::string(line.substr(prefix.size()));
    if (end == std::string::npos) break;
    at = end + 1;
  }
  return "absent";
}

class FailingStore final : public store::Store {
 public:
  void check(std::vector<store::CheckItem>, std::optional<Micros>,
             store::CheckCallback done) override {
    done(make_error(ErrorCode::unavailable, "connection refused"));
  }
  std::string_view kind() const noexcept override { return "failing"; }
};

class RlsServiceTest : public ::testing::Test {
 protected:
  ManualClock clock{kStart};
  store::MemoryStore store{
      store::MemoryStoreOptions{.max_keys = 10'000, .shards = 2, .clock = &clock}};

  RlsService service(std::string_view yaml, ServiceOptions options = {}) {
    return RlsService({yaml}, store, clock, options);
  }
};

// --- Statuses -------------------------------------------------------------------------------

TEST_F(RlsServiceTest, StatusesFollowTheRequestsDescriptorsWithLimitAndRemaining) {
  auto rls = service(R"(
domain: d
descriptors:
  - key: user
    rate_limit: {name: per_user, unit: minute, requests_per_unit: 3}
  - key: path
    rate_limit: {unit: hour, requests_per_unit: 10}
)");
  const auto r = rls.answer(request({{{"path", "/a"}}, {{"user", "alice"}}}));
  EXPECT_EQ(r.overall_code(), kOk);
  ASSERT_EQ(r.statuses_size(), 2);
  EXPECT_EQ(r.statuses(0).code(), kOk);
  EXPECT_EQ(limit_of(r.statuses(0)), "10 per HOUR");
  EXPECT_EQ(r.statuses(0).limit_remaining(), 9u);
  EXPECT_EQ(r.statuses(1).code(), kOk);
  EXPECT_EQ(limit_of(r.statuses(1)), "per_user: 3 per MINUTE");
  EXPECT_EQ(r.statuses(1).limit_remaining(), 2u);
}

TEST_F(RlsServiceTest, DurationUntilResetIsTheTimeToTheEndOfTheEpochAlignedWindow) {
  auto rls = service(R"(
domain: d
descriptors:
  - {key: s, rate_limit: {unit: second, requests_per_unit: 5}}
  - {key: m, rate_limit: {unit: minute, requests_per_unit: 5}}
  - {key: h, rate_limit: {unit: hour, requests_per_unit: 5}}
  - {key: d, rate_limit: {unit: day, requests_per_unit: 5}}
  - {key: w, rate_limit: {unit: week, requests_per_unit: 5}}
  - {key: mo, rate_limit: {unit: month, requests_per_unit: 5}}
)");
  const auto r = rls.answer(request(
      {{{"s", "x"}}, {{"m", "x"}}, {{"h", "x"}}, {{"d", "x"}}, {{"w", "x"}}, {{"mo", "x"}}}));
  ASSERT_EQ(r.statuses_size(), 6);
  EXPECT_EQ(micros(r.statuses(0).duration_until_reset()), kToNextSecond);
  EXPECT_EQ(micros(r.statuses(1).duration_until_reset()), kToNextMinute);
  EXPECT_EQ(micros(r.statuses(2).duration_until_reset()), kToNextHour);
  EXPECT_EQ(micros(r.statuses(3).duration_until_reset()), kToNextDay);
  EXPECT_EQ(micros(r.statuses(4).duration_until_reset()), kToNextWeek);
  EXPECT_EQ(micros(r.statuses(5).duration_until_reset()), kToNextMonth);

  // 1 s later the minute is nearer its end; at its end a new window starts, whole.
  clock.advance(kSecond);
  const auto later = rls.answer(request({{{"m", "x"}}}));
  EXPECT_EQ(micros(later.statuses(0).duration_until_reset()), kToNextMinute - kSecond);
  EXPECT_EQ(later.statuses(0).limit_remaining(), 3u);
  clock.advance(kToNextMinute - kSecond);
  const auto next = rls.answer(request({{{"m", "x"}}}));
  EXPECT_EQ(micros(next.statuses(0).duration_until_reset()), 60 * kSecond);
  EXPECT_EQ(next.statuses(0).limit_remaining(), 4u);
}

TEST_F(RlsServiceTest, OverLimitOverallWhenAnyDescriptorIsOver) {
  auto rls = service(R"(
domain: d
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 1}
)");
  EXPECT_EQ(rls.code(request({{{"user", "alice"}}})), kOk);
  const auto r = rls.answer(request({{{"user", "bob"}}, {{"user", "alice"}}}));
  EXPECT_EQ(r.overall_code(), kOver);
  EXPECT_EQ(r.statuses(0).code(), kOk);
  EXPECT_EQ(r.statuses(1).code(), kOver);
  EXPECT_EQ(limit_of(r.statuses(1)), "1 per MINUTE");
  EXPECT_EQ(r.statuses(1).limit_remaining(), 0u);
  EXPECT_EQ(micros(r.statuses(1).duration_until_reset()), kToNextMinute);
}

TEST_F(RlsServiceTest, ARequestOverOnOneDescriptorConsumesNothingFromTheOthers) {
  auto rls = service(R"(
domain: d
descriptors:
  - key: path
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 1}
)");
  EXPECT_EQ(rls.code(request({{{"user", "alice"}}})), kOk);
  const auto over = rls.answer(request({{{"path", "/a"}}, {{"user", "alice"}}}));
  EXPECT_EQ(over.overall_code(), kOver);
  EXPECT_EQ(over.statuses(0).code(), kOk);
  EXPECT_EQ(over.statuses(0).limit_remaining(), 5u);  // looked at, not taken
  EXPECT_EQ(over.statuses(1).code(), kOver);
  const auto alone = rls.answer(request({{{"path", "/a"}}}));
  EXPECT_EQ(alone.statuses(0).limit_remaining(), 4u);
}

// A descriptor whose node reserves takes the request's hits as an estimate and answers the
// reservation's id in dynamic metadata; Envoy's call at the end of the stream adds the id as
// an entry and the actual hits, which settles it once (the difference given back).
TEST_F(RlsServiceTest, AReservingDescriptorIsSettledByTheCallThatCarriesItsId) {
  auto rls = service(R"(
domain: d
descriptors:
  - key: api_key
    reserve: true
    rate_limit: {unit: minute, requests_per_unit: 1000}
  - key: path
    rate_limit: {unit: minute, requests_per_unit: 10}
)");
  const std::string key(kReservationKey);
  const auto reserved = rls.answer(request({{{"api_key", "k-1"}}}, 400));
  ASSERT_EQ(reserved.overall_code(), kOk);
  EXPECT_EQ(reserved.statuses(0).limit_remaining(), 600u);
  ASSERT_TRUE(reserved.has_dynamic_metadata());
  ASSERT_EQ(reserved.dynamic_metadata().fields_size(), 1);
  EXPECT_EQ(reserved.dynamic_metadata().fields(0).key(), key);
  const std::string id = reserved.dynamic_metadata().fields(0).value().string_value();
  EXPECT_TRUE(limiter::valid_reservation_id(id)) << id;

  const auto settle = request({{{"api_key", "k-1"}, {key, id}}}, 150);
  const auto settled = rls.answer(settle);
  EXPECT_EQ(settled.overall_code(), kOk);
  ASSERT_EQ(settled.statuses_size(), 1);
  EXPECT_FALSE(settled.has_dynamic_metadata());
  const auto peek = rls.answer(request({{{"api_key", "k-1"}}}, 1));
  EXPECT_EQ(peek.statuses(0).limit_remaining(), 849u);  // 150 settled, then 1
  EXPECT_EQ(rls.answer(settle).overall_code(), kOk);     // settled already: nothing changes
  EXPECT_EQ(rls.answer(request({{{"api_key", "k-1"}}}, 1)).statuses(0).limit_remaining(), 848u);
  // Not over: no id for a denial, nor for a descriptor that does not reserve.
  const auto over = rls.answer(request({{{"api_key", "k-1"}}}, 900));
  EXPECT_EQ(over.overall_code(), kOver);
  EXPECT_FALSE(over.has_dynamic_metadata());
  EXPECT_FALSE(rls.answer(request({{{"path", "/v1"}}}, 1)).has_dynamic_metadata());

  // A settlement mixed with other descriptors, or with a malformed id, is refused.
  EXPECT_EQ(rls.ask(request({{{"api_key", "k-1"}, {key, id}}, {{"path", "/v1"}}}, 1)).status,
            Status::invalid_argument);
  EXPECT_EQ(rls.ask(request({{{"api_key", "k-1"}, {key, "x"}}}, 1)).status, Status::invalid_argument);
  EXPECT_EQ(rls.ask(request({{{key, id}}}, 1)).status, Status::invalid_argument);
}

TEST_F(RlsServiceTest, UnknownDomainIsOkWithoutALimitAndCounted) {
  auto rls = service(R"(
domain: d
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 1}
)");
  for (int i = 0; i < 2; ++i) {
    const auto r = rls.answer(ratekeeper::testing::rls_request("other", {{{"user", "alice"}}}));
    EXPECT_EQ(r.overall_code(), kOk);
    ASSERT_EQ(r.statuses_size(), 1);
    EXPECT_EQ(r.statuses(0).code(), kOk);
    EXPECT_EQ(limit_of(r.statuses(0)), "none");
    EXPECT_EQ(r.response_headers_to_add_size(), 0);
  }
  EXPECT_EQ(metric(rls.service(), "ratekeeper_rls_unknown_domain_total"), "2");
  EXPECT_EQ(metric(rls.service(), R"(ratekeeper_rls_requests_total{result="ok"})"), "2");
}

TEST_F(RlsServiceTest, DescriptorsWithoutAMatchOrUnlimitedAreOkWithoutALimit) {
  auto rls = service(R"(
domain: d
descriptors:
  - key: internal
    rate_limit: {unlimited: true}
  - key: path
    descriptors:
      - key: user
        rate_limit: {unit: minute, requests_per_unit: 1}
)");
  for (int i = 0; i < 3; ++i) {
    const auto r = rls.answer(request({{{"internal", "yes"}}, {{"path", "/a"}}, {{"other", "x"}}}));
    EXPECT_EQ(r.overall_code(), kOk);
    ASSERT_EQ(r.statuses_size(), 3);
    for (const auto& s : r.statuses()) {
      EXPECT_EQ(s.code(), kOk);
      EXPECT_EQ(limit_of(s), "none");
    }
  }
  EXPECT_EQ(metric(rls.service(), R"(ratekeeper_rls_descriptors_total{result="no_limit"})"), "9");
}

// --- replaces -------------------------------------------------------------------------------

// envoyproxy/ratelimit's README, example 7: (key_1, value_1), (user, bkthomps) alone has its
// 5 per second; with (key_2, value_2), (user, bkthomps) in the same request, only the latter's
// 10 per second applies, and the replaced limit is not counted.
constexpr std::string_view kReplaces = R"(
domain: d
descriptors:
  - key: key_1
    value: value_1
    descriptors:
      - key: user
        value: bkthomps
        rate_limit: {name: specific_limit, requests_per_unit: 5, unit: second}
  - key: key_2
    value: value_2
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          replaces: [{name: specific_limit}]
          requests_per_unit: 10
          unit: second
)";
const Entries kSpecific = {{"key_1", "value_1"}, {"user", "bkthomps"}};
const Entries kReplacing = {{"key_2", "value_2"}, {"user", "bkthomps"}};

TEST_F(RlsServiceTest, ALimitReplacedByAnotherMatchedDescriptorIsNotApplied) {
  auto rls = service(kReplaces);
  for (int i = 0; i < 7; ++i) {
    const auto r = rls.answer(request({kSpecific, kReplacing}));
    EXPECT_EQ(r.overall_code(), kOk);
    EXPECT_EQ(r.statuses(0).code(), kOk);
    EXPECT_EQ(limit_of(r.statuses(0)), "none");
    EXPECT_EQ(limit_of(r.statuses(1)), "10 per SECOND");
    EXPECT_EQ(r.statuses(1).limit_remaining(), static_cast<std::uint32_t>(9 - i));
  }
  // Not counted while replaced: alone, it has its 5 whole.
  const auto alone = rls.answer(request({kSpecific}));
  EXPECT_EQ(limit_of(alone.statuses(0)), "specific_limit: 5 per SECOND");
  EXPECT_EQ(alone.statuses(0).limit_remaining(), 4u);
}

TEST_F(RlsServiceTest, AReplacingLimitAloneLeavesTheNamedLimitToItsOwnDescriptor) {
  auto rls = service(kReplaces);
  EXPECT_EQ(rls.answer(request({kReplacing})).statuses(0).limit_remaining(), 9u);
  const auto alone = rls.answer(request({kSpecific}));
  EXPECT_EQ(limit_of(alone.statuses(0)), "specific_limit: 5 per SECOND");
  EXPECT_EQ(alone.statuses(0).limit_remaining(), 4u);
}

TEST_F(RlsServiceTest, AnUnlimitedDescriptorReplacesTheLimitsItNames) {
  // envoyproxy/ratelimit collects `replaces` before it sets unlimited descriptors aside.
  auto rls = service(R"(
domain: d
descriptors:
  - key: user
    rate_limit: {name: per_user, unit: minute, requests_per_unit: 1}
  - key: vip
    rate_limit:
      unlimited: true
      replaces: [{name: per_user}]
)");
  for (int i = 0; i < 3; ++i) {
    const auto r = rls.answer(request({{{"user", "alice"}}, {{"vip", "yes"}}}));
    EXPECT_EQ(r.overall_code(), kOk);
    EXPECT_EQ(limit_of(r.statuses(0)), "none");
    EXPECT_EQ(limit_of(r.statuses(1)), "none");
  }
  EXPECT_EQ(rls.code(request({{{"user", "alice"}}})), kOk);
  EXPECT_EQ(rls.code(request({{{"user", "alice"}}})), kOver);
}

TEST_F(RlsServiceTest, ReplacingOneOfSeveralLimitsKeepsTheOthersCountingOnTheirOwnKeys) {
  auto rls = service(R"(
domain: d
descriptors:
  - key: user
    rate_limits:
      - {name: burst, unit: second, requests_per_unit: 2}
      - {name: daily, unit: day, requests_per_unit: 5}
  - key: plan
    value: unlimited_burst
    rate_limit:
      replaces: [{name: burst}]
      unit: second
      requests_per_unit: 100
)");
  const auto first = rls.answer(request({{{"user", "alice"}}}));
  EXPECT_EQ(limit_of(first.statuses(0)), "burst: 2 per SECOND");
  EXPECT_EQ(first.statuses(0).limit_remaining(), 1u);
  // The same daily counter, burst set aside.
  for (std::uint32_t remaining : {3u, 2u}) {
    const auto r = rls.answer(request({{{"user", "alice"}}, {{"plan", "unlimited_burst"}}}));
    EXPECT_EQ(r.statuses(0).code(), kOk);
    EXPECT_EQ(limit_of(r.statuses(0)), "daily: 5 per DAY");
    EXPECT_EQ(r.statuses(0).limit_remaining(), remaining);
  }
  // And the burst counter untouched by them: its second request of this second.
  const auto last = rls.answer(request({{{"user", "alice"}}}));
  EXPECT_EQ(last.statuses(0).code(), kOk);
  EXPECT_EQ(limit_of(last.statuses(0)), "burst: 2 per SECOND");
  EXPECT_EQ(last.statuses(0).limit_remaining(), 0u);
  EXPECT_EQ(rls.code(request({{{"user", "alice"}}})), kOver);
}

TEST_F(RlsServiceTest, ReplacingALimitKeepsEachOtherOnItsOwnCounterWhenTheyAreAlike) {
  // burst_a and burst_b count alike (5 per minute) but on counters of their own.
  auto rls = service(R"(
domain: d
descriptors:
  - key: user
    rate_limits:
      - {name: burst_a, unit: minute, requests_per_unit: 5}
      - {name: burst_b, unit: minute, requests_per_unit: 5}
      - {name: daily, unit: day, requests_per_unit: 100}
  - key: plan
    value: b_only
    rate_limit:
      replaces: [{name: burst_a}]
      unit: second
      requests_per_unit: 100
)");
  const auto replaced = rls.answer(request({{{"user", "alice"}}, {{"plan", "b_only"}}}));
  EXPECT_EQ(limit_of(replaced.statuses(0)), "burst_b: 5 per MINUTE");
  EXPECT_EQ(replaced.statuses(0).limit_remaining(), 4u);
  // burst_a 4 left, burst_b 3: burst_b binds.
  const auto both = rls.answer(request({{{"user", "alice"}}}));
  EXPECT_EQ(limit_of(both.statuses(0)), "burst_b: 5 per MINUTE");
  EXPECT_EQ(both.statuses(0).limit_remaining(), 3u);
}

// --- shadow_mode ----------------------------------------------------------------------------

constexpr std::string_view kShadow = R"(
domain: d
descriptors:
  - key: watched
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 2}
)";

TEST_F(RlsServiceTest, AShadowDescriptorIsCountedButAnsweredOkWhenOver) {
  auto rls = service(kShadow);
  const auto first = rls.answer(request({{{"watched", "x"}}}));
  EXPECT_EQ(first.statuses(0).code(), kOk);
  EXPECT_EQ(limit_of(first.statuses(0)), "1 per MINUTE");
  EXPECT_EQ(first.statuses(0).limit_remaining(), 0u);
  const auto second = rls.answer(request({{{"watched", "x"}}}));
  EXPECT_EQ(second.overall_code(), kOk);
  EXPECT_EQ(second.statuses(0).code(), kOk);
  EXPECT_EQ(limit_of(second.statuses(0)), "1 per MINUTE");
  EXPECT_EQ(second.statuses(0).limit_remaining(), 0u);
  EXPECT_FALSE(has_header(second, "Retry-After"));
  EXPECT_EQ(
      metric(rls.service(), R"(ratekeeper_rls_descriptors_total{result="shadow_over_limit"})"),
      "1");
}

TEST_F(RlsServiceTest, AShadowDescriptorOverDoesNotBlockTheOthers) {
  auto rls = service(kShadow);
  EXPECT_EQ(rls.code(request({{{"watched", "x"}}})), kOk);
  const auto r = rls.answer(request({{{"watched", "x"}}, {{"user", "alice"}}}));
  EXPECT_EQ(r.overall_code(), kOk);
  EXPECT_EQ(r.statuses(1).code(), kOk);
  EXPECT_EQ(r.statuses(1).limit_remaining(), 1u);
  EXPECT_EQ(rls.answer(request({{{"user", "alice"}}})).statuses(0).limit_remaining(), 0u);
}

TEST_F(RlsServiceTest, AShadowDescriptorIsCountedWhenAnotherIsOver) {
  auto rls = service(R"(
domain: d
descriptors:
  - key: watched
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: blocked
    rate_limit: {unit: minute, requests_per_unit: 0}
)");
  EXPECT_EQ(rls.code(request({{{"user", "alice"}}})), kOk);
  // Over by the count of another descriptor.
  const auto r = rls.answer(request({{{"watched", "x"}}, {{"user", "alice"}}}));
  EXPECT_EQ(r.overall_code(), kOver);
  EXPECT_EQ(r.statuses(0).code(), kOk);
  EXPECT_EQ(r.statuses(0).limit_remaining(), 4u);
  // Over without counting (a limit of 0).
  const auto zero = rls.answer(request({{{"watched", "x"}}, {{"blocked", "y"}}}));
  EXPECT_EQ(zero.overall_code(), kOver);
  EXPECT_EQ(zero.statuses(0).code(), kOk);
  EXPECT_EQ(zero.statuses(0).limit_remaining(), 3u);
  EXPECT_EQ(rls.answer(request({{{"watched", "x"}}})).statuses(0).limit_remaining(), 2u);
}

TEST_F(RlsServiceTest, AShadowDescriptorWithALimitOfZeroIsAnsweredOk) {
  auto rls = service(R"(
domain: d
descriptors:
  - key: watched
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 0}
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 2}
)");
  const auto r = rls.answer(request({{{"watched", "x"}}, {{"user", "alice"}}}));
  EXPECT_EQ(r.overall_code(), kOk);
  EXPECT_EQ(r.statuses(0).code(), kOk);
  EXPECT_EQ(limit_of(r.statuses(0)), "0 per MINUTE");
  EXPECT_EQ(r.statuses(1).limit_remaining(), 1u);  // counted: the shadow is no denial
}

// --- quota_mode (envoyproxy/ratelimit) -------------------------------------------------------

constexpr std::string_view kQuota = R"(
domain: d
descriptors:
  - key: service
    value: service_1
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
    metadata: {service_with_quota: {name: service_1}}
  - key: service
    value: service_2
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: blocked
    rate_limit: {unit: minute, requests_per_unit: 0}
)";

TEST_F(RlsServiceTest, AQuotaDescriptorOverMakesTheRequestOverOnlyWhenEveryQuotaIsOver) {
  auto rls = service(kQuota);
  const Entries one = {{"service", "service_1"}};
  const Entries two = {{"service", "service_2"}};
  EXPECT_EQ(rls.code(request({one, two})), kOk);
  // service_1 is over, service_2 is not: the descriptor says so, the request passes.
  const auto second = rls.answer(request({one, two}));
  EXPECT_EQ(second.overall_code(), kOk);
  EXPECT_EQ(second.statuses(0).code(), kOver);
  EXPECT_EQ(limit_of(second.statuses(0)), "1 per MINUTE");
  EXPECT_EQ(second.statuses(1).code(), kOk);
  EXPECT_EQ(second.statuses(1).limit_remaining(), 0u);
  EXPECT_FALSE(has_header(second, "Retry-After"));
  // Both over: the request is over.
  const auto third = rls.answer(request({one, two}));
  EXPECT_EQ(third.overall_code(), kOver);
  EXPECT_EQ(third.statuses(0).code(), kOver);
  EXPECT_EQ(third.statuses(1).code(), kOver);
  EXPECT_TRUE(has_header(third, "Retry-After"));
  // One quota descriptor alone is every quota descriptor of its request.
  EXPECT_EQ(rls.code(request({one})), kOver);
  EXPECT_EQ(metric(rls.service(), R"(ratekeeper_rls_descriptors_total{result="quota_over_limit"})"),
            "4");
  EXPECT_EQ(metric(rls.service(), R"(ratekeeper_rls_descriptors_total{result="over_limit"})"), "0");
}

TEST_F(RlsServiceTest, AQuotaDescriptorIsCountedApartFromTheOthers) {
  auto rls = service(kQuota);
  const Entries quota = {{"service", "service_1"}};
  const Entries user = {{"user", "alice"}};
  EXPECT_EQ(rls.code(request({quota})), kOk);
  // Every quota descriptor of the request is over: the request is over, but the quota does
  // not keep the enforcing descriptor from counting (envoyproxy/ratelimit counts both).
  const auto r = rls.answer(request({quota, user}));
  EXPECT_EQ(r.overall_code(), kOver);
  EXPECT_EQ(r.statuses(0).code(), kOver);
  EXPECT_EQ(r.statuses(1).code(), kOk);
  EXPECT_EQ(r.statuses(1).limit_remaining(), 4u);
  // Another quota descriptor passes: the request passes.
  const auto passes = rls.answer(request({quota, {{"service", "service_2"}}, user}));
  EXPECT_EQ(passes.overall_code(), kOk);
  EXPECT_EQ(passes.statuses(0).code(), kOver);
  EXPECT_EQ(passes.statuses(1).limit_remaining(), 1u);
  EXPECT_EQ(passes.statuses(2).limit_remaining(), 3u);
  // An enforcing descriptor over does not keep the quota descriptor from counting, as
  // envoyproxy/ratelimit counts it.
  const Entries two = {{"service", "service_2"}};
  const auto over = rls.answer(request({two, {{"blocked", "x"}}}));
  EXPECT_EQ(over.overall_code(), kOver);
  EXPECT_EQ(over.statuses(0).code(), kOk);
  EXPECT_EQ(over.statuses(0).limit_remaining(), 0u);
  EXPECT_EQ(over.statuses(1).code(), kOver);
  EXPECT_EQ(rls.answer(request({two})).statuses(0).code(), kOver);
}

TEST_F(RlsServiceTest, AQuotaDescriptorInShadowModeIsAnsweredOk) {
  auto rls = service(R"(
domain: d
descriptors:
  - key: service
    quota_mode: true
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
)");
  EXPECT_EQ(rls.code(request({{{"service", "a"}}})), kOk);
  const auto r = rls.answer(request({{{"service", "a"}}}));
  EXPECT_EQ(r.overall_code(), kOk);
  EXPECT_EQ(r.statuses(0).code(), kOk);
  EXPECT_EQ(r.statuses(0).limit_remaining(), 0u);
}

// --- share_threshold (envoyproxy/ratelimit) --------------------------------------------------

TEST_F(RlsServiceTest, ValuesOfAShareThresholdWildcardShareOneCounter) {
  auto rls = service(R"(
domain: d
descriptors:
  - key: files
    value: files/*
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: path
    value: /api*v1
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: own
    value: own/*
    rate_limit: {unit: minute, requests_per_unit: 1}
)");
  EXPECT_EQ(rls.code(request({{{"files", "files/a"}}})), kOk);
  const auto b = rls.answer(request({{{"files", "files/b"}}}));
  EXPECT_EQ(b.overall_code(), kOk);
  EXPECT_EQ(b.statuses(0).limit_remaining(), 0u);
  EXPECT_EQ(rls.code(request({{{"files", "files/c"}}})), kOver);
  // The same counter when two of its values come in one request.
  EXPECT_EQ(rls.code(request({{{"path", "/api/x/v1"}}, {{"path", "/api/y/v1"}}})), kOk);
  EXPECT_EQ(rls.code(request({{{"path", "/api/z/v1"}}})), kOver);
  // Without share_threshold, each value counts on its own.
  EXPECT_EQ(rls.code(request({{{"own", "own/a"}}})), kOk);
  EXPECT_EQ(rls.code(request({{{"own", "own/b"}}})), kOk);
  EXPECT_EQ(rls.code(request({{{"own", "own/a"}}})), kOver);
}

TEST_F(RlsServiceTest, AShareThresholdLevelSharesOnlyItsOwnEntry) {
  auto rls = service(R"(
domain: d
descriptors:
  - key: tenant
    value: t*
    share_threshold: true
    descriptors:
      - key: user
        rate_limit: {unit: minute, requests_per_unit: 1}
)");
  EXPECT_EQ(rls.code(request({{{"tenant", "t1"}, {"user", "alice"}}})), kOk);
  EXPECT_EQ(rls.code(request({{{"tenant", "t2"}, {"user", "alice"}}})), kOver);  // shared tenant
  EXPECT_EQ(rls.code(request({{{"tenant", "t2"}, {"user", "bob"}}})), kOk);      // own user
}

// Records the keys of every check, then asks `inner`.
class RecordingStore final : public store::Store {
 public:
  explicit RecordingStore(store::Store& inner) : inner_(inner) {}
  void check(std::vector<store::CheckItem> items, std::optional<Micros> deadline,
             store::CheckCallback done) override {
    std::vector<std::string> keys;
    for (const auto& item : items) keys.push_back(item.key);
    checks.push_back(std::move(keys));
    inner_.check(std::move(items), deadline, std::move(done));
  }
  std::string_view kind() const noexcept override { return "recording"; }

  std::vector<std::vector<std::string>> checks;

 private:
  store::Store& inner_;
};

TEST_F(RlsServiceTest, TheKeysOfASharedCounterAreOneAndInOneClusterSlot) {
  RecordingStore recording(store);
  RlsService rls({R"(
domain: d
descriptors:
  - key: files
    value: files/*
    share_threshold: true
    rate_limits:
      - {name: burst, unit: second, requests_per_unit: 5}
      - {name: daily, unit: day, requests_per_unit: 100}
)"},
                 recording, clock);
  EXPECT_EQ(rls.code(request({{{"files", "files/a"}}})), kOk);
  EXPECT_EQ(rls.code(request({{{"files", "files/b"}}})), kOk);
  ASSERT_EQ(recording.checks.size(), 2u);
  ASSERT_EQ(recording.checks[0].size(), 2u);
  EXPECT_EQ(recording.checks[0], recording.checks[1]);  // one counter for both values
  EXPECT_NE(recording.checks[0][0], recording.checks[0][1]);
  EXPECT_EQ(redis::key_slot(recording.checks[0][0]), redis::key_slot(recording.checks[0][1]));
  EXPECT_EQ(recording.checks[0][0].find("files/a"), std::string::npos);
}

// --- requests_per_unit: 0 -------------------------------------------------------------------

TEST_F(RlsServiceTest, ALimitOfZeroIsOverWithoutCountingAndTheOthersOnlyLook) {
  auto rls = service(R"(
domain: d
descriptors:
  - key: remote_address
    value: 50.0.0.5
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 2}
)");
  const auto r = rls.answer(request({{{"remote_address", "50.0.0.5"}}, {{"user", "alice"}}}));
  EXPECT_EQ(r.overall_code(), kOver);
  EXPECT_EQ(r.statuses(0).code(), kOver);
  EXPECT_EQ(limit_of(r.statuses(0)), "0 per SECOND");
  EXPECT_EQ(r.statuses(0).limit_remaining(), 0u);
  EXPECT_EQ(r.statuses(1).code(), kOk);
  EXPECT_EQ(r.statuses(1).limit_remaining(), 2u);
  EXPECT_EQ(rls.answer(request({{{"user", "alice"}}})).statuses(0).limit_remaining(), 1u);
}

// --- hits_addend ----------------------------------------------------------------------------

constexpr std::string_view kTen = R"(
domain: d
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: path
    rate_limit: {unit: minute, requests_per_unit: 10}
)";

TEST_F(RlsServiceTest, RequestHitsAddendOfZeroCountsOne) {
  auto rls = service(kTen);
  EXPECT_EQ(rls.answer(request({{{"user", "alice"}}}, 0)).statuses(0).limit_remaining(), 9u);
  EXPECT_EQ(rls.answer(request({{{"user", "alice"}}}, 1)).statuses(0).limit_remaining(), 8u);
}

TEST_F(RlsServiceTest, RequestHitsAddendIsCountedByEveryDescriptor) {
  auto rls = service(kTen);
  const auto r = rls.answer(request({{{"user", "alice"}}, {{"path", "/a"}}}, 3));
  EXPECT_EQ(r.statuses(0).limit_remaining(), 7u);
  EXPECT_EQ(r.statuses(1).limit_remaining(), 7u);
}

TEST_F(RlsServiceTest, DescriptorHitsAddendOverridesTheRequests) {
  auto rls = service(kTen);
  auto req = request({{{"user", "alice"}}, {{"path", "/a"}}}, 3);
  req.mutable_descriptors(1)->mutable_hits_addend()->set_value(5);
  const auto r = rls.answer(req);
  EXPECT_EQ(r.statuses(0).limit_remaining(), 7u);
  EXPECT_EQ(r.statuses(1).limit_remaining(), 5u);
}

TEST_F(RlsServiceTest, DescriptorHitsAddendOfZeroOnlyLooks) {
  auto rls = service(kTen);
  EXPECT_EQ(rls.answer(request({{{"user", "alice"}}}, 4)).statuses(0).limit_remaining(), 6u);
  auto peek = request({{{"user", "alice"}}}, 4);
  peek.mutable_descriptors(0)->mutable_hits_addend()->set_value(0);
  for (int i = 0; i < 3; ++i) {
    const auto r = rls.answer(peek);
    EXPECT_EQ(r.statuses(0).code(), kOk);
    EXPECT_EQ(r.statuses(0).limit_remaining(), 6u);
  }
}

TEST_F(RlsServiceTest, HitsAboveALimitsCapacityAreOverWithoutCounting) {
  auto rls = service(R"(
domain: d
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: path
    rate_limit: {unit: minute, requests_per_unit: 100}
)");
  const auto r = rls.answer(request({{{"user", "alice"}}, {{"path", "/a"}}}, 11));
  EXPECT_EQ(r.overall_code(), kOver);
  EXPECT_EQ(r.statuses(0).code(), kOver);
  EXPECT_EQ(limit_of(r.statuses(0)), "10 per MINUTE");
  EXPECT_EQ(r.statuses(1).code(), kOk);
  EXPECT_EQ(r.statuses(1).limit_remaining(), 100u);  // looked at, not taken
  // Nothing counted on either descriptor.
  const auto after = rls.answer(request({{{"user", "alice"}}, {{"path", "/a"}}}, 10));
  EXPECT_EQ(after.overall_code(), kOk);
  EXPECT_EQ(after.statuses(0).limit_remaining(), 0u);
  EXPECT_EQ(after.statuses(1).limit_remaining(), 90u);
}

// A sliding window log keeps one entry per hit: a call of more hits than one check may take
// (algorithms::kMaxLogCost) is refused at once, and counts nothing.
TEST_F(RlsServiceTest, HitsAboveWhatASlidingLogTakesInOneCheckAreRefused) {
  auto rls = service(R"(
domain: d
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 100000, algorithm: sliding_window_log}
)");
  const auto a = rls.ask(request({{{"user", "alice"}}}, 100'000));
  EXPECT_EQ(a.status, Status::invalid_argument);
  EXPECT_NE(a.message.find("sliding window log"), std::string::npos) << a.message;
  const auto after = rls.answer(request({{{"user", "alice"}}}, 1));
  EXPECT_EQ(after.overall_code(), kOk);
  EXPECT_EQ(after.statuses(0).limit_remaining(), 99'999u);
}

TEST_F(RlsServiceTest, DescriptorHitsAddendAboveUint32IsInvalid) {
  auto rls = service(kTen);
  auto req = request({{{"user", "alice"}}});
  req.mutable_descriptors(0)->mutable_hits_addend()->set_value(std::uint64_t{1} << 32);
  const auto a = rls.ask(req);
  EXPECT_EQ(a.status, Status::invalid_argument);
  EXPECT_NE(a.message.find("descriptors[0].hits_addend"), std::string::npos) << a.message;
  req.mutable_descriptors(0)->mutable_hits_addend()->set_value((std::uint64_t{1} << 32) - 1);
  EXPECT_EQ(rls.code(req), kOver);  // the largest allowed, above the limit
}

// --- limit override (RateLimitDescriptor.limit) ---------------------------------------------

Request with_override(Entries entries, std::uint32_t requests_per_unit,
                      envoy::type::v3::RateLimitUnit unit) {
  auto req = request({entries});
  auto* limit = req.mutable_descriptors(0)->mutable_limit();
  limit->set_requests_per_unit(requests_per_unit);
  limit->set_unit(unit);
  return req;
}

TEST_F(RlsServiceTest, ALimitOverrideIsAFixedWindowOfItsSizeAndUnit) {
  auto rls = service(kTen);
  const auto req = with_override({{"user", "alice"}}, 2, envoy::type::v3::MINUTE);
  for (std::uint32_t remaining : {1u, 0u}) {
    const auto r = rls.answer(req);
    EXPECT_EQ(r.statuses(0).code(), kOk);
    EXPECT_EQ(limit_of(r.statuses(0)), "2 per MINUTE");
    EXPECT_EQ(r.statuses(0).limit_remaining(), remaining);
    EXPECT_EQ(micros(r.statuses(0).duration_until_reset()), kToNextMinute);
  }
  EXPECT_EQ(rls.code(req), kOver);
  // The configured 10 per minute is counted apart.
  EXPECT_EQ(rls.answer(request({{{"user", "alice"}}})).statuses(0).limit_remaining(), 9u);
  clock.advance(kToNextMinute);
  EXPECT_EQ(rls.answer(req).statuses(0).limit_remaining(), 1u);
}

TEST_F(RlsServiceTest, LimitOverridesOfDifferentSizesAreCountedSeparately) {
  auto rls = service(kTen);
  const auto two = with_override({{"user", "alice"}}, 2, envoy::type::v3::HOUR);
  const auto three = with_override({{"user", "alice"}}, 3, envoy::type::v3::HOUR);
  EXPECT_EQ(rls.answer(two).statuses(0).limit_remaining(), 1u);
  EXPECT_EQ(rls.answer(two).statuses(0).limit_remaining(), 0u);
  EXPECT_EQ(rls.answer(three).statuses(0).limit_remaining(), 2u);
  EXPECT_EQ(micros(rls.answer(three).statuses(0).duration_until_reset()), kToNextHour);
}

TEST_F(RlsServiceTest, ALimitOverrideWithAnUnknownUnitIsInvalid) {
  auto rls = service(kTen);
  for (int unit : {0, 8}) {
    const auto a = rls.ask(
        with_override({{"user", "alice"}}, 2, static_cast<envoy::type::v3::RateLimitUnit>(unit)));
    EXPECT_EQ(a.status, Status::invalid_argument) << unit;
    EXPECT_NE(a.message.find("descriptors[0].limit.unit"), std::string::npos) << a.message;
  }
}

// --- invalid requests -----------------------------------------------------------------------

class RlsServiceInvalidTest : public RlsServiceTest {
 protected:
  // The message of a request refused as invalid_argument ("" when it was not).
  std::string refusal(const Request& req) {
    auto rls = service(
        kTen, ServiceOptions{.max_message_bytes = 1024, .max_descriptors = 2, .max_entries = 2});
    const auto a = rls.ask(req);
    EXPECT_EQ(metric(rls.service(), R"(ratekeeper_rls_requests_total{result="invalid_argument"})"),
              a.status == Status::invalid_argument ? "1" : "0");
    return a.status == Status::invalid_argument ? a.message : "";
  }
};

TEST_F(RlsServiceInvalidTest, AnEmptyDomainIsInvalid) {
  const auto message = refusal(ratekeeper::testing::rls_request("", {{{"user", "alice"}}}));
  EXPECT_NE(message.find("domain"), std::string::npos) << message;
}

TEST_F(RlsServiceInvalidTest, ARequestWithoutDescriptorsIsInvalid) {
  const auto message = refusal(request({}));
  EXPECT_NE(message.find("descriptors"), std::string::npos) << message;
}

TEST_F(RlsServiceInvalidTest, ADescriptorWithoutEntriesIsInvalid) {
  const auto message = refusal(request({{{"user", "alice"}}, {}}));
  EXPECT_NE(message.find("descriptors[1]"), std::string::npos) << message;
  EXPECT_NE(message.find("entries"), std::string::npos) << message;
}

TEST_F(RlsServiceInvalidTest, AnEmptyKeyIsInvalid) {
  const auto message = refusal(request({{{"user", "alice"}, {"", "x"}}}));
  EXPECT_NE(message.find("descriptors[0].entries[1].key"), std::string::npos) << message;
}

TEST_F(RlsServiceInvalidTest, MoreDescriptorsThanMaxDescriptorsIsInvalid) {
  EXPECT_EQ(refusal(request({{{"user", "a"}}, {{"user", "b"}}})), "");
  const auto message = refusal(request({{{"user", "a"}}, {{"user", "b"}}, {{"user", "c"}}}));
  EXPECT_NE(message.find("3 descriptors"), std::string::npos) << message;
}

TEST_F(RlsServiceInvalidTest, MoreEntriesThanMaxEntriesIsInvalid) {
  EXPECT_EQ(refusal(request({{{"a", "1"}, {"b", "2"}}})), "");
  const auto message = refusal(request({{{"a", "1"}, {"b", "2"}, {"c", "3"}}}));
  EXPECT_NE(message.find("descriptors[0]"), std::string::npos) << message;
  EXPECT_NE(message.find("3 entries"), std::string::npos) << message;
}

TEST_F(RlsServiceInvalidTest, AMessageAboveMaxMessageBytesIsInvalid) {
  EXPECT_EQ(refusal(request({{{"user", std::string(900, 'x')}}})), "");
  const auto message = refusal(request({{{"user", std::string(1100, 'x')}}}));
  EXPECT_NE(message.find("bytes"), std::string::npos) << message;
}

// --- store failure --------------------------------------------------------------------------

class RlsServiceStoreFailureTest : public RlsServiceTest {
 protected:
  FailingStore failing;

  RlsService over_failing_store(std::string_view yaml) {
    return RlsService({yaml}, failing, clock);
  }
};

TEST_F(RlsServiceStoreFailureTest, WithoutOnStoreErrorTheCallIsUnavailable) {
  auto rls = over_failing_store(R"(
domain: d
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 2}
)");
  const auto a = rls.ask(request({{{"user", "alice"}}}));
  EXPECT_EQ(a.status, Status::unavailable);
  EXPECT_FALSE(a.message.empty());
  EXPECT_EQ(metric(rls.service(), R"(ratekeeper_rls_requests_total{result="unavailable"})"), "1");
}

TEST_F(RlsServiceStoreFailureTest, OnStoreErrorDenyAnswersOverLimit) {
  auto rls = over_failing_store(R"(
domain: d
descriptors:
  - key: user
    on_store_error: deny
    rate_limit: {unit: minute, requests_per_unit: 2}
)");
  const auto r = rls.answer(request({{{"user", "alice"}}}));
  EXPECT_EQ(r.overall_code(), kOver);
  EXPECT_EQ(r.statuses(0).code(), kOver);
  EXPECT_EQ(limit_of(r.statuses(0)), "2 per MINUTE");
}

TEST_F(RlsServiceStoreFailureTest, OnStoreErrorAllowAnswersOk) {
  auto rls = over_failing_store(R"(
domain: d
descriptors:
  - key: user
    on_store_error: allow
    rate_limit: {unit: minute, requests_per_unit: 2}
)");
  for (int i = 0; i < 3; ++i) {
    const auto r = rls.answer(request({{{"user", "alice"}}}));
    EXPECT_EQ(r.overall_code(), kOk);
    EXPECT_EQ(limit_of(r.statuses(0)), "2 per MINUTE");
  }
}

TEST_F(RlsServiceStoreFailureTest, OnStoreErrorLocalAnswersFromTheLocalStore) {
  auto rls = over_failing_store(R"(
domain: d
descriptors:
  - key: user
    on_store_error: local
    rate_limit: {unit: minute, requests_per_unit: 2}
)");
  EXPECT_EQ(rls.answer(request({{{"user", "alice"}}})).statuses(0).limit_remaining(), 1u);
  EXPECT_EQ(rls.answer(request({{{"user", "alice"}}})).statuses(0).limit_remaining(), 0u);
  EXPECT_EQ(rls.code(request({{{"user", "alice"}}})), kOver);
  EXPECT_EQ(rls.code(request({{{"user", "bob"}}})), kOk);
  clock.advance(kToNextMinute);
  EXPECT_EQ(rls.code(request({{{"user", "alice"}}})), kOk);
}

TEST_F(RlsServiceStoreFailureTest, OnStoreErrorIsInheritedFromTheDomain) {
  auto rls = over_failing_store(R"(
domain: d
on_store_error: deny
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 2}
)");
  EXPECT_EQ(rls.code(request({{{"user", "alice"}}})), kOver);
}

TEST_F(RlsServiceStoreFailureTest, AQuotaDescriptorIsAnsweredOkAndCountedWhenTheStoreFails) {
  auto rls = over_failing_store(R"(
domain: d
descriptors:
  - key: service
    quota_mode: true
    on_store_error: deny
    rate_limit: {unit: minute, requests_per_unit: 2}
)");
  const auto r = rls.answer(request({{{"service", "a"}}}));
  EXPECT_EQ(r.overall_code(), kOk);
  EXPECT_EQ(r.statuses(0).code(), kOk);
  EXPECT_EQ(
      metric(rls.service(), R"(ratekeeper_rls_descriptors_total{result="quota_store_error"})"),
      "1");
  EXPECT_EQ(metric(rls.service(), R"(ratekeeper_rls_descriptors_total{result="ok"})"), "0");
}

TEST_F(RlsServiceStoreFailureTest, AShadowDescriptorIsAnsweredOkWhenTheStoreFails) {
  auto rls = over_failing_store(R"(
domain: d
descriptors:
  - key: watched
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 2}
)");
  const auto r = rls.answer(request({{{"watched", "x"}}}));
  EXPECT_EQ(r.overall_code(), kOk);
  EXPECT_EQ(r.statuses(0).code(), kOk);
}

// --- response headers -----------------------------------------------------------------------

constexpr std::string_view kThree = R"(
domain: d
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: free
    rate_limit: {unlimited: true}
)";

TEST_F(RlsServiceTest, ALimitedAnswerCarriesRateLimitHeadersAndNoRetryAfter) {
  auto rls = service(kThree);
  const auto r = rls.answer(request({{{"user", "alice"}}}));
  EXPECT_EQ(header(r, "RateLimit-Policy"), R"("rls.d.user";q=3;w=60)");
  EXPECT_EQ(header(r, "RateLimit"), R"("rls.d.user";r=2;t=4)");  // 3.211 s, rounded up
  EXPECT_FALSE(has_header(r, "Retry-After"));
}

TEST_F(RlsServiceTest, AnAnswerOverTheLimitCarriesRetryAfter) {
  auto rls = service(kThree);
  for (int i = 0; i < 3; ++i) rls.answer(request({{{"user", "alice"}}}));
  const auto r = rls.answer(request({{{"user", "alice"}}}));
  EXPECT_EQ(r.overall_code(), kOver);
  EXPECT_EQ(header(r, "RateLimit"), R"("rls.d.user";r=0;t=4)");
  EXPECT_EQ(header(r, "Retry-After"), "4");
}

TEST_F(RlsServiceTest, NoHeadersWhenResponseHeadersAreOff) {
  auto rls = service(kThree, ServiceOptions{.response_headers = false});
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(rls.answer(request({{{"user", "alice"}}})).response_headers_to_add_size(), 0);
  }
}

TEST_F(RlsServiceTest, NoHeadersWhenNoLimitApplied) {
  auto rls = service(kThree);
  const auto r = rls.answer(request({{{"free", "x"}}, {{"other", "y"}}}));
  EXPECT_EQ(r.response_headers_to_add_size(), 0);
}

// --- identities -----------------------------------------------------------------------------

TEST_F(RlsServiceTest, EntriesThatDifferOnlyBySeparatorsAreCountedApart) {
  auto rls = service(R"(
domain: d
descriptors:
  - key: a
    rate_limit: {unit: minute, requests_per_unit: 1}
    descriptors:
      - key: b
        rate_limit: {unit: minute, requests_per_unit: 1}
)");
  // "a=x|b=y|b=z" either way, were '|' and '=' not escaped.
  EXPECT_EQ(rls.code(request({{{"a", "x|b=y"}, {"b", "z"}}})), kOk);
  EXPECT_EQ(rls.code(request({{{"a", "x"}, {"b", "y|b=z"}}})), kOk);
  // "a=%7C" either way, were '%' not escaped.
  EXPECT_EQ(rls.code(request({{{"a", "|"}}})), kOk);
  EXPECT_EQ(rls.code(request({{{"a", "%7C"}}})), kOk);
  EXPECT_EQ(rls.code(request({{{"a", "="}}})), kOk);
  EXPECT_EQ(rls.code(request({{{"a", "%3D"}}})), kOk);
  // Each is its own counter, now used up.
  EXPECT_EQ(rls.code(request({{{"a", "x|b=y"}, {"b", "z"}}})), kOver);
  EXPECT_EQ(rls.code(request({{{"a", "%7C"}}})), kOver);
}

TEST_F(RlsServiceTest, AVeryLongValueIsCountedUnderItsOwnHashedIdentity) {
  auto rls = service(R"(
domain: d
descriptors:
  - key: token
    rate_limit: {unit: minute, requests_per_unit: 1}
)");
  const std::string value(10 * 1024, 'v');
  std::string other = value;
  other.back() = 'w';
  EXPECT_EQ(rls.code(request({{{"token", value}}})), kOk);
  EXPECT_EQ(rls.code(request({{{"token", value}}})), kOver);
  EXPECT_EQ(rls.code(request({{{"token", other}}})), kOk);
  EXPECT_EQ(rls.code(request({{{"token", other}}})), kOver);
}

// --- algorithms and several limits ----------------------------------------------------------

TEST_F(RlsServiceTest, ATokenBucketLimitIsOverUntilItsNextToken) {
  auto rls = service(R"(
domain: d
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 2, algorithm: token_bucket}
)");
  const auto first = rls.answer(request({{{"user", "alice"}}}));
  EXPECT_EQ(first.statuses(0).limit_remaining(), 1u);
  EXPECT_EQ(micros(first.statuses(0).duration_until_reset()), kSecond / 2);  // full again
  rls.answer(request({{{"user", "alice"}}}));
  const auto over = rls.answer(request({{{"user", "alice"}}}));
  EXPECT_EQ(over.statuses(0).code(), kOver);
  EXPECT_EQ(limit_of(over.statuses(0)), "2 per SECOND");
  EXPECT_EQ(micros(over.statuses(0).duration_until_reset()), kSecond / 2);  // its next token
  clock.advance(kSecond / 2);
  EXPECT_EQ(rls.code(request({{{"user", "alice"}}})), kOk);
  EXPECT_EQ(rls.code(request({{{"user", "alice"}}})), kOver);
}

TEST_F(RlsServiceTest, ASlidingWindowLogLimitCountsTheLastUnit) {
  auto rls = service(R"(
domain: d
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 2, algorithm: sliding_window_log}
)");
  EXPECT_EQ(rls.code(request({{{"user", "alice"}}})), kOk);
  clock.advance(30 * kSecond);  // past the epoch-aligned minute: a window would start anew
  EXPECT_EQ(rls.code(request({{{"user", "alice"}}})), kOk);
  const auto over = rls.answer(request({{{"user", "alice"}}}));
  EXPECT_EQ(over.statuses(0).code(), kOver);
  EXPECT_EQ(limit_of(over.statuses(0)), "2 per MINUTE");
  EXPECT_EQ(micros(over.statuses(0).duration_until_reset()), 30 * kSecond);  // the first leaves
}

TEST_F(RlsServiceTest, ASlidingWindowCounterLimitWeighsThePreviousWindow) {
  auto rls = service(R"(
domain: d
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 2, algorithm: sliding_window_counter}
)");
  EXPECT_EQ(rls.code(request({{{"user", "alice"}}})), kOk);
  EXPECT_EQ(rls.code(request({{{"user", "alice"}}})), kOk);
  clock.advance(kToNextMinute);  // a new window, the previous one still weighing all of it
  const auto over = rls.answer(request({{{"user", "alice"}}}));
  EXPECT_EQ(over.statuses(0).code(), kOver);
  EXPECT_EQ(limit_of(over.statuses(0)), "2 per MINUTE");
}

TEST_F(RlsServiceTest, SeveralLimitsReportTheOneWithTheFewestLeft) {
  auto rls = service(R"(
domain: d
descriptors:
  - key: user
    rate_limits:
      - {name: burst, unit: second, requests_per_unit: 5, algorithm: token_bucket}
      - {name: hourly, unit: hour, requests_per_unit: 3}
)");
  const auto r = rls.answer(request({{{"user", "alice"}}}));
  EXPECT_EQ(limit_of(r.statuses(0)), "hourly: 3 per HOUR");  // 2 left, burst 4
  EXPECT_EQ(r.statuses(0).limit_remaining(), 2u);
  EXPECT_EQ(micros(r.statuses(0).duration_until_reset()), kToNextHour);
}

TEST_F(RlsServiceTest, SeveralLimitsReportTheOneThatDenies) {
  auto rls = service(R"(
domain: d
descriptors:
  - key: user
    rate_limits:
      - {name: burst, unit: second, requests_per_unit: 2, algorithm: token_bucket}
      - {name: hourly, unit: hour, requests_per_unit: 3}
)");
  EXPECT_EQ(rls.code(request({{{"user", "alice"}}})), kOk);
  EXPECT_EQ(rls.code(request({{{"user", "alice"}}})), kOk);
  const auto burst = rls.answer(request({{{"user", "alice"}}}));
  EXPECT_EQ(burst.statuses(0).code(), kOver);
  EXPECT_EQ(limit_of(burst.statuses(0)), "burst: 2 per SECOND");
  EXPECT_EQ(micros(burst.statuses(0).duration_until_reset()), kSecond / 2);
  clock.advance(kSecond);
  EXPECT_EQ(rls.code(request({{{"user", "alice"}}})), kOk);  // the hourly third
  const auto hourly = rls.answer(request({{{"user", "alice"}}}));
  EXPECT_EQ(hourly.statuses(0).code(), kOver);
  EXPECT_EQ(limit_of(hourly.statuses(0)), "hourly: 3 per HOUR");
  EXPECT_EQ(micros(hourly.statuses(0).duration_until_reset()), kToNextHour - kSecond);
}

// --- one descriptor twice -------------------------------------------------------------------

TEST_F(RlsServiceTest, TheSameDescriptorTwiceInARequestIsOneCounterTakingBothHits) {
  // As Envoy sends it when two of its actions produce the same descriptor.
  auto rls = service(kTen);
  const auto r = rls.answer(request({{{"user", "alice"}}, {{"path", "/a"}}, {{"user", "alice"}}}));
  EXPECT_EQ(r.overall_code(), kOk);
  EXPECT_EQ(r.statuses(0).limit_remaining(), 8u);
  EXPECT_EQ(r.statuses(1).limit_remaining(), 9u);
  EXPECT_EQ(r.statuses(2).limit_remaining(), 8u);
  // 6 hits twice is above the limit: over, nothing counted.
  const auto over = rls.answer(request({{{"user", "alice"}}, {{"user", "alice"}}}, 6));
  EXPECT_EQ(over.overall_code(), kOver);
  EXPECT_EQ(over.statuses(0).code(), kOver);
  EXPECT_EQ(over.statuses(1).code(), kOver);
  EXPECT_EQ(rls.answer(request({{{"user", "alice"}}})).statuses(0).limit_remaining(), 7u);
}

// --- metrics --------------------------------------------------------------------------------

TEST_F(RlsServiceTest, MetricsCountRequestsAndDescriptorsByResult) {
  auto rls = service(R"(
domain: d
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 1}
)");
  rls.answer(request({{{"user", "alice"}}, {{"none", "x"}}}));
  rls.answer(request({{{"user", "alice"}}}));
  const auto& s = rls.service();
  EXPECT_EQ(metric(s, R"(ratekeeper_rls_requests_total{result="ok"})"), "1");
  EXPECT_EQ(metric(s, R"(ratekeeper_rls_requests_total{result="over_limit"})"), "1");
  EXPECT_EQ(metric(s, R"(ratekeeper_rls_descriptors_total{result="ok"})"), "1");
  EXPECT_EQ(metric(s, R"(ratekeeper_rls_descriptors_total{result="over_limit"})"), "1");
  EXPECT_EQ(metric(s, R"(ratekeeper_rls_descriptors_total{result="no_limit"})"), "1");
}

}  // namespace
}  // namespace ratekeeper::rls
