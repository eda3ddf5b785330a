#pragma once
// Parsers of what Redis says about where a command should go: CLUSTER SLOTS replies,
// MOVED/ASK redirections, SENTINEL get-master-addr-by-name replies and +switch-master
// messages. Pure functions of text from outside: malformed input is an error or nullopt,
// never an exception. Thread-safe.

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "ratekeeper/core/error.hpp"
#include "redis/reply.hpp"
#include "ratekeeper/redis/url.hpp"

namespace ratekeeper::redis::detail {

// One range of slots of a CLUSTER SLOTS reply: its master and the replicas listed with it.
struct SlotRange {
  std::uint16_t first = 0;
  std::uint16_t last = 0;  // inclusive
  Endpoint master;
  std::vector<Endpoint> replicas;  // malformed replica entries are skipped
};

// A CLUSTER SLOTS reply from a node whose host is `from_host` (the host of nodes announced
// with an empty or "?" address). Errors (protocol): not an array, a malformed range or
// master, a slot out of range.
Result<std::vector<SlotRange>> parse_cluster_slots(const Reply& reply, std::string_view from_host);

// "MOVED 3999 127.0.0.1:6381" or "ASK 3999 :6381" (the replying node's host, `from_host`)
// → the endpoint named; nullopt when malformed (a port out of 1..65535 included).
std::optional<Endpoint> parse_redirect(std::string_view error, std::string_view from_host);

// The reply to SENTINEL get-master-addr-by-name <name> → the master's address. Errors
// (protocol): an error reply (its text), no master of that name (nil or not a pair), a port
// that is not a decimal number in 1..65535.
Result<Endpoint> parse_master_addr(const Reply& reply, std::string_view master_name);

// A +switch-master message, "<name> <old-ip> <old-port> <new-ip> <new-port>": the name and
// the rest (the change, compared as a whole to tell one switch from another).
struct SwitchMaster {
  std::string_view name;
  std::string_view change;  // empty when the message has nothing after the name
};
SwitchMaster parse_switch_master(std::string_view message) noexcept;

}  // namespace ratekeeper::redis::detail
