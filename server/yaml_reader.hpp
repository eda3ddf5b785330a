#pragma once
// What every YAML file of the server is read with: the bounds of a document, checked before
// any field is read (size, NUL bytes, one document, nesting, nodes with aliases expanded,
// string keys each once per mapping, no control bytes), and the Reader of its fields, which
// knows the field path of every value and throws ConfigError(file, path, reason). Used by the
// main configuration (config.cpp) and the domain files of the gRPC rate limit service
// (rls_config.cpp). Internal to the server.

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "config.hpp"
#include "ratekeeper/core/time.hpp"

namespace ratekeeper::server {

// Nesting a document may have: the deepest field of the main configuration is 6 levels down
// (rules[0].limits[0].rate); yaml-cpp's parser itself stops near 500 levels.
inline constexpr std::size_t kMaxDocumentDepth = 32;
// Nodes a document may have, a node reached through several aliases counted every time: a
// few hundred bytes of nested aliases can stand for 10^9 nodes.
inline constexpr std::size_t kMaxDocumentNodes = 1'000'000;

// Upper bound of timeouts, backoffs and retry hints: far beyond any sensible value, far
// below where deadline arithmetic in nanoseconds could overflow.
inline constexpr Micros kMaxSettingDuration = 86'400 * kMicrosPerSecond;

// A finite decimal number as the configuration writes it: "10", "0.5", "1e3", "-2". No '+',
// spaces, hex, inf or nan; independent of the C locale.
std::optional<double> parse_number(std::string_view text);

// Reads the fields of one YAML document, tracking the field path of every value for errors.
class Reader {
 public:
  explicit Reader(std::string file) : file_(std::move(file)) {}

  [[noreturn]] void fail(const std::string& path, std::string reason) const {
    throw ConfigError(file_, path, std::move(reason));
  }

  static std::string field(const std::string& path, std::string_view key) {
    return path.empty() ? std::string(key) : fmt::format("{}.{}", path, key);
  }
  static std::string index(const std::string& path, std::size_t i) {
    return fmt::format("{}[{}]", path, i);
  }

  // A map whose keys must all be in `allowed`.
  void expect_map(const YAML::Node& node, const std::string& path,
                  std::initializer_list<std::string_view> allowed) const;

  std::string string(const YAML::Node& node, const std::string& path) const;
  // A decimal integer in [min, max] (no leading zeros, no '+').
  std::int64_t integer(const YAML::Node& node, const std::string& path, std::int64_t min,
                       std::int64_t max) const;
  double number(const YAML::Node& node, const std::string& path) const;
  // A number in [min, max].
  double number(const YAML::Node& node, const std::string& path, double min, double max) const;
  // true or false.
  bool boolean(const YAML::Node& node, const std::string& path) const;
  // A duration (parse_duration) in [min, max]; timeouts and backoffs keep the default bound.
  Micros duration(const YAML::Node& node, const std::string& path, Micros min = 0,
                  Micros max = kMaxSettingDuration) const;
  // A list of strings; null is the empty list.
  std::vector<std::string> strings(const YAML::Node& node, const std::string& path) const;
  // "N/unit" or "N/<duration>": N units per period.
  std::pair<double, Micros> rate(const YAML::Node& node, const std::string& path) const;

  const std::string& file() const noexcept { return file_; }

 private:
  std::string file_;
};

// The root of `yaml`, one document within the bounds above (at most `max_depth` levels), read
// by `r` (whose file names it in errors). Throws ConfigError: too large (kMaxConfigBytes), a
// NUL byte, invalid YAML, several documents, or a bound exceeded.
YAML::Node load_document(const Reader& r, std::string_view yaml,
                         std::size_t max_depth = kMaxDocumentDepth);

// `read(root)`, with an exception of yaml-cpp thrown while reading (a value that does not
// convert) turned into ConfigError.
template <typename Read>
auto read_document(const Reader& r, const YAML::Node& root, Read&& read) -> decltype(read(root)) {
  try {
    return read(root);
  } catch (const ConfigError&) {
    throw;
  } catch (const YAML::Exception& e) {
    r.fail("", fmt::format("line {}, column {}: {}", e.mark.line + 1, e.mark.column + 1, e.msg));
  }
}

// The whole file at `path`, or ConfigError naming it: not a regular file (a directory, a FIFO
// or a device: refused without waiting on it), an open or read error, or more than
// kMaxConfigBytes (read no further).
std::string read_file(const std::string& path);

}  // namespace ratekeeper::server
