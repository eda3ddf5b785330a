// The parsers of what Redis says about where commands go (src/redis/topology.hpp):
// CLUSTER SLOTS, MOVED/ASK, SENTINEL get-master-addr-by-name and +switch-master.

#include <gtest/gtest.h>

#include <initializer_list>

#include "redis/topology.hpp"

namespace ratekeeper::redis::detail {
namespace {

Reply str(std::string s) {
  Reply r;
  r.type = Reply::Type::string;
  r.str = std::move(s);
  return r;
}

Reply integer(std::int64_t i) {
  Reply r;
  r.type = Reply::Type::integer;
  r.integer = i;
  return r;
}

Reply array(std::initializer_list<Reply> elements) {
  Reply r;
  r.type = Reply::Type::array;
  r.elements = elements;
  return r;
}

Reply node(std::string host, int port) {
  return array({str(std::move(host)), integer(port), str("id")});
}

TEST(ClusterSlots, ParsesRangesMastersAndReplicasWithTheReplyingNodesHostForEmptyOnes) {
  const Reply reply = array({
      array({integer(0), integer(5460), node("10.0.0.1", 7000), node("10.0.0.2", 7003)}),
      array({integer(5461), integer(16383), node("", 7001), node("?", 7004), str("junk")}),
  });
  auto ranges = parse_cluster_slots(reply, "10.9.9.9");
  ASSERT_TRUE(ranges) << ranges.error().message;
  ASSERT_EQ(ranges->size(), 2u);
  const auto& a = (*ranges)[0];
  EXPECT_EQ(a.first, 0);
  EXPECT_EQ(a.last, 5460);
  EXPECT_EQ(a.master, (Endpoint{"10.0.0.1", 7000, ""}));
  ASSERT_EQ(a.replicas.size(), 1u);
  EXPECT_EQ(a.replicas[0], (Endpoint{"10.0.0.2", 7003, ""}));
  const auto& b = (*ranges)[1];
  EXPECT_EQ(b.first, 5461);
  EXPECT_EQ(b.last, 16383);
  EXPECT_EQ(b.master, (Endpoint{"10.9.9.9", 7001, ""}));
  ASSERT_EQ(b.replicas.size(), 1u);  // the malformed entry is skipped
  EXPECT_EQ(b.replicas[0], (Endpoint{"10.9.9.9", 7004, ""}));
}

TEST(ClusterSlots, RefusesMalformedRepliesAsProtocolErrors) {
  for (const Reply& bad : {
           str("not an array"),
           array({array({integer(0), integer(10)})}),                     // no master
           array({array({integer(0), str("10"), node("h", 1)})}),         // slot not an integer
           array({array({integer(-1), integer(10), node("h", 1)})}),      // below 0
           array({array({integer(0), integer(16384), node("h", 1)})}),    // past the last slot
           array({array({integer(10), integer(9), node("h", 1)})}),       // reversed
           array({array({integer(0), integer(10), array({str("h")})})}),  // master without port
           array({array({integer(0), integer(10), array({str("h"), str("1")})})}),
       }) {
    auto r = parse_cluster_slots(bad, "h");
    ASSERT_FALSE(r) << bad.to_string();
    EXPECT_EQ(r.error().code, ErrorCode::protocol);
    EXPECT_TRUE(r.error().message.starts_with("CLUSTER SLOTS: ")) << r.error().message;
  }
  auto empty = parse_cluster_slots(array({}), "h");
  ASSERT_TRUE(empty);
  EXPECT_TRUE(empty->empty());
}

TEST(Redirect, NamesTheTargetOrTheReplyingNodesHostWhenOnlyAPortIsGiven) {
  EXPECT_EQ(parse_redirect("MOVED 3999 127.0.0.1:6381", "h"), (Endpoint{"127.0.0.1", 6381, ""}));
  EXPECT_EQ(parse_redirect("ASK 3999 :6381", "10.0.0.7"), (Endpoint{"10.0.0.7", 6381, ""}));
  EXPECT_EQ(parse_redirect("MOVED 1 [::1]:7000", "h"), (Endpoint{"::1", 7000, ""}));
  for (std::string_view bad :
       {"MOVED", "MOVED 3999", "MOVED 3999 host", "ASK 1 :", "ASK 1 :63x", "ASK 1 :99999999999",
        "ASK 1 :0", "ASK 1 :-5", "ASK 1 :65536", "MOVED 1 host:port"}) {
    EXPECT_EQ(parse_redirect(bad, "h"), std::nullopt) << bad;
  }
}

TEST(MasterAddr, ParsesTheAddressAndSaysWhyNot) {
  auto ok = parse_master_addr(array({str("10.0.0.5"), str("6380")}), "mymaster");
  ASSERT_TRUE(ok) << ok.error().message;
  EXPECT_EQ(*ok, (Endpoint{"10.0.0.5", 6380, ""}));

  Reply nil;
  auto unknown = parse_master_addr(nil, "mymaster");
  ASSERT_FALSE(unknown);
  EXPECT_EQ(unknown.error().message, "no master named 'mymaster'");
  EXPECT_FALSE(parse_master_addr(array({str("10.0.0.5")}), "m"));

  auto port = parse_master_addr(array({str("10.0.0.5"), str("x")}), "m");
  ASSERT_FALSE(port);
  EXPECT_EQ(port.error().message, "malformed port x");
  for (const char* bad : {"", "0", "65536", "-1", "63 ", " 63", "6379x", "99999999999"}) {
    EXPECT_FALSE(parse_master_addr(array({str("10.0.0.5"), str(bad)}), "m")) << bad;
  }

  Reply err;
  err.type = Reply::Type::error;
  err.str = "ERR unknown command";
  auto refused = parse_master_addr(err, "m");
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().message, "ERR unknown command");
}

TEST(SwitchMaster, SplitsTheNameFromTheChange) {
  auto s = parse_switch_master("mymaster 127.0.0.1 1 127.0.0.1 2");
  EXPECT_EQ(s.name, "mymaster");
  EXPECT_EQ(s.change, "127.0.0.1 1 127.0.0.1 2");
  auto bare = parse_switch_master("mymaster");
  EXPECT_EQ(bare.name, "mymaster");
  EXPECT_EQ(bare.change, "");
  auto empty = parse_switch_master("");
  EXPECT_EQ(empty.name, "");
  EXPECT_EQ(empty.change, "");
}

}  // namespace
}  // namespace ratekeeper::redis::detail
