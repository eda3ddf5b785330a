#pragma once
// Live reload of `ratekeeper serve`'s configuration. The parts a configuration decides per
// request (limiter, middleware, gRPC rate limit service, routes) form one Generation, built
// over the store that lives as long as the process. A reload builds the next Generation from
// the file and swaps it in whole (SharedValue): a request takes the current one when it
// arrives and keeps it until it is answered, so no request sees half of each. Limit state
// lives in the store under keys named by rule and limit (limiter/keys.hpp): a rule whose name
// is unchanged keeps its counts. What is read only at start (listen addresses, threads, the
// store, upstream, admin, the gRPC listener) is reported as needing a restart and otherwise
// left as it is.
//
// Reloads run one at a time on the Reloader's own thread, never on an io thread: SIGHUP and
// POST /admin/reload only ask for one. Requests that arrive while one is being read are
// answered together by the next.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "api.hpp"
#include "config.hpp"
#include "ratekeeper/core/shared_value.hpp"
#include "ratekeeper/http/middleware.hpp"
#include "ratekeeper/limiter/limiter.hpp"
#include "ratekeeper/rls/service.hpp"

namespace ratekeeper {
class MetricsWriter;
}

namespace ratekeeper::server {

// Everything one configuration decides per request. Members are destroyed in reverse order:
// the routes, the service and the middleware go before the limiter they refer to; the
// limiter itself lives on while its checks are in flight (Limiter: shared ownership).
struct Generation {
  Config config;  // command-line overrides applied, the gRPC domains' rules appended
  // The `store` section as written (YAML), to tell a change of any of its fields.
  std::string store_section;
  // The gRPC rate limit service's domain directory and options in force (empty: no service).
  std::string rls_dir;
  rls::ServiceOptions rls_options;
  std::shared_ptr<limiter::Limiter> limiter;
  std::unique_ptr<http::Middleware> middleware;
  std::unique_ptr<rls::Service> rls_service;  // with `grpc`
  std::unique_ptr<Api> api;
};

// The fields of `next` that differ from `running` and take effect only after a restart
// (e.g. "listen", "store", "upstream"), in the configuration's order.
std::vector<std::string> restart_fields(const Generation& running, const Generation& next);

// What a reload did.
struct ReloadOutcome {
  bool ok = false;
  std::string error;        // !ok: file, field and reason
  std::size_t rules = 0;    // ok: rules of the configuration now running
  std::vector<std::string> added;          // rules by name
  std::vector<std::string> removed;
  std::vector<std::string> needs_restart;  // fields changed in the file but not applied
};

// The outcome as the JSON body of POST /admin/reload's answer.
std::string reload_json(const ReloadOutcome& outcome);

class Reloader {
 public:
  // Builds the next generation from the file, given the running one; throws ConfigError (or
  // another exception, e.g. std::invalid_argument) when it cannot.
  using Build = std::function<std::shared_ptr<Generation>(const Generation& running)>;
  // Runs after a successful swap, on the Reloader's thread (e.g. forgets cached denials).
  using AfterSwap = std::function<void(const Generation& next)>;

  Reloader(SharedValue<Generation>& current, Build build, AfterSwap after_swap = {});
  ~Reloader();  // waits for the reload under way; requests still queued are dropped
  Reloader(const Reloader&) = delete;
  Reloader& operator=(const Reloader&) = delete;

  // Asks for a reload; `done` (optional) gets its outcome on the Reloader's thread. Returns
  // at once: callable from an io thread or a signal's handler.
  void request(std::function<void(const ReloadOutcome&)> done = {});

  // ratekeeper_config_reloads_total{result}, ratekeeper_config_last_reload_successful,
  // ratekeeper_config_last_reload_success_timestamp_seconds, in Prometheus text.
  void write_metrics(MetricsWriter& out) const;
  std::string metrics_text() const;  // write_metrics() as exposition text

 private:
  void run();
  ReloadOutcome reload_once();

  SharedValue<Generation>& current_;
  Build build_;
  AfterSwap after_swap_;

  mutable std::mutex mu_;
  std::condition_variable wake_;
  std::deque<std::function<void(const ReloadOutcome&)>> pending_;
  std::size_t requested_ = 0;  // requests not yet taken by a reload (some without `done`)
  bool stopping_ = false;

  // Guarded by mu_.
  std::uint64_t successes_ = 0;
  std::uint64_t failures_ = 0;
  bool last_ok_ = true;
  double last_success_seconds_ = 0;  // Unix time of the last success (the start counts as one)

  std::thread thread_;  // last: started once everything else is in place
};

// ratekeeper_build_info{version,compiler,build_type} 1, in Prometheus text.
void write_build_info(MetricsWriter& out);

}  // namespace ratekeeper::server
