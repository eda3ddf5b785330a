// End to end: a leased rule behind `ratekeeper serve`. Requests are admitted from leases
// (counted in /metrics), and on SIGTERM, after draining, the server gives the unused units
// back: the key in Redis counts exactly the admitted requests once it has exited.

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <string>

#include "support/http_client.hpp"
#include "support/redis_server.hpp"

namespace ratekeeper::testing {
namespace {

TEST(HttpLease, UnusedUnitsGoBackToRedisWhenTheServerStops) {
  RedisServer redis;
  ServerProcess::Options o;
  o.config_yaml = fmt::format(R"(
store: {{url: {}, command_timeout: 2s}}
rules:
  - name: api
    match: {{path: /api/data}}
    limits: [{{algorithm: fixed_window, limit: 1000, window: 30d}}]
    lease: {{max: 64, ttl: 1h}}
)",
                              redis.url());
  ServerProcess server(std::move(o));
  HttpClient client(server.port());
  for (int i = 0; i < 1 + 2 + 4 + 8 + 1; ++i) ASSERT_EQ(client.get("/api/data").status, 200);

  const auto metrics = client.get("/metrics").body;
  EXPECT_NE(metrics.find("ratekeeper_lease_leases_taken_total 5\n"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("ratekeeper_lease_units_granted_total 31\n"), std::string::npos) << metrics;
  const std::string key = "ratelimit:{ip:127.0.0.1}:api";
  const auto count = [&] {
    const auto value = redis.command({"GET", key});
    return value.substr(value.find(':') + 1);
  };
  EXPECT_EQ(count(), "31");  // leases of 1, 2, 4, 8 and 16 units, 15 of them unused

  server.signal(SIGTERM);
  const auto status = server.wait(std::chrono::seconds(20));
  ASSERT_TRUE(status.has_value()) << "still running:\n" << server.output();
  EXPECT_EQ(*status, 0) << server.output() << server.errors();
  EXPECT_EQ(count(), "16");
}

}  // namespace
}  // namespace ratekeeper::testing
