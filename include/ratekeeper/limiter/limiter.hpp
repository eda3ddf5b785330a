#pragma once
// The Limiter: rules, keys, tiers, failure policies, metrics and the decision log over one
// Store. It knows nothing about HTTP: the middleware resolves identities and asks it.
//
// All enforcing rules that apply to one request are checked in ONE Store::check batch, so
// the request is admitted only if every rule admits it and a denial by one rule consumes
// nothing from the others. Shadow rules are checked in a separate batch that never blocks.
// When the store fails, each rule's failure policy answers for its own items (allow, deny,
// local), still all-or-nothing: a rule denying by policy keeps local rules from consuming.
//
// Thread-safe. The Limiter must outlive every check in flight (callbacks capture it).

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ratekeeper/limiter/decision_log.hpp"
#include "ratekeeper/limiter/failure_policy.hpp"
#include "ratekeeper/limiter/metrics.hpp"
#include "ratekeeper/limiter/rule.hpp"
#include "ratekeeper/store/store.hpp"

namespace ratekeeper::limiter {

struct LimiterConfig {
  std::string prefix = "ratelimit";
  std::vector<Rule> rules;
  Tiers tiers = Tiers::seed_defaults();
  int instances = 1;                               // failure policy `local` divides limits by it
  Micros deny_retry_after = 1 * kMicrosPerSecond;  // failure policy `deny`: Retry-After
  DecisionLogOptions decision_log;
};

// One rule applied to one request, with what the caller resolved.
struct Application {
  const Rule* rule = nullptr;
  std::string identity;      // "ip:…", "user:…", "key:…"
  bool ip_fallback = false;  // the identity is the IP fallback of a user/API-key rule
  std::string tier;          // tiered rules: the resolved tier (empty: from the users table)
  std::string endpoint;      // per-endpoint rules: the request path
  std::optional<std::int64_t> cost;  // nullopt: the rule's cost
};

// One limit's decision within a rule.
struct LimitOutcome {
  std::string policy_name;  // "<rule>" or "<rule>.<limit>" (tiers: "<rule>.<tier>[.<limit>]")
  algorithms::Limit limit;
  algorithms::Decision decision;
  std::string key;
};

struct RuleOutcome {
  const Rule* rule = nullptr;
  std::string identity;
  std::string tier;
  bool shadow = false;
  bool by_failure_policy = false;
  algorithms::Decision decision;  // combined over the rule's limits
  std::vector<LimitOutcome> limits;
};

// The answer for the enforcing rules. Shadow rules are checked in their own batches, which
// neither delay nor change it; their outcomes go to the metrics and the decision log.
struct Evaluation {
  bool allowed = true;               // every enforcing rule admitted the request
  bool by_failure_policy = false;    // some enforcing rule was answered by its failure policy
  std::optional<Error> store_error;  // the store failure the policies answered
  algorithms::Decision decision;     // combined over every enforcing limit
  std::vector<RuleOutcome> rules;    // the enforcing rules, in application order
  Micros latency = 0;                // store round trip of the enforcing batch
};

using EvaluationCallback = std::function<void(Result<Evaluation>)>;

class Limiter {
 public:
  // Validates the rules (unique names, non-empty policies, costs within every limit, tiers
  // existing): invalid_argument errors are thrown as std::invalid_argument here, since a
  // LimiterConfig from load_config is already valid. `clock` is used for `now` only when the
  // caller passes one explicitly (tests); nullptr: the store's own time.
  Limiter(LimiterConfig config, store::Store& store, const Clock* clock = nullptr);
  ~Limiter();
  Limiter(const Limiter&) = delete;
  Limiter& operator=(const Limiter&) = delete;

  const Rule* find_rule(std::string_view name) const noexcept;

  // Checks every application (enforcing in one batch, shadow in another). `done` is called
  // exactly once, possibly inline, possibly on a store thread. Errors: invalid_argument (bad
  // identity, bad cost), or a store error a rule's policy could not answer.
  void evaluate(std::vector<Application> applications, EvaluationCallback done);
  Result<Evaluation> evaluate_sync(std::vector<Application> applications);

  // The decision API (POST /v1/check): one rule, an identity given by the caller, a cost.
  // Unknown rule, bad identity, negative cost or cost above a limit → invalid_argument.
  // Shadow rules answer allowed (their real decision is counted and logged).
  // `tier`: tiered rules only; empty → from the users table for "user:<id>", else default.
  void check(std::string_view rule_name, std::string_view identity, std::int64_t cost,
             VerdictCallback done, std::string_view tier = {});
  Result<Verdict> check_sync(std::string_view rule_name, std::string_view identity,
                             std::int64_t cost, std::string_view tier = {});

  const Tiers& tiers() const noexcept { return config_.tiers; }
  const LimiterConfig& config() const noexcept { return config_; }
  Metrics& metrics() noexcept { return *metrics_; }
  const Metrics& metrics() const noexcept { return *metrics_; }
  DecisionLog& decision_log() noexcept { return *log_; }
  store::Store& store() noexcept { return *store_; }
  // Metrics::render with the store's health and kind.
  std::string metrics_text() const;

 private:
  struct Prepared;
  struct PreparedRule;
  Result<std::shared_ptr<Prepared>> prepare(std::vector<Application> applications) const;
  void run_shadow(std::shared_ptr<Prepared> prepared, std::size_t index,
                  std::function<void(const RuleOutcome&)> then);
  Result<Evaluation> finish(Prepared& prepared, Result<store::CheckOutcome> outcome,
                            Micros latency);
  Result<std::vector<algorithms::Decision>> fall_back(Prepared& prepared, const Error& error);
  void account(const PreparedRule& rule, const RuleOutcome& outcome, Micros latency);
  std::size_t rule_index(const Rule* rule) const noexcept;

  LimiterConfig config_;
  store::Store* store_;
  const Clock* clock_;
  std::unique_ptr<Metrics> metrics_;
  std::unique_ptr<DecisionLog> log_;
  std::unique_ptr<GuardedStore> local_;  // failure policy `local`: one local store for all rules
  std::unique_ptr<GuardedStore> deny_;
  std::unique_ptr<GuardedStore> allow_;
};

}  // namespace ratekeeper::limiter
