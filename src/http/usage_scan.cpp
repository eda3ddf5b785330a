#include "ratekeeper/http/usage_scan.hpp"

#include <nlohmann/json.hpp>

#include "ratekeeper/algorithms/lease.hpp"

namespace ratekeeper::http {

std::optional<std::vector<std::string>> split_field_path(std::string_view dotted) {
  std::vector<std::string> out;
  for (;;) {
    const auto dot = dotted.find('.');
    const auto name = dotted.substr(0, dot);
    if (name.empty()) return std::nullopt;
    out.emplace_back(name);
    if (dot == std::string_view::npos) return out;
    dotted.remove_prefix(dot + 1);
  }
}

UsageScanner::UsageScanner(std::vector<std::string> path, bool event_stream)
    : path_(std::move(path)), event_stream_(event_stream) {}

void UsageScanner::feed(std::string_view bytes) {
  if (!event_stream_) {
    if (overflow_) return;
    if (buffer_.size() + bytes.size() > kMaxJsonBody) {
      overflow_ = true;
      buffer_.clear();
      buffer_.shrink_to_fit();
      return;
    }
    buffer_.append(bytes);
    return;
  }
  while (!bytes.empty()) {
    const auto end = bytes.find('\n');
    const auto piece = bytes.substr(0, end);
    if (!overflow_) {
      if (buffer_.size() + piece.size() > kMaxEventBytes) {
        overflow_ = true;
        buffer_.clear();
      } else {
        buffer_.append(piece);
      }
    }
    if (end == std::string_view::npos) return;
    if (!overflow_) {
      std::string_view text = buffer_;
      if (!text.empty() && text.back() == '\r') text.remove_suffix(1);
      line(text);
    } else {
      data_overflow_ = true;  // the event lost a line: it reports nothing
    }
    buffer_.clear();
    overflow_ = false;
    bytes.remove_prefix(end + 1);
  }
}

// One line of an event stream (the WHATWG format: "field: value", an empty line ends the
// event; only `data` counts here).
void UsageScanner::line(std::string_view text) {
  if (text.empty()) return dispatch();
  if (!text.starts_with("data")) return;
  text.remove_prefix(4);
  if (!text.empty() && text.front() != ':') return;  // another field ("database: ...")
  if (!text.empty()) text.remove_prefix(1);
  if (!text.empty() && text.front() == ' ') text.remove_prefix(1);
  if (data_overflow_) return;
  if (data_.size() + text.size() + 1 > kMaxEventBytes) {
    data_overflow_ = true;
    return;
  }
  if (!data_.empty()) data_ += '\n';
  data_.append(text);
}

void UsageScanner::dispatch() {
  // Only an event that names the field's last name is parsed: most events are not the one.
  if (!data_overflow_ && !data_.empty() && data_.find(path_.back()) != std::string::npos) {
    if (const auto cost = read(data_)) last_ = cost;
  }
  data_.clear();
  data_overflow_ = false;
}

std::optional<std::int64_t> UsageScanner::read(std::string_view text) const {
  const auto json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) return std::nullopt;
  const nlohmann::json* at = &json;
  for (const auto& name : path_) {
    if (!at->is_object()) return std::nullopt;
    const auto it = at->find(name);
    if (it == at->end()) return std::nullopt;
    at = &*it;
  }
  if (at->is_number_unsigned()) {
    const auto value = at->get<std::uint64_t>();
    if (value > static_cast<std::uint64_t>(algorithms::kMaxCharged)) return std::nullopt;
    return static_cast<std::int64_t>(value);
  }
  if (at->is_number_integer()) {
    const auto value = at->get<std::int64_t>();
    if (value < 0 || value > algorithms::kMaxCharged) return std::nullopt;
    return value;
  }
  return std::nullopt;
}

std::optional<std::int64_t> UsageScanner::finish() {
  if (!event_stream_) {
    if (overflow_ || buffer_.empty()) return std::nullopt;
    return read(buffer_);
  }
  // A last line without its newline, then the event it may end.
  if (!buffer_.empty() && !overflow_) {
    std::string_view text = buffer_;
    if (text.back() == '\r') text.remove_suffix(1);
    line(text);
  }
  buffer_.clear();
  dispatch();
  return last_;
}

}  // namespace ratekeeper::http
