#include "reload.hpp"
#include "ratekeeper/core/metrics_writer.hpp"

#include <cmath>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <utility>

#include "ratekeeper/core/contained.hpp"

#ifndef RATEKEEPER_VERSION
#define RATEKEEPER_VERSION "unknown"
#endif
#ifndef RATEKEEPER_BUILD_TYPE
#define RATEKEEPER_BUILD_TYPE ""
#endif

namespace ratekeeper::server {
namespace {

bool same_server(const http::ServerOptions& a, const http::ServerOptions& b) {
  return a.header_limit == b.header_limit && a.body_limit == b.body_limit &&
         a.read_timeout == b.read_timeout && a.request_timeout == b.request_timeout &&
         a.max_pipelined == b.max_pipelined &&
         a.drain_timeout == b.drain_timeout && a.paths == b.paths && a.http2 == b.http2;
}

bool same_upstream(const std::optional<http::UpstreamOptions>& a,
                   const std::optional<http::UpstreamOptions>& b) {
  if (a.has_value() != b.has_value()) return false;
  return !a || *a == *b;
}

std::vector<std::string> rule_names(const Generation& g) {
  std::vector<std::string> names;
  names.reserve(g.config.limiter.rules.size());
  for (const auto& rule : g.config.limiter.rules) names.push_back(rule.name);
  return names;
}

// Names in `a` and not in `b`.
std::vector<std::string> missing_from(const std::vector<std::string>& a,
                                      const std::vector<std::string>& b) {
  std::vector<std::string> out;
  for (const auto& name : a) {
    if (std::find(b.begin(), b.end(), name) == b.end()) out.push_back(name);
  }
  return out;
}

double unix_seconds_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string compiler() {
#if defined(__clang__)
  return fmt::format("clang {}.{}.{}", __clang_major__, __clang_minor__, __clang_patchlevel__);
#elif defined(__GNUC__)
  return fmt::format("gcc {}.{}.{}", __GNUC__, __GNUC_MINOR__, __GNUC_PATCHLEVEL__);
#else
  return "unknown";
#endif
}

}  // namespace

std::vector<std::string> restart_fields(const Generation& running, const Generation& next) {
  const Config& a = running.config;
  const Config& b = next.config;
  std::vector<std::string> fields;
  if (a.http.host != b.http.host || a.http.port != b.http.port) fields.emplace_back("listen");
  if (a.http.threads != b.http.threads) fields.emplace_back("threads");
  if (a.store.url != b.store.url || running.store_section != next.store_section ||
      a.denied_cache_keys != b.denied_cache_keys) {
    fields.emplace_back("store");
  }
  if (!same_server(a.http, b.http)) fields.emplace_back("http");
  if (!same_upstream(a.upstream, b.upstream)) fields.emplace_back("upstream");
  if (a.upstream && b.upstream &&
      (a.admin.host != b.admin.host || a.admin.port != b.admin.port)) {
    fields.emplace_back("admin");
  }
  // Whether a listener speaks TLS is set at start; its certificate, key and client CAs are
  // read again by every reload.
  if (a.tls.has_value() != b.tls.has_value()) fields.emplace_back("tls");
  if (a.upstream && b.upstream && a.admin.tls.has_value() != b.admin.tls.has_value()) {
    fields.emplace_back("admin.tls");
  }
  if (a.access_log.has_value() != b.access_log.has_value() ||
      (a.access_log && (a.access_log->path != b.access_log->path ||
                        a.access_log->max_lines_per_second != b.access_log->max_lines_per_second))) {
    fields.emplace_back("access_log");
  }
  if (a.grpc.has_value() != b.grpc.has_value()) {
    fields.emplace_back("grpc");
  } else if (a.grpc) {
    if (a.grpc->host != b.grpc->host || a.grpc->port != b.grpc->port) {
      fields.emplace_back("grpc.listen");
    }
    if (a.grpc->threads != b.grpc->threads) fields.emplace_back("grpc.threads");
    if (a.grpc->handshake_timeout != b.grpc->handshake_timeout) fields.emplace_back("grpc.handshake_timeout");
  }
  return fields;
}

std::string reload_json(const ReloadOutcome& outcome) {
  using json = nlohmann::json;
  json body;
  if (outcome.ok) {
    body = json{{"status", "reloaded"},
                {"rules", outcome.rules},
                {"added", outcome.added},
                {"removed", outcome.removed},
                {"needs_restart", outcome.needs_restart}};
  } else {
    body = json{{"status", "failed"}, {"error", outcome.error}};
  }
  return body.dump(-1, ' ', false, json::error_handler_t::replace);
}

Reloader::Reloader(SharedValue<Generation>& current, Build build, AfterSwap after_swap)
    : current_(current),
      build_(std::move(build)),
      after_swap_(std::move(after_swap)),
      last_success_seconds_(unix_seconds_now()),
      thread_([this] { run(); }) {}

Reloader::~Reloader() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void Reloader::request(std::function<void(const ReloadOutcome&)> done) {
  {
    std::lock_guard lock(mu_);
    if (done) pending_.push_back(std::move(done));
    ++requested_;
  }
  wake_.notify_one();
}

void Reloader::run() {
  std::unique_lock lock(mu_);
  for (;;) {
    wake_.wait(lock, [this] { return stopping_ || requested_ > 0; });
    if (stopping_) return;
    // Every request taken here arrived before the file is read: one reading answers them all.
    auto waiting = std::move(pending_);
    pending_.clear();
    requested_ = 0;
    lock.unlock();
    ReloadOutcome outcome;
    contain("configuration reload", [&] { outcome = reload_once(); });
    for (auto& done : waiting) contain("configuration reload answer", [&] { done(outcome); });
    waiting.clear();  // answers (and the generations they hold) are released unlocked
    lock.lock();
  }
}

ReloadOutcome Reloader::reload_once() {
  const std::shared_ptr<Generation> running = current_.load();
  ReloadOutcome outcome;
  std::shared_ptr<Generation> next;
  try {
    next = build_(*running);
    if (!next) outcome.error = "the configuration built nothing";
  } catch (const std::exception& e) {
    outcome.error = e.what();
  }
  if (!next) {
    {
      std::lock_guard lock(mu_);
      ++failures_;
      last_ok_ = false;
    }
    spdlog::error("configuration reload failed, the running configuration is kept: {}",
                  outcome.error);
    return outcome;
  }
  outcome.needs_restart = restart_fields(*running, *next);
  const auto before = rule_names(*running);
  const auto after = rule_names(*next);
  outcome.added = missing_from(after, before);
  outcome.removed = missing_from(before, after);
  outcome.rules = after.size();
  current_.store(next);
  if (after_swap_) contain("after a configuration reload", [&] { after_swap_(*next); });
  outcome.ok = true;
  {
    std::lock_guard lock(mu_);
    ++successes_;
    last_ok_ = true;
    last_success_seconds_ = unix_seconds_now();
  }
  spdlog::info("configuration reloaded from {}: {} rule(s), added [{}], removed [{}]",
               next->config.source, outcome.rules, fmt::join(outcome.added, ", "),
               fmt::join(outcome.removed, ", "));
  for (const auto& field : outcome.needs_restart) {
    spdlog::warn("configuration reload: `{}` changed in {}; it needs a restart and is kept as "
                 "it was until then",
                 field, next->config.source);
  }
  return outcome;
}

void Reloader::write_metrics(MetricsWriter& out) const {
  std::uint64_t successes = 0;
  std::uint64_t failures = 0;
  bool last_ok = true;
  double last_success = 0;
  {
    std::lock_guard lock(mu_);
    successes = successes_;
    failures = failures_;
    last_ok = last_ok_;
    last_success = last_success_seconds_;
  }
  constexpr std::string_view kReloads =
      "Configuration reloads (SIGHUP, POST /admin/reload) by result; a failed one keeps the running configuration.";
  out.counter("ratekeeper_config_reloads_total", kReloads, successes, {{"result", "success"}});
  out.counter("ratekeeper_config_reloads_total", kReloads, failures, {{"result", "failure"}});
  out.gauge("ratekeeper_config_last_reload_successful",
            "Whether the last reload succeeded (1; also before any) or failed (0).", std::int64_t{last_ok ? 1 : 0});
  out.gauge("ratekeeper_config_last_reload_success_timestamp_seconds",
            "Unix time the running configuration was loaded (at start or by the last successful reload).",
            std::round(last_success * 1000) / 1000);
}

std::string Reloader::metrics_text() const {
  MetricsWriter out;
  write_metrics(out);
  return out.take();
}

void write_build_info(MetricsWriter& out) {
  out.gauge("ratekeeper_build_info", "The running build: version, compiler and build type (value 1).", std::int64_t{1},
            {{"version", RATEKEEPER_VERSION}, {"compiler", compiler()}, {"build_type", RATEKEEPER_BUILD_TYPE}});
}

}  // namespace ratekeeper::server
