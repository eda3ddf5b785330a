#include "rls_config.hpp"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <system_error>
#include <utility>
#include <vector>

#include "ratekeeper/algorithms/lease.hpp"
#include "yaml_reader.hpp"

namespace ratekeeper::server {

namespace {

using limiter::FailureMode;
using rls::DescriptorLimit;
using rls::DescriptorNode;

// Two levels of the document per level of descriptors (the list, then its mapping): 64 lets
// descriptors nest 30 deep, far beyond what an Envoy route's actions build.
constexpr std::size_t kMaxDomainDepth = 64;

constexpr std::string_view kUnits = "second, minute, hour, day, week, month or year";

// A string that may be written as null (envoyproxy/ratelimit reads null as empty).
std::string optional_string(const Reader& r, const YAML::Node& node, const std::string& path) {
  if (node.IsNull()) return {};
  return r.string(node, path);
}

// on_store_error: allow, deny or local, or error (nullopt: the gRPC call fails).
std::optional<FailureMode> store_error_mode(const Reader& r, const YAML::Node& node,
                                            const std::string& path) {
  const auto text = r.string(node, path);
  if (text == "error") return std::nullopt;
  auto mode = limiter::parse_failure_mode(text);
  if (!mode) r.fail(path, fmt::format("must be allow, deny, local or error, got '{}'", text));
  return mode;
}

// What one rate_limit mapping says.
struct RateLimit {
  std::optional<DescriptorLimit> limit;  // nullopt: unlimited
  std::vector<std::string> replaces;
  std::string replaces_path;  // the field of `replaces`, for errors found later
};

algorithms::Limit counting_limit(const Reader& r, algorithms::Algorithm algorithm,
                                 std::uint32_t requests, rls::Unit unit, const std::string& blame) {
  const Micros length = rls::unit_length(unit);
  Result<algorithms::Limit> limit = make_error(ErrorCode::invalid_argument, "");
  if (algorithm == algorithms::Algorithm::token_bucket) {
    // Capacity `requests`, refilled over one unit: one request every unit / requests,
    // rounded to the microsecond.
    if (requests > length) {
      r.fail(blame, fmt::format("a token_bucket refills at most one request per microsecond: at "
                                "most {} per {}, got {}",
                                length, rls::to_string(unit), requests));
    }
    limit = algorithms::Limit::make(algorithm, requests, (length + requests / 2) / requests);
  } else {
    limit = algorithms::Limit::make(algorithm, requests, length);
  }
  if (!limit) r.fail(blame, limit.error().message);
  if (auto why = refused_limit_reason(*limit)) r.fail(blame, std::move(*why));
  return *limit;
}

// One rate_limit mapping; `in_list`: an item of rate_limits.
RateLimit read_rate_limit(const Reader& r, const YAML::Node& node, const std::string& path,
                          bool in_list) {
  r.expect_map(node, path,
               {"unit", "requests_per_unit", "unlimited", "name", "replaces", "algorithm"});
  RateLimit out;
  std::string name;
  if (node["name"]) name = optional_string(r, node["name"], Reader::field(path, "name"));
  const bool unlimited =
      node["unlimited"] && r.boolean(node["unlimited"], Reader::field(path, "unlimited"));
  if (unlimited) {
    if (in_list) {
      r.fail(Reader::field(path, "unlimited"),
             "not in rate_limits: an unlimited descriptor has rate_limit: {unlimited: true}");
    }
    for (const auto* f : {"unit", "requests_per_unit", "algorithm"}) {
      if (node[f]) r.fail(Reader::field(path, f), "not with unlimited: true");
    }
  } else {
    DescriptorLimit limit;
    limit.name = std::move(name);
    const auto unit_path = Reader::field(path, "unit");
    if (!node["unit"]) r.fail(unit_path, fmt::format("required field missing ({})", kUnits));
    const auto unit_text = optional_string(r, node["unit"], unit_path);
    const auto unit = rls::parse_unit(unit_text);
    if (!unit) r.fail(unit_path, fmt::format("invalid rate limit unit '{}' ({})", unit_text, kUnits));
    limit.unit = *unit;
    const auto requests_path = Reader::field(path, "requests_per_unit");
    if (!node["requests_per_unit"]) {
      r.fail(requests_path, "required field missing (0 answers every request OVER_LIMIT)");
    }
    limit.requests_per_unit = static_cast<std::uint32_t>(
        r.integer(node["requests_per_unit"], requests_path, 0, 4'294'967'295));
    auto algorithm = algorithms::Algorithm::fixed_window;
    if (node["algorithm"]) {
      const auto algorithm_path = Reader::field(path, "algorithm");
      const auto text = r.string(node["algorithm"], algorithm_path);
      auto a = algorithms::parse_algorithm(text);
      if (!a) {
        r.fail(algorithm_path,
               fmt::format("unknown algorithm '{}' (token_bucket, sliding_window_log, "
                           "sliding_window_counter, fixed_window)",
                           text));
      }
      if (*a == algorithms::Algorithm::concurrency) {
        r.fail(algorithm_path, "concurrency is not a rate per unit: Envoy's rate limit service counts hits, it "
                               "holds no request in flight");
      }
      algorithm = *a;
    }
    if (limit.requests_per_unit > 0) {
      limit.limit = counting_limit(r, algorithm, limit.requests_per_unit, limit.unit, requests_path);
    } else {
      limit.limit.algorithm = algorithm;
    }
    out.limit = std::move(limit);
  }
  out.replaces_path = Reader::field(path, "replaces");
  if (const auto replaces = node["replaces"]; replaces && !replaces.IsNull()) {
    if (!replaces.IsSequence()) r.fail(out.replaces_path, "must be a list of {name: ...}");
    for (std::size_t i = 0; i < replaces.size(); ++i) {
      const auto item_path = Reader::index(out.replaces_path, i);
      r.expect_map(replaces[i], item_path, {"name"});
      const auto name_path = Reader::field(item_path, "name");
      if (!replaces[i]["name"]) r.fail(name_path, "required field missing");
      auto replaced = optional_string(r, replaces[i]["name"], name_path);
      if (replaced.empty()) r.fail(name_path, "must not be empty");
      out.replaces.push_back(std::move(replaced));
    }
  }
  return out;
}

// rate_limit or rate_limits of `node`: its limits, unlimited and replaces.
void read_limits(const Reader& r, const YAML::Node& node, const std::string& path,
                 DescriptorNode& out) {
  const auto one = node["rate_limit"];
  const auto many = node["rate_limits"];
  const auto many_path = Reader::field(path, "rate_limits");
  if (one && many) r.fail(many_path, "give either rate_limit or rate_limits, not both");
  std::vector<std::pair<RateLimit, std::string>> read;  // with the path of each
  if (one && !one.IsNull()) {
    const auto one_path = Reader::field(path, "rate_limit");
    read.emplace_back(read_rate_limit(r, one, one_path, false), one_path);
  } else if (many && !many.IsNull()) {
    if (!many.IsSequence() || many.size() == 0) {
      r.fail(many_path, "must be a non-empty list of rate_limit mappings");
    }
    for (std::size_t i = 0; i < many.size(); ++i) {
      const auto item_path = Reader::index(many_path, i);
      read.emplace_back(read_rate_limit(r, many[i], item_path, true), item_path);
    }
  }
  // Names in the rule's policy, unique within the node.
  std::map<std::string, std::string> policy_names;  // name → path of its limit
  for (auto& [rate_limit, limit_path] : read) {
    if (!rate_limit.limit) {
      out.unlimited = true;
      continue;
    }
    const auto name = rls::policy_limit_name(*rate_limit.limit);
    if (read.size() > 1) {
      const auto [it, fresh] = policy_names.emplace(name, limit_path);
      if (!fresh) {
        r.fail(Reader::field(limit_path, "name"),
               fmt::format("the limits of a descriptor need distinct names: {} is named '{}' "
                           "too{}",
                           it->second, name,
                           rate_limit.limit->name == name
                               ? ""
                               : " (a limit without a valid name is named "
                                 "<requests_per_unit>_per_<unit>: give each a name)"));
      }
    }
    out.limits.push_back(std::move(*rate_limit.limit));
  }
  for (auto& [rate_limit, limit_path] : read) {
    for (std::size_t i = 0; i < rate_limit.replaces.size(); ++i) {
      auto& replaced = rate_limit.replaces[i];
      const bool own = std::any_of(out.limits.begin(), out.limits.end(),
                                   [&](const DescriptorLimit& l) { return l.name == replaced; });
      if (own) {
        r.fail(Reader::field(Reader::index(rate_limit.replaces_path, i), "name"),
               fmt::format("'{}' names a limit of this descriptor: a limit cannot replace its own",
                           replaced));
      }
      if (std::find(out.replaces.begin(), out.replaces.end(), replaced) == out.replaces.end()) {
        out.replaces.push_back(std::move(replaced));
      }
    }
  }
}

void read_descriptors(const Reader& r, const YAML::Node& node, const std::string& path,
                      DescriptorNode& parent, std::optional<FailureMode> inherited);

DescriptorNode read_descriptor(const Reader& r, const YAML::Node& node, const std::string& path,
                               std::optional<FailureMode> inherited) {
  r.expect_map(
      node, path,
      {"key", "value", "rate_limit", "rate_limits", "descriptors", "shadow_mode", "quota_mode",
       "detailed_metric", "value_to_metric", "share_threshold", "metadata", "on_store_error", "reserve"});
  DescriptorNode out;
  const auto key_path = Reader::field(path, "key");
  if (!node["key"]) r.fail(key_path, "required field missing");
  out.key = optional_string(r, node["key"], key_path);
  if (out.key.empty()) r.fail(key_path, "must not be empty");
  if (node["value"]) out.value = optional_string(r, node["value"], Reader::field(path, "value"));
  out.wildcard = out.value.find('*') != std::string::npos;
  out.on_store_error = node["on_store_error"]
                           ? store_error_mode(r, node["on_store_error"],
                                              Reader::field(path, "on_store_error"))
                           : inherited;
  read_limits(r, node, path, out);
  auto flag = [&](std::string_view name) {
    const auto f = node[std::string(name)];
    return f && r.boolean(f, Reader::field(path, name));
  };
  out.shadow_mode = flag("shadow_mode");
  out.quota_mode = flag("quota_mode");
  out.detailed_metric = flag("detailed_metric");
  out.value_to_metric = flag("value_to_metric");
  out.share_threshold = flag("share_threshold");
  out.reserve = flag("reserve");
  if (out.reserve) {
    const auto field = Reader::field(path, "reserve");
    if (out.limits.empty() || out.unlimited) r.fail(field, "only for a descriptor with a rate_limit");
    if (out.shadow_mode || out.quota_mode) r.fail(field, "not with shadow_mode or quota_mode");
    for (const auto& l : out.limits) {
      if (l.requests_per_unit > 0 && !algorithms::reservable(l.limit.algorithm)) {
        r.fail(field, fmt::format("needs fixed_window or token_bucket limits; '{}' is {}", l.name,
                                  algorithms::to_string(l.limit.algorithm)));
      }
    }
  }
  if (out.share_threshold && !out.wildcard) {
    r.fail(Reader::field(path, "share_threshold"),
           fmt::format("only with a wildcard value (holding a '*'): {}",
                       out.value.empty() ? std::string("the descriptor has no value")
                                         : fmt::format("'{}' is an exact value", out.value)));
  }
  // Metadata for Envoy (envoyproxy/ratelimit returns it only with RESPONSE_DYNAMIC_METADATA):
  // any mapping, not used here.
  if (const auto metadata = node["metadata"]; metadata && !metadata.IsNull() && !metadata.IsMap()) {
    r.fail(Reader::field(path, "metadata"), "must be a mapping");
  }
  read_descriptors(r, node["descriptors"], Reader::field(path, "descriptors"), out,
                   out.on_store_error);
  return out;
}

void read_descriptors(const Reader& r, const YAML::Node& node, const std::string& path,
                      DescriptorNode& parent, std::optional<FailureMode> inherited) {
  if (!node || node.IsNull()) return;
  if (!node.IsSequence()) r.fail(path, "must be a list of descriptors");
  std::map<std::pair<std::string, std::string>, std::size_t> seen;  // (key, value) → index
  for (std::size_t i = 0; i < node.size(); ++i) {
    const auto item_path = Reader::index(path, i);
    auto descriptor = read_descriptor(r, node[i], item_path, inherited);
    const auto [it, fresh] = seen.emplace(std::pair{descriptor.key, descriptor.value}, i);
    if (!fresh) {
      r.fail(item_path,
             fmt::format("duplicate descriptor: key '{}' {} is also {}", descriptor.key,
                         descriptor.value.empty() ? std::string("without value")
                                                  : fmt::format("value '{}'", descriptor.value),
                         Reader::index(path, it->second)));
    }
    parent.descriptors.push_back(std::move(descriptor));
  }
}

rls::Domain read_domain(const Reader& r, const YAML::Node& root) {
  if (root.IsNull()) r.fail("domain", "required field missing (the file is empty)");
  if (!root.IsMap()) r.fail("", "the document must be a mapping (domain, descriptors)");
  r.expect_map(root, "", {"domain", "descriptors", "on_store_error"});
  rls::Domain domain;
  domain.source = r.file();
  if (!root["domain"]) r.fail("domain", "required field missing");
  domain.name = optional_string(r, root["domain"], "domain");
  if (domain.name.empty()) r.fail("domain", "must not be empty");
  if (root["on_store_error"]) {
    domain.on_store_error = store_error_mode(r, root["on_store_error"], "on_store_error");
  }
  read_descriptors(r, root["descriptors"], "descriptors", domain.root, domain.on_store_error);
  return domain;
}

}  // namespace

rls::Domain parse_rls_domain(std::string_view yaml, std::string_view source) {
  const Reader r{std::string(source)};
  const auto root = load_document(r, yaml, kMaxDomainDepth);
  auto domain = read_document(r, root, [&](const YAML::Node& node) { return read_domain(r, node); });
  rls::index_domain(domain);
  return domain;
}

rls::RlsConfig load_rls_config(const std::string& directory) {
  namespace fs = std::filesystem;
  auto fail = [&](std::string reason) { throw ConfigError(directory, "", std::move(reason)); };
  std::error_code ec;
  const auto status = fs::status(directory, ec);
  if (ec || !fs::exists(status)) {
    fail(fmt::format("the directory of the domain files does not exist{}",
                     ec && ec != std::errc::no_such_file_or_directory ? ": " + ec.message() : ""));
  }
  if (!fs::is_directory(status)) fail("is not a directory (grpc.config names the directory of the domain files)");
  std::vector<fs::path> files;
  fs::directory_iterator it(directory, ec);
  for (; !ec && it != fs::directory_iterator(); it.increment(ec)) {
    const auto& path = it->path();
    const auto extension = path.extension();
    // A symbolic link counts as what it points to (a Kubernetes ConfigMap mounts links).
    if ((extension == ".yaml" || extension == ".yml") && fs::is_regular_file(path, ec)) {
      files.push_back(path);
    }
    ec.clear();
  }
  if (ec) fail(fmt::format("cannot read the directory: {}", ec.message()));
  if (files.empty()) fail("holds no domain file (*.yaml, *.yml)");
  std::sort(files.begin(), files.end());

  rls::RlsConfig config;
  config.directory = directory;
  std::map<std::string, std::string, std::less<>> sources;  // domain → file
  for (const auto& file : files) {
    const auto name = file.string();
    auto domain = parse_rls_domain(read_file(name), name);
    const auto [known, fresh] = sources.emplace(domain.name, name);
    if (!fresh) {
      throw ConfigError(name, "domain",
                        fmt::format("duplicate domain '{}': {} defines it too", domain.name,
                                    known->second));
    }
    config.domains.push_back(std::move(domain));
  }
  rls::index_config(config);
  return config;
}

}  // namespace ratekeeper::server
