#include "ratekeeper/http/path.hpp"

namespace ratekeeper::http {

namespace {

int hex_value(char c) noexcept {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

bool is_upper_hex(char c) noexcept {
  return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'F');
}

bool is_control(unsigned char c) noexcept {
  return c < 0x20 || c == 0x7f;
}

// RFC 3986 unreserved: ALPHA / DIGIT / "-" / "." / "_" / "~".
bool is_unreserved(unsigned char c) noexcept {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
         c == '-' || c == '.' || c == '_' || c == '~';
}

char lower(char c) noexcept {
  return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
}

// A dot segment ("." or "..") ends at `end` (a '/' or the end of the path).
bool dot_segment(std::string_view s) noexcept {
  return s == "." || s == "..";
}

}  // namespace

std::string_view to_string(EscapedSlashes action) noexcept {
  switch (action) {
    case EscapedSlashes::reject: return "reject";
    case EscapedSlashes::unescape: return "unescape";
    case EscapedSlashes::keep: return "keep";
  }
  return "reject";
}

std::optional<EscapedSlashes> parse_escaped_slashes(std::string_view text) noexcept {
  for (const auto a : {EscapedSlashes::reject, EscapedSlashes::unescape, EscapedSlashes::keep}) {
    if (text == to_string(a)) return a;
  }
  return std::nullopt;
}

namespace {

bool is_slash_escape(unsigned char v) noexcept { return v == 0x2F || v == 0x5C; }
bool is_ambiguous_escape(unsigned char v) noexcept { return v == 0x25 || v == 0x3B; }

constexpr std::string_view kSlashRefused =
    "an escaped slash (%2F, %5C) or a backslash in the path is refused";
constexpr std::string_view kAmbiguousRefused =
    "a ';' or an escaped '%' or ';' (%25, %3B) in the path is refused";
// A fragment is the client's own (RFC 9110 7.1): a request target carries none. Applications
// that cut it off would serve `/login#x` as `/login`.
constexpr std::string_view kFragmentRefused = "a '#' (a fragment) in the request target is refused";

// The length of the separator at path[i]: 1 for '/', and under `unescape` 1 for '\\' and 3 for
// %2F or %5C; 0 when path[i] starts no separator.
std::size_t separator_at(std::string_view path, std::size_t i, const PathOptions& o) noexcept {
  const char c = path[i];
  if (c == '/') return 1;
  if (o.escaped_slashes != EscapedSlashes::unescape) return 0;
  if (c == '\\') return 1;
  if (c == '%' && i + 2 < path.size()) {
    const int h = hex_value(path[i + 1]), l = hex_value(path[i + 2]);
    if (h >= 0 && l >= 0 && is_slash_escape(static_cast<unsigned char>(h * 16 + l))) return 3;
  }
  return 0;
}

}  // namespace

bool is_normal_path(std::string_view path, const PathOptions& o) noexcept {
  if (path.empty() || path[0] != '/') return false;
  const bool keep_slashes = o.escaped_slashes == EscapedSlashes::keep;
  std::size_t segment = 1;  // start of the current segment
  for (std::size_t i = 0; i < path.size(); ++i) {
    const char c = path[i];
    const auto u = static_cast<unsigned char>(c);
    if (c == '/') {
      if (i > 0) {
        const auto seg = path.substr(segment, i - segment);
        if (seg.empty() || dot_segment(seg)) return false;
      }
      segment = i + 1;
    } else if (c == '%') {
      if (i + 2 >= path.size()) return false;
      const char h = path[i + 1], l = path[i + 2];
      if (!is_upper_hex(h) || !is_upper_hex(l)) return false;
      const auto v = static_cast<unsigned char>(hex_value(h) * 16 + hex_value(l));
      if (is_unreserved(v) || is_control(v)) return false;
      if (is_slash_escape(v) && !keep_slashes) return false;
      if (is_ambiguous_escape(v) && o.reject_ambiguous) return false;
      i += 2;
    } else if (is_control(u) || c == '#' || (o.lowercase && c >= 'A' && c <= 'Z') ||
               (c == '\\' && !keep_slashes) || (c == ';' && o.reject_ambiguous)) {
      return false;
    }
  }
  return !dot_segment(path.substr(segment));
}

Result<std::string> normalize_path(std::string_view path, const PathOptions& o) {
  if (path.empty() || path[0] != '/') {
    return make_error(ErrorCode::invalid_argument, "the path must start with '/'");
  }
  if (is_normal_path(path, o)) return std::string(path);

  // Segment by segment: each is decoded into `out` after a '/', then dropped again when it is
  // empty or ".", or removed with its parent when it is "..".
  std::string out;
  out.reserve(path.size());
  bool trailing = false;  // the path ends with a '/'
  std::size_t i = 1;
  std::size_t separator = 0;  // the length of the separator ending the segment
  while (true) {
    const std::size_t start = out.size();
    out += '/';
    for (; i < path.size() && (separator = separator_at(path, i, o)) == 0; ++i) {
      const char c = path[i];
      if (c == '%') {
        const int h = i + 2 < path.size() ? hex_value(path[i + 1]) : -1;
        const int l = h >= 0 ? hex_value(path[i + 2]) : -1;
        if (l < 0) return make_error(ErrorCode::invalid_argument, "invalid percent-escape in the path");
        const auto v = static_cast<unsigned char>(h * 16 + l);
        if (is_control(v)) {
          return make_error(ErrorCode::invalid_argument, "control character in the path");
        }
        if (is_slash_escape(v) && o.escaped_slashes == EscapedSlashes::reject) {
          return make_error(ErrorCode::invalid_argument, std::string(kSlashRefused));
        }
        if (is_ambiguous_escape(v) && o.reject_ambiguous) {
          return make_error(ErrorCode::invalid_argument, std::string(kAmbiguousRefused));
        }
        if (is_unreserved(v)) {
          const auto d = static_cast<char>(v);
          out += o.lowercase ? lower(d) : d;
        } else {
          static constexpr char kHex[] = "0123456789ABCDEF";
          out += '%';
          out += kHex[v >> 4];
          out += kHex[v & 0xf];
        }
        i += 2;
      } else if (is_control(static_cast<unsigned char>(c))) {
        return make_error(ErrorCode::invalid_argument, "control character in the path");
      } else if (c == '#') {
        return make_error(ErrorCode::invalid_argument, std::string(kFragmentRefused));
      } else if (c == '\\' && o.escaped_slashes == EscapedSlashes::reject) {
        return make_error(ErrorCode::invalid_argument, std::string(kSlashRefused));
      } else if (c == ';' && o.reject_ambiguous) {
        return make_error(ErrorCode::invalid_argument, std::string(kAmbiguousRefused));
      } else {
        out += o.lowercase ? lower(c) : c;
      }
    }
    const std::string_view seg = std::string_view(out).substr(start + 1);
    if (seg.empty() || seg == ".") {
      out.resize(start);
      trailing = true;
    } else if (seg == "..") {
      out.resize(start);
      const auto parent = out.rfind('/');
      out.resize(parent == std::string::npos ? 0 : parent);
      trailing = true;
    } else {
      trailing = false;
    }
    if (i >= path.size()) break;
    i += separator;
  }
  if (out.empty() || trailing) out += '/';
  return out;
}

Result<std::string> normalize_target(std::string_view target, const PathOptions& options) {
  const auto q = target.find('?');
  auto path = normalize_path(target.substr(0, q), options);
  if (!path || q == std::string_view::npos) return path;
  if (target.find('#', q) != std::string_view::npos) {
    return make_error(ErrorCode::invalid_argument, std::string(kFragmentRefused));
  }
  path->append(target.substr(q));
  return path;
}

}  // namespace ratekeeper::http
