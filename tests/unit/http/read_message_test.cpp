// async_read_message (src/http/read_message.hpp): a message read from a real TCP connection into
// the proxy's parsers, with the completions and errors of Beast's http::async_read_header and
// http::async_read_some.

#include "http/read_message.hpp"

#include <gtest/gtest.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>
#include <chrono>
#include <optional>
#include <string>

#include "http/proxy_message.hpp"
#include "http/request_parser.hpp"

namespace ratekeeper::http {
namespace {

namespace net = boost::asio;
namespace bhttp = boost::beast::http;
using tcp = net::ip::tcp;
using namespace std::chrono_literals;

// The end of a connection the reads are made on (a Stream), and its peer written to by hand.
struct Connection {
  Connection() {
    tcp::acceptor acceptor(io, tcp::endpoint(net::ip::make_address("127.0.0.1"), 0));
    peer.connect(acceptor.local_endpoint());
    stream.emplace(acceptor.accept());
  }
  void send(std::string_view bytes) { net::write(peer, net::buffer(bytes)); }

  net::io_context io;
  tcp::socket peer{io};
  std::optional<Stream> stream;
  boost::beast::flat_buffer buffer;
};

// The outcome of one read, once it completes.
struct Outcome {
  bool done = false;
  boost::beast::error_code ec;
};

template <class Parser>
void read(Connection& c, Parser& parser, ReadUntil until, Outcome& out) {
  async_read_message(*c.stream, c.buffer, parser, until, [&out](boost::beast::error_code ec, std::size_t) {
    out.done = true;
    out.ec = ec;
  });
}

// Runs the connection's loop until the read completes (or 5 s pass).
void run_until_done(Connection& c, const Outcome& out) {
  const auto until = std::chrono::steady_clock::now() + 5s;
  c.io.restart();  // stopped when it last ran out of work
  while (!out.done && std::chrono::steady_clock::now() < until) c.io.run_one_for(50ms);
}

std::string buffered(const Connection& c) {
  const auto data = c.buffer.data();
  return {static_cast<const char*>(data.data()), data.size()};
}

// A head arriving in pieces completes once whole; what follows it (a pipelined request) stays
// in the buffer, and the next read completes from there without reading, though never from
// inside the call that starts it.
TEST(ReadMessage, AHeadInPiecesCompletesOnceWholeAndThePipelinedNextIsReadFromTheBuffer) {
  Connection c;
  RequestParser first(8192, 0, true);
  Outcome out;
  read(c, first, ReadUntil::header, out);
  c.send("GET /a HTTP/1.1\r\nHo");
  c.io.run_for(100ms);
  EXPECT_FALSE(out.done) << "completed on half a head";
  c.send("st: x\r\n\r\nGET /b HTTP/1.1\r\nHost: y\r\n\r\n");
  run_until_done(c, out);
  ASSERT_TRUE(out.done);
  EXPECT_FALSE(out.ec) << out.ec.message();
  ASSERT_TRUE(first.is_header_done());
  EXPECT_EQ(first.request().target, "/a");
  EXPECT_EQ(buffered(c), "GET /b HTTP/1.1\r\nHost: y\r\n\r\n");

  RequestParser second(8192, 0, true);
  Outcome next;
  read(c, second, ReadUntil::header, next);
  EXPECT_FALSE(next.done) << "completed inside the call that started it";
  run_until_done(c, next);
  ASSERT_TRUE(next.done);
  EXPECT_FALSE(next.ec) << next.ec.message();
  EXPECT_EQ(second.request().target, "/b");
  EXPECT_EQ(buffered(c), "");
}

// How a head read ends when the peer stops short or sends what is not HTTP: the error each
// caller tells apart (a keep-alive connection closed between requests, a request cut off, a
// malformed one answered 400).
TEST(ReadMessage, AHeadCutShortOrMalformedEndsWithTheErrorThatSaysWhich) {
  struct Case {
    std::string sent;
    bool close;  // the peer closes its side after sending
    bhttp::error expected;
  };
  const Case cases[] = {
      {"", true, bhttp::error::end_of_stream},
      {"GET /a HTTP/1.1\r\nHost:", true, bhttp::error::partial_message},
      {"GET /a HTTP/1.1\r\nBad Name: x\r\n\r\n", false, bhttp::error::bad_field},
  };
  for (const auto& c : cases) {
    Connection connection;
    RequestParser parser(8192, 0, true);
    Outcome out;
    read(connection, parser, ReadUntil::header, out);
    if (!c.sent.empty()) connection.send(c.sent);
    if (c.close) connection.peer.shutdown(tcp::socket::shutdown_send);
    run_until_done(connection, out);
    ASSERT_TRUE(out.done) << c.sent;
    EXPECT_EQ(out.ec, c.expected) << c.sent << ": " << out.ec.message();
  }
}

// A buffer that cannot grow to hold the head (its max_size) ends the read, whatever the
// parser's own header limit.
TEST(ReadMessage, AHeadLargerThanTheBufferCanGrowIsBufferOverflow) {
  Connection c;
  c.buffer = boost::beast::flat_buffer(64);
  RequestParser parser(8192, 0, true);
  Outcome out;
  read(c, parser, ReadUntil::header, out);
  c.send("GET /a HTTP/1.1\r\nHost: x\r\nX-Long: " + std::string(200, 'v') + "\r\n\r\n");
  run_until_done(c, out);
  ASSERT_TRUE(out.done);
  EXPECT_EQ(out.ec, bhttp::error::buffer_overflow);
}

// A response's head read whole from `bytes`.
void read_head(Connection& c, ResponseParser& parser, std::string_view bytes) {
  Outcome head;
  read(c, parser, ReadUntil::header, head);
  c.send(bytes);
  run_until_done(c, head);
  ASSERT_TRUE(head.done);
  ASSERT_FALSE(head.ec) << head.ec.message();
}

// One read of a body into `room`, after the peer sends `bytes` (none: what is buffered) and,
// when `close`, shuts its side: the outcome, and what arrived.
struct Piece {
  Outcome out;
  std::string bytes;
};
template <std::size_t N>
Piece read_piece(Connection& c, ResponseParser& parser, char (&room)[N], std::string_view bytes, bool close) {
  Piece piece;
  parser.stream_body(room, N);
  read(c, parser, ReadUntil::some, piece.out);
  if (!bytes.empty()) c.send(bytes);
  if (close) c.peer.shutdown(tcp::socket::shutdown_send);
  run_until_done(c, piece.out);
  piece.bytes.assign(room, parser.streamed());
  return piece;
}

// A response body read a piece at a time into the place stream_body() gives: each read
// completes with what arrived (need_buffer when that place is full); a body delimited by the
// upstream closing completes at the close.
TEST(ReadMessage, ABodyIsReadAPieceAtATimeAndACloseEndsABodyDelimitedByIt) {
  Connection c;
  ResponseParser parser(8192);
  read_head(c, parser, "HTTP/1.1 200 OK\r\n\r\n");
  EXPECT_EQ(parser.status(), 200);

  char body[4];
  const auto first = read_piece(c, parser, body, "abcdef", false);
  ASSERT_TRUE(first.out.done);
  EXPECT_EQ(first.out.ec, bhttp::error::need_buffer);
  EXPECT_EQ(first.bytes, "abcd");

  const auto rest = read_piece(c, parser, body, "", false);  // "ef" is buffered: parsed without reading
  ASSERT_TRUE(rest.out.done);
  EXPECT_FALSE(rest.out.ec) << rest.out.ec.message();
  EXPECT_EQ(rest.bytes, "ef");
  EXPECT_FALSE(parser.is_done());

  const auto end = read_piece(c, parser, body, "", true);
  ASSERT_TRUE(end.out.done);
  EXPECT_FALSE(end.out.ec) << end.out.ec.message();
  EXPECT_TRUE(parser.is_done());
  EXPECT_EQ(end.bytes, "");
}

// A body cut short by the close (its Content-Length not reached) is a partial message.
TEST(ReadMessage, ACloseBeforeTheStatedLengthIsAPartialMessage) {
  Connection c;
  ResponseParser parser(8192);
  read_head(c, parser, "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc");
  char body[64];
  const auto piece = read_piece(c, parser, body, "", false);
  EXPECT_FALSE(piece.out.ec) << piece.out.ec.message();
  EXPECT_EQ(piece.bytes, "abc");
  const auto end = read_piece(c, parser, body, "", true);
  ASSERT_TRUE(end.out.done);
  EXPECT_EQ(end.out.ec, bhttp::error::partial_message);
}

}  // namespace
}  // namespace ratekeeper::http
