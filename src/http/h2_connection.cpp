#include "h2_connection.hpp"

#include <nghttp2/nghttp2.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "ratekeeper/core/contained.hpp"
#include "ratekeeper/http/headers.hpp"

namespace ratekeeper::http {

struct H2Connection::Stream {
  Request request;
  std::chrono::steady_clock::time_point begun = std::chrono::steady_clock::now();
  std::size_t header_bytes = 0;
  bool authority = false;     // :authority came (pseudo-header fields come first)
  bool answered = false;      // a response was submitted: what the client still sends is ignored
  bool delivered = false;     // the request went to Events::request
  // The response body: what body() gave and was not framed yet; `last` once given.
  std::string out;
  std::size_t out_at = 0;
  bool out_last = false;
  bool deferred = false;      // the data source waits for body()
  bool reset_after = false;   // answered before the request ended: RST_STREAM once sent
};

namespace {

nghttp2_nv field(std::string_view name, std::string_view value) {
  return nghttp2_nv{reinterpret_cast<std::uint8_t*>(const_cast<char*>(name.data())),
                    reinterpret_cast<std::uint8_t*>(const_cast<char*>(value.data())), name.size(), value.size(),
                    NGHTTP2_NV_FLAG_NONE};
}

// HTTP/2 carries no connection-specific fields (RFC 9113 8.2.2).
constexpr std::array<std::string_view, 6> kConnectionSpecific = {
    "connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade", "te"};

bool connection_specific(std::string_view name) noexcept {
  for (const std::string_view n : kConnectionSpecific) {
    if (iequals(name, n)) return true;
  }
  return false;
}

}  // namespace

struct H2Callbacks {
  static H2Connection& self(void* user) { return *static_cast<H2Connection*>(user); }

  static int begin_headers(nghttp2_session*, const nghttp2_frame* frame, void* user) {
    if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;
    const auto [at, added] = self(user).streams_.emplace(frame->hd.stream_id, std::make_unique<H2Connection::Stream>());
    if (added) at->second->request.headers.reserve(8);  // one allocation for a usual request's fields
    return 0;
  }

  static int header(nghttp2_session*, const nghttp2_frame* frame, const std::uint8_t* name, std::size_t namelen,
                    const std::uint8_t* value, std::size_t valuelen, std::uint8_t, void* user) {
    auto& c = self(user);
    auto* s = c.find(frame->hd.stream_id);
    if (s == nullptr || s->answered) return 0;
    // As HPACK counts a field's size (RFC 7541 4.1).
    s->header_bytes += namelen + valuelen + 32;
    if (s->header_bytes > c.limits_.header_limit) {
      c.answer_early(frame->hd.stream_id, *s, 431, R"({"error":"Request header fields too large"})");
      return 0;
    }
    // Trailers (a HEADERS block after the request's) are not the request's header fields: they
    // are left out, as over HTTP/1.1, so that neither the rules nor the upstream take them for
    // some (RFC 9110 6.5.1). They count against header_limit all the same.
    if (frame->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;
    const std::string_view n(reinterpret_cast<const char*>(name), namelen);
    const std::string_view v(reinterpret_cast<const char*>(value), valuelen);
    if (n == "cookie") {
      // Cookie crumbs, one field each over HTTP/2, are one field over HTTP/1.1, joined by "; "
      // (RFC 9113 8.2.3): many applications read only the first Cookie line.
      for (auto& [fn, fv] : s->request.headers) {
        if (fn == "cookie") {
          fv += "; ";
          fv += v;
          return 0;
        }
      }
      s->request.headers.emplace_back("cookie", std::string(v));
    } else if (n == ":method") {
      s->request.method = v;
    } else if (n == ":path") {
      s->request.target = v;
    } else if (n == ":authority") {
      s->request.headers.emplace_back("host", std::string(v));
      s->authority = true;
    } else if (n == "host" && s->authority) {
      // :authority is the request's authority (RFC 9113 8.3.1): a Host field beside it is
      // dropped, so that the rules and the upstream see one Host, the same.
    } else if (!n.empty() && n.front() != ':') {
      s->request.headers.emplace_back(std::string(n), std::string(v));
    }
    return 0;
  }

  static int data_chunk(nghttp2_session*, std::uint8_t, std::int32_t stream, const std::uint8_t* data, std::size_t len,
                        void* user) {
    auto& c = self(user);
    auto* s = c.find(stream);
    if (s == nullptr || s->answered) return 0;
    const std::size_t connection_limit =
        c.limits_.connection_body_limit > 0 ? c.limits_.connection_body_limit : 2 * c.limits_.body_limit;
    if (s->request.body.size() + len > c.limits_.body_limit || c.bodies_held_ + len > connection_limit) {
      c.bodies_held_ -= s->request.body.size();
      std::string().swap(s->request.body);
      c.answer_early(stream, *s, 413, R"({"error":"Payload too large"})");
      return 0;
    }
    s->request.body.append(reinterpret_cast<const char*>(data), len);
    c.bodies_held_ += len;
    return 0;
  }

  static int frame_recv(nghttp2_session*, const nghttp2_frame* frame, void* user) {
    auto& c = self(user);
    if ((frame->hd.type != NGHTTP2_HEADERS && frame->hd.type != NGHTTP2_DATA) ||
        (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) == 0) {
      return 0;
    }
    auto* s = c.find(frame->hd.stream_id);
    if (s == nullptr || s->answered || s->delivered) return 0;
    s->delivered = true;
    c.bodies_held_ -= s->request.body.size();
    if (c.events_.request) c.events_.request(frame->hd.stream_id, std::move(s->request));
    return 0;
  }

  static int stream_close(nghttp2_session*, std::int32_t stream, std::uint32_t, void* user) {
    auto& c = self(user);
    const auto it = c.streams_.find(stream);
    if (it == c.streams_.end()) return 0;
    if (!it->second->delivered) c.bodies_held_ -= it->second->request.body.size();
    c.streams_.erase(it);
    if (c.events_.closed) c.events_.closed(stream);
    return 0;
  }

  // A GOAWAY with an error code (a flood, a protocol error) is the connection's end: said once.
  static int frame_send(nghttp2_session*, const nghttp2_frame* frame, void* user) {
    if (frame->hd.type != NGHTTP2_GOAWAY || frame->goaway.error_code == NGHTTP2_NO_ERROR) return 0;
    auto& c = self(user);
    if (std::exchange(c.ended_, true)) return 0;
    std::string reason = c.failure_;
    if (reason.empty()) {
      // The GOAWAY's debug data, written by the frame layer: printable, bounded, for a log line.
      const std::string_view debug(reinterpret_cast<const char*>(frame->goaway.opaque_data),
                                   std::min<std::size_t>(frame->goaway.opaque_data_len, 200));
      for (const char ch : debug) reason += ch >= 0x20 && ch < 0x7f ? ch : '?';
    }
    if (c.events_.ended) c.events_.ended(frame->goaway.error_code, reason);
    return 0;
  }

  static ssize_t read_body(nghttp2_session*, std::int32_t stream, std::uint8_t* buf, std::size_t length,
                           std::uint32_t* flags, nghttp2_data_source*, void* user) {
    auto& c = self(user);
    auto* s = c.find(stream);
    if (s == nullptr) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    const std::size_t n = std::min(length, s->out.size() - s->out_at);
    std::memcpy(buf, s->out.data() + s->out_at, n);
    s->out_at += n;
    if (s->out_at == s->out.size()) {
      s->out.clear();
      s->out_at = 0;
      if (s->out_last) {
        *flags |= NGHTTP2_DATA_FLAG_EOF;
        // The client may still be sending: RST_STREAM NO_ERROR after the response tells it to
        // stop (RFC 9113 8.1); what it sent meanwhile is dropped.
        if (s->reset_after && nghttp2_session_get_stream_remote_close(c.session_, stream) == 0) {
          nghttp2_submit_rst_stream(c.session_, NGHTTP2_FLAG_NONE, stream, NGHTTP2_NO_ERROR);
        }
      } else if (n == 0) {
        s->deferred = true;
        return NGHTTP2_ERR_DEFERRED;
      }
      if (!s->out_last && c.events_.drained) c.events_.drained(stream);
    }
    return static_cast<ssize_t>(n);
  }
};

namespace {

// A callback of the frame layer with what it throws contained: an exception must not unwind
// through libnghttp2's C frames. It is logged and counted (core/contained.hpp) and the session
// ends, as for any callback failure (GOAWAY INTERNAL_ERROR).
template <auto F>
struct Guarded;
template <class R, class... A, R (*F)(A...)>
struct Guarded<F> {
  static R call(A... args) {
    R result{};
    if (!contain("the HTTP/2 frame layer", [&] { result = F(args...); })) return NGHTTP2_ERR_CALLBACK_FAILURE;
    return result;
  }
};

}  // namespace

std::string_view h2_error_name(std::uint32_t code) noexcept { return nghttp2_http2_strerror(code); }

H2Connection::H2Connection(H2Limits limits, Events events) : limits_(limits), events_(std::move(events)) {
  nghttp2_session_callbacks* callbacks = nullptr;
  nghttp2_session_callbacks_new(&callbacks);
  nghttp2_session_callbacks_set_on_begin_headers_callback(callbacks, Guarded<&H2Callbacks::begin_headers>::call);
  nghttp2_session_callbacks_set_on_header_callback(callbacks, Guarded<&H2Callbacks::header>::call);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(callbacks, Guarded<&H2Callbacks::data_chunk>::call);
  nghttp2_session_callbacks_set_on_frame_recv_callback(callbacks, Guarded<&H2Callbacks::frame_recv>::call);
  nghttp2_session_callbacks_set_on_stream_close_callback(callbacks, Guarded<&H2Callbacks::stream_close>::call);
  nghttp2_session_callbacks_set_on_frame_send_callback(callbacks, Guarded<&H2Callbacks::frame_send>::call);
  nghttp2_option* option = nullptr;
  nghttp2_option_new(&option);
  nghttp2_option_set_stream_reset_rate_limit(option, limits_.reset_burst, limits_.reset_rate);
  nghttp2_option_set_max_continuations(option, limits_.max_continuations);
  nghttp2_option_set_max_settings(option, 32);
  nghttp2_option_set_max_outbound_ack(option, 1000);
  nghttp2_option_set_max_deflate_dynamic_table_size(option, 4096);
  nghttp2_session_server_new2(&session_, callbacks, this, option);
  nghttp2_option_del(option);
  nghttp2_session_callbacks_del(callbacks);
  const std::array<nghttp2_settings_entry, 4> settings = {{
      {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, limits_.max_concurrent_streams},
      {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, limits_.stream_window},
      {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, static_cast<std::uint32_t>(limits_.header_limit)},
      {NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
  }};
  nghttp2_submit_settings(session_, NGHTTP2_FLAG_NONE, settings.data(), settings.size());
}

H2Connection::~H2Connection() {
  nghttp2_session_del(session_);
}

H2Connection::Stream* H2Connection::find(std::int32_t stream) const {
  const auto it = streams_.find(stream);
  return it == streams_.end() ? nullptr : it->second.get();
}

bool H2Connection::receive(std::string_view bytes) {
  const auto n = nghttp2_session_mem_recv(session_, reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
  if (n >= 0 && static_cast<std::size_t>(n) == bytes.size()) return true;
  // A fatal error: the client is told why with a GOAWAY (when the session has not queued one
  // already), then the connection ends.
  const bool flood = n == NGHTTP2_ERR_FLOODED || n == NGHTTP2_ERR_TOO_MANY_CONTINUATIONS;
  if (n < 0 && failure_.empty()) failure_ = nghttp2_strerror(static_cast<int>(n));
  nghttp2_session_terminate_session(session_, flood ? NGHTTP2_ENHANCE_YOUR_CALM : NGHTTP2_PROTOCOL_ERROR);
  return false;
}

void H2Connection::take_output(std::string& out) {
  for (;;) {
    const std::uint8_t* data = nullptr;
    const auto n = nghttp2_session_mem_send(session_, &data);
    if (n <= 0) return;
    out.append(reinterpret_cast<const char*>(data), static_cast<std::size_t>(n));
  }
}

bool H2Connection::alive() const {
  return nghttp2_session_want_read(session_) != 0 || nghttp2_session_want_write(session_) != 0;
}

void H2Fields::add(std::string_view name, std::string_view value) {
  if (name.empty() || connection_specific(name)) return;
  const std::size_t at = bytes_.size();
  // As given: the frame layer lower-cases names as it copies them (nghttp2_submit_response).
  bytes_.append(name).append(value);
  spans_.push_back(Span{at, name.size(), at + name.size(), value.size()});
}

void H2Connection::respond(std::int32_t stream, int status, const HeaderList& fields, bool has_body) {
  H2Fields h2;
  for (const auto& [n, v] : fields) h2.add(n, v);
  respond(stream, status, h2, has_body);
}

void H2Connection::respond(std::int32_t stream, int status, const H2Fields& fields, bool has_body) {
  auto* s = find(stream);
  if (s == nullptr || s->answered) return;
  s->answered = true;
  char code[4];
  const auto [end, ec] = std::to_chars(code, code + sizeof code, status);
  const std::string_view status_text = ec == std::errc{} ? std::string_view(code, end - code) : "500";
  // On the stack for a usual response; nghttp2 copies the fields when the frame is submitted.
  constexpr std::size_t kOnStack = 32;
  std::array<nghttp2_nv, kOnStack> on_stack;
  std::vector<nghttp2_nv> on_heap;
  nghttp2_nv* nva = on_stack.data();
  if (fields.size() + 1 > kOnStack) {
    on_heap.resize(fields.size() + 1);
    nva = on_heap.data();
  }
  std::size_t n = 0;
  nva[n++] = field(":status", status_text);
  const std::string_view bytes = fields.bytes_;
  for (const auto& f : fields.spans_) {
    nva[n++] = field(bytes.substr(f.name, f.name_size), bytes.substr(f.value, f.value_size));
  }
  nghttp2_data_provider provider{};
  provider.read_callback = Guarded<&H2Callbacks::read_body>::call;
  nghttp2_submit_response(session_, stream, nva, n, has_body ? &provider : nullptr);
}

void H2Connection::body(std::int32_t stream, std::string_view data, bool last) {
  auto* s = find(stream);
  if (s == nullptr) return;
  s->out.append(data);
  s->out_last = s->out_last || last;
  if (s->deferred) {
    s->deferred = false;
    nghttp2_session_resume_data(session_, stream);
  }
}

void H2Connection::respond(std::int32_t stream, const Response& response) {
  HeaderList fields = response.headers;
  if (!response.content_type.empty()) fields.emplace_back("content-type", response.content_type);
  fields.emplace_back("content-length", std::to_string(response.body.size()));
  const bool has_body = !response.body.empty();
  respond(stream, response.status, fields, has_body);
  if (has_body) body(stream, response.body, true);
}

void H2Connection::answer_early(std::int32_t stream, Stream& s, int status, std::string_view text) {
  s.reset_after = true;
  respond(stream, Response{status, "application/json", {{"server", "ratekeeper"}}, std::string(text)});
}

void H2Connection::reset(std::int32_t stream) {
  nghttp2_submit_rst_stream(session_, NGHTTP2_FLAG_NONE, stream, NGHTTP2_INTERNAL_ERROR);
}

void H2Connection::go_away() {
  nghttp2_submit_goaway(session_, NGHTTP2_FLAG_NONE, nghttp2_session_get_last_proc_stream_id(session_),
                        NGHTTP2_NO_ERROR, nullptr, 0);
}

std::size_t H2Connection::expire(std::chrono::steady_clock::time_point deadline) {
  std::vector<std::int32_t> late;
  for (const auto& [id, s] : streams_) {
    if (!s->delivered && !s->answered && s->begun < deadline) late.push_back(id);
  }
  for (const auto id : late) {
    if (auto* s = find(id)) {
      bodies_held_ -= s->request.body.size();
      std::string().swap(s->request.body);
      answer_early(id, *s, 408, R"({"error":"Request not received within http.request_timeout"})");
    }
  }
  return late.size();
}

std::size_t H2Connection::buffered(std::int32_t stream) const {
  const auto* s = find(stream);
  return s == nullptr ? 0 : s->out.size() - s->out_at;
}

}  // namespace ratekeeper::http
