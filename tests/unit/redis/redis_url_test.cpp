// Redis URL and host:port parsing (redis/url.hpp) without a server: what an endpoint prints
// parses back to the same endpoint. (Every scheme: integration/redis/redis_client_test.cpp.)

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

}  // namespace
}  // namespace ratekeeper::redis
