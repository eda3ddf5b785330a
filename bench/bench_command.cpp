// `ratekeeper bench`: drives a store with a fixed number of decisions in flight and reports
// decisions per second, allowed/denied/error counts and latency percentiles.
//
// Every decision goes through Store::check, or, with --settle-cost or --hold-slots, through
// Store::reserve and, once admitted, Store::settle (two store calls). Exactly `concurrency`
// decisions are outstanding at any time: each completion issues the next one from its
// callback. A store that completes on the caller's stack (memory://) is driven by `threads`
// threads instead, one decision after the other on each; a Redis store's callbacks run on
// its I/O threads.

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "commands.hpp"
#include "ratekeeper/algorithms/limit.hpp"
#include "ratekeeper/limiter/keys.hpp"
#include "ratekeeper/algorithms/lease.hpp"
#include "ratekeeper/store/leasing_store.hpp"
#include "ratekeeper/redis/url.hpp"
#include "ratekeeper/store/open_store.hpp"

namespace ratekeeper::server {
namespace {

using algorithms::Algorithm;
using algorithms::Limit;
using SteadyClock = std::chrono::steady_clock;

struct BenchOptions {
  std::string store_url = "memory://";
  std::string algorithm = "token_bucket";
  std::int64_t keys = 1000;
  std::int64_t concurrency = 50;
  std::int64_t requests = 100'000;
  double capacity = 100;
  double rate = 100;
  double limit = 100;
  std::int64_t window_ms = 1000;
  std::int64_t cost = 1;
  int threads = 1;
  std::int64_t timeout_ms = 1000;
  std::int64_t ready_timeout_ms = 5000;
  std::uint64_t seed = 1;
  int max_batch = 64;  // redis:// only: checks coalesced into one script call at most
  bool no_functions = false;  // Redis stores: EVALSHA only
  std::int64_t lease_max = 0;      // > 0: the limit is leased (store::LeasingStore), at most this many units
  std::int64_t lease_ttl_ms = 1000;
  double pace = 0;  // > 0: decisions issued at most this many per second
  std::int64_t settle_cost = -1;  // >= 0: each decision reserves `cost`, then settles to this
  std::int64_t hold_slots = 0;    // > 0: each decision also holds one of this many concurrency slots, then releases it
  bool json = false;

  // Whether each limit option was given on the command line.
  CLI::Option* capacity_opt = nullptr;
  CLI::Option* rate_opt = nullptr;
  CLI::Option* limit_opt = nullptr;
  CLI::Option* window_opt = nullptr;
};

std::int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(SteadyClock::now().time_since_epoch())
      .count();
}

// Outcome of one decision: allowed, denied, or kErrorBase + ErrorCode.
constexpr std::uint8_t kAllowed = 0;
constexpr std::uint8_t kDenied = 1;
constexpr std::uint8_t kErrorBase = 2;
constexpr std::size_t kErrorCodes = static_cast<std::size_t>(ErrorCode::redirect) + 1;

// --hold-slots: how long a slot (and a reservation's record) lasts when never released.
constexpr Micros kSlotTtl = 60 * kMicrosPerSecond;

// One benchmark run. Thread-safe: completions may arrive on any thread. Must outlive every
// callback it hands to the store (the caller destroys the store first).
class Run {
 public:
  Run(store::Store& store, std::vector<std::string> keys, std::vector<std::uint32_t> key_of_request,
      Limit limit, std::int64_t cost, store::LeasePolicy lease, double pace, std::int64_t settle_cost,
      std::vector<std::string> slot_keys, std::optional<Limit> slots)
      : store_(store),
        keys_(std::move(keys)),
        slot_keys_(std::move(slot_keys)),
        slots_(slots),
        key_of_request_(std::move(key_of_request)),
        limit_(limit),
        cost_(cost),
        lease_(lease),
        pace_ns_(pace > 0 ? 1e9 / pace : 0),
        settle_cost_(settle_cost),
        requests_(static_cast<std::int64_t>(key_of_request_.size())),
        latency_ns_(key_of_request_.size()),
        outcome_(key_of_request_.size()) {}

  // Starts one chain of decisions: one outstanding decision, replaced by the next when it
  // completes, until every request has been issued.
  void start_chain() { pump(); }
  // Pacing (--pace) counts from here.
  void set_start() { start_ns_ = steady_ns(); }

  // Waits until every request has completed, or until none has completed for `stall`.
  // Returns false on a stall.
  bool wait(std::chrono::milliseconds stall) {
    std::unique_lock lock(mutex_);
    std::int64_t seen = completed_;
    while (completed_ < requests_) {
      if (!done_cv_.wait_for(lock, stall, [&] { return completed_ != seen; })) return false;
      seen = completed_;
    }
    return true;
  }

  std::int64_t completed() const {
    std::lock_guard lock(mutex_);
    return completed_;
  }
  const std::vector<std::int64_t>& latency_ns() const { return latency_ns_; }
  const std::vector<std::uint8_t>& outcomes() const { return outcome_; }
  std::string first_error() const {
    std::lock_guard lock(mutex_);
    return first_error_;
  }

 private:
  // Issues the next request, trampolined: a completion that runs on the issuing stack does
  // not recurse into another check() but is counted and issued by the outermost pump().
  void pump() {
    thread_local bool active = false;
    thread_local std::int64_t pending = 0;
    if (active) {
      ++pending;
      return;
    }
    active = true;
    std::int64_t todo = 1;
    while (todo > 0) {
      --todo;
      issue_one();
      todo += pending;
      pending = 0;
    }
    active = false;
  }

  // The i-th decision is due at start + i / pace (--pace).
  void wait_turn(std::int64_t i) const {
    if (pace_ns_ <= 0) return;
    const auto due = start_ns_ + static_cast<std::int64_t>(static_cast<double>(i) * pace_ns_);
    for (auto now = steady_ns(); now < due; now = steady_ns()) {
      if (due - now > 100'000) std::this_thread::sleep_for(std::chrono::nanoseconds(due - now - 50'000));
    }
  }

  std::vector<store::CheckItem> items_of(std::int64_t i) const {
    std::vector<store::CheckItem> items;
    items.push_back(store::CheckItem{keys_[key_of_request_[i]], limit_, cost_, 0, lease_});
    if (slots_) items.push_back(store::CheckItem{slot_keys_[key_of_request_[i]], *slots_, 1});
    return items;
  }

  void issue_one() {
    const std::int64_t i = next_.fetch_add(1, std::memory_order_relaxed);
    if (i >= requests_) return;
    wait_turn(i);
    latency_ns_[i] = steady_ns();
    if (settle_cost_ >= 0 || slots_) return reserve_and_settle(i);
    // Two words of capture: std::function keeps it inline, no allocation.
    store_.check(items_of(i), std::nullopt, [this, i](Result<store::CheckOutcome> r) { complete(i, std::move(r)); });
  }

  // --settle-cost, --hold-slots: the decision reserves `cost` (and takes a concurrency slot)
  // under a record of its own (in its key's cluster slot), and an admitted one is settled
  // before it completes: the rate item to settle_cost_ (kAsEstimated without --settle-cost:
  // left as reserved), the concurrency slot released.
  std::string record_of(std::int64_t i) const {
    return fmt::format("{}:reservation:{}", keys_[key_of_request_[i]], i);
  }

  void reserve_and_settle(std::int64_t i) {
    store_.reserve(store::ReservationRecord{record_of(i), kSlotTtl}, items_of(i), std::nullopt,
                   [this, i](Result<store::CheckOutcome> r) {
                     if (!r || !r->decision.allowed) return complete(i, std::move(r));
                     auto items = items_of(i);
                     items[0].cost = settle_cost_ >= 0 ? settle_cost_ : store::kAsEstimated;
                     if (slots_) items[1].cost = store::kAsEstimated;
                     store_.settle(record_of(i), std::move(items), std::nullopt,
                                   [this, i, admitted = std::move(*r)](Result<bool> settled) mutable {
                                     if (!settled) return complete(i, std::unexpected(std::move(settled.error())));
                                     if (!*settled) {
                                       return complete(i, make_error(ErrorCode::protocol, "a reservation was not found"));
                                     }
                                     complete(i, std::move(admitted));
                                   });
                   });
  }

 public:
  // One decision after the other on the calling thread, each waited for: for a store that
  // answers most checks on the caller's stack and some later on its own threads (leases),
  // where a chain continued from a callback would keep that thread to itself.
  void run_blocking() {
    std::mutex mu;
    std::condition_variable cv;
    for (;;) {
      const std::int64_t i = next_.fetch_add(1, std::memory_order_relaxed);
      if (i >= requests_) return;
      wait_turn(i);
      latency_ns_[i] = steady_ns();
      bool answered = false;
      store_.check(items_of(i), std::nullopt, [&, i](Result<store::CheckOutcome> r) {
        record(i, std::move(r));
        std::lock_guard lock(mu);
        answered = true;
        cv.notify_one();
      });
      std::unique_lock lock(mu);
      cv.wait(lock, [&] { return answered; });
    }
  }

 private:
  void complete(std::int64_t i, Result<store::CheckOutcome> r) {
    record(i, std::move(r));
    pump();
  }

  void record(std::int64_t i, Result<store::CheckOutcome> r) {
    latency_ns_[i] = steady_ns() - latency_ns_[i];
    if (r) {
      outcome_[i] = r->decision.allowed ? kAllowed : kDenied;
    } else {
      outcome_[i] = static_cast<std::uint8_t>(kErrorBase + static_cast<std::uint8_t>(r.error().code));
      if (!has_error_.exchange(true, std::memory_order_relaxed)) {
        std::lock_guard lock(mutex_);
        first_error_ = fmt::format("{}: {}", to_string(r.error().code), r.error().message);
      }
    }
    std::lock_guard lock(mutex_);
    if (++completed_ == requests_ || (completed_ & 0x3ff) == 0) done_cv_.notify_all();
  }

  store::Store& store_;
  const std::vector<std::string> keys_;
  const std::vector<std::string> slot_keys_;  // --hold-slots: the concurrency key next to each key
  const std::optional<Limit> slots_;           // --hold-slots: the concurrency limit
  const std::vector<std::uint32_t> key_of_request_;
  const Limit limit_;
  const std::int64_t cost_;
  const store::LeasePolicy lease_;
  const double pace_ns_;
  const std::int64_t settle_cost_;
  std::int64_t start_ns_ = 0;
  const std::int64_t requests_;
  std::vector<std::int64_t> latency_ns_;  // start time while in flight, then the latency
  std::vector<std::uint8_t> outcome_;
  std::atomic<std::int64_t> next_{0};
  std::atomic<bool> has_error_{false};
  mutable std::mutex mutex_;
  std::condition_variable done_cv_;
  std::int64_t completed_ = 0;  // guarded by mutex_
  std::string first_error_;     // guarded by mutex_
};

int fail(const std::string& message) {
  std::fprintf(stderr, "ratekeeper bench: %s\n", message.c_str());
  return 2;
}

// Nearest-rank percentile of sorted values.
std::int64_t percentile(const std::vector<std::int64_t>& sorted, double p) {
  if (sorted.empty()) return 0;
  auto rank = static_cast<std::size_t>(std::ceil(p * static_cast<double>(sorted.size())));
  rank = std::clamp<std::size_t>(rank, 1, sorted.size());
  return sorted[rank - 1];
}

Result<Limit> make_limit(const BenchOptions& o, Algorithm algorithm) {
  const bool bucket_opts = o.capacity_opt->count() > 0 || o.rate_opt->count() > 0;
  const bool window_opts = o.limit_opt->count() > 0 || o.window_opt->count() > 0;
  if (algorithm == Algorithm::token_bucket) {
    if (window_opts) {
      return make_error(ErrorCode::invalid_argument,
                        "--limit and --window-ms apply to window algorithms; token_bucket takes "
                        "--capacity and --rate");
    }
    auto l = Limit::token_bucket(o.capacity, o.rate);
    if (!l) return make_error(ErrorCode::invalid_argument, "--capacity/--rate: " + l.error().message);
    return l;
  }
  if (bucket_opts) {
    return make_error(ErrorCode::invalid_argument,
                      fmt::format("--capacity and --rate apply to token_bucket; {} takes --limit and "
                                  "--window-ms",
                                  o.algorithm));
  }
  if (o.window_ms < 1 || o.window_ms > kMaxExact / kMicrosPerMilli) {
    return make_error(ErrorCode::invalid_argument,
                      fmt::format("--window-ms must be >= 1, got {}", o.window_ms));
  }
  auto l = Limit::window(algorithm, o.limit, o.window_ms * kMicrosPerMilli);
  if (!l) return make_error(ErrorCode::invalid_argument, "--limit/--window-ms: " + l.error().message);
  return l;
}

int run_bench(const BenchOptions& o) {
  if (o.requests < 1) return fail(fmt::format("--requests must be >= 1, got {}", o.requests));
  if (o.requests > std::int64_t{1} << 31) {
    return fail(fmt::format("--requests must be at most 2^31, got {}", o.requests));
  }
  if (o.concurrency < 1) return fail(fmt::format("--concurrency must be >= 1, got {}", o.concurrency));
  if (o.keys < 1 || o.keys > std::int64_t{1} << 32) {
    return fail(fmt::format("--keys must be between 1 and 2^32, got {}", o.keys));
  }
  if (o.threads < 1 || o.threads > 256) {
    return fail(fmt::format("--threads must be between 1 and 256, got {}", o.threads));
  }
  if (o.timeout_ms < 1) return fail(fmt::format("--timeout-ms must be >= 1, got {}", o.timeout_ms));
  if (o.ready_timeout_ms < 0) {
    return fail(fmt::format("--ready-timeout-ms must be >= 0, got {}", o.ready_timeout_ms));
  }
  auto algorithm = algorithms::parse_algorithm(o.algorithm);
  if (!algorithm) {
    return fail(fmt::format("unknown --algorithm '{}' (token_bucket, sliding_window_log, "
                            "sliding_window_counter, fixed_window)",
                            o.algorithm));
  }
  auto limit = make_limit(o, *algorithm);
  if (!limit) return fail(limit.error().message);
  if (auto c = algorithms::validate_cost(*limit, o.cost); !c) return fail("--cost: " + c.error().message);

  store::StoreOptions so;
  so.url = o.store_url;
  so.command_timeout = o.timeout_ms * kMicrosPerMilli;
  so.io_threads = o.threads;
  so.max_batch = static_cast<std::size_t>(o.max_batch);
  so.redis_functions = !o.no_functions;
  so.max_keys = static_cast<std::size_t>(std::max<std::int64_t>(o.keys + 1, 1'000'000));
  auto opened = store::open_store(so);
  if (!opened) return fail(fmt::format("--store: {}", opened.error().message));
  std::unique_ptr<store::Store> store = std::move(*opened);
  const std::string kind(store->kind());
  const bool synchronous = kind == "memory";

  // A remote store connects in the background: wait until it can answer, then warm it up
  // (connection, script cache) on a key outside the measured key space.
  const auto ready_by = SteadyClock::now() + std::chrono::milliseconds(o.ready_timeout_ms);
  auto health = store->health();
  while (!health.ready && SteadyClock::now() < ready_by) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    health = store->health();
  }
  if (!health.ready) {
    return fail(fmt::format("store {} is not ready after {} ms: {}", redis::redact_url(o.store_url), o.ready_timeout_ms,
                            health.detail));
  }
  {
    std::vector<store::CheckItem> warm;
    warm.push_back(store::CheckItem{"ratelimit:{bench:warmup}:bench", *limit, 0});
    auto r = store->check_sync(std::move(warm));
    if (!r) {
      return fail(fmt::format("store {} failed the warm-up check: {}: {}", redis::redact_url(o.store_url),
                              to_string(r.error().code), r.error().message));
    }
  }

  std::vector<std::string> keys;
  std::vector<std::string> slot_keys;  // --hold-slots: "<key>:slots", the same hash tag
  keys.reserve(static_cast<std::size_t>(o.keys));
  if (o.hold_slots > 0) slot_keys.reserve(static_cast<std::size_t>(o.keys));
  for (std::int64_t k = 0; k < o.keys; ++k) {
    auto key = limiter::make_key(limiter::kDefaultPrefix, fmt::format("bench:{}", k), "bench");
    if (!key) return fail(key.error().message);
    if (o.hold_slots > 0) slot_keys.push_back(*key + ":slots");
    keys.push_back(std::move(*key));
  }
  std::vector<std::uint32_t> key_of_request(static_cast<std::size_t>(o.requests));
  std::mt19937_64 rng(o.seed);
  std::uniform_int_distribution<std::uint64_t> pick(0, static_cast<std::uint64_t>(o.keys - 1));
  for (auto& k : key_of_request) k = static_cast<std::uint32_t>(pick(rng));

  // Leases: a LeasingStore in front; its grants and returns are the store calls.
  store::LeasePolicy lease;
  store::LeasingStore* leasing = nullptr;
  if (o.lease_max > 0) {
    if (!store->supports_leases()) return fail(fmt::format("--lease-max: store {} does not grant leases", kind));
    if (!algorithms::leasable(limit->algorithm)) {
      return fail("--lease-max: only token_bucket and fixed_window limits can be leased");
    }
    if (o.lease_ttl_ms < 1 || o.lease_ttl_ms > store::kMaxLeaseTtl / kMicrosPerMilli) {
      return fail(fmt::format("--lease-ttl-ms must be between 1 and 3600000, got {}", o.lease_ttl_ms));
    }
    lease = store::LeasePolicy{o.lease_max, o.lease_ttl_ms * kMicrosPerMilli};
    auto leased = std::make_unique<store::LeasingStore>(std::move(store));
    leasing = leased.get();
    store = std::move(leased);
  }
  if (o.pace < 0) return fail(fmt::format("--pace must be >= 0, got {}", o.pace));
  if (o.settle_cost >= 0) {
    if (!store->supports_reservations()) {
      return fail(fmt::format("--settle-cost: store {} does not hold reservations", kind));
    }
    if (!algorithms::reservable(limit->algorithm) || leasing != nullptr) {
      return fail("--settle-cost: only token_bucket and fixed_window limits, unleased, can be reserved");
    }
  }
  std::optional<Limit> slots;
  if (o.hold_slots != 0) {
    if (o.hold_slots < 0 || o.hold_slots > algorithms::kMaxConcurrency) {
      return fail(fmt::format("--hold-slots must be between 1 and {} (0: no slot), got {}", algorithms::kMaxConcurrency,
                              o.hold_slots));
    }
    if (!store->supports_reservations()) {
      return fail(fmt::format("--hold-slots: store {} does not hold reservations", kind));
    }
    if (!algorithms::reservable(limit->algorithm) || leasing != nullptr) {
      return fail("--hold-slots: the reservation holds the bench's limit too: only token_bucket and fixed_window "
                  "limits, unleased, can be reserved");
    }
    auto l = Limit::make(Algorithm::concurrency, o.hold_slots, kSlotTtl);
    if (!l) return fail("--hold-slots: " + l.error().message);
    slots = *l;
  }

  auto run = std::make_unique<Run>(*store, std::move(keys), std::move(key_of_request), *limit, o.cost, lease, o.pace,
                                   o.settle_cost, std::move(slot_keys), slots);
  const std::int64_t chains = std::min(o.concurrency, o.requests);
  run->set_start();
  const auto t0 = SteadyClock::now();
  std::vector<std::thread> drivers;
  if (synchronous) {
    // Each check completes before it returns: one chain per thread keeps each thread busy.
    const std::int64_t threads = std::min<std::int64_t>(o.threads, chains);
    for (std::int64_t t = 0; t < threads; ++t) drivers.emplace_back([&run] { run->start_chain(); });
  } else if (leasing != nullptr) {
    // Mostly answered on the caller's stack: `concurrency` threads, one decision at a time each.
    for (std::int64_t c = 0; c < chains; ++c) drivers.emplace_back([&run] { run->run_blocking(); });
  } else {
    for (std::int64_t c = 0; c < chains; ++c) run->start_chain();
  }
  const auto stall = std::chrono::milliseconds(std::max<std::int64_t>(10'000, 10 * o.timeout_ms));
  const bool finished = run->wait(stall);
  const auto t1 = SteadyClock::now();
  for (auto& d : drivers) d.join();
  if (!finished) {
    const auto completed = run->completed();
    // The run cannot be torn down safely while the store still holds its callbacks.
    std::fprintf(stderr, "ratekeeper bench: store stopped answering: %lld of %lld decisions completed\n",
                 static_cast<long long>(completed), static_cast<long long>(o.requests));
    std::fflush(stderr);
    std::_Exit(3);
  }
  std::optional<store::LeasingStore::Stats> lease_stats;
  if (leasing != nullptr) {
    leasing->shutdown();
    lease_stats = leasing->stats();
  }
  store.reset();  // joins the store's threads: no callback runs after this

  std::int64_t allowed = 0, denied = 0, errors = 0;
  std::array<std::int64_t, kErrorCodes> by_code{};
  for (auto out : run->outcomes()) {
    if (out == kAllowed) {
      ++allowed;
    } else if (out == kDenied) {
      ++denied;
    } else {
      ++errors;
      const std::size_t code = out - kErrorBase;
      if (code < by_code.size()) ++by_code[code];
    }
  }
  std::vector<std::int64_t> sorted = run->latency_ns();
  std::sort(sorted.begin(), sorted.end());
  const double elapsed_s = std::chrono::duration<double>(t1 - t0).count();
  const double per_s = static_cast<double>(o.requests) / elapsed_s;
  auto us = [](std::int64_t ns) { return static_cast<double>(ns) / 1000.0; };
  const double p50 = us(percentile(sorted, 0.50));
  const double p99 = us(percentile(sorted, 0.99));
  const double p999 = us(percentile(sorted, 0.999));
  const double max = us(sorted.back());

  if (o.json) {
    nlohmann::json j;
    j["store"] = redis::redact_url(o.store_url);
    j["kind"] = kind;
    j["algorithm"] = to_string(limit->algorithm);
    j["capacity"] = limit->capacity;
    j["period_us"] = limit->period;
    j["cost"] = o.cost;
    if (o.settle_cost >= 0) j["settle_cost"] = o.settle_cost;
    if (slots) {
      j["hold_slots"] = slots->capacity;
      j["slot_ttl_us"] = slots->period;
    }
    j["keys"] = o.keys;
    j["concurrency"] = o.concurrency;
    j["threads"] = o.threads;
    j["requests"] = o.requests;
    j["allowed"] = allowed;
    j["denied"] = denied;
    j["errors"] = errors;
    nlohmann::json codes = nlohmann::json::object();
    for (std::size_t c = 0; c < by_code.size(); ++c) {
      if (by_code[c] > 0) codes[std::string(to_string(static_cast<ErrorCode>(c)))] = by_code[c];
    }
    j["error_codes"] = codes;
    if (errors > 0) j["first_error"] = run->first_error();
    j["elapsed_s"] = elapsed_s;
    j["decisions_per_s"] = per_s;
    j["latency_us"] = {{"p50", p50}, {"p99", p99}, {"p999", p999}, {"max", max}};
    if (lease_stats) {
      const auto& l = *lease_stats;
      const std::uint64_t calls = l.leases_taken + l.grants_denied + l.grants_failed + l.returns;
      j["lease"] = {{"max", o.lease_max},
                    {"ttl_ms", o.lease_ttl_ms},
                    {"grants", l.leases_taken + l.grants_denied + l.grants_failed},
                    {"returns", l.returns},
                    {"units_granted", l.units_granted},
                    {"units_returned", l.units_returned},
                    {"local_admissions", l.local_admissions},
                    {"store_calls_per_admitted",
                     allowed > 0 ? static_cast<double>(calls) / static_cast<double>(allowed) : 0.0}};
    }
    std::fputs((j.dump() + "\n").c_str(), stdout);
  } else {
    std::string text;
    text += fmt::format("store         {}\n", redis::redact_url(o.store_url));
    text += fmt::format("limit         {} capacity={} period={}us cost={}\n",
                        to_string(limit->algorithm), limit->capacity, limit->period, o.cost);
    if (o.settle_cost >= 0 || slots) {
      std::string held;
      if (o.settle_cost >= 0) held += fmt::format(", settled to cost {}", o.settle_cost);
      if (slots) held += fmt::format(", holding one of {} slots (ttl {}us) until released", slots->capacity, slots->period);
      text += fmt::format("reservation   each decision reserved{}\n", held);
    }
    text += fmt::format("load          {} requests over {} keys, concurrency {}, threads {}\n",
                        o.requests, o.keys, o.concurrency, o.threads);
    text += fmt::format("elapsed       {:.3f} s\n", elapsed_s);
    text += fmt::format("throughput    {:.0f} decisions/s\n", per_s);
    text += fmt::format("allowed       {}\ndenied        {}\nerrors        {}\n", allowed, denied, errors);
    for (std::size_t c = 0; c < by_code.size(); ++c) {
      if (by_code[c] > 0) {
        text += fmt::format("  {:<14}{}\n", to_string(static_cast<ErrorCode>(c)), by_code[c]);
      }
    }
    if (errors > 0) text += fmt::format("first error   {}\n", run->first_error());
    text += fmt::format("latency (us)  p50 {:.1f}  p99 {:.1f}  p999 {:.1f}  max {:.1f}\n", p50, p99,
                        p999, max);
    if (lease_stats) {
      const auto& l = *lease_stats;
      const std::uint64_t grants = l.leases_taken + l.grants_denied + l.grants_failed;
      text += fmt::format("leases        max {} ttl {} ms: {} grants, {} returns ({} units granted, {} returned), "
                          "{} local admissions\n",
                          o.lease_max, o.lease_ttl_ms, grants, l.returns, l.units_granted, l.units_returned,
                          l.local_admissions);
      text += fmt::format("store calls   {:.4f} per admitted decision\n",
                          allowed > 0 ? static_cast<double>(grants + l.returns) / static_cast<double>(allowed) : 0.0);
    }
    std::fputs(text.c_str(), stdout);
  }
  return 0;
}

}  // namespace

void register_bench_command(CLI::App& app) {
  auto o = std::make_shared<BenchOptions>();
  CLI::App* sub = app.add_subcommand(
      "bench", "Measure a store: decisions/s, allowed/denied/error counts, latency percentiles");
  sub->add_option("--store", o->store_url, "Store URL (memory://, redis://host:port, rediss://host:port?ca_file=..., unix:///path, redis-cluster://..., redis-sentinel://.../master)")
      ->capture_default_str();
  sub->add_option("--algorithm", o->algorithm,
                  "token_bucket, sliding_window_log, sliding_window_counter or fixed_window")
      ->capture_default_str();
  sub->add_option("--keys", o->keys, "Number of distinct keys, chosen uniformly per request")
      ->capture_default_str();
  sub->add_option("--concurrency", o->concurrency, "Decisions in flight at once")->capture_default_str();
  sub->add_option("--requests", o->requests, "Number of decisions to issue")->capture_default_str();
  o->capacity_opt =
      sub->add_option("--capacity", o->capacity, "Token bucket capacity")->capture_default_str();
  o->rate_opt =
      sub->add_option("--rate", o->rate, "Token bucket refill, tokens per second")->capture_default_str();
  o->limit_opt =
      sub->add_option("--limit", o->limit, "Window algorithms: requests per window")->capture_default_str();
  o->window_opt = sub->add_option("--window-ms", o->window_ms, "Window algorithms: window length (ms)")
                      ->capture_default_str();
  sub->add_option("--cost", o->cost, "Cost of each decision")->capture_default_str();
  sub->add_option("--threads", o->threads,
                  "memory://: threads issuing decisions; Redis: the client's I/O threads")
      ->capture_default_str();
  sub->add_option("--timeout-ms", o->timeout_ms, "Deadline of each decision (ms)")->capture_default_str();
  sub->add_option("--ready-timeout-ms", o->ready_timeout_ms,
                  "How long to wait for a remote store to become ready (ms)")
      ->capture_default_str();
  sub->add_option("--seed", o->seed, "Seed of the key choice")->capture_default_str();
  sub->add_option("--max-batch", o->max_batch,
                  "redis:// only: checks coalesced into one script call at most (1: one call per check)")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  sub->add_flag("--no-functions", o->no_functions,
                "Redis stores: call the scripts with EVALSHA, not as Redis Functions (FCALL)");
  sub->add_option("--lease-max", o->lease_max,
                  "Lease the limit (token_bucket, fixed_window): at most this many units per lease (0: no lease)")
      ->check(CLI::Range(std::int64_t{0}, algorithms::kMaxWindowLimit))
      ->capture_default_str();
  sub->add_option("--lease-ttl-ms", o->lease_ttl_ms, "How long a lease is held (ms)")->capture_default_str();
  sub->add_option("--pace", o->pace, "Issue at most this many decisions per second (0: as fast as they complete)")
      ->capture_default_str();
  sub->add_option("--settle-cost", o->settle_cost,
                  "Each decision reserves --cost, and one admitted is settled to this actual cost (two store calls; "
                  "-1: a plain check)")
      ->check(CLI::Range(std::int64_t{-1}, algorithms::kMaxCharged))
      ->capture_default_str();
  sub->add_option("--hold-slots", o->hold_slots,
                  "Each decision also takes, in the same reservation, one of this many concurrency slots of a key "
                  "next to its own (same hash tag, slot ttl 60 s), and one admitted releases it (two store calls); "
                  "with --settle-cost the limit is settled to that cost, without it left as reserved (token_bucket, "
                  "fixed_window; 0: no slot)")
      ->capture_default_str();
  sub->add_flag("--json", o->json, "Print one JSON line instead of text");
  sub->callback([o] {
    const int rc = run_bench(*o);
    if (rc != 0) set_exit_code(rc);
  });
}

}  // namespace ratekeeper::server
