#include "lease_script.hpp"

#include <fmt/format.h>

#include <array>
#include <memory>
#include <string>

namespace ratekeeper::store::detail {

namespace {

constexpr std::size_t kLeaseReplyFields = 7;

// A grant call with the strings its argument vector points into, alive until answered.
struct LeaseCall {
  std::array<std::string, 1> keys;
  std::array<std::string, 6> args;
  std::int64_t want = 0;
  ScriptCall call;
  LeaseCallback done;
};

}  // namespace

Result<LeaseGrant> parse_lease_grant(const redis::Reply& reply, std::int64_t want) {
  if (reply.is_error()) return std::unexpected(redis::reply_error(reply));
  bool ok = reply.is_array() && reply.elements.size() == kLeaseReplyFields;
  for (std::size_t i = 0; ok && i < kLeaseReplyFields; ++i) ok = reply.elements[i].is_integer();
  if (!ok) {
    return make_error(ErrorCode::protocol, fmt::format("lease reply: expected {} integers, got {}",
                                                       kLeaseReplyFields, reply.to_string()));
  }
  auto decision = to_decision(reply.elements.data() + 1);
  if (!decision) return std::unexpected(decision.error());
  LeaseGrant grant{reply.elements[0].integer, *decision, reply.elements[6].integer};
  if (grant.granted < 0 || grant.granted > want || (grant.granted > 0) != grant.decision.allowed) {
    return make_error(ErrorCode::protocol, fmt::format("lease reply: a grant of {} units does not fit its "
                                                       "request of {} and its decision",
                                                       grant.granted, want));
  }
  return grant;
}

void run_lease_grant(const ScriptClient& client, std::uint16_t slot, const CheckItem& item, std::int64_t want,
                     std::optional<Micros> now, Micros deadline, LeaseCallback done) {
  auto owned = std::make_shared<LeaseCall>();
  owned->keys[0] = item.key;
  owned->args = {std::to_string(static_cast<int>(item.limit.algorithm)), std::to_string(item.limit.capacity),
                 std::to_string(item.limit.period),
                 std::to_string(item.cost),
                 std::to_string(want),
                 std::to_string(now ? *now : -1)};
  owned->want = want;
  owned->done = std::move(done);
  owned->call.argv.call("lease", owned->keys, owned->args, /*now_arg=*/5);
  owned->call.deadline = deadline;
  owned->call.slot = slot;
  // The call keeps itself alive until its final reply.
  owned->call.done = [owned](Result<redis::Reply> reply) mutable {
    auto done = std::move(owned->done);
    const std::int64_t want = owned->want;
    owned.reset();
    if (!reply) return done(std::unexpected(std::move(reply.error())));
    done(parse_lease_grant(*reply, want));
  };
  client.send(owned->call);
}

void run_lease_return(const ScriptClient& client, std::uint16_t slot, const CheckItem& item, std::int64_t units,
                      Micros at, Micros reset_after, Micros deadline, LeaseReturnCallback done) {
  CheckItem returned{item.key, item.limit, units};
  std::vector<CheckItem> items;
  items.push_back(std::move(returned));
  run_refund(client, slot, std::move(items), {reset_after}, at, std::nullopt, deadline,
             [done = std::move(done)](Result<RefundOutcome> outcome) {
               if (!outcome) return done(std::unexpected(std::move(outcome.error())));
               done({});
             });
}

}  // namespace ratekeeper::store::detail
