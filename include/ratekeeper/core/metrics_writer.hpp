#pragma once
// The one writer of Prometheus' text exposition format (version 0.0.4). A component writes
// its own families through it: a family's HELP and TYPE lines go out once, before its first
// sample, however many samples and writers follow; label values are escaped. Not
// thread-safe: one writer per scrape.
//
//   MetricsWriter out;
//   out.counter("ratekeeper_cluster_refunds_total", "Refund calls sent.", stats.refunds_sent);
//   out.counter("ratekeeper_redis_redirects_total", "Redirections followed.", moved, {{"kind", "moved"}});
//   respond(out.take());

#include <cstdint>
#include <initializer_list>
#include <set>
#include <string>
#include <string_view>
#include <utility>

namespace ratekeeper {

class MetricsWriter {
 public:
  using Label = std::pair<std::string_view, std::string_view>;
  using Labels = std::initializer_list<Label>;

  // A sample of a counter, gauge or untyped family named `name` (HELP and TYPE on its first).
  void counter(std::string_view name, std::string_view help, double value, Labels labels = {});
  void counter(std::string_view name, std::string_view help, std::uint64_t value, Labels labels = {});
  void gauge(std::string_view name, std::string_view help, double value, Labels labels = {});
  void gauge(std::string_view name, std::string_view help, std::int64_t value, Labels labels = {});

  // Histograms and summaries: declare the family, then write its samples (`_bucket` with an
  // "le" label, `_sum`, `_count`) with sample().
  void family(std::string_view name, std::string_view type, std::string_view help);
  void sample(std::string_view name, double value, Labels labels = {});
  void sample(std::string_view name, std::uint64_t value, Labels labels = {});
  // Exposition text written elsewhere in this format (e.g. by a library), appended as is.
  void append(std::string_view text) { out_.append(text); }

  const std::string& text() const noexcept { return out_; }
  std::string take() noexcept { return std::move(out_); }

 private:
  void series(std::string_view name, Labels labels);

  std::string out_;
  std::set<std::string, std::less<>> families_;
};

}  // namespace ratekeeper
