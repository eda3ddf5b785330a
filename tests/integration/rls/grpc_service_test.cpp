// End to end: `ratekeeper serve` with a `grpc:` section answers Envoy's
// RateLimitService.ShouldRateLimit over a real HTTP/2 socket, counting in a real redis-server:
// statuses and headers as Envoy reads them, bad requests refused, a burst admitted exactly,
// a dead store answered within the deadline.

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <grpcpp/grpcpp.h>

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "envoy/service/ratelimit/v3/rls.grpc.pb.h"
#include "support/eventually.hpp"
#include "support/http_client.hpp"
#include "support/redis_server.hpp"

namespace ratekeeper::testing {
namespace {

namespace pb = ::envoy::service::ratelimit::v3;
using Code = pb::RateLimitResponse::Code;

// A server whose rate limit service reads the domain files given.
struct RlsServer {
  std::filesystem::path dir = fresh_dir("rls");
  std::unique_ptr<ServerProcess> process;
  std::unique_ptr<pb::RateLimitService::Stub> stub;
  int grpc_port = 0;

  // The store's deadline is generous by default: under the sanitizers a check queued behind
  // a burst can take longer than the default 100 ms, and the service would answer UNAVAILABLE.
  RlsServer(const std::vector<std::pair<std::string, std::string>>& domains, std::string store_url,
            std::string extra_yaml = "store:\n  command_timeout: 10s\n") {
    std::filesystem::create_directories(dir / "domains");
    for (const auto& [name, text] : domains) std::ofstream(dir / "domains" / name) << text;
    ServerProcess::Options o;
    o.config_yaml = "grpc:\n  listen: 127.0.0.1:0\n  config: " + (dir / "domains").string() + "\n" + extra_yaml;
    o.store_url = std::move(store_url);
    process = std::make_unique<ServerProcess>(std::move(o));
    static constexpr std::string_view kMarker = "rate limit service (gRPC) on 127.0.0.1:";
    const std::string out = process->log();
    const auto at = out.find(kMarker);
    if (at == std::string::npos) throw std::runtime_error("no gRPC address in the log:\n" + out);
    grpc_port = std::stoi(out.substr(at + kMarker.size()));
    stub = pb::RateLimitService::NewStub(grpc::CreateChannel(
        "127.0.0.1:" + std::to_string(grpc_port), grpc::InsecureChannelCredentials()));
  }

  grpc::Status call(const pb::RateLimitRequest& request, pb::RateLimitResponse& response,
                    std::chrono::milliseconds deadline = std::chrono::seconds(5)) const {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + deadline);
    return stub->ShouldRateLimit(&context, request, &response);
  }
};

pb::RateLimitRequest request(std::string domain,
                             std::vector<std::vector<std::pair<std::string, std::string>>> descriptors,
                             std::uint32_t hits = 0) {
  pb::RateLimitRequest r;
  r.set_domain(std::move(domain));
  for (const auto& entries : descriptors) {
    auto* d = r.add_descriptors();
    for (const auto& [k, v] : entries) {
      auto* e = d->add_entries();
      e->set_key(k);
      e->set_value(v);
    }
  }
  r.set_hits_addend(hits);
  return r;
}

std::string header(const pb::RateLimitResponse& r, std::string_view name) {
  for (const auto& h : r.response_headers_to_add()) {
    if (h.key() == name) return h.value();
  }
  return {};
}

// envoyproxy/ratelimit's example with sliding window logs: the tests count exactly, and a
// fixed window (the default, covered by the unit tests on a manual clock) could be split by a
// minute or hour boundary between two calls.
constexpr std::string_view kMongo = R"(domain: mongo_cps
descriptors:
  - key: database
    value: users
    rate_limit:
      unit: minute
      requests_per_unit: 3
      algorithm: sliding_window_log
  - key: database
    value: default
    rate_limit:
      name: default_db
      unit: minute
      requests_per_unit: 500
      algorithm: sliding_window_log
  - key: remote_address
    rate_limit:
      unit: hour
      requests_per_unit: 2
      algorithm: sliding_window_log
)";

TEST(RlsGrpc, StatusesLimitsAndHeadersAsEnvoyReadsThem) {
  RedisServer redis;
  RlsServer server({{"mongo.yaml", std::string(kMongo)}}, redis.url());

  for (int i = 0; i < 3; ++i) {
    pb::RateLimitResponse r;
    ASSERT_TRUE(server.call(request("mongo_cps", {{{"database", "users"}}}), r).ok());
    EXPECT_EQ(r.overall_code(), pb::RateLimitResponse::OK);
    ASSERT_EQ(r.statuses_size(), 1);
    EXPECT_EQ(r.statuses(0).code(), pb::RateLimitResponse::OK);
    EXPECT_EQ(r.statuses(0).current_limit().requests_per_unit(), 3u);
    EXPECT_EQ(r.statuses(0).current_limit().unit(), pb::RateLimitResponse::RateLimit::MINUTE);
    EXPECT_EQ(r.statuses(0).limit_remaining(), static_cast<std::uint32_t>(2 - i));
    EXPECT_GT(r.statuses(0).duration_until_reset().seconds(), 0);
    EXPECT_LE(r.statuses(0).duration_until_reset().seconds(), 60);
    EXPECT_FALSE(header(r, "RateLimit-Policy").empty());
    EXPECT_NE(header(r, "RateLimit").find(";r=" + std::to_string(2 - i)), std::string::npos)
        << header(r, "RateLimit");
    EXPECT_EQ(header(r, "Retry-After"), "");
  }
  pb::RateLimitResponse over;
  ASSERT_TRUE(server.call(request("mongo_cps", {{{"database", "users"}}}), over).ok());
  EXPECT_EQ(over.overall_code(), pb::RateLimitResponse::OVER_LIMIT);
  EXPECT_EQ(over.statuses(0).code(), pb::RateLimitResponse::OVER_LIMIT);
  EXPECT_EQ(over.statuses(0).limit_remaining(), 0u);
  EXPECT_FALSE(header(over, "Retry-After").empty());

  // The named limit is reported by name; a descriptor without a limit is OK without one;
  // several descriptors answer one status each, in order.
  pb::RateLimitResponse mixed;
  ASSERT_TRUE(server.call(request("mongo_cps", {{{"database", "default"}}, {{"nothing", "here"}}}), mixed).ok());
  ASSERT_EQ(mixed.statuses_size(), 2);
  EXPECT_EQ(mixed.overall_code(), pb::RateLimitResponse::OK);
  EXPECT_EQ(mixed.statuses(0).current_limit().name(), "default_db");
  EXPECT_EQ(mixed.statuses(0).limit_remaining(), 499u);
  EXPECT_FALSE(mixed.statuses(1).has_current_limit());
  EXPECT_EQ(mixed.statuses(1).code(), pb::RateLimitResponse::OK);

  // Each value of a key-only descriptor is counted on its own.
  for (const char* ip : {"10.0.0.1", "10.0.0.2"}) {
    for (int i = 0; i < 2; ++i) {
      pb::RateLimitResponse r;
      ASSERT_TRUE(server.call(request("mongo_cps", {{{"remote_address", ip}}}), r).ok());
      EXPECT_EQ(r.overall_code(), pb::RateLimitResponse::OK) << ip;
    }
  }
  pb::RateLimitResponse third;
  ASSERT_TRUE(server.call(request("mongo_cps", {{{"remote_address", "10.0.0.1"}}}), third).ok());
  EXPECT_EQ(third.overall_code(), pb::RateLimitResponse::OVER_LIMIT);

  // An unknown domain: OK, no limit, counted.
  pb::RateLimitResponse unknown;
  ASSERT_TRUE(server.call(request("nobody", {{{"database", "users"}}}), unknown).ok());
  EXPECT_EQ(unknown.overall_code(), pb::RateLimitResponse::OK);
  EXPECT_FALSE(unknown.statuses(0).has_current_limit());

  const auto metrics = http_get(server.process->port(), "/metrics");
  EXPECT_EQ(metric_value(metrics.body, "ratekeeper_rls_unknown_domain_total"), 1.0) << metrics.body;
  EXPECT_EQ(metric_value(metrics.body, R"(ratekeeper_rls_requests_total{result="over_limit"})"), 2.0);
}

TEST(RlsGrpc, DescriptorsOfOneRequestAreConsumedAllOrNothing) {
  RedisServer redis;
  RlsServer server({{"d.yaml", R"(domain: d
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 10, algorithm: sliding_window_log}
  - key: tenant
    rate_limit: {unit: hour, requests_per_unit: 1, algorithm: sliding_window_log}
)"}},
                   redis.url());
  pb::RateLimitResponse r;
  ASSERT_TRUE(server.call(request("d", {{{"user", "u"}}, {{"tenant", "t"}}}), r).ok());
  EXPECT_EQ(r.overall_code(), pb::RateLimitResponse::OK);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(server.call(request("d", {{{"user", "u"}}, {{"tenant", "t"}}}), r).ok());
    EXPECT_EQ(r.overall_code(), pb::RateLimitResponse::OVER_LIMIT);
    EXPECT_EQ(r.statuses(0).code(), pb::RateLimitResponse::OK);  // user alone would pass
    EXPECT_EQ(r.statuses(1).code(), pb::RateLimitResponse::OVER_LIMIT);
  }
  // The denied requests took nothing from the user's limit: 9 of 10 left.
  ASSERT_TRUE(server.call(request("d", {{{"user", "u"}}}), r).ok());
  EXPECT_EQ(r.statuses(0).limit_remaining(), 8u);
}

// Envoy's two calls of a stream with a cost known at its end, over gRPC on real Redis: the
// request-path call reserves its hits and answers the id in dynamic metadata; the stream-done
// call carries the id as an entry and the actual hits, and settles it once.
TEST(RlsGrpc, AReservationIsSettledByTheStreamDoneCall) {
  RedisServer redis;
  RlsServer server({{"d.yaml", R"(domain: d
descriptors:
  - key: api_key
    reserve: true
    rate_limit: {unit: hour, requests_per_unit: 1000}
)"}},
                   redis.url());
  pb::RateLimitResponse r;
  ASSERT_TRUE(server.call(request("d", {{{"api_key", "k"}}}, 300), r).ok());
  ASSERT_EQ(r.overall_code(), pb::RateLimitResponse::OK);
  EXPECT_EQ(r.statuses(0).limit_remaining(), 700u);
  ASSERT_EQ(r.dynamic_metadata().fields_size(), 1) << r.DebugString();
  ASSERT_EQ(r.dynamic_metadata().fields(0).key(), "ratekeeper_reservation");
  const std::string id = r.dynamic_metadata().fields(0).value().string_value();
  // The bytes of google.protobuf.Struct {fields: {"ratekeeper_reservation": {string_value: id}}},
  // as Envoy reads them: fields (1) holds an entry of key (1) and value (2), whose
  // string_value is field 3.
  const std::string key = "ratekeeper_reservation";
  const std::string value = std::string("\x1a") + static_cast<char>(id.size()) + id;
  const std::string entry = std::string("\x0a") + static_cast<char>(key.size()) + key + "\x12" +
                            static_cast<char>(value.size()) + value;
  EXPECT_EQ(r.dynamic_metadata().SerializeAsString(), std::string("\x0a") + static_cast<char>(entry.size()) + entry);
  const std::vector<std::string> records = {"EVAL", "return #redis.call('KEYS', '*:reservation:*')", "0"};
  EXPECT_EQ(redis.command(records), "1");  // the record, beside the descriptor's key
  pb::RateLimitResponse settled;
  ASSERT_TRUE(server.call(request("d", {{{"api_key", "k"}, {"ratekeeper_reservation", id}}}, 40), settled).ok());
  EXPECT_EQ(settled.overall_code(), pb::RateLimitResponse::OK);
  EXPECT_EQ(redis.command(records), "0");  // settled: the record is gone
  ASSERT_TRUE(server.call(request("d", {{{"api_key", "k"}, {"ratekeeper_reservation", id}}}, 40), settled).ok());
  ASSERT_TRUE(server.call(request("d", {{{"api_key", "k"}}}, 1), r).ok());
  EXPECT_EQ(r.statuses(0).limit_remaining(), 959u);  // 40 settled once, then 1 reserved
}

TEST(RlsGrpc, BadRequestsAreInvalidArgumentAndTheServerStaysUp) {
  RedisServer redis;
  RlsServer server({{"mongo.yaml", std::string(kMongo)}}, redis.url());
  pb::RateLimitResponse r;
  EXPECT_EQ(server.call(request("mongo_cps", {}), r).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(server.call(request("", {{{"database", "users"}}}), r).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(server.call(request("mongo_cps", {{}}), r).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  auto huge = request("mongo_cps", {{{"database", "users"}}});
  huge.mutable_descriptors(0)->mutable_hits_addend()->set_value(std::uint64_t{1} << 40);
  const auto status = server.call(huge, r);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("hits_addend"), std::string::npos) << status.error_message();

  // Above max_message_bytes (64 KiB): the service refuses it; above the transport's 4 MiB,
  // gRPC itself does.
  auto big = request("mongo_cps", {{{"database", std::string(100'000, 'x')}}});
  EXPECT_EQ(server.call(big, r).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  auto bigger = request("mongo_cps", {{{"database", std::string(5'000'000, 'x')}}});
  EXPECT_EQ(server.call(bigger, r).error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);

  // Hits above a limit's capacity: over, nothing counted.
  ASSERT_TRUE(server.call(request("mongo_cps", {{{"database", "users"}}}, 4), r).ok());
  EXPECT_EQ(r.overall_code(), pb::RateLimitResponse::OVER_LIMIT);
  ASSERT_TRUE(server.call(request("mongo_cps", {{{"database", "users"}}}), r).ok());
  EXPECT_EQ(r.overall_code(), pb::RateLimitResponse::OK);
  EXPECT_EQ(r.statuses(0).limit_remaining(), 2u);
}

// The issue's burst: 200 concurrent calls for one descriptor of 100 per minute admit exactly
// 100 (a sliding window log: a fixed window could be split by a minute boundary).
TEST(RlsGrpc, BurstOfConcurrentCallsAdmitsExactlyTheLimit) {
  RedisServer redis;
  RlsServer server({{"burst.yaml", R"(domain: burst
descriptors:
  - key: api_key
    rate_limit: {unit: minute, requests_per_unit: 100, algorithm: sliding_window_log}
)"}},
                   redis.url());
  std::atomic<int> ok{0};
  std::atomic<int> over{0};
  std::atomic<int> failed{0};
  std::vector<std::thread> threads;
  std::atomic<bool> go{false};
  for (int t = 0; t < 20; ++t) {
    threads.emplace_back([&] {
      while (!go.load()) std::this_thread::yield();
      for (int i = 0; i < 10; ++i) {
        pb::RateLimitResponse r;
        const auto s = server.call(request("burst", {{{"api_key", "k"}}}), r, std::chrono::seconds(20));
        if (!s.ok()) {
          ++failed;
        } else if (r.overall_code() == pb::RateLimitResponse::OK) {
          ++ok;
        } else {
          ++over;
        }
      }
    });
  }
  go = true;
  for (auto& t : threads) t.join();
  EXPECT_EQ(failed.load(), 0) << server.process->errors();
  EXPECT_EQ(ok.load(), 100);
  EXPECT_EQ(over.load(), 100);
}

TEST(RlsGrpc, DeadStoreIsUnavailableWithinTheDeadlineUnlessAPolicyAnswers) {
  RedisServer redis;
  RlsServer server({{"a.yaml", R"(domain: a
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 10}
)"},
                    {"b.yaml", R"(domain: b
on_store_error: deny
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 10}
  - key: open
    on_store_error: allow
    rate_limit: {unit: second, requests_per_unit: 10}
)"}},
                   redis.url(), "store:\n  command_timeout: 200ms\n  connect_timeout: 200ms\n");
  pb::RateLimitResponse r;
  ASSERT_TRUE(server.call(request("a", {{{"k", "v"}}}), r).ok());
  redis.kill();
  for (int i = 0; i < 3; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    const auto s = server.call(request("a", {{{"k", "v"}}}), r, std::chrono::seconds(5));
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(4));
  }
  ASSERT_TRUE(server.call(request("b", {{{"k", "v"}}}), r).ok());
  EXPECT_EQ(r.overall_code(), pb::RateLimitResponse::OVER_LIMIT);
  ASSERT_TRUE(server.call(request("b", {{{"open", "v"}}}), r).ok());
  EXPECT_EQ(r.overall_code(), pb::RateLimitResponse::OK);
  const auto metrics = http_get(server.process->port(), "/metrics");
  EXPECT_GE(metric_value(metrics.body, R"(ratekeeper_rls_requests_total{result="unavailable"})").value_or(0), 3.0);
}

TEST(RlsGrpc, TermSignalEndsTheServerWithTheServiceRunning) {
  RedisServer redis;
  RlsServer server({{"mongo.yaml", std::string(kMongo)}}, redis.url());
  pb::RateLimitResponse r;
  ASSERT_TRUE(server.call(request("mongo_cps", {{{"database", "users"}}}), r).ok());
  server.process->signal(SIGTERM);
  EXPECT_EQ(server.process->wait(std::chrono::seconds(20)), 0) << server.process->errors();
}

// A call waiting for the store when SIGTERM comes is answered before the server exits.
// Whether a TCP connection to `port` that sends nothing is closed by the server within
// `limit` (what the server sends meanwhile, its SETTINGS, is read and dropped).
bool idle_connection_closed(int port, std::chrono::milliseconds limit) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return false;
  }
  const auto deadline = std::chrono::steady_clock::now() + limit;
  bool closed = false;
  while (!closed) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
    char buf[512];
    closed = ::recv(fd, buf, sizeof buf, 0) <= 0;
  }
  ::close(fd);
  return closed;
}

// A connection that never sends the HTTP/2 preface is closed after grpc.handshake_timeout
// (gRPC's own default holds it two minutes); one that goes on to call is served as usual.
TEST(RlsGrpc, AConnectionWithoutPrefaceIsClosedAfterTheHandshakeTimeout) {
  RlsServer server({{"d.yaml", "domain: d\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 5}\n"}},
                   "memory://", "  handshake_timeout: 300ms\nstore:\n  command_timeout: 10s\n");
  EXPECT_TRUE(idle_connection_closed(server.grpc_port, std::chrono::seconds(20)));
  pb::RateLimitResponse response;
  ASSERT_TRUE(server.call(request("d", {{{"user", "alice"}}}), response).ok());
  EXPECT_EQ(response.overall_code(), pb::RateLimitResponse::OK);
}

TEST(RlsGrpc, CallInFlightAtTermIsAnswered) {
  RedisServer redis;
  RlsServer server({{"mongo.yaml", std::string(kMongo)}}, redis.url());
  pb::RateLimitResponse warm;
  ASSERT_TRUE(server.call(request("mongo_cps", {{{"database", "users"}}}), warm).ok());
  redis.pause();
  grpc::Status status;
  pb::RateLimitResponse r;
  std::thread caller([&] { status = server.call(request("mongo_cps", {{{"database", "users"}}}), r); });
  // The call has reached the service (and so the store, which holds it).
  ASSERT_TRUE(eventually([&] {
    return http_get(server.process->port(), "/metrics").body.find("\nratekeeper_rls_calls_total 2\n") !=
           std::string::npos;
  }));
  server.process->signal(SIGTERM);
  // The server drains: its HTTP listener is closed.
  EXPECT_TRUE(eventually([&] {
    try {
      http_get(server.process->port(), "/healthz");
      return false;
    } catch (const std::exception&) {
      return true;
    }
  }));
  redis.resume();
  caller.join();
  EXPECT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(r.statuses(0).limit_remaining(), 1u);
  EXPECT_EQ(server.process->wait(std::chrono::seconds(20)), 0) << server.process->errors();
}

TEST(RlsGrpc, InvalidDomainFileStopsTheServerWithFileAndField) {
  auto dir = fresh_dir("rls-invalid");
  std::ofstream(dir / "bad.yaml") << "domain: x\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n";
  const auto config = write_temp_file("ratekeeper.yaml", "grpc:\n  listen: 127.0.0.1:0\n  config: " + dir.string() + "\n");
  const auto result = run_ratekeeper({"serve", "--config", config.string(), "--listen", "127.0.0.1:0"});
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_NE(result.errors.find("bad.yaml"), std::string::npos) << result.errors;
  EXPECT_NE(result.errors.find("descriptors[0].rate_limit.unit"), std::string::npos) << result.errors;
}


// A reload reads the domain files again: a descriptor's limit raised keeps its count, a domain
// file with an error keeps the domains in force, and calls go on throughout.
TEST(RlsGrpc, ReloadReadsTheDomainFilesAgain) {
  RedisServer redis;
  const auto domain = [](int limit, std::string_view unit = "hour") {
    return fmt::format(R"(domain: r
descriptors:
  - key: user
    rate_limit: {{unit: {}, requests_per_unit: {}, algorithm: sliding_window_log}}
)",
                       unit, limit);
  };
  RlsServer server({{"r.yaml", domain(2)}}, redis.url());
  const auto code = [&] {
    pb::RateLimitResponse r;
    EXPECT_TRUE(server.call(request("r", {{{"user", "u"}}}), r).ok());
    return r.overall_code();
  };
  const auto reload = [&] {
    return http_post(server.process->port(), "/admin/reload", "");
  };
  ASSERT_EQ(code(), pb::RateLimitResponse::OK);
  ASSERT_EQ(code(), pb::RateLimitResponse::OK);
  ASSERT_EQ(code(), pb::RateLimitResponse::OVER_LIMIT);

  std::ofstream(server.dir / "domains" / "r.yaml", std::ios::trunc) << domain(2, "fortnight");
  const auto refused = reload();
  EXPECT_EQ(refused.status, 422) << refused.body;
  EXPECT_NE(refused.body.find("descriptors[0].rate_limit.unit"), std::string::npos) << refused.body;
  EXPECT_EQ(code(), pb::RateLimitResponse::OVER_LIMIT);  // still 2 per hour

  std::ofstream(server.dir / "domains" / "r.yaml", std::ios::trunc) << domain(4);
  const auto accepted = reload();
  ASSERT_EQ(accepted.status, 200) << accepted.body;
  EXPECT_EQ(code(), pb::RateLimitResponse::OK);  // 2 of the new 4 taken before
  EXPECT_EQ(code(), pb::RateLimitResponse::OK);
  EXPECT_EQ(code(), pb::RateLimitResponse::OVER_LIMIT);
  const auto metrics = http_get(server.process->port(), "/metrics").body;
  // The service's counters went on across the reloads: 2 over limit, then 1 after.
  EXPECT_EQ(metric_value(metrics, R"(ratekeeper_rls_requests_total{result="over_limit"})"), 3.0);
}

}  // namespace
}  // namespace ratekeeper::testing
