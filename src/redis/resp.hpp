#pragma once
// RESP on the wire, through hiredis: its reader turns bytes into redis::Reply values (built
// directly by the reader's object hooks, here and nowhere else) and its formatter turns argv
// into a command.
// A RespReader belongs to one connection; not thread-safe.

#include <hiredis/hiredis.h>

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "ratekeeper/core/error.hpp"
#include "redis/reply.hpp"

namespace ratekeeper::redis::detail {

struct ReaderDeleter {
  void operator()(redisReader* r) const noexcept { redisReaderFree(r); }
};
using ReaderPtr = std::unique_ptr<redisReader, ReaderDeleter>;

// The most one reply may take: its objects, and the bytes of an element still arriving. A
// peer that is not Redis (or a hostile one at its address) cannot have a connection hold
// more: past it, the reply is a protocol error. The replies read are small (a script's
// decisions, a topology, the overrides table of at most 10,000 entries: about 6 MiB).
inline constexpr std::size_t kMaxReplyBytes = std::size_t{64} << 20;

class RespReader {
 public:
  RespReader();
  // Protocol error: the stream is unusable.
  Result<void> feed(const char* data, std::size_t size);
  // The next complete reply, nullopt when more bytes are needed, or a protocol error.
  Result<std::optional<Reply>> next();
  void reset();

  // What the reply being read has taken so far; shared with the reader's object hooks.
  struct Budget {
    std::size_t used = 0;
    bool exceeded = false;
  };

 private:
  Result<void> too_large() const;

  std::unique_ptr<Budget> budget_ = std::make_unique<Budget>();
  ReaderPtr reader_;
};

// Appends the RESP encoding of `argv` to `out`.
void append_command(std::string& out, std::span<const std::string_view> argv);

}  // namespace ratekeeper::redis::detail
