#pragma once
// The code blocks of the documentation that tests run as written (the nginx configuration,
// the decision API's examples), so that a documented example cannot drift from what works.
// Pure functions; thread-safe.

#include <cstddef>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace ratekeeper::testing {

// The first fenced block of `language` (```nginx, ```python, ...) in a Markdown file of the
// source tree (`path` relative to it, e.g. "docs/nginx.md"), without its fences. Throws
// std::runtime_error when there is none.
std::string doc_block(std::string_view path, std::string_view language);

// One fenced block of a Markdown file.
struct FencedBlock {
  std::size_t line = 0;  // of the opening fence, from 1
  std::string language;  // what follows the opening ``` ("" when nothing does)
  // The text of an HTML comment `<!-- ... -->` on the line right before the opening fence,
  // trimmed; "" when there is none.
  std::string marker;
  std::string text;  // the lines between the fences, without the fence's indentation
};

// Every fenced block of the Markdown file at `file` (an absolute path), in order. Throws
// std::runtime_error when it cannot be read or a fence is left open.
std::vector<FencedBlock> fenced_blocks(const std::filesystem::path& file);

}  // namespace ratekeeper::testing
