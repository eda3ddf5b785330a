// Fuzz target: the parsers of what Redis says about where commands go (src/redis/topology.hpp),
// as redis::Cluster and redis::Sentinel use them. The first line of the input is a
// redirection error text ("MOVED 3999 127.0.0.1:6381") and a +switch-master message; the rest
// is bytes from a server, read by the RESP reader, each reply then parsed as a CLUSTER SLOTS
// reply and as a SENTINEL get-master-addr-by-name reply (error replies also as redirections).
// Checks what the parsers promise: slot ranges within 0..16383 and ordered, masters with a
// host, ports of redirections and master addresses in 1..65535, and a +switch-master message
// that splits into name and change and back.

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "redis/resp.hpp"
#include "redis/topology.hpp"
#include "require.hpp"

namespace {

using namespace ratekeeper;
using fuzz::require;

constexpr std::size_t kMaxReplies = 16;
constexpr std::string_view kFromHost = "10.0.0.9";

void check_redirect(std::string_view text) {
  if (auto ep = redis::detail::parse_redirect(text, kFromHost)) {
    require(!ep->host.empty() && ep->port >= 1 && ep->port <= 65535);
  }
}

void check_switch_master(std::string_view message) {
  const auto [name, change] = redis::detail::parse_switch_master(message);
  require(name.find(' ') == std::string_view::npos);
  require(message.substr(0, name.size()) == name);
  if (name.size() == message.size()) {
    require(change.empty());
  } else {
    require(message[name.size()] == ' ' && change == message.substr(name.size() + 1));
  }
}

void check_reply(const redis::Reply& reply) {
  if (auto ranges = redis::detail::parse_cluster_slots(reply, kFromHost)) {
    for (const auto& r : *ranges) {
      require(r.first <= r.last && r.last < 16384);
      require(!r.master.host.empty());
      for (const auto& replica : r.replicas) require(!replica.host.empty());
    }
  } else {
    require(ranges.error().code == ErrorCode::protocol);
  }
  if (auto master = redis::detail::parse_master_addr(reply, "mymaster")) {
    require(master->port >= 1 && master->port <= 65535);
  } else {
    require(master.error().code == ErrorCode::protocol);
  }
  if (reply.is_error()) check_redirect(reply.str);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view input(reinterpret_cast<const char*>(data), size);
  const auto newline = input.find('\n');
  const std::string_view line = input.substr(0, newline);
  check_redirect(line);
  check_switch_master(line);
  if (newline == std::string_view::npos) return 0;
  input.remove_prefix(newline + 1);

  redis::detail::RespReader reader;
  if (!reader.feed(input.data(), input.size())) return 0;
  for (std::size_t i = 0; i < kMaxReplies; ++i) {
    auto r = reader.next();
    if (!r || !*r) break;
    check_reply(**r);
  }
  return 0;
}
