// Fuzz target: the domain file loader of the gRPC rate limit service (envoyproxy/ratelimit's
// format). Any text either loads into a Domain or throws server::ConfigError; any other
// exception, a crash, a hang or a huge allocation is a finding. A domain that loads must be
// well formed (keys, wildcards, limits), find each of its exact descriptors, and become
// limiter rules with valid unique names that the limiter accepts.

#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "ratekeeper/limiter/limiter.hpp"
#include "ratekeeper/rls/descriptors.hpp"
#include "require.hpp"
#include "rls_config.hpp"

namespace {

using namespace ratekeeper;
using fuzz::require;

// Checks `node` (reached by `path`, exact values only while `exact`) and its descendants,
// and their rules.
void check_node(const rls::Domain& domain, const std::vector<limiter::Rule>& rules,
                const rls::DescriptorNode& node, std::vector<rls::Entry>& path, bool exact) {
  require(!node.key.empty());
  require(node.wildcard == (node.value.find('*') != std::string::npos));
  require(!node.share_threshold || node.wildcard);
  std::set<std::string> names;
  std::size_t counted = 0;
  for (const auto& limit : node.limits) {
    require(limit.unit != rls::Unit::unknown);
    if (limit.requests_per_unit > 0) {
      ++counted;
      require(limit.limit.capacity == limit.requests_per_unit);
      require(limit.limit.period >= 1);
    }
    if (node.limits.size() > 1) require(names.insert(rls::policy_limit_name(limit)).second);
  }
  require(!(node.unlimited && !node.limits.empty()));
  if (counted == 0) {
    require(node.rule == rls::kNoRule);
  } else {
    require(node.rule < rules.size() && rules[node.rule].limits.size() == counted);
  }
  path.push_back({node.key, node.value});
  exact = exact && !node.value.empty() && !node.wildcard;
  if (exact) {
    // The exact values of a path lead to its node, whatever else the levels hold.
    const rls::DescriptorNode* found = rls::match(domain, path);
    const bool limited = !node.limits.empty() || node.unlimited;
    require(found == (limited ? &node : nullptr));
  }
  for (const auto& child : node.descriptors) check_node(domain, rules, child, path, exact);
  path.pop_back();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  rls::RlsConfig config;
  try {
    config.domains.push_back(server::parse_rls_domain(text, "fuzz.yaml"));
  } catch (const server::ConfigError&) {
    return 0;
  }
  rls::index_config(config);
  const auto& domain = config.domains[0];
  require(!domain.name.empty());
  require(config.find(domain.name) == &domain);
  std::vector<limiter::Rule> rules;
  rls::append_limiter_rules(config, rules);
  std::set<std::string_view> names;
  limiter::LimiterConfig limiter_config;  // every rule, the override rule's placeholder too
  for (std::size_t i = 0; i < rules.size(); ++i) {
    require(limiter::valid_name(rules[i].name));
    require(names.insert(rules[i].name).second);
    limiter_config.rules.push_back(rules[i]);
  }
  require(rules[domain.override_rule].limits.size() == 1);
  require(limiter::validate(limiter_config).empty());
  std::vector<rls::Entry> path;
  for (const auto& node : domain.root.descriptors) check_node(domain, rules, node, path, true);
  return 0;
}
