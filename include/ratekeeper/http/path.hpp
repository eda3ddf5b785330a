#pragma once
// The one normal form of a request path: what the rules match and what the upstream of the
// proxy receives, so that no other spelling of a path escapes its rule.
//   - `//` merged into `/`; `.` and `..` segments removed (RFC 3986 remove_dot_segments,
//     never above the root);
//   - percent-encoded unreserved characters decoded (`%41` → `A`, `%2e` → `.`, before the
//     dot segments are resolved); the hex digits of the other escapes upper-cased; `%2F`
//     stays encoded (it is data, not a separator);
//   - refused: a path not starting with `/`, an invalid escape (`%`, `%4`, `%zz`), a control
//     byte (raw or encoded: NUL, CR, LF, DEL, ...);
//   - case is kept (HTTP paths are case-sensitive) unless `lowercase` (case-insensitive
//     applications): then ASCII letters are lower-cased, escapes keep upper-case hex.
// The query is not normalised: normalize_target keeps it as sent.
// Pure functions; thread-safe.

#include <string>
#include <string_view>

#include "ratekeeper/core/error.hpp"

namespace ratekeeper::http {

// True when normalize_path(path, lowercase) would return `path` unchanged (no allocation).
bool is_normal_path(std::string_view path, bool lowercase = false) noexcept;

// The normal form of a path (no query). invalid_argument with the reason.
Result<std::string> normalize_path(std::string_view path, bool lowercase = false);

// "path[?query]": the normal path followed by the query as sent.
Result<std::string> normalize_target(std::string_view target, bool lowercase = false);

}  // namespace ratekeeper::http
