#include "yaml_reader.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/eventhandler.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <sstream>
#include <system_error>
#include <unordered_set>

namespace ratekeeper::server {

std::optional<double> parse_number(std::string_view text) {
  if (text.empty()) return std::nullopt;
  double value = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value, std::chars_format::general);
  if (ec != std::errc() || ptr != end || !std::isfinite(value)) return std::nullopt;
  return value;
}

namespace {

// "1d", "90s", "250ms", "7us": the largest unit that divides `d` exactly.
std::string describe_duration(Micros d) {
  for (auto [unit, size] : {std::pair{"d", 86'400 * kMicrosPerSecond},
                            {"h", 3'600 * kMicrosPerSecond},
                            {"m", 60 * kMicrosPerSecond},
                            {"s", kMicrosPerSecond},
                            {"ms", kMicrosPerMilli}}) {
    if (d != 0 && d % size == 0) return fmt::format("{}{}", d / size, unit);
  }
  return fmt::format("{}us", d);
}

// The first control byte (C0 or DEL) of `text`, if any.
std::optional<unsigned char> control_byte(std::string_view text) {
  for (unsigned char c : text) {
    if (c < 0x20 || c == 0x7f) return c;
  }
  return std::nullopt;
}

}  // namespace

void Reader::expect_map(const YAML::Node& node, const std::string& path,
                        std::initializer_list<std::string_view> allowed) const {
  if (!node.IsMap()) fail(path, "must be a mapping");
  for (const auto& kv : node) {
    const auto key = kv.first.as<std::string>();
    if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
      std::string known;
      for (auto a : allowed) known += (known.empty() ? "" : ", ") + std::string(a);
      fail(field(path, key), fmt::format("unknown field (known: {})", known));
    }
  }
}

std::string Reader::string(const YAML::Node& node, const std::string& path) const {
  if (!node.IsScalar()) fail(path, "must be a string");
  return node.as<std::string>();
}

std::int64_t Reader::integer(const YAML::Node& node, const std::string& path, std::int64_t min,
                             std::int64_t max) const {
  if (!node.IsScalar()) fail(path, "must be an integer");
  const auto& text = node.Scalar();
  // An optional '-' and digits without leading zeros: "010" is 8 to some YAML readers.
  const std::string_view digits = std::string_view(text).substr(text.starts_with('-') ? 1 : 0);
  if (digits.empty() || (digits.size() > 1 && digits.front() == '0') ||
      !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    fail(path, fmt::format("must be a decimal integer, got '{}'", text));
  }
  std::int64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || v < min || v > max) {
    fail(path, fmt::format("must be between {} and {}, got {}", min, max, text));
  }
  return v;
}

double Reader::number(const YAML::Node& node, const std::string& path) const {
  if (!node.IsScalar()) fail(path, "must be a number");
  const auto& text = node.Scalar();
  const auto v = parse_number(text);
  if (!v) fail(path, fmt::format("must be a number, got '{}'", text));
  return *v;
}

double Reader::number(const YAML::Node& node, const std::string& path, double min,
                      double max) const {
  const double v = number(node, path);
  if (v < min || v > max) {
    fail(path, fmt::format("must be between {} and {}, got {}", min, max, node.Scalar()));
  }
  return v;
}

bool Reader::boolean(const YAML::Node& node, const std::string& path) const {
  if (!node.IsScalar()) fail(path, "must be true or false");
  const auto text = node.as<std::string>();
  if (text == "true") return true;
  if (text == "false") return false;
  fail(path, fmt::format("must be true or false, got '{}'", text));
}

Micros Reader::duration(const YAML::Node& node, const std::string& path, Micros min,
                        Micros max) const {
  if (!node.IsScalar()) fail(path, "must be a duration such as 100ms, 1s, 5m");
  const auto text = node.as<std::string>();
  auto d = parse_duration(text);
  if (!d) fail(path, fmt::format("must be a duration such as 100ms, 1s, 5m, got '{}'", text));
  if (*d < min) fail(path, fmt::format("must be at least {} microseconds, got '{}'", min, text));
  if (*d > max) {
    fail(path, fmt::format("must be at most {}, got '{}'", describe_duration(max), text));
  }
  return *d;
}

std::vector<std::string> Reader::strings(const YAML::Node& node, const std::string& path) const {
  if (node.IsNull()) return {};
  if (!node.IsSequence()) fail(path, "must be a list");
  std::vector<std::string> out;
  for (std::size_t i = 0; i < node.size(); ++i) out.push_back(string(node[i], index(path, i)));
  return out;
}

std::pair<double, Micros> Reader::rate(const YAML::Node& node, const std::string& path) const {
  const auto text = string(node, path);
  const auto slash = text.find('/');
  if (slash == std::string::npos) {
    fail(path, fmt::format("must be '<count>/<period>' such as 10/s or 1000/1h, got '{}'", text));
  }
  const std::string count_text = text.substr(0, slash);
  const auto count = parse_number(count_text);
  if (!count || *count <= 0) {
    fail(path, fmt::format("count must be a number > 0, got '{}'", count_text));
  }
  std::string period_text = text.substr(slash + 1);
  if (!period_text.empty() && (period_text[0] < '0' || period_text[0] > '9')) {
    period_text = "1" + period_text;
  }
  auto period = parse_duration(period_text);
  if (!period || *period <= 0) {
    fail(path, fmt::format("period must be a duration such as s, 10s, 1m, 1h, got '{}'",
                           text.substr(slash + 1)));
  }
  return {*count, *period};
}

namespace {

// One pass over the whole document, aliases followed, before any field is read: nesting
// depth, node count, mapping keys (strings, each once per mapping: yaml-cpp keeps duplicates
// and node["k"] would read the first) and control bytes in every key and value. The field
// path is built only for an error.
class DocumentCheck {
 public:
  DocumentCheck(const Reader& r, std::size_t max_depth) : r_(r), max_depth_(max_depth) {}

  void visit(const YAML::Node& node) {
    if (++nodes_ > kMaxDocumentNodes) {
      fail(fmt::format("the document has more than {} nodes (aliases expanded)",
                       kMaxDocumentNodes));
    }
    if (steps_.size() > max_depth_) {
      fail(fmt::format("nested too deeply (more than {} levels)", max_depth_));
    }
    if (node.IsScalar()) {
      if (auto c = control_byte(node.Scalar())) {
        fail(fmt::format("contains a control character (0x{:02x})", *c));
      }
    } else if (node.IsSequence()) {
      std::size_t i = 0;
      for (const auto& item : node) {
        steps_.push_back({nullptr, i++});
        visit(item);
        steps_.pop_back();
      }
    } else if (node.IsMap()) {
      std::unordered_set<std::string_view> keys;
      for (const auto& kv : node) {
        if (!kv.first.IsScalar()) fail("mapping keys must be strings");
        const std::string& key = kv.first.Scalar();
        if (auto c = control_byte(key)) {
          fail(fmt::format("a key contains a control character (0x{:02x})", *c));
        }
        steps_.push_back({&key, 0});
        if (!keys.insert(key).second) fail("duplicate key");
        visit(kv.second);
        steps_.pop_back();
      }
    }
  }

 private:
  struct Step {
    const std::string* key;  // nullptr: a sequence index
    std::size_t index;
  };

  [[noreturn]] void fail(std::string reason) const {
    std::string path;
    for (const auto& step : steps_) {
      path = step.key != nullptr ? Reader::field(path, *step.key) : Reader::index(path, step.index);
    }
    r_.fail(path, std::move(reason));
  }

  const Reader& r_;
  std::size_t max_depth_;
  std::vector<Step> steps_;
  std::size_t nodes_ = 0;
};

// Parser events with nowhere to go: counting the documents of a text.
class DiscardEvents final : public YAML::EventHandler {
 public:
  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}
};

}  // namespace

YAML::Node load_document(const Reader& r, std::string_view yaml, std::size_t max_depth) {
  if (yaml.size() > kMaxConfigBytes) {
    r.fail("",
           fmt::format("is larger than {} bytes, the limit of a configuration", kMaxConfigBytes));
  }
  if (const auto nul = yaml.find('\0'); nul != std::string_view::npos) {
    r.fail("", fmt::format("contains a NUL byte at line {}: a configuration is UTF-8 text",
                           1 + std::count(yaml.begin(),
                                          yaml.begin() + static_cast<std::ptrdiff_t>(nul), '\n')));
  }
  YAML::Node root;
  try {
    // At most two documents are looked at: yaml-cpp 0.7's LoadAll never ends on some malformed
    // input (the parser yields empty documents without advancing), so a second one is an
    // error without reading further.
    std::istringstream in{std::string(yaml)};
    YAML::Parser parser(in);
    DiscardEvents discard;
    std::size_t documents = 0;
    while (documents < 2 && parser.HandleNextDocument(discard)) ++documents;
    if (documents > 1) {
      r.fail("", "holds several YAML documents: a configuration is one YAML document");
    }
    root = YAML::Load(std::string(yaml));
  } catch (const ConfigError&) {
    throw;
  } catch (const YAML::DeepRecursion& e) {
    // yaml-cpp's own recursion guard, near 500 levels: far deeper than any max_depth.
    r.fail("", fmt::format("invalid YAML at line {}, column {}: nested too deeply for the parser",
                           e.mark.line + 1, e.mark.column + 1));
  } catch (const YAML::Exception& e) {
    r.fail("", fmt::format("invalid YAML at line {}, column {}: {}", e.mark.line + 1,
                           e.mark.column + 1, e.msg));
  }
  read_document(r, root, [&](const YAML::Node& node) { DocumentCheck(r, max_depth).visit(node); });
  return root;
}

std::string read_file(const std::string& path) {
  auto fail = [&](std::string reason) { throw ConfigError(path, "", std::move(reason)); };
  auto system_error = [](int error) {
    return std::error_code(error, std::generic_category()).message();
  };
  // O_NONBLOCK: opening a FIFO waits for a writer otherwise (a reload, or serve's start, would
  // hang there); what is not a regular file is refused below before anything is read.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) fail(fmt::format("cannot open the file: {}", system_error(errno)));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) fail(fmt::format("cannot read the file: {}", system_error(errno)));
  if (S_ISDIR(st.st_mode)) fail("is a directory, not a configuration file");
  if (!S_ISREG(st.st_mode)) {
    fail("is not a regular file (a FIFO, socket or device), not a configuration file");
  }
  std::string text;
  char buffer[64 * 1024];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail(fmt::format("cannot read the file: {}", system_error(errno)));
    }
    if (n == 0) return text;
    text.append(buffer, static_cast<std::size_t>(n));
    if (text.size() > kMaxConfigBytes) {
      fail(fmt::format("is larger than {} bytes, the limit of a configuration", kMaxConfigBytes));
    }
  }
}

}  // namespace ratekeeper::server
