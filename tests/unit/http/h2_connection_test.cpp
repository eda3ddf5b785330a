// The HTTP/2 frame layer without sockets: frames written by hand go in, the server's frames
// come out. Requests come out whole; bodies are bounded per stream and per connection.

#include "http/h2_connection.hpp"

#include <gtest/gtest.h>
#include <nghttp2/nghttp2.h>

#include <cstdint>
#include <map>
#include <utility>
#include <string>
#include <vector>

namespace ratekeeper::http {
namespace {

constexpr std::string_view kPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

std::string frame(std::uint8_t type, std::uint8_t flags, std::uint32_t stream, std::string_view payload = {}) {
  std::string f;
  f += static_cast<char>((payload.size() >> 16) & 0xff);
  f += static_cast<char>((payload.size() >> 8) & 0xff);
  f += static_cast<char>(payload.size() & 0xff);
  f += static_cast<char>(type);
  f += static_cast<char>(flags);
  for (int shift : {24, 16, 8, 0}) f += static_cast<char>((stream >> shift) & 0xff);
  f += payload;
  return f;
}

// :method POST, :scheme http (static table), :path and :authority as literals.
std::string post(std::string_view path) {
  std::string b = "\x83\x86";
  b += '\x04';
  b += static_cast<char>(path.size());
  b += path;
  b += "\x01\x09localhost";
  return b;
}

// The :status of each stream's response, from the server's frames (HPACK's static table
// entries for 200 and 413 are not used: the status is read as the literal the server writes).
struct Server {
  H2Limits limits;
  std::map<std::int32_t, Request> requests;
  std::vector<std::int32_t> closed;
  std::vector<std::pair<std::uint32_t, std::string>> ended;  // error code, reason
  std::string sent;
  H2Connection h2;

  explicit Server(H2Limits l)
      : limits(l),
        h2(l, H2Connection::Events{
                  .request = [this](std::int32_t id, Request r) { requests[id] = std::move(r); },
                  .closed = [this](std::int32_t id) { closed.push_back(id); },
                  .drained = [](std::int32_t) {},
                  .ended = [this](std::uint32_t code, std::string_view why) { ended.emplace_back(code, why); },
              }) {}

  bool feed(std::string_view bytes) {
    // As a socket would: in pieces, the server's output taken between them (its window
    // updates go out, as a client reading them would let it send more).
    while (!bytes.empty()) {
      const auto piece = bytes.substr(0, 4096);
      bytes.remove_prefix(piece.size());
      if (!h2.receive(piece)) return false;
      h2.take_output(sent);
    }
    return true;
  }
};

TEST(H2Connection, ARequestComesOutWholeWithItsBody) {
  Server s({});
  ASSERT_TRUE(s.feed(std::string(kPreface) + frame(4, 0, 0) + frame(1, 4, 1, post("/upload")) +
                     frame(0, 0, 1, "hello ") + frame(0, 1, 1, "world")));
  ASSERT_EQ(s.requests.count(1), 1u);
  EXPECT_EQ(s.requests[1].method, "POST");
  EXPECT_EQ(s.requests[1].target, "/upload");
  EXPECT_EQ(s.requests[1].body, "hello world");
  ASSERT_FALSE(s.requests[1].headers.empty());
  EXPECT_EQ(s.requests[1].headers[0].first, "host");
}

// A field as an HPACK literal without indexing, its name new.
std::string literal(std::string_view name, std::string_view value) {
  std::string b(1, '\0');
  b += static_cast<char>(name.size());
  b += name;
  b += static_cast<char>(value.size());
  b += value;
  return b;
}

// Cookie crumbs (one field each over HTTP/2) come out as one field, as HTTP/1.1 has it; the
// fields of a trailer block are not the request's: left out, as over HTTP/1.1.
TEST(H2Connection, CookiesAreJoinedAndTrailersAreNotRequestFields) {
  Server s({});
  ASSERT_TRUE(s.feed(std::string(kPreface) + frame(4, 0, 0) +
                     frame(1, 4, 1, post("/upload") + literal("cookie", "a=1") + literal("x-app", "1") +
                                        literal("cookie", "b=2")) +
                     frame(0, 0, 1, "body") + frame(1, 4 | 1, 1, literal("x-user", "bob"))));
  ASSERT_EQ(s.requests.count(1), 1u);
  const auto& r = s.requests[1];
  EXPECT_EQ(r.body, "body");
  EXPECT_EQ(r.header("cookie"), "a=1; b=2");
  EXPECT_EQ(r.header("x-app"), "1");
  EXPECT_FALSE(r.header("x-user").has_value());
  int cookies = 0;
  for (const auto& [n, v] : r.headers) cookies += n == "cookie" ? 1 : 0;
  EXPECT_EQ(cookies, 1);
}

TEST(H2Connection, BodiesHeldAtOnceAreBoundedPerConnection) {
  H2Limits limits;
  limits.body_limit = 300 * 1024;  // the connection: 600 KiB at once
  Server s(limits);
  std::string frames = std::string(kPreface) + frame(4, 0, 0);
  const std::string chunk(16 * 1024, 'x');
  // Four streams, 200 KiB each, none ended: each is within its own limit.
  for (std::uint32_t id : {1u, 3u, 5u, 7u}) frames += frame(1, 4, id, post("/upload"));
  for (int i = 0; i < 12; ++i) {
    for (std::uint32_t id : {1u, 3u, 5u, 7u}) frames += frame(0, 0, id, chunk);
  }
  ASSERT_TRUE(s.feed(frames));
  EXPECT_TRUE(s.requests.empty());
  // The stream that went over 600 KiB with the others was answered (413) and reset: its
  // body is no longer held, and it is gone.
  EXPECT_EQ(s.closed.size(), 1u);
  // The others end and come out whole.
  std::string ends;
  for (std::uint32_t id : {1u, 3u, 5u, 7u}) ends += frame(0, 1, id, "!");
  ASSERT_TRUE(s.feed(ends));
  EXPECT_EQ(s.requests.size(), 3u);
  for (const auto& [id, r] : s.requests) EXPECT_EQ(r.body.size(), 12 * chunk.size() + 1) << id;
}

TEST(H2Connection, ABodyOverItsLimitIsRefused) {
  H2Limits limits;
  limits.body_limit = 1000;
  Server s(limits);
  ASSERT_TRUE(s.feed(std::string(kPreface) + frame(4, 0, 0) + frame(1, 4, 1, post("/upload")) +
                     frame(0, 0, 1, std::string(800, 'a')) + frame(0, 1, 1, std::string(800, 'b'))));
  EXPECT_TRUE(s.requests.empty());
}

TEST(H2Connection, AFrameOnTheWrongStreamEndsTheConnectionWithGoaway) {
  Server s({});
  // A connection error: nghttp2 queues the GOAWAY itself, and the session wants nothing more.
  s.feed(std::string(kPreface) + frame(4, 0, 0) + frame(0, 0, 0, "data on stream 0"));
  s.h2.take_output(s.sent);
  EXPECT_FALSE(s.h2.alive());
  bool goaway = false;
  for (std::string_view out = s.sent; out.size() >= 9;) {
    const std::size_t length = (static_cast<std::uint8_t>(out[0]) << 16) | (static_cast<std::uint8_t>(out[1]) << 8) |
                               static_cast<std::uint8_t>(out[2]);
    goaway = goaway || out[3] == 7;
    out.remove_prefix(std::min(out.size(), 9 + length));
  }
  EXPECT_TRUE(goaway);
  // Said once, with the code the GOAWAY carries, for the proxy to log and count.
  ASSERT_EQ(s.ended.size(), 1u);
  EXPECT_EQ(s.ended[0].first, NGHTTP2_PROTOCOL_ERROR);
  EXPECT_EQ(h2_error_name(s.ended[0].first), "PROTOCOL_ERROR");
}

// A flood (here, SETTINGS frames whose acknowledgements the client never reads) ends the
// connection with ENHANCE_YOUR_CALM, said with the frame layer's reason; a graceful GOAWAY
// (NO_ERROR) is no error, never said.
TEST(H2Connection, AFloodEndsTheConnectionAndSaysWhy) {
  Server s({});
  std::string flood = std::string(kPreface);
  for (int i = 0; i < 1100; ++i) flood += frame(4, 0, 0);
  EXPECT_FALSE(s.h2.receive(flood));
  s.h2.take_output(s.sent);
  ASSERT_EQ(s.ended.size(), 1u);
  EXPECT_EQ(s.ended[0].first, NGHTTP2_ENHANCE_YOUR_CALM);
  EXPECT_FALSE(s.ended[0].second.empty());

  Server calm({});
  ASSERT_TRUE(calm.feed(std::string(kPreface) + frame(4, 0, 0)));
  calm.h2.go_away();
  calm.h2.take_output(calm.sent);
  EXPECT_TRUE(calm.ended.empty());
}

// The fields of the HEADERS frame the server sent on `stream`, decoded (HPACK state carried
// over the frames, as a client's).
std::vector<std::pair<std::string, std::string>> response_fields(std::string_view out, std::uint32_t stream,
                                                                 nghttp2_hd_inflater* inflater) {
  std::vector<std::pair<std::string, std::string>> fields;
  while (out.size() >= 9) {
    const std::size_t length = (static_cast<std::uint8_t>(out[0]) << 16) | (static_cast<std::uint8_t>(out[1]) << 8) |
                               static_cast<std::uint8_t>(out[2]);
    const std::uint32_t id = ((static_cast<std::uint8_t>(out[5]) & 0x7fu) << 24) |
                             (static_cast<std::uint8_t>(out[6]) << 16) | (static_cast<std::uint8_t>(out[7]) << 8) |
                             static_cast<std::uint8_t>(out[8]);
    if (out[3] == 1 && id == stream) {
      auto* in = reinterpret_cast<const std::uint8_t*>(out.data() + 9);
      std::size_t left = length;
      for (;;) {
        nghttp2_nv nv;
        int flags = 0;
        const auto n = nghttp2_hd_inflate_hd2(inflater, &nv, &flags, in, left, 1);
        if (n < 0) return {};
        in += n;
        left -= static_cast<std::size_t>(n);
        if (flags & NGHTTP2_HD_INFLATE_EMIT) {
          fields.emplace_back(std::string(reinterpret_cast<char*>(nv.name), nv.namelen),
                              std::string(reinterpret_cast<char*>(nv.value), nv.valuelen));
        }
        if (flags & NGHTTP2_HD_INFLATE_FINAL) {
          nghttp2_hd_inflate_end_headers(inflater);
          break;
        }
        if (n == 0 && left == 0) break;
      }
    }
    out.remove_prefix(std::min(out.size(), 9 + length));
  }
  return fields;
}

// The response's fields as HTTP/2 sends them: names lower-cased, the connection-specific ones
// dropped, the others in order with their values whole; more fields than the frame layer keeps
// on its stack, values long enough for the field buffer to grow several times; the buffer
// cleared and used again for the next stream holds nothing of the first.
TEST(H2Connection, ResponseFieldsAreSentLowerCasedWithoutConnectionSpecificOnes) {
  Server s({});
  ASSERT_TRUE(s.feed(std::string(kPreface) + frame(4, 0, 0) + frame(1, 5, 1, post("/a")) + frame(1, 5, 3, post("/b"))));
  ASSERT_EQ(s.requests.size(), 2u);
  std::vector<std::pair<std::string, std::string>> expected{{":status", "203"}};
  H2Fields fields;
  fields.add("Connection", "keep-alive");
  fields.add("Transfer-Encoding", "chunked");
  for (int i = 0; i < 40; ++i) {
    const std::string name = "X-Field-" + std::to_string(i);
    const std::string value(static_cast<std::size_t>(10 + 7 * i), static_cast<char>('a' + i % 26));
    fields.add(name, value);
    expected.emplace_back("x-field-" + std::to_string(i), value);
  }
  fields.add("Keep-Alive", "timeout=5");
  fields.add("", "no name");
  EXPECT_EQ(fields.size(), 40u);
  s.h2.respond(1, 203, fields, false);
  s.h2.take_output(s.sent);
  nghttp2_hd_inflater* inflater = nullptr;
  ASSERT_EQ(nghttp2_hd_inflate_new(&inflater), 0);
  EXPECT_EQ(response_fields(s.sent, 1, inflater), expected);

  fields.clear();
  fields.add("Content-Type", "text/plain");
  const std::size_t first = s.sent.size();
  s.h2.respond(3, 200, fields, false);
  s.h2.take_output(s.sent);
  const std::vector<std::pair<std::string, std::string>> second{{":status", "200"}, {"content-type", "text/plain"}};
  EXPECT_EQ(response_fields(std::string_view(s.sent).substr(first), 3, inflater), second);
  nghttp2_hd_inflate_del(inflater);
}

}  // namespace
}  // namespace ratekeeper::http
