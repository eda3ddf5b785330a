#include "ratekeeper/rls/service.hpp"

#include "ratekeeper/core/metrics_writer.hpp"

#include <fmt/format.h>
#include <openssl/evp.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <future>
#include <limits>
#include <optional>
#include <span>
#include <stdexcept>
#include <unordered_set>

#include "algorithms/step.hpp"
#include "ratekeeper/http/headers.hpp"
#include "ratekeeper/limiter/keys.hpp"
#include "ratekeeper/limiter/limiter.hpp"

namespace ratekeeper::rls {
namespace {

using algorithms::Decision;
using limiter::AppliedRule;
using limiter::Evaluation;
using limiter::RuleOutcome;

// The descriptor's own hits_addend is a uint64 on the wire; the request's is a uint32.
constexpr std::uint64_t kMaxHits = std::numeric_limits<std::uint32_t>::max();

// Percent-encodes the separators of an identity ('%', '|', '=') so that the entries of two
// different descriptors never spell one identity.
void append_escaped(std::string& out, std::string_view text) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  for (const char c : text) {
    if (c == '%' || c == '|' || c == '=') {
      out += '%';
      out += kHex[static_cast<unsigned char>(c) >> 4];
      out += kHex[static_cast<unsigned char>(c) & 0xF];
    } else {
      out += c;
    }
  }
}

// The identity a descriptor is counted under: its entries "k=v|k=v" (and an override's limit),
// or, when that is too long for a key, "sha256:" and its digest. `path`: the node each entry
// found (empty for an override); an entry that found a share_threshold wildcard is written
// with the wildcard instead of its value, so that every value it matches shares the counter.
// A value equal to the wildcard itself matches it too: it shares that counter, rightly.
std::string identity_of(const pb::RateLimitRequest& request, int descriptor,
                        const DescriptorLimit* override_limit,
                        std::span<const DescriptorNode* const> path) {
  const auto& d = request.descriptors(descriptor);
  std::string id;
  for (int i = 0; i < d.entries_size(); ++i) {
    if (i > 0) id += '|';
    append_escaped(id, d.entries(i).key());
    id += '=';
    const auto at = static_cast<std::size_t>(i);
    const bool shared = at < path.size() && path[at]->share_threshold;
    append_escaped(id, shared ? std::string_view(path[at]->value) : d.entries(i).value());
  }
  if (override_limit != nullptr) {
    id += fmt::format("|limit={}/{}", override_limit->requests_per_unit, to_string(override_limit->unit));
  }
  // Escaping at most triples a byte: short identities fit without trying.
  if (id.size() * 3 <= limiter::kMaxIdentityBytes || limiter::escape_identity(id)) return id;
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  if (EVP_Digest(id.data(), id.size(), digest, &size, EVP_sha256(), nullptr) != 1) {
    throw std::runtime_error("SHA-256 failed");
  }
  std::string out = "sha256:";
  for (unsigned int i = 0; i < size; ++i) out += fmt::format("{:02x}", digest[i]);
  return out;
}

void set_limit(pb::RateLimitResponse::RateLimit* out, const DescriptorLimit& limit) {
  out->set_name(limit.name);
  out->set_requests_per_unit(limit.requests_per_unit);
  out->set_unit(static_cast<pb::RateLimitResponse::RateLimit::Unit>(limit.unit));
}

void set_duration(google::protobuf::Duration* out, Micros d) {
  d = std::max<Micros>(0, d);
  out->set_seconds(d / kMicrosPerSecond);
  out->set_nanos(static_cast<std::int32_t>(d % kMicrosPerSecond) * 1000);
}

std::uint32_t clamp_remaining(std::int64_t remaining) {
  return static_cast<std::uint32_t>(
      std::clamp<std::int64_t>(remaining, 0, std::numeric_limits<std::uint32_t>::max()));
}

}  // namespace

namespace {

// What one descriptor of a request came to before the store is asked, and where its
// outcome will be.
struct Slot {
  enum class Kind : std::uint8_t {
    no_limit,   // unknown domain, no match, unlimited, replaced: OK without a limit
    over,       // a limit of 0, or hits above a capacity: over without counting
    enforcing,  // Evaluation::rules[index]
    shadow,     // Evaluation::shadow[index]: shadow_mode or quota_mode, counted apart
  };
  Kind kind = Kind::no_limit;
  bool shadow = false;
  // quota_mode (and not shadow): counted on its own, as shadow; over, it makes the request
  // over only when every quota descriptor of the request is.
  bool quota = false;
  bool reserve = false;  // enforcing, its node `reserve`: the request's hits are an estimate
  std::size_t index = 0;
  // The limits shown as current_limit, in the order of the rule's policy (enforcing, shadow),
  // or the one limit that is over (over).
  std::vector<const DescriptorLimit*> shown;
  std::string rule_name;  // over: the policy name of the headers
  DescriptorLimit override_limit;
  limiter::Policy policy;  // an override's, or a node's limits less the replaced ones
  std::size_t rule = kNoRule;  // enforcing, shadow: the rule that counts it
  std::string identity;        // enforcing, shadow: what it is counted under
  // The index of an earlier descriptor of the request with the same rule and identity (one
  // counter): its hits were added to that one's, and it is answered as that one is.
  std::optional<std::size_t> same_as;
};

// The steps of Service::should_rate_limit, in order.

// Why the request is refused (invalid_argument), or nothing.
std::optional<std::string> validate(const pb::RateLimitRequest& request, const ServiceOptions& options) {
  if (const auto bytes = request.ByteSizeLong(); bytes > options.max_message_bytes) {
    return fmt::format("request of {} bytes: at most {}", bytes, options.max_message_bytes);
  }
  if (request.domain().empty()) return "domain must not be empty";
  const int n = request.descriptors_size();
  if (n == 0) return "descriptors must not be empty";
  if (static_cast<std::size_t>(n) > options.max_descriptors) {
    return fmt::format("{} descriptors: at most {}", n, options.max_descriptors);
  }
  for (int i = 0; i < n; ++i) {
    const auto& d = request.descriptors(i);
    if (d.entries_size() == 0) return fmt::format("descriptors[{}]: entries must not be empty", i);
    if (static_cast<std::size_t>(d.entries_size()) > options.max_entries) {
      return fmt::format("descriptors[{}]: {} entries, at most {}", i, d.entries_size(), options.max_entries);
    }
    for (int e = 0; e < d.entries_size(); ++e) {
      if (d.entries(e).key().empty()) return fmt::format("descriptors[{}].entries[{}].key must not be empty", i, e);
    }
    if (d.has_hits_addend() && d.hits_addend().value() > kMaxHits) {
      return fmt::format("descriptors[{}].hits_addend {} is above {}", i, d.hits_addend().value(), kMaxHits);
    }
    if (d.has_limit() && (d.limit().unit() <= 0 || d.limit().unit() > static_cast<int>(Unit::week))) {
      return fmt::format("descriptors[{}].limit.unit {} is not a unit", i, d.limit().unit());
    }
  }
  return std::nullopt;
}

// What each descriptor found in the domain's configuration.
struct Matches {
  std::vector<const DescriptorNode*> nodes;  // the node of each descriptor (null: none, unlimited, override)
  // The node each entry found, per descriptor, when a share_threshold wildcard is among them.
  std::vector<std::vector<const DescriptorNode*>> shared_paths;
  std::vector<std::int64_t> costs;  // the hits of each descriptor
  std::unordered_set<std::string_view> replaced;  // the names of the limits replaced
};

Matches match_descriptors(const pb::RateLimitRequest& request, const Domain& domain) {
  const auto n = static_cast<std::size_t>(request.descriptors_size());
  const std::uint64_t request_hits = request.hits_addend() == 0 ? 1 : request.hits_addend();
  Matches m;
  m.nodes.assign(n, nullptr);
  m.shared_paths.resize(n);
  m.costs.assign(n, 1);
  std::vector<Entry> entries;
  std::vector<const DescriptorNode*> path;
  for (std::size_t i = 0; i < n; ++i) {
    const auto& d = request.descriptors(static_cast<int>(i));
    m.costs[i] = static_cast<std::int64_t>(d.has_hits_addend() ? d.hits_addend().value() : request_hits);
    if (d.has_limit()) continue;
    entries.clear();
    for (const auto& e : d.entries()) entries.push_back({e.key(), e.value()});
    const DescriptorNode* node = match(domain, entries, path);
    if (node == nullptr) continue;
    if (std::any_of(path.begin(), path.end(), [](const DescriptorNode* p) { return p->share_threshold; })) {
      m.shared_paths[i] = path;
    }
    // An unlimited descriptor's `replaces` apply too (envoyproxy/ratelimit).
    for (const auto& name : node->replaces) m.replaced.insert(name);
    if (!node->unlimited) m.nodes[i] = node;
  }
  return m;
}

// What each descriptor checks: its kind, limits shown, rule and policy. The refusal of a
// limit override that is not a limit, or nothing.
std::optional<std::string> plan_slots(const pb::RateLimitRequest& request, const Domain& domain,
                                      std::span<const limiter::Rule> rules, const Matches& m,
                                      std::vector<Slot>& slots) {
  for (std::size_t i = 0; i < slots.size(); ++i) {
    auto& slot = slots[i];
    const auto& d = request.descriptors(static_cast<int>(i));
    if (d.has_limit()) {
      slot.override_limit.requests_per_unit = d.limit().requests_per_unit();
      slot.override_limit.unit = static_cast<Unit>(d.limit().unit());
      if (slot.override_limit.requests_per_unit > 0) {
        auto limit = algorithms::Limit::make(algorithms::Algorithm::fixed_window,
                                             slot.override_limit.requests_per_unit,
                                             unit_length(slot.override_limit.unit));
        if (!limit) return fmt::format("descriptors[{}].limit: {}", i, limit.error().message);
        slot.override_limit.limit = *limit;
        slot.policy.push_back({"", *limit});
      }
      slot.rule_name = rules[domain.override_rule].name;
      slot.shown.push_back(&slot.override_limit);
      slot.kind = Slot::Kind::enforcing;
      continue;
    }
    const DescriptorNode* node = m.nodes[i];
    if (node == nullptr) continue;
    slot.shadow = node->shadow_mode;
    slot.quota = node->quota_mode && !node->shadow_mode;
    slot.reserve = node->reserve && !slot.shadow && !slot.quota;
    // Limits of 0 requests only: no rule counts them; the headers name the domain's.
    slot.rule_name = rules[node->rule != kNoRule ? node->rule : domain.override_rule].name;
    slot.kind = slot.shadow || slot.quota ? Slot::Kind::shadow : Slot::Kind::enforcing;
    const auto is_replaced = [&](const DescriptorLimit& l) { return !l.name.empty() && m.replaced.contains(l.name); };
    const bool any_replaced = !m.replaced.empty() && std::any_of(node->limits.begin(), node->limits.end(), is_replaced);
    for (const auto& l : node->limits) {
      if (any_replaced && is_replaced(l)) continue;
      slot.shown.push_back(&l);
    }
    if (slot.shown.empty()) {
      slot.kind = Slot::Kind::no_limit;
      continue;
    }
    if (any_replaced && node->rule != kNoRule) {
      // The rule's policy holds the node's limits of more than 0 requests, in order, each
      // under its policy_limit_name (limits may count alike: found by name).
      const auto& policy = rules[node->rule].limits;
      for (const auto* l : slot.shown) {
        if (l->requests_per_unit == 0) continue;
        const auto name = policy_limit_name(*l);
        for (const auto& named : policy) {
          if (named.name == name) {
            slot.policy.push_back(named);
            break;
          }
        }
      }
    }
  }
  return std::nullopt;
}

// A descriptor given twice (Envoy sends what its actions produce, alike or not) is one
// counter: the later one adds its hits to the first and gets the first's answer.
void merge_repeated_descriptors(const pb::RateLimitRequest& request, const Domain& domain, Matches& m,
                                std::vector<Slot>& slots) {
  for (std::size_t i = 0; i < slots.size(); ++i) {
    auto& slot = slots[i];
    if (slot.kind == Slot::Kind::no_limit) continue;
    const bool is_override = request.descriptors(static_cast<int>(i)).has_limit();
    slot.rule = is_override ? domain.override_rule : m.nodes[i]->rule;
    slot.identity = identity_of(request, static_cast<int>(i), is_override ? &slot.override_limit : nullptr,
                                m.shared_paths[i]);
    for (std::size_t j = 0; j < i; ++j) {
      const auto& first = slots[j];
      if (first.kind != Slot::Kind::no_limit && !first.same_as && first.rule == slot.rule &&
          first.identity == slot.identity) {
        slot.same_as = j;
        m.costs[j] += m.costs[i];
        break;
      }
    }
  }
}

// Descriptors over without counting (a limit of 0 requests, or more hits than a limit
// holds) are marked; true when one of them is enforcing: the request is over, and the
// others only peek (all-or-nothing).
bool mark_certainly_over(std::span<const std::int64_t> costs, std::vector<Slot>& slots) {
  bool certainly_over = false;
  for (std::size_t i = 0; i < slots.size(); ++i) {
    auto& slot = slots[i];
    if (slot.kind == Slot::Kind::no_limit || slot.same_as) continue;
    for (const auto* l : slot.shown) {
      if (l->requests_per_unit == 0 || costs[i] > static_cast<std::int64_t>(l->requests_per_unit)) {
        const DescriptorLimit* over = l;
        slot.shown.assign(1, over);
        slot.kind = Slot::Kind::over;
        certainly_over = certainly_over || (!slot.shadow && !slot.quota);
        break;
      }
    }
  }
  return certainly_over;
}

// The limiter's rules applied to the request, one per counted descriptor; `shadow` counts
// those evaluated apart (shadow_mode, quota_mode). Each slot learns its place in the answer.
std::vector<AppliedRule> applied_rules(const pb::RateLimitRequest& request, std::span<const limiter::Rule> rules,
                                       std::span<const std::int64_t> costs, bool certainly_over,
                                       std::vector<Slot>& slots, std::size_t& shadow) {
  std::vector<AppliedRule> apps;
  std::size_t enforcing = 0;
  bool reserved = false;
  for (std::size_t i = 0; i < slots.size(); ++i) {
    auto& slot = slots[i];
    if (slot.kind != Slot::Kind::enforcing && slot.kind != Slot::Kind::shadow) continue;
    if (slot.same_as) continue;
    AppliedRule app;
    app.rule = &rules[slot.rule];
    app.identity = std::move(slot.identity);
    const bool apart = slot.kind == Slot::Kind::shadow;  // shadow_mode or quota_mode
    app.cost = (certainly_over && !apart) ? 0 : costs[i];
    // The first descriptor that reserves does (one reservation per request); the others take
    // their hits as a plain cost.
    if (slot.reserve && slot.kind == Slot::Kind::enforcing && !certainly_over && !reserved) {
      app.reservation = limiter::new_reservation_id();
      app.reservation_ttl = kReservationTtl;
      reserved = true;
    }
    if (!slot.policy.empty() || request.descriptors(static_cast<int>(i)).has_limit()) app.limits = &slot.policy;
    slot.index = apart ? shadow++ : enforcing++;
    apps.push_back(std::move(app));
  }
  return apps;
}

}  // namespace

struct Service::Call {
  std::vector<Slot> slots;
  AnswerCallback done;
};

Service::Service(RlsConfig config, limiter::Limiter& limiter, ServiceOptions options)
    : config_(std::move(config)),
      limiter_(&limiter),
      options_(options),
      counters_(std::make_shared<Counters>()) {
  const auto& rules = limiter.config().rules;
  const auto check = [&](std::size_t index, std::string_view what) {
    if (index >= rules.size()) {
      throw std::invalid_argument(fmt::format(
          "rate limit service: {} has no rule in the limiter (append_limiter_rules)", what));
    }
  };
  for (const auto& domain : config_.domains) {
    check(domain.override_rule, fmt::format("domain '{}'", domain.name));
    std::vector<const DescriptorNode*> stack{&domain.root};
    while (!stack.empty()) {
      const DescriptorNode* node = stack.back();
      stack.pop_back();
      if (!node->limits.empty() && node->rule != kNoRule) {
        check(node->rule, fmt::format("descriptor '{}' of domain '{}'", node->key, domain.name));
      }
      for (const auto& child : node->descriptors) stack.push_back(&child);
    }
  }
}

Service::~Service() = default;

void Service::continue_metrics(const Service& previous) { counters_ = previous.counters_; }

void Service::count(Status status, const pb::RateLimitResponse* response) {
  switch (status) {
    case Status::ok:
      if (response != nullptr && response->overall_code() == pb::RateLimitResponse::OVER_LIMIT) {
        counters_->over_limit.fetch_add(1, std::memory_order_relaxed);
      } else {
        counters_->ok.fetch_add(1, std::memory_order_relaxed);
      }
      break;
    case Status::invalid_argument: counters_->invalid.fetch_add(1, std::memory_order_relaxed); break;
    case Status::unavailable: counters_->unavailable.fetch_add(1, std::memory_order_relaxed); break;
    case Status::internal: counters_->internal.fetch_add(1, std::memory_order_relaxed); break;
  }
}

void Service::should_rate_limit(const pb::RateLimitRequest& request, AnswerCallback done) {
  counters_->calls.fetch_add(1, std::memory_order_relaxed);
  const auto refuse = [this](AnswerCallback& done, std::string message) {
    count(Status::invalid_argument, nullptr);
    done(Answer{Status::invalid_argument, std::move(message), {}});
  };
  if (auto refusal = validate(request, options_)) return refuse(done, std::move(*refusal));
  const auto& first = request.descriptors(0);
  if (std::any_of(first.entries().begin(), first.entries().end(),
                  [](const auto& e) { return e.key() == kReservationKey; })) {
    return settle(request, std::move(done));
  }

  auto call = std::make_shared<Call>();
  call->done = std::move(done);
  call->slots.resize(static_cast<std::size_t>(request.descriptors_size()));
  const Domain* domain = config_.find(request.domain());
  if (domain == nullptr) {
    counters_->unknown_domain.fetch_add(1, std::memory_order_relaxed);
    answer(*call, Evaluation{});
    return;
  }
  const auto& rules = limiter_->config().rules;
  Matches matches = match_descriptors(request, *domain);
  if (auto refusal = plan_slots(request, *domain, rules, matches, call->slots)) {
    return refuse(call->done, std::move(*refusal));
  }
  merge_repeated_descriptors(request, *domain, matches, call->slots);
  const bool certainly_over = mark_certainly_over(matches.costs, call->slots);
  std::size_t shadow = 0;
  auto apps = applied_rules(request, rules, matches.costs, certainly_over, call->slots, shadow);
  if (apps.empty()) {
    answer(*call, Evaluation{});
    return;
  }
  limiter_->evaluate(
      std::move(apps),
      [this, call](Result<Evaluation>&& evaluation) { answer(*call, evaluation); },
      limiter::EvaluateOptions{.with_shadow = shadow > 0});
}

// A request whose descriptors carry the entry kReservationKey (Envoy's call when the stream
// is done: apply_on_stream_done) settles each descriptor's reservation to its hits: the
// descriptor without that entry finds the node and identity the reservation was made under.
// Answered OK once every settlement is done (a failed one is logged by the Limiter: its
// estimate stays); a descriptor that finds no reserving node settles nothing.
void Service::settle(const pb::RateLimitRequest& request, AnswerCallback done) {
  const auto refuse = [this](AnswerCallback& done, std::string message) {
    count(Status::invalid_argument, nullptr);
    done(Answer{Status::invalid_argument, std::move(message), {}});
  };
  pb::RateLimitRequest stripped = request;
  std::vector<std::string> ids;
  std::vector<std::int64_t> costs;
  for (int i = 0; i < stripped.descriptors_size(); ++i) {
    auto* d = stripped.mutable_descriptors(i);
    auto* entries = d->mutable_entries();
    const auto it = std::find_if(entries->begin(), entries->end(),
                                 [](const auto& e) { return e.key() == kReservationKey; });
    if (it == entries->end()) {
      return refuse(done, fmt::format("descriptors[{}]: a request that settles reservations holds only "
                                      "descriptors with the entry {}",
                                      i, kReservationKey));
    }
    if (!limiter::valid_reservation_id(it->value())) {
      return refuse(done, fmt::format("descriptors[{}]: {} is not a reservation id", i, kReservationKey));
    }
    ids.push_back(it->value());
    entries->erase(it);
    if (entries->empty()) return refuse(done, fmt::format("descriptors[{}]: nothing but a reservation id", i));
    costs.push_back(static_cast<std::int64_t>(d->has_hits_addend() ? d->hits_addend().value()
                                                                    : request.hits_addend()));
  }
  struct Join {
    std::atomic<std::size_t> pending{1};
    pb::RateLimitResponse response;
    AnswerCallback done;
  };
  auto join = std::make_shared<Join>();
  join->done = std::move(done);
  join->response.set_overall_code(pb::RateLimitResponse::OK);
  for (int i = 0; i < stripped.descriptors_size(); ++i) {
    join->response.add_statuses()->set_code(pb::RateLimitResponse::OK);
  }
  auto arrive = [this](const std::shared_ptr<Join>& j) {
    if (j->pending.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
    count(Status::ok, &j->response);
    auto done = std::move(j->done);
    done(Answer{Status::ok, {}, std::move(j->response)});
  };
  const Domain* domain = config_.find(stripped.domain());
  if (domain != nullptr) {
    const auto& rules = limiter_->config().rules;
    const Matches matches = match_descriptors(stripped, *domain);
    for (std::size_t i = 0; i < ids.size(); ++i) {
      const DescriptorNode* node = matches.nodes[i];
      if (node == nullptr || !node->reserve || node->rule == kNoRule) continue;
      AppliedRule app;
      app.rule = &rules[node->rule];
      app.identity = identity_of(stripped, static_cast<int>(i), nullptr, matches.shared_paths[i]);
      join->pending.fetch_add(1, std::memory_order_relaxed);
      limiter_->settle(std::move(app), ids[i], costs[i], [join, arrive](Result<bool>) { arrive(join); });
    }
  }
  arrive(join);
}

void Service::answer(Call& call, const Result<Evaluation>& evaluation) {
  auto done = std::move(call.done);
  if (!evaluation) {
    const Error& e = evaluation.error();
    const Status status = e.is_store_failure()                        ? Status::unavailable
                          : e.code == ErrorCode::invalid_argument ? Status::invalid_argument
                                                                      : Status::internal;
    count(status, nullptr);
    done(Answer{status, e.message, {}});
    return;
  }
  Answer out;
  auto& response = out.response;
  bool over = false;
  // quota_mode descriptors: how many, how many over, and their outcomes for the headers
  // (shown only when they make the request over, or when allowed).
  std::size_t quotas = 0;
  std::size_t quotas_over = 0;
  std::vector<RuleOutcome> quota_shown;
  // For the headers: the enforcing rules' outcomes, and those over without counting.
  Evaluation shown;
  // The counter of each descriptor's result (a repeated descriptor: its first's).
  std::vector<std::atomic<std::uint64_t>*> tallies(call.slots.size(), nullptr);
  for (std::size_t i = 0; i < call.slots.size(); ++i) {
    const Slot& slot = call.slots[i];
    auto* status = response.add_statuses();
    if (slot.same_as) {
      status->CopyFrom(response.statuses(static_cast<int>(*slot.same_as)));
      tallies[i] = tallies[*slot.same_as];
      tallies[i]->fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    std::atomic<std::uint64_t>* tally = nullptr;
    status->set_code(pb::RateLimitResponse::OK);
    switch (slot.kind) {
      case Slot::Kind::no_limit:
        tally = &counters_->descriptors_no_limit;
        break;
      case Slot::Kind::over: {
        const DescriptorLimit& l = *slot.shown.front();
        set_limit(status->mutable_current_limit(), l);
        set_duration(status->mutable_duration_until_reset(), unit_length(l.unit));
        if (slot.shadow) {
          tally = &counters_->descriptors_shadow_over;
          break;
        }
        status->set_code(pb::RateLimitResponse::OVER_LIMIT);
        if (slot.quota) {
          ++quotas;
          ++quotas_over;
          tally = &counters_->descriptors_quota_over;
        } else {
          tally = &counters_->descriptors_over;
          over = true;
        }
        RuleOutcome& r = slot.quota ? quota_shown.emplace_back() : shown.rules.emplace_back();
        auto& lo = r.limits.emplace_back();
        lo.policy_name = slot.rule_name;
        lo.limit = l.requests_per_unit > 0 ? l.limit
                                           : algorithms::Limit{algorithms::Algorithm::fixed_window, 0,
                                                               unit_length(l.unit)};
        lo.decision = Decision{.allowed = false,
                               .limit = l.requests_per_unit,
                               .remaining = 0,
                               .retry_after = unit_length(l.unit),
                               .reset_after = unit_length(l.unit)};
        r.decision = lo.decision;
        break;
      }
      case Slot::Kind::enforcing:
      case Slot::Kind::shadow: {
        const auto& rules =
            slot.kind == Slot::Kind::shadow ? evaluation->shadow : evaluation->rules;
        if (slot.index >= rules.size()) {
          count(Status::internal, nullptr);
          done(Answer{Status::internal, "limiter answered fewer rules than asked", {}});
          return;
        }
        const RuleOutcome& r = rules[slot.index];
        const Decision& d = r.decision;
        const std::size_t binding = std::min(r.binding, slot.shown.size() - 1);
        set_limit(status->mutable_current_limit(), *slot.shown[binding]);
        status->set_limit_remaining(clamp_remaining(d.remaining));
        set_duration(status->mutable_duration_until_reset(), d.allowed ? d.reset_after : d.retry_after);
        if (slot.shadow) {
          tally = d.allowed ? &counters_->descriptors_ok : &counters_->descriptors_shadow_over;
          break;
        }
        if (slot.quota) {
          ++quotas;
          if (r.by_failure_policy) {
            // Counted apart, as a shadow rule: a store failure leaves it allowed.
            tally = &counters_->descriptors_quota_store_error;
            if (std::uint64_t suppressed = 0; quota_failure_log_.admit(suppressed)) {
              spdlog::warn("rate limit service: store failed for quota-mode descriptor {} of "
                           "{}: answered OK{}",
                           i, r.rule != nullptr ? r.rule->name : std::string("?"),
                           suppressed > 0 ? fmt::format(" ({} such lines left out)", suppressed)
                                          : std::string());
            }
          } else if (d.allowed) {
            tally = &counters_->descriptors_ok;
            shown.rules.push_back(r);
          } else {
            ++quotas_over;
            status->set_code(pb::RateLimitResponse::OVER_LIMIT);
            tally = &counters_->descriptors_quota_over;
            quota_shown.push_back(r);
          }
          break;
        }
        if (!d.allowed) {
          status->set_code(pb::RateLimitResponse::OVER_LIMIT);
          tally = &counters_->descriptors_over;
          over = true;
        } else {
          tally = &counters_->descriptors_ok;
        }
        shown.rules.push_back(r);
        break;
      }
    }
    tally->fetch_add(1, std::memory_order_relaxed);
    tallies[i] = tally;
  }
  // As envoyproxy/ratelimit: quota descriptors over make the request over only when all are.
  if (quotas > 0 && quotas_over == quotas) {
    over = true;
    for (auto& r : quota_shown) shown.rules.push_back(std::move(r));
  }
  response.set_overall_code(over ? pb::RateLimitResponse::OVER_LIMIT : pb::RateLimitResponse::OK);
  if (!over && !evaluation->reservation.empty()) {
    auto* field = response.mutable_dynamic_metadata()->add_fields();
    field->set_key(std::string(kReservationKey));
    field->mutable_value()->set_string_value(evaluation->reservation);
  }
  if (options_.response_headers && !shown.rules.empty()) {
    std::vector<Decision> decisions;
    decisions.reserve(shown.rules.size());
    for (const auto& r : shown.rules) decisions.push_back(r.decision);
    shown.decision = algorithms::combine(decisions);
    shown.allowed = !over;
    if (over && shown.decision.allowed) {
      // Allowed by every limit but consumed nothing: another descriptor was over.
      shown.decision.allowed = false;
    }
    for (auto& [name, value] : http::rate_limit_headers(shown, http::HeaderOptions{})) {
      auto* h = response.add_response_headers_to_add();
      h->set_key(std::move(name));
      h->set_value(std::move(value));
    }
  }
  count(Status::ok, &response);
  done(std::move(out));
}

Answer Service::should_rate_limit_sync(const pb::RateLimitRequest& request) {
  std::promise<Answer> promise;
  auto future = promise.get_future();
  should_rate_limit(request, [&promise](Answer a) { promise.set_value(std::move(a)); });
  return future.get();
}

void Service::write_metrics(MetricsWriter& out) const {
  const auto v = [](const std::atomic<std::uint64_t>& a) { return a.load(std::memory_order_relaxed); };
  const Counters& c = *counters_;
  out.counter("ratekeeper_rls_calls_total", "ShouldRateLimit calls received (answered or not yet).", v(c.calls));
  constexpr std::string_view kRequests = "ShouldRateLimit calls by answer.";
  out.counter("ratekeeper_rls_requests_total", kRequests, v(c.ok), {{"result", "ok"}});
  out.counter("ratekeeper_rls_requests_total", kRequests, v(c.over_limit), {{"result", "over_limit"}});
  out.counter("ratekeeper_rls_requests_total", kRequests, v(c.invalid), {{"result", "invalid_argument"}});
  out.counter("ratekeeper_rls_requests_total", kRequests, v(c.unavailable), {{"result", "unavailable"}});
  out.counter("ratekeeper_rls_requests_total", kRequests, v(c.internal), {{"result", "internal"}});
  out.counter("ratekeeper_rls_unknown_domain_total",
              "ShouldRateLimit calls for a domain that is not configured (answered OK).", v(c.unknown_domain));
  constexpr std::string_view kDescriptors = "Descriptors answered, by status.";
  out.counter("ratekeeper_rls_descriptors_total", kDescriptors, v(c.descriptors_ok), {{"result", "ok"}});
  out.counter("ratekeeper_rls_descriptors_total", kDescriptors, v(c.descriptors_over), {{"result", "over_limit"}});
  out.counter("ratekeeper_rls_descriptors_total", kDescriptors, v(c.descriptors_no_limit), {{"result", "no_limit"}});
  out.counter("ratekeeper_rls_descriptors_total", kDescriptors, v(c.descriptors_shadow_over),
              {{"result", "shadow_over_limit"}});
  out.counter("ratekeeper_rls_descriptors_total", kDescriptors, v(c.descriptors_quota_over),
              {{"result", "quota_over_limit"}});
  out.counter("ratekeeper_rls_descriptors_total", kDescriptors, v(c.descriptors_quota_store_error),
              {{"result", "quota_store_error"}});
}

std::string Service::metrics_text() const {
  MetricsWriter out;
  write_metrics(out);
  return out.take();
}

}  // namespace ratekeeper::rls
