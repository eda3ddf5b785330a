#pragma once
// The Limiter: rules, keys, tiers, failure policies, metrics and the decision log over one
// Store. It knows nothing about HTTP: the middleware resolves identities and asks it.
//
// All enforcing rules that apply to one request are checked in ONE Store::check batch, so
// the request is admitted only if every rule admits it and a denial by one rule consumes
// nothing from the others. Shadow rules are checked in a separate batch that never blocks.
// When the store fails, each rule's failure policy answers for its own items (allow, deny,
// local), still all-or-nothing: a rule denying by policy keeps local rules from consuming.
// Rules with `on_limit: delay` give their items a max_delay: a request they would deny now but
// admit within it is admitted with Verdict::decision.delay, the one wait for the whole
// request over every rule of the batch (store::CheckItem::max_delay); a batch with any window
// limit, a check spanning Redis Cluster slots, a failure policy's answer and shadow rules
// never delay.
//
// Thread-safe. The Limiter must outlive every check in flight (callbacks capture it); one
// owned by a std::shared_ptr is kept alive by its checks in flight (shadow checks included,
// which outlive the answer), so its owner may let it go at any time (a configuration reload).

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ratekeeper/core/log_limit.hpp"
#include "ratekeeper/core/thread_cache.hpp"
#include "ratekeeper/limiter/decision_log.hpp"
#include "ratekeeper/limiter/failure_policy.hpp"
#include "ratekeeper/limiter/metrics.hpp"
#include "ratekeeper/limiter/overrides.hpp"
#include "ratekeeper/limiter/rule.hpp"
#include "ratekeeper/limiter/top_denied.hpp"
#include "ratekeeper/store/store.hpp"

namespace ratekeeper {
class MetricsWriter;
}

namespace ratekeeper::limiter {

struct LimiterConfig {
  std::string prefix = "ratelimit";  // of every key
  std::vector<Rule> rules;
  Tiers tiers = Tiers::standard();
  int instances = 1;                               // failure policy `local` divides limits by it
  Micros deny_retry_after = 1 * kMicrosPerSecond;  // failure policy `deny`: Retry-After
  DecisionLogOptions decision_log;
};

// Why a LimiterConfig is invalid: the field, named as the configuration file names it
// ("key_prefix", "rules[2].limits[0].name", "tiers.levels.pro", "tiers.default"), and why.
struct ConfigIssue {
  std::string field;
  std::string reason;
};

// Every problem of `config` (rules, tiers, prefix, instances), in field order; empty: valid.
// The one validation of a limiter's configuration: the Limiter constructor and the
// configuration loader both call it.
std::vector<ConfigIssue> validate(const LimiterConfig& config);

// One rule applied to one request, with what the caller resolved.
struct AppliedRule {
  const Rule* rule = nullptr;
  std::string identity;      // "ip:…", "user:…", "key:…"
  bool ip_fallback = false;  // the identity is the IP fallback of a user/API-key rule
  std::string tier;          // tiered rules: the resolved tier (empty: from the users table)
  std::string endpoint;      // per-endpoint rules: the request path
  std::optional<std::int64_t> cost;  // nullopt: the rule's cost
  // The limits to check instead of the rule's (or its tier's), e.g. a limit the caller was
  // given with the request, or some of the rule's own limits (counted on the keys the rule's
  // own limits of the same names have); read during evaluate() only. Null: the rule's.
  const Policy* limits = nullptr;
  // Reserve (Store::reserve): when the request is admitted, its cost, an estimate, is recorded
  // under this id for `reservation_ttl` µs, to be settled to the actual cost by
  // Limiter::settle. At most one application of an evaluation, enforcing, not delaying, its
  // limits token buckets, fixed windows or concurrency limits (whose slots the reservation
  // holds until it is settled or released); the other applications are checked with it,
  // all-or-nothing, and none is delayed or leased. Empty: a plain check. An application with
  // a concurrency limit and a cost above 0 must reserve.
  std::string reservation;
  Micros reservation_ttl = 0;
  // The parent's identity (Rule::parent): its limits are checked with the rule's, and the
  // rule's keys placed in its slot. Empty: the rule's limits alone, under its identity.
  std::string parent;
};

// Lists of applications, given back (emptied) once evaluated, for the next request's on the
// thread: Limiter::evaluate gives back the one it was handed; the middleware takes one.
using ApplicationLists = ThreadCache<std::vector<AppliedRule>, 64>;

// A reservation's id: 32 lowercase hex digits (128 random bits).
std::string new_reservation_id();
bool valid_reservation_id(std::string_view id) noexcept;

// One limit's decision within a rule.
struct LimitOutcome {
  // "<rule>" or "<rule>.<limit>" (tiers: "<rule>.<tier>[.<limit>]"; a parent's:
  // "<rule>.parent[.<limit>]")
  std::string policy_name;
  bool parent = false;  // a limit of the parent's (AppliedRule::parent), shared by its children
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
  std::int64_t cost = 1;          // what the request takes from each of the rule's limits
  double factor = 1;              // a per-identity override's (limiter/overrides.hpp); 1: none
  double parent_factor = 1;       // the parent identity's override
  algorithms::Decision decision;  // combined over the rule's limits
  std::size_t binding = 0;        // index in `limits` of the limit `decision` comes from
  std::vector<LimitOutcome> limits;
};

// The answer to one check: the combined decision and how it was reached. An Evaluation is a
// Verdict with the detail of every rule; Limiter::check answers with that Verdict part.
struct Verdict {
  algorithms::Decision decision;
  bool by_failure_policy = false;    // the store failed and a failure policy answered
  std::optional<Error> store_error;  // the store failure the policies answered
  // The id the check's cost is reserved under (AppliedRule::reservation), when the store
  // recorded it: the request was admitted by the store, not by a failure policy. Empty
  // otherwise: there is nothing to settle.
  std::string reservation;
};

using VerdictCallback = std::function<void(Result<Verdict>)>;

// The answer for the enforcing rules. Shadow rules are checked in their own batches, which
// neither delay nor change it; their outcomes go to the metrics and the decision log.
// Verdict::decision is combined over every enforcing limit; by_failure_policy: some enforcing
// rule was answered by its failure policy.
struct Evaluation : Verdict {
  bool allowed = true;             // every enforcing rule admitted the request
  std::vector<RuleOutcome> rules;  // the enforcing rules, in application order
  Micros latency = 0;              // store round trip of the enforcing batch (Clock::steady)
  // The shadow rules, in application order: filled only when the evaluation waited for them
  // (EvaluateOptions::with_shadow); a shadow rule whose store failed is marked
  // by_failure_policy and allowed.
  std::vector<RuleOutcome> shadow;
};

struct EvaluateOptions {
  // Answer only once the shadow rules are checked too, with their outcomes in
  // Evaluation::shadow (they still never change the answer). Else the answer does not wait.
  bool with_shadow = false;
};

// The evaluation is handed over as an rvalue: the callback reads it, or moves out of it what it
// keeps. What it leaves is the limiter's again once the callback returns (its vectors and
// strings are reused by the next evaluation on the thread).
using EvaluationCallback = std::function<void(Result<Evaluation>&&)>;

class Limiter : public std::enable_shared_from_this<Limiter> {
 public:
  // Throws std::invalid_argument ("<field>: <reason>", the first issue) when validate(config)
  // finds any: a LimiterConfig from the configuration loader is already valid. `clock` gives
  // the latency measurement its steady time, the decision log its time unless its options
  // name a clock, and `now` of every check only when one is given (tests); nullptr: the
  // system's clock and the store's own time.
  Limiter(LimiterConfig config, store::Store& store, const Clock* clock = nullptr);
  ~Limiter();
  Limiter(const Limiter&) = delete;
  Limiter& operator=(const Limiter&) = delete;

  const Rule* find_rule(std::string_view name) const noexcept;

  // Checks every application (enforcing in one batch, shadow in another). `done` is called
  // exactly once, possibly inline, possibly on a store thread. Errors: invalid_argument (bad
  // identity, bad cost), or a store error a rule's policy could not answer.
  void evaluate(std::vector<AppliedRule> rules, EvaluationCallback done,
                EvaluateOptions options = {});
  Result<Evaluation> evaluate_sync(std::vector<AppliedRule> rules,
                                   EvaluateOptions options = {});

  // The application of one rule to an identity chosen by the caller (the decision API):
  // `tier` for tiered rules (empty: from the users table for "user:<id>", else the default),
  // an "ip:" identity of a non-IP rule takes the rule's IP policy. Unknown rule or negative
  // cost → invalid_argument; the identity and the cost against the limits are checked when
  // evaluated.
  // `parent`: the parent's identity of a rule with a parent (required then, refused
  // otherwise).
  Result<AppliedRule> application(std::string_view rule_name, std::string_view identity,
                                  std::int64_t cost, std::string_view tier = {},
                                  std::string_view parent = {}) const;

  // The decision API (POST /v1/check): one rule, an identity given by the caller, a cost.
  // Unknown rule, bad identity, negative cost or cost above a limit → invalid_argument.
  // Shadow rules answer allowed (their real decision is counted and logged).
  // `tier`: tiered rules only; empty → from the users table for "user:<id>", else default.
  void check(std::string_view rule_name, std::string_view identity, std::int64_t cost,
             VerdictCallback done, std::string_view tier = {}, std::string_view parent = {});
  Result<Verdict> check_sync(std::string_view rule_name, std::string_view identity,
                             std::int64_t cost, std::string_view tier = {});

  // check() that reserves (AppliedRule::reservation): `estimate` is taken now and recorded
  // under a new id for `ttl` µs; Verdict::reservation is that id when the store recorded it.
  // A shadow rule, or a rule with other limits than token buckets and fixed windows, is an
  // invalid_argument.
  void reserve(std::string_view rule_name, std::string_view identity, std::int64_t estimate, Micros ttl,
               VerdictCallback done, std::string_view tier = {}, std::string_view parent = {});
  // Settles reservation `id` of one application to its `actual` cost, 0 .. 2^41 (Store::settle:
  // what is below the estimate given back, what is above charged as debt, once), and gives
  // back the concurrency slots it holds. nullopt: released, the rate limits left as reserved
  // (a request that holds only slots, or whose cost was known at admission). Answers whether
  // the reservation was found (false: unknown, settled already, or expired, its estimate
  // charged). A store failure is logged (rate-bounded) and answered as an error; the estimate
  // then stays charged, the slots held until they expire. `done` as for evaluate().
  void settle(AppliedRule application, std::string_view id, std::optional<std::int64_t> actual,
              std::function<void(Result<bool>)> done);
  // The heartbeat of a reservation that holds concurrency slots (Store::renew): each slot is
  // moved to expire its limit's slot_ttl from now, the reservation `ttl` µs from now (at
  // least the slot_ttl). Answers whether the reservation and every slot were still held
  // (false: expired: the request now holds none, and none is taken again). A store failure
  // is logged (rate-bounded). `done` as for evaluate().
  void renew(AppliedRule application, std::string_view id, Micros ttl, std::function<void(Result<bool>)> done);

  // One application's keys as the store holds them now (the admin's inspection): each limit's
  // key and decision read as a peek (cost 0: nothing consumed, nothing written), the combined
  // decision, and nothing counted (no metrics, no decision log). `done` as for evaluate().
  void inspect(AppliedRule application, std::function<void(Result<RuleOutcome>)> done);

  struct ResetOutcome {
    std::vector<std::string> keys;  // the application's keys, one per limit
    std::int64_t existed = 0;       // how many held live state
  };
  // Deletes one application's keys (the admin's reset) in the store, in what the store's
  // decorators hold for them (cached denials, leases) and in the failure policy's local
  // counts: the identity's next request under the rule starts from full limits. Other
  // instances' cached denials of the keys still answer until they expire. `done` as for
  // evaluate().
  void reset(AppliedRule application, std::function<void(Result<ResetOutcome>)> done);

  // Per-identity overrides (limiter/overrides.hpp): an identity's limits under a rule (and a
  // parent identity's limits under a rule with a parent) multiplied by a factor, in effect
  // wherever the rule is checked, in the shared table <prefix>:{overrides} of the store.
  Overrides& overrides() noexcept { return *overrides_; }
  // Takes `previous`'s overrides (a reloaded configuration keeps them in effect). Call before
  // the first check: not thread-safe.
  void share_overrides(const Limiter& previous) { overrides_ = previous.overrides_; }
  const std::string& overrides_key() const noexcept { return overrides_key_; }
  // Reads the shared table again when it changed (Overrides::refresh). `done` as for evaluate().
  void refresh_overrides(std::function<void(Result<bool>)> done);
  // Sets one override (its rule one of this limiter's, validate_override), then refreshes, so
  // that this process applies it at once; the others do at their next refresh. Answers the
  // table's version and whether an override of the rule and identity was replaced. A full
  // table (kMaxOverrides) is an invalid_argument. `done` as for evaluate().
  void set_override(Override o, std::function<void(Result<store::TableWrite>)> done);
  // Removes one override (its identity then has the rule's own limits again); answers whether
  // it existed. `done` as for evaluate().
  void remove_override(std::string_view rule, std::string_view identity, std::function<void(Result<bool>)> done);
  // Every override in the store's table now (not the copy in effect here), sorted by rule and
  // identity; entries that do not parse are left out. `done` as for evaluate().
  void list_overrides(std::function<void(Result<std::vector<Override>>)> done) const;

  const Tiers& tiers() const noexcept { return config_.tiers; }
  const LimiterConfig& config() const noexcept { return config_; }
  Metrics& metrics() noexcept { return *metrics_; }
  // Its metrics continue `previous`'s (Metrics' continuing constructor): rules of the same
  // name count on from where they were. Call before the first check: not thread-safe.
  void continue_metrics(const Limiter& previous);
  const Metrics& metrics() const noexcept { return *metrics_; }
  // The identities each rule denied most over the last minutes (rule index as for metrics()),
  // in this process; read with steady_now(). A reloaded configuration starts a new report.
  const TopDenied& top_denied() const noexcept { return *top_denied_; }
  Micros steady_now() const { return steady_clock_->steady(); }
  std::size_t rule_index(const Rule* rule) const noexcept;
  DecisionLog& decision_log() noexcept { return *log_; }
  store::Store& store() noexcept { return *store_; }
  // Its metrics (with the store's health and kind), then the store stack's.
  void write_metrics(MetricsWriter& out) const;
  std::string metrics_text() const;  // write_metrics() as exposition text

 private:
  struct Prepared;
  // An owning reference to a Prepared, counted (shadow checks share one with the enforcing
  // check); the last one gives it back to its thread's cache.
  class PreparedRef {
   public:
    PreparedRef() = default;
    explicit PreparedRef(Prepared* p) noexcept : p_(p) {}
    PreparedRef(PreparedRef&& o) noexcept : p_(std::exchange(o.p_, nullptr)) {}
    PreparedRef& operator=(PreparedRef&& o) noexcept;
    PreparedRef(const PreparedRef&) = delete;
    PreparedRef& operator=(const PreparedRef&) = delete;
    ~PreparedRef();
    Prepared* operator->() const noexcept { return p_; }
    Prepared& operator*() const noexcept { return *p_; }
    Prepared* get() const noexcept { return p_; }
    PreparedRef share() const noexcept;  // one more reference
    Prepared* release() noexcept { return std::exchange(p_, nullptr); }

   private:
    Prepared* p_ = nullptr;
  };
  Result<PreparedRef> prepare(std::vector<AppliedRule> rules) const;
  // One application, prepared: its rule, identity, tier, and each limit's key (cost 0).
  Result<RuleOutcome> keys_of(AppliedRule application) const;
  // A reservation's record key and the items of its application at `cost` each, for settle
  // and renew.
  struct Held {
    std::string record;
    const Rule* rule = nullptr;
    std::string identity;
    std::vector<store::CheckItem> items;
    Micros slot_ttl = 0;  // the longest of its concurrency limits'
  };
  Result<Held> held(AppliedRule application, std::string_view id, std::int64_t cost) const;
  void log_store_failure(std::string_view what, const Held& held, const Error& error);
  // The key of reservation `id`'s record: <prefix>:{<identity>}:<rule>:reservation:<id>, in
  // the identity's slot.
  Result<std::string> reservation_record(std::string_view identity, std::string_view rule,
                                         std::string_view id) const;
  void run_enforcing(PreparedRef prepared, EvaluationCallback done);
  void run_shadow(PreparedRef prepared, std::size_t index,
                  std::function<void(const RuleOutcome&)> then);
  // Fills prepared.result from the store's answer (or the failure policies').
  void finish(Prepared& prepared, Result<store::CheckOutcome> outcome, Micros latency);
  Result<std::vector<algorithms::Decision>> fall_back(const Prepared& prepared, const Error& error);
  std::optional<Micros> now() const;
  void account(const RuleOutcome& outcome, Micros latency);

  LimiterConfig config_;
  store::Store* store_;
  const Clock* clock_;         // nullptr: the store's time for `now`
  const Clock* steady_clock_;  // latency measurement: clock_ or the system clock
  std::unique_ptr<Metrics> metrics_;
  std::unique_ptr<TopDenied> top_denied_;
  std::unique_ptr<DecisionLog> log_;
  std::unique_ptr<store::MemoryStore> local_;  // failure policy `local`: one for every rule
  FailurePolicy policy_;
  LogLimit policy_log_{"checks answered by the failure policy"};
  LogLimit settle_log_{"settlements the store failed"};
  std::shared_ptr<Overrides> overrides_;
  std::string overrides_key_;  // <prefix>:{overrides}
};

}  // namespace ratekeeper::limiter
