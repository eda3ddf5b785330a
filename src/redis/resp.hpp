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

class RespReader {
 public:
  RespReader();
  // Protocol error: the stream is unusable.
  Result<void> feed(const char* data, std::size_t size);
  // The next complete reply, nullopt when more bytes are needed, or a protocol error.
  Result<std::optional<Reply>> next();
  void reset();

 private:
  ReaderPtr reader_;
};

// Appends the RESP encoding of `argv` to `out`.
void append_command(std::string& out, std::span<const std::string_view> argv);

}  // namespace ratekeeper::redis::detail
