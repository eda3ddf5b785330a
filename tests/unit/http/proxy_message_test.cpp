// The proxy's messages without sockets: which fields pass each way, the heads it writes, the
// upstream response parser, and the upstream URL.

#include "http/proxy_message.hpp"

#include <gtest/gtest.h>

#include "ratekeeper/http/proxy.hpp"

namespace ratekeeper::http {
namespace {

std::optional<std::string> field(const HeaderList& fields, std::string_view name) {
  for (const auto& [n, v] : fields) {
    if (iequals(n, name)) return v;
  }
  return std::nullopt;
}

// RFC 9110 7.6.1's hop-by-hop fields and the older ones proxies drop, in any case; no other
// name, of the same length or not.
TEST(ProxyFields, HopByHopNamesAreKnownInAnyCase) {
  for (const std::string_view name : {"Connection", "keep-alive", "PROXY-CONNECTION", "te", "Trailer", "upgrade",
                                      "Transfer-Encoding", "proxy-authenticate", "Proxy-Authorization"}) {
    EXPECT_TRUE(is_hop_by_hop(name)) << name;
  }
  for (const std::string_view name : {"", "t", "tf", "trailers", "upgrader", "x-connect", "connections",
                                      "content-length", "proxy-connectio", "transfer-encodings", "authorization",
                                      "x-forwarded-for-and-more-than-sixty-four-characters-in-the-name-of-it"}) {
    EXPECT_FALSE(is_hop_by_hop(name)) << name;
  }
}

TEST(ProxyFields, RequestLosesHopByHopAndConnectionNamedFieldsButNotForwardedOnes) {
  const HeaderList received = {
      {"Host", "app.example"},
      {"Connection", "keep-alive, X-Drop, x-forwarded-for"},
      {"connection", "X-Forwarded-Host, Host, RateLimit, Forwarded"},
      {"X-Drop", "1"},
      {"Keep-Alive", "timeout=5"},
      {"TE", "trailers"},
      {"Trailer", "X-T"},
      {"Upgrade", "websocket"},
      {"Proxy-Connection", "keep-alive"},
      {"Proxy-Authorization", "Basic eA=="},
      {"Transfer-Encoding", "chunked"},
      {"Content-Length", "5"},
      {"Expect", "100-continue"},
      {"X-Forwarded-For", " 203.0.113.9 "},
      {"X-Forwarded-For", "198.51.100.1"},
      {"X-Forwarded-Proto", "https"},
      {"X-Forwarded-Host", "evil.example"},
      {"Forwarded", "for=1.2.3.4"},
      {"X-Keep", "2"},
  };
  const auto out = upstream_request_fields(received, Forwarding("192.0.2.7"));
  for (const char* gone : {"Connection", "X-Drop", "Keep-Alive", "TE", "Trailer", "Upgrade",
                           "Proxy-Connection", "Proxy-Authorization", "Transfer-Encoding",
                           "Content-Length", "Expect"}) {
    EXPECT_FALSE(field(out, gone)) << gone;
  }
  EXPECT_EQ(field(out, "X-Forwarded-For"), "203.0.113.9, 198.51.100.1, 192.0.2.7");
  EXPECT_EQ(field(out, "X-Forwarded-Proto"), "http");
  EXPECT_EQ(field(out, "X-Forwarded-Host"), "app.example");
  EXPECT_EQ(field(out, "Host"), "app.example");
  EXPECT_EQ(field(out, "Forwarded"), "for=1.2.3.4, for=192.0.2.7;proto=http");
  EXPECT_EQ(field(out, "X-Keep"), "2");
  int forwarded_for = 0;
  for (const auto& f : out) forwarded_for += iequals(f.first, "X-Forwarded-For") ? 1 : 0;
  EXPECT_EQ(forwarded_for, 1);
}

// What the rules decide on is what the upstream receives: the end-to-end fields a request
// names in Connection are taken out of it before the decision, and exactly those; the ones the
// proxy reads, rewrites or vouches for stay, and the rest keep their order.
TEST(ProxyFields, FieldsNamedInConnectionAreTakenOutBeforeTheDecision) {
  HeaderList fields = {
      {"Host", "app.example"},
      {"X-API-Key", "sk_throwaway"},
      {"Connection", "keep-alive, x-api-key, X-Max-Tokens"},
      {"X-Max-Tokens", "0"},
      {"connection", "Upgrade, Content-Length, X-Forwarded-For, Host, x-user-id"},
      {"Upgrade", "websocket"},
      {"Content-Length", "3"},
      {"X-Forwarded-For", "203.0.113.9"},
      {"X-User-ID", "a"},
      {"X-User-ID", "b"},
      {"X-Keep", "1"},
  };
  const auto forwarded = upstream_request_fields(fields, Forwarding("192.0.2.7"));
  remove_connection_named(fields);
  const HeaderList expected = {
      {"Host", "app.example"},
      {"Connection", "keep-alive, x-api-key, X-Max-Tokens"},
      {"connection", "Upgrade, Content-Length, X-Forwarded-For, Host, x-user-id"},
      {"Upgrade", "websocket"},
      {"Content-Length", "3"},
      {"X-Forwarded-For", "203.0.113.9"},
      {"X-Keep", "1"},
  };
  EXPECT_EQ(fields, expected);
  // Sent on, the remaining fields give the same request as before.
  EXPECT_EQ(upstream_request_fields(fields, Forwarding("192.0.2.7")), forwarded);

  HeaderList plain = {{"Host", "a"}, {"Connection", "close"}, {"Close", "x"}, {"X-A", "1"}};
  remove_connection_named(plain);
  EXPECT_EQ(plain, (HeaderList{{"Host", "a"}, {"Connection", "close"}, {"X-A", "1"}}));
  HeaderList none = {{"Host", "a"}, {"X-A", "1"}};
  remove_connection_named(none);
  EXPECT_EQ(none, (HeaderList{{"Host", "a"}, {"X-A", "1"}}));
}

// A body sent with a method that has none (GET, HEAD, DELETE, OPTIONS, TRACE) may be read by
// the application as the next request: such a request ends its upstream connection.
TEST(ProxyFields, ARequestEndingItsUpstreamConnectionSaysClose) {
  for (const std::string_view method : {"GET", "HEAD", "DELETE", "OPTIONS", "TRACE"}) {
    EXPECT_TRUE(body_unexpected(method)) << method;
  }
  for (const std::string_view method : {"POST", "PUT", "PATCH", "get", "PROPFIND"}) {
    EXPECT_FALSE(body_unexpected(method)) << method;
  }
  const HeaderList received = {{"Host", "a"}, {"Connection", "keep-alive"}};
  const auto last = upstream_request_fields(received, Forwarding("192.0.2.7", "http", {}, true));
  EXPECT_EQ(field(last, "Connection"), "close");
  EXPECT_FALSE(field(upstream_request_fields(received, Forwarding("192.0.2.7")), "Connection"));
  std::string head;
  write_upstream_request_head(head, "GET", "/", received, Forwarding("192.0.2.7", "http", {}, true),
                              Framing::length, 4);
  EXPECT_EQ(head, request_head("GET", "/", last, Framing::length, 4));
  EXPECT_NE(head.find("\r\nConnection: close\r\n"), std::string::npos);
}

// RFC 7239: a request that came with Forwarded (one field or several) gets this hop's element
// last, so that the client's own elements cannot pass for the proxy's word; one without it
// gets none (X-Forwarded-For says the same).
TEST(ProxyFields, ForwardedGetsThisHopsElementLast) {
  const HeaderList two = {{"Host", "a"}, {"Forwarded", " for=203.0.113.9;proto=https "}, {"Forwarded", "for=unknown"}};
  EXPECT_EQ(field(upstream_request_fields(two, Forwarding("192.0.2.7", "https", {})), "Forwarded"),
            "for=203.0.113.9;proto=https, for=unknown, for=192.0.2.7;proto=https");
  const HeaderList one = {{"Host", "a"}, {"forwarded", "for=203.0.113.9"}};
  const auto v6 = upstream_request_fields(one, Forwarding("2001:db8::7"));
  EXPECT_EQ(field(v6, "Forwarded"), "for=203.0.113.9, for=\"[2001:db8::7]\";proto=http");
  int fields = 0;
  for (const auto& f : v6) fields += iequals(f.first, "Forwarded") ? 1 : 0;
  EXPECT_EQ(fields, 1);
  EXPECT_FALSE(field(upstream_request_fields({{"Host", "a"}}, Forwarding("192.0.2.7")), "Forwarded"));
  // A value with a quoted string left open would swallow the element after it: it is dropped.
  for (const char* open : {"for=\"6.6.6.6", "for=6.6.6.6;x=\"", "for=\"6.6.6.6\\\"", "for=\"a\\"}) {
    const HeaderList bad = {{"Host", "a"}, {"Forwarded", open}, {"Forwarded", "for=203.0.113.9"}};
    EXPECT_EQ(field(upstream_request_fields(bad, Forwarding("192.0.2.7")), "Forwarded"),
              "for=203.0.113.9, for=192.0.2.7;proto=http")
        << open;
  }
  const HeaderList closed = {{"Host", "a"}, {"Forwarded", "for=\"[2001:db8::1]:80\";by=\"a\\\"b\""}};
  EXPECT_EQ(field(upstream_request_fields(closed, Forwarding("192.0.2.7")), "Forwarded"),
            "for=\"[2001:db8::1]:80\";by=\"a\\\"b\", for=192.0.2.7;proto=http");
  const HeaderList only_open = {{"Host", "a"}, {"Forwarded", "for=\"x"}};
  EXPECT_EQ(field(upstream_request_fields(only_open, Forwarding("192.0.2.7")), "Forwarded"),
            "for=192.0.2.7;proto=http");
}

// Another spelling of a field the proxy sets or frames by (X_Forwarded_For, Transfer_Encoding)
// is not sent on: a gateway would read it as that field.
TEST(ProxyFields, OtherSpellingsOfTheProxysOwnFieldsAreNotSentOn) {
  const HeaderList received = {{"Host", "a"},
                               {"X_Forwarded_For", "6.6.6.6"},
                               {"X.Forwarded.Proto", "https"},
                               {"x_forwarded_host", "evil.example"},
                               {"Transfer_Encoding", "chunked"},
                               {"Content_Length", "5"},
                               {"X-Forwarded-For", "203.0.113.9"},
                               {"X_Other", "kept"}};
  const auto out = upstream_request_fields(received, Forwarding("192.0.2.7"));
  for (const char* gone : {"X_Forwarded_For", "X.Forwarded.Proto", "x_forwarded_host", "Transfer_Encoding",
                           "Content_Length"}) {
    for (const auto& f : out) EXPECT_NE(f.first, gone);
  }
  EXPECT_EQ(field(out, "X-Forwarded-For"), "203.0.113.9, 192.0.2.7");
  EXPECT_EQ(field(out, "X-Forwarded-Proto"), "http");
  EXPECT_EQ(field(out, "X-Forwarded-Host"), "a");
  EXPECT_EQ(field(out, "X_Other"), "kept");
}

TEST(ProxyFields, WithoutHostNoForwardedHostAndThePeerStartsTheChain) {
  const auto out = upstream_request_fields({{"Accept", "*/*"}}, Forwarding("::1"));
  EXPECT_EQ(field(out, "X-Forwarded-For"), "::1");
  EXPECT_FALSE(field(out, "X-Forwarded-Host"));
}

TEST(ProxyFields, ResponseLosesHopByHopAndTheLimiterFieldsReplaceTheUpstreams) {
  const HeaderList received = {{"Connection", "X-Secret, RateLimit, Retry-After"},
                               {"X-Secret", "1"},
                               {"Keep-Alive", "timeout=5"},
                               {"Proxy-Authenticate", "Basic"},
                               {"Transfer-Encoding", "chunked"},
                               {"Content-Length", "10"},
                               {"RateLimit", "\"upstream\";r=1;t=1"},
                               {"Retry-After", "7"},
                               {"Set-Cookie", "a=1"},
                               {"Set-Cookie", "b=2"}};
  const HeaderList limiter = {{"RateLimit-Policy", "\"api\";q=10;w=1"},
                              {"RateLimit", "\"api\";r=9;t=1"}};
  const auto out = client_response_fields(received, limiter);
  for (const char* gone : {"Connection", "X-Secret", "Keep-Alive", "Proxy-Authenticate",
                           "Transfer-Encoding", "Content-Length"}) {
    EXPECT_FALSE(field(out, gone)) << gone;
  }
  EXPECT_EQ(field(out, "RateLimit"), "\"api\";r=9;t=1");
  EXPECT_EQ(field(out, "RateLimit-Policy"), "\"api\";q=10;w=1");
  EXPECT_EQ(field(out, "Retry-After"), "7");  // the upstream's own, named in Connection: kept
  int cookies = 0, ratelimits = 0;
  for (const auto& f : out) {
    cookies += iequals(f.first, "Set-Cookie") ? 1 : 0;
    ratelimits += iequals(f.first, "RateLimit") ? 1 : 0;
  }
  EXPECT_EQ(cookies, 2);
  EXPECT_EQ(ratelimits, 1);
}

TEST(ProxyHeads, LeaveOutAFieldWithACarriageReturnALineFeedOrANulAnywhere) {
  using namespace std::string_literals;
  // Each of the three alone, in a name or a value, at the start, inside and at the end; a tab
  // (a value's whitespace) and the other bytes below a carriage return are written as given.
  HeaderList fields = {{"Host", "x"}};
  for (const std::string& ending : {"\r"s, "\n"s, "\0"s}) {
    for (const std::string& text : {ending + "a", "a" + ending + "b", "ab" + ending}) {
      fields.emplace_back("X-Value", text);
      fields.emplace_back("X-Name" + text, "v");
    }
  }
  fields.emplace_back("X-Tab", "a\tb");
  fields.emplace_back("X-Low", "a\x01\x0b\x0c b");
  EXPECT_EQ(request_head("GET", "/", fields, Framing::none, 0),
            "GET / HTTP/1.1\r\nHost: x\r\nX-Tab: a\tb\r\nX-Low: a\x01\x0b\x0c b\r\n\r\n");
}

// Long names and values are checked a word at a time: a breaking byte is found at every
// position of a word and of the tail after the last whole word, and every other byte (high
// ones, those next to CR and LF in value) passes wherever it stands.
TEST(ProxyHeads, LeaveOutABreakingByteAtAnyPositionOfALongNameOrValue) {
  for (const char breaking : {'\r', '\n', '\0'}) {
    for (std::size_t length : {8u, 16u, 21u}) {
      for (std::size_t at = 0; at < length; ++at) {
        std::string text(length, 'a');
        text[at] = breaking;
        const HeaderList in_value = {{"X-Value", text}};
        EXPECT_EQ(request_head("GET", "/", in_value, Framing::none, 0), "GET / HTTP/1.1\r\n\r\n")
            << int(breaking) << " at " << at << " of " << length;
        const HeaderList in_name = {{"X-" + text, "v"}};
        EXPECT_EQ(request_head("GET", "/", in_name, Framing::none, 0), "GET / HTTP/1.1\r\n\r\n")
            << int(breaking) << " at " << at << " of " << length << " (name)";
      }
    }
  }
  std::string every_other;
  for (int c = 1; c < 256; ++c) {
    if (c != '\r' && c != '\n') every_other += static_cast<char>(c);
  }
  for (std::size_t from = 0; from < 8; ++from) {
    const std::string value = every_other.substr(from);
    const HeaderList fields = {{"X-Value", value}};
    EXPECT_EQ(request_head("GET", "/", fields, Framing::none, 0),
              "GET / HTTP/1.1\r\nX-Value: " + value + "\r\n\r\n")
        << "from " << from;
  }
}

TEST(ProxyHeads, StateTheirOwnFramingAndLeaveOutFieldsThatWouldBreakThem) {
  const HeaderList fields = {{"Host", "x"}, {"X-Bad", "a\r\nInjected: 1"}, {"", "v"}, {"A:B", "c"}};
  EXPECT_EQ(request_head("POST", "/a?b", fields, Framing::chunked, 0),
            "POST /a?b HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n");
  EXPECT_EQ(request_head("GET", "/", {}, Framing::length, 0),
            "GET / HTTP/1.1\r\nContent-Length: 0\r\n\r\n");
  EXPECT_EQ(response_head(11, 200, "OK", {}, Framing::length, 12, true),
            "HTTP/1.1 200 OK\r\nContent-Length: 12\r\n\r\n");
  EXPECT_EQ(response_head(11, 502, "Bad Gateway", {}, Framing::none, 0, false),
            "HTTP/1.1 502 Bad Gateway\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(response_head(10, 200, "OK", {}, Framing::close, 0, true),
            "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\n\r\n");
  EXPECT_EQ(response_head(11, 200, "O\r\nK", {}, Framing::none, 0, true), "HTTP/1.1 200 \r\n\r\n");
  EXPECT_EQ(chunk_prefix(255), "ff\r\n");
  EXPECT_EQ(chunk_prefix(0x10000), "10000\r\n");
  EXPECT_EQ(response_head(11, 101, "Switching Protocols", {}, Framing::none, 0, true),
            "HTTP/1.1 101 Switching Protocols\r\n\r\n");
  EXPECT_EQ(response_head(11, 999, "", {}, Framing::length, 18446744073709551615u, true),
            "HTTP/1.1 999 \r\nContent-Length: 18446744073709551615\r\n\r\n");
}

// The heads the proxy writes in place are the heads of the field lists, whatever was in
// the string before.
TEST(ProxyHeads, WrittenInPlaceEqualTheHeadsOfTheFieldLists) {
  const HeaderList request = {{"Host", "app.example"},
                              {"Connection", "keep-alive, X-Drop, Host"},
                              {"X-Drop", "1"},
                              {"Expect", "100-continue"},
                              {"X-Forwarded-For", " 203.0.113.9 "},
                              {"X-Forwarded-Host", "evil.example"},
                              {"X-Bad", "a\r\nInjected: 1"},
                              {"Accept", "*/*"}};
  std::string out = "left over from before";
  write_upstream_request_head(out, "POST", "/a?b", request, Forwarding("192.0.2.7"), Framing::length, 5);
  EXPECT_EQ(out, request_head("POST", "/a?b", upstream_request_fields(request, Forwarding("192.0.2.7")),
                              Framing::length, 5));
  EXPECT_NE(out.find("X-Forwarded-For: 203.0.113.9, 192.0.2.7\r\n"), std::string::npos);

  const HeaderList response = {{"Connection", "X-Secret, RateLimit"},
                               {"X-Secret", "1"},
                               {"Content-Length", "10"},
                               {"RateLimit", "\"upstream\";r=1;t=1"},
                               {"Set-Cookie", "a=1"}};
  const HeaderList limiter = {{"RateLimit", "\"api\";r=9;t=1"}};
  for (const int version : {10, 11}) {
    for (const bool keep : {false, true}) {
      write_client_response_head(out, version, 200, "OK", response, limiter, Framing::chunked, 0,
                                 keep);
      EXPECT_EQ(out, response_head(version, 200, "OK", client_response_fields(response, limiter),
                                   Framing::chunked, 0, keep));
    }
  }
  write_client_response_head(out, 11, 404, "Not\nFound", {}, {}, Framing::length, 3, true);
  EXPECT_EQ(out, "HTTP/1.1 404 \r\nContent-Length: 3\r\n\r\n");
}

TEST(ResponseParserTest, KeepsStatusAndFieldsAndStreamsTheBody) {
  ResponseParser parser(8192);
  const std::string bytes =
      "HTTP/1.1 201 Created\r\nX-A: 1\r\nTransfer-Encoding: chunked\r\n\r\n"
      "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n";
  boost::beast::error_code ec;
  std::string_view in = bytes;
  std::string body;
  char piece[4];
  while (!parser.is_done()) {
    if (parser.is_header_done()) parser.stream_body(piece, sizeof piece);
    const auto used = parser.put(boost::asio::const_buffer(in.data(), in.size()), ec);
    in.remove_prefix(used);
    if (ec == boost::beast::http::error::need_buffer) ec = {};
    ASSERT_FALSE(ec) << ec.message();
    body.append(piece, parser.is_header_done() ? parser.streamed() : 0);
  }
  EXPECT_EQ(parser.status(), 201);
  EXPECT_EQ(parser.reason(), "Created");
  EXPECT_EQ(body, "hello world");
  ASSERT_EQ(parser.fields().size(), 2u);
  EXPECT_EQ(parser.fields()[0].first, "X-A");
}

TEST(ResponseParserTest, TrailerFieldsAreDropped) {
  ResponseParser parser(8192);
  const std::string bytes =
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
      "1\r\nx\r\n0\r\nServer-Timing: db;dur=5\r\nSet-Cookie: s=1\r\n\r\n";
  char piece[16];
  boost::beast::error_code ec;
  std::string_view in = bytes;
  while (!parser.is_done() && !ec) {
    if (parser.is_header_done()) parser.stream_body(piece, sizeof piece);
    in.remove_prefix(parser.put(boost::asio::const_buffer(in.data(), in.size()), ec));
  }
  ASSERT_FALSE(ec) << ec.message();
  ASSERT_EQ(parser.fields().size(), 1u);
  EXPECT_EQ(parser.fields()[0].first, "Transfer-Encoding");
}

TEST(ResponseParserTest, RefusesTwoContentLengths) {
  ResponseParser parser(8192);
  const std::string bytes = "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx";
  boost::beast::error_code ec;
  parser.put(boost::asio::const_buffer(bytes.data(), bytes.size()), ec);
  EXPECT_EQ(ec, boost::beast::http::error::bad_content_length);
}

TEST(UpstreamUrl, HostAndPort) {
  auto u = parse_upstream_url("http://127.0.0.1:9000");
  ASSERT_TRUE(u);
  EXPECT_EQ(u->host, "127.0.0.1");
  EXPECT_EQ(u->port, 9000);
  u = parse_upstream_url("HTTP://app.internal/");
  ASSERT_TRUE(u);
  EXPECT_EQ(u->host, "app.internal");
  EXPECT_EQ(u->port, 80);
  u = parse_upstream_url("http://[::1]:8081");
  ASSERT_TRUE(u);
  EXPECT_EQ(u->host, "::1");
  EXPECT_EQ(u->port, 8081);
  EXPECT_FALSE(u->tls.enabled);
}

TEST(UpstreamUrl, HttpsIsTlsWithVerificationOnPort443) {
  auto u = parse_upstream_url("https://app.internal");
  ASSERT_TRUE(u);
  EXPECT_EQ(u->host, "app.internal");
  EXPECT_EQ(u->port, 443);
  EXPECT_TRUE(u->tls.enabled);
  EXPECT_TRUE(u->tls.verify);
  u = parse_upstream_url("HTTPS://10.0.0.2:8443/");
  ASSERT_TRUE(u);
  EXPECT_EQ(u->port, 8443);
  EXPECT_TRUE(u->tls.enabled);
}

TEST(UpstreamUrl, RefusesWhatItCannotHonour) {
  for (const char* bad : {"https://", "https://x/api", "x:80", "http://", "http://x:0", "http://x:65536",
                          "http://x:", "http://x/api", "http://x?q", "http://u:p@x",
                          "http://::1:80", "http://[::1", "http://[::1]x", "ftp://x"}) {
    const auto r = parse_upstream_url(bad);
    EXPECT_FALSE(r) << bad;
    if (!r) {
      EXPECT_EQ(r.error().code, ErrorCode::invalid_argument);
    }
  }
}

}  // namespace
}  // namespace ratekeeper::http

namespace ratekeeper::http {
namespace {

const std::vector<std::string> kWebSocket{"websocket"};

TEST(ProxyUpgrade, AskedForOnlyWithUpgradeNamedInConnection) {
  EXPECT_EQ(requested_upgrade({{"Connection", "keep-alive, Upgrade"}, {"Upgrade", " websocket "}}, kWebSocket),
            "websocket");
  EXPECT_EQ(requested_upgrade({{"Upgrade", "websocket"}}, kWebSocket), "");   // not named in Connection
  EXPECT_EQ(requested_upgrade({{"Connection", "upgrade"}}, kWebSocket), "");  // no protocol
  EXPECT_EQ(requested_upgrade({{"Connection", "close"}, {"Upgrade", "h2c"}}, kWebSocket), "");
}

// Only the protocols allowed are relayed: an offer naming any other (h2c above all, whose
// tunnel would carry requests the rules never see) is no upgrade at all.
TEST(ProxyUpgrade, OnlyTheAllowedProtocolsAreRelayed) {
  const auto offer = [](std::string_view protocols, const std::vector<std::string>& allowed) {
    return std::string(requested_upgrade({{"Connection", "Upgrade"}, {"Upgrade", std::string(protocols)}}, allowed));
  };
  EXPECT_EQ(offer("WebSocket", kWebSocket), "WebSocket");
  EXPECT_EQ(offer("websocket/13", kWebSocket), "websocket/13");
  EXPECT_EQ(offer("h2c", kWebSocket), "");
  EXPECT_EQ(offer("websocket, h2c", kWebSocket), "");
  EXPECT_EQ(offer("h2c, websocket", kWebSocket), "");
  EXPECT_EQ(offer("websocket,", kWebSocket), "");
  EXPECT_EQ(offer("/13", kWebSocket), "");
  EXPECT_EQ(offer("websocket", {}), "");
  EXPECT_EQ(offer("websocket, chat", {"chat", "websocket"}), "websocket, chat");
}

TEST(ProxyUpgrade, Http2SettingsIsNeverSentUpstream) {
  const HeaderList received = {{"Host", "app"}, {"Connection", "Upgrade, HTTP2-Settings"}, {"Upgrade", "h2c"},
                               {"HTTP2-Settings", "AAMAAABkAAQAoAAAAAIAAAAA"}};
  const auto out = upstream_request_fields(received, Forwarding("192.0.2.7", "http", requested_upgrade(received, kWebSocket)));
  for (const auto& [n, v] : out) {
    EXPECT_FALSE(iequals(n, "HTTP2-Settings")) << n;
    EXPECT_FALSE(iequals(n, "Upgrade")) << n;
    EXPECT_FALSE(iequals(n, "Connection")) << n << ": " << v;
  }
}

TEST(ProxyUpgrade, TheUpstreamGetsTheUpgradeAndTheScheme) {
  const HeaderList received = {{"Host", "app"}, {"Connection", "Upgrade"}, {"Upgrade", "websocket"},
                               {"Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="}};
  const auto out = upstream_request_fields(received, Forwarding("192.0.2.7", "https", requested_upgrade(received, kWebSocket)));
  const HeaderList expected = {{"Host", "app"},
                               {"Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="},
                               {"X-Forwarded-For", "192.0.2.7"},
                               {"X-Forwarded-Proto", "https"},
                               {"X-Forwarded-Host", "app"},
                               {"Connection", "upgrade"},
                               {"Upgrade", "websocket"}};
  EXPECT_EQ(out, expected);
  // Without an upgrade asked for, neither field goes on.
  const auto plain = upstream_request_fields(received, Forwarding("192.0.2.7"));
  for (const auto& [n, v] : plain) {
    EXPECT_FALSE(iequals(n, "upgrade")) << v;
    EXPECT_FALSE(iequals(n, "connection")) << v;
  }
}

TEST(ProxyUpgrade, The101GoesBackWithItsUpgradeAndTheLimitersFields) {
  std::string out;
  write_client_upgrade_head(out, "Switching Protocols",
                            {{"Upgrade", "websocket"}, {"Connection", "Upgrade"}, {"Sec-WebSocket-Accept", "s3pPLM"}},
                            {{"RateLimit", "\"api\";r=1;t=60"}});
  EXPECT_EQ(out,
            "HTTP/1.1 101 Switching Protocols\r\nSec-WebSocket-Accept: s3pPLM\r\nRateLimit: \"api\";r=1;t=60\r\n"
            "Upgrade: websocket\r\nConnection: upgrade\r\n\r\n");
}

}  // namespace
}  // namespace ratekeeper::http
