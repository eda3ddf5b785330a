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

std::vector<FencedBlock> fenced_blocks(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw std::runtime_error(fmt::format("cannot read {}", file.string()));
  const auto trim = [](std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
    return s;
  };
  std::vector<FencedBlock> blocks;
  std::string line;
  std::string previous;  // the last line outside a block
  std::size_t number = 0;
  std::size_t indent = 0;
  bool open = false;
  while (std::getline(in, line)) {
    ++number;
    const std::string_view trimmed = trim(line);
    if (!open) {
      if (trimmed.starts_with("```")) {
        FencedBlock block;
        block.line = number;
        block.language = std::string(trim(trimmed.substr(3)));
        const std::string_view before = trim(previous);
        if (before.starts_with("<!--") && before.ends_with("-->")) {
          block.marker = std::string(trim(before.substr(4, before.size() - 7)));
        }
        indent = line.find_first_not_of(" \t");
        blocks.push_back(std::move(block));
        open = true;
      }
      previous = line;
      continue;
    }
    if (trimmed == "```") {
      open = false;
      previous.clear();
      continue;
    }
    // The fence's indentation is the block's (a block inside a list item).
    std::size_t drop = 0;
    while (drop < indent && drop < line.size() && (line[drop] == ' ' || line[drop] == '\t')) ++drop;
    blocks.back().text += line.substr(drop);
    blocks.back().text += '\n';
  }
  if (open) {
    throw std::runtime_error(
        fmt::format("{}:{}: fence never closed", file.string(), blocks.back().line));
  }
  return blocks;
}

}  // namespace ratekeeper::testing
