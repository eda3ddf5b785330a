#pragma once
// The one normal form of a request path: what the rules match and what the upstream of the
// proxy receives, so that no other spelling of a path escapes its rule.
//   - `//` merged into `/`; `.` and `..` segments removed (RFC 3986 remove_dot_segments,
//     never above the root);
//   - percent-encoded unreserved characters decoded (`%41` → `A`, `%2e` → `.`, before the
//     dot segments are resolved); the hex digits of the other escapes upper-cased; `%2F`
//     stays encoded (it is data, not a separator);
//   - refused: a path not starting with `/`, an invalid escape (`%`, `%4`, `%zz`), a control
//     byte (raw or encoded: NUL, CR, LF, DEL, ...), a raw `#` (a fragment, anywhere in the
//     target: applications that cut it off would serve `/login#x` as `/login`);
//   - case is kept (HTTP paths are case-sensitive) unless `lowercase` (case-insensitive
//     applications): then ASCII letters are lower-cased, escapes keep upper-case hex;
//   - spellings that applications behind the limiter read differently (PathOptions): escaped
//     slashes and backslashes (`%2F`, `%5C`, a raw `\`), path parameters (`;`, `%3B`: Tomcat
//     and Jetty drop `;...` from a segment, so `/x/..;/orders` is `/orders` there) and an
//     escaped percent (`%25`: an application decoding twice sees a new escape). Refused by
//     default; see PathOptions for the other choices.
// The query is not normalised: normalize_target keeps it as sent.
// Pure functions; thread-safe.

#include <optional>
#include <string>
#include <string_view>

#include "ratekeeper/core/error.hpp"

namespace ratekeeper::http {

// `%2F`, `%5C` and a raw `\` in a path.
enum class EscapedSlashes {
  reject,    // the request is refused (400): the default, safe whatever the application does
  unescape,  // each becomes a '/' before dot segments are resolved: `/x\..\orders` → `/orders`
  keep,      // data, not separators: matched and forwarded as sent (`%2F` with upper-case hex)
};

struct PathOptions {
  bool lowercase = false;
  EscapedSlashes escaped_slashes = EscapedSlashes::reject;
  // `;`, `%3B` and `%25` refused (400); false: kept as data.
  bool reject_ambiguous = true;

  friend bool operator==(const PathOptions&, const PathOptions&) = default;
};

// "reject", "unescape", "keep"; and back.
std::string_view to_string(EscapedSlashes action) noexcept;
std::optional<EscapedSlashes> parse_escaped_slashes(std::string_view text) noexcept;

// True when normalize_path(path, options) would return `path` unchanged (no allocation).
bool is_normal_path(std::string_view path, const PathOptions& options = {}) noexcept;

// The normal form of a path (no query). invalid_argument with the reason.
Result<std::string> normalize_path(std::string_view path, const PathOptions& options = {});

// "path[?query]": the normal path followed by the query as sent.
Result<std::string> normalize_target(std::string_view target, const PathOptions& options = {});

}  // namespace ratekeeper::http
