#include "support/doc_blocks.hpp"

#include <fmt/format.h>

#include <fstream>
#include <sstream>
#include <stdexcept>

namespace ratekeeper::testing {

std::string doc_block(std::string_view path, std::string_view language) {
  const auto file = std::filesystem::path(RATEKEEPER_SOURCE_DIR) / path;
  std::ifstream in(file, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  const std::string s = text.str();
  const std::string open = fmt::format("```{}\n", language);
  const auto begin = s.find(open);
  const auto end = begin == std::string::npos ? begin : s.find("\n```", begin + open.size() - 1);
  if (end == std::string::npos) {
    throw std::runtime_error(fmt::format("no ```{} block in {}", language, file.string()));
  }
  return s.substr(begin + open.size(), end + 1 - begin - open.size());
}

}  // namespace ratekeeper::testing
