#include "resp.hpp"

#include <fmt/format.h>

#include <array>
#include <new>
#include <vector>

namespace ratekeeper::redis::detail {

Reply to_reply(const redisReply& r) {
  Reply out;
  switch (r.type) {
    case REDIS_REPLY_STRING:
      out.type = Reply::Type::string;
      out.str.assign(r.str, r.len);
      break;
    case REDIS_REPLY_STATUS:
      out.type = Reply::Type::status;
      out.str.assign(r.str, r.len);
      break;
    case REDIS_REPLY_ERROR:
      out.type = Reply::Type::error;
      out.str.assign(r.str, r.len);
      break;
    case REDIS_REPLY_INTEGER:
      out.type = Reply::Type::integer;
      out.integer = r.integer;
      break;
    case REDIS_REPLY_ARRAY:
      out.type = Reply::Type::array;
      out.elements.reserve(r.elements);
      for (std::size_t i = 0; i < r.elements; ++i) out.elements.push_back(to_reply(*r.element[i]));
      break;
    case REDIS_REPLY_NIL:
    default: out.type = Reply::Type::nil; break;
  }
  return out;
}

RespReader::RespReader() : reader_(redisReaderCreate()) {
  if (!reader_) throw std::bad_alloc();
}

void RespReader::reset() {
  reader_.reset(redisReaderCreate());
  if (!reader_) throw std::bad_alloc();
}

Result<void> RespReader::feed(const char* data, std::size_t size) {
  if (redisReaderFeed(reader_.get(), data, size) != REDIS_OK) {
    return make_error(ErrorCode::protocol, fmt::format("RESP reader: {}", reader_->errstr));
  }
  return {};
}

Result<std::optional<Reply>> RespReader::next() {
  void* raw = nullptr;
  if (redisReaderGetReply(reader_.get(), &raw) != REDIS_OK) {
    return make_error(ErrorCode::protocol, fmt::format("RESP reader: {}", reader_->errstr));
  }
  if (raw == nullptr) return std::optional<Reply>{};
  HiredisReplyPtr reply(static_cast<redisReply*>(raw));
  return std::optional<Reply>{to_reply(*reply)};
}

void append_command(std::string& out, std::span<const std::string_view> argv) {
  constexpr std::size_t kInline = 32;
  std::array<const char*, kInline> ptr_inline;
  std::array<std::size_t, kInline> len_inline;
  std::vector<const char*> ptr_heap;
  std::vector<std::size_t> len_heap;
  const char** ptrs = ptr_inline.data();
  std::size_t* lens = len_inline.data();
  if (argv.size() > kInline) {
    ptr_heap.resize(argv.size());
    len_heap.resize(argv.size());
    ptrs = ptr_heap.data();
    lens = len_heap.data();
  }
  for (std::size_t i = 0; i < argv.size(); ++i) {
    ptrs[i] = argv[i].data();
    lens[i] = argv[i].size();
  }
  char* cmd = nullptr;
  const int len = redisFormatCommandArgv(&cmd, static_cast<int>(argv.size()), ptrs, lens);
  if (len < 0 || cmd == nullptr) throw std::bad_alloc();
  out.append(cmd, static_cast<std::size_t>(len));
  redisFreeCommand(cmd);
}

}  // namespace ratekeeper::redis::detail
