#include "proxy_message.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <cstring>
#include <limits>
#include <vector>
#include <boost/beast/http/error.hpp>

namespace ratekeeper::http {

namespace bhttp = boost::beast::http;

namespace {

// HTTP2-Settings belongs to an upgrade to h2c (RFC 7540 3.2.1), which is never relayed.
constexpr std::array<std::string_view, 10> kHopByHop = {
    "connection", "keep-alive", "proxy-connection",    "te",
    "trailer",    "upgrade",    "transfer-encoding",   "proxy-authenticate",
    "proxy-authorization", "http2-settings"};

// Fields the proxy sets or vouches for: naming them in Connection does not remove them.
constexpr std::array<std::string_view, 11> kProtected = {
    "host",      "x-forwarded-for",  "x-forwarded-proto",       "x-forwarded-host",
    "forwarded", "ratelimit",        "ratelimit-policy",        "retry-after",
    "x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset"};

template <std::size_t N>
bool one_of(std::string_view name, const std::array<std::string_view, N>& names) noexcept {
  for (auto n : names) {
    if (iequals(name, n)) return true;
  }
  return false;
}

std::string_view trim(std::string_view s) noexcept {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// The tokens of a message's Connection fields, split once per message (not once per field
// asked about).
class ConnectionTokens {
 public:
  explicit ConnectionTokens(const HeaderList& fields) {
    for (const auto& [n, v] : fields) {
      if (!iequals(n, "connection")) continue;
      std::string_view rest = v;
      while (!rest.empty()) {
        const auto comma = rest.find(',');
        if (const auto token = trim(rest.substr(0, comma)); !token.empty()) push_back(token);
        if (comma == std::string_view::npos) break;
        rest.remove_prefix(comma + 1);
      }
    }
  }
  bool names(std::string_view name) const noexcept {
    for (std::size_t i = 0; i < count_; ++i) {
      if (iequals(token(i), name)) return true;
    }
    return false;
  }

 private:
  void push_back(std::string_view token) {
    if (count_ < kInline) {
      inline_[count_] = token;
    } else {
      more_.push_back(token);
    }
    ++count_;
  }
  std::string_view token(std::size_t i) const noexcept { return i < kInline ? inline_[i] : more_[i - kInline]; }

  // Into the fields' values. A message names a token or two ("keep-alive", "close",
  // "upgrade"): those are held without allocating.
  static constexpr std::size_t kInline = 4;
  std::array<std::string_view, kInline> inline_;
  std::vector<std::string_view> more_;
  std::size_t count_ = 0;
};

// Removed in both directions: hop-by-hop, re-framed, or named in Connection (unless vouched
// for).
bool dropped(const ConnectionTokens& connection, std::string_view name) noexcept {
  if (is_hop_by_hop(name) || iequals(name, "content-length")) return true;
  return connection.names(name) && !one_of(name, kProtected);
}

// Fields the proxy sets or frames the message by: another spelling of one of them
// (X_Forwarded_For, Transfer_Encoding) is not sent on, since a gateway would read it as that
// field (gateway_equals).
constexpr std::array<std::string_view, 5> kManaged = {"x-forwarded-for", "x-forwarded-proto", "x-forwarded-host",
                                                      "transfer-encoding", "content-length"};

bool respelled_managed(std::string_view name) noexcept {
  for (const auto m : kManaged) {
    if (gateway_equals(name, m) && !iequals(name, m)) return true;
  }
  return false;
}

// Whether every quoted string of a field value is closed (RFC 9110 5.6.4): an open one would
// take in what is appended after it.
bool quotes_closed(std::string_view value) noexcept {
  bool quoted = false;
  for (std::size_t i = 0; i < value.size(); ++i) {
    if (quoted && value[i] == '\\') {
      if (++i == value.size()) return false;
    } else if (value[i] == '"') {
      quoted = !quoted;
    }
  }
  return !quoted;
}

// Named in Connection but not dropped for another reason: what remove_connection_named takes
// out of a request before it is decided on.
bool named_only(const ConnectionTokens& connection, std::string_view name) noexcept {
  return connection.names(name) && !is_hop_by_hop(name) && !iequals(name, "content-length") &&
         !one_of(name, kProtected);
}

bool has_field(const HeaderList& fields, std::string_view name) noexcept {
  for (const auto& f : fields) {
    if (iequals(f.first, name)) return true;
  }
  return false;
}

// Nonzero when a byte of `w` is zero (exact as to whether one is; not as to which).
constexpr std::uint64_t zero_byte(std::uint64_t w) noexcept {
  constexpr std::uint64_t kOnes = 0x0101010101010101ULL;
  return (w - kOnes) & ~w & (kOnes * 0x80);
}

// Nonzero when a byte of `w` is CR, LF or NUL.
constexpr std::uint64_t breaking_byte(std::uint64_t w) noexcept {
  constexpr std::uint64_t kOnes = 0x0101010101010101ULL;
  return zero_byte(w) | zero_byte(w ^ (kOnes * '\r')) | zero_byte(w ^ (kOnes * '\n'));
}

// True when `s` holds no CR, LF or NUL: eight bytes at a time, as every field of every head
// written is checked.
bool safe(std::string_view s) noexcept {
  const char* p = s.data();
  const std::size_t n = s.size();
  if (n < 8) {
    for (std::size_t i = 0; i < n; ++i) {
      if (p[i] == '\r' || p[i] == '\n' || p[i] == '\0') return false;
    }
    return true;
  }
  std::uint64_t w;
  for (std::size_t i = 0; i + 8 <= n; i += 8) {
    std::memcpy(&w, p + i, 8);
    if (breaking_byte(w) != 0) return false;
  }
  std::memcpy(&w, p + n - 8, 8);  // the tail, as the last eight bytes (overlapping a word)
  return breaking_byte(w) == 0;
}

// Copies `s` to `at` (an empty view may have no address: nothing is copied then); returns
// the end of the copy.
char* put(char* at, std::string_view s) noexcept {
  if (!s.empty()) std::memcpy(at, s.data(), s.size());
  return at + s.size();
}

void append_field(std::string& out, std::string_view n, std::string_view v) {
  if (n.empty() || !safe(n) || !safe(v) || n.find(':') != std::string_view::npos) return;
  // One growth and four copies rather than four appends. Offsets from the old size, and that
  // size returned: g++ 12's resize_and_overwrite may pass the operation its new capacity as
  // the size.
  const std::size_t from = out.size();
  const std::size_t size = from + n.size() + v.size() + 4;
  out.resize_and_overwrite(size, [&](char* p, std::size_t) {
    char* at = put(p + from, n);
    at = put(at, ": ");
    at = put(at, v);
    put(at, "\r\n");
    return size;
  });
}

void append_fields(std::string& out, const HeaderList& fields) {
  for (const auto& [n, v] : fields) append_field(out, n, v);
}

// Room for a head of these fields: one allocation where appending would grow several times.
std::size_t head_size(std::size_t first_line, const HeaderList& fields) noexcept {
  std::size_t n = first_line + 32;
  for (const auto& [name, value] : fields) n += name.size() + value.size() + 4;
  return n;
}

void append_framing(std::string& out, Framing framing, std::uint64_t length) {
  if (framing == Framing::length) {
    char digits[24];
    const auto end = std::to_chars(digits, digits + sizeof digits, length).ptr;
    out.append("Content-Length: ").append(digits, end).append("\r\n");
  } else if (framing == Framing::chunked) {
    out += "Transfer-Encoding: chunked\r\n";
  }
}

}  // namespace

bool is_hop_by_hop(std::string_view name) noexcept {
  // Asked for every field in both directions: most names have a length no name of the list has.
  static constexpr std::uint64_t kLengths = [] {
    std::uint64_t lengths = 0;
    for (const auto n : kHopByHop) lengths |= std::uint64_t{1} << n.size();
    return lengths;
  }();
  return name.size() < 64 && ((kLengths >> name.size()) & 1) != 0 && one_of(name, kHopByHop);
}

bool body_unexpected(std::string_view method) noexcept {
  return method == "GET" || method == "HEAD" || method == "DELETE" || method == "OPTIONS" ||
         method == "TRACE";
}

void remove_connection_named(HeaderList& fields) {
  // Marked first and removed after: the tokens are views into the Connection fields.
  std::vector<bool> named;
  {
    const ConnectionTokens connection(fields);
    for (std::size_t i = 0; i < fields.size(); ++i) {
      if (!named_only(connection, fields[i].first)) continue;
      if (named.empty()) named.resize(fields.size());
      named[i] = true;
    }
  }
  if (named.empty()) return;
  std::size_t kept = 0;
  for (std::size_t i = 0; i < fields.size(); ++i) {
    if (named[i]) continue;
    if (kept != i) fields[kept] = std::move(fields[i]);
    ++kept;
  }
  fields.resize(kept);
}

namespace {

// The fields of upstream_request_fields, one f(name, value) each, in order: the list and
// the head are written from this one place.
template <class F>
void for_each_upstream_request_field(const HeaderList& received, const Forwarding& forwarding,
                                     F&& f) {
  const ConnectionTokens connection(received);
  std::string chain;
  std::string forwarded;  // RFC 7239: the elements received, this hop's appended
  bool had_forwarded = false;
  const std::string* host = nullptr;
  for (const auto& [n, v] : received) {
    if (respelled_managed(n)) continue;
    if (iequals(n, "x-forwarded-for")) {
      if (!chain.empty()) chain += ", ";
      chain += trim(v);
      continue;
    }
    if (iequals(n, "forwarded")) {
      had_forwarded = true;
      // A value with a quoted string left open is dropped: it would swallow this hop's element.
      if (!quotes_closed(v)) continue;
      if (!forwarded.empty()) forwarded += ", ";
      forwarded += trim(v);
      continue;
    }
    // Set below; Expect is answered by the proxy itself (100 Continue once admitted).
    if (iequals(n, "x-forwarded-proto") || iequals(n, "x-forwarded-host") || iequals(n, "expect")) {
      continue;
    }
    if (dropped(connection, n)) continue;
    if (host == nullptr && iequals(n, "host")) host = &v;
    f(std::string_view(n), std::string_view(v));
  }
  if (!chain.empty()) chain += ", ";
  chain += forwarding.peer_address;
  f(std::string_view("X-Forwarded-For"), std::string_view(chain));
  if (had_forwarded) {
    // Only a request that came with the field gets it: its last element is then this proxy's
    // word, and the client's own elements cannot pass for it.
    const bool v6 = forwarding.peer_address.find(':') != std::string_view::npos;
    if (!forwarded.empty()) forwarded += ", ";
    forwarded += v6 ? "for=\"[" : "for=";
    forwarded += forwarding.peer_address;
    forwarded += v6 ? "]\";proto=" : ";proto=";
    forwarded += forwarding.proto;
    f(std::string_view("Forwarded"), std::string_view(forwarded));
  }
  f(std::string_view("X-Forwarded-Proto"), forwarding.proto);
  if (host != nullptr) {
    f(std::string_view("X-Forwarded-Host"), std::string_view(*host));
  } else {
    // An HTTP/1.0 request may come without Host; the HTTP/1.1 request sent on for it has one,
    // empty as RFC 9112 3.2 says when the authority is unknown.
    f(std::string_view("Host"), std::string_view());
  }
  if (!forwarding.upgrade.empty()) {
    f(std::string_view("Connection"), std::string_view("upgrade"));
    f(std::string_view("Upgrade"), forwarding.upgrade);
  } else if (forwarding.close) {
    f(std::string_view("Connection"), std::string_view("close"));
  }
}

// The fields of client_response_fields, one f(name, value) each, in order.
template <class F>
void for_each_client_response_field(const HeaderList& received, const HeaderList& limiter_fields,
                                    F&& f) {
  const ConnectionTokens connection(received);
  for (const auto& [n, v] : received) {
    if (dropped(connection, n)) continue;
    if (has_field(limiter_fields, n)) continue;
    f(std::string_view(n), std::string_view(v));
  }
  for (const auto& [n, v] : limiter_fields) f(std::string_view(n), std::string_view(v));
}

void append_request_line(std::string& out, std::string_view method, std::string_view target) {
  out.append(method).append(" ").append(target).append(" HTTP/1.1\r\n");
}

void append_status_line(std::string& out, int version, int status, std::string_view reason) {
  if (!safe(reason)) reason = {};
  out.append(version == 10 ? "HTTP/1.0 " : "HTTP/1.1 ");
  if (status >= 0 && status <= 999) {
    const char code[3] = {static_cast<char>('0' + status / 100), static_cast<char>('0' + status / 10 % 10),
                          static_cast<char>('0' + status % 10)};
    out.append(code, 3);
  } else {
    char digits[12];
    out.append(digits, std::to_chars(digits, digits + sizeof digits, status).ptr);
  }
  out.append(" ").append(reason).append("\r\n");
}

void append_head_end(std::string& out, int version, bool keep_alive) {
  if (version == 10 && keep_alive) out += "Connection: keep-alive\r\n";
  if (version != 10 && !keep_alive) out += "Connection: close\r\n";
  out += "\r\n";
}

}  // namespace

std::string_view requested_upgrade(const HeaderList& received, std::span<const std::string> allowed) noexcept {
  if (!ConnectionTokens(received).names("upgrade")) return {};
  for (const auto& [n, v] : received) {
    if (!iequals(n, "upgrade")) continue;
    const std::string_view offered = trim(v);
    for (std::string_view rest = offered; !offered.empty();) {
      const auto comma = rest.find(',');
      const std::string_view token = trim(rest.substr(0, comma));
      const std::string_view name = token.substr(0, token.find('/'));
      if (name.empty() ||
          std::none_of(allowed.begin(), allowed.end(), [&](const std::string& a) { return iequals(a, name); })) {
        return {};
      }
      if (comma == std::string_view::npos) return offered;
      rest.remove_prefix(comma + 1);
    }
    return {};
  }
  return {};
}

HeaderList upstream_request_fields(const HeaderList& received, const Forwarding& forwarding) {
  HeaderList out;
  out.reserve(received.size() + 3);
  for_each_upstream_request_field(received, forwarding, [&](std::string_view n, std::string_view v) {
    out.emplace_back(std::string(n), std::string(v));
  });
  return out;
}

HeaderList client_response_fields(const HeaderList& received, const HeaderList& limiter_fields) {
  HeaderList out;
  out.reserve(received.size() + limiter_fields.size());
  for_each_client_response_field(received, limiter_fields, [&](std::string_view n, std::string_view v) {
    out.emplace_back(std::string(n), std::string(v));
  });
  return out;
}

void each_client_response_field(const HeaderList& received, const HeaderList& limiter_fields,
                                const std::function<void(std::string_view, std::string_view)>& f) {
  for_each_client_response_field(received, limiter_fields, f);
}

void write_upstream_request_head(std::string& out, std::string_view method, std::string_view target,
                                 const HeaderList& received, const Forwarding& forwarding,
                                 Framing framing, std::uint64_t length) {
  out.clear();
  out.reserve(head_size(method.size() + target.size(), received) + forwarding.peer_address.size() +
              forwarding.proto.size() + forwarding.upgrade.size() + 128);
  append_request_line(out, method, target);
  for_each_upstream_request_field(received, forwarding, [&](std::string_view n, std::string_view v) {
    append_field(out, n, v);
  });
  append_framing(out, framing, length);
  out += "\r\n";
}

void write_client_response_head(std::string& out, int version, int status, std::string_view reason,
                                const HeaderList& received, const HeaderList& limiter_fields,
                                Framing framing, std::uint64_t length, bool keep_alive) {
  out.clear();
  out.reserve(head_size(reason.size(), received) + head_size(0, limiter_fields) + 64);
  append_status_line(out, version, status, reason);
  for_each_client_response_field(received, limiter_fields, [&](std::string_view n, std::string_view v) {
    append_field(out, n, v);
  });
  append_framing(out, framing, length);
  append_head_end(out, version, keep_alive);
}

void write_client_upgrade_head(std::string& out, std::string_view reason, const HeaderList& received,
                               const HeaderList& limiter_fields) {
  out.clear();
  append_status_line(out, 11, 101, reason);
  for_each_client_response_field(received, limiter_fields, [&](std::string_view n, std::string_view v) {
    append_field(out, n, v);
  });
  for (const auto& [n, v] : received) {
    if (iequals(n, "upgrade")) append_field(out, "Upgrade", v);
  }
  out += "Connection: upgrade\r\n\r\n";
}

std::string request_head(std::string_view method, std::string_view target,
                         const HeaderList& fields, Framing framing, std::uint64_t length) {
  std::string out;
  out.reserve(256);
  append_request_line(out, method, target);
  append_fields(out, fields);
  append_framing(out, framing, length);
  out += "\r\n";
  return out;
}

std::string response_head(int version, int status, std::string_view reason,
                          const HeaderList& fields, Framing framing, std::uint64_t length,
                          bool keep_alive) {
  std::string out;
  out.reserve(256);
  append_status_line(out, version, status, reason);
  append_fields(out, fields);
  append_framing(out, framing, length);
  append_head_end(out, version, keep_alive);
  return out;
}

std::string chunk_prefix(std::size_t size) {
  char digits[20];
  std::string out(digits, std::to_chars(digits, digits + sizeof digits, size, 16).ptr);
  out += "\r\n";
  return out;
}

ResponseParser::ResponseParser(std::uint32_t header_bytes) {
  header_limit(header_bytes);
  // Unlimited. (Not boost::none: Boost 1.74 compares a Content-Length with the disengaged
  // optional and refuses every length.)
  body_limit(std::numeric_limits<std::uint64_t>::max());
}

void ResponseParser::on_request_impl(bhttp::verb, string_view, string_view, int, error_code& ec) {
  ec = bhttp::error::bad_method;  // never called for a response parser
}

void ResponseParser::on_response_impl(int code, string_view reason, int version, error_code&) {
  status_ = code;
  reason_.assign(reason.data(), reason.size());
  version_ = version;
}

void ResponseParser::on_field_impl(bhttp::field f, string_view name, string_view value,
                                   error_code& ec) {
  if (is_header_done()) return;  // trailer fields: dropped, as the request's (RFC 9110 6.5.1)
  if (f == bhttp::field::content_length) {
    if (content_length_seen_) {
      ec = bhttp::error::bad_content_length;
      return;
    }
    content_length_seen_ = true;
  }
  if (fields_.empty()) fields_.reserve(12);  // one allocation for a usual response's fields
  fields_.emplace_back(std::string(name.data(), name.size()),
                       std::string(value.data(), value.size()));
}

std::size_t ResponseParser::on_body_impl(string_view body, error_code& ec) {
  return sink_.put(body, ec);
}

std::size_t ResponseParser::on_chunk_body_impl(std::uint64_t, string_view body, error_code& ec) {
  return sink_.put(body, ec);
}

}  // namespace ratekeeper::http
