#include "ratekeeper/redis/cluster.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <charconv>
#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>
#include <utility>

#include "ratekeeper/core/contained.hpp"
#include "ratekeeper/core/event_loop.hpp"
#include "ratekeeper/core/shared_value.hpp"
#include "ratekeeper/redis/key_slot.hpp"

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

// "MOVED 3999 127.0.0.1:6381" → slot and endpoint (the replying node's host when empty).
std::optional<Endpoint> redirect_target(std::string_view error, const Endpoint& from) {
  const auto first = error.find(' ');
  if (first == std::string_view::npos) return std::nullopt;
  const auto second = error.find(' ', first + 1);
  if (second == std::string_view::npos) return std::nullopt;
  std::string_view addr = error.substr(second + 1);
  const auto colon = addr.rfind(':');
  if (colon == std::string_view::npos) return std::nullopt;
  if (colon == 0) {
    int port = 0;
    auto [p, ec] = std::from_chars(addr.data() + 1, addr.data() + addr.size(), port);
    if (ec != std::errc() || p != addr.data() + addr.size()) return std::nullopt;
    return Endpoint{from.host, port, ""};
  }
  auto ep = parse_host_port(addr);
  if (!ep) return std::nullopt;
  return *ep;
}

thread_local const void* tl_sending = nullptr;

}  // namespace

struct Cluster::Impl {
  struct Request {
    std::uint16_t slot = 0;
    std::span<const std::string_view> argv;
    ReplyCallback done;
    Micros deadline = 0;
    int redirects = 0;
    int retries = 0;
    Node* ask = nullptr;    // one shot: the ASK target
    Node* moved = nullptr;  // one shot: the MOVED target (the map may not know it yet)
    std::optional<Result<Reply>> sync_result;
    Error last_error{ErrorCode::timeout, "deadline passed"};
  };
  using RequestPtr = std::shared_ptr<Request>;

  explicit Impl(ClusterOptions opts) : options(std::move(opts)) {
    options.node.db = 0;
    if (options.max_redirects < 0) options.max_redirects = 0;
    if (options.retry_min <= 0) options.retry_min = 1;
    if (options.retry_max < options.retry_min) options.retry_max = options.retry_min;
    loop = std::make_unique<EventLoop>(std::max(1, options.io_threads));
    for (const auto& seed : options.seeds) node_for(seed);
    topology = std::thread([this] { topology_main(); });
  }

  ~Impl() {
    {
      std::lock_guard lock(topo_mu);
      stopping = true;
    }
    topo_cv.notify_all();
    if (topology.joinable()) topology.join();
    closing.store(true, std::memory_order_release);
    // Whatever runs on the loop threads now sees `closing`: wait for what started before.
    loop->barrier();
    {
      std::lock_guard lock(nodes_mu);
      for (auto& n : nodes) {
        n->ask_conn.reset();
        n->conn.reset();
      }
    }
    loop.reset();
  }

  ClusterOptions options;
  std::unique_ptr<EventLoop> loop;
  std::atomic<bool> closing{false};

  mutable std::mutex nodes_mu;
  std::vector<std::unique_ptr<Node>> nodes;  // never removed before destruction
  SharedValue<const SlotMap> map;

  std::thread topology;
  std::mutex topo_mu;
  std::condition_variable topo_cv;
  bool refresh_wanted = true;
  bool stopping = false;
  std::string last_refresh_error;  // under topo_mu

  std::atomic<std::uint64_t> moved{0}, ask{0}, tryagain{0}, clusterdown{0}, topology_errors{0},
      unsent_retries{0}, redirect_exhausted{0}, refreshes{0}, map_changes{0};

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

  void request_refresh() {
    {
      std::lock_guard lock(topo_mu);
      if (refresh_wanted) return;
      refresh_wanted = true;
    }
    topo_cv.notify_one();
  }

  void topology_main() {
    std::unique_lock lock(topo_mu);
    while (!stopping) {
      topo_cv.wait_for(lock, std::chrono::microseconds(options.refresh_interval),
                       [this] { return stopping || refresh_wanted; });
      if (stopping) break;
      refresh_wanted = false;
      lock.unlock();
      std::string error;
      // The reply parsed here comes from outside: whatever it makes throw ends this refresh,
      // not the process.
      if (!contain("a Redis Cluster topology refresh", [&] { error = refresh_once(); })) {
        error = "the topology refresh failed with an exception";
      }
      lock.lock();
      last_refresh_error = std::move(error);
      // Refreshes asked for meanwhile coalesce into the next one, at least a gap later.
      topo_cv.wait_for(lock, std::chrono::microseconds(options.min_refresh_gap), [this] { return stopping; });
    }
  }

  // Asks the known nodes in turn for CLUSTER SLOTS; returns "" or why no map was loaded.
  std::string refresh_once() {
    std::vector<Node*> candidates;
    auto add = [&](Node* n) {
      if (std::find(candidates.begin(), candidates.end(), n) == candidates.end()) candidates.push_back(n);
    };
    if (auto current = map.load()) {
      for (Node* n : current->masters) add(n);
      for (Node* n : current->replicas) add(n);
    }
    for (const auto& seed : options.seeds) add(node_for(seed));
    std::string errors;
    const Micros timeout = std::max<Micros>(options.node.command_timeout, 500 * kMicrosPerMilli);
    for (Node* n : candidates) {
      {
        std::lock_guard lock(topo_mu);
        if (stopping) return "stopping";
      }
      auto reply = n->conn->command_sync({"CLUSTER", "SLOTS"}, timeout);
      std::string why;
      if (!reply) {
        why = reply.error().message;
      } else if (reply->is_error()) {
        why = reply->str;
      } else if (auto built = build_map(*reply, n->endpoint); !built) {
        why = built.error().message;
      } else {
        install(std::move(*built));
        return {};
      }
      if (!errors.empty()) errors += "; ";
      errors += fmt::format("{}: {}", n->endpoint.to_string(), why);
    }
    return errors.empty() ? "no node to ask for CLUSTER SLOTS" : errors;
  }

  Result<std::shared_ptr<SlotMap>> build_map(const Reply& reply, const Endpoint& from) {
    if (!reply.is_array()) return make_error(ErrorCode::protocol, "CLUSTER SLOTS: not an array");
    auto m = std::make_shared<SlotMap>();
    auto endpoint_of = [&](const Reply& node) -> std::optional<Endpoint> {
      if (!node.is_array() || node.elements.size() < 2 || !node.elements[1].is_integer()) return std::nullopt;
      std::string host = node.elements[0].str;
      if (host.empty() || host == "?") host = from.host;
      return Endpoint{host, static_cast<int>(node.elements[1].integer), ""};
    };
    for (const auto& range : reply.elements) {
      if (!range.is_array() || range.elements.size() < 3 || !range.elements[0].is_integer() ||
          !range.elements[1].is_integer()) {
        return make_error(ErrorCode::protocol, "CLUSTER SLOTS: malformed slot range");
      }
      const auto start = range.elements[0].integer;
      const auto end = range.elements[1].integer;
      if (start < 0 || end >= kClusterSlots || start > end) {
        return make_error(ErrorCode::protocol, "CLUSTER SLOTS: slot out of range");
      }
      auto master_ep = endpoint_of(range.elements[2]);
      if (!master_ep) return make_error(ErrorCode::protocol, "CLUSTER SLOTS: malformed node");
      Node* master = node_for(*master_ep);
      for (auto s = start; s <= end; ++s) m->slots[static_cast<std::size_t>(s)] = master;
      if (std::find(m->masters.begin(), m->masters.end(), master) == m->masters.end()) m->masters.push_back(master);
      for (std::size_t i = 3; i < range.elements.size(); ++i) {
        if (auto ep = endpoint_of(range.elements[i])) {
          Node* replica = node_for(*ep);
          if (std::find(m->replicas.begin(), m->replicas.end(), replica) == m->replicas.end()) {
            m->replicas.push_back(replica);
          }
        }
      }
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

  // ---- commands ----

  void finish(const RequestPtr& req, Result<Reply> result) {
    auto done = std::move(req->done);
    done(std::move(result));
  }

  void send(const RequestPtr& req) {
    if (closing.load(std::memory_order_acquire)) {
      finish(req, make_error(ErrorCode::unavailable, "redis cluster client closed"));
      return;
    }
    const Micros now = steady_micros();
    if (now >= req->deadline) {
      finish(req, std::unexpected(req->last_error));
      return;
    }
    Node* node = nullptr;
    const bool asking = req->ask != nullptr;
    if (asking) {
      node = std::exchange(req->ask, nullptr);
    } else if (req->moved != nullptr) {
      node = std::exchange(req->moved, nullptr);
    } else if (auto m = map.load()) {
      node = m->slots[req->slot];
    }
    if (node == nullptr) {
      request_refresh();
      retry_later(req, Error{ErrorCode::redirect, fmt::format("redis cluster: slot {} has no known master", req->slot)});
      return;
    }
    const Micros left = req->deadline - now;
    auto on_reply_cb = [this, req, node, asking](Result<Reply> reply) {
      if (tl_sending == req.get()) {
        req->sync_result = std::move(reply);  // failed before being queued: handled below
        return;
      }
      on_reply(req, node, asking, std::move(reply));
    };
    tl_sending = req.get();
    if (asking) {
      std::lock_guard lock(node->ask_mu);
      if (!node->ask_conn) {
        ConnectionOptions o = options.node;
        o.endpoint = node->endpoint;
        node->ask_conn = std::make_unique<Connection>(*loop, o);
      }
      node->ask_conn->command({"ASKING"}, [](Result<Reply>) {}, left);
      node->ask_conn->command(req->argv, std::move(on_reply_cb), left);
    } else {
      node->conn->command(req->argv, std::move(on_reply_cb), left);
    }
    tl_sending = nullptr;
    if (req->sync_result) {
      auto result = std::move(*req->sync_result);
      req->sync_result.reset();
      if (result) {
        on_reply(req, node, asking, std::move(result));
        return;
      }
      // Not sent: safe to retry elsewhere once the map says where.
      unsent_retries.fetch_add(1, std::memory_order_relaxed);
      request_refresh();
      retry_later(req, std::move(result.error()));
    }
  }

  void retry_later(const RequestPtr& req, Error why) {
    req->last_error = std::move(why);
    const Micros now = steady_micros();
    const int shift = std::min(req->retries++, 20);
    Micros delay = std::min(options.retry_max, options.retry_min << shift);
    if (now >= req->deadline || closing.load(std::memory_order_acquire)) {
      finish(req, std::unexpected(req->last_error));
      return;
    }
    delay = std::min(delay, req->deadline - now);
    loop->post(req->slot, [this, req] { send(req); }, delay);
  }

  // `asking`: the command went to `node` after ASKING (an ASK redirection).
  void on_reply(const RequestPtr& req, Node* node, bool asking, Result<Reply> reply) {
    if (!reply || !reply->is_error() || closing.load(std::memory_order_acquire)) {
      // A lost command may have run: not retried. The topology may have changed.
      if (!reply && reply.error().code != ErrorCode::timeout) request_refresh();
      finish(req, std::move(reply));
      return;
    }
    const std::string_view code = reply->error_code();
    if (code == "MOVED" || code == "ASK") {
      const bool is_ask = code == "ASK";
      (is_ask ? ask : moved).fetch_add(1, std::memory_order_relaxed);
      auto target = redirect_target(reply->str, node->endpoint);
      if (!target) {
        finish(req, make_error(ErrorCode::protocol, fmt::format("redis cluster: malformed redirection '{}'", reply->str)));
        return;
      }
      if (!is_ask) request_refresh();
      if (++req->redirects > options.max_redirects) {
        redirect_exhausted.fetch_add(1, std::memory_order_relaxed);
        finish(req, make_error(ErrorCode::redirect,
                               fmt::format("redis cluster: more than {} redirections for slot {} (last: {})",
                                           options.max_redirects, req->slot, reply->str)));
        return;
      }
      (is_ask ? req->ask : req->moved) = node_for(*target);
      send(req);
      return;
    }
    if (code == "TRYAGAIN") {
      tryagain.fetch_add(1, std::memory_order_relaxed);
      // The importing node asks to wait until the keys have moved: retry there, not through
      // the migrating node's ASK again (which would spend the redirection budget).
      if (asking) req->ask = node;
      retry_later(req, Error{ErrorCode::unavailable, fmt::format("redis cluster {}: {}", node->endpoint.to_string(), reply->str)});
      return;
    }
    if (code == "CLUSTERDOWN" || code == "READONLY" || code == "MASTERDOWN" || code == "LOADING") {
      (code == "CLUSTERDOWN" ? clusterdown : topology_errors).fetch_add(1, std::memory_order_relaxed);
      request_refresh();
      retry_later(req, Error{ErrorCode::unavailable, fmt::format("redis cluster {}: {}", node->endpoint.to_string(), reply->str)});
      return;
    }
    finish(req, std::move(reply));
  }
};

Cluster::Cluster(ClusterOptions options) : impl_(std::make_shared<Impl>(std::move(options))) {}

Cluster::~Cluster() = default;

void Cluster::command(std::uint16_t slot, std::span<const std::string_view> argv, ReplyCallback done, Micros timeout) {
  auto req = std::make_shared<Impl::Request>();
  req->slot = slot & (kClusterSlots - 1);
  req->argv = argv;
  req->done = std::move(done);
  req->deadline = steady_micros() + (timeout > 0 ? timeout : impl_->options.node.command_timeout);
  impl_->send(req);
}

void Cluster::refresh() { impl_->request_refresh(); }

bool Cluster::ready() const { return status() == "ok"; }

std::string Cluster::status() const {
  auto m = impl_->map.load();
  if (!m) {
    std::lock_guard lock(impl_->topo_mu);
    return impl_->last_refresh_error.empty() ? "discovering the cluster topology"
                                             : "no slot map: " + impl_->last_refresh_error;
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
               r(i.clusterdown),    r(i.topology_errors), r(i.unsent_retries),
               r(i.redirect_exhausted), r(i.refreshes), r(i.map_changes)};
}

}  // namespace ratekeeper::redis
