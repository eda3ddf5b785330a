#include "topology.hpp"

#include <fmt/format.h>

#include <charconv>
#include <string>

#include "ratekeeper/core/host_port.hpp"
#include "redis/key_slot.hpp"

namespace ratekeeper::redis::detail {
namespace {

// ["host", port, ...] → endpoint; an empty or "?" host is the replying node's.
std::optional<Endpoint> node_endpoint(const Reply& node, std::string_view from_host) {
  if (!node.is_array() || node.elements.size() < 2 || !node.elements[1].is_integer())
    return std::nullopt;
  std::string host = node.elements[0].str;
  if (host.empty() || host == "?") host = from_host;
  return Endpoint{std::move(host), static_cast<int>(node.elements[1].integer), ""};
}

}  // namespace

Result<std::vector<SlotRange>> parse_cluster_slots(const Reply& reply, std::string_view from_host) {
  if (!reply.is_array()) return make_error(ErrorCode::protocol, "CLUSTER SLOTS: not an array");
  std::vector<SlotRange> out;
  out.reserve(reply.elements.size());
  for (const auto& range : reply.elements) {
    if (!range.is_array() || range.elements.size() < 3 || !range.elements[0].is_integer() ||
        !range.elements[1].is_integer()) {
      return make_error(ErrorCode::protocol, "CLUSTER SLOTS: malformed slot range");
    }
    const auto first = range.elements[0].integer;
    const auto last = range.elements[1].integer;
    if (first < 0 || last >= kClusterSlots || first > last) {
      return make_error(ErrorCode::protocol, "CLUSTER SLOTS: slot out of range");
    }
    auto master = node_endpoint(range.elements[2], from_host);
    if (!master) return make_error(ErrorCode::protocol, "CLUSTER SLOTS: malformed node");
    SlotRange r{static_cast<std::uint16_t>(first),
                static_cast<std::uint16_t>(last),
                std::move(*master),
                {}};
    for (std::size_t i = 3; i < range.elements.size(); ++i) {
      if (auto ep = node_endpoint(range.elements[i], from_host))
        r.replicas.push_back(std::move(*ep));
    }
    out.push_back(std::move(r));
  }
  return out;
}

std::optional<Endpoint> parse_redirect(std::string_view error, std::string_view from_host) {
  const auto first = error.find(' ');
  if (first == std::string_view::npos) return std::nullopt;
  const auto second = error.find(' ', first + 1);
  if (second == std::string_view::npos) return std::nullopt;
  const std::string_view addr = error.substr(second + 1);
  const auto colon = addr.rfind(':');
  if (colon == std::string_view::npos) return std::nullopt;
  if (colon == 0) {
    const auto port = parse_port(addr.substr(1));
    if (!port) return std::nullopt;
    return Endpoint{std::string(from_host), *port, ""};
  }
  auto ep = parse_host_port(addr);
  if (!ep) return std::nullopt;
  return *ep;
}

Result<Endpoint> parse_master_addr(const Reply& reply, std::string_view master_name) {
  if (reply.is_error()) return make_error(ErrorCode::protocol, reply.str);
  if (!reply.is_array() || reply.elements.size() != 2) {
    return make_error(ErrorCode::protocol, fmt::format("no master named '{}'", master_name));
  }
  const std::string& text = reply.elements[1].str;
  const auto port = parse_port(text);
  if (!port) return make_error(ErrorCode::protocol, "malformed port " + text);
  return Endpoint{reply.elements[0].str, *port, ""};
}

SwitchMaster parse_switch_master(std::string_view message) noexcept {
  const auto space = message.find(' ');
  if (space == std::string_view::npos) return {message, {}};
  return {message.substr(0, space), message.substr(space + 1)};
}

}  // namespace ratekeeper::redis::detail
