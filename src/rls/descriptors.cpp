#include "ratekeeper/rls/descriptors.hpp"

#include <fmt/format.h>

#include <array>
#include <cctype>
#include <unordered_set>
#include <utility>

#include "ratekeeper/limiter/rule.hpp"

namespace ratekeeper::rls {

namespace {

constexpr std::array kUnits = {Unit::second, Unit::minute, Unit::hour, Unit::day,
                               Unit::week,   Unit::month,  Unit::year};

constexpr Micros kDay = 86'400 * kMicrosPerSecond;

// The index key of an exact (key, value) node.
void exact_key(std::string& out, std::string_view key, std::string_view value) {
  out.assign(key);
  out.push_back('\0');
  out.append(value);
}

void index_node(DescriptorNode& node) {
  auto& index = node.index;
  index = {};
  std::string composite;
  for (std::size_t i = 0; i < node.descriptors.size(); ++i) {
    auto& child = node.descriptors[i];
    if (child.value.empty()) {
      index.any.emplace(child.key, i);
    } else if (child.wildcard) {
      index.wildcards.push_back(i);
    } else {
      exact_key(composite, child.key, child.value);
      index.exact.emplace(composite, i);
    }
    index_node(child);
  }
}

// The child of `level` an entry leads to: its exact (key, value) node, else the first wildcard
// node of its key whose prefix the value starts with, else its key's any-value node.
const DescriptorNode* child_for(const DescriptorNode& level, const Entry& entry) {
  // One buffer per thread for the composite keys: no allocation per lookup once warm.
  thread_local std::string scratch;
  const auto& index = level.index;
  if (!index.exact.empty()) {
    exact_key(scratch, entry.key, entry.value);
    if (auto it = index.exact.find(scratch); it != index.exact.end()) {
      return &level.descriptors[it->second];
    }
  }
  for (const std::size_t i : index.wildcards) {
    const auto& node = level.descriptors[i];
    if (node.key == entry.key && wildcard_match(node.value, entry.value)) return &node;
  }
  if (!index.any.empty()) {
    scratch.assign(entry.key);
    if (auto it = index.any.find(scratch); it != index.any.end()) {
      return &level.descriptors[it->second];
    }
  }
  return nullptr;
}

// Rule names: "rls.<domain>.<key>[_<value>]…", bytes outside A-Z a-z 0-9 _ - . replaced by
// '_'. A name that is too long, or taken, keeps its first characters and ends in a hash of
// what it stands for (the same name from one load to the next, so the same keys); a hash
// taken too (a collision of 48 bits) is numbered.
class RuleNames {
 public:
  explicit RuleNames(const std::vector<limiter::Rule>& existing) {
    for (const auto& rule : existing) used_.insert(rule.name);
  }

  // `parts`: the domain, then key and value of each node on the path.
  std::string take(const std::vector<std::string_view>& parts) {
    std::string name = "rls";
    for (std::size_t i = 0; i < parts.size(); ++i) {
      if (i > 0 && i % 2 == 0 && parts[i].empty()) continue;  // a node without value
      name.push_back(i == 0 || i % 2 == 1 ? '.' : '_');
      for (const char c : parts[i]) name.push_back(allowed(c) ? c : '_');
    }
    if (name.size() <= kMaxLength && used_.insert(name).second) return name;
    std::string hashed =
        fmt::format("{}-{:012x}", std::string_view(name).substr(0, kMaxLength - 13),
                    hash(parts) & 0xffff'ffff'ffffULL);
    if (used_.insert(hashed).second) return hashed;
    for (int n = 2;; ++n) {
      const auto suffix = fmt::format("-{}", n);
      auto numbered = hashed.substr(0, kMaxLength - suffix.size()) + suffix;
      if (used_.insert(numbered).second) return numbered;
    }
  }

 private:
  static constexpr std::size_t kMaxLength = 64;

  static bool allowed(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '_' || c == '-' || c == '.';
  }

  // FNV-1a (64 bits) of the parts, each followed by a NUL: stable across runs and builds.
  static std::uint64_t hash(const std::vector<std::string_view>& parts) {
    std::uint64_t h = 0xcbf29ce484222325ULL;
    auto add = [&](unsigned char c) {
      h ^= c;
      h *= 0x100000001b3ULL;
    };
    for (const auto part : parts) {
      for (const char c : part) add(static_cast<unsigned char>(c));
      add(0);
    }
    return h;
  }

  std::unordered_set<std::string> used_;
};

void append_node_rules(DescriptorNode& node, std::vector<std::string_view>& path,
                       RuleNames& names, std::vector<limiter::Rule>& rules) {
  path.push_back(node.key);
  path.push_back(node.value);
  node.rule = kNoRule;
  limiter::Policy policy;
  for (const auto& limit : node.limits) {
    if (limit.requests_per_unit > 0) policy.push_back({policy_limit_name(limit), limit.limit});
  }
  if (!policy.empty()) {
    limiter::Rule rule;
    rule.name = names.take(path);
    rule.limits = std::move(policy);
    rule.cost = 1;
    // A quota_mode descriptor is counted apart from the request's all-or-nothing group, as a
    // shadow one is: the service decides what its denial means.
    rule.shadow = node.shadow_mode || node.quota_mode;
    rule.on_store_error = node.on_store_error.value_or(limiter::FailureMode::error);
    node.rule = rules.size();
    rules.push_back(std::move(rule));
  }
  for (auto& child : node.descriptors) append_node_rules(child, path, names, rules);
  path.resize(path.size() - 2);
}

}  // namespace

std::string_view to_string(Unit unit) noexcept {
  switch (unit) {
    case Unit::unknown: return "unknown";
    case Unit::second: return "second";
    case Unit::minute: return "minute";
    case Unit::hour: return "hour";
    case Unit::day: return "day";
    case Unit::month: return "month";
    case Unit::year: return "year";
    case Unit::week: return "week";
  }
  return "unknown";
}

std::optional<Unit> parse_unit(std::string_view text) noexcept {
  for (const Unit unit : kUnits) {
    const auto name = to_string(unit);
    if (name.size() == text.size() &&
        std::equal(name.begin(), name.end(), text.begin(), [](char a, char b) {
          return a == std::tolower(static_cast<unsigned char>(b));
        })) {
      return unit;
    }
  }
  return std::nullopt;
}

Micros unit_length(Unit unit) noexcept {
  switch (unit) {
    case Unit::unknown: return 0;
    case Unit::second: return kMicrosPerSecond;
    case Unit::minute: return 60 * kMicrosPerSecond;
    case Unit::hour: return 3'600 * kMicrosPerSecond;
    case Unit::day: return kDay;
    case Unit::week: return 7 * kDay;
    case Unit::month: return 30 * kDay;
    case Unit::year: return 365 * kDay;
  }
  return 0;
}

const Domain* RlsConfig::find(std::string_view name) const {
  // by_name is keyed by std::string (no heterogeneous lookup): the domains are few, and a
  // lookup by a view copies it once.
  const auto it = by_name.find(std::string(name));
  return it == by_name.end() ? nullptr : &domains[it->second];
}

void index_config(RlsConfig& config) {
  config.by_name.clear();
  for (std::size_t i = 0; i < config.domains.size(); ++i) {
    config.by_name.emplace(config.domains[i].name, i);
    index_domain(config.domains[i]);
  }
}

void index_domain(Domain& domain) { index_node(domain.root); }

const DescriptorNode* match(const Domain& domain, std::span<const Entry> entries,
                            std::vector<const DescriptorNode*>& path) {
  path.clear();
  const DescriptorNode* level = &domain.root;
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const DescriptorNode* node = child_for(*level, entries[i]);
    if (node == nullptr) break;
    path.push_back(node);
    if (i + 1 == entries.size()) {
      if (!node->limits.empty() || node->unlimited) return node;
      break;
    }
    // More entries than the configuration has levels here: a limit at this node is for
    // shorter descriptors only.
    if (node->descriptors.empty()) break;
    level = node;
  }
  path.clear();
  return nullptr;
}

const DescriptorNode* match(const Domain& domain, std::span<const Entry> entries) {
  thread_local std::vector<const DescriptorNode*> path;
  return match(domain, entries, path);
}

bool wildcard_match(std::string_view pattern, std::string_view value) noexcept {
  const auto first_star = pattern.find('*');
  if (first_star == std::string_view::npos) return pattern == value;
  const auto last_star = pattern.rfind('*');
  const std::string_view head = pattern.substr(0, first_star);
  const std::string_view tail = pattern.substr(last_star + 1);
  if (value.size() < head.size() + tail.size()) return false;
  if (!value.starts_with(head) || !value.ends_with(tail)) return false;
  // The literal runs between the first and the last '*', in order, in what lies between.
  std::string_view rest = value.substr(head.size(), value.size() - head.size() - tail.size());
  std::string_view middle = first_star == last_star
                                ? std::string_view()
                                : pattern.substr(first_star + 1, last_star - first_star - 1);
  while (!middle.empty()) {
    const auto star = middle.find('*');
    const std::string_view part = middle.substr(0, star);
    if (!part.empty()) {
      const auto at = rest.find(part);
      if (at == std::string_view::npos) return false;
      rest.remove_prefix(at + part.size());
    }
    if (star == std::string_view::npos) break;
    middle.remove_prefix(star + 1);
  }
  return true;
}

std::string policy_limit_name(const DescriptorLimit& limit) {
  if (limiter::valid_name(limit.name)) return limit.name;
  return fmt::format("{}_per_{}", limit.requests_per_unit, to_string(limit.unit));
}

void append_limiter_rules(RlsConfig& config, std::vector<limiter::Rule>& rules) {
  RuleNames names(rules);
  std::vector<std::string_view> path;
  for (auto& domain : config.domains) {
    limiter::Rule override_rule;
    override_rule.name = names.take({domain.name});
    override_rule.cost = 1;
    // Never checked: each request carrying an override brings its limit (AppliedRule::
    // limits). A rule holds at least one limit.
    override_rule.limits = {{"", *algorithms::Limit::make(algorithms::Algorithm::fixed_window, 1,
                                                          kMicrosPerSecond)}};
    override_rule.on_store_error = domain.on_store_error.value_or(limiter::FailureMode::error);
    domain.override_rule = rules.size();
    rules.push_back(std::move(override_rule));
    path.assign({domain.name});
    for (auto& node : domain.root.descriptors) append_node_rules(node, path, names, rules);
  }
}

}  // namespace ratekeeper::rls
