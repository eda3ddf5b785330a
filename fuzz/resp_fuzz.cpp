// Fuzz target: replies from a Redis server, end to end through the client's parsing. Bytes
// go through the RESP reader (hiredis' reader building redis::Reply) in chunks whose sizes
// the fuzzer chooses, which must read exactly as the same bytes fed at once; then every
// reply goes through every parser of script replies into decisions (single and multi-key
// scripts, the batch script, multi_at, multi_delay and refund) for a few shapes of checks.
//
// Input: a 128-byte header (chunk sizes, then the shapes of the checks, as FuzzedDataProvider
// reads them: from its end), then the bytes from the server. fuzz/resp_seeds.py writes seeds.

#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "redis/resp.hpp"
#include "require.hpp"
#include "store/redis/lease_script.hpp"
#include "store/redis/script_reply.hpp"

namespace {

using namespace ratekeeper;
using fuzz::require;
using redis::Reply;

constexpr std::size_t kHeader = 128;
constexpr std::size_t kMaxReplies = 64;

bool same(const Reply& a, const Reply& b) {
  if (a.type != b.type || a.integer != b.integer || a.str != b.str ||
      a.elements.size() != b.elements.size()) {
    return false;
  }
  for (std::size_t i = 0; i < a.elements.size(); ++i) {
    if (!same(a.elements[i], b.elements[i])) return false;
  }
  return true;
}

struct Read {
  std::vector<Reply> replies;
  bool error = false;
};

// Feeds `bytes` in chunks of the sizes `next_chunk` gives, taking the complete replies after
// each chunk, as a connection does.
template <class NextChunk>
Read read_replies(std::string_view bytes, NextChunk next_chunk) {
  redis::detail::RespReader reader;
  Read out;
  while (!bytes.empty()) {
    const std::size_t n = std::min(bytes.size(), next_chunk());
    if (!reader.feed(bytes.data(), n)) {
      out.error = true;
      return out;
    }
    bytes.remove_prefix(n);
    while (out.replies.size() < kMaxReplies) {
      auto r = reader.next();
      if (!r) {
        out.error = true;
        return out;
      }
      if (!*r) break;
      out.replies.push_back(std::move(**r));
    }
  }
  return out;
}

// A valid check item (as validate_check admits) of fuzzer-chosen shape.
store::CheckItem make_item(FuzzedDataProvider& in, std::size_t index) {
  using algorithms::kMaxHorizon;  // algorithms::Limit::make's bound
  store::CheckItem item;
  item.key = "k" + std::to_string(index);
  item.limit.algorithm = static_cast<algorithms::Algorithm>(in.ConsumeIntegralInRange<int>(0, 3));
  item.limit.capacity = in.ConsumeIntegralInRange<std::int64_t>(1, kMaxHorizon);
  item.limit.period = in.ConsumeIntegralInRange<Micros>(1, kMaxHorizon / item.limit.capacity);
  item.cost = in.ConsumeIntegralInRange<std::int64_t>(0, item.limit.capacity);
  return item;
}

void check_outcome(const Result<store::CheckOutcome>& outcome, std::size_t items) {
  if (outcome) require(outcome->items.size() == items);
}

void parse_everything(const Reply& reply, std::span<const store::detail::BatchEntry> entries) {
  (void)reply.to_string();
  (void)reply.error_code();
  (void)store::detail::is_noscript(Result<Reply>(reply));
  for (std::size_t n = 1; n <= 3; ++n) {
    check_outcome(store::detail::parse_outcome(reply, n), n);
    if (auto d = store::detail::parse_delayed_outcome(reply, n)) {
      require(d->items.size() == n && d->decision.delay >= 0 && d->decision.delay <= algorithms::kMaxDelay);
      require(d->decision.delay == 0 || d->decision.allowed);
    }
    if (auto t = store::detail::parse_timed_outcome(reply, n))
      require(t->outcome.items.size() == n);
    if (auto r = store::detail::parse_refund(reply, n))
      require(r->items.size() == n && r->refunded.size() == n);
  }
  for (std::int64_t want : {1, 500}) {
    if (auto g = store::detail::parse_lease_grant(reply, want)) {
      require(g->granted >= 0 && g->granted <= want && (g->granted > 0) == g->decision.allowed);
    }
  }
  const auto batch = store::detail::parse_batch(reply, entries);
  std::size_t at = 0;
  for (const auto& entry : entries) {
    for (std::size_t r = 0; r < entry.repeats; ++r, ++at) {
      require(at < batch.size());
      check_outcome(batch[at], entry.items->size());
    }
  }
  require(at == batch.size());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < kHeader) return 0;
  FuzzedDataProvider header(data, kHeader);
  const std::string_view bytes(reinterpret_cast<const char*>(data) + kHeader, size - kHeader);

  // Chunk sizes: 1..max_chunk from a generator the header seeds.
  const std::size_t max_chunk = header.ConsumeIntegralInRange<std::size_t>(1, 64);
  std::uint32_t state = header.ConsumeIntegral<std::uint32_t>() | 1;
  auto next_chunk = [&] {
    state ^= state << 13;
    state ^= state >> 17;
    state ^= state << 5;
    return 1 + state % max_chunk;
  };
  const Read chunked = read_replies(bytes, next_chunk);
  const Read whole = read_replies(bytes, [] { return ~std::size_t{0}; });
  require(chunked.error == whole.error && chunked.replies.size() == whole.replies.size());
  for (std::size_t i = 0; i < whole.replies.size(); ++i)
    require(same(chunked.replies[i], whole.replies[i]));

  // The checks the replies answer: up to three checks of one to three items each, and a
  // batch of up to four entries over them, each repeated as the coalescer does (at most
  // max_batch = 64 checks per call).
  std::vector<std::vector<store::CheckItem>> checks(
      header.ConsumeIntegralInRange<std::size_t>(1, 3));
  std::vector<store::detail::BatchEntry> entries(header.ConsumeIntegralInRange<std::size_t>(1, 4));
  for (auto& e : entries) {
    e.items = &checks[header.ConsumeIntegralInRange<std::size_t>(0, checks.size() - 1)];
    e.repeats = header.ConsumeIntegralInRange<std::size_t>(1, 64);
  }
  std::size_t index = 0;
  for (auto& check : checks) {
    check.resize(header.ConsumeIntegralInRange<std::size_t>(1, 3));
    for (auto& item : check) item = make_item(header, index++);
  }
  for (const auto& reply : whole.replies) parse_everything(reply, entries);
  return 0;
}
