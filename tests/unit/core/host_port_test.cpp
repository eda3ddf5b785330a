#include "ratekeeper/core/host_port.hpp"

#include <gtest/gtest.h>

#include "ratekeeper/http/proxy.hpp"
#include "ratekeeper/redis/url.hpp"

namespace ratekeeper {
namespace {

TEST(ParsePort, DecimalDigitsFromOneTo65535) {
  EXPECT_EQ(parse_port("1"), 1);
  EXPECT_EQ(parse_port("6379"), 6379);
  EXPECT_EQ(parse_port("65535"), 65535);
  for (const char* bad : {"", "0", "65536", "99999999999", "+80", "-1", " 80", "80 ", "8a", "0x50", "080", "00"}) {
    const auto port = parse_port(bad);
    ASSERT_FALSE(port) << "'" << bad << "'";
    EXPECT_NE(port.error().message.find(bad), std::string::npos) << port.error().message;
  }
}

TEST(ParsePort, ZeroOnlyWhereAllowed) {
  EXPECT_EQ(parse_port("0", /*allow_zero=*/true), 0);
  EXPECT_FALSE(parse_port("00", /*allow_zero=*/true));
  EXPECT_FALSE(parse_port("0"));
}

TEST(ParsePort, EveryAddressReaderUsesIt) {
  // The upstream URL, a Redis URL and a Redis endpoint refuse the same spellings.
  for (const char* port : {"+80", "080", "0", "65536", " 80"}) {
    EXPECT_FALSE(http::parse_upstream_url(std::string("http://app:") + port)) << port;
    EXPECT_FALSE(redis::parse_url(std::string("redis://app:") + port)) << port;
  }
  EXPECT_EQ(http::parse_upstream_url("http://[::1]:8080")->port, 8080);
  EXPECT_EQ(redis::parse_url("redis://[::1]:6380")->endpoints.at(0).port, 6380);
}

TEST(SplitHostPort, BracketsAndLastColon) {
  auto s = split_host_port("[::1]:80");
  ASSERT_TRUE(s);
  EXPECT_EQ(s->host, "::1");
  EXPECT_EQ(s->port, "80");
  EXPECT_TRUE(s->bracketed);
  s = split_host_port("host");
  ASSERT_TRUE(s);
  EXPECT_FALSE(s->port);
  EXPECT_FALSE(split_host_port("[::1"));
  EXPECT_FALSE(split_host_port("[::1]x"));
}

}  // namespace
}  // namespace ratekeeper
