// `ratekeeper serve`: assembles the parts: loads the configuration, opens the store, and
// serves the routes of api.hpp over the HTTP server on one event loop.

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

#include "api.hpp"
#include "commands.hpp"
#include "config.hpp"
#include "rls_config.hpp"
#include "ratekeeper/core/event_loop.hpp"
#include "ratekeeper/http/middleware.hpp"
#include "ratekeeper/http/proxy.hpp"
#include "ratekeeper/http/server.hpp"
#include "ratekeeper/limiter/limiter.hpp"
#include "ratekeeper/rls/grpc_server.hpp"
#include "ratekeeper/rls/service.hpp"
#include "ratekeeper/store/denial_cache.hpp"
#include "ratekeeper/store/leasing_store.hpp"
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

int serve(const ServeArgs& args) {
  Config config;
  try {
    config = load_config(args.config);
  } catch (const ConfigError& e) {
    std::fprintf(stderr, "ratekeeper serve: invalid configuration: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ratekeeper serve: cannot load configuration %s: %s\n",
                 args.config.c_str(), e.what());
    return 2;
  }
  const auto level = spdlog::level::from_str(config.logging.level);
  spdlog::set_level(level);
  spdlog::flush_on(std::min(level, spdlog::level::info));
  // The decision log goes to stdout; the library writes none without a sink.
  if (config.limiter.decision_log.enabled) {
    config.limiter.decision_log.sink = limiter::stdout_decision_sink();
  }

  if (!args.listen.empty()) {
    auto parsed = parse_listen_address(args.listen);
    if (!parsed) {
      std::fprintf(stderr, "ratekeeper serve: --listen %s: %s\n", args.listen.c_str(),
                   parsed.error().message.c_str());
      return 2;
    }
    config.http.host = std::move(parsed->host);
    config.http.port = parsed->port;
  }
  if (args.threads > 0) config.http.threads = args.threads;
  if (!args.store.empty()) {
    config.store.url = args.store;
  } else if (!config.store_configured) {
    config.store.url = "memory://";
    spdlog::info("no store configured: using memory:// (limits are not shared between instances)");
  }

  // Envoy's rate limit service: its domains' limits are rules of the one limiter.
  std::optional<rls::RlsConfig> rls_config;
  if (config.grpc) {
    try {
      rls_config = load_rls_config(config.grpc->config_dir);
    } catch (const ConfigError& e) {
      std::fprintf(stderr, "ratekeeper serve: invalid rate limit service configuration: %s\n", e.what());
      return 2;
    }
    rls::append_limiter_rules(*rls_config, config.limiter.rules);
  }

  http::ServerOptions& options = config.http;

  // One event loop for the HTTP connections and the Redis connections: a request is read,
  // checked against Redis and answered on one thread, without hand-offs between threads.
  // Declared first, destroyed last.
  auto loop = std::make_shared<EventLoop>(options.threads);
  options.loop = loop;
  config.store.loop = loop;

  // The routes (own endpoints, decision API, demo API) are served on `listen`, or on `admin`
  // when `listen` proxies to an upstream; then the proxy handles the signals.
  http::ServerOptions routes_options = options;
  if (config.upstream) {
    routes_options.host = config.admin.host;
    routes_options.port = config.admin.port;
    routes_options.handle_signals = false;
  }
  Api* api = nullptr;
  // Destroyed after the store: callbacks still held by the store post into its sessions.
  http::Server server(routes_options, [&api](Request request, Responder respond) {
    api->handle(std::move(request), std::move(respond));
  });
  std::unique_ptr<http::Proxy> proxy;  // likewise
  std::unique_ptr<rls::Service> rls_service;  // likewise
  std::unique_ptr<rls::GrpcServer> grpc;

  auto opened = store::open_store(config.store);
  if (!opened) {
    std::fprintf(stderr, "ratekeeper serve: store %s: %s\n", config.store.url.c_str(),
                 opened.error().message.c_str());
    return 2;
  }
  std::unique_ptr<store::Store> store = std::move(*opened);
  if (store->kind() != "memory" && config.denied_cache_keys > 0) {
    store = std::make_unique<store::DenialCache>(std::move(store),
                                                 store::DenialCacheOptions{config.denied_cache_keys, 16});
  }
  // Leased rules: in front of everything, so that a leased key's checks never reach the
  // store but for its grants. On memory:// leases would only add a second copy of the count.
  store::LeasingStore* leasing = nullptr;
  const bool leases = std::any_of(config.limiter.rules.begin(), config.limiter.rules.end(),
                                  [](const limiter::Rule& rule) { return rule.lease.enabled(); });
  if (leases && store->supports_leases() && store->kind() != "memory") {
    auto leased = std::make_unique<store::LeasingStore>(
        std::move(store), store::LeasingStoreOptions{.clock = config.store.clock, .reaper_thread = true});
    leasing = leased.get();
    store = std::move(leased);
  } else if (leases && store->kind() != "memory") {
    spdlog::warn("store {} does not grant leases: leased rules are checked against it directly", store->kind());
  }
  try {
    limiter::Limiter limiter(config.limiter, *store);
    http::Middleware middleware(limiter, config.middleware);
    if (config.upstream) {
      proxy = std::make_unique<http::Proxy>(options, *config.upstream, middleware);
    }
    if (rls_config) {
      rls_service = std::make_unique<rls::Service>(
          std::move(*rls_config), limiter,
          rls::ServiceOptions{.response_headers = config.grpc->response_headers,
                              .max_message_bytes = config.grpc->max_message_bytes});
      grpc = std::make_unique<rls::GrpcServer>(
          *rls_service, rls::GrpcServerOptions{.host = config.grpc->host,
                                               .port = config.grpc->port,
                                               .threads = config.grpc->threads,
                                               .loop = loop});
    }
    ApiOptions api_options{
        .metrics_enabled = config.metrics_enabled,
        .demo_routes = !proxy,  // with an upstream the routes are the admin listener
        .loop = loop,
        .extra_metrics =
            [&server, &proxy, &rls_service, leasing] {
              std::string text = http_server_metrics(server);
              if (proxy) text += http::proxy_metrics(*proxy);
              if (rls_service) text += rls_service->metrics_text();
              if (leasing != nullptr) text += leasing->metrics_text();
              return text;
            },
    };
    Api routes(limiter, middleware, std::move(api_options));
    api = &routes;

    if (auto listening = server.listen(); !listening) {
      std::fprintf(stderr, "ratekeeper serve: %s\n", listening.error().message.c_str());
      return 1;
    }
    if (proxy) {
      if (auto listening = proxy->listen(); !listening) {
        std::fprintf(stderr, "ratekeeper serve: %s\n", listening.error().message.c_str());
        return 1;
      }
    }
    if (grpc) {
      if (auto listening = grpc->start(); !listening) {
        std::fprintf(stderr, "ratekeeper serve: %s\n", listening.error().message.c_str());
        return 1;
      }
      spdlog::info("rate limit service (gRPC) on {}: {} domain(s) from {}", grpc->address(),
                   rls_service->config().domains.size(), config.grpc->config_dir);
    }
    spdlog::info("store {} ({})", store->kind(), config.store.url);
    spdlog::info("{} rule(s) from {}, {} io thread(s)", config.limiter.rules.size(), config.source,
                 options.threads);
    if (proxy) {
      spdlog::info("listening on {}, proxying to http://{}:{}", proxy->address(),
                   config.upstream->host, config.upstream->port);
      spdlog::info("admin endpoints on {}", server.address());
      std::thread admin([&server] { server.run(); });
      proxy->run();  // until SIGINT/SIGTERM, then drained
      server.stop();
      admin.join();
    } else {
      spdlog::info("listening on {}", server.address());
      server.run();
    }
    // Calls in flight are answered (the loop and the store still run), then no more.
    if (grpc) grpc->stop();
    spdlog::info("drained, exiting");
    // The store goes first: callbacks it still holds refer to the limiter. Leases' unused
    // units go back to the store then.
    if (leasing != nullptr) leasing->shutdown();
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
