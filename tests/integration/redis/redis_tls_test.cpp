// TLS to Redis on every topology, against Debian's redis-server with a TLS port and
// certificates made by `openssl` (support/tls_certs.hpp): the store checks over TLS (as an ACL
// user too); an untrusted CA, an expired certificate, a certificate for another name and a
// missing client certificate each leave the store not ready with a message saying why, and
// fail checks within their deadline; verification is skipped only when asked for; a Redis
// Cluster over TLS follows MOVED and ASK to TLS ports; Sentinel is asked over TLS and so is
// the master it names.

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>

#include <fmt/format.h>

#include "redis/key_slot.hpp"
#include "ratekeeper/store/open_store.hpp"
#include "store/redis/redis_store.hpp"
#include "support/eventually.hpp"
#include "support/redis_cluster.hpp"
#include "support/redis_sentinel.hpp"
#include "support/redis_server.hpp"
#include "support/tls_certs.hpp"

namespace ratekeeper::store {
namespace {

using algorithms::Algorithm;
using namespace std::chrono_literals;
using testing::tls_certs;

using testing::eventually;

using TlsRedis = testing::TlsRedisServer;

redis::TlsOptions trusting(const std::filesystem::path& ca) {
  redis::TlsOptions tls;
  tls.ca_file = ca.string();
  return tls;
}

StoreOptions store_options(std::string url, redis::TlsOptions tls = trusting(tls_certs().ca)) {
  StoreOptions o;
  o.url = std::move(url);
  o.tls = std::move(tls);
  o.connect_timeout = 500 * kMicrosPerMilli;
  o.command_timeout = 500 * kMicrosPerMilli;
  o.reconnect_min = 10 * kMicrosPerMilli;
  o.reconnect_max = 200 * kMicrosPerMilli;
  return o;
}

std::unique_ptr<Store> open_ready(const StoreOptions& o) {
  auto store = open_store(o);
  EXPECT_TRUE(store) << store.error().message;
  if (!store) return nullptr;
  EXPECT_TRUE(eventually([&] { return (*store)->health().ready; })) << (*store)->health().detail;
  return std::move(*store);
}

algorithms::Limit ten_per_hour() {
  return *algorithms::Limit::make(Algorithm::token_bucket, 10, 3600 * kMicrosPerSecond);
}

// The store never gets ready; its detail says why (`reason`), and a check fails within its
// deadline instead of waiting.
void expect_refused(const StoreOptions& o, std::string_view reason) {
  auto opened = open_store(o);
  ASSERT_TRUE(opened) << opened.error().message;
  auto& store = *opened;
  EXPECT_TRUE(eventually([&] { return store->health().detail.find(reason) != std::string::npos; }, 5s))
      << store->health().detail;
  EXPECT_FALSE(store->health().ready);
  const auto t0 = std::chrono::steady_clock::now();
  const auto r = store->check_sync({{"t:{refused}:r", ten_per_hour(), 1}});
  EXPECT_FALSE(r);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s);
}

TEST(RedisTls, ChecksOverTlsAsAnAclUser) {
  TlsRedis redis(false, {}, {"--user", "limiter", "on", ">s3cret", "~*", "&*", "+@all"});
  auto store = open_ready(store_options(redis.url("limiter:s3cret@")));
  ASSERT_TRUE(store);
  for (int i = 0; i < 3; ++i) {
    auto r = store->check_sync({{"t:{acl}:r", ten_per_hour(), 1}});
    ASSERT_TRUE(r) << r.error().message;
    EXPECT_EQ(r->decision.remaining, 9 - i);
  }
  EXPECT_EQ(redis.server.command({"EXISTS", "t:{acl}:r"}), "1");
  // The same user with a wrong password: refused by AUTH, over TLS.
  expect_refused(store_options(redis.url("limiter:wrong@")), "AUTH refused");
}

TEST(RedisTls, OptionsInTheUrlWork) {
  TlsRedis redis;
  const auto url = fmt::format("{}?ca_file={}&server_name=localhost", redis.url(), tls_certs().ca.string());
  auto store = open_ready(store_options(url, {}));
  ASSERT_TRUE(store);
  EXPECT_TRUE(store->check_sync({{"t:{url}:r", ten_per_hour(), 1}}));
}

TEST(RedisTls, UntrustedCaIsAClearErrorAndNotReady) {
  TlsRedis redis;
  expect_refused(store_options(redis.url(), trusting(tls_certs().other_ca)),
                 "TLS handshake failed: certificate verify failed");
}

TEST(RedisTls, ExpiredCertificateIsAClearErrorAndNotReady) {
  TlsRedis redis(false, tls_certs().expired_cert);
  expect_refused(store_options(redis.url()), "certificate verify failed: certificate has expired");
}

TEST(RedisTls, CertificateForAnotherNameIsRefusedUnlessThatNameIsExpected) {
  TlsRedis redis(false, tls_certs().wrong_name_cert);
  expect_refused(store_options(redis.url()), "certificate verify failed: IP address mismatch");
  expect_refused(store_options(fmt::format("rediss://localhost:{}", redis.tls_port)),
                 "certificate verify failed: hostname mismatch");
  auto tls = trusting(tls_certs().ca);
  tls.server_name = "redis.example";
  auto store = open_ready(store_options(redis.url(), tls));
  ASSERT_TRUE(store);
  EXPECT_TRUE(store->check_sync({{"t:{name}:r", ten_per_hour(), 1}}));
}

TEST(RedisTls, VerificationIsSkippedOnlyWhenAskedFor) {
  TlsRedis redis;
  auto tls = trusting(tls_certs().other_ca);
  tls.verify = false;
  auto store = open_ready(store_options(redis.url(), tls));
  ASSERT_TRUE(store);
  EXPECT_TRUE(store->check_sync({{"t:{noverify}:r", ten_per_hour(), 1}}));
  // The same through the URL.
  auto by_url = open_ready(store_options(redis.url() + "?verify=false", trusting(tls_certs().other_ca)));
  ASSERT_TRUE(by_url);
  EXPECT_TRUE(by_url->check_sync({{"t:{noverify}:r", ten_per_hour(), 1}}));
}

TEST(RedisTls, MutualTlsNeedsTheClientCertificate) {
  TlsRedis redis(/*client_certs=*/true);
  // Without a certificate the server ends the connection once the handshake is done.
  expect_refused(store_options(redis.url()), "certificate required");
  auto tls = trusting(tls_certs().ca);
  tls.cert_file = tls_certs().client_cert.string();
  tls.key_file = tls_certs().client_key.string();
  auto store = open_ready(store_options(redis.url(), tls));
  ASSERT_TRUE(store);
  EXPECT_TRUE(store->check_sync({{"t:{mtls}:r", ten_per_hour(), 1}}));
}

TEST(RedisTls, TlsToAPlainPortFailsClearly) {
  testing::RedisServer plain;
  expect_refused(store_options(fmt::format("rediss://127.0.0.1:{}", plain.port())), "TLS handshake (is it a TLS port?) timed out");
}

TEST(RedisTls, BadFilesAndOptionsAreErrorsWhenTheStoreOpens) {
  const auto& c = tls_certs();
  const auto error = [](const StoreOptions& o) {
    auto store = open_store(o);
    return store ? std::string("opened") : store.error().message;
  };
  const std::string url = "rediss://127.0.0.1:6390";
  EXPECT_NE(error(store_options(url, trusting(c.dir / "missing.pem"))).find("tls ca_file '" + (c.dir / "missing.pem").string() + "': cannot load"),
            std::string::npos);
  auto mismatched = trusting(c.ca);
  mismatched.cert_file = c.server_cert.string();
  mismatched.key_file = c.client_key.string();
  EXPECT_NE(error(store_options(url, mismatched)).find("key values mismatch"), std::string::npos)
      << error(store_options(url, mismatched));
  auto lone_cert = trusting(c.ca);
  lone_cert.cert_file = c.client_cert.string();
  EXPECT_NE(error(store_options(url, lone_cert)).find("cert_file and key_file go together"), std::string::npos);
  EXPECT_NE(error(store_options("redis://127.0.0.1:6390", trusting(c.ca))).find("the scheme is not one of"),
            std::string::npos);
  EXPECT_NE(error(store_options("redis://127.0.0.1:6390?ca_file=/x", {})).find("must be rediss"), std::string::npos);
}

TEST(RedisTls, ClusterOverTlsFollowsAskAndMovedToTlsPorts) {
  testing::RedisCluster cluster(testing::RedisCluster::Options{.masters = 3, .replicas_per_master = 0, .args = {}, .tls = true});
  auto opened = open_ready(store_options(cluster.tls_url()));
  ASSERT_TRUE(opened);
  auto* store = dynamic_cast<RedisStore*>(opened.get());
  ASSERT_NE(store, nullptr);
  // Identities on every master.
  for (int i = 0; i < 30; ++i) {
    auto r = store->check_sync({{fmt::format("t:{{id{}}}:r", i), ten_per_hour(), 1}});
    ASSERT_TRUE(r) << r.error().message;
    EXPECT_EQ(r->decision.remaining, 9);
  }
  const std::string key = "t:{moving}:r";
  const auto slot = redis::key_slot(key);
  auto& from = cluster.master_of_slot(slot);
  testing::RedisServer* to = nullptr;
  for (auto* m : cluster.masters()) {
    if (m != &from) to = m;
  }
  ASSERT_NE(to, nullptr);
  ASSERT_EQ(store->check_sync({{key, ten_per_hour(), 1}})->decision.remaining, 9);
  cluster.begin_migration(slot, from, *to);
  EXPECT_EQ(cluster.migrate_keys(slot, from, *to), 1u);
  auto asked = store->check_sync({{key, ten_per_hour(), 1}});  // ASK to the importing node
  ASSERT_TRUE(asked) << asked.error().message;
  EXPECT_EQ(asked->decision.remaining, 8);
  EXPECT_GT(store->cluster().stats().ask, 0u);
  cluster.finish_migration(slot, *to);
  auto moved = store->check_sync({{key, ten_per_hour(), 1}});  // MOVED to the new owner
  ASSERT_TRUE(moved) << moved.error().message;
  EXPECT_EQ(moved->decision.remaining, 7);
  EXPECT_GT(store->cluster().stats().moved, 0u);
  EXPECT_EQ(to->command({"EXISTS", key}), "1");
}

TEST(RedisTls, SentinelAndMasterOverTls) {
  TlsRedis master;
  std::vector<std::unique_ptr<testing::SentinelProcess>> sentinels;
  std::string url = "rediss-sentinel://";
  for (int i = 0; i < 3; ++i) {
    sentinels.push_back(std::make_unique<testing::SentinelProcess>("tlsmaster", master.tls_port, true));
    url += fmt::format("{}127.0.0.1:{}", i > 0 ? "," : "", sentinels.back()->tls_port());
  }
  url += "/tlsmaster";
  auto store = open_ready(store_options(url));
  ASSERT_TRUE(store);
  auto r = store->check_sync({{"t:{sentinel}:r", ten_per_hour(), 1}});
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->decision.remaining, 9);
  EXPECT_EQ(master.server.command({"EXISTS", "t:{sentinel}:r"}), "1");
  // The +switch-master subscriptions are over TLS too.
  auto* sentinel_store = dynamic_cast<RedisStore*>(store.get());
  ASSERT_NE(sentinel_store, nullptr);
  EXPECT_TRUE(eventually([&] {
    return sentinel_store->sentinel().subscription_status().starts_with("subscribed to 3 of 3 sentinels");
  })) << sentinel_store->sentinel().subscription_status();
}

}  // namespace
}  // namespace ratekeeper::store
