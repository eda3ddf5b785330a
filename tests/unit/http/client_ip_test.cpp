// Client identities: IP normalisation, trusted proxies, X-Forwarded-For (http/client_ip.hpp);
// API key hashing (limiter/identity.hpp).

#include "ratekeeper/http/client_ip.hpp"

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include "ratekeeper/limiter/identity.hpp"

namespace ratekeeper::http {
namespace {

std::string norm(std::string_view text) {
  auto r = normalize_ip(text);
  return r ? *r : "<invalid>";
}

TEST(NormalizeIp, Ipv4StaysDottedQuad) {
  EXPECT_EQ(norm("192.0.2.7"), "192.0.2.7");
  EXPECT_EQ(norm(" 192.0.2.7 "), "192.0.2.7");
  EXPECT_EQ(norm("192.0.2.7:8080"), "192.0.2.7");
}

TEST(NormalizeIp, Ipv6BecomesRfc5952CanonicalForm) {
  EXPECT_EQ(norm("2001:DB8:0:0:0:0:0:1"), "2001:db8::1");
  EXPECT_EQ(norm("2001:0db8:0000:0000:0001:0000:0000:0001"), "2001:db8::1:0:0:1");
  EXPECT_EQ(norm("2001:db8:0:1:1:1:1:1"),
            "2001:db8:0:1:1:1:1:1");  // one zero group: not compressed
  EXPECT_EQ(norm("0:0:0:0:0:0:0:1"), "::1");
  EXPECT_EQ(norm("::"), "::");
  EXPECT_EQ(norm("2001:db8:0:0:1:0:0:0"), "2001:db8:0:0:1::");  // longest run wins
}

TEST(NormalizeIp, SameAddressSpelledDifferentlyGivesOneIdentity) {
  EXPECT_EQ(norm("2001:db8::1"), norm("2001:0DB8:0:0::0001"));
  EXPECT_EQ(norm("[2001:db8::1]:443"), "2001:db8::1");
  EXPECT_EQ(norm("[2001:db8::1]"), "2001:db8::1");
  EXPECT_EQ(norm("fe80::1%eth0"), "fe80::1");
}

TEST(NormalizeIp, Ipv4MappedIpv6BecomesIpv4) {
  EXPECT_EQ(norm("::ffff:192.0.2.7"), "192.0.2.7");
  EXPECT_EQ(norm("::FFFF:c000:0207"), "192.0.2.7");
  EXPECT_EQ(norm("[::ffff:192.0.2.7]:80"), "192.0.2.7");
}

TEST(NormalizeIp, RejectsWhatIsNotAnAddress) {
  for (auto bad : {"", "unknown", "192.0.2", "192.0.2.256", "1.2.3.4:http", "2001:db8::g",
                   "[2001:db8::1", "[::1]x", "192.0.2.7 , 10.0.0.1", "::1::2"}) {
    EXPECT_FALSE(normalize_ip(bad)) << bad;
  }
}

TEST(Cidr, ContainsIpv4AndIpv6Blocks) {
  auto v4 = Cidr::parse("10.0.0.0/8");
  ASSERT_TRUE(v4);
  EXPECT_TRUE(v4->contains(*parse_ip("10.255.1.2")));
  EXPECT_FALSE(v4->contains(*parse_ip("11.0.0.1")));
  EXPECT_FALSE(v4->contains(*parse_ip("::a00:1")));

  auto v6 = Cidr::parse("2001:db8::/32");
  ASSERT_TRUE(v6);
  EXPECT_TRUE(v6->contains(*parse_ip("2001:db8:ffff::1")));
  EXPECT_FALSE(v6->contains(*parse_ip("2001:db9::1")));

  auto odd = Cidr::parse("192.168.1.130/25");  // host bits are ignored
  ASSERT_TRUE(odd);
  EXPECT_TRUE(odd->contains(*parse_ip("192.168.1.200")));
  EXPECT_FALSE(odd->contains(*parse_ip("192.168.1.100")));

  auto single = Cidr::parse("192.0.2.1");
  ASSERT_TRUE(single);
  EXPECT_EQ(single->prefix_len, 32);
  EXPECT_TRUE(single->contains(*parse_ip("::ffff:192.0.2.1")));
  EXPECT_FALSE(single->contains(*parse_ip("192.0.2.2")));

  auto mapped = Cidr::parse("::ffff:10.0.0.0/104");
  ASSERT_TRUE(mapped);
  EXPECT_TRUE(mapped->contains(*parse_ip("10.1.2.3")));
}

TEST(NetworkOf, ClearsTheBitsPastThePrefix) {
  auto net = [](std::string_view ip, int bits) { return network_of(*parse_address(ip), bits).to_string(); };
  EXPECT_EQ(net("2001:db8:1:2:3:4:5:6", 64), "2001:db8:1:2::");
  EXPECT_EQ(net("2001:db8:1:2:3:4:5:6", 128), "2001:db8:1:2:3:4:5:6");
  EXPECT_EQ(net("2001:db8:1:ff:3:4:5:6", 57), "2001:db8:1:80::");
  EXPECT_EQ(net("2001:db8:1:2:3:4:5:6", 0), "::");
  EXPECT_EQ(net("192.0.2.255", 25), "192.0.2.128");
  EXPECT_EQ(net("192.0.2.255", 32), "192.0.2.255");
  // Each network holds its own addresses and none of the next one.
  const auto block = *Cidr::parse("2001:db8:1:2::/64");
  EXPECT_TRUE(block.contains(network_of(*parse_address("2001:db8:1:2:ffff::1"), 64)));
  EXPECT_FALSE(block.contains(network_of(*parse_address("2001:db8:1:3::1"), 64)));
}

TEST(Cidr, RejectsBadBlocks) {
  for (auto bad : {"10.0.0.0/33", "2001:db8::/129", "10.0.0.0/x", "nope/8", "10.0.0.0/"}) {
    EXPECT_FALSE(Cidr::parse(bad)) << bad;
  }
}

TEST(Cidr, PrefixLengthIsAStrictDecimalInRange) {
  // An overflowing length once left the full length in place: a /32 that trusted the peer.
  for (auto bad : {"127.0.0.1/99999999999999999999", "10.0.0.0/4294967304", "10.0.0.0/32abc",
                   "10.0.0.0/+8", "10.0.0.0/ 8", "10.0.0.0/-1", "10.0.0.0/08", "10.0.0.0/033",
                   "10.0.0.0/8/8", "10.0.0.0//8", "2001:db8::/0128", "::ffff:10.0.0.0/8"}) {
    auto c = Cidr::parse(bad);
    EXPECT_FALSE(c) << bad << " parsed as /" << (c ? c->prefix_len : -1);
  }
  auto overflow = Cidr::parse("127.0.0.1/99999999999999999999");
  ASSERT_FALSE(overflow);
  EXPECT_NE(overflow.error().message.find("prefix length must be between 0 and 32"),
            std::string::npos)
      << overflow.error().message;
  auto mapped = Cidr::parse("::ffff:10.0.0.0/8");
  ASSERT_FALSE(mapped);
  EXPECT_NE(mapped.error().message.find("between 96 and 128"), std::string::npos)
      << mapped.error().message;
  for (auto [text, len] : {std::pair{"0.0.0.0/0", 0},
                           {"10.0.0.0/8", 8},
                           {"10.0.0.0/32", 32},
                           {"::/0", 0},
                           {"2001:db8::/128", 128},
                           {"::ffff:10.0.0.0/96", 0}}) {
    auto c = Cidr::parse(text);
    ASSERT_TRUE(c) << text;
    EXPECT_EQ(c->prefix_len, len) << text;
  }
}

TEST(Cidr, AddressIsBareWithoutPortBracketsOrZone) {
  for (auto bad :
       {"10.0.0.0:80/8", "10.0.0.1:80", "[2001:db8::]/32", "[2001:db8::1]:443", "fe80::%eth0/64",
        "fe80::1%eth0", "10.0.0.0 /8", "10.0.0.0\t/8", "010.0.0.0/8"}) {
    EXPECT_FALSE(Cidr::parse(bad)) << bad;
  }
  EXPECT_TRUE(Cidr::parse(" 10.0.0.0/8 "));  // surrounding spaces, as in a list
}

TEST(NormalizeIp, PortsAndZonesAreWellFormed) {
  for (auto bad :
       {"192.0.2.7:99999999999", "192.0.2.7:65536", "192.0.2.7:", "[2001:db8::1]:", "[::1]:123456",
        "192.0.2.7%eth0", "[192.0.2.7]", "[192.0.2.7]:80", "fe80::1%", "010.0.0.1"}) {
    EXPECT_FALSE(normalize_ip(bad)) << bad;
  }
  EXPECT_EQ(norm("192.0.2.7:65535"), "192.0.2.7");
  EXPECT_EQ(norm("[2001:db8::1]:0"), "2001:db8::1");
}

class ClientIp : public ::testing::Test {
 protected:
  TrustedProxies proxies = *TrustedProxies::parse({"10.0.0.0/8", "2001:db8:ffff::/48"});

  std::string client(std::string_view peer, std::string_view xff) {
    auto ip = client_ip(peer, xff, proxies);
    return ip ? ip->to_string() : "<error>";
  }
};

TEST_F(ClientIp, UntrustedPeerIgnoresForwardedFor) {
  EXPECT_EQ(client("203.0.113.9", "198.51.100.1"), "203.0.113.9");
  EXPECT_EQ(client("203.0.113.9", ""), "203.0.113.9");
}

TEST_F(ClientIp, TrustedPeerUsesRightmostUntrustedHop) {
  EXPECT_EQ(client("10.0.0.2", "198.51.100.1"), "198.51.100.1");
  EXPECT_EQ(client("10.0.0.2", "198.51.100.1, 10.0.0.5"), "198.51.100.1");
  EXPECT_EQ(client("10.0.0.2", "198.51.100.1,10.0.0.7, 10.0.0.5"), "198.51.100.1");
}

TEST_F(ClientIp, ClientBehindTrustedProxyCannotSpoofByPrependingEntries) {
  // The client sent "X-Forwarded-For: 1.1.1.1, 10.9.9.9"; the proxy appended the real peer.
  EXPECT_EQ(client("10.0.0.2", "1.1.1.1, 10.9.9.9, 203.0.113.50"), "203.0.113.50");
  EXPECT_EQ(client("10.0.0.2", "1.1.1.1, 203.0.113.50"), "203.0.113.50");
}

TEST_F(ClientIp, AllHopsTrustedGivesLeftmost) {
  EXPECT_EQ(client("10.0.0.2", "10.0.0.9, 10.0.0.5"), "10.0.0.9");
  EXPECT_EQ(client("10.0.0.2", ""), "10.0.0.2");
}

TEST_F(ClientIp, GarbageEntryStopsAtTheHopThatReportedIt) {
  EXPECT_EQ(client("10.0.0.2", "198.51.100.1, not-an-ip"), "10.0.0.2");
  EXPECT_EQ(client("10.0.0.2", "not-an-ip, 10.0.0.5"), "10.0.0.5");
  EXPECT_EQ(client("10.0.0.2", "198.51.100.1, , 10.0.0.5"),
            "198.51.100.1");  // empty entries skipped
  // A malformed port or zone is garbage too, not an address to believe.
  EXPECT_EQ(client("10.0.0.2", "198.51.100.1:99999999"), "10.0.0.2");
  EXPECT_EQ(client("10.0.0.2", "198.51.100.1%eth0"), "10.0.0.2");
}

TEST_F(ClientIp, Ipv6ProxiesAndClientsAreNormalised) {
  EXPECT_EQ(client("2001:db8:ffff::1", "2001:DB8:0::7, 2001:db8:ffff::2"), "2001:db8::7");
  EXPECT_EQ(client("::ffff:10.0.0.2", "[2001:db8::9]:5555"), "2001:db8::9");
  EXPECT_EQ(client("10.0.0.2", "::ffff:198.51.100.1"), "198.51.100.1");
  EXPECT_EQ(client("2001:db8:1::1", "198.51.100.1"), "2001:db8:1::1");  // not a trusted v6 block
}

TEST_F(ClientIp, BadPeerIsAnError) {
  auto r = client_ip("garbage", "", proxies);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::invalid_argument);
}

// An application server behind a proxy on a Unix socket: its peer has no address.
TEST_F(ClientIp, AUnixSocketPeerHasAClientOnlyWhenUnixSocketsAreTrusted) {
  auto refused = client_ip("", "198.51.100.1", proxies);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("add 'unix' to trusted_proxies"), std::string::npos);

  proxies = *TrustedProxies::parse({"unix", "10.0.0.0/8"});
  EXPECT_TRUE(proxies.unix_sockets());
  EXPECT_FALSE(proxies.empty());
  // The proxy appended the address that connected to it: the rightmost entry, not one the
  // client wrote before it; trusted hops are walked past as from any trusted peer.
  EXPECT_EQ(client("", "1.1.1.1, 198.51.100.1"), "198.51.100.1");
  EXPECT_EQ(client("", "198.51.100.1, 10.0.0.5"), "198.51.100.1");
  EXPECT_EQ(client("", "198.51.100.1, "), "198.51.100.1");
  // Nothing to believe: an error, never an identity shared by every client.
  EXPECT_EQ(client("", ""), "<error>");
  EXPECT_EQ(client("", "not-an-ip"), "<error>");
  EXPECT_EQ(client("", " , "), "<error>");
  // An address peer is still its own client unless trusted.
  EXPECT_EQ(client("203.0.113.9", "198.51.100.1"), "203.0.113.9");
  EXPECT_TRUE(TrustedProxies::parse({"unix"})->unix_sockets());
  EXPECT_FALSE(TrustedProxies::parse({"UNIX"}));
}

TEST(CanonicalIpv4, OnlyPlainDottedQuadsAsPrinted) {
  for (const char* yes : {"0.0.0.0", "192.0.2.7", "255.255.255.255", "10.0.0.1"}) {
    EXPECT_TRUE(is_canonical_ipv4(yes)) << yes;
  }
  for (const char* no : {"", "1.2.3", "1.2.3.4.5", "1.2.3.", ".1.2.3", "1..2.3", "01.2.3.4",
                         "1.2.3.04", "256.1.1.1", "1.2.3.1000", "1.2.3.4 ", " 1.2.3.4",
                         "1.2.3.4:80", "::ffff:1.2.3.4", "1.2.3.-4", "a.b.c.d", "1.2.3.4\n"}) {
    EXPECT_FALSE(is_canonical_ipv4(no)) << no;
  }
}

// Dotted texts of 1-5 numbers, some with leading zeros or out of range.
rc::Gen<std::string> dotted_text() {
  const auto part = rc::gen::oneOf(
      rc::gen::map(rc::gen::inRange(0, 300), [](int n) { return std::to_string(n); }),
      rc::gen::map(rc::gen::inRange(0, 100), [](int n) { return "0" + std::to_string(n); }),
      rc::gen::container<std::string>(rc::gen::elementOf(std::string("0123456789.: a"))));
  return rc::gen::map(rc::gen::mapcat(rc::gen::inRange<std::size_t>(1, 6),
                                      [part](std::size_t n) {
                                        return rc::gen::container<std::vector<std::string>>(n, part);
                                      }),
                      [](const std::vector<std::string>& parts) {
                        std::string out;
                        for (const auto& p : parts) out += (out.empty() ? "" : ".") + p;
                        return out;
                      });
}

RC_GTEST_PROP(CanonicalIpv4, AgreesWithParsingAndPrinting, ()) {
  const auto text = *dotted_text();
  const auto ip = parse_address(text);
  RC_ASSERT(is_canonical_ipv4(text) == (ip && !ip->v6 && ip->to_string() == text));
}

RC_GTEST_PROP(CanonicalIpv4, EveryIpv4AddressPrintsCanonical,
              (std::uint8_t a, std::uint8_t b, std::uint8_t c, std::uint8_t d)) {
  IpAddress ip;
  ip.bytes[0] = a;
  ip.bytes[1] = b;
  ip.bytes[2] = c;
  ip.bytes[3] = d;
  RC_ASSERT(is_canonical_ipv4(ip.to_string()));
  RC_ASSERT(parse_address(ip.to_string()) == ip);
}

TEST(ApiKeyIdentity, IsStableHashedAndNeverContainsTheSecret) {
  const auto a = limiter::api_key_identity("sk_live_secret_123");
  EXPECT_EQ(a, limiter::api_key_identity("sk_live_secret_123"));
  EXPECT_NE(a, limiter::api_key_identity("sk_live_secret_124"));
  EXPECT_TRUE(a.starts_with("key:"));
  EXPECT_EQ(a.size(), 4u + 16u);
  EXPECT_EQ(a.find("secret"), std::string::npos);
}

}  // namespace
}  // namespace ratekeeper::http
