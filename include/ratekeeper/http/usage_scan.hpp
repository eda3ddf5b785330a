#pragma once
// The cost a response body reports (a rule's `usage.response_json`), read as the body streams
// through, without holding it back: a JSON body (OpenAI's `usage.total_tokens`) is kept up to
// kMaxJsonBody bytes and read at its end; an event stream (text/event-stream) is read event by
// event, and the last event whose data is a JSON object holding the field gives the cost (the
// final chunk of a streamed completion). The field's value must be an integer from 0 to
// algorithms::kMaxCharged; anything else (no such field, another type, a body that is not
// JSON or is larger) is no cost. Outside input: bounded in memory and work, never throws.
// Not thread-safe (one response).

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ratekeeper::http {

class UsageScanner {
 public:
  static constexpr std::size_t kMaxJsonBody = std::size_t{1} << 20;  // a larger body reports nothing
  static constexpr std::size_t kMaxEventBytes = std::size_t{1} << 20;  // a larger event is skipped

  // `path`: the field's names, outermost first ("usage", "total_tokens"), none empty.
  UsageScanner(std::vector<std::string> path, bool event_stream);

  void feed(std::string_view bytes);
  // The cost, once the body has ended; nullopt when it reports none.
  std::optional<std::int64_t> finish();

 private:
  void line(std::string_view text);
  void dispatch();
  std::optional<std::int64_t> read(std::string_view json) const;

  std::vector<std::string> path_;
  bool event_stream_;
  std::string buffer_;      // JSON: the body so far; events: the line being read
  bool overflow_ = false;   // JSON: the body went past kMaxJsonBody; events: the line did
  std::string data_;        // events: the data lines of the event being read
  bool data_overflow_ = false;
  std::optional<std::int64_t> last_;  // events: the cost of the last event that had one
};

// "usage.total_tokens" → {"usage", "total_tokens"}; nullopt when a name is empty.
std::optional<std::vector<std::string>> split_field_path(std::string_view dotted);

}  // namespace ratekeeper::http
