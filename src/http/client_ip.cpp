#include "ratekeeper/http/client_ip.hpp"

#include <arpa/inet.h>
#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstring>

namespace ratekeeper::http {
namespace {

constexpr std::array<std::uint8_t, 12> kMappedPrefix = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool all_digits(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

// A decimal number in [0, max] written without sign, spaces or leading zeros.
std::optional<int> small_decimal(std::string_view s, int max) {
  if (!all_digits(s) || (s.size() > 1 && s.front() == '0')) return std::nullopt;
  int value = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec != std::errc() || end != s.data() + s.size() || value > max) return std::nullopt;
  return value;
}

// An IPv6 zone (interface name or index), as in "fe80::1%eth0".
bool valid_zone(std::string_view zone) {
  if (zone.empty() || zone.size() > 32) return false;
  for (char c : zone) {
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
          c == '-' || c == '.')) {
      return false;
    }
  }
  return true;
}

}  // namespace

std::string IpAddress::to_string() const {
  if (!v6) {
    std::string out;
    out.reserve(15);  // "255.255.255.255", within the string's own buffer
    for (std::size_t i = 0; i < 4; ++i) {
      if (i > 0) out.push_back('.');
      char digits[3];
      out.append(digits, std::to_chars(digits, digits + sizeof digits, bytes[i]).ptr);
    }
    return out;
  }
  std::array<unsigned, 8> groups{};
  for (std::size_t i = 0; i < 8; ++i) {
    groups[i] = (unsigned{bytes[2 * i]} << 8) | bytes[2 * i + 1];
  }
  // RFC 5952: compress the longest run (the first one on a tie) of two or more zero groups.
  int best = -1, best_len = 0;
  for (int i = 0; i < 8;) {
    if (groups[i] != 0) {
      ++i;
      continue;
    }
    int j = i;
    while (j < 8 && groups[j] == 0) ++j;
    if (j - i > best_len) {
      best = i;
      best_len = j - i;
    }
    i = j;
  }
  if (best_len < 2) best = -1;
  std::string out;
  out.reserve(39);  // eight groups of four hex digits and seven colons at most
  for (int i = 0; i < 8; ++i) {
    if (i == best) {
      out += "::";
      i += best_len - 1;
      continue;
    }
    if (!out.empty() && out.back() != ':') out.push_back(':');
    char hex[4];
    out.append(hex, std::to_chars(hex, hex + sizeof hex, groups[i], 16).ptr);
  }
  return out;
}

bool is_canonical_ipv4(std::string_view text) noexcept {
  if (text.size() < 7 || text.size() > 15) return false;
  int parts = 0;
  std::size_t i = 0;
  while (true) {
    // One number: 1-3 digits, no leading zero, at most 255.
    const std::size_t start = i;
    int value = 0;
    while (i < text.size() && i - start < 3 && text[i] >= '0' && text[i] <= '9') {
      value = value * 10 + (text[i] - '0');
      ++i;
    }
    const std::size_t digits = i - start;
    if (digits == 0 || value > 255 || (digits > 1 && text[start] == '0')) return false;
    if (++parts == 4) return i == text.size();
    if (i == text.size() || text[i] != '.') return false;
    ++i;
  }
}

std::optional<IpAddress> parse_address(std::string_view text) {
  // The longest IPv6 text is 45 characters ("ffff:…:255.255.255.255").
  if (text.empty() || text.size() > 45) return std::nullopt;
  for (char c : text) {
    const bool hex = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
    if (!hex && c != '.' && c != ':') return std::nullopt;
  }
  char buf[46];
  std::memcpy(buf, text.data(), text.size());
  buf[text.size()] = '\0';
  IpAddress ip;
  if (text.find(':') == std::string_view::npos) {
    if (inet_pton(AF_INET, buf, ip.bytes.data()) != 1) return std::nullopt;
    return ip;
  }
  if (inet_pton(AF_INET6, buf, ip.bytes.data()) != 1) return std::nullopt;
  if (std::memcmp(ip.bytes.data(), kMappedPrefix.data(), kMappedPrefix.size()) == 0) {
    IpAddress v4;
    std::memcpy(v4.bytes.data(), ip.bytes.data() + 12, 4);
    return v4;
  }
  ip.v6 = true;
  return ip;
}

std::optional<IpAddress> parse_ip(std::string_view text) {
  text = trim(text);
  bool v6_only = false;  // brackets and zones exist for IPv6 only
  if (!text.empty() && text.front() == '[') {
    const auto close = text.find(']');
    if (close == std::string_view::npos) return std::nullopt;
    const auto rest = text.substr(close + 1);
    if (!rest.empty() && !(rest.front() == ':' && small_decimal(rest.substr(1), 65535))) {
      return std::nullopt;
    }
    text = text.substr(1, close - 1);
    v6_only = true;
  } else if (const auto colon = text.find(':');
             colon != std::string_view::npos &&
             text.find(':', colon + 1) == std::string_view::npos) {
    // "a.b.c.d:port": exactly one colon cannot be IPv6.
    if (!small_decimal(text.substr(colon + 1), 65535)) return std::nullopt;
    text = text.substr(0, colon);
  }
  if (const auto zone = text.find('%'); zone != std::string_view::npos) {
    if (!valid_zone(text.substr(zone + 1))) return std::nullopt;
    text = text.substr(0, zone);
    v6_only = true;
  }
  // A mapped address in brackets or with a zone is still written as IPv6.
  if (v6_only && text.find(':') == std::string_view::npos) return std::nullopt;
  return parse_address(text);
}

Result<std::string> normalize_ip(std::string_view text) {
  auto ip = parse_ip(text);
  if (!ip) {
    return make_error(ErrorCode::invalid_argument,
                      fmt::format("'{}' is not an IP address", text.substr(0, 64)));
  }
  return ip->to_string();
}

Result<Cidr> Cidr::parse(std::string_view text) {
  text = trim(text);
  auto bad = [&](std::string_view why) {
    return make_error(ErrorCode::invalid_argument,
                      fmt::format("'{}': {}", text.substr(0, 64), why));
  };
  const auto slash = text.find('/');
  const auto address = text.substr(0, slash);
  auto ip = parse_address(address);
  if (!ip) return bad("not an IP address or CIDR block");
  const int max_len = ip->v6 ? 128 : 32;
  int len = max_len;
  if (slash != std::string_view::npos) {
    // "::ffff:10.0.0.0/104" is an IPv4 block written as mapped IPv6: its length counts the
    // 96 bits of the mapped prefix.
    const bool mapped = !ip->v6 && address.find(':') != std::string_view::npos;
    const int written_max = mapped ? max_len + 96 : max_len;
    const int written_min = mapped ? 96 : 0;
    const auto written = small_decimal(text.substr(slash + 1), written_max);
    if (!written || *written < written_min) {
      return bad(fmt::format("prefix length must be between {} and {}", written_min, written_max));
    }
    len = *written - written_min;
  }
  Cidr c;
  c.network = *ip;
  c.prefix_len = len;
  // Clear host bits so that contains() compares networks.
  for (int bit = len; bit < max_len; ++bit) c.network.bytes[bit / 8] &= ~(0x80 >> (bit % 8));
  return c;
}

IpAddress network_of(const IpAddress& ip, int prefix_len) noexcept {
  IpAddress out = ip;
  const int length = ip.v6 ? 128 : 32;
  for (int bit = std::max(prefix_len, 0); bit < length; ++bit) {
    out.bytes[static_cast<std::size_t>(bit / 8)] &= static_cast<std::uint8_t>(~(0x80u >> (bit % 8)));
  }
  return out;
}

bool Cidr::contains(const IpAddress& ip) const noexcept {
  if (ip.v6 != network.v6) return false;
  const int full = prefix_len / 8;
  if (std::memcmp(ip.bytes.data(), network.bytes.data(), full) != 0) return false;
  const int rest = prefix_len % 8;
  if (rest == 0) return true;
  const auto mask = static_cast<std::uint8_t>(0xff << (8 - rest));
  return (ip.bytes[full] & mask) == (network.bytes[full] & mask);
}

Result<TrustedProxies> TrustedProxies::parse(const std::vector<std::string>& entries) {
  std::vector<Cidr> out;
  bool unix_sockets = false;
  for (const auto& text : entries) {
    if (text == kUnixSockets) {
      unix_sockets = true;
      continue;
    }
    auto c = Cidr::parse(text);
    if (!c) return std::unexpected(c.error());
    out.push_back(*c);
  }
  return TrustedProxies(std::move(out), unix_sockets);
}

bool TrustedProxies::contains(const IpAddress& ip) const noexcept {
  for (const auto& c : cidrs_) {
    if (c.contains(ip)) return true;
  }
  return false;
}

namespace {

// The rightmost entry of `forwarded_for` that is not blank, taken off it; empty when none.
std::string_view take_last_hop(std::string_view& forwarded_for) {
  while (!forwarded_for.empty()) {
    const auto comma = forwarded_for.rfind(',');
    const auto entry = comma == std::string_view::npos ? forwarded_for : forwarded_for.substr(comma + 1);
    forwarded_for = comma == std::string_view::npos ? std::string_view{} : forwarded_for.substr(0, comma);
    if (!trim(entry).empty()) return entry;
  }
  return {};
}

}  // namespace

Result<IpAddress> client_ip(std::string_view peer, std::string_view forwarded_for,
                            const TrustedProxies& proxies) {
  std::optional<IpAddress> current;
  if (peer.empty()) {
    // A Unix socket's peer has no address: only a proxy trusted as such reports the client.
    if (!proxies.unix_sockets()) {
      return make_error(ErrorCode::invalid_argument,
                        "the peer has no IP address (a Unix socket): add 'unix' to trusted_proxies to take "
                        "the client's from the proxy's X-Forwarded-For");
    }
    current = parse_ip(take_last_hop(forwarded_for));
    if (!current) {
      return make_error(ErrorCode::invalid_argument,
                        "the Unix socket's peer (a trusted proxy) sent no client address in X-Forwarded-For");
    }
  } else {
    current = parse_ip(peer);
    if (!current) {
      return make_error(ErrorCode::invalid_argument,
                        fmt::format("peer '{}' is not an IP address", peer.substr(0, 64)));
    }
  }
  // Walk from the right: each hop was appended by the one after it. Stop at the first hop not
  // trusted to report truthfully who connected to it.
  while (proxies.contains(*current) && !forwarded_for.empty()) {
    const auto entry = take_last_hop(forwarded_for);
    if (entry.empty()) break;
    auto hop = parse_ip(entry);
    if (!hop) break;  // garbage: the trusted proxy that wrote it is the best we know
    current = hop;
  }
  return *current;
}

}  // namespace ratekeeper::http
