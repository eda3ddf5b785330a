// `ratekeeper serve` on a TLS store configured in its file (store.url rediss://, store.tls):
// ready and deciding when the certificate checks out; with a CA that did not sign the server's
// certificate, /readyz says not ready and why, and requests are answered by the failure policy
// within the deadline instead of waiting.

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "support/eventually.hpp"
#include "support/http_client.hpp"
#include "support/redis_server.hpp"
#include "support/tls_certs.hpp"

namespace ratekeeper::testing {
namespace {

using TlsRedis = TlsRedisServer;

std::string config(int tls_port, const std::filesystem::path& ca) {
  return fmt::format(R"(
store:
  url: rediss://127.0.0.1:{}
  command_timeout: 200ms
  connect_timeout: 300ms
  tls:
    ca_file: {}
failure_policy:
  default: deny
rules:
  - name: api
    match: {{path: /api/data}}
    limits:
      - {{capacity: 2, refill_rate: 0.001}}
)",
                     tls_port, ca.string());
}

TEST(HttpTlsStore, ServesDecisionsOverTls) {
  TlsRedis redis;
  ServerProcess::Options o;
  o.config_yaml = config(redis.tls_port, tls_certs().ca);
  ServerProcess server(std::move(o));
  HttpClient client(server.port());
  ASSERT_TRUE(eventually([&] { return client.get("/readyz").status == 200; })) << client.get("/readyz").body;
  EXPECT_EQ(client.get("/api/data").status, 200);
  EXPECT_EQ(client.get("/api/data").status, 200);
  EXPECT_EQ(client.get("/api/data").status, 429);
  EXPECT_EQ(redis.server.command({"DBSIZE"}), "1");
}

TEST(HttpTlsStore, AnUntrustedCertificateIsNotReadyAndTheFailurePolicyAnswers) {
  TlsRedis redis;
  ServerProcess::Options o;
  o.config_yaml = config(redis.tls_port, tls_certs().other_ca);
  ServerProcess server(std::move(o));
  HttpClient client(server.port());
  ASSERT_TRUE(eventually([&] {
    return client.get("/readyz").body.find("certificate verify failed") != std::string::npos;
  }, std::chrono::seconds(10)))
      << client.get("/readyz").body;
  EXPECT_EQ(client.get("/readyz").status, 503);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(client.get("/api/data").status, 429);  // failure_policy deny
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
  EXPECT_EQ(redis.server.command({"DBSIZE"}), "0");
}

}  // namespace
}  // namespace ratekeeper::testing
