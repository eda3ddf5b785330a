#pragma once
// Loading the domain files of the gRPC rate limit service: envoyproxy/ratelimit's YAML format
// (domain, descriptors of key / value / rate_limit / descriptors, shadow_mode, detailed_metric,
// replaces, unlimited, wildcard values), with ratekeeper's additions (algorithm, rate_limits,
// on_store_error). Every error throws ConfigError naming the file, the field path (e.g.
// `descriptors[0].descriptors[1].rate_limit.unit`) and the reason. See docs/configuration.md.

#include <string>
#include <string_view>

#include "config.hpp"
#include "ratekeeper/rls/descriptors.hpp"

namespace ratekeeper::server {

// Every `*.yaml` and `*.yml` file of `directory` (sorted by name, not recursive), one domain
// each, indexed (rls::index_config). Throws ConfigError: the directory does not exist, is no
// directory, cannot be read or holds no such file; a file's error; a domain in two files.
rls::RlsConfig load_rls_config(const std::string& directory);

// One domain file's text, indexed (rls::index_domain); `source` names it in errors and becomes
// Domain::source.
rls::Domain parse_rls_domain(std::string_view yaml, std::string_view source = "<inline>");

}  // namespace ratekeeper::server
