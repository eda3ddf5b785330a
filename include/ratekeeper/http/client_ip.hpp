#pragma once
// The client's IP: IP parsing and normalisation (IPv6 canonical form, IPv4-mapped → IPv4),
// trusted-proxy CIDRs, the client IP behind proxies (X-Forwarded-For walked from the right
// past trusted hops only, so a client cannot pick its IP).
// All types are immutable after construction and safe to share between threads.

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ratekeeper/core/error.hpp"

namespace ratekeeper::http {

struct IpAddress {
  bool v6 = false;
  std::array<std::uint8_t, 16> bytes{};  // IPv4: the first 4 bytes

  // Canonical text: dotted quad, or RFC 5952 IPv6 (lower case, longest zero run compressed).
  std::string to_string() const;
  friend bool operator==(const IpAddress&, const IpAddress&) = default;
};

// Parses exactly one address, as configuration writes it: "192.0.2.7", "2001:DB8::1",
// "::ffff:192.0.2.7" (IPv4-mapped IPv6 becomes IPv4). No brackets, port, zone or spaces;
// IPv4 is a strict dotted quad (no leading zeros). nullopt when invalid.
std::optional<IpAddress> parse_address(std::string_view text);

// Whether `text` is an IPv4 address exactly as IpAddress::to_string writes it: four decimal
// numbers 0-255 without leading zeros, separated by dots, nothing else. Such a text is its
// own canonical form (parse_address(text)->to_string() == text) and needs no parsing.
bool is_canonical_ipv4(std::string_view text) noexcept;

// Parses an address as found in a socket peer or a forwarding header: parse_address, and
// also "[2001:db8::1]", "[2001:db8::1]:443", "192.0.2.7:8080" (port 0-65535, dropped),
// "fe80::1%eth0" (IPv6 zone, dropped), surrounding spaces and tabs. Brackets and zones are
// IPv6 only. nullopt when invalid.
std::optional<IpAddress> parse_ip(std::string_view text);

// parse_ip + to_string; invalid_argument when not an address.
Result<std::string> normalize_ip(std::string_view text);

// The network of `ip` at `prefix_len` bits (0 to the address's length): the bits past them
// cleared.
IpAddress network_of(const IpAddress& ip, int prefix_len) noexcept;

// An address block, "10.0.0.0/8", "2001:db8::/32", or a single address (full length). The
// address is bare (parse_address); the prefix length is decimal digits without sign or
// leading zeros, at most the address's length ("::ffff:10.0.0.0/104", an IPv4 block written
// as mapped IPv6, is 96-128).
struct Cidr {
  IpAddress network;
  int prefix_len = 0;

  static Result<Cidr> parse(std::string_view text);
  bool contains(const IpAddress& ip) const noexcept;
};

class TrustedProxies {
 public:
  // The entry that trusts a peer without an address: a Unix socket's (an application server
  // behind a proxy on the same machine).
  static constexpr std::string_view kUnixSockets = "unix";

  TrustedProxies() = default;
  explicit TrustedProxies(std::vector<Cidr> cidrs, bool unix_sockets = false)
      : cidrs_(std::move(cidrs)), unix_sockets_(unix_sockets) {}
  // Blocks (Cidr::parse) and kUnixSockets; invalid_argument naming the entry that does not
  // parse.
  static Result<TrustedProxies> parse(const std::vector<std::string>& entries);

  bool contains(const IpAddress& ip) const noexcept;
  bool unix_sockets() const noexcept { return unix_sockets_; }
  bool empty() const noexcept { return cidrs_.empty() && !unix_sockets_; }

 private:
  std::vector<Cidr> cidrs_;
  bool unix_sockets_ = false;
};

// The client's IP. The socket peer, unless the peer is a trusted proxy; then the
// X-Forwarded-For values (all header lines joined with ',', in order) are walked from the
// right: trusted hops are skipped, the first untrusted address is the client. An entry that
// does not parse stops the walk at the hop that reported it. An empty peer is a Unix
// socket's: with kUnixSockets trusted, the walk starts at the rightmost entry (the proxy's
// own report), which must be an address. invalid_argument when the peer is not an address
// (an empty one without kUnixSockets, or without a forwarded address).
Result<IpAddress> client_ip(std::string_view peer, std::string_view forwarded_for,
                            const TrustedProxies& proxies);

}  // namespace ratekeeper::http
