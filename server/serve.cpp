// `ratekeeper serve`: assembles the parts: loads the configuration, opens the store, and
// serves the routes of api.hpp over the HTTP server on one event loop.

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <yaml-cpp/yaml.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <csignal>
#include <expected>
#include <cstdio>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

#include "api.hpp"
#include "commands.hpp"
#include "config.hpp"
#include "logging.hpp"
#include "reload.hpp"
#include "rls_config.hpp"
#include "yaml_reader.hpp"
#include "ratekeeper/core/event_loop.hpp"
#include "ratekeeper/core/log_limit.hpp"
#include "ratekeeper/core/periodic.hpp"
#include "ratekeeper/core/metrics_writer.hpp"
#include "ratekeeper/core/shared_value.hpp"
#include "ratekeeper/http/middleware.hpp"
#include "ratekeeper/http/latency_metrics.hpp"
#include "ratekeeper/http/proxy.hpp"
#include "ratekeeper/http/server.hpp"
#include "ratekeeper/limiter/limiter.hpp"
#include "ratekeeper/rls/grpc_server.hpp"
#include "ratekeeper/rls/service.hpp"
#include "ratekeeper/store/denial_cache.hpp"
#include "ratekeeper/store/leasing_store.hpp"
#include "ratekeeper/redis/url.hpp"
#include "ratekeeper/store/open_store.hpp"

namespace ratekeeper::server {
namespace {

using http::Request;
using http::Responder;

struct ServeArgs {
  std::string config;
  std::string listen;
  std::string store;
  int threads = 0;
};

// The configuration file with the command line's overrides applied (as at start, so that a
// reload compares like with like). Throws ConfigError.
Config load_serve_config(const ServeArgs& args) {
  Config config = load_config(args.config);
  if (!args.listen.empty()) {
    auto parsed = parse_listen_address(args.listen);
    if (!parsed) throw ConfigError("--listen", args.listen, parsed.error().message);
    config.http.host = std::move(parsed->host);
    config.http.port = parsed->port;
  }
  if (args.threads > 0) config.http.threads = args.threads;
  if (!args.store.empty()) {
    config.store.url = args.store;
  } else if (!config.store_configured) {
    config.store.url = "memory://";
  }
  // The decision log goes to stdout; the library writes none without a sink.
  if (config.limiter.decision_log.enabled) {
    config.limiter.decision_log.sink = limiter::stdout_decision_sink();
  }
  return config;
}

// The `store` section of the file as written, to tell whether any of its fields changed;
// empty when absent (or when the file cannot be read again).
std::string store_section(const std::string& path) {
  try {
    const YAML::Node root = YAML::Load(read_file(path));  // never blocks on a FIFO
    if (!root.IsMap() || !root["store"]) return {};
    return YAML::Dump(root["store"]);
  } catch (const std::exception&) {
    return {};
  }
}

// What lives as long as the process, shared by every generation of the configuration.
struct Process {
  std::shared_ptr<EventLoop> loop;
  store::Store* store = nullptr;
  store::DenialCache* denial_cache = nullptr;
  store::LeasingStore* leasing = nullptr;
  bool proxy = false;  // the routes are the admin listener
  bool grpc = false;   // the gRPC rate limit service runs
  std::function<void(MetricsWriter&)> extra_metrics;
  std::function<void(Responder)> reload;
};

// Builds the parts of one configuration over the process's store. `rls_config`: the domains
// (their rules are appended to the limiter's here); `running`: the generation it replaces,
// whose metrics it continues. Throws ConfigError or std::invalid_argument.
std::shared_ptr<Generation> build_generation(Config config, std::optional<rls::RlsConfig> rls_config,
                                             rls::ServiceOptions rls_options, const Process& process,
                                             const Generation* running) {
  auto g = std::make_shared<Generation>();
  g->config = std::move(config);
  g->store_section = store_section(g->config.source);
  if (rls_config) {
    rls::append_limiter_rules(*rls_config, g->config.limiter.rules);
    g->rls_options = rls_options;
  }
  g->limiter = std::make_shared<limiter::Limiter>(g->config.limiter, *process.store);
  g->middleware = std::make_unique<http::Middleware>(*g->limiter, g->config.middleware);
  if (rls_config) {
    g->rls_service = std::make_unique<rls::Service>(std::move(*rls_config), *g->limiter, rls_options);
  }
  // Counters survive a reload one way: each component continues the running one's.
  if (running != nullptr) {
    g->limiter->share_overrides(*running->limiter);
    g->limiter->continue_metrics(*running->limiter);
    g->middleware->continue_metrics(*running->middleware);
    if (g->rls_service && running->rls_service) g->rls_service->continue_metrics(*running->rls_service);
  }
  ApiOptions api_options{
      .metrics_enabled = g->config.metrics_enabled,
      // With an upstream the routes are the admin listener's: never the demo API.
      .demo_routes = g->config.demo_api && !process.proxy,
      .loop = process.loop,
      .extra_metrics = process.extra_metrics,
      .reload = process.reload,
  };
  g->api = std::make_unique<Api>(*g->limiter, *g->middleware, std::move(api_options));
  return g;
}

// The next generation from the file, for a reload. What only a restart can change stays as
// the process has it: the gRPC service keeps running on the domain directory it last had
// when `grpc` is gone from the file, and is not started when it appears.
std::shared_ptr<Generation> reload_generation(const ServeArgs& args, const Process& process,
                                              const Generation& running) {
  Config config = load_serve_config(args);
  // The paths stay normalised as the running server and proxy do it (http, upstream: restart).
  config.middleware.paths = running.config.middleware.paths;
  // A listener started with TLS keeps it until a restart, with the last certificate read.
  if (running.config.tls && !config.tls) config.tls = running.config.tls;
  if (running.config.admin.tls && !config.admin.tls) config.admin.tls = running.config.admin.tls;
  if (limiter::any_leased(config.limiter.rules) && process.leasing == nullptr && process.store->kind() != "memory") {
    spdlog::warn("configuration reload: leased rules are checked against the store directly "
                 "until a restart (the leasing store is set up at start)");
  }
  std::optional<rls::RlsConfig> rls_config;
  rls::ServiceOptions rls_options = running.rls_options;
  if (process.grpc) {
    std::string dir = running.rls_dir;
    if (config.grpc) {
      dir = config.grpc->config_dir;
      rls_options.response_headers = config.grpc->response_headers;
      rls_options.max_message_bytes = config.grpc->max_message_bytes;
    }
    rls_config = load_rls_config(dir);
    auto g = build_generation(std::move(config), std::move(rls_config), rls_options, process, &running);
    g->rls_dir = dir;
    return g;
  }
  return build_generation(std::move(config), std::nullopt, rls_options, process, &running);
}

// What `serve` starts from: the configuration file and, with `grpc`, the rate limit
// service's domains. Errors are said on stderr; the exit status comes back.
struct StartConfig {
  Config config;
  std::optional<rls::RlsConfig> rls_config;
  rls::ServiceOptions rls_options;
};

std::expected<StartConfig, int> load_start_config(const ServeArgs& args) {
  StartConfig out;
  try {
    out.config = load_serve_config(args);
  } catch (const ConfigError& e) {
    std::fprintf(stderr, "ratekeeper serve: invalid configuration: %s\n", e.what());
    return std::unexpected(2);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ratekeeper serve: cannot load configuration %s: %s\n", args.config.c_str(), e.what());
    return std::unexpected(2);
  }
  const Config& config = out.config;
  set_up_logging(config.logging.format, spdlog::level::from_str(config.logging.level));
  if (args.store.empty() && !config.store_configured) {
    spdlog::info("no store configured: using memory:// (limits are not shared between instances)");
  }
  // Envoy's rate limit service: its domains' limits are rules of the one limiter.
  if (config.grpc) {
    try {
      out.rls_config = load_rls_config(config.grpc->config_dir);
    } catch (const ConfigError& e) {
      std::fprintf(stderr, "ratekeeper serve: invalid rate limit service configuration: %s\n", e.what());
      return std::unexpected(2);
    }
    out.rls_options.response_headers = config.grpc->response_headers;
    out.rls_options.max_message_bytes = config.grpc->max_message_bytes;
  }
  return out;
}

// A store still unreachable once its first connection could have been made is said in the
// log, with the reason, and not only by /readyz. `watch` names the store until it goes.
struct StoreWatch {
  std::mutex mu;
  const store::Store* store = nullptr;
};

void warn_if_unreachable(EventLoop& loop, std::shared_ptr<StoreWatch> watch, const store::StoreOptions& options) {
  const Micros after = options.connect_timeout + 100 * kMicrosPerMilli;
  loop.post(0, [watch = std::move(watch), url = redis::redact_url(options.url), after] {
    const std::lock_guard lock(watch->mu);
    if (watch->store == nullptr) return;
    const auto health = watch->store->health();
    if (health.ready) return;
    spdlog::warn("store {} not reachable {} ms after start: {}; checks are answered by the "
                 "failure policy until it is",
                 url, after / kMicrosPerMilli, health.detail);
  }, after);
}

// Every listener up, or the reason one is not (the exit status is 1).
Result<void> listen_all(http::Server& server, http::Proxy* proxy, rls::GrpcServer* grpc) {
  if (auto listening = server.listen(); !listening) return listening;
  if (proxy != nullptr) {
    if (auto listening = proxy->listen(); !listening) return listening;
  }
  if (grpc != nullptr) {
    if (auto listening = grpc->start(); !listening) return listening;
  }
  return {};
}

int serve(const ServeArgs& args) {
  // A SIGHUP before the servers handle it (while starting) must not end the process.
  std::signal(SIGHUP, SIG_IGN);
  if (!args.listen.empty()) {
    if (auto parsed = parse_listen_address(args.listen); !parsed) {
      std::fprintf(stderr, "ratekeeper serve: --listen %s: %s\n", args.listen.c_str(),
                   parsed.error().message.c_str());
      return 2;
    }
  }
  auto loaded = load_start_config(args);
  if (!loaded) return loaded.error();
  auto& [config, rls_config, rls_options] = *loaded;

  http::ServerOptions options = config.http;

  // One event loop for the HTTP connections and the Redis connections: a request is read,
  // checked against Redis and answered on one thread, without hand-offs between threads.
  // Declared first, destroyed last.
  auto loop = std::make_shared<EventLoop>(options.threads);
  options.loop = loop;
  config.store.loop = loop;

  // The configuration of the moment: each request takes it when it arrives and holds it
  // until answered (its responder keeps it), so a reload never splits a request.
  SharedValue<Generation> current;
  // Set before any listener (and so any signal) is up, cleared once they are drained.
  std::atomic<Reloader*> reloader{nullptr};
  options.on_reload = [&reloader] {
    if (Reloader* r = reloader.load(); r != nullptr) r->request();
  };

  // The routes (own endpoints, decision API, demo API) are served on `listen`, or on `admin`
  // when `listen` proxies to an upstream; then the proxy handles the signals.
  // The access log and the latency histograms, for the process's life (a reload reopens the
  // log's file: log rotation).
  std::shared_ptr<http::AccessLog> access_log;
  if (config.access_log) {
    auto opened_log = http::AccessLog::open(*config.access_log);
    if (!opened_log) {
      std::fprintf(stderr, "ratekeeper serve: %s\n", opened_log.error().message.c_str());
      return 2;
    }
    access_log = std::move(*opened_log);
    options.access_log = access_log;
  }
  auto latency = std::make_shared<http::LatencyMetrics>();
  options.latency = latency;
  // A TLS listener's connections take the certificate of the configuration of the moment: a
  // reload re-reads it, and the connections accepted afterwards get the new one.
  if (config.tls) {
    options.tls = [&current] { return current.load()->config.tls->context; };
  }
  http::ServerOptions routes_options = options;
  routes_options.deny_unreadable_path = "/v1/auth";  // nginx's auth_request: never an outage
  if (config.upstream) {
    routes_options.host = config.admin.host;
    routes_options.port = config.admin.port;
    routes_options.handle_signals = false;
    routes_options.tls = nullptr;
    if (config.admin.tls) {
      routes_options.tls = [&current] { return current.load()->config.admin.tls->context; };
    }
  }
  // Destroyed after the store: callbacks still held by the store post into its sessions.
  http::Server server(routes_options, [&current](Request request, Responder respond) {
    std::shared_ptr<Generation> generation = current.load();
    Api& api = *generation->api;
    api.handle(std::move(request), [generation = std::move(generation),
                                    respond = std::move(respond)](http::Response r) {
      respond(std::move(r));
    });
  });
  std::unique_ptr<http::Proxy> proxy;  // likewise
  std::unique_ptr<rls::GrpcServer> grpc;

  // The store and, in front of it, the denial cache and (leased rules) the leasing store.
  auto opened = store::open_store_stack(
      config.store, {.denied_cache_keys = config.denied_cache_keys, .leases = limiter::any_leased(config.limiter.rules)});
  if (!opened) {
    std::fprintf(stderr, "ratekeeper serve: store %s: %s\n", redis::redact_url(config.store.url).c_str(),
                 opened.error().message.c_str());
    return 2;
  }
  std::unique_ptr<store::Store> store = std::move(opened->store);
  store::LeasingStore* leasing = opened->leasing;
  // The per-identity overrides, read again from the store every `overrides.refresh` (the
  // configuration of the moment's). Declared after the store: stopped before it goes, on
  // every way out.
  std::optional<Periodic> overrides_refresh;
  // The counts of rate-bounded log lines left out at the end of a burst, written each second.
  std::optional<Periodic> left_out_report;
  Process process;
  process.denial_cache = opened->denial_cache;
  process.loop = loop;
  process.store = store.get();
  // The store for the start-up check on the loop, until it goes.
  auto store_watch = std::make_shared<StoreWatch>();
  store_watch->store = store.get();
  process.leasing = leasing;
  process.proxy = config.upstream.has_value();
  process.grpc = rls_config.has_value();
  process.extra_metrics = [&server, &proxy, &current, &reloader, latency, access_log](MetricsWriter& out) {
    write_build_info(out);
    write_process_metrics(out);
    latency->write(out);
    if (access_log) access_log->write_metrics(out);
    if (Reloader* r = reloader.load(); r != nullptr) r->write_metrics(out);
    write_http_server_metrics(out, server, proxy.get());
    if (proxy) http::write_proxy_metrics(out, *proxy);
    if (const auto generation = current.load(); generation && generation->rls_service) {
      generation->rls_service->write_metrics(out);
    }
  };
  process.reload = [&reloader](Responder respond) {
    Reloader* r = reloader.load();
    if (r == nullptr) {
      respond(http::Response{503, "application/json", {}, R"({"error":"not ready to reload"})"});
      return;
    }
    r->request([respond = std::move(respond)](const ReloadOutcome& outcome) {
      respond(http::Response{outcome.ok ? 200 : 422, "application/json", {}, reload_json(outcome)});
    });
  };
  try {
    const std::string rls_dir = config.grpc ? config.grpc->config_dir : std::string();
    auto first = build_generation(config, std::move(rls_config), rls_options, process, nullptr);
    first->rls_dir = rls_dir;
    current.store(std::move(first));
    // Reloads run on the Reloader's thread; it is stopped before the store goes.
    auto running_reloader = std::make_unique<Reloader>(
        current,
        [&args, &process](const Generation& running) {
          return reload_generation(args, process, running);
        },
        [&process, access_log](const Generation& next) {
          set_up_logging(next.config.logging.format, spdlog::level::from_str(next.config.logging.level));
          // Log rotation: the file is opened again by its path.
          if (access_log) {
            if (auto reopened = access_log->reopen(); !reopened) {
              spdlog::error("configuration reload: {}; writing on to the file open before", reopened.error().message);
            }
          }
          // A limit raised (or a rule gone) may admit what was denied: known denials go.
          if (process.denial_cache != nullptr) process.denial_cache->clear();
        });
    reloader.store(running_reloader.get());
    left_out_report.emplace(*loop, kMicrosPerSecond, [](Periodic::Done done) {
      LogLimit::report_left_out();
      done();
    });
    overrides_refresh.emplace(
        *loop, 0, [&current] { return current.load()->config.overrides_refresh; },
        [&current](Periodic::Done done) {
          std::shared_ptr<Generation> g = current.load();
          // A failure is logged and counted by the limiter (the table held stays in effect).
          g->limiter->refresh_overrides([g, done = std::move(done)](Result<bool>) { done(); });
        });

    if (config.upstream) {
      proxy = std::make_unique<http::Proxy>(options, *config.upstream, [&current] {
        std::shared_ptr<Generation> generation = current.load();
        return std::shared_ptr<http::Middleware>(generation, generation->middleware.get());
      });
    }
    if (process.grpc) {
      grpc = std::make_unique<rls::GrpcServer>(
          [&current] {
            std::shared_ptr<Generation> generation = current.load();
            return std::shared_ptr<rls::Service>(generation, generation->rls_service.get());
          },
          rls::GrpcServerOptions{.host = config.grpc->host,
                                 .port = config.grpc->port,
                                 .threads = config.grpc->threads,
                                 .handshake_timeout = config.grpc->handshake_timeout,
                                 .loop = loop});
    }

    if (auto listening = listen_all(server, proxy.get(), grpc.get()); !listening) {
      std::fprintf(stderr, "ratekeeper serve: %s\n", listening.error().message.c_str());
      return 1;
    }
    if (grpc) {
      spdlog::info("rate limit service (gRPC) on {}: {} domain(s) from {}", grpc->address(),
                   current.load()->rls_service->config().domains.size(), config.grpc->config_dir);
    }
    spdlog::info("store {} ({})", store->kind(), redis::redact_url(config.store.url));
    if (store->kind() != "memory") warn_if_unreachable(*loop, store_watch, config.store);
    spdlog::info("{} rule(s) from {}, {} io thread(s)", current.load()->config.limiter.rules.size(),
                 config.source, options.threads);
    if (proxy) {
      spdlog::info("listening on {}{}, proxying to {}://{}:{}", proxy->address(), config.tls ? " (TLS)" : "",
                   config.upstream->tls.enabled ? "https" : "http", config.upstream->host, config.upstream->port);
      spdlog::info("admin endpoints on {}{}", server.address(), config.admin.tls ? " (TLS)" : "");
      std::thread admin([&server] { server.run(); });
      proxy->run();  // until SIGINT/SIGTERM, then drained
      server.stop();
      admin.join();
    } else {
      spdlog::info("listening on {}{}", server.address(), config.tls ? " (TLS)" : "");
      server.run();
    }
    // Calls in flight are answered (the loop and the store still run), then no more.
    if (grpc) grpc->stop();
    // No reload from here on; one under way finishes first.
    reloader.store(nullptr);
    running_reloader.reset();
    spdlog::info("drained, exiting");
    // The store goes first: callbacks it still holds refer to the limiter. Leases' unused
    // units go back to the store then.
    if (leasing != nullptr) leasing->shutdown();
    overrides_refresh.reset();
    left_out_report.reset();
    LogLimit::report_left_out();  // what the last second left out
    {
      const std::lock_guard lock(store_watch->mu);
      store_watch->store = nullptr;
    }
    store.reset();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ratekeeper serve: %s\n", e.what());
    return 1;
  }
  return 0;
}

}  // namespace

void register_serve_command(CLI::App& app) {
  auto args = std::make_shared<ServeArgs>();
  auto* cmd =
      app.add_subcommand("serve", "Serve the demo API (or proxy to an upstream), the decision API and metrics over HTTP");
  cmd->add_option("--config", args->config, "YAML configuration file")->required();
  cmd->add_option("--listen", args->listen, "HOST:PORT to listen on (overrides the configuration)");
  cmd->add_option("--store", args->store,
                  "store URL: memory://, redis://host:port, ... (overrides the configuration)");
  cmd->add_option("--threads", args->threads, "io threads (overrides the configuration)")
      ->check(CLI::Range(1, 256));
  cmd->callback([args] { set_exit_code(serve(*args)); });
}

}  // namespace ratekeeper::server
