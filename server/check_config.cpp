// `ratekeeper check-config FILE`: loads the configuration as `serve` would (the gRPC rate limit
// service's domain files too), and prints a summary of what it would run (listeners, store,
// rules and their limits, tiers, domains). Exit status 0: valid; 2: invalid (the error, with
// file, field and reason, on stderr), as `serve` exits on an invalid configuration.

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include "commands.hpp"
#include "config.hpp"
#include "ratekeeper/redis/url.hpp"
#include "rls_config.hpp"

namespace ratekeeper::server {
namespace {

// A duration as the configuration writes it: the largest unit that divides it.
std::string duration_text(Micros us) {
  struct Unit {
    Micros size;
    const char* suffix;
  };
  constexpr Unit kUnits[] = {{86'400 * kMicrosPerSecond, "d"},
                             {3'600 * kMicrosPerSecond, "h"},
                             {60 * kMicrosPerSecond, "m"},
                             {kMicrosPerSecond, "s"},
                             {kMicrosPerMilli, "ms"}};
  for (const auto& unit : kUnits) {
    if (us > 0 && us % unit.size == 0) return fmt::format("{}{}", us / unit.size, unit.suffix);
  }
  return fmt::format("{}us", us);
}

std::string limit_text(const algorithms::Limit& limit) {
  if (limit.algorithm == algorithms::Algorithm::token_bucket) {
    return fmt::format("token_bucket capacity {}, refill {:g}/s", limit.capacity,
                       limit.rate_per_second());
  }
  if (limit.algorithm == algorithms::Algorithm::concurrency) {
    return fmt::format("concurrency {} in flight, slot_ttl {}", limit.capacity, duration_text(limit.period));
  }
  return fmt::format("{} {} per {}", algorithms::to_string(limit.algorithm), limit.capacity,
                     duration_text(limit.period));
}

std::string policy_text(const limiter::Policy& policy) {
  std::string out;
  for (const auto& named : policy) {
    if (!out.empty()) out += "; ";
    if (!named.name.empty()) out += named.name + ": ";
    out += limit_text(named.limit);
  }
  return out;
}

std::string identity_text(const limiter::IdentitySpec& identity) {
  if (identity.header.empty()) return std::string(limiter::to_string(identity.kind));
  return fmt::format("{} ({})", limiter::to_string(identity.kind), identity.header);
}

void print_rule(const limiter::Rule& rule) {
  std::string flags;
  if (rule.shadow) flags += ", shadow";
  if (rule.on_limit == limiter::OnLimit::delay) {
    flags += fmt::format(", on_limit delay (max {})", duration_text(rule.max_delay));
  }
  if (rule.cost != 1) flags += fmt::format(", cost {}", rule.cost);
  if (rule.lease.enabled()) flags += ", leased";
  std::printf("  %s: identity %s%s\n", rule.name.c_str(), identity_text(rule.identity).c_str(),
              flags.c_str());
  if (rule.tiered) {
    std::printf("    limits: by tier\n");
  } else {
    std::printf("    limits: %s\n", policy_text(rule.limits).c_str());
  }
  if (!rule.ip_limits.empty()) {
    std::printf("    ip fallback: %s\n", policy_text(rule.ip_limits).c_str());
  }
  if (rule.parent) {
    std::printf("    parent: identity %s, limits: %s\n", identity_text(rule.parent->identity).c_str(),
                policy_text(rule.parent->limits).c_str());
  }
}

int check_config(const std::string& path) {
  Config config;
  std::optional<rls::RlsConfig> rls_config;
  try {
    config = load_config(path);
    if (config.grpc) rls_config = load_rls_config(config.grpc->config_dir);
  } catch (const ConfigError& e) {
    std::fprintf(stderr, "ratekeeper check-config: invalid configuration: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ratekeeper check-config: cannot load configuration %s: %s\n",
                 path.c_str(), e.what());
    return 2;
  }
  std::printf("%s: configuration is valid\n", config.source.c_str());
  const char* tls = config.tls ? " (TLS)" : "";
  if (config.upstream) {
    std::printf("listen: %s:%u%s, proxying to %s://%s:%u\n", config.http.host.c_str(), config.http.port, tls,
                config.upstream->tls.enabled ? "https" : "http", config.upstream->host.c_str(), config.upstream->port);
    std::printf("admin: %s:%u%s\n", config.admin.host.c_str(), config.admin.port, config.admin.tls ? " (TLS)" : "");
  } else {
    std::printf("listen: %s:%u%s\n", config.http.host.c_str(), config.http.port, tls);
  }
  std::printf("threads: %d\n", config.http.threads);
  std::printf("store: %s%s\n", redis::redact_url(config.store.url).c_str(),
              config.store_configured ? "" : " (no store configured)");
  std::printf("rules: %zu\n", config.limiter.rules.size());
  bool tiered = false;
  for (const auto& rule : config.limiter.rules) {
    print_rule(rule);
    tiered = tiered || rule.tiered;
  }
  if (tiered) {
    std::printf("tiers: default %s\n", config.limiter.tiers.default_tier.c_str());
    for (const auto& [name, policy] : config.limiter.tiers.levels) {
      std::printf("  %s: %s\n", name.c_str(), policy_text(policy).c_str());
    }
  }
  if (rls_config) {
    std::printf("grpc: %s:%u, %zu domain(s) from %s\n", config.grpc->host.c_str(),
                config.grpc->port, rls_config->domains.size(), config.grpc->config_dir.c_str());
    for (const auto& domain : rls_config->domains) {
      std::printf("  %s (%s)\n", domain.name.c_str(), domain.source.c_str());
    }
  }
  return 0;
}

}  // namespace

void register_check_config_command(CLI::App& app) {
  auto file = std::make_shared<std::string>();
  auto* cmd = app.add_subcommand(
      "check-config",
      "Validate a configuration file (and the gRPC service's domain files) and print a summary; "
      "exit status 0 when valid, 2 when not");
  cmd->add_option("file", *file, "YAML configuration file")->required();
  cmd->callback([file] { set_exit_code(check_config(*file)); });
}

}  // namespace ratekeeper::server
