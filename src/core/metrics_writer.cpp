#include "ratekeeper/core/metrics_writer.hpp"

#include <fmt/format.h>

#include <cmath>

namespace ratekeeper {

void MetricsWriter::family(std::string_view name, std::string_view type, std::string_view help) {
  if (families_.contains(name)) return;
  families_.emplace(name);
  fmt::format_to(std::back_inserter(out_), "# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

void MetricsWriter::series(std::string_view name, Labels labels) {
  out_.append(name);
  if (labels.size() == 0) return;
  out_ += '{';
  bool first = true;
  for (const auto& [key, value] : labels) {
    if (!first) out_ += ',';
    first = false;
    out_.append(key);
    out_ += "=\"";
    for (char c : value) {
      if (c == '\\') out_ += "\\\\";
      else if (c == '"') out_ += "\\\"";
      else if (c == '\n') out_ += "\\n";
      else out_ += c;
    }
    out_ += '"';
  }
  out_ += '}';
}

void MetricsWriter::sample(std::string_view name, double value, Labels labels) {
  series(name, labels);
  if (std::isnan(value)) out_ += " NaN\n";
  else if (std::isinf(value)) out_ += value > 0 ? " +Inf\n" : " -Inf\n";
  else fmt::format_to(std::back_inserter(out_), " {}\n", value);
}

void MetricsWriter::sample(std::string_view name, std::uint64_t value, Labels labels) {
  series(name, labels);
  fmt::format_to(std::back_inserter(out_), " {}\n", value);
}

void MetricsWriter::counter(std::string_view name, std::string_view help, double value, Labels labels) {
  family(name, "counter", help);
  sample(name, value, labels);
}

void MetricsWriter::counter(std::string_view name, std::string_view help, std::uint64_t value, Labels labels) {
  family(name, "counter", help);
  sample(name, value, labels);
}

void MetricsWriter::gauge(std::string_view name, std::string_view help, double value, Labels labels) {
  family(name, "gauge", help);
  sample(name, value, labels);
}

void MetricsWriter::gauge(std::string_view name, std::string_view help, std::int64_t value, Labels labels) {
  family(name, "gauge", help);
  series(name, labels);
  fmt::format_to(std::back_inserter(out_), " {}\n", value);
}

}  // namespace ratekeeper
