// The RESP reader (redis/resp.hpp): replies fed whole or a byte at a time, nested arrays, and
// array headers announcing more elements than ever arrive; commands encoded byte for byte as
// hiredis encodes them.

#include "redis/resp.hpp"

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <string>
#include <string_view>
#include <vector>

namespace ratekeeper::redis::detail {
namespace {

// Every complete reply in `bytes` fed `chunk` bytes at a time; fails the test on an error.
std::vector<Reply> read_all(std::string_view bytes, std::size_t chunk) {
  RespReader reader;
  std::vector<Reply> out;
  while (!bytes.empty()) {
    const std::size_t n = std::min(chunk, bytes.size());
    EXPECT_TRUE(reader.feed(bytes.data(), n));
    bytes.remove_prefix(n);
    for (;;) {
      auto r = reader.next();
      if (!r) {
        ADD_FAILURE() << r.error().message;
        return out;
      }
      if (!*r) break;
      out.push_back(std::move(**r));
    }
  }
  return out;
}

TEST(RespReader, ReadsNestedArraysWholeOrByteByByte) {
  const std::string bytes = "*3\r\n*2\r\n:1\r\n$3\r\nabc\r\n$-1\r\n*1\r\n*0\r\n+OK\r\n-ERR no\r\n";
  for (std::size_t chunk : {bytes.size(), std::size_t{1}}) {
    const auto replies = read_all(bytes, chunk);
    ASSERT_EQ(replies.size(), 3u);
    EXPECT_EQ(replies[0].to_string(), "[[1, abc], (nil), [[]]]");
    EXPECT_EQ(replies[1].type, Reply::Type::status);
    EXPECT_TRUE(replies[2].is_error());
  }
}

TEST(RespReader, ReadsArraysLargerThanWhatIsReservedAhead) {
  // 3000 elements (more than the reader reserves for a header), each an array of its own.
  std::string bytes = "*3000\r\n";
  for (int i = 0; i < 3000; ++i) bytes += "*2\r\n:" + std::to_string(i) + "\r\n$1\r\nx\r\n";
  const auto replies = read_all(bytes, 7);
  ASSERT_EQ(replies.size(), 1u);
  ASSERT_EQ(replies[0].elements.size(), 3000u);
  for (int i = 0; i < 3000; ++i) {
    const auto& e = replies[0].elements[static_cast<std::size_t>(i)];
    ASSERT_EQ(e.elements.size(), 2u);
    EXPECT_EQ(e.elements[0].integer, i);
    EXPECT_EQ(e.elements[1].str, "x");
  }
}

// Found by fuzz/resp_fuzz (corpus/resp/crash-array-header-oom): the reader sized an array for
// the count in its header, 72 bytes per announced element, before any arrived: "*50000000"
// allocated 3.6 GB, and a count the allocator cannot satisfy failed the connection.
TEST(RespReader, ArrayHeaderAloneAllocatesNothingForItsElements) {
  RespReader reader;
  const std::string_view head = "*2147483647\r\n:1\r\n:2\r\n";
  ASSERT_TRUE(reader.feed(head.data(), head.size()));
  auto r = reader.next();
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_FALSE(*r);  // more elements to come
}

// The first error reading `bytes` fed in `chunk`-byte pieces, or "" when there is none.
std::string first_error(std::string_view bytes, std::size_t chunk, RespReader& reader) {
  while (!bytes.empty()) {
    const std::size_t n = std::min(chunk, bytes.size());
    if (auto fed = reader.feed(bytes.data(), n); !fed) return fed.error().message;
    bytes.remove_prefix(n);
    for (;;) {
      auto r = reader.next();
      if (!r) return r.error().message;
      if (!*r) break;
    }
  }
  return "";
}

// A peer that is not Redis cannot make one reply hold more than kMaxReplyBytes: not with a
// bulk string announced long, nor with an array of many small elements. Replies up to it, and
// one such reply after another, are read.
TEST(RespReader, OneReplyHoldsAtMostItsBound) {
  const std::string more = "reply of more than 64 MiB";
  {
    RespReader reader;
    std::string bulk = "$536870000\r\n" + std::string(kMaxReplyBytes + (1 << 20), 'x');
    EXPECT_NE(first_error(bulk, 1 << 16, reader).find(more), std::string::npos);
    const std::string_view after = "+OK\r\n";  // the connection is done with
    EXPECT_FALSE(reader.feed(after.data(), after.size()));
  }
  {
    RespReader reader;
    std::string many = "*2000000000\r\n";
    for (int i = 0; i < 2'000'000; ++i) many += ":1\r\n";
    EXPECT_NE(first_error(many, 1 << 16, reader).find(more), std::string::npos);
  }
  {
    // About 12 MiB of overrides-table-like elements, twice over: each reply within the bound.
    std::string table = "*40000\r\n";
    for (int i = 0; i < 40'000; ++i) table += "$300\r\n" + std::string(300, 'v') + "\r\n";
    RespReader reader;
    EXPECT_EQ(first_error(table + table, 1 << 16, reader), "");
    const auto replies = read_all(table + table, 1 << 16);
    ASSERT_EQ(replies.size(), 2u);
    EXPECT_EQ(replies[1].elements.size(), 40'000u);
  }
}

// What hiredis' own encoder writes for `argv`: the reference.
std::string hiredis_command(const std::vector<std::string>& argv) {
  std::vector<const char*> ptrs;
  std::vector<std::size_t> lens;
  for (const auto& a : argv) {
    ptrs.push_back(a.data());
    lens.push_back(a.size());
  }
  char* cmd = nullptr;
  const int len = redisFormatCommandArgv(&cmd, static_cast<int>(argv.size()), ptrs.data(), lens.data());
  std::string out(cmd, static_cast<std::size_t>(len));
  redisFreeCommand(cmd);
  return out;
}

// append_command after `before`.
std::string encoded(const std::vector<std::string>& argv, std::string before = {}) {
  const std::vector<std::string_view> views(argv.begin(), argv.end());
  append_command(before, views);
  return before;
}

TEST(RespCommand, EncodesEveryArgumentAsABulkString) {
  EXPECT_EQ(encoded({"PING"}), "*1\r\n$4\r\nPING\r\n");
  EXPECT_EQ(encoded({"GET", ""}), "*2\r\n$3\r\nGET\r\n$0\r\n\r\n");
  EXPECT_EQ(encoded({}), "*0\r\n");
  const std::string binary("a\r\n\0b", 5);
  EXPECT_EQ(encoded({"SET", "k", binary}, "*1\r\n$4\r\nPING\r\n"),
            "*1\r\n$4\r\nPING\r\n*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\n" + binary + "\r\n");
  const std::vector<std::string> many(100, std::string(1000, 'x'));  // beyond any inline size
  EXPECT_EQ(encoded(many), hiredis_command(many));
}

RC_GTEST_PROP(RespCommand, SameBytesAsHiredis,
              (const std::vector<std::string>& argv, const std::string& before)) {
  RC_ASSERT(encoded(argv, before) == before + hiredis_command(argv));
}

}  // namespace
}  // namespace ratekeeper::redis::detail
