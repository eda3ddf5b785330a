#include "ratekeeper/limiter/limiter.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <future>
#include <stdexcept>
#include <unordered_set>

#include "ratekeeper/algorithms/step.hpp"
#include "ratekeeper/limiter/keys.hpp"

namespace ratekeeper::limiter {

using algorithms::Decision;

namespace {

Micros steady_micros() {
  using namespace std::chrono;
  return duration_cast<microseconds>(steady_clock::now().time_since_epoch()).count();
}

bool valid_name(std::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '-' || c == '.';
    if (!ok) return false;
  }
  return true;
}

void validate_policy(const std::string& where, const Policy& policy, std::int64_t cost) {
  if (policy.empty()) throw std::invalid_argument(where + ": the policy has no limit");
  std::unordered_set<std::string> names;
  for (const auto& l : policy) {
    if (policy.size() > 1 && !valid_name(l.name)) {
      throw std::invalid_argument(fmt::format(
          "{}: limit name '{}' must be 1-64 characters of A-Z a-z 0-9 _ - .", where, l.name));
    }
    if (policy.size() > 1 && !names.insert(l.name).second) {
      throw std::invalid_argument(fmt::format("{}: duplicate limit name '{}'", where, l.name));
    }
    if (auto ok = algorithms::validate_cost(l.limit, cost); !ok) {
      throw std::invalid_argument(fmt::format("{}: {}", where, ok.error().message));
    }
  }
}

// The binding limit of a rule's decisions, as algorithms::combine picks it.
std::size_t binding_index(const std::vector<LimitOutcome>& limits) {
  const bool allowed =
      std::all_of(limits.begin(), limits.end(), [](const auto& l) { return l.decision.allowed; });
  std::size_t best = 0;
  for (std::size_t i = 1; i < limits.size(); ++i) {
    const auto& d = limits[i].decision;
    const auto& b = limits[best].decision;
    if (allowed ? d.remaining < b.remaining : d.retry_after > b.retry_after) best = i;
  }
  return best;
}

}  // namespace

struct Limiter::PreparedRule {
  const Rule* rule = nullptr;
  std::size_t index = 0;  // in config_.rules
  RuleOutcome outcome;    // identity, tier, limits (policy names, limits, keys) filled in
  std::int64_t cost = 1;
  FailureMode mode = FailureMode::allow;
};

struct Limiter::Prepared {
  std::vector<PreparedRule> enforcing;
  std::vector<PreparedRule> shadow;
  std::vector<store::CheckItem> items;  // enforcing items, rule by rule, limit by limit
  std::size_t item_count = 0;           // items.size() before they were handed to the store
};

Limiter::Limiter(LimiterConfig config, store::Store& store, const Clock* clock)
    : config_(std::move(config)), store_(&store), clock_(clock) {
  if (config_.prefix.empty()) throw std::invalid_argument("key prefix must not be empty");
  if (config_.instances < 1) throw std::invalid_argument("instances must be >= 1");
  std::unordered_set<std::string> names;
  std::vector<std::string> rule_names;
  bool any_tiered = false;
  for (const auto& rule : config_.rules) {
    const auto where = fmt::format("rule '{}'", rule.name);
    if (!valid_name(rule.name)) {
      throw std::invalid_argument(
          fmt::format("{}: name must be 1-64 characters of A-Z a-z 0-9 _ - .", where));
    }
    if (!names.insert(rule.name).second) throw std::invalid_argument(where + ": duplicate name");
    if (rule.cost < 0) throw std::invalid_argument(where + ": cost must be >= 0");
    if (rule.tiered) {
      any_tiered = true;
      if (!rule.limits.empty()) {
        throw std::invalid_argument(where + ": a tiered rule takes its limits from its tier");
      }
      for (const auto& [tier, policy] : config_.tiers.levels) {
        validate_policy(fmt::format("{} tier '{}'", where, tier), policy, rule.cost);
      }
    } else {
      validate_policy(where, rule.limits, rule.cost);
    }
    if (!rule.ip_limits.empty()) validate_policy(where + " ip_limits", rule.ip_limits, rule.cost);
    if (rule.identity.kind != IdentityKind::ip && rule.identity.header.empty()) {
      throw std::invalid_argument(where + ": identity needs a header");
    }
    rule_names.push_back(rule.name);
  }
  if (any_tiered && !config_.tiers.levels.contains(config_.tiers.default_tier)) {
    throw std::invalid_argument(
        fmt::format("default tier '{}' is not a defined tier", config_.tiers.default_tier));
  }
  for (const auto& [tier, policy] : config_.tiers.levels) {
    if (!valid_name(tier)) {
      throw std::invalid_argument(
          fmt::format("tier '{}': name must be 1-64 characters of A-Z a-z 0-9 _ - .", tier));
    }
  }
  metrics_ = std::make_unique<Metrics>(std::move(rule_names));
  log_ = std::make_unique<DecisionLog>(config_.decision_log);
  allow_ = std::make_unique<GuardedStore>(store, FailurePolicy{FailureMode::allow, 1, 0});
  deny_ = std::make_unique<GuardedStore>(
      store, FailurePolicy{FailureMode::deny, 1, std::max<Micros>(config_.deny_retry_after, 1)});
  local_ = std::make_unique<GuardedStore>(
      store, FailurePolicy{FailureMode::local, config_.instances, config_.deny_retry_after});
}

Limiter::~Limiter() = default;

const Rule* Limiter::find_rule(std::string_view name) const noexcept {
  for (const auto& rule : config_.rules) {
    if (rule.name == name) return &rule;
  }
  return nullptr;
}

std::size_t Limiter::rule_index(const Rule* rule) const noexcept {
  return static_cast<std::size_t>(rule - config_.rules.data());
}

Result<std::shared_ptr<Limiter::Prepared>> Limiter::prepare(
    std::vector<Application> applications) const {
  auto prepared = std::make_shared<Prepared>();
  for (auto& app : applications) {
    const Rule* rule = app.rule;
    const std::less<const Rule*> before;
    if (rule == nullptr || before(rule, config_.rules.data()) ||
        !before(rule, config_.rules.data() + config_.rules.size())) {
      return make_error(ErrorCode::invalid_argument, "application without a rule of this limiter");
    }
    PreparedRule pr;
    pr.rule = rule;
    pr.index = rule_index(rule);
    pr.cost = app.cost.value_or(rule->cost);
    pr.mode = rule->on_store_error;
    pr.outcome.rule = rule;
    pr.outcome.shadow = rule->shadow;
    pr.outcome.identity = std::move(app.identity);

    const Policy* policy = &rule->limits;
    if (app.ip_fallback && !rule->ip_limits.empty()) {
      policy = &rule->ip_limits;
    } else if (rule->tiered) {
      pr.outcome.tier = app.tier.empty() ? config_.tiers.default_tier : std::move(app.tier);
      if (!config_.tiers.levels.contains(pr.outcome.tier)) {
        pr.outcome.tier = config_.tiers.default_tier;
      }
      policy = config_.tiers.policy(pr.outcome.tier);
      if (policy == nullptr) {
        return make_error(ErrorCode::invalid_argument,
                          fmt::format("rule '{}': no tier '{}'", rule->name, pr.outcome.tier));
      }
    }

    std::string rule_part = rule->name;
    if (rule->bucket == BucketScope::per_endpoint && !app.endpoint.empty()) {
      auto path = escape_identity(app.endpoint);
      if (!path) {
        return make_error(ErrorCode::invalid_argument,
                          fmt::format("rule '{}': path: {}", rule->name, path.error().message));
      }
      rule_part += ':';
      rule_part += *path;
    }
    for (const auto& named : *policy) {
      if (auto ok = algorithms::validate_cost(named.limit, pr.cost); !ok) {
        return make_error(ErrorCode::invalid_argument,
                          fmt::format("rule '{}': {}", rule->name, ok.error().message));
      }
      std::string suffix;
      std::string policy_name = rule->name;
      if (!pr.outcome.tier.empty()) {
        suffix = pr.outcome.tier;
        policy_name += '.' + pr.outcome.tier;
      }
      if (policy->size() > 1) {
        if (!suffix.empty()) suffix += ':';
        suffix += named.name;
        policy_name += '.' + named.name;
      }
      auto key = make_key(config_.prefix, pr.outcome.identity, rule_part, suffix);
      if (!key) {
        return make_error(ErrorCode::invalid_argument,
                          fmt::format("rule '{}': {}", rule->name, key.error().message));
      }
      LimitOutcome lo;
      lo.policy_name = std::move(policy_name);
      lo.limit = named.limit;
      lo.key = std::move(*key);
      pr.outcome.limits.push_back(std::move(lo));
    }
    if (rule->shadow) {
      prepared->shadow.push_back(std::move(pr));
    } else {
      for (const auto& lo : pr.outcome.limits) {
        prepared->items.push_back(store::CheckItem{lo.key, lo.limit, pr.cost});
      }
      prepared->enforcing.push_back(std::move(pr));
    }
  }
  return prepared;
}

void Limiter::account(const PreparedRule& pr, const RuleOutcome& outcome, Micros latency) {
  const auto& d = outcome.decision;
  Outcome o = d.allowed ? Outcome::allowed : Outcome::denied;
  if (outcome.by_failure_policy) {
    o = Outcome::failure_policy;
  } else if (outcome.shadow && !d.allowed) {
    o = Outcome::shadow_denied;
  }
  metrics_->record_decision(pr.index, o);
  if (d.allowed && d.limit > 0 && d.remaining * 10 < d.limit) metrics_->record_near_limit(pr.index);

  DecisionRecord r;
  r.rule = pr.rule->name;
  r.identity = outcome.identity;
  r.key = outcome.limits.empty()
              ? std::string_view{}
              : std::string_view(outcome.limits[binding_index(outcome.limits)].key);
  r.tier = outcome.tier;
  r.allowed = d.allowed;
  r.shadow = outcome.shadow;
  r.by_failure_policy = outcome.by_failure_policy;
  r.limit = d.limit;
  r.remaining = d.remaining;
  r.retry_after_ms = (d.retry_after + kMicrosPerMilli - 1) / kMicrosPerMilli;
  r.latency_us = latency;
  if (log_->record(r) == DecisionLog::Written::suppressed) metrics_->record_log_suppressed(1);
}

Result<std::vector<Decision>> Limiter::fall_back(Prepared& prepared, const Error& error) {
  std::vector<Decision> decisions(prepared.item_count);
  const bool any_deny = std::any_of(prepared.enforcing.begin(), prepared.enforcing.end(),
                                    [](const auto& r) { return r.mode == FailureMode::deny; });
  // Items of each mode, with their positions in the batch.
  std::vector<store::CheckItem> local_items;
  std::vector<std::size_t> local_pos;
  std::size_t pos = 0;
  for (auto& pr : prepared.enforcing) {
    // The batch went to the store; the rule's items are rebuilt from its outcome.
    std::vector<store::CheckItem> items;
    items.reserve(pr.outcome.limits.size());
    for (const auto& lo : pr.outcome.limits) items.push_back({lo.key, lo.limit, pr.cost});
    pr.outcome.by_failure_policy = true;
    if (pr.mode == FailureMode::local) {
      for (std::size_t i = 0; i < items.size(); ++i) {
        // A rule denied by its policy keeps the others from consuming: local rules only peek.
        if (any_deny) items[i].cost = 0;
        local_items.push_back(std::move(items[i]));
        local_pos.push_back(pos + i);
      }
    } else {
      GuardedStore& g = pr.mode == FailureMode::deny ? *deny_ : *allow_;
      auto v = g.fallback(std::move(items), std::nullopt, error);
      if (!v) return std::unexpected(v.error());
      for (std::size_t i = 0; i < v->items.size(); ++i) decisions[pos + i] = v->items[i];
    }
    pos += pr.outcome.limits.size();
  }
  if (!local_items.empty()) {
    std::optional<Micros> now;
    if (clock_ != nullptr) now = clock_->now();
    auto v = local_->fallback(std::move(local_items), now, error);
    if (!v) return std::unexpected(v.error());
    for (std::size_t i = 0; i < v->items.size(); ++i) decisions[local_pos[i]] = v->items[i];
  }
  return decisions;
}

Result<Evaluation> Limiter::finish(Prepared& prepared, Result<store::CheckOutcome> outcome,
                                   Micros latency) {
  Evaluation ev;
  ev.latency = latency;
  std::vector<Decision> decisions;
  if (outcome) {
    decisions = std::move(outcome->items);
  } else {
    metrics_->record_store_error(outcome.error().code);
    if (!outcome.error().is_store_failure()) return std::unexpected(outcome.error());
    auto fallback = fall_back(prepared, outcome.error());
    if (!fallback) return std::unexpected(fallback.error());
    decisions = std::move(*fallback);
    ev.by_failure_policy = true;
    ev.store_error = outcome.error();
  }
  if (decisions.size() != prepared.item_count) {
    return make_error(ErrorCode::protocol, "store answered a different number of decisions");
  }
  std::size_t pos = 0;
  for (auto& pr : prepared.enforcing) {
    std::vector<Decision> mine;
    for (auto& lo : pr.outcome.limits) {
      lo.decision = decisions[pos++];
      mine.push_back(lo.decision);
    }
    pr.outcome.decision = algorithms::combine(mine);
  }
  ev.decision = algorithms::combine(decisions);
  ev.allowed = ev.decision.allowed;
  for (auto& pr : prepared.enforcing) {
    account(pr, pr.outcome, latency);
    ev.rules.push_back(std::move(pr.outcome));
  }
  return ev;
}

void Limiter::run_shadow(std::shared_ptr<Prepared> prepared, std::size_t index,
                         std::function<void(const RuleOutcome&)> then) {
  auto& pr = prepared->shadow[index];
  std::vector<store::CheckItem> items;
  for (const auto& lo : pr.outcome.limits) items.push_back({lo.key, lo.limit, pr.cost});
  std::optional<Micros> now;
  if (clock_ != nullptr) now = clock_->now();
  const Micros t0 = steady_micros();
  store_->check(std::move(items), now,
                [this, prepared, index, t0, then = std::move(then)](Result<store::CheckOutcome> r) {
                  const Micros latency = steady_micros() - t0;
                  metrics_->record_store_latency(latency);
                  auto& pr = prepared->shadow[index];
                  if (r) {
                    for (std::size_t i = 0; i < pr.outcome.limits.size() && i < r->items.size();
                         ++i) {
                      pr.outcome.limits[i].decision = r->items[i];
                    }
                    pr.outcome.decision = r->decision;
                  } else {
                    // A shadow rule never acts, so its failure policy is only recorded.
                    metrics_->record_store_error(r.error().code);
                    pr.outcome.by_failure_policy = true;
                    pr.outcome.decision.allowed = true;
                  }
                  account(pr, pr.outcome, latency);
                  if (then) then(pr.outcome);
                });
}

void Limiter::evaluate(std::vector<Application> applications, EvaluationCallback done) {
  auto prepared = prepare(std::move(applications));
  if (!prepared) {
    done(std::unexpected(prepared.error()));
    return;
  }
  auto p = std::move(*prepared);
  for (std::size_t i = 0; i < p->shadow.size(); ++i) run_shadow(p, i, {});
  if (p->items.empty()) {
    done(Evaluation{});
    return;
  }
  std::optional<Micros> now;
  if (clock_ != nullptr) now = clock_->now();
  const Micros t0 = steady_micros();
  p->item_count = p->items.size();
  auto items = std::move(p->items);
  store_->check(std::move(items), now,
                [this, p, t0, done = std::move(done)](Result<store::CheckOutcome> r) {
                  const Micros latency = steady_micros() - t0;
                  metrics_->record_store_latency(latency);
                  done(finish(*p, std::move(r), latency));
                });
}

Result<Evaluation> Limiter::evaluate_sync(std::vector<Application> applications) {
  std::promise<Result<Evaluation>> promise;
  auto future = promise.get_future();
  evaluate(std::move(applications),
           [&promise](Result<Evaluation> r) { promise.set_value(std::move(r)); });
  return future.get();
}

void Limiter::check(std::string_view rule_name, std::string_view identity, std::int64_t cost,
                    VerdictCallback done, std::string_view tier) {
  const Rule* rule = find_rule(rule_name);
  if (rule == nullptr) {
    done(make_error(ErrorCode::invalid_argument,
                    fmt::format("unknown rule '{}'", rule_name.substr(0, 64))));
    return;
  }
  if (cost < 0) {
    done(make_error(ErrorCode::invalid_argument, fmt::format("cost must be >= 0, got {}", cost)));
    return;
  }
  Application app;
  app.rule = rule;
  app.identity = std::string(identity);
  app.cost = cost;
  app.ip_fallback = identity.starts_with("ip:") && rule->identity.kind != IdentityKind::ip;
  if (rule->tiered) {
    if (!tier.empty()) {
      app.tier = std::string(tier);
    } else if (identity.starts_with("user:")) {
      app.tier = config_.tiers.resolve(identity.substr(5), std::nullopt);
    }
  }
  std::vector<Application> apps;
  apps.push_back(std::move(app));

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
      for (const auto& l : o.limits) v.items.push_back(l.decision);
      v.by_failure_policy = o.by_failure_policy;
      done(std::move(v));
    });
    return;
  }
  evaluate(std::move(apps), [done = std::move(done)](Result<Evaluation> r) {
    if (!r) {
      done(std::unexpected(r.error()));
      return;
    }
    Verdict v;
    v.decision = r->decision;
    for (const auto& rule : r->rules) {
      for (const auto& l : rule.limits) v.items.push_back(l.decision);
    }
    v.by_failure_policy = r->by_failure_policy;
    v.store_error = r->store_error;
    done(std::move(v));
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

std::string Limiter::metrics_text() const {
  return metrics_->render(store_->health(), store_->kind());
}

}  // namespace ratekeeper::limiter
