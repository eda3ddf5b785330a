// Redis URL and host:port parsing (redis/url.hpp) without a server: what an endpoint prints
// parses back to the same endpoint; the TLS schemes and their options. (Every scheme: integration/redis/redis_client_test.cpp.)

#include <gtest/gtest.h>

#include "ratekeeper/redis/url.hpp"

namespace ratekeeper::redis {
namespace {

TEST(RedisHostPort, EndpointsPrintBackToThemselves) {
  for (auto text : {"example.com:7000", "[::1]:6380", "10.0.0.1", "[fe80::1%eth0]:1", "[name]:5"}) {
    auto ep = parse_host_port(text);
    ASSERT_TRUE(ep) << text << ": " << ep.error().message;
    auto again = parse_host_port(ep->to_string());
    ASSERT_TRUE(again) << ep->to_string() << ": " << again.error().message;
    EXPECT_EQ(*again, *ep) << text;
  }
}

// Found by fuzz/store_url_fuzz (corpus/store_url/crash-host-bracket): "[[J]" was the host
// "[J", printed as "[J:6379", which does not parse.
TEST(RedisHostPort, BracketsInsideAHostAreRefused) {
  for (auto text : {"[[J]", "[[::1]]:6379", "a]:1", "a[b"}) {
    auto ep = parse_host_port(text);
    EXPECT_FALSE(ep) << text << " gave " << ep->to_string();
  }
  EXPECT_FALSE(parse_url("redis://[[J]:6379"));
  EXPECT_FALSE(parse_url("redis-cluster://a:1,b]:2"));
}

// The TLS schemes: an s after "redis" on every TCP form; their options in the query,
// percent-decoded; refused on a scheme without TLS.
TEST(RedisUrl, TlsSchemesAndTheirOptions) {
  auto plain = parse_url("redis://h:1");
  ASSERT_TRUE(plain);
  EXPECT_FALSE(plain->tls.enabled);
  auto tls = parse_url("rediss://u:p@h:6380/2?ca_file=%2Fetc%2Fca.pem&server_name=redis.example&verify=false");
  ASSERT_TRUE(tls) << tls.error().message;
  EXPECT_EQ(tls->scheme, UrlScheme::redis);
  EXPECT_TRUE(tls->tls.enabled);
  EXPECT_EQ(tls->tls.ca_file, "/etc/ca.pem");
  EXPECT_EQ(tls->tls.server_name, "redis.example");
  EXPECT_FALSE(tls->tls.verify);
  EXPECT_EQ(tls->db, 2);
  EXPECT_EQ(tls->credentials.user, "u");
  auto files = parse_url("rediss://h?ca_dir=/c&cert_file=/a.crt&key_file=/a.key&db=4&verify=true");
  ASSERT_TRUE(files) << files.error().message;
  EXPECT_EQ(files->tls.ca_dir, "/c");
  EXPECT_EQ(files->tls.cert_file, "/a.crt");
  EXPECT_EQ(files->tls.key_file, "/a.key");
  EXPECT_TRUE(files->tls.verify);
  EXPECT_EQ(files->db, 4);
  auto cluster = parse_url("rediss-cluster://a:7000,b:7001");
  ASSERT_TRUE(cluster);
  EXPECT_EQ(cluster->scheme, UrlScheme::cluster);
  EXPECT_TRUE(cluster->tls.enabled);
  auto sentinel = parse_url("rediss-sentinel://s1:26379/mymaster?ca_file=/ca.pem");
  ASSERT_TRUE(sentinel);
  EXPECT_EQ(sentinel->scheme, UrlScheme::sentinel);
  EXPECT_EQ(sentinel->master, "mymaster");
  EXPECT_TRUE(sentinel->tls.enabled);
  EXPECT_EQ(sentinel->tls.ca_file, "/ca.pem");

  const auto error = [](std::string_view url) {
    auto parsed = parse_url(url);
    return parsed ? std::string("parsed") : parsed.error().message;
  };
  EXPECT_NE(error("redis://h?ca_file=/ca.pem").find("ca_file: a TLS option"), std::string::npos);
  EXPECT_NE(error("redis-cluster://h?verify=false").find("verify: a TLS option"), std::string::npos);
  EXPECT_NE(error("rediss://h?verify=no").find("expected true or false"), std::string::npos);
  EXPECT_NE(error("rediss://h?ca_file=").find("ca_file: empty"), std::string::npos);
  EXPECT_NE(error("rediss://h?ca_file=%zz").find("ca_file"), std::string::npos);
  EXPECT_NE(error("rediss://h?tls=yes").find("unknown parameter 'tls'"), std::string::npos);
  EXPECT_NE(error("rediss-unix:///tmp/r.sock").find("unsupported"), std::string::npos);
}

// Logs and error messages never carry a password: every form parse_url reads one from.
TEST(RedisUrl, RedactedUrlsHideThePasswordOnly) {
  EXPECT_EQ(redact_url("redis://user:s3cret@h:6379/1"), "redis://user:***@h:6379/1");
  EXPECT_EQ(redact_url("rediss://:s3cret@h?ca_file=/a@b"), "rediss://:***@h?ca_file=/a@b");
  EXPECT_EQ(redact_url("redis://s3cret@h"), "redis://***@h");
  EXPECT_EQ(redact_url("redis-sentinel://u:p@ss:w@s1:1,s2:2/m"), "redis-sentinel://u:***@s1:1,s2:2/m");
  EXPECT_EQ(redact_url("unix://u:pw@/tmp/r.sock?db=1"), "unix://u:***@/tmp/r.sock?db=1");
  EXPECT_EQ(redact_url("redis://h:6379"), "redis://h:6379");
  EXPECT_EQ(redact_url("memory://"), "memory://");
  EXPECT_EQ(redact_url("not a url @ all"), "not a url @ all");
  // What parse_url takes as the password is what is hidden.
  const std::string_view url = "redis://a:b%40c@h";
  auto parsed = parse_url(url);
  ASSERT_TRUE(parsed);
  EXPECT_EQ(parsed->credentials.password, "b@c");
  EXPECT_EQ(redact_url(url).find("b%40c"), std::string::npos);
  auto error = parse_url("redis://u:s3cret@h:99999");
  ASSERT_FALSE(error);
  EXPECT_EQ(error.error().message.find("s3cret"), std::string::npos) << error.error().message;
}

}  // namespace
}  // namespace ratekeeper::redis
