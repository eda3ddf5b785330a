#include "ratekeeper/limiter/overrides.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "ratekeeper/core/log_limit.hpp"
#include "ratekeeper/core/metrics_writer.hpp"
#include "ratekeeper/limiter/keys.hpp"
#include "ratekeeper/store/store.hpp"

namespace ratekeeper::limiter {

using algorithms::Algorithm;
using algorithms::Limit;

Result<void> validate_override(const Override& o) {
  if (!std::isfinite(o.factor) || o.factor < kMinOverrideFactor || o.factor > kMaxOverrideFactor) {
    return make_error(ErrorCode::invalid_argument,
                      fmt::format("factor must be a number from {} to {}", kMinOverrideFactor, kMaxOverrideFactor));
  }
  if (o.note.size() > kMaxOverrideNoteBytes) {
    return make_error(ErrorCode::invalid_argument,
                      fmt::format("note must be at most {} bytes, got {}", kMaxOverrideNoteBytes, o.note.size()));
  }
  if (auto escaped = escape_identity(o.identity); !escaped) {
    return make_error(ErrorCode::invalid_argument, fmt::format("identity: {}", escaped.error().message));
  }
  return {};
}

std::string override_field(std::string_view rule, std::string_view identity) {
  std::string field;
  field.reserve(rule.size() + 1 + identity.size());
  field += rule;
  field += ':';
  field += identity;
  return field;
}

std::string override_value(const Override& o) {
  const nlohmann::json value{{"factor", o.factor}, {"note", o.note}, {"set_by", o.set_by}, {"set_at_us", o.set_at}};
  return value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

Result<Override> parse_override(std::string_view field, std::string_view value) {
  const auto colon = field.find(':');
  if (colon == std::string_view::npos || colon == 0 || !valid_name(field.substr(0, colon))) {
    return make_error(ErrorCode::invalid_argument, "an override's entry is named <rule>:<identity>");
  }
  Override o;
  o.rule = field.substr(0, colon);
  o.identity = field.substr(colon + 1);
  const auto json = nlohmann::json::parse(value, nullptr, false);
  if (json.is_discarded() || !json.is_object()) {
    return make_error(ErrorCode::invalid_argument, "an override's value is a JSON object");
  }
  const auto factor = json.find("factor");
  if (factor == json.end() || !factor->is_number()) {
    return make_error(ErrorCode::invalid_argument, "an override's value has a numeric `factor`");
  }
  o.factor = factor->get<double>();
  if (const auto note = json.find("note"); note != json.end() && note->is_string()) o.note = note->get<std::string>();
  if (const auto by = json.find("set_by"); by != json.end() && by->is_string()) o.set_by = by->get<std::string>();
  if (const auto at = json.find("set_at_us"); at != json.end() && at->is_number_integer()) {
    o.set_at = at->get<std::int64_t>();
    // Up to the year 9999, as the admin's list writes it.
    if (o.set_at < 0 || o.set_at > kMaxOverrideSetAt) {
      return make_error(ErrorCode::invalid_argument, "an override's `set_at_us` is out of range");
    }
  }
  if (auto ok = validate_override(o); !ok) return std::unexpected(std::move(ok.error()));
  return o;
}

namespace {

// round(x), within [low, high].
std::int64_t rounded(double x, std::int64_t low, std::int64_t high) {
  if (!(x >= static_cast<double>(low))) return low;  // NaN too
  if (x >= static_cast<double>(high)) return high;
  return std::clamp(std::llround(x), static_cast<long long>(low), static_cast<long long>(high));
}

}  // namespace

Limit scale_limit(const Limit& limit, double factor, std::int64_t min_capacity) {
  const std::int64_t floor = std::max<std::int64_t>(1, min_capacity);
  const double capacity = static_cast<double>(limit.capacity) * factor;
  switch (limit.algorithm) {
    case Algorithm::token_bucket: {
      // Burst and rate both scale: capacity × f, interval ÷ f; C·T stays within 2^51.
      const std::int64_t c = rounded(capacity, std::min(floor, algorithms::kMaxHorizon), algorithms::kMaxHorizon);
      const std::int64_t t = rounded(static_cast<double>(limit.period) / factor, 1, algorithms::kMaxHorizon / c);
      return Limit{limit.algorithm, c, t};
    }
    case Algorithm::concurrency:
      return Limit{limit.algorithm,
                   rounded(capacity, std::min(floor, algorithms::kMaxConcurrency), algorithms::kMaxConcurrency),
                   limit.period};
    default:
      return Limit{limit.algorithm,
                   rounded(capacity, std::min(floor, algorithms::kMaxWindowLimit), algorithms::kMaxWindowLimit),
                   limit.period};
  }
}

Policy scale_policy(const Policy& policy, double factor, std::int64_t min_capacity) {
  Policy out = policy;
  for (auto& named : out) named.limit = scale_limit(named.limit, factor, min_capacity);
  return out;
}

const Override* Overrides::Table::find(std::string_view rule, std::string_view identity) const {
  const auto r = by_rule.find(rule);
  if (r == by_rule.end()) return nullptr;
  const auto i = r->second.find(std::string(identity));
  return i == r->second.end() ? nullptr : &i->second;
}

std::size_t Overrides::apply(std::int64_t version, const std::vector<std::pair<std::string, std::string>>& entries) {
  auto table = std::make_shared<Table>();
  table->version = version;
  std::size_t invalid = 0;
  static LogLimit log_limit("overrides: invalid entries");
  for (const auto& [field, value] : entries) {
    auto o = parse_override(field, value);
    if (!o) {
      ++invalid;
      std::uint64_t suppressed = 0;
      if (log_limit.admit(suppressed)) {
        spdlog::warn("overrides: entry '{}' left out: {}{}", escape_identity(field).value_or("(unprintable)"),
                     o.error().message,
                     suppressed > 0 ? fmt::format(" ({} similar lines left out)", suppressed) : std::string());
      }
      continue;
    }
    auto& by_identity = table->by_rule[o->rule];
    const std::string identity = o->identity;
    by_identity.insert_or_assign(identity, std::move(*o));
  }
  for (const auto& [rule, identities] : table->by_rule) table->size += identities.size();
  const bool any = table->size > 0;
  table_.store(std::move(table));
  version_.store(version, std::memory_order_relaxed);
  any_.store(any, std::memory_order_release);
  invalid_.fetch_add(invalid, std::memory_order_relaxed);
  return invalid;
}

void Overrides::refresh(store::Store& store, std::string key, std::function<void(Result<bool>)> done) {
  std::uint64_t sequence = 0;
  {
    const std::lock_guard lock(refresh_mu_);
    sequence = ++refresh_started_;
  }
  store.read_table(std::move(key), version(), [this, sequence, done = std::move(done)](
                                                    Result<std::optional<store::SharedTable>> read) {
    if (!read) {
      failed_.fetch_add(1, std::memory_order_relaxed);
      static LogLimit log_limit("overrides: the table could not be read");
      std::uint64_t suppressed = 0;
      if (log_limit.admit(suppressed)) {
        spdlog::warn("overrides: the table could not be read, the {} held stay in effect: {}{}",
                     table_.load()->size, read.error().message,
                     suppressed > 0 ? fmt::format(" ({} similar lines left out)", suppressed) : std::string());
      }
      return done(std::unexpected(std::move(read.error())));
    }
    if (!*read) {
      unchanged_.fetch_add(1, std::memory_order_relaxed);
      return done(false);
    }
    {
      // A refresh that started before one already in effect brings an older table.
      const std::lock_guard lock(refresh_mu_);
      if (sequence < refresh_applied_) return done(false);
      refresh_applied_ = sequence;
      apply((*read)->version, (*read)->entries);
    }
    refreshed_.fetch_add(1, std::memory_order_relaxed);
    done(true);
  });
}

void Overrides::write_metrics(MetricsWriter& out) const {
  out.gauge("ratekeeper_overrides", "Per-identity overrides in effect in this process.",
            static_cast<std::int64_t>(table_.load()->size));
  constexpr std::string_view help =
      "Reads of the shared overrides table: changed (a new table put in effect), unchanged, failed (the table "
      "held stays), and entries left out because they did not parse (invalid).";
  constexpr std::string_view name = "ratekeeper_overrides_refreshes_total";
  out.counter(name, help, refreshed_.load(std::memory_order_relaxed), {{"result", "changed"}});
  out.counter(name, help, unchanged_.load(std::memory_order_relaxed), {{"result", "unchanged"}});
  out.counter(name, help, failed_.load(std::memory_order_relaxed), {{"result", "failed"}});
  out.counter(name, help, invalid_.load(std::memory_order_relaxed), {{"result", "invalid"}});
}

}  // namespace ratekeeper::limiter
