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

bool is_normal_path(std::string_view path, bool lowercase) noexcept {
  if (path.empty() || path[0] != '/') return false;
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
      i += 2;
    } else if (is_control(u) || (lowercase && c >= 'A' && c <= 'Z')) {
      return false;
    }
  }
  return !dot_segment(path.substr(segment));
}

Result<std::string> normalize_path(std::string_view path, bool lowercase) {
  if (path.empty() || path[0] != '/') {
    return make_error(ErrorCode::invalid_argument, "the path must start with '/'");
  }
  if (is_normal_path(path, lowercase)) return std::string(path);

  // Segment by segment: each is decoded into `out` after a '/', then dropped again when it is
  // empty or ".", or removed with its parent when it is "..".
  std::string out;
  out.reserve(path.size());
  bool trailing = false;  // the path ends with a '/'
  std::size_t i = 1;
  while (true) {
    const std::size_t start = out.size();
    out += '/';
    for (; i < path.size() && path[i] != '/'; ++i) {
      const char c = path[i];
      if (c == '%') {
        const int h = i + 2 < path.size() ? hex_value(path[i + 1]) : -1;
        const int l = h >= 0 ? hex_value(path[i + 2]) : -1;
        if (l < 0) return make_error(ErrorCode::invalid_argument, "invalid percent-escape in the path");
        const auto v = static_cast<unsigned char>(h * 16 + l);
        if (is_control(v)) {
          return make_error(ErrorCode::invalid_argument, "control character in the path");
        }
        if (is_unreserved(v)) {
          const auto d = static_cast<char>(v);
          out += lowercase ? lower(d) : d;
        } else {
          static constexpr char kHex[] = "0123456789ABCDEF";
          out += '%';
          out += kHex[v >> 4];
          out += kHex[v & 0xf];
        }
        i += 2;
      } else if (is_control(static_cast<unsigned char>(c))) {
        return make_error(ErrorCode::invalid_argument, "control character in the path");
      } else {
        out += lowercase ? lower(c) : c;
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
    ++i;  // the '/'
  }
  if (out.empty() || trailing) out += '/';
  return out;
}

Result<std::string> normalize_target(std::string_view target, bool lowercase) {
  const auto q = target.find('?');
  auto path = normalize_path(target.substr(0, q), lowercase);
  if (!path || q == std::string_view::npos) return path;
  path->append(target.substr(q));
  return path;
}

}  // namespace ratekeeper::http
