// Fuzz target: client addresses behind proxies (http/client_ip.hpp): parse_ip, Cidr::parse,
// TrustedProxies and client_ip. Input lines: the socket peer, the X-Forwarded-For value, then
// one trusted-proxy entry per line. Checks: canonical text parses back to the same address
// (and is_canonical_ipv4 recognises exactly the dotted quads printed as themselves),
// a block contains its own network, and the client is the peer or one of the forwarded hops,
// the peer itself whenever the peer is not trusted; an empty peer (a Unix socket's) has a
// client only when `unix` is trusted, and then one of the hops.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ratekeeper/http/client_ip.hpp"
#include "ratekeeper/limiter/identity.hpp"
#include "require.hpp"

namespace {

using namespace ratekeeper;
using fuzz::require;
using http::IpAddress;

constexpr std::size_t kMaxProxies = 32;

std::optional<IpAddress> check_ip(std::string_view text) {
  // A text is a canonical dotted quad exactly when it parses to IPv4 and prints as itself.
  const auto bare = http::parse_address(text);
  require(http::is_canonical_ipv4(text) == (bare && !bare->v6 && bare->to_string() == text));
  auto ip = http::parse_ip(text);
  auto normal = http::normalize_ip(text);
  require(ip.has_value() == normal.has_value());
  if (!ip) return ip;
  const std::string canonical = ip->to_string();
  require(*normal == canonical);
  auto again = http::parse_ip(canonical);
  require(again && *again == *ip && again->to_string() == canonical);
  return ip;
}

void check_cidr(std::string_view text) {
  auto c = http::Cidr::parse(text);
  if (!c) return;
  require(c->prefix_len >= 0 && c->prefix_len <= (c->network.v6 ? 128 : 32));
  require(c->contains(c->network));
  auto again = http::Cidr::parse(c->network.to_string() + "/" + std::to_string(c->prefix_len));
  require(again && again->network == c->network && again->prefix_len == c->prefix_len);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  std::vector<std::string_view> lines;
  while (lines.size() < 2 + kMaxProxies) {
    const auto nl = text.find('\n');
    lines.push_back(text.substr(0, nl));
    if (nl == std::string_view::npos) break;
    text.remove_prefix(nl + 1);
  }
  const std::string_view peer = lines[0];
  const std::string_view forwarded_for = lines.size() > 1 ? lines[1] : std::string_view{};
  std::vector<std::string> cidrs;
  for (std::size_t i = 2; i < lines.size(); ++i) cidrs.emplace_back(lines[i]);

  for (auto line : lines) {
    check_ip(line);
    check_cidr(line);
  }
  std::string_view hops = forwarded_for;
  std::vector<IpAddress> forwarded;
  while (!hops.empty()) {
    const auto comma = hops.find(',');
    if (auto ip = check_ip(hops.substr(0, comma))) forwarded.push_back(*ip);
    if (comma == std::string_view::npos) break;
    hops.remove_prefix(comma + 1);
  }

  auto proxies = http::TrustedProxies::parse(cidrs);
  bool all_parse = true;
  bool unix_sockets = false;
  for (const auto& c : cidrs) {
    unix_sockets = unix_sockets || c == http::TrustedProxies::kUnixSockets;
    all_parse = all_parse && (http::Cidr::parse(c).has_value() || c == http::TrustedProxies::kUnixSockets);
  }
  require(proxies.has_value() == all_parse);
  if (!proxies) return 0;
  require(proxies->unix_sockets() == unix_sockets);

  const auto peer_ip = http::parse_ip(peer);
  auto client = http::client_ip(peer, forwarded_for, *proxies);
  if (peer.empty()) {
    // A Unix socket's peer: a client only through a trusted proxy's report, one of the hops.
    if (!unix_sockets) require(!client);
    if (!client) return 0;
    bool found = false;
    for (const auto& hop : forwarded) found = found || hop == *client;
    require(found);
    return 0;
  }
  require(client.has_value() == peer_ip.has_value());
  if (!client) return 0;
  if (!proxies->contains(*peer_ip)) {
    require(*client == *peer_ip);
  } else if (*client != *peer_ip) {
    bool found = false;
    for (const auto& hop : forwarded) found = found || hop == *client;
    require(found);
  }
  (void)limiter::api_key_identity(forwarded_for);
  return 0;
}
