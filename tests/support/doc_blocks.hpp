#pragma once
// The code blocks of the documentation that tests run as written (the nginx configuration,
// the decision API's examples), so that a documented example cannot drift from what works.
// Pure functions; thread-safe.

#include <filesystem>
#include <string>
#include <string_view>

namespace ratekeeper::testing {

// The first fenced block of `language` (```nginx, ```python, ...) in a Markdown file of the
// source tree (`path` relative to it, e.g. "docs/nginx.md"), without its fences. Throws
// std::runtime_error when there is none.
std::string doc_block(std::string_view path, std::string_view language);

}  // namespace ratekeeper::testing
