#include "redis/cluster.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <mutex>
#include <utility>

#include "ratekeeper/core/contained.hpp"
#include "ratekeeper/core/event_loop.hpp"
#include "ratekeeper/core/shared_value.hpp"
#include "redis/key_slot.hpp"
#include "refresher.hpp"
#include "routed_command.hpp"
#include "topology.hpp"

namespace ratekeeper::redis {
namespace {

struct Node {
  Endpoint endpoint;
  std::unique_ptr<Connection> conn;
  // ASKING must immediately precede the command it applies to on one connection; a second
  // connection, used only for ASK redirections and under a lock, keeps the pair adjacent.
  std::mutex ask_mu;
  std::unique_ptr<Connection> ask_conn;
};

struct SlotMap {
  std::array<Node*, kClusterSlots> slots{};  // nullptr: no master
  std::vector<Node*> masters;
  std::vector<Node*> replicas;
  bool covered = false;
};

}  // namespace

struct Cluster::Impl {
  // Routing state kept between attempts.
  struct Request : detail::RoutedRequest {
    std::uint16_t slot = 0;
    int redirects = 0;
    Node* ask = nullptr;    // one shot: the ASK target
    Node* moved = nullptr;  // one shot: the MOVED target (the map may not know it yet)
  };
  // Where one attempt went; `asking`: after ASKING (an ASK redirection).
  struct Target {
    Node* node = nullptr;
    bool asking = false;
  };

  static ClusterOptions normalized(ClusterOptions o) {
    o.node.db = 0;
    if (o.max_redirects < 0) o.max_redirects = 0;
    return o;
  }

  explicit Impl(ClusterOptions opts)
      : options(normalized(std::move(opts))),
        loop(options.loop ? options.loop : std::make_shared<EventLoop>(std::max(1, options.io_threads))),
        router(*this, *loop, clock_or_system(options.node.clock), {options.retry_min, options.retry_max},
               "redis cluster client closed") {
    for (const auto& seed : options.seeds) node_for(seed);
    refresher = detail::Refresher::start(*loop, options.refresh_interval, options.min_refresh_gap,
                                         "a Redis Cluster topology refresh",
                                         [this](detail::Refresher::Done done) { refresh(std::move(done)); });
  }

  // Before destruction, off the loop's threads (or on one while no other thread sends).
  void shutdown() {
    stopping.store(true, std::memory_order_release);
    refresher->stop();
    // Commands waiting for a retry fail now; handlers running on the loop threads have
    // finished when it returns, and those that start later see `stopping` and the router
    // closed.
    router.close();
    std::lock_guard lock(nodes_mu);
    for (auto& n : nodes) {
      n->ask_conn.reset();
      n->conn.reset();  // what is pending fails with unavailable
    }
  }

  ClusterOptions options;
  std::shared_ptr<EventLoop> loop;  // the given one, or the client's own
  detail::Router<Impl> router;
  std::shared_ptr<detail::Refresher> refresher;
  std::atomic<bool> stopping{false};

  mutable std::mutex nodes_mu;
  std::vector<std::unique_ptr<Node>> nodes;  // never removed before destruction
  SharedValue<const SlotMap> map;

  std::atomic<std::uint64_t> moved{0}, ask{0}, tryagain{0}, clusterdown{0}, topology_errors{0},
      redirect_exhausted{0}, refreshes{0}, map_changes{0};

  Node* node_for(const Endpoint& ep) {
    std::lock_guard lock(nodes_mu);
    for (auto& n : nodes) {
      if (n->endpoint == ep) return n.get();
    }
    auto n = std::make_unique<Node>();
    n->endpoint = ep;
    ConnectionOptions o = options.node;
    o.endpoint = ep;
    n->conn = std::make_unique<Connection>(*loop, o);
    nodes.push_back(std::move(n));
    return nodes.back().get();
  }

  // ---- topology ----

  void request_refresh() { refresher->request(); }

  // One refresh: the known nodes (masters, replicas, then the seeds) asked in turn for
  // CLUSTER SLOTS until one answers with a map.
  struct RefreshRun {
    std::vector<Node*> candidates;
    std::size_t next = 0;
    std::string errors;
    detail::Refresher::Done done;
  };

  void refresh(detail::Refresher::Done done) {
    auto run = std::make_shared<RefreshRun>();
    auto add = [&](Node* n) {
      if (std::find(run->candidates.begin(), run->candidates.end(), n) == run->candidates.end()) {
        run->candidates.push_back(n);
      }
    };
    if (auto current = map.load()) {
      for (Node* n : current->masters) add(n);
      for (Node* n : current->replicas) add(n);
    }
    for (const auto& seed : options.seeds) add(node_for(seed));
    run->done = std::move(done);
    ask_next(run);
  }

  void ask_next(const std::shared_ptr<RefreshRun>& run) {
    static constexpr std::string_view kSlotsCommand[] = {"CLUSTER", "SLOTS"};
    if (stopping.load(std::memory_order_acquire)) {
      run->done("stopping");
      return;
    }
    if (run->next == run->candidates.size()) {
      run->done(run->errors.empty() ? "no node to ask for CLUSTER SLOTS" : run->errors);
      return;
    }
    Node* n = run->candidates[run->next++];
    const Micros timeout = std::max<Micros>(options.node.command_timeout, 500 * kMicrosPerMilli);
    n->conn->command(kSlotsCommand, [this, run, n](Result<Reply> reply) {
      if (stopping.load(std::memory_order_acquire)) {
        run->done("stopping");
        return;
      }
      std::string why;
      // The reply parsed here comes from outside: whatever it makes throw ends this attempt.
      const bool contained = contain("a Redis Cluster topology refresh", [&] {
        if (!reply) {
          why = reply.error().message;
        } else if (reply->is_error()) {
          why = reply->str;
        } else if (auto built = build_map(*reply, n->endpoint); !built) {
          why = built.error().message;
        } else {
          install(std::move(*built));
        }
      });
      if (!contained) why = "the topology refresh failed with an exception";
      if (why.empty()) {
        run->done({});
        return;
      }
      if (!run->errors.empty()) run->errors += "; ";
      run->errors += fmt::format("{}: {}", n->endpoint.to_string(), why);
      ask_next(run);
    }, timeout);
  }

  Result<std::shared_ptr<SlotMap>> build_map(const Reply& reply, const Endpoint& from) {
    auto ranges = detail::parse_cluster_slots(reply, from.host);
    if (!ranges) return std::unexpected(std::move(ranges.error()));
    auto m = std::make_shared<SlotMap>();
    auto add_once = [](std::vector<Node*>& list, Node* n) {
      if (std::find(list.begin(), list.end(), n) == list.end()) list.push_back(n);
    };
    for (const auto& range : *ranges) {
      Node* master = node_for(range.master);
      for (std::size_t s = range.first; s <= range.last; ++s) m->slots[s] = master;
      add_once(m->masters, master);
      for (const auto& replica : range.replicas) add_once(m->replicas, node_for(replica));
    }
    m->covered = std::all_of(m->slots.begin(), m->slots.end(), [](Node* n) { return n != nullptr; });
    return m;
  }

  void install(std::shared_ptr<SlotMap> next) {
    auto previous = map.load();
    if (!previous || previous->slots != next->slots) map_changes.fetch_add(1, std::memory_order_relaxed);
    map.store(std::move(next));
    refreshes.fetch_add(1, std::memory_order_relaxed);
  }

  // ---- commands (the hooks of detail::Router) ----

  void reroute() { request_refresh(); }

  Result<Target> route(Request& req) {
    Target t;
    t.asking = req.ask != nullptr;
    if (t.asking) {
      t.node = std::exchange(req.ask, nullptr);
    } else if (req.moved != nullptr) {
      t.node = std::exchange(req.moved, nullptr);
    } else if (auto m = map.load()) {
      t.node = m->slots[req.slot];
    }
    if (t.node == nullptr) {
      request_refresh();
      return make_error(ErrorCode::redirect, fmt::format("redis cluster: slot {} has no known master", req.slot));
    }
    return t;
  }

  void transmit(Request& req, const Target& t, Micros left, ReplyCallback cb) {
    if (!t.asking) {
      t.node->conn->command(req.argv, std::move(cb), left);
      return;
    }
    std::lock_guard lock(t.node->ask_mu);
    if (!t.node->ask_conn) {
      ConnectionOptions o = options.node;
      o.endpoint = t.node->endpoint;
      t.node->ask_conn = std::make_unique<Connection>(*loop, o);
    }
    t.node->ask_conn->command({"ASKING"}, [](Result<Reply>) {}, left);
    t.node->ask_conn->command(req.argv, std::move(cb), left);
  }

  detail::Disposition on_error_reply(Request& req, const Target& t, const Reply& reply) {
    using detail::Disposition;
    const std::string_view code = reply.error_code();
    if (code == "MOVED" || code == "ASK") {
      const bool is_ask = code == "ASK";
      (is_ask ? ask : moved).fetch_add(1, std::memory_order_relaxed);
      auto target = detail::parse_redirect(reply.str, t.node->endpoint.host);
      if (!target) {
        return Disposition::answer_with(
            Error{ErrorCode::protocol, fmt::format("redis cluster: malformed redirection '{}'", reply.str)});
      }
      if (!is_ask) request_refresh();
      if (++req.redirects > options.max_redirects) {
        redirect_exhausted.fetch_add(1, std::memory_order_relaxed);
        return Disposition::answer_with(
            Error{ErrorCode::redirect, fmt::format("redis cluster: more than {} redirections for slot {} (last: {})",
                                                   options.max_redirects, req.slot, reply.str)});
      }
      (is_ask ? req.ask : req.moved) = node_for(*target);
      return Disposition::resend();
    }
    if (code == "TRYAGAIN") {
      tryagain.fetch_add(1, std::memory_order_relaxed);
      // The importing node asks to wait until the keys have moved: retry there, not through
      // the migrating node's ASK again (which would spend the redirection budget).
      if (t.asking) req.ask = t.node;
      return Disposition::retry(
          Error{ErrorCode::unavailable, fmt::format("redis cluster {}: {}", t.node->endpoint.to_string(), reply.str)});
    }
    if (code == "CLUSTERDOWN" || code == "READONLY" || code == "MASTERDOWN" || code == "LOADING") {
      (code == "CLUSTERDOWN" ? clusterdown : topology_errors).fetch_add(1, std::memory_order_relaxed);
      request_refresh();
      return Disposition::retry(
          Error{ErrorCode::unavailable, fmt::format("redis cluster {}: {}", t.node->endpoint.to_string(), reply.str)});
    }
    return Disposition::answer();
  }
};

Cluster::Cluster(ClusterOptions options) : impl_(std::make_shared<Impl>(std::move(options))) {}

Cluster::~Cluster() { impl_->shutdown(); }

void Cluster::command(std::uint16_t slot, std::span<const std::string_view> argv, ReplyCallback done, Micros timeout) {
  auto req = std::make_shared<Impl::Request>();
  req->slot = slot & (kClusterSlots - 1);
  req->argv = argv;
  req->done = std::move(done);
  req->lane = req->slot;
  impl_->router.start(std::move(req), timeout > 0 ? timeout : impl_->options.node.command_timeout);
}

void Cluster::refresh() { impl_->request_refresh(); }

bool Cluster::ready() const { return status() == "ok"; }

std::string Cluster::status() const {
  auto m = impl_->map.load();
  if (!m) {
    const std::string error = impl_->refresher->last_error("");
    return error.empty() ? "discovering the cluster topology" : "no slot map: " + error;
  }
  if (!m->covered) return "some slots have no master";
  for (Node* n : m->masters) {
    if (n->conn->state() != ConnectionState::connected ||
        n->conn->breaker_state() != CircuitBreaker::State::closed) {
      return n->conn->status();
    }
  }
  return "ok";
}

std::vector<Endpoint> Cluster::masters() const {
  std::vector<Endpoint> out;
  if (auto m = impl_->map.load()) {
    for (Node* n : m->masters) out.push_back(n->endpoint);
  }
  return out;
}

std::optional<Endpoint> Cluster::master_of(std::uint16_t slot) const {
  if (auto m = impl_->map.load()) {
    if (Node* n = m->slots[slot & (kClusterSlots - 1)]) return n->endpoint;
  }
  return std::nullopt;
}

Cluster::Stats Cluster::stats() const noexcept {
  const auto& i = *impl_;
  auto r = [](const std::atomic<std::uint64_t>& a) { return a.load(std::memory_order_relaxed); };
  return Stats{r(i.moved),          r(i.ask),      r(i.tryagain),
               r(i.clusterdown),    r(i.topology_errors), i.router.unsent_retries(),
               r(i.redirect_exhausted), r(i.refreshes), r(i.map_changes)};
}

}  // namespace ratekeeper::redis
