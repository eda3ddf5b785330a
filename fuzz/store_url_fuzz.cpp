// Fuzz target: the parsers of store URLs (redis/url.hpp) and the store options derived from
// a parsed URL, as open_store does before it connects (nothing here connects). Checks what a
// parsed URL promises: one endpoint for redis:// and unix://, ports and db in range, and
// endpoints that print back to themselves, TLS options only on the rediss* schemes.

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "ratekeeper/redis/url.hpp"
#include "ratekeeper/store/open_store.hpp"
#include "store/redis/redis_store.hpp"
#include "require.hpp"

namespace {

using namespace ratekeeper;
using fuzz::require;

void check_endpoint(const redis::Endpoint& ep) {
  if (ep.is_unix()) {
    require(ep.path.starts_with('/') && ep.host.empty());
    return;
  }
  require(!ep.host.empty() && ep.port >= 1 && ep.port <= 65535);
  auto again = redis::parse_host_port(ep.to_string());
  require(again.has_value() && *again == ep);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);

  if (auto decoded = redis::percent_decode(text)) require(decoded->size() <= text.size());
  if (auto ep = redis::parse_host_port(text)) check_endpoint(*ep);
  require(redis::redact_url(text).size() <= text.size() + 3);

  auto url = redis::parse_url(text);
  if (!url) return 0;
  require(!url->endpoints.empty());
  for (const auto& ep : url->endpoints) check_endpoint(ep);
  require(url->db >= 0 && url->db <= 1'000'000);
  // TLS: only the rediss* schemes, never on a unix socket; its options only with TLS.
  require(url->tls.enabled == text.starts_with("rediss"));
  if (!url->tls.enabled) {
    redis::TlsOptions none;
    none.enabled = false;
    require(url->tls == none);
  }
  store::StoreOptions options;
  options.url = std::string(text);
  switch (url->scheme) {
    case redis::UrlScheme::redis:
    case redis::UrlScheme::unix_socket: {
      require(url->endpoints.size() == 1);
      require(url->endpoints[0].is_unix() == (url->scheme == redis::UrlScheme::unix_socket));
      const auto o = store::redis_store_options(options, *url);
      const auto& c = std::get<redis::ConnectionOptions>(o.topology);
      require(c.endpoint == url->endpoints[0] && c.db == url->db);
      break;
    }
    case redis::UrlScheme::cluster: {
      require(url->db == 0);
      const auto o = store::redis_store_options(options, *url);
      require(std::get<redis::ClusterOptions>(o.topology).seeds == url->endpoints);
      break;
    }
    case redis::UrlScheme::sentinel: {
      require(!url->master.empty());
      const auto o = store::redis_store_options(options, *url);
      const auto& s = std::get<redis::SentinelOptions>(o.topology);
      require(s.sentinels == url->endpoints && s.master_name == url->master);
      break;
    }
  }
  return 0;
}
