#pragma once
// The HTTP/2 server side of one client connection, apart from its socket (the frame layer, on
// libnghttp2): bytes received go in (receive), bytes to send come out (take_output), each
// request comes out whole (its fields and its body, up to body_limit), each response goes in
// (its head, then its body in pieces, sent as the client's flow control allows).
//
// Bounds, each answered as HTTP/2 says: concurrent streams (SETTINGS_MAX_CONCURRENT_STREAMS; a
// stream beyond is refused), a stream's header block (over header_limit: 431), a request body
// (over body_limit, or over connection_body_limit with the other streams' bodies: 413, then the
// stream is reset NO_ERROR so the client stops sending), the
// receive windows (a stream's and the connection's), RST_STREAM from the client (a token
// bucket: a Rapid Reset flood ends the connection with GOAWAY), CONTINUATION frames after one
// HEADERS (a flood ends the connection), SETTINGS and PING floods (libnghttp2's bounds on
// frames it must acknowledge). A protocol error ends the connection with GOAWAY.
//
// Not thread-safe: one connection's thread. Events run inside receive() and take_output();
// they may call respond(), body() and reset() (not destroy the connection).

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "ratekeeper/http/request.hpp"

struct nghttp2_session;

namespace ratekeeper::http {

struct H2Limits {
  std::uint32_t max_concurrent_streams = 100;
  std::size_t header_limit = std::size_t{8} * 1024;   // a stream's header fields, decoded
  std::size_t body_limit = std::size_t{1024} * 1024;  // a request's body
  // Request body bytes held at once over the connection's streams (received, the request not
  // yet whole): beyond, the stream that would exceed it is answered 413 as a body over the
  // limit is. 0: 2 × body_limit.
  std::size_t connection_body_limit = 0;
  std::uint32_t stream_window = 256 * 1024;           // receive window per stream
  std::uint64_t reset_burst = 1000;                   // RST_STREAM from the client: a burst,
  std::uint64_t reset_rate = 33;                      // then so many a second
  std::size_t max_continuations = 8;                  // CONTINUATION frames after one HEADERS
};

// A response's header fields for HTTP/2: the connection-specific ones left out (RFC 9113
// 8.2.2), names lower-cased when sent, all in one buffer. Kept and cleared by its owner, it is
// built without allocating once it has grown to its usual size.
class H2Fields {
 public:
  void add(std::string_view name, std::string_view value);
  void clear() noexcept {
    bytes_.clear();
    spans_.clear();
  }
  std::size_t size() const noexcept { return spans_.size(); }

 private:
  friend class H2Connection;
  struct Span {
    std::size_t name, name_size, value, value_size;  // offsets into bytes_
  };
  std::string bytes_;
  std::vector<Span> spans_;
};

// The name of an HTTP/2 error code ("PROTOCOL_ERROR", "ENHANCE_YOUR_CALM", ...; RFC 9113 7).
std::string_view h2_error_name(std::uint32_t code) noexcept;

class H2Connection {
 public:
  struct Events {
    // A request received whole (its END_STREAM): target and fields as received (":authority"
    // as Host).
    std::function<void(std::int32_t stream, Request request)> request;
    // The stream is gone (answered and sent, or reset by either side): nothing more for it.
    std::function<void(std::int32_t stream)> closed;
    // A stream's response body buffer was emptied into frames: room for more.
    std::function<void(std::int32_t stream)> drained;
    // The connection is ended by an error of the client's (a flood, a protocol error): its
    // GOAWAY, with that error code (RFC 9113 7), went out. `reason`: what the frame layer said
    // of it, when it said something (may be empty). Once a connection.
    std::function<void(std::uint32_t error_code, std::string_view reason)> ended;
  };

  H2Connection(H2Limits limits, Events events);
  ~H2Connection();
  H2Connection(const H2Connection&) = delete;
  H2Connection& operator=(const H2Connection&) = delete;

  // Bytes received from the client. False: the connection is to end (a protocol error or a
  // flood): send what take_output() gives (its GOAWAY), then close.
  bool receive(std::string_view bytes);
  // Appends the bytes to send now to `out`.
  void take_output(std::string& out);
  // Whether the connection has anything more to read or write (false: close it).
  bool alive() const;

  // A response's head; `has_body`: pieces follow through body(), the last with `last`.
  void respond(std::int32_t stream, int status, const HeaderList& fields, bool has_body);
  void respond(std::int32_t stream, int status, const H2Fields& fields, bool has_body);
  void body(std::int32_t stream, std::string_view data, bool last);
  // A whole response at once.
  void respond(std::int32_t stream, const Response& response);
  // Ends a stream with RST_STREAM (INTERNAL_ERROR): e.g. its upstream broke off mid-body.
  void reset(std::int32_t stream);
  // Graceful end: GOAWAY naming the last stream taken; streams open go on.
  void go_away();
  // Answers 408 (then resets) every stream whose request began before `deadline` and has not
  // come out whole: a client trickling a request holds no stream past its deadline. How many.
  std::size_t expire(std::chrono::steady_clock::time_point deadline);

  // Response body bytes given to body() and not yet framed.
  std::size_t buffered(std::int32_t stream) const;
  std::size_t open_streams() const noexcept { return streams_.size(); }

  struct Stream;

 private:
  friend struct H2Callbacks;
  Stream* find(std::int32_t stream) const;
  void answer_early(std::int32_t stream, Stream& s, int status, std::string_view body);

  H2Limits limits_;
  Events events_;
  nghttp2_session* session_ = nullptr;
  std::map<std::int32_t, std::unique_ptr<Stream>> streams_;
  std::size_t bodies_held_ = 0;  // request body bytes of streams not yet whole
  std::string failure_;          // why receive() failed (the frame layer's words), if it did
  bool ended_ = false;           // Events::ended was called
};

}  // namespace ratekeeper::http
