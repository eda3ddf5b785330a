#include "resp.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <new>
#include <vector>

namespace ratekeeper::redis::detail {

namespace {

// The reader's object hooks build Reply values in place: an element lives in its parent's
// `elements`, only the root is allocated. Elements are appended as they arrive (hiredis
// reads them in order, and keeps no pointer to an element once the next one starts), so
// what an array header announces is reserved only up to kReserved: a header claiming a
// billion elements costs nothing until they are received.
constexpr std::size_t kReserved = 1024;

// Charges an object of the reply being read: false once the reply has taken kMaxReplyBytes.
bool charge(const redisReadTask* task, std::size_t bytes) noexcept {
  auto* budget = static_cast<RespReader::Budget*>(task->privdata);
  if (budget == nullptr) return true;
  budget->used += sizeof(Reply) + bytes;
  if (budget->used <= kMaxReplyBytes) return true;
  budget->exceeded = true;
  return false;
}

Reply* place(const redisReadTask* task, std::size_t bytes = 0) noexcept {
  if (!charge(task, bytes)) return nullptr;
  if (task->parent != nullptr) {
    auto& elements = static_cast<Reply*>(task->parent->obj)->elements;
    if (task->idx < 0 || static_cast<std::size_t>(task->idx) != elements.size()) return nullptr;
    try {
      return &elements.emplace_back();
    } catch (...) {
      return nullptr;
    }
  }
  return new (std::nothrow) Reply();
}

void* create_string(const redisReadTask* task, char* str, std::size_t len) noexcept {
  Reply* r = place(task, len);
  if (r == nullptr) return nullptr;
  r->type = task->type == REDIS_REPLY_ERROR    ? Reply::Type::error
            : task->type == REDIS_REPLY_STATUS ? Reply::Type::status
                                               : Reply::Type::string;
  try {
    r->str.assign(str, len);
  } catch (...) {
    return nullptr;
  }
  return r;
}

void* create_array(const redisReadTask* task, int elements) noexcept {
  Reply* r = place(task);
  if (r == nullptr) return nullptr;
  r->type = Reply::Type::array;
  try {
    r->elements.reserve(std::min(static_cast<std::size_t>(std::max(0, elements)), kReserved));
  } catch (...) {
    return nullptr;
  }
  return r;
}

void* create_integer(const redisReadTask* task, long long value) noexcept {
  Reply* r = place(task);
  if (r == nullptr) return nullptr;
  r->type = Reply::Type::integer;
  r->integer = value;
  return r;
}

void* create_nil(const redisReadTask* task) noexcept {
  Reply* r = place(task);
  if (r == nullptr) return nullptr;
  r->type = Reply::Type::nil;
  return r;
}

// Called by hiredis on roots only (a root owns its elements).
void free_object(void* reply) noexcept { delete static_cast<Reply*>(reply); }

redisReplyObjectFunctions reply_functions = {create_string, create_array, create_integer, create_nil,
                                             free_object};

}  // namespace

RespReader::RespReader() {
  reset();
}

void RespReader::reset() {
  *budget_ = Budget{};
  reader_.reset(redisReaderCreateWithFunctions(&reply_functions));
  if (!reader_) throw std::bad_alloc();
  reader_->privdata = budget_.get();
}

Result<void> RespReader::too_large() const {
  return make_error(ErrorCode::protocol,
                    fmt::format("RESP reader: a reply of more than {} MiB (is the peer Redis?)", kMaxReplyBytes >> 20));
}

Result<void> RespReader::feed(const char* data, std::size_t size) {
  if (budget_->exceeded) return too_large();
  if (redisReaderFeed(reader_.get(), data, size) != REDIS_OK) {
    return make_error(ErrorCode::protocol, fmt::format("RESP reader: {}", reader_->errstr));
  }
  // Bytes held for an element still arriving (a bulk string announced long) count too.
  if (reader_->len - reader_->pos > kMaxReplyBytes) {
    budget_->exceeded = true;
    return too_large();
  }
  return {};
}

Result<std::optional<Reply>> RespReader::next() {
  void* raw = nullptr;
  if (redisReaderGetReply(reader_.get(), &raw) != REDIS_OK) {
    if (budget_->exceeded) return std::unexpected(too_large().error());
    return make_error(ErrorCode::protocol, fmt::format("RESP reader: {}", reader_->errstr));
  }
  if (raw == nullptr) return std::optional<Reply>{};
  budget_->used = 0;  // the next reply starts
  std::unique_ptr<Reply> reply(static_cast<Reply*>(raw));
  return std::optional<Reply>{std::move(*reply)};
}

void append_command(std::string& out, std::span<const std::string_view> argv) {
  // *<argc>\r\n, then $<length>\r\n<bytes>\r\n per argument: the bytes hiredis'
  // redisFormatCommandArgv writes, straight into `out`.
  constexpr std::size_t kFrame = 24;  // '$', up to 20 digits, two CRLFs (one each side)
  std::size_t size = kFrame;
  for (const auto arg : argv) size += arg.size() + kFrame;
  out.reserve(out.size() + size);
  char digits[20];
  auto append_count = [&](char mark, std::size_t n) {
    out.push_back(mark);
    out.append(digits, std::to_chars(digits, digits + sizeof digits, n).ptr);
    out.append("\r\n", 2);
  };
  append_count('*', argv.size());
  for (const auto arg : argv) {
    append_count('$', arg.size());
    out.append(arg.data(), arg.size());
    out.append("\r\n", 2);
  }
}

}  // namespace ratekeeper::redis::detail
