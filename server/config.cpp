#include "config.hpp"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>

#include "ratekeeper/core/host_port.hpp"
#include "ratekeeper/http/client_ip.hpp"
#include "ratekeeper/http/path.hpp"
#include "ratekeeper/limiter/identity.hpp"
#include "ratekeeper/limiter/keys.hpp"
#include "ratekeeper/redis/tls.hpp"
#include "ratekeeper/redis/url.hpp"
#include "ratekeeper/store/open_store.hpp"
#include "logging.hpp"
#include "yaml_reader.hpp"

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

std::optional<std::string> refused_limit_reason(const algorithms::Limit& limit) {
  if (limit.algorithm == algorithms::Algorithm::sliding_window_log &&
      limit.capacity > kMaxSlidingLogLimit) {
    return fmt::format(
        "sliding_window_log keeps one entry per admitted unit: at most {} per window "
        "(sliding_window_counter keeps two numbers for any limit)",
        kMaxSlidingLogLimit);
  }
  return std::nullopt;
}

namespace {

// An HTTP token (RFC 9110 §5.6.2), as header names and methods are: a name with a space or
// a colon would never match a request.
bool http_token(std::string_view text) {
  if (text.empty()) return false;
  return std::all_of(text.begin(), text.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
  });
}

NamedLimit read_limit(const Reader& r, const YAML::Node& node, const std::string& path) {
  r.expect_map(node, path,
               {"name", "algorithm", "rate", "capacity", "refill_rate", "limit", "window", "slot_ttl"});
  NamedLimit out;
  if (node["name"]) out.name = r.string(node["name"], Reader::field(path, "name"));
  auto algorithm = algorithms::Algorithm::token_bucket;
  if (node["algorithm"]) {
    const auto text = r.string(node["algorithm"], Reader::field(path, "algorithm"));
    auto a = algorithms::parse_algorithm(text);
    if (!a) {
      r.fail(Reader::field(path, "algorithm"),
             fmt::format("unknown algorithm '{}' (token_bucket, sliding_window_log, "
                         "sliding_window_counter, fixed_window, concurrency)",
                         text));
    }
    algorithm = *a;
  }
  if (algorithm != algorithms::Algorithm::concurrency && node["slot_ttl"]) {
    r.fail(Reader::field(path, "slot_ttl"), "a field of concurrency limits only");
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
  } else if (algorithm == algorithms::Algorithm::concurrency) {
    for (auto f : {"rate", "capacity", "refill_rate", "window"}) {
      if (node[f]) r.fail(Reader::field(path, f), "not a concurrency field (limit, slot_ttl)");
    }
    if (!node["limit"]) r.fail(Reader::field(path, "limit"), "required field missing (requests in flight)");
    const double count = r.number(node["limit"], Reader::field(path, "limit"));
    Micros ttl = kDefaultSlotTtl;
    if (node["slot_ttl"]) {
      ttl = r.duration(node["slot_ttl"], Reader::field(path, "slot_ttl"), kMicrosPerMilli, algorithms::kMaxWindow);
    }
    blame = Reader::field(path, "limit");
    limit = algorithms::Limit::window(algorithm, count, ttl);
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
  if (auto why = refused_limit_reason(*limit)) r.fail(blame, std::move(*why));
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

// A file named by the configuration: relative paths are resolved against the configuration
// file's directory; an empty one is an error naming its field.
void read_file_field(const Reader& r, const YAML::Node& node, const std::string& path, const char* name,
                     const std::string& source, std::string& out) {
  if (!node[name]) return;
  const auto field = Reader::field(path, name);
  out = r.string(node[name], field);
  if (out.empty()) r.fail(field, "must not be empty");
  if (const std::filesystem::path p(out); p.is_relative()) {
    out = (std::filesystem::path(source).parent_path() / p).lexically_normal().string();
  }
}

// A client's TLS (store.tls, upstream.tls): CA, client certificate, server name, verification.
// The files are loaded here, so that a missing or unreadable one is a configuration error
// naming its field.
void read_client_tls(const Reader& r, const YAML::Node& node, const std::string& path, const std::string& source,
                     TlsOptions& t) {
  r.expect_map(node, path, {"ca_file", "ca_dir", "cert_file", "key_file", "server_name", "verify"});
  read_file_field(r, node, path, "ca_file", source, t.ca_file);
  read_file_field(r, node, path, "ca_dir", source, t.ca_dir);
  read_file_field(r, node, path, "cert_file", source, t.cert_file);
  read_file_field(r, node, path, "key_file", source, t.key_file);
  if (node["server_name"]) {
    t.server_name = r.string(node["server_name"], Reader::field(path, "server_name"));
    if (t.server_name.empty()) r.fail(Reader::field(path, "server_name"), "must not be empty");
  }
  if (node["verify"]) t.verify = r.boolean(node["verify"], Reader::field(path, "verify"));
  if (t.cert_file.empty() != t.key_file.empty()) {
    r.fail(Reader::field(path, t.cert_file.empty() ? "cert_file" : "key_file"),
           "cert_file and key_file go together (a client certificate and its key)");
  }
}

// store.tls: the certificates and checks of the rediss* schemes.
void read_store_tls(const Reader& r, const YAML::Node& node, const std::string& path, Config& c) {
  auto& t = c.store.tls;
  read_client_tls(r, node, path, c.source, t);
  if (!c.store.url.starts_with("rediss")) {
    r.fail(path, fmt::format("TLS options need a TLS store url (rediss://, rediss-cluster://, "
                             "rediss-sentinel://), not '{}'",
                             redis::redact_url(c.store.url)));
  }
  if (auto context = make_tls_context(t); !context) r.fail(path, context.error().message);
}

// A listener's TLS (tls, admin.tls): its certificate and key, the client CAs of mutual TLS.
// The files are read here (and again on each reload).
ListenerTls read_server_tls(const Reader& r, const YAML::Node& node, const std::string& path,
                            const std::string& source, bool http2) {
  r.expect_map(node, path, {"cert_file", "key_file", "client_ca_file", "min_version"});
  TlsServerOptions t;
  t.http2 = http2;
  for (const char* required : {"cert_file", "key_file"}) {
    if (!node[required]) r.fail(Reader::field(path, required), "required field missing");
  }
  read_file_field(r, node, path, "cert_file", source, t.cert_file);
  read_file_field(r, node, path, "key_file", source, t.key_file);
  read_file_field(r, node, path, "client_ca_file", source, t.client_ca_file);
  if (node["min_version"]) {
    const auto field = Reader::field(path, "min_version");
    t.min_version = r.string(node["min_version"], field);
    if (t.min_version != "1.2" && t.min_version != "1.3") {
      r.fail(field, fmt::format("must be 1.2 or 1.3, not '{}'", t.min_version));
    }
  }
  auto context = make_tls_server_context(t);
  if (!context) r.fail(path, context.error().message);
  return ListenerTls{std::move(t), std::move(*context)};
}

void read_store(const Reader& r, const YAML::Node& node, const std::string& path, Config& c) {
  r.expect_map(node, path,
               {"url", "connect_timeout", "command_timeout", "breaker", "reconnect", "instances",
                "io_threads", "max_keys", "denied_cache_keys", "functions", "tls"});
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
  if (node["tls"]) read_store_tls(r, node["tls"], Reader::field(path, "tls"), c);
  // What `serve` would refuse when it opens the store, refused here (check-config included).
  if (auto ok = store::check_store_options(s); !ok) {
    r.fail(Reader::field(path, "url"), ok.error().message);
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

// An identity: `type` (ip, header, api_key, user_or_ip), `header`, `default`, `prefix`.
limiter::IdentitySpec read_identity(const Reader& r, const YAML::Node& id, const std::string& ip) {
  limiter::IdentitySpec spec;
  r.expect_map(id, ip, {"type", "header", "default", "prefix"});
  const auto type = id["type"] ? r.string(id["type"], Reader::field(ip, "type")) : "ip";
  if (type == "ip")
    spec.kind = IdentityKind::ip;
  else if (type == "header")
    spec.kind = IdentityKind::header;
  else if (type == "api_key")
    spec.kind = IdentityKind::api_key;
  else if (type == "user_or_ip")
    spec.kind = IdentityKind::user_or_ip;
  else
    r.fail(Reader::field(ip, "type"),
           fmt::format("must be ip, header, api_key or user_or_ip, got '{}'", type));
  if (id["header"]) {
    spec.header = r.string(id["header"], Reader::field(ip, "header"));
    if (!http_token(spec.header)) {
      r.fail(Reader::field(ip, "header"), "must be an HTTP header name");
    }
  }
  if (spec.kind == IdentityKind::ip) {
    for (auto f : {"header", "default", "prefix"}) {
      if (id[f]) r.fail(Reader::field(ip, f), "not used by identity type ip");
    }
  } else if (spec.header.empty()) {
    spec.header =
        spec.kind == IdentityKind::api_key ? "X-API-Key" : "X-User-ID";
  }
  if (id["default"]) {
    if (spec.kind != IdentityKind::header) {
      r.fail(Reader::field(ip, "default"), "only identity type header takes a default");
    }
    spec.default_value = r.string(id["default"], Reader::field(ip, "default"));
  }
  if (id["prefix"]) {
    spec.prefix = r.string(id["prefix"], Reader::field(ip, "prefix"));
  }
  if (!spec.default_value.empty()) {
    // The identity of every request without the header, made as the middleware makes it and
    // escaped as its key will be: a default that cannot be one would answer each such
    // request 400.
    auto identity = limiter::header_identity(spec.header, spec.prefix,
                                             spec.default_value);
    if (identity) identity = limiter::escape_identity(*identity);
    if (!identity) {
      r.fail(Reader::field(ip, "default"),
             fmt::format("not a usable identity ({}): every request without {} would be "
                         "rejected",
                         identity.error().message, spec.header));
    }
  }
  return spec;
}

// Requests are matched on their normal path (http/path.hpp), so a rule's path or prefix in
// another form would match nothing: refused, naming the form to write. A prefix may end inside
// a segment: a last segment of dots ("/files/.") is the start of a name, not a dot segment.
void check_match_paths(const Reader& r, const http::RuleMatch& match, const http::PathOptions& paths,
                       const std::string& match_path) {
  const auto check = [&](std::string_view value, std::string_view checked, std::string_view key) {
    if (value.empty() || http::is_normal_path(checked, paths)) return;
    auto normal = http::normalize_path(value, paths);
    r.fail(Reader::field(match_path, key),
           normal ? fmt::format("'{}' is not the normal form of a path (http section, upstream.lowercase_path), "
                                "which requests are matched on: it would match nothing; write '{}'",
                                value, *normal)
                  : fmt::format("'{}' would match nothing: {}", value, normal.error().message));
  };
  check(match.path, match.path, "path");
  std::string_view prefix = match.path_prefix;
  if (const auto last = prefix.rfind('/'); last != std::string_view::npos &&
                                           prefix.find_first_not_of('.', last + 1) == std::string_view::npos &&
                                           last + 1 < prefix.size()) {
    prefix = prefix.substr(0, last + 1);
  }
  check(match.path_prefix, prefix, "path_prefix");
}

// A rule, and in `match` the HTTP requests it applies to.
limiter::Rule read_rule(const Reader& r, const YAML::Node& node, const std::string& path,
                        FailureMode default_mode, http::RuleMatch& match, bool& by_name_only) {
  r.expect_map(node, path,
               {"name", "match", "identity", "limits", "ip_limits", "tiered", "cost", "bucket",
                "shadow", "on_store_error", "on_limit", "max_delay", "lease", "usage", "parent"});
  limiter::Rule rule;
  rule.on_store_error = default_mode;
  if (!node["name"]) r.fail(Reader::field(path, "name"), "required field missing");
  rule.name = r.string(node["name"], Reader::field(path, "name"));
  by_name_only = false;
  if (const auto m = node["match"]; m && m.IsScalar()) {
    // `match: false`: no HTTP request selects the rule; it is checked by name (the decision
    // API, an application's own code).
    if (r.boolean(m, Reader::field(path, "match"))) {
      r.fail(Reader::field(path, "match"), "a mapping (methods, path, path_prefix, unmatched), or false");
    }
    by_name_only = true;
  } else if (m) {
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
  if (const auto id = node["identity"]) rule.identity = read_identity(r, id, Reader::field(path, "identity"));
  if (const auto parent = node["parent"]) {
    const auto pp = Reader::field(path, "parent");
    r.expect_map(parent, pp, {"identity", "limits"});
    limiter::ParentSpec spec;
    if (!parent["identity"]) r.fail(Reader::field(pp, "identity"), "required field missing");
    spec.identity = read_identity(r, parent["identity"], Reader::field(pp, "identity"));
    if (!parent["limits"]) r.fail(Reader::field(pp, "limits"), "required field missing");
    spec.limits = read_policy(r, parent["limits"], Reader::field(pp, "limits"));
    rule.parent = std::move(spec);
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
  // usage: {response_header: H, estimate: N, estimate_header: H, ttl: duration}. Which
  // limits and rules: limiter::validate.
  if (const auto usage = node["usage"]) {
    const auto up = Reader::field(path, "usage");
    r.expect_map(usage, up, {"response_header", "response_json", "estimate", "estimate_header", "ttl"});
    auto header = [&](const char* name) {
      const auto field = Reader::field(up, name);
      std::string value = r.string(usage[name], field);
      if (!http_token(value)) r.fail(field, "must be an HTTP header name");
      return value;
    };
    if (!usage["response_header"] && !usage["response_json"]) {
      r.fail(up, "response_header or response_json required (where the response reports the cost)");
    }
    if (usage["response_header"]) rule.usage.response_header = header("response_header");
    if (usage["response_json"]) {
      const auto field = Reader::field(up, "response_json");
      rule.usage.response_json = r.string(usage["response_json"], field);
      if (rule.usage.response_json.empty()) r.fail(field, "must not be empty");
    }
    if (usage["estimate_header"]) rule.usage.estimate_header = header("estimate_header");
    if (!usage["estimate"]) {
      r.fail(Reader::field(up, "estimate"), "required field missing (the cost reserved at admission)");
    }
    rule.usage.estimate = r.integer(usage["estimate"], Reader::field(up, "estimate"), 0, algorithms::kMaxWindowLimit);
    if (usage["ttl"]) {
      rule.usage.ttl = r.duration(usage["ttl"], Reader::field(up, "ttl"), 1, 86'400 * kMicrosPerSecond);
    }
  }
  return rule;
}

void read_upstream(const Reader& r, const YAML::Node& node, const std::string& path,
                   Config& c) {
  r.expect_map(node, path,
               {"url", "connect_timeout", "timeout", "max_idle_connections", "idle_timeout", "buffer_bytes",
                "lowercase_path", "tls", "upgrades", "tunnel_idle_timeout", "tunnel_max_duration"});
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
  if (node["idle_timeout"]) u.idle_timeout = r.duration(node["idle_timeout"], Reader::field(path, "idle_timeout"), 1);
  if (node["buffer_bytes"]) {
    u.buffer_size = static_cast<std::size_t>(
        r.integer(node["buffer_bytes"], Reader::field(path, "buffer_bytes"), 1024, 16 << 20));
  }
  if (node["lowercase_path"]) {
    u.lowercase_path = r.boolean(node["lowercase_path"], Reader::field(path, "lowercase_path"));
  }
  if (node["tls"]) {
    const auto tls_path = Reader::field(path, "tls");
    if (!u.tls.enabled) r.fail(tls_path, "TLS options need an https:// url");
    read_client_tls(r, node["tls"], tls_path, c.source, u.tls);
  }
  if (u.tls.enabled) {
    if (auto context = make_tls_context(u.tls); !context) r.fail(Reader::field(path, "tls"), context.error().message);
  }
  if (const auto up = node["upgrades"]) {
    // true (WebSocket), false (none), or the protocols to relay.
    const auto up_path = Reader::field(path, "upgrades");
    if (up.IsSequence()) {
      u.upgrade_protocols = r.strings(up, up_path);
      u.upgrades = !u.upgrade_protocols.empty();
      for (const auto& p : u.upgrade_protocols) {
        if (!http_token(p) || p.find('/') != std::string::npos) {
          r.fail(up_path, fmt::format("'{}' is not a protocol name (a token such as websocket)", p));
        }
        if (http::iequals(p, "h2c")) {
          r.fail(up_path, "h2c cannot be relayed: the requests sent inside its tunnel would never meet the rules");
        }
      }
    } else {
      u.upgrades = r.boolean(up, up_path);
    }
  }
  if (node["tunnel_idle_timeout"]) {
    u.tunnel_idle_timeout = r.duration(node["tunnel_idle_timeout"], Reader::field(path, "tunnel_idle_timeout"), 1);
  }
  if (node["tunnel_max_duration"]) {
    u.tunnel_max_duration = r.duration(node["tunnel_max_duration"], Reader::field(path, "tunnel_max_duration"), 1);
  }
}

// The gRPC rate limit service: its listener must differ from the HTTP ones; its domain files
// are only named here (read when the server starts).
void read_grpc(const Reader& r, const YAML::Node& node, const std::string& path, Config& c) {
  r.expect_map(node, path,
               {"listen", "config", "response_headers", "max_message_bytes", "threads",
                "handshake_timeout"});
  auto& g = c.grpc.emplace();
  const auto listen_path = Reader::field(path, "listen");
  if (!node["listen"]) r.fail(listen_path, "required field missing");
  auto listen = parse_listen_address(r.string(node["listen"], listen_path));
  if (!listen) r.fail(listen_path, listen.error().message);
  g.host = std::move(listen->host);
  g.port = listen->port;
  auto same_endpoint = [&](const std::string& host, std::uint16_t port) {
    return g.port != 0 && g.port == port &&
           (g.host == host || g.host == "0.0.0.0" || host == "0.0.0.0");
  };
  if (same_endpoint(c.http.host, c.http.port)) {
    r.fail(listen_path, fmt::format("must differ from listen ({}:{})", c.http.host, c.http.port));
  }
  if (c.upstream && same_endpoint(c.admin.host, c.admin.port)) {
    r.fail(listen_path,
           fmt::format("must differ from admin.listen ({}:{})", c.admin.host, c.admin.port));
  }
  const auto config_path = Reader::field(path, "config");
  if (!node["config"]) {
    r.fail(config_path, "required field missing (the directory of the domain files)");
  }
  g.config_dir = r.string(node["config"], config_path);
  if (g.config_dir.empty()) r.fail(config_path, "must not be empty");
  if (const std::filesystem::path dir(g.config_dir); dir.is_relative()) {
    g.config_dir = (std::filesystem::path(c.source).parent_path() / dir).lexically_normal().string();
  }
  if (node["response_headers"]) {
    g.response_headers =
        r.boolean(node["response_headers"], Reader::field(path, "response_headers"));
  }
  if (node["max_message_bytes"]) {
    g.max_message_bytes = static_cast<std::size_t>(
        r.integer(node["max_message_bytes"], Reader::field(path, "max_message_bytes"),
                  static_cast<std::int64_t>(kMinGrpcMessageBytes),
                  static_cast<std::int64_t>(kMaxGrpcMessageBytes)));
  }
  if (node["threads"]) {
    g.threads = static_cast<int>(r.integer(node["threads"], Reader::field(path, "threads"), 1, 64));
  }
  if (node["handshake_timeout"]) {
    g.handshake_timeout =
        r.duration(node["handshake_timeout"], Reader::field(path, "handshake_timeout"), kMicrosPerMilli);
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
                "trusted_proxies", "ipv6_prefix", "headers", "logging", "metrics", "http", "rules", "upstream",
                "admin", "grpc", "demo_api", "tls", "access_log", "overrides"});
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
  if (root["demo_api"]) c.demo_api = r.boolean(root["demo_api"], "demo_api");

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
    // Each entry on its own first, so that an error names it.
    for (std::size_t i = 0; i < c.trusted_proxies.size(); ++i) {
      if (auto one = http::TrustedProxies::parse({c.trusted_proxies[i]}); !one) {
        r.fail(Reader::index("trusted_proxies", i), one.error().message);
      }
    }
    c.middleware.trusted_proxies = *http::TrustedProxies::parse(c.trusted_proxies);
  }
  if (root["ipv6_prefix"]) {
    c.middleware.ipv6_prefix = static_cast<int>(r.integer(root["ipv6_prefix"], "ipv6_prefix", 32, 128));
  }
  if (const auto h = root["headers"]) {
    r.expect_map(h, "headers", {"draft", "legacy"});
    if (h["draft"]) c.middleware.headers.draft = r.boolean(h["draft"], "headers.draft");
    if (h["legacy"]) c.middleware.headers.legacy = r.boolean(h["legacy"], "headers.legacy");
  }
  if (const auto l = root["logging"]) {
    r.expect_map(l, "logging", {"level", "format", "decisions"});
    if (l["format"]) {
      const auto text = r.string(l["format"], "logging.format");
      const auto format = parse_log_format(text);
      if (!format) r.fail("logging.format", "must be text or json, not '" + text + "'");
      c.logging.format = *format;
    }
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
                 {"max_header_bytes", "max_body_bytes", "read_timeout", "request_timeout",
                  "max_pipelined", "escaped_slashes", "ambiguous_paths", "http2"});
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
    if (h["request_timeout"]) {
      c.http.request_timeout = r.duration(h["request_timeout"], "http.request_timeout", 1);
    }
    if (h["http2"]) c.http.http2 = r.boolean(h["http2"], "http.http2");
    if (h["max_pipelined"]) {
      c.http.max_pipelined =
          static_cast<std::size_t>(r.integer(h["max_pipelined"], "http.max_pipelined", 1, 1024));
    }
    if (h["escaped_slashes"]) {
      const auto text = r.string(h["escaped_slashes"], "http.escaped_slashes");
      const auto action = http::parse_escaped_slashes(text);
      if (!action) {
        r.fail("http.escaped_slashes", "must be reject, unescape or keep, not '" + text + "'");
      }
      c.http.paths.escaped_slashes = *action;
    }
    if (h["ambiguous_paths"]) {
      const auto text = r.string(h["ambiguous_paths"], "http.ambiguous_paths");
      if (text != "reject" && text != "keep") {
        r.fail("http.ambiguous_paths", "must be reject or keep, not '" + text + "'");
      }
      c.http.paths.reject_ambiguous = text == "reject";
    }
  }
  if (const auto u = root["upstream"]) read_upstream(r, u, "upstream", c);
  // The rules match what the server and the proxy normalise the paths to.
  c.middleware.paths = c.http.paths;
  if (c.upstream) c.middleware.paths.lowercase = c.upstream->lowercase_path;
  if (c.demo_api && c.upstream) {
    r.fail("demo_api", "only without an upstream: with one, every request on listen goes to it");
  }
  if (const auto a = root["admin"]) {
    if (!c.upstream) {
      r.fail("admin", "only with an upstream: without one, ratekeeper's endpoints are served on "
                      "listen");
    }
    r.expect_map(a, "admin", {"listen", "tls"});
    if (!a["listen"]) r.fail("admin.listen", "required field missing");
    auto listen = parse_listen_address(r.string(a["listen"], "admin.listen"));
    if (!listen) r.fail("admin.listen", listen.error().message);
    c.admin.host = std::move(listen->host);
    c.admin.port = listen->port;
    if (a["tls"]) c.admin.tls = read_server_tls(r, a["tls"], "admin.tls", c.source, false);
  }
  // HTTP/2 is the proxy's: the `listen` listener offers h2 by ALPN when it proxies.
  if (const auto t = root["tls"]) c.tls = read_server_tls(r, t, "tls", c.source, c.upstream && c.http.http2);
  if (const auto a = root["access_log"]) {
    r.expect_map(a, "access_log", {"path", "max_lines_per_second"});
    auto& log = c.access_log.emplace();
    if (a["path"]) {
      log.path = r.string(a["path"], "access_log.path");
      if (log.path.empty()) r.fail("access_log.path", "must not be empty (stdout, or a file)");
      if (log.path != "stdout") read_file_field(r, a, "access_log", "path", c.source, log.path);
    }
    if (a["max_lines_per_second"]) {
      log.max_lines_per_second = static_cast<double>(
          r.integer(a["max_lines_per_second"], "access_log.max_lines_per_second", 0, 10'000'000));
    }
  }
  if (const auto o = root["overrides"]) {
    r.expect_map(o, "overrides", {"refresh"});
    if (o["refresh"]) {
      c.overrides_refresh = r.duration(o["refresh"], "overrides.refresh", 10 * kMicrosPerMilli, 3600 * kMicrosPerSecond);
    }
  }
  if (c.upstream && c.admin.port != 0 && c.admin.port == c.http.port &&
      (c.admin.host == c.http.host || c.admin.host == "0.0.0.0" || c.http.host == "0.0.0.0")) {
    r.fail("admin.listen", fmt::format("must differ from listen ({}:{})", c.http.host,
                                       c.http.port));
  }
  if (const auto g = root["grpc"]) read_grpc(r, g, "grpc", c);
  if (const auto rules = root["rules"]; rules && !rules.IsNull()) {
    if (!rules.IsSequence()) r.fail("rules", "must be a list");
    for (std::size_t i = 0; i < rules.size(); ++i) {
      http::RuleMatch match;
      bool by_name_only = false;
      auto rule = read_rule(r, rules[i], Reader::index("rules", i), default_mode, match, by_name_only);
      check_match_paths(r, match, c.middleware.paths, Reader::field(Reader::index("rules", i), "match"));
      match.rule = rule.name;
      if (!by_name_only) c.middleware.matches.push_back(std::move(match));
      c.limiter.rules.push_back(std::move(rule));
    }
  }
  // What the limiter requires of its rules, tiers and prefix, checked by the limiter itself.
  if (auto issues = limiter::validate(c.limiter); !issues.empty()) {
    r.fail(issues.front().field, std::move(issues.front().reason));
  }
  return c;
}

Config parse_with(const Reader& r, std::string_view yaml) {
  const auto root = load_document(r, yaml);
  return read_document(r, root, [&](const YAML::Node& node) { return read_config(r, node); });
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
  // Decimal digits without leading zeros, as every integer of the configuration; 0: any port.
  const auto port = parse_port(*split->port, /*allow_zero=*/true);
  if (!port) return fail(port.error().message);
  return ListenAddress{host.empty() ? std::string("0.0.0.0") : std::string(host), *port};
}

Config parse_config(std::string_view yaml, std::string_view source) {
  return parse_with(Reader(std::string(source)), yaml);
}

Config load_config(const std::string& path) {
  return parse_with(Reader(path), read_file(path));
}

}  // namespace ratekeeper::server
