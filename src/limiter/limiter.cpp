#include "ratekeeper/limiter/limiter.hpp"

#include "ratekeeper/core/metrics_writer.hpp"
#include "ratekeeper/core/thread_cache.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <future>
#include <random>
#include <span>
#include <stdexcept>
#include <tuple>

#include "algorithms/step.hpp"
#include "ratekeeper/algorithms/lease.hpp"
#include "ratekeeper/limiter/keys.hpp"

namespace ratekeeper::limiter {

using algorithms::Decision;

namespace {

// What a request of `cost` takes from `limit`: its cost, or one slot of a concurrency limit.
std::int64_t item_cost(const algorithms::Limit& limit, std::int64_t cost) noexcept {
  return limit.algorithm == algorithms::Algorithm::concurrency ? std::min<std::int64_t>(cost, 1) : cost;
}

// The same where no reservation holds the slot (shadow rules, the local failure policy): a
// concurrency limit is peeked.
std::int64_t unheld_cost(const algorithms::Limit& limit, std::int64_t cost) noexcept {
  return limit.algorithm == algorithms::Algorithm::concurrency ? 0 : cost;
}

// What a reused outcome is reset to: assigning these keeps the capacity of the strings (an
// assignment from an empty string keeps the buffer), and leaves no field of an earlier
// evaluation behind.
const RuleOutcome kFreshOutcome{};
const LimitOutcome kFreshLimit{};
const Evaluation kFreshEvaluation{};

// The next element of `v` to fill, `used` of them filled so far: one left from an earlier
// evaluation, whose strings and vectors keep their capacity, or a new one.
template <class T>
T& next_of(std::vector<T>& v, std::size_t& used) {
  if (used == v.size()) v.emplace_back();
  return v[used++];
}

// The next rule outcome, reset but for its limits (kept for reuse).
RuleOutcome& next_outcome(std::vector<RuleOutcome>& outcomes, std::size_t& used) {
  RuleOutcome& out = next_of(outcomes, used);
  auto limits = std::move(out.limits);
  out = kFreshOutcome;
  out.limits = std::move(limits);
  return out;
}

// The next limit of a rule, reset.
LimitOutcome& next_limit(std::vector<LimitOutcome>& limits, std::size_t& used) {
  return next_of(limits, used) = kFreshLimit;
}

}  // namespace

// One evaluation: the outcome of each application (identity, tier, cost, and per limit the
// policy name, the limit and the key, filled in by prepare), the enforcing items handed to
// the store, and, while they are checked, who asked and since when. Kept for reuse per thread
// (ThreadCache): the next evaluation on the thread fills the same outcomes, whose vectors and
// strings keep their capacity.
struct Limiter::Prepared {
  // The answer, built in place: its `rules` are the enforcing rules' outcomes.
  Result<Evaluation> result;
  std::vector<RuleOutcome> shadow;
  std::vector<store::CheckItem> items;  // enforcing items, rule by rule, limit by limit
  std::size_t item_count = 0;           // items.size() before they were handed to the store
  std::string reservation;                 // the reserving application's id, if any
  std::size_t reserving = 0;               // its index in `enforcing()`
  store::ReservationRecord reservation_record;  // its record: key, ttl, and the application's items
  Limiter* limiter = nullptr;
  std::shared_ptr<Limiter> keep_alive;  // when shared: the limiter, until the store answers
  Micros started = 0;  // Clock::steady
  EvaluationCallback done;
  std::atomic<std::uint32_t> refs{1};  // PreparedRef's count

  std::vector<RuleOutcome>& enforcing() noexcept { return result->rules; }
  const std::vector<RuleOutcome>& enforcing() const noexcept { return result->rules; }

  // A Prepared from this thread's cache, or a new one; one reference held.
  static Prepared* acquire();
  // Drops a reference; the last one clears it into this thread's cache.
  static void unref(Prepared* p) noexcept;

 private:
  // Back to the state of a new one, but for the capacity of the outcomes' vectors and strings
  // (a field added above is reset here too).
  void clear() noexcept;

  using Cache = ThreadCache<std::unique_ptr<Prepared>, 256>;
};

Limiter::Prepared* Limiter::Prepared::acquire() {
  if (std::unique_ptr<Prepared> kept; Cache::take(kept)) {
    Prepared* p = kept.release();
    p->refs.store(1, std::memory_order_relaxed);
    return p;
  }
  return new Prepared();
}

void Limiter::Prepared::unref(Prepared* p) noexcept {
  if (p->refs.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  p->clear();
  Cache::give(std::unique_ptr<Prepared>(p));
}

void Limiter::Prepared::clear() noexcept {
  keep_alive.reset();
  done = nullptr;
  limiter = nullptr;
  started = 0;
  reservation.clear();
  reserving = 0;
  reservation_record = {};
  shadow.clear();
  items.clear();
  item_count = 0;
  if (!result) result.emplace();
  auto rules = std::move(result->rules);
  *result = kFreshEvaluation;
  result->rules = std::move(rules);
}

Limiter::PreparedRef& Limiter::PreparedRef::operator=(PreparedRef&& o) noexcept {
  if (this != &o) {
    if (p_ != nullptr) Prepared::unref(p_);
    p_ = std::exchange(o.p_, nullptr);
  }
  return *this;
}

Limiter::PreparedRef::~PreparedRef() {
  if (p_ != nullptr) Prepared::unref(p_);
}

Limiter::PreparedRef Limiter::PreparedRef::share() const noexcept {
  p_->refs.fetch_add(1, std::memory_order_relaxed);
  return PreparedRef(p_);
}

Limiter::Limiter(LimiterConfig config, store::Store& store, const Clock* clock)
    : config_(std::move(config)),
      store_(&store),
      clock_(clock),
      steady_clock_(&clock_or_system(clock)) {
  if (auto issues = validate(config_); !issues.empty()) {
    const auto& first = issues.front();
    throw std::invalid_argument(first.field.empty() ? first.reason
                                                    : first.field + ": " + first.reason);
  }
  std::vector<std::string> rule_names;
  bool any_local = false;
  for (const auto& rule : config_.rules) {
    rule_names.push_back(rule.name);
    any_local = any_local || rule.on_store_error == FailureMode::local;
  }
  top_denied_ = std::make_unique<TopDenied>(rule_names.size());
  metrics_ = std::make_unique<Metrics>(std::move(rule_names));
  if (config_.decision_log.clock == nullptr) config_.decision_log.clock = clock;
  log_ = std::make_unique<DecisionLog>(config_.decision_log);
  if (any_local) local_ = std::make_unique<store::MemoryStore>();
  policy_ = FailurePolicy{config_.instances, std::max<Micros>(config_.deny_retry_after, 1),
                          local_.get()};
  overrides_ = std::make_shared<Overrides>();
  overrides_key_ = config_.prefix + ":{overrides}";
}

Limiter::~Limiter() = default;

void Limiter::continue_metrics(const Limiter& previous) {
  metrics_ = std::make_unique<Metrics>(metrics_->rule_names(), *previous.metrics_);
}

const Rule* Limiter::find_rule(std::string_view name) const noexcept {
  for (const auto& rule : config_.rules) {
    if (rule.name == name) return &rule;
  }
  return nullptr;
}

std::size_t Limiter::rule_index(const Rule* rule) const noexcept {
  return static_cast<std::size_t>(rule - config_.rules.data());
}

Result<Limiter::PreparedRef> Limiter::prepare(std::vector<AppliedRule> rules) const {
  std::size_t shadow = 0;
  std::size_t enforcing_limits = 0;
  for (const auto& app : rules) {
    const Rule* rule = app.rule;
    const std::less<> before;
    if (rule == nullptr || before(rule, config_.rules.data()) ||
        !before(rule, config_.rules.data() + config_.rules.size())) {
      return make_error(ErrorCode::invalid_argument, "an applied rule that is not one of this limiter's");
    }
    if (rule->shadow) {
      ++shadow;
    } else {
      enforcing_limits += rule->limits.size();  // tiers may have more or fewer: a first guess
    }
  }
  PreparedRef prepared(Prepared::acquire());
  // The overrides in effect (nullptr: none), one table for the whole evaluation.
  const std::shared_ptr<const Overrides::Table> overrides = overrides_->table();
  std::vector<RuleOutcome>& enforcing = prepared->enforcing();
  std::size_t enforcing_used = 0;  // of `enforcing`, filled: the others are an earlier evaluation's
  if (rules.size() > shadow) enforcing.reserve(rules.size() - shadow);
  if (shadow > 0) prepared->shadow.reserve(shadow);
  // A list the store gave back keeps its items' keys: each is assigned again.
  if (prepared->items.capacity() == 0) {
    store::CheckItemLists::take(prepared->items);
  }
  prepared->items.reserve(enforcing_limits);
  std::size_t items_used = 0;  // of prepared->items, filled

  for (auto& app : rules) {
    const Rule* rule = app.rule;
    RuleOutcome& out =
        rule->shadow ? prepared->shadow.emplace_back() : next_outcome(enforcing, enforcing_used);
    out.rule = rule;
    out.shadow = rule->shadow;
    out.cost = app.cost.value_or(rule->cost);
    out.identity = std::move(app.identity);

    const Policy* policy = &rule->limits;
    if (app.limits != nullptr) {
      policy = app.limits;
    } else if (app.ip_fallback && !rule->ip_limits.empty()) {
      policy = &rule->ip_limits;
    } else if (rule->tiered) {
      if (app.tier.empty()) {
        out.tier = config_.tiers.default_tier;
      } else {
        out.tier = std::move(app.tier);
      }
      if (!config_.tiers.levels.contains(out.tier)) out.tier = config_.tiers.default_tier;
      policy = config_.tiers.policy(out.tier);
      if (policy == nullptr) {
        return make_error(ErrorCode::invalid_argument,
                          fmt::format("rule '{}': no tier '{}'", rule->name, out.tier));
      }
    }
    // A per-identity override scales the limits chosen (the parent's below, by its own).
    Policy scaled;
    const Override* parent_override = nullptr;
    if (overrides) {
      if (const Override* o = overrides->find(rule->name, out.identity)) {
        scaled = scale_policy(*policy, o->factor, rule->cost);
        policy = &scaled;
        out.factor = o->factor;
      }
      if (!app.parent.empty()) parent_override = overrides->find(rule->name, app.parent);
    }

    std::string rule_part;
    std::string_view rule_key = rule->name;
    if (rule->bucket == BucketScope::per_endpoint && !app.endpoint.empty()) {
      auto path = escape_identity(app.endpoint);
      if (!path) {
        return make_error(ErrorCode::invalid_argument,
                          fmt::format("rule '{}': path: {}", rule->name, path.error().message));
      }
      rule_part.reserve(rule->name.size() + 1 + path->size());
      rule_part += rule->name;
      rule_part += ':';
      rule_part += *path;
      rule_key = rule_part;
    }
    // A hierarchy: the rule's keys of this identity go to the parent's slot.
    std::string_view slot_identity = out.identity;
    std::string child_part;
    if (!app.parent.empty()) {
      if (!rule->parent) {
        return make_error(ErrorCode::invalid_argument, fmt::format("rule '{}' has no parent", rule->name));
      }
      auto child = escape_identity(out.identity);
      if (!child) {
        return make_error(ErrorCode::invalid_argument,
                          fmt::format("rule '{}': identity: {}", rule->name, child.error().message));
      }
      child_part.reserve(rule_key.size() + 1 + child->size());
      child_part += rule_key;
      child_part += ':';
      child_part += *child;
      slot_identity = app.parent;
    }
    const std::string_view child_key = child_part.empty() ? rule_key : std::string_view(child_part);
    out.limits.reserve(policy->size() + (app.parent.empty() ? 0 : rule->parent->limits.size()));
    std::size_t limits_used = 0;  // of out.limits, filled
    bool holds_slots = false;
    Micros slot_ttl = 0;
    for (const auto& named : *policy) {
      if (named.limit.algorithm == algorithms::Algorithm::concurrency) {
        holds_slots = holds_slots || out.cost > 0;
        slot_ttl = std::max(slot_ttl, named.limit.period);
      }
      if (auto ok = algorithms::validate_cost(named.limit, item_cost(named.limit, out.cost)); !ok) {
        return make_error(ErrorCode::invalid_argument,
                          fmt::format("rule '{}': {}", rule->name, ok.error().message));
      }
      // Policy "<rule>[.<tier>][.<limit>]", key suffix "[<tier>][:<limit>]".
      LimitOutcome& lo = next_limit(out.limits, limits_used);
      std::string suffix;
      lo.policy_name = rule->name;
      if (!out.tier.empty()) {
        suffix = out.tier;
        lo.policy_name += '.';
        lo.policy_name += out.tier;
      }
      // Limits given with the application are counted on the keys of the rule's own limits
      // of the same names, named whenever the rule has several (a subset of one keeps its name).
      if (policy->size() > 1 || (app.limits != nullptr && rule->limits.size() > 1)) {
        if (!suffix.empty()) suffix += ':';
        suffix += named.name;
        lo.policy_name += '.';
        lo.policy_name += named.name;
      }
      if (auto key = append_key(lo.key, config_.prefix, slot_identity, child_key, suffix); !key) {
        return make_error(ErrorCode::invalid_argument,
                          fmt::format("rule '{}': {}", rule->name, key.error().message));
      }
      lo.limit = named.limit;
    }
    if (!app.parent.empty()) {
      // The parent's limits: "<rule>.parent[.<limit>]", keys <prefix>:{<parent>}:<rule>:parent[:<limit>].
      Policy parent_scaled;
      if (parent_override != nullptr) {
        parent_scaled = scale_policy(rule->parent->limits, parent_override->factor, rule->cost);
        out.parent_factor = parent_override->factor;
      }
      const Policy& parent = parent_override != nullptr ? parent_scaled : rule->parent->limits;
      for (const auto& named : parent) {
        if (named.limit.algorithm == algorithms::Algorithm::concurrency) {
          holds_slots = holds_slots || out.cost > 0;
          slot_ttl = std::max(slot_ttl, named.limit.period);
        }
        if (auto ok = algorithms::validate_cost(named.limit, item_cost(named.limit, out.cost)); !ok) {
          return make_error(ErrorCode::invalid_argument,
                            fmt::format("rule '{}': parent: {}", rule->name, ok.error().message));
        }
        LimitOutcome& lo = next_limit(out.limits, limits_used);
        lo.parent = true;
        lo.policy_name = rule->name;
        lo.policy_name += ".parent";
        std::string suffix = "parent";
        if (parent.size() > 1) {
          lo.policy_name += '.';
          lo.policy_name += named.name;
          suffix += ':';
          suffix += named.name;
        }
        if (auto key = append_key(lo.key, config_.prefix, app.parent, rule_key, suffix); !key) {
          return make_error(ErrorCode::invalid_argument,
                            fmt::format("rule '{}': parent: {}", rule->name, key.error().message));
        }
        lo.limit = named.limit;
      }
    }
    out.limits.resize(limits_used);
    if (holds_slots && app.reservation.empty() && !rule->shadow) {
      return make_error(ErrorCode::invalid_argument,
                        fmt::format("rule '{}' has a concurrency limit: a request holds its slot under a "
                                    "reservation, released when it ends (check it with reserve)",
                                    rule->name));
    }
    if (!app.reservation.empty()) {
      if (rule->shadow) {
        return make_error(ErrorCode::invalid_argument,
                          fmt::format("rule '{}' is a shadow rule: it reserves nothing", rule->name));
      }
      if (!prepared->reservation.empty()) {
        return make_error(ErrorCode::invalid_argument, "one evaluation holds at most one reservation");
      }
      if (rule->on_limit == OnLimit::delay) {
        return make_error(ErrorCode::invalid_argument,
                          fmt::format("rule '{}' delays its requests: it reserves nothing", rule->name));
      }
      if (!valid_reservation_id(app.reservation)) {
        return make_error(ErrorCode::invalid_argument, "a reservation id is 32 lowercase hex digits");
      }
      for (const auto& lo : out.limits) {
        if (!algorithms::reservable(lo.limit.algorithm)) {
          return make_error(ErrorCode::invalid_argument,
                            fmt::format("rule '{}': {} limits cannot be reserved (token bucket and fixed "
                                        "window can)",
                                        rule->name, algorithms::to_string(lo.limit.algorithm)));
        }
      }
      auto record = reservation_record(slot_identity, rule->name, app.reservation);
      if (!record) return std::unexpected(std::move(record.error()));
      prepared->reservation = std::move(app.reservation);
      prepared->reserving = enforcing_used - 1;
      // The record outlives the slots it holds, so that their release finds it.
      prepared->reservation_record = {std::move(*record), std::max(app.reservation_ttl, slot_ttl),
                                      items_used, out.limits.size()};
    }
    if (!rule->shadow) {
      const Micros max_delay = rule->on_limit == OnLimit::delay ? rule->max_delay : 0;
      for (const auto& lo : out.limits) {
        store::CheckItem& item = next_of(prepared->items, items_used);
        std::string key = std::move(item.key);
        key.assign(lo.key);
        item = store::CheckItem{std::move(key), lo.limit, item_cost(lo.limit, out.cost), max_delay, rule->lease};
      }
    }
  }
  enforcing.resize(enforcing_used);
  prepared->items.resize(items_used);
  rules.clear();
  ApplicationLists::give(std::move(rules));
  return prepared;
}

Result<RuleOutcome> Limiter::keys_of(AppliedRule application) const {
  application.cost = 0;
  std::vector<AppliedRule> apps;
  apps.push_back(std::move(application));
  auto prepared = prepare(std::move(apps));
  if (!prepared) return std::unexpected(std::move(prepared.error()));
  Prepared& p = **prepared;
  return std::move(p.enforcing().empty() ? p.shadow.front() : p.enforcing().front());
}

void Limiter::inspect(AppliedRule application, std::function<void(Result<RuleOutcome>)> done) {
  auto outcome = keys_of(std::move(application));
  if (!outcome) return done(std::unexpected(std::move(outcome.error())));
  std::vector<store::CheckItem> items;
  items.reserve(outcome->limits.size());
  for (const auto& lo : outcome->limits) items.push_back(store::CheckItem{lo.key, lo.limit, 0});
  auto held = std::make_shared<RuleOutcome>(std::move(*outcome));
  store_->check(std::move(items), now(),
                [held, keep_alive = weak_from_this().lock(), done = std::move(done)](Result<store::CheckOutcome> r) {
                  if (!r) return done(std::unexpected(std::move(r.error())));
                  if (r->items.size() != held->limits.size()) {
                    return done(make_error(ErrorCode::protocol, "the store answered another number of limits"));
                  }
                  for (std::size_t i = 0; i < r->items.size(); ++i) held->limits[i].decision = r->items[i];
                  held->decision = r->decision;
                  done(std::move(*held));
                });
}

void Limiter::reset(AppliedRule application, std::function<void(Result<ResetOutcome>)> done) {
  auto outcome = keys_of(std::move(application));
  if (!outcome) return done(std::unexpected(std::move(outcome.error())));
  auto held = std::make_shared<ResetOutcome>();
  // A parent's keys are its children's too: a reset of one identity leaves them.
  for (auto& lo : outcome->limits) {
    if (!lo.parent) held->keys.push_back(std::move(lo.key));
  }
  if (local_) local_->reset(held->keys, [](Result<std::int64_t>) {});
  store_->reset(held->keys, [held, keep_alive = weak_from_this().lock(), done = std::move(done)](Result<std::int64_t> r) {
    if (!r) return done(std::unexpected(std::move(r.error())));
    held->existed = *r;
    done(std::move(*held));
  });
}

void Limiter::account(const RuleOutcome& outcome, Micros latency) {
  const std::size_t index = rule_index(outcome.rule);
  const auto& d = outcome.decision;
  Outcome o = d.allowed ? Outcome::allowed : Outcome::denied;
  if (outcome.by_failure_policy) {
    o = Outcome::failure_policy;
  } else if (outcome.shadow && !d.allowed) {
    o = Outcome::shadow_denied;
  }
  metrics_->record_decision(index, o);
  if (o == Outcome::denied) top_denied_->record(index, outcome.identity, steady_clock_->steady());
  if (d.allowed && d.limit > 0 && d.remaining * 10 < d.limit) metrics_->record_near_limit(index);
  if (d.allowed && d.delay > 0) metrics_->record_delayed(index, d.delay);

  DecisionRecord r;
  r.rule = outcome.rule->name;
  r.identity = outcome.identity;
  r.key = outcome.limits.empty()
              ? std::string_view{}
              : std::string_view(outcome.limits[outcome.binding].key);
  r.tier = outcome.tier;
  r.allowed = d.allowed;
  r.shadow = outcome.shadow;
  r.by_failure_policy = outcome.by_failure_policy;
  r.limit = d.limit;
  r.remaining = d.remaining;
  r.retry_after_ms = (d.retry_after + kMicrosPerMilli - 1) / kMicrosPerMilli;
  r.delay_ms = (d.delay + kMicrosPerMilli - 1) / kMicrosPerMilli;
  r.latency_us = latency;
  if (log_->record(r) == DecisionLog::Written::suppressed) metrics_->record_log_suppressed(1);
}

std::optional<Micros> Limiter::now() const {
  if (clock_ == nullptr) return std::nullopt;
  return clock_->now();
}

Result<std::vector<Decision>> Limiter::fall_back(const Prepared& prepared, const Error& error) {
  std::vector<Decision> decisions(prepared.item_count);
  // A rule denied by its policy keeps the others from consuming: local rules only peek.
  const bool any_deny = std::any_of(prepared.enforcing().begin(), prepared.enforcing().end(),
                                    [](const RuleOutcome& r) { return r.rule->on_store_error == FailureMode::deny; });
  // The batch went to the store; each rule's items are rebuilt from its outcome. The local
  // rules' items are checked together, all-or-nothing, with their positions in the batch.
  std::vector<store::CheckItem> local_items;
  std::vector<std::size_t> local_pos;
  std::vector<store::CheckItem> items;
  std::size_t pos = 0;
  for (const auto& rule : prepared.enforcing()) {
    const FailureMode mode = rule.rule->on_store_error;
    if (mode == FailureMode::local) {
      // Slots are not held locally: the local count of a concurrency limit is only peeked.
      for (const auto& lo : rule.limits) {
        local_items.push_back({lo.key, lo.limit, any_deny ? 0 : unheld_cost(lo.limit, rule.cost)});
        local_pos.push_back(pos++);
      }
      continue;
    }
    items.clear();
    for (const auto& lo : rule.limits) items.push_back({lo.key, lo.limit, item_cost(lo.limit, rule.cost)});
    auto answer = answer_by_policy(items, error, mode, policy_);
    if (!answer) return std::unexpected(answer.error());
    for (const auto& d : *answer) decisions[pos++] = d;
  }
  if (!local_items.empty()) {
    auto answer = answer_by_policy(local_items, error, FailureMode::local, policy_, now());
    if (!answer) return std::unexpected(answer.error());
    for (std::size_t i = 0; i < answer->size(); ++i) decisions[local_pos[i]] = (*answer)[i];
  }
  return decisions;
}

void Limiter::finish(Prepared& prepared, Result<store::CheckOutcome> outcome, Micros latency) {
  Evaluation& ev = *prepared.result;  // its rules are the enforcing outcomes
  ev.latency = latency;
  std::vector<Decision> decisions;
  bool recorded = false;
  if (outcome) {
    recorded = outcome->recorded;
    decisions = std::move(outcome->items);
  } else {
    metrics_->record_store_error(outcome.error().code);
    auto fallback = fall_back(prepared, outcome.error());
    if (!fallback) {
      prepared.result = std::unexpected(std::move(fallback.error()));
      return;
    }
    decisions = std::move(*fallback);
    ev.by_failure_policy = true;
    ev.store_error = outcome.error();
    for (auto& rule : ev.rules) rule.by_failure_policy = true;
    if (std::uint64_t suppressed = 0; policy_log_.admit(suppressed)) {
      std::string rules;
      for (const auto& rule : ev.rules) {
        if (!rules.empty()) rules += ", ";
        rules += fmt::format("{} ({})", rule.rule->name, to_string(rule.rule->on_store_error));
      }
      spdlog::warn("store failed ({}): answered by the failure policy: {}{}", outcome.error().message,
                   rules,
                   suppressed > 0 ? fmt::format(" ({} similar lines left out)", suppressed)
                                  : std::string());
    }
  }
  if (decisions.size() != prepared.item_count) {
    prepared.result = make_error(ErrorCode::protocol, "store answered a different number of decisions");
    return;
  }
  std::size_t pos = 0;
  for (auto& rule : ev.rules) {
    const std::span<const Decision> mine(decisions.data() + pos, rule.limits.size());
    for (auto& lo : rule.limits) lo.decision = decisions[pos++];
    const auto combined = algorithms::combine_with_binding(mine);
    rule.decision = combined.decision;
    rule.binding = combined.binding;
  }
  ev.decision = algorithms::combine(decisions);
  ev.allowed = ev.decision.allowed;
  if (recorded && ev.allowed && !prepared.reservation.empty()) {
    ev.reservation = std::move(prepared.reservation);
    const RuleOutcome& reserving = ev.rules[prepared.reserving];
    metrics_->record_reservation(rule_index(reserving.rule), Reservation::reserved, reserving.cost);
  }
  for (const auto& rule : ev.rules) account(rule, latency);
}

void Limiter::run_shadow(PreparedRef prepared, std::size_t index, std::function<void(const RuleOutcome&)> then) {
  auto& rule = prepared->shadow[index];
  std::vector<store::CheckItem> items;
  items.reserve(rule.limits.size());
  // A shadow rule holds no slot: its concurrency limits are peeked.
  for (const auto& lo : rule.limits) items.push_back({lo.key, lo.limit, unheld_cost(lo.limit, rule.cost), 0, rule.rule->lease});
  const Micros t0 = steady_clock_->steady();
  // The store calls back exactly once: the callback adopts the reference it carries.
  store_->check(std::move(items), now(),
                [this, keep_alive = weak_from_this().lock(), held = prepared.release(), index, t0,
                 then = std::move(then)](Result<store::CheckOutcome> r) {
                  const PreparedRef prepared(held);
                  const Micros latency = steady_clock_->steady() - t0;
                  metrics_->record_store_latency(latency);
                  auto& rule = prepared->shadow[index];
                  if (r) {
                    for (std::size_t i = 0; i < rule.limits.size() && i < r->items.size(); ++i) {
                      rule.limits[i].decision = r->items[i];
                    }
                    rule.decision = r->decision;
                    rule.binding = algorithms::combine_with_binding(r->items).binding;
                  } else {
                    // A shadow rule never acts, so its failure policy is only recorded.
                    metrics_->record_store_error(r.error().code);
                    rule.by_failure_policy = true;
                    rule.decision.allowed = true;
                  }
                  account(rule, latency);
                  if (then) then(rule);
                });
}

void Limiter::run_enforcing(PreparedRef p, EvaluationCallback done) {
  if (p->items.empty()) {
    done(Result<Evaluation>());
    return;
  }
  p->limiter = this;
  p->keep_alive = weak_from_this().lock();
  p->started = steady_clock_->steady();
  p->done = std::move(done);
  p->item_count = p->items.size();
  auto items = std::move(p->items);
  const bool reserves = !p->reservation.empty();
  store::ReservationRecord record = reserves ? p->reservation_record : store::ReservationRecord{};
  // The store calls back exactly once: the callback adopts the reference it carries (a
  // pointer, which std::function holds without allocating).
  auto answer = [held = p.release()](Result<store::CheckOutcome> r) {
    const PreparedRef p(held);
    Limiter& self = *p->limiter;
    const Micros latency = self.steady_clock_->steady() - p->started;
    self.metrics_->record_store_latency(latency);
    self.finish(*p, std::move(r), latency);
    const EvaluationCallback done = std::move(p->done);
    done(std::move(p->result));
  };
  if (reserves) {
    // A check that reserves is neither delayed nor leased: the record holds what the store took.
    for (auto& item : items) {
      item.max_delay = 0;
      item.lease = {};
    }
    store_->reserve(std::move(record), std::move(items), now(), std::move(answer));
    return;
  }
  store_->check(std::move(items), now(), std::move(answer));
}

void Limiter::evaluate(std::vector<AppliedRule> rules, EvaluationCallback done,
                       EvaluateOptions options) {
  auto prepared = prepare(std::move(rules));
  if (!prepared) {
    done(std::unexpected(prepared.error()));
    return;
  }
  PreparedRef p = std::move(*prepared);
  if (!options.with_shadow || p->shadow.empty()) {
    for (std::size_t i = 0; i < p->shadow.size(); ++i) run_shadow(p.share(), i, {});
    run_enforcing(std::move(p), std::move(done));
    return;
  }
  // The answer waits for every check: the last of them to arrive (on whichever thread)
  // answers. Each writes only its own slot before arriving.
  struct Join {
    std::atomic<std::size_t> pending;
    std::optional<Result<Evaluation>> result;
    std::vector<RuleOutcome> shadow;
    EvaluationCallback done;
  };
  auto join = std::make_shared<Join>();
  join->pending.store(p->shadow.size() + 1, std::memory_order_relaxed);
  join->shadow.resize(p->shadow.size());
  join->done = std::move(done);
  auto arrive = [](const std::shared_ptr<Join>& j) {
    if (j->pending.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
    auto result = std::move(*j->result);
    if (result) result->shadow = std::move(j->shadow);
    auto done = std::move(j->done);
    done(std::move(result));
  };
  for (std::size_t i = 0; i < p->shadow.size(); ++i) {
    run_shadow(p.share(), i, [join, i, arrive](const RuleOutcome& outcome) {
      join->shadow[i] = outcome;
      arrive(join);
    });
  }
  run_enforcing(std::move(p), [join, arrive](Result<Evaluation>&& r) {
    join->result.emplace(std::move(r));
    arrive(join);
  });
}

Result<Evaluation> Limiter::evaluate_sync(std::vector<AppliedRule> rules,
                                          EvaluateOptions options) {
  std::promise<Result<Evaluation>> promise;
  auto future = promise.get_future();
  evaluate(
      std::move(rules),
      [&promise](Result<Evaluation>&& r) { promise.set_value(std::move(r)); }, options);
  return future.get();
}

Result<AppliedRule> Limiter::application(std::string_view rule_name, std::string_view identity,
                                         std::int64_t cost, std::string_view tier, std::string_view parent) const {
  const Rule* rule = find_rule(rule_name);
  if (rule == nullptr) {
    return make_error(ErrorCode::invalid_argument,
                      fmt::format("unknown rule '{}'", rule_name.substr(0, 64)));
  }
  if (cost < 0) {
    return make_error(ErrorCode::invalid_argument, fmt::format("cost must be >= 0, got {}", cost));
  }
  if (rule->parent && parent.empty()) {
    return make_error(ErrorCode::invalid_argument,
                      fmt::format("rule '{}' has a parent: give the parent's identity", rule->name));
  }
  if (!rule->parent && !parent.empty()) {
    return make_error(ErrorCode::invalid_argument, fmt::format("rule '{}' has no parent", rule->name));
  }
  AppliedRule app;
  app.rule = rule;
  app.identity = std::string(identity);
  app.parent = std::string(parent);
  app.cost = cost;
  app.ip_fallback = identity.starts_with("ip:") && rule->identity.kind != IdentityKind::ip;
  if (rule->tiered) {
    if (!tier.empty()) {
      app.tier = std::string(tier);
    } else if (identity.starts_with("user:")) {
      app.tier = config_.tiers.resolve(identity.substr(5), std::nullopt);
    }
  }
  return app;
}

void Limiter::check(std::string_view rule_name, std::string_view identity, std::int64_t cost,
                    VerdictCallback done, std::string_view tier, std::string_view parent) {
  auto app = application(rule_name, identity, cost, tier, parent);
  if (!app) {
    done(std::unexpected(app.error()));
    return;
  }
  const Rule* rule = app->rule;
  std::vector<AppliedRule> apps;
  apps.push_back(std::move(*app));

  if (rule->shadow) {
    auto prepared = prepare(std::move(apps));
    if (!prepared) {
      done(std::unexpected(prepared.error()));
      return;
    }
    run_shadow(std::move(*prepared), 0, [done = std::move(done)](const RuleOutcome& o) {
      Verdict v;
      v.decision = o.decision;
      v.decision.allowed = true;  // a shadow rule never rejects
      v.decision.retry_after = 0;
      v.by_failure_policy = o.by_failure_policy;
      done(std::move(v));
    });
    return;
  }
  evaluate(std::move(apps), [done = std::move(done)](Result<Evaluation>&& r) {
    if (!r) {
      done(std::unexpected(r.error()));
      return;
    }
    done(static_cast<Verdict&&>(*r));  // the Evaluation's Verdict part
  });
}

std::string new_reservation_id() {
  thread_local std::mt19937_64 random = [] {
    std::random_device device;
    std::seed_seq seed{device(), device(), device(), device(), device(), device(), device(), device()};
    return std::mt19937_64(seed);
  }();
  return fmt::format("{:016x}{:016x}", random(), random());
}

bool valid_reservation_id(std::string_view id) noexcept {
  return id.size() == 32 && std::all_of(id.begin(), id.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

Result<std::string> Limiter::reservation_record(std::string_view identity, std::string_view rule,
                                                std::string_view id) const {
  return make_key(config_.prefix, identity, rule, fmt::format("reservation:{}", id));
}

void Limiter::reserve(std::string_view rule_name, std::string_view identity, std::int64_t estimate, Micros ttl,
                      VerdictCallback done, std::string_view tier, std::string_view parent) {
  auto app = application(rule_name, identity, estimate, tier, parent);
  if (!app) return done(std::unexpected(app.error()));
  app->reservation = new_reservation_id();
  app->reservation_ttl = ttl;
  std::vector<AppliedRule> apps;
  apps.push_back(std::move(*app));
  evaluate(std::move(apps), [done = std::move(done)](Result<Evaluation>&& r) {
    if (!r) return done(std::unexpected(r.error()));
    done(static_cast<Verdict&&>(*r));
  });
}

Result<Limiter::Held> Limiter::held(AppliedRule application, std::string_view id, std::int64_t cost) const {
  if (!valid_reservation_id(id)) {
    return make_error(ErrorCode::invalid_argument, "a reservation id is 32 lowercase hex digits");
  }
  // The record lives in the slot of the application's keys: its parent's, when it has one.
  std::string slot_identity = application.parent.empty() ? application.identity : application.parent;
  auto outcome = keys_of(std::move(application));
  if (!outcome) return std::unexpected(std::move(outcome.error()));
  auto record = reservation_record(slot_identity, outcome->rule->name, id);
  if (!record) return std::unexpected(std::move(record.error()));
  Held h;
  h.record = std::move(*record);
  h.rule = outcome->rule;
  h.identity = std::move(outcome->identity);
  h.items.reserve(outcome->limits.size());
  for (auto& lo : outcome->limits) {
    h.items.push_back(store::CheckItem{std::move(lo.key), lo.limit, cost});
    if (lo.limit.algorithm == algorithms::Algorithm::concurrency) h.slot_ttl = std::max(h.slot_ttl, lo.limit.period);
  }
  return h;
}

void Limiter::log_store_failure(std::string_view what, const Held& h, const Error& error) {
  if (std::uint64_t suppressed = 0; settle_log_.admit(suppressed)) {
    spdlog::warn("reservation of {} under rule '{}' not {} ({}){}", escape_identity(h.identity).value_or("(invalid identity)"),
                 h.rule->name, what, error.message,
                 suppressed > 0 ? fmt::format(" ({} similar lines left out)", suppressed) : std::string());
  }
}

void Limiter::settle(AppliedRule application, std::string_view id, std::optional<std::int64_t> actual,
                     std::function<void(Result<bool>)> done) {
  if (actual && (*actual < 0 || *actual > algorithms::kMaxCharged)) {
    return done(make_error(ErrorCode::invalid_argument,
                           fmt::format("the actual cost must be between 0 and 2^41, got {}", *actual)));
  }
  auto h = held(std::move(application), id, actual.value_or(store::kAsEstimated));
  if (!h) return done(std::unexpected(std::move(h.error())));
  // Taken out before `h` moves into the callback.
  auto items = std::move(h->items);
  auto record = std::move(h->record);
  const std::string_view what = actual ? "settled (its estimate stays charged)"
                                       : "released (its slots are reclaimed when they expire)";
  store_->settle(std::move(record), std::move(items), now(),
                 [this, keep_alive = weak_from_this().lock(), h = std::move(*h), actual, what,
                  done = std::move(done)](Result<bool> r) {
                   const std::size_t index = rule_index(h.rule);
                   if (r) {
                     metrics_->record_reservation(
                         index, !*r ? Reservation::unknown : actual ? Reservation::settled : Reservation::released,
                         actual.value_or(0));
                   } else if (r.error().code != ErrorCode::invalid_argument) {
                     metrics_->record_reservation(index, Reservation::failed);
                     log_store_failure(what, h, r.error());
                   }
                   done(std::move(r));
                 });
}

void Limiter::renew(AppliedRule application, std::string_view id, Micros ttl, std::function<void(Result<bool>)> done) {
  auto h = held(std::move(application), id, 0);
  if (!h) return done(std::unexpected(std::move(h.error())));
  if (ttl < 1 || ttl > algorithms::kMaxHorizon) {
    return done(make_error(ErrorCode::invalid_argument,
                           fmt::format("a reservation's ttl must be between 1 and 2^51 us, got {}", ttl)));
  }
  auto items = std::move(h->items);
  auto record = std::move(h->record);
  const Micros record_ttl = std::max(ttl, h->slot_ttl);
  store_->renew(std::move(record), std::move(items), record_ttl, now(),
                [this, keep_alive = weak_from_this().lock(), h = std::move(*h), done = std::move(done)](Result<bool> r) {
                  const std::size_t index = rule_index(h.rule);
                  if (r) {
                    metrics_->record_reservation(index, *r ? Reservation::renewed : Reservation::lost);
                  } else if (r.error().code != ErrorCode::invalid_argument) {
                    metrics_->record_reservation(index, Reservation::failed);
                    log_store_failure("renewed (its slots expire unless a later heartbeat renews them)", h, r.error());
                  }
                  done(std::move(r));
                });
}

Result<Verdict> Limiter::check_sync(std::string_view rule_name, std::string_view identity,
                                    std::int64_t cost, std::string_view tier) {
  std::promise<Result<Verdict>> promise;
  auto future = promise.get_future();
  check(
      rule_name, identity, cost, [&promise](Result<Verdict> r) { promise.set_value(std::move(r)); },
      tier);
  return future.get();
}

void Limiter::write_metrics(MetricsWriter& out) const {
  metrics_->write(out, store_->health(), store_->kind());
  overrides_->write_metrics(out);
  store_->write_metrics(out);
}

void Limiter::refresh_overrides(std::function<void(Result<bool>)> done) {
  // The table lives as long as the refresh, whichever limiter holds it by then.
  std::shared_ptr<Overrides> overrides = overrides_;
  Overrides& table = *overrides;
  table.refresh(*store_, overrides_key_, [overrides = std::move(overrides), done = std::move(done)](Result<bool> r) {
    done(std::move(r));
  });
}

void Limiter::set_override(Override o, std::function<void(Result<store::TableWrite>)> done) {
  if (find_rule(o.rule) == nullptr) {
    return done(make_error(ErrorCode::invalid_argument, fmt::format("unknown rule '{}'", o.rule.substr(0, 64))));
  }
  if (auto ok = validate_override(o); !ok) return done(std::unexpected(std::move(ok.error())));
  std::string field = override_field(o.rule, o.identity);
  std::string value = override_value(o);
  store_->write_table(overrides_key_, std::move(field), std::move(value), kMaxOverrides,
                      [this, keep_alive = weak_from_this().lock(), done = std::move(done)](Result<store::TableWrite> written) mutable {
                        if (!written) return done(std::move(written));
                        // In effect here before the answer; a failed refresh is logged, retried by the next.
                        refresh_overrides([written = std::move(written), done = std::move(done)](Result<bool>) mutable {
                          done(std::move(written));
                        });
                      });
}

void Limiter::remove_override(std::string_view rule, std::string_view identity, std::function<void(Result<bool>)> done) {
  if (!valid_name(rule)) return done(make_error(ErrorCode::invalid_argument, "`rule` is not a rule's name"));
  if (auto escaped = escape_identity(identity); !escaped) {
    return done(make_error(ErrorCode::invalid_argument, fmt::format("identity: {}", escaped.error().message)));
  }
  store_->write_table(overrides_key_, override_field(rule, identity), std::nullopt, kMaxOverrides,
                      [this, keep_alive = weak_from_this().lock(), done = std::move(done)](Result<store::TableWrite> written) mutable {
                        if (!written) return done(std::unexpected(std::move(written.error())));
                        const bool existed = written->existed;
                        refresh_overrides([existed, done = std::move(done)](Result<bool>) { done(existed); });
                      });
}

void Limiter::list_overrides(std::function<void(Result<std::vector<Override>>)> done) const {
  // A version never held (-1): the whole table.
  store_->read_table(overrides_key_, -1, [done = std::move(done)](Result<std::optional<store::SharedTable>> read) {
    if (!read) return done(std::unexpected(std::move(read.error())));
    std::vector<Override> out;
    if (*read) {
      for (const auto& [field, value] : (*read)->entries) {
        if (auto o = parse_override(field, value)) out.push_back(std::move(*o));
      }
    }
    std::sort(out.begin(), out.end(), [](const Override& a, const Override& b) {
      return std::tie(a.rule, a.identity) < std::tie(b.rule, b.identity);
    });
    done(std::move(out));
  });
}

std::string Limiter::metrics_text() const {
  MetricsWriter out;
  write_metrics(out);
  return out.take();
}

}  // namespace ratekeeper::limiter
