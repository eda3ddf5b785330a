#include "config.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <initializer_list>
#include <sstream>
#include <system_error>
#include <unordered_set>

#include "ratekeeper/core/host_port.hpp"
#include "ratekeeper/http/client_ip.hpp"
#include "ratekeeper/limiter/identity.hpp"
#include "ratekeeper/limiter/keys.hpp"

namespace ratekeeper::server {

using limiter::FailureMode;
using limiter::IdentityKind;
using limiter::NamedLimit;
using limiter::Policy;

ConfigError::ConfigError(std::string file, std::string field, std::string reason)
    : std::runtime_error(field.empty() ? fmt::format("{}: {}", file, reason)
                                       : fmt::format("{}: {}: {}", file, field, reason)),
      file_(std::move(file)),
      field_(std::move(field)),
      reason_(std::move(reason)) {}

namespace {

// A finite decimal number as the configuration writes it: "10", "0.5", "1e3", "-2". No '+',
// spaces, hex, inf or nan; independent of the C locale.
std::optional<double> parse_number(std::string_view text) {
  if (text.empty()) return std::nullopt;
  double value = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value, std::chars_format::general);
  if (ec != std::errc() || ptr != end || !std::isfinite(value)) return std::nullopt;
  return value;
}

}  // namespace

std::optional<Micros> parse_duration(std::string_view text) {
  while (!text.empty() && text.back() == ' ') text.remove_suffix(1);
  while (!text.empty() && text.front() == ' ') text.remove_prefix(1);
  std::size_t i = 0;
  while (i < text.size() && ((text[i] >= '0' && text[i] <= '9') || text[i] == '.')) ++i;
  const auto value = parse_number(text.substr(0, i));
  if (!value || *value < 0) return std::nullopt;
  auto unit = text.substr(i);
  while (!unit.empty() && unit.front() == ' ') unit.remove_prefix(1);
  double scale = 0;
  if (unit.empty() || unit == "s")
    scale = 1e6;
  else if (unit == "us")
    scale = 1;
  else if (unit == "ms")
    scale = 1e3;
  else if (unit == "m" || unit == "min")
    scale = 60e6;
  else if (unit == "h")
    scale = 3600e6;
  else if (unit == "d")
    scale = 86400e6;
  else
    return std::nullopt;
  const double us = std::round(*value * scale);
  if (!(us <= static_cast<double>(kMaxExact))) return std::nullopt;
  return static_cast<Micros>(us);
}

namespace {

// A sliding window log key holds one sorted-set entry (about 50-100 bytes in Redis) per unit
// admitted in the window; beyond this, one key could hold megabytes.
constexpr std::int64_t kMaxSlidingLogLimit = 100'000;

// Bounds of a document, checked before any field is read. The deepest field of the format
// is 6 levels down (rules[0].limits[0].rate); yaml-cpp's parser itself stops near 500
// levels. A node reached through several aliases counts every time: a few hundred bytes of
// nested aliases can stand for 10^9 nodes.
constexpr std::size_t kMaxDepth = 32;
constexpr std::size_t kMaxNodes = 1'000'000;

// Upper bound of timeouts, backoffs and retry hints: far beyond any sensible value, far
// below where deadline arithmetic in nanoseconds could overflow.
constexpr Micros kMaxSettingDuration = 86'400 * kMicrosPerSecond;

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

// An HTTP token (RFC 9110 §5.6.2), as header names and methods are: a name with a space or
// a colon would never match a request.
bool http_token(std::string_view text) {
  if (text.empty()) return false;
  return std::all_of(text.begin(), text.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
  });
}

// Reads one YAML document, tracking the field path of every value for error messages.
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

  std::string string(const YAML::Node& node, const std::string& path) const {
    if (!node.IsScalar()) fail(path, "must be a string");
    return node.as<std::string>();
  }

  std::int64_t integer(const YAML::Node& node, const std::string& path, std::int64_t min,
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

  double number(const YAML::Node& node, const std::string& path) const {
    if (!node.IsScalar()) fail(path, "must be a number");
    const auto& text = node.Scalar();
    const auto v = parse_number(text);
    if (!v) fail(path, fmt::format("must be a number, got '{}'", text));
    return *v;
  }

  // A number in [min, max].
  double number(const YAML::Node& node, const std::string& path, double min, double max) const {
    const double v = number(node, path);
    if (v < min || v > max) {
      fail(path, fmt::format("must be between {} and {}, got {}", min, max, node.Scalar()));
    }
    return v;
  }

  bool boolean(const YAML::Node& node, const std::string& path) const {
    if (!node.IsScalar()) fail(path, "must be true or false");
    const auto text = node.as<std::string>();
    if (text == "true") return true;
    if (text == "false") return false;
    fail(path, fmt::format("must be true or false, got '{}'", text));
  }

  // A duration in [min, max]; timeouts and backoffs keep the default bound of a day.
  Micros duration(const YAML::Node& node, const std::string& path, Micros min = 0,
                  Micros max = kMaxSettingDuration) const {
    if (!node.IsScalar()) fail(path, "must be a duration such as 100ms, 1s, 5m");
    const auto text = node.as<std::string>();
    auto d = parse_duration(text);
    if (!d) fail(path, fmt::format("must be a duration such as 100ms, 1s, 5m, got '{}'", text));
    if (*d < min) fail(path, fmt::format("must be at least {} microseconds, got '{}'", min, text));
    if (*d > max)
      fail(path, fmt::format("must be at most {}, got '{}'", describe_duration(max), text));
    return *d;
  }

  std::vector<std::string> strings(const YAML::Node& node, const std::string& path) const {
    if (node.IsNull()) return {};
    if (!node.IsSequence()) fail(path, "must be a list");
    std::vector<std::string> out;
    for (std::size_t i = 0; i < node.size(); ++i) out.push_back(string(node[i], index(path, i)));
    return out;
  }

  // "N/unit" or "N/<duration>": N units per period.
  std::pair<double, Micros> rate(const YAML::Node& node, const std::string& path) const {
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

  const std::string& file() const noexcept { return file_; }

 private:
  std::string file_;
};

NamedLimit read_limit(const Reader& r, const YAML::Node& node, const std::string& path) {
  r.expect_map(node, path,
               {"name", "algorithm", "rate", "capacity", "refill_rate", "limit", "window"});
  NamedLimit out;
  if (node["name"]) out.name = r.string(node["name"], Reader::field(path, "name"));
  auto algorithm = algorithms::Algorithm::token_bucket;
  if (node["algorithm"]) {
    const auto text = r.string(node["algorithm"], Reader::field(path, "algorithm"));
    auto a = algorithms::parse_algorithm(text);
    if (!a) {
      r.fail(Reader::field(path, "algorithm"),
             fmt::format("unknown algorithm '{}' (token_bucket, sliding_window_log, "
                         "sliding_window_counter, fixed_window)",
                         text));
    }
    algorithm = *a;
  }
  const bool has_rate = static_cast<bool>(node["rate"]);
  Result<algorithms::Limit> limit = make_error(ErrorCode::invalid_argument, "");
  std::string blame;  // field blamed for an invalid limit
  if (algorithm == algorithms::Algorithm::token_bucket) {
    for (auto f : {"limit", "window"}) {
      if (node[f])
        r.fail(Reader::field(path, f), "not a token_bucket field (capacity, refill_rate, rate)");
    }
    if (has_rate && node["refill_rate"]) {
      r.fail(Reader::field(path, "refill_rate"), "give either rate or refill_rate, not both");
    }
    double refill = 0;
    double capacity = 0;
    if (has_rate) {
      auto [count, period] = r.rate(node["rate"], Reader::field(path, "rate"));
      refill = count * static_cast<double>(kMicrosPerSecond) / static_cast<double>(period);
      capacity = count;
      blame = Reader::field(path, "rate");
    } else if (node["refill_rate"]) {
      refill = r.number(node["refill_rate"], Reader::field(path, "refill_rate"));
      blame = Reader::field(path, "refill_rate");
    } else {
      r.fail(Reader::field(path, "rate"),
             "required field missing (rate, or capacity and refill_rate)");
    }
    if (node["capacity"]) {
      capacity = r.number(node["capacity"], Reader::field(path, "capacity"));
      if (capacity < 1 || capacity != std::floor(capacity)) {
        r.fail(Reader::field(path, "capacity"), "must be a whole number >= 1");
      }
    } else if (!has_rate) {
      r.fail(Reader::field(path, "capacity"), "required field missing");
    }
    limit = algorithms::Limit::token_bucket(capacity, refill);
  } else {
    for (auto f : {"capacity", "refill_rate"}) {
      if (node[f]) r.fail(Reader::field(path, f), "not a window field (limit, window, rate)");
    }
    if (has_rate && (node["limit"] || node["window"])) {
      r.fail(Reader::field(path, "rate"), "give either rate or limit and window, not both");
    }
    double count = 0;
    Micros window = 0;
    if (has_rate) {
      std::tie(count, window) = r.rate(node["rate"], Reader::field(path, "rate"));
      blame = Reader::field(path, "rate");
    } else {
      if (!node["limit"]) r.fail(Reader::field(path, "limit"), "required field missing (or rate)");
      if (!node["window"])
        r.fail(Reader::field(path, "window"), "required field missing (or rate)");
      count = r.number(node["limit"], Reader::field(path, "limit"));
      window = r.duration(node["window"], Reader::field(path, "window"), 1, kMaxExact);
      blame = Reader::field(path, "limit");
    }
    limit = algorithms::Limit::window(algorithm, count, window);
  }
  if (!limit) r.fail(blame, limit.error().message);
  if (limit->algorithm == algorithms::Algorithm::sliding_window_log &&
      limit->capacity > kMaxSlidingLogLimit) {
    r.fail(blame, fmt::format(
                      "sliding_window_log keeps one entry per admitted unit: at most {} per window "
                      "(sliding_window_counter keeps two numbers for any limit)",
                      kMaxSlidingLogLimit));
  }
  out.limit = *limit;
  return out;
}

Policy read_policy(const Reader& r, const YAML::Node& node, const std::string& path) {
  if (!node.IsSequence() || node.size() == 0) r.fail(path, "must be a non-empty list of limits");
  Policy out;
  for (std::size_t i = 0; i < node.size(); ++i) out.push_back(read_limit(r, node[i], Reader::index(path, i)));
  return out;
}

FailureMode failure_mode(const Reader& r, const YAML::Node& node, const std::string& path) {
  const auto text = r.string(node, path);
  auto m = limiter::parse_failure_mode(text);
  if (!m) r.fail(path, fmt::format("must be allow, deny or local, got '{}'", text));
  return *m;
}

void read_store(const Reader& r, const YAML::Node& node, const std::string& path, Config& c) {
  r.expect_map(node, path,
               {"url", "connect_timeout", "command_timeout", "breaker", "reconnect", "instances",
                "io_threads", "max_keys", "denied_cache_keys", "functions"});
  auto& s = c.store;
  c.store_configured = true;
  if (node["url"]) s.url = r.string(node["url"], Reader::field(path, "url"));
  if (s.url.empty()) r.fail(Reader::field(path, "url"), "must not be empty");
  if (node["connect_timeout"]) {
    s.connect_timeout =
        r.duration(node["connect_timeout"], Reader::field(path, "connect_timeout"), 1);
  }
  if (node["command_timeout"]) {
    s.command_timeout =
        r.duration(node["command_timeout"], Reader::field(path, "command_timeout"), 1);
  }
  if (const auto b = node["breaker"]) {
    const auto bp = Reader::field(path, "breaker");
    r.expect_map(b, bp, {"failures", "open_for"});
    if (b["failures"]) {
      s.breaker_failures =
          static_cast<int>(r.integer(b["failures"], Reader::field(bp, "failures"), 1, 1'000'000));
    }
    if (b["open_for"])
      s.breaker_open_for = r.duration(b["open_for"], Reader::field(bp, "open_for"), 1);
  }
  if (const auto b = node["reconnect"]) {
    const auto bp = Reader::field(path, "reconnect");
    r.expect_map(b, bp, {"min", "max"});
    if (b["min"]) s.reconnect_min = r.duration(b["min"], Reader::field(bp, "min"), 1);
    if (b["max"]) s.reconnect_max = r.duration(b["max"], Reader::field(bp, "max"), 1);
    if (s.reconnect_max < s.reconnect_min) r.fail(Reader::field(bp, "max"), "must be >= min");
  }
  if (node["instances"]) {
    c.limiter.instances = static_cast<int>(
        r.integer(node["instances"], Reader::field(path, "instances"), 1, 100'000));
  }
  if (node["io_threads"]) {
    s.io_threads =
        static_cast<int>(r.integer(node["io_threads"], Reader::field(path, "io_threads"), 1, 256));
  }
  if (node["functions"]) s.redis_functions = r.boolean(node["functions"], Reader::field(path, "functions"));
  if (node["max_keys"]) {
    s.max_keys = static_cast<std::size_t>(
        r.integer(node["max_keys"], Reader::field(path, "max_keys"), 1, std::int64_t{1} << 40));
  }
  if (node["denied_cache_keys"]) {
    c.denied_cache_keys = static_cast<std::size_t>(
        r.integer(node["denied_cache_keys"], Reader::field(path, "denied_cache_keys"), 0,
                  std::int64_t{1} << 32));
  }
}

void read_tiers(const Reader& r, const YAML::Node& node, const std::string& path, Config& c) {
  r.expect_map(node, path, {"default", "header", "trust_header", "levels", "users"});
  auto& t = c.limiter.tiers;
  if (node["default"]) t.default_tier = r.string(node["default"], Reader::field(path, "default"));
  if (node["header"]) {
    t.header = r.string(node["header"], Reader::field(path, "header"));
    if (!http_token(t.header)) r.fail(Reader::field(path, "header"), "must be an HTTP header name");
  }
  if (node["trust_header"])
    t.trust_header = r.boolean(node["trust_header"], Reader::field(path, "trust_header"));
  if (const auto levels = node["levels"]) {
    const auto lp = Reader::field(path, "levels");
    if (!levels.IsMap() || levels.size() == 0)
      r.fail(lp, "must be a non-empty mapping of tier → limits");
    t.levels.clear();
    for (const auto& kv : levels) {
      const auto name = kv.first.as<std::string>();
      t.levels[name] = read_policy(r, kv.second, Reader::field(lp, name));
    }
  }
  if (const auto users = node["users"]) {
    const auto up = Reader::field(path, "users");
    if (!users.IsMap()) r.fail(up, "must be a mapping of user id → tier");
    for (const auto& kv : users) {
      const auto user = kv.first.as<std::string>();
      t.users[user] = r.string(kv.second, Reader::field(up, user));
    }
  }
}

// A rule, and in `match` the HTTP requests it applies to.
limiter::Rule read_rule(const Reader& r, const YAML::Node& node, const std::string& path,
                        FailureMode default_mode, http::RuleMatch& match) {
  r.expect_map(node, path,
               {"name", "match", "identity", "limits", "ip_limits", "tiered", "cost", "bucket",
                "shadow", "on_store_error", "on_limit", "max_delay", "lease"});
  limiter::Rule rule;
  rule.on_store_error = default_mode;
  if (!node["name"]) r.fail(Reader::field(path, "name"), "required field missing");
  rule.name = r.string(node["name"], Reader::field(path, "name"));
  if (const auto m = node["match"]) {
    const auto mp = Reader::field(path, "match");
    r.expect_map(m, mp, {"methods", "path", "path_prefix", "unmatched"});
    if (m["unmatched"]) {
      match.unmatched = r.boolean(m["unmatched"], Reader::field(mp, "unmatched"));
      if (match.unmatched && (m["path"] || m["path_prefix"])) {
        r.fail(Reader::field(mp, "unmatched"),
               "a rule for the requests no other rule matches takes no path or path_prefix");
      }
    }
    if (m["methods"]) {
      const auto methods_path = Reader::field(mp, "methods");
      if (m["methods"].IsScalar()) {
        match.methods.push_back(r.string(m["methods"], methods_path));
      } else {
        match.methods = r.strings(m["methods"], methods_path);
      }
      for (auto& method : match.methods) {
        if (!http_token(method)) {
          r.fail(methods_path,
                 fmt::format("'{}' is not an HTTP method (a token such as GET)", method));
        }
        std::transform(method.begin(), method.end(), method.begin(),
                       [](unsigned char ch) { return static_cast<char>(std::toupper(ch)); });
      }
    }
    if (m["path"] && m["path_prefix"]) {
      r.fail(Reader::field(mp, "path_prefix"), "give either path or path_prefix, not both");
    }
    if (m["path"]) {
      match.path = r.string(m["path"], Reader::field(mp, "path"));
      if (!match.path.starts_with('/')) r.fail(Reader::field(mp, "path"), "must start with '/'");
    }
    if (m["path_prefix"]) {
      match.path_prefix = r.string(m["path_prefix"], Reader::field(mp, "path_prefix"));
      if (!match.path_prefix.starts_with('/')) {
        r.fail(Reader::field(mp, "path_prefix"), "must start with '/'");
      }
    }
  }
  if (const auto id = node["identity"]) {
    const auto ip = Reader::field(path, "identity");
    r.expect_map(id, ip, {"type", "header", "default", "prefix"});
    const auto type = id["type"] ? r.string(id["type"], Reader::field(ip, "type")) : "ip";
    if (type == "ip")
      rule.identity.kind = IdentityKind::ip;
    else if (type == "header")
      rule.identity.kind = IdentityKind::header;
    else if (type == "api_key")
      rule.identity.kind = IdentityKind::api_key;
    else if (type == "user_or_ip")
      rule.identity.kind = IdentityKind::user_or_ip;
    else
      r.fail(Reader::field(ip, "type"),
             fmt::format("must be ip, header, api_key or user_or_ip, got '{}'", type));
    if (id["header"]) {
      rule.identity.header = r.string(id["header"], Reader::field(ip, "header"));
      if (!http_token(rule.identity.header)) {
        r.fail(Reader::field(ip, "header"), "must be an HTTP header name");
      }
    }
    if (rule.identity.kind == IdentityKind::ip) {
      for (auto f : {"header", "default", "prefix"}) {
        if (id[f]) r.fail(Reader::field(ip, f), "not used by identity type ip");
      }
    } else if (rule.identity.header.empty()) {
      rule.identity.header =
          rule.identity.kind == IdentityKind::api_key ? "X-API-Key" : "X-User-ID";
    }
    if (id["default"]) {
      if (rule.identity.kind != IdentityKind::header) {
        r.fail(Reader::field(ip, "default"), "only identity type header takes a default");
      }
      rule.identity.default_value = r.string(id["default"], Reader::field(ip, "default"));
    }
    if (id["prefix"]) {
      rule.identity.prefix = r.string(id["prefix"], Reader::field(ip, "prefix"));
    }
    if (!rule.identity.default_value.empty()) {
      // The identity of every request without the header, made as the middleware makes it and
      // escaped as its key will be: a default that cannot be one would answer each such
      // request 400.
      auto identity = limiter::header_identity(rule.identity.header, rule.identity.prefix,
                                               rule.identity.default_value);
      if (identity) identity = limiter::escape_identity(*identity);
      if (!identity) {
        r.fail(Reader::field(ip, "default"),
               fmt::format("not a usable identity ({}): every request without {} would be "
                           "rejected",
                           identity.error().message, rule.identity.header));
      }
    }
  }
  if (node["tiered"]) rule.tiered = r.boolean(node["tiered"], Reader::field(path, "tiered"));
  if (node["limits"]) {
    rule.limits = read_policy(r, node["limits"], Reader::field(path, "limits"));
  } else if (!rule.tiered) {
    r.fail(Reader::field(path, "limits"), "required field missing (or tiered: true)");
  }
  if (node["ip_limits"]) {
    rule.ip_limits = read_policy(r, node["ip_limits"], Reader::field(path, "ip_limits"));
  }
  if (node["cost"]) {
    rule.cost = r.integer(node["cost"], Reader::field(path, "cost"), 0, kMaxExact);
  }
  if (node["bucket"]) {
    const auto b = r.string(node["bucket"], Reader::field(path, "bucket"));
    if (b == "shared")
      rule.bucket = limiter::BucketScope::shared;
    else if (b == "per_endpoint")
      rule.bucket = limiter::BucketScope::per_endpoint;
    else
      r.fail(Reader::field(path, "bucket"),
             fmt::format("must be shared or per_endpoint, got '{}'", b));
  }
  if (node["shadow"]) rule.shadow = r.boolean(node["shadow"], Reader::field(path, "shadow"));
  if (node["on_store_error"]) {
    rule.on_store_error =
        failure_mode(r, node["on_store_error"], Reader::field(path, "on_store_error"));
  }
  // Which limits on_limit: delay allows, and max_delay required with it: limiter::validate.
  if (node["on_limit"]) {
    const auto on_limit = r.string(node["on_limit"], Reader::field(path, "on_limit"));
    if (on_limit == "reject")
      rule.on_limit = limiter::OnLimit::reject;
    else if (on_limit == "delay")
      rule.on_limit = limiter::OnLimit::delay;
    else
      r.fail(Reader::field(path, "on_limit"), fmt::format("must be reject or delay, got '{}'", on_limit));
  }
  if (node["max_delay"]) {
    rule.max_delay =
        r.duration(node["max_delay"], Reader::field(path, "max_delay"), 1, algorithms::kMaxDelay);
  }
  // lease: {max: N, ttl: duration}. Which limits may be leased: limiter::validate.
  if (const auto lease = node["lease"]) {
    const auto lp = Reader::field(path, "lease");
    r.expect_map(lease, lp, {"max", "ttl"});
    if (!lease["max"]) r.fail(Reader::field(lp, "max"), "required field missing (units of one lease at most)");
    rule.lease.max = r.integer(lease["max"], Reader::field(lp, "max"), 1, algorithms::kMaxWindowLimit);
    rule.lease.ttl = lease["ttl"] ? r.duration(lease["ttl"], Reader::field(lp, "ttl"), 1, store::kMaxLeaseTtl)
                                  : kMicrosPerSecond;
  }
  return rule;
}

void read_upstream(const Reader& r, const YAML::Node& node, const std::string& path,
                   Config& c) {
  r.expect_map(node, path,
               {"url", "connect_timeout", "timeout", "max_idle_connections", "buffer_bytes",
                "lowercase_path"});
  const auto url_path = Reader::field(path, "url");
  if (!node["url"]) r.fail(url_path, "required field missing");
  auto upstream = http::parse_upstream_url(r.string(node["url"], url_path));
  if (!upstream) r.fail(url_path, upstream.error().message);
  auto& u = c.upstream.emplace(std::move(*upstream));
  if (node["connect_timeout"]) {
    u.connect_timeout =
        r.duration(node["connect_timeout"], Reader::field(path, "connect_timeout"), 1);
  }
  if (node["timeout"]) u.timeout = r.duration(node["timeout"], Reader::field(path, "timeout"), 1);
  if (node["max_idle_connections"]) {
    u.max_idle = static_cast<std::size_t>(r.integer(
        node["max_idle_connections"], Reader::field(path, "max_idle_connections"), 0, 100'000));
  }
  if (node["buffer_bytes"]) {
    u.buffer_size = static_cast<std::size_t>(
        r.integer(node["buffer_bytes"], Reader::field(path, "buffer_bytes"), 1024, 16 << 20));
  }
  if (node["lowercase_path"]) {
    u.lowercase_path = r.boolean(node["lowercase_path"], Reader::field(path, "lowercase_path"));
  }
}

Config read_config(const Reader& r, const YAML::Node& root) {
  Config c;
  c.source = r.file();
  if (root.IsNull()) return c;
  if (!root.IsMap())
    r.fail("", "the document must be a mapping of sections (listen, store, rules, ...)");
  r.expect_map(root, "",
               {"listen", "threads", "store", "failure_policy", "key_prefix", "tiers",
                "trusted_proxies", "headers", "logging", "metrics", "http", "rules", "upstream",
                "admin"});
  if (root["listen"]) {
    auto listen = parse_listen_address(r.string(root["listen"], "listen"));
    if (!listen) r.fail("listen", listen.error().message);
    c.http.host = std::move(listen->host);
    c.http.port = listen->port;
  }
  if (root["threads"]) {
    c.http.threads = static_cast<int>(r.integer(root["threads"], "threads", 1, 1024));
  }
  if (root["store"]) read_store(r, root["store"], "store", c);

  FailureMode default_mode = FailureMode::allow;
  if (const auto fp = root["failure_policy"]) {
    r.expect_map(fp, "failure_policy", {"default", "deny_retry_after"});
    if (fp["default"]) default_mode = failure_mode(r, fp["default"], "failure_policy.default");
    if (fp["deny_retry_after"]) {
      c.limiter.deny_retry_after =
          r.duration(fp["deny_retry_after"], "failure_policy.deny_retry_after", 1);
    }
  }
  if (root["key_prefix"]) {
    c.limiter.prefix = r.string(root["key_prefix"], "key_prefix");
  }
  if (root["tiers"]) read_tiers(r, root["tiers"], "tiers", c);
  if (root["trusted_proxies"]) {
    c.trusted_proxies = r.strings(root["trusted_proxies"], "trusted_proxies");
    std::vector<http::Cidr> cidrs;
    for (std::size_t i = 0; i < c.trusted_proxies.size(); ++i) {
      auto cidr = http::Cidr::parse(c.trusted_proxies[i]);
      if (!cidr) r.fail(Reader::index("trusted_proxies", i), cidr.error().message);
      cidrs.push_back(*cidr);
    }
    c.middleware.trusted_proxies = http::TrustedProxies(std::move(cidrs));
  }
  if (const auto h = root["headers"]) {
    r.expect_map(h, "headers", {"draft", "legacy"});
    if (h["draft"]) c.middleware.headers.draft = r.boolean(h["draft"], "headers.draft");
    if (h["legacy"]) c.middleware.headers.legacy = r.boolean(h["legacy"], "headers.legacy");
  }
  if (const auto l = root["logging"]) {
    r.expect_map(l, "logging", {"level", "decisions"});
    if (l["level"]) {
      c.logging.level = r.string(l["level"], "logging.level");
      static constexpr std::string_view kLevels[] = {"trace", "debug",    "info", "warn",
                                                     "error", "critical", "off"};
      if (std::find(std::begin(kLevels), std::end(kLevels), c.logging.level) == std::end(kLevels)) {
        r.fail("logging.level", fmt::format("must be trace, debug, info, warn, error, critical or "
                                            "off, got '{}'",
                                            c.logging.level));
      }
    }
    if (const auto d = l["decisions"]) {
      const std::string dp = "logging.decisions";
      r.expect_map(d, dp, {"enabled", "allow_sample_rate", "lines_per_second", "burst"});
      auto& o = c.limiter.decision_log;
      if (d["enabled"]) o.enabled = r.boolean(d["enabled"], dp + ".enabled");
      if (d["allow_sample_rate"]) {
        o.allow_sample_rate = r.number(d["allow_sample_rate"], dp + ".allow_sample_rate", 0, 1);
      }
      if (d["lines_per_second"]) {
        o.lines_per_second =
            r.number(d["lines_per_second"], dp + ".lines_per_second",
                     limiter::kMinDecisionLinesPerSecond, limiter::kMaxDecisionLinesPerSecond);
      }
      if (d["burst"]) {
        o.burst = r.number(d["burst"], dp + ".burst", 1, limiter::kMaxDecisionBurst);
      }
    }
  }
  if (const auto m = root["metrics"]) {
    r.expect_map(m, "metrics", {"enabled"});
    if (m["enabled"]) c.metrics_enabled = r.boolean(m["enabled"], "metrics.enabled");
  }
  if (const auto h = root["http"]) {
    r.expect_map(h, "http",
                 {"max_header_bytes", "max_body_bytes", "read_timeout", "max_pipelined"});
    if (h["max_header_bytes"]) {
      c.http.header_limit = static_cast<std::size_t>(
          r.integer(h["max_header_bytes"], "http.max_header_bytes", 512, 1 << 20));
    }
    if (h["max_body_bytes"]) {
      c.http.body_limit = static_cast<std::size_t>(
          r.integer(h["max_body_bytes"], "http.max_body_bytes", 0, std::int64_t{1} << 32));
    }
    if (h["read_timeout"])
      c.http.read_timeout = r.duration(h["read_timeout"], "http.read_timeout", 1);
    if (h["max_pipelined"]) {
      c.http.max_pipelined =
          static_cast<std::size_t>(r.integer(h["max_pipelined"], "http.max_pipelined", 1, 1024));
    }
  }
  if (const auto u = root["upstream"]) read_upstream(r, u, "upstream", c);
  if (const auto a = root["admin"]) {
    if (!c.upstream) {
      r.fail("admin", "only with an upstream: without one, ratekeeper's endpoints are served on "
                      "listen");
    }
    r.expect_map(a, "admin", {"listen"});
    if (!a["listen"]) r.fail("admin.listen", "required field missing");
    auto listen = parse_listen_address(r.string(a["listen"], "admin.listen"));
    if (!listen) r.fail("admin.listen", listen.error().message);
    c.admin.host = std::move(listen->host);
    c.admin.port = listen->port;
  }
  if (c.upstream && c.admin.port != 0 && c.admin.port == c.http.port &&
      (c.admin.host == c.http.host || c.admin.host == "0.0.0.0" || c.http.host == "0.0.0.0")) {
    r.fail("admin.listen", fmt::format("must differ from listen ({}:{})", c.http.host,
                                       c.http.port));
  }
  if (const auto rules = root["rules"]; rules && !rules.IsNull()) {
    if (!rules.IsSequence()) r.fail("rules", "must be a list");
    for (std::size_t i = 0; i < rules.size(); ++i) {
      http::RuleMatch match;
      auto rule = read_rule(r, rules[i], Reader::index("rules", i), default_mode, match);
      match.rule = rule.name;
      c.middleware.matches.push_back(std::move(match));
      c.limiter.rules.push_back(std::move(rule));
    }
  }
  // What the limiter requires of its rules, tiers and prefix, checked by the limiter itself.
  if (auto issues = limiter::validate(c.limiter); !issues.empty()) {
    r.fail(issues.front().field, std::move(issues.front().reason));
  }
  return c;
}

// One pass over the whole document, aliases followed, before any field is read: nesting
// depth, node count, mapping keys (strings, each once per mapping: yaml-cpp keeps duplicates
// and node["k"] would read the first) and control bytes in every key and value. The field
// path is built only for an error.
class DocumentCheck {
 public:
  explicit DocumentCheck(const Reader& r) : r_(r) {}

  void visit(const YAML::Node& node) {
    if (++nodes_ > kMaxNodes) {
      fail(fmt::format("the document has more than {} nodes (aliases expanded)", kMaxNodes));
    }
    if (steps_.size() > kMaxDepth) {
      fail(fmt::format("nested too deeply (more than {} levels)", kMaxDepth));
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

Config parse_with(const Reader& r, std::string_view yaml) {
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
    // yaml-cpp's own recursion guard, near 500 levels: far deeper than kMaxDepth.
    r.fail("", fmt::format("invalid YAML at line {}, column {}: nested too deeply for the parser",
                           e.mark.line + 1, e.mark.column + 1));
  } catch (const YAML::Exception& e) {
    r.fail("", fmt::format("invalid YAML at line {}, column {}: {}", e.mark.line + 1,
                           e.mark.column + 1, e.msg));
  }
  try {
    DocumentCheck(r).visit(root);
    return read_config(r, root);
  } catch (const ConfigError&) {
    throw;
  } catch (const YAML::Exception& e) {
    r.fail("", fmt::format("line {}, column {}: {}", e.mark.line + 1, e.mark.column + 1, e.msg));
  }
}

// The whole file, or ConfigError: a directory, an open or read error, or more than
// kMaxConfigBytes (read no further, so /dev/zero cannot exhaust memory).
std::string read_file(const std::string& path) {
  auto fail = [&](std::string reason) { throw ConfigError(path, "", std::move(reason)); };
  auto system_error = [](int error) {
    return std::error_code(error, std::generic_category()).message();
  };
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(fmt::format("cannot open the file: {}", system_error(errno)));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) fail(fmt::format("cannot read the file: {}", system_error(errno)));
  if (S_ISDIR(st.st_mode)) fail("is a directory, not a configuration file");
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

}  // namespace

Result<ListenAddress> parse_listen_address(std::string_view text) {
  auto fail = [&](std::string reason) {
    return make_error(ErrorCode::invalid_argument, std::move(reason));
  };
  auto split = split_host_port(text);
  if (!split || !split->port) return fail(fmt::format("must be host:port, got '{}'", text));
  const std::string_view host = split->host;
  const bool host_ok = split->bracketed
                           ? host.find(':') != std::string_view::npos && http::parse_address(host)
                           : host.empty() || host == "localhost" || http::parse_address(host);
  if (!host_ok) return fail(fmt::format("host must be an IP address or localhost, got '{}'", host));
  // Decimal digits without leading zeros, as every integer of the configuration.
  const std::string_view digits = *split->port;
  if (digits.empty() || (digits.size() > 1 && digits.front() == '0') ||
      !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return fail(fmt::format("must be a decimal integer, got '{}'", digits));
  }
  unsigned port = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), port);
  if (ec != std::errc() || port > 65535) {
    return fail(fmt::format("must be between 0 and 65535, got {}", digits));
  }
  return ListenAddress{host.empty() ? std::string("0.0.0.0") : std::string(host),
                       static_cast<std::uint16_t>(port)};
}

Config parse_config(std::string_view yaml, std::string_view source) {
  return parse_with(Reader(std::string(source)), yaml);
}

Config load_config(const std::string& path) {
  return parse_with(Reader(path), read_file(path));
}

}  // namespace ratekeeper::server
