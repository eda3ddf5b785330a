#include "ratekeeper/redis/sentinel.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "ratekeeper/core/contained.hpp"
#include "ratekeeper/core/event_loop.hpp"
#include "ratekeeper/core/shared_value.hpp"
#include "routed_command.hpp"
#include "subscriber.hpp"
#include "topology.hpp"

namespace ratekeeper::redis {
namespace {

constexpr std::string_view kSwitchMaster = "+switch-master";

}  // namespace

struct Sentinel::Impl {
  using Request = detail::RoutedRequest;
  // The master's connection an attempt goes to. A connection replaced by a switch is kept
  // (`retired`) for 10 s: long past the handing over of any command routed to it.
  using Target = Connection*;

  explicit Impl(SentinelOptions opts)
      : options(std::move(opts)),
        loop(options.loop ? options.loop : std::make_shared<EventLoop>(std::max(1, options.io_threads))),
        clock(clock_or_system(options.master.clock)),
        router(*this, *loop, clock, {options.retry_min, options.retry_max}, "redis sentinel client closed") {
    for (const auto& ep : options.sentinels) {
      ConnectionOptions o = options.sentinel;
      o.endpoint = ep;
      sentinels.push_back(std::make_unique<Connection>(*loop, o));
    }
    for (std::size_t i = 0; i < options.sentinels.size(); ++i) {
      detail::SubscriberOptions so;
      so.endpoint = options.sentinels[i];
      so.credentials = options.sentinel.credentials;
      so.channels = {std::string(kSwitchMaster)};
      so.connect_timeout = options.sentinel.connect_timeout;
      so.reconnect_min = options.sentinel.reconnect_min;
      so.reconnect_max = options.sentinel.reconnect_max;
      subscribers.push_back(std::make_unique<detail::Subscriber>(
          loop->context(i), std::move(so),
          [this, i](std::string_view, std::string_view message) { on_switch_master(i, message); },
          [this](bool first) {
            if (!first) on_resubscribed();  // may have missed announcements
          }));
    }
    resolver = std::thread([this] { resolver_main(); });
  }

  ~Impl() {
    subscribers.clear();  // no message callback runs once this returns
    {
      std::lock_guard lock(mu);
      stopping = true;
    }
    cv.notify_all();
    if (resolver.joinable()) resolver.join();
    // Commands waiting for a retry fail now; whatever runs on the loop threads from here on
    // sees the router closed.
    router.close();
    current.store(nullptr);
    {
      std::lock_guard lock(mu);
      retired.clear();
      in_use.reset();
    }
    sentinels.clear();
  }

  SentinelOptions options;
  std::shared_ptr<EventLoop> loop;  // the given one, or the client's own
  const Clock& clock;
  detail::Router<Impl> router;
  std::vector<std::unique_ptr<Connection>> sentinels;
  SharedValue<Connection> current;
  std::vector<std::unique_ptr<detail::Subscriber>> subscribers;  // one per sentinel, same order

  std::thread resolver;
  mutable std::mutex mu;
  std::condition_variable cv;
  bool wanted = true;
  bool stopping = false;
  std::optional<Endpoint> master_ep;            // under mu
  std::shared_ptr<Connection> in_use;           // under mu: the connection in `current`
  std::vector<std::pair<Micros, std::shared_ptr<Connection>>> retired;  // under mu
  std::string last_error = "resolving the master";  // under mu
  std::size_t first_asked = 0;  // under mu: the sentinel resolutions ask first
  // Under mu: the last switch acted on, "<old-ip> <old-port> <new-ip> <new-port>".
  std::string announced_switch;

  std::atomic<std::size_t> next_lane{0};  // retries of commands sent off the loop's threads
  std::atomic<std::uint64_t> resolutions{0}, switches{0}, topology_errors{0}, switch_messages{0},
      switch_announcements{0};

  // ---- +switch-master ----

  // "<name> <old-ip> <old-port> <new-ip> <new-port>" from sentinel `from`, on any loop
  // thread. Every sentinel announces a switch once it knows of it: the first announcement
  // makes the client re-resolve, asking `from` first (it has the new configuration; another
  // sentinel may not yet); the address is verified with ROLE rather than taken from the
  // message. The other sentinels' announcements of the same switch are ignored.
  void on_switch_master(std::size_t from, std::string_view message) {
    const auto [name, change] = detail::parse_switch_master(message);
    if (name != options.master_name) return;
    switch_messages.fetch_add(1, std::memory_order_relaxed);
    {
      std::lock_guard lock(mu);
      if (!change.empty() && change == announced_switch) return;
      announced_switch = change;
      first_asked = from;
      wanted = true;
    }
    switch_announcements.fetch_add(1, std::memory_order_relaxed);
    cv.notify_one();
  }

  // A subscription is up again after a loss: switches announced meanwhile are found by
  // resolving now, and the next announcement is acted on even if it repeats the last one
  // heard (A → B heard, B → A missed, A → B again).
  void on_resubscribed() {
    {
      std::lock_guard lock(mu);
      announced_switch.clear();
    }
    request_resolve();
  }

  // ---- resolution ----

  void request_resolve() {
    {
      std::lock_guard lock(mu);
      if (wanted) return;
      wanted = true;
    }
    cv.notify_one();
  }

  void resolver_main() {
    std::unique_lock lock(mu);
    while (!stopping) {
      cv.wait_for(lock, std::chrono::microseconds(options.poll_interval), [this] { return stopping || wanted; });
      if (stopping) break;
      wanted = false;
      // Connections replaced long ago have nothing in flight any more.
      const Micros now = clock.steady();
      std::erase_if(retired, [&](const auto& r) { return now - r.first > 10 * kMicrosPerSecond; });
      const std::size_t first = first_asked;
      lock.unlock();
      std::string error;
      // Sentinel replies come from outside: whatever they make throw ends this resolution,
      // not the process.
      if (!contain("a Sentinel master resolution", [&] { error = resolve_once(first); })) {
        error = "the master resolution failed with an exception";
      }
      lock.lock();
      if (!error.empty()) last_error = std::move(error);
      cv.wait_for(lock, std::chrono::microseconds(options.min_resolve_gap), [this] { return stopping; });
    }
  }

  Micros sync_timeout() const { return std::max<Micros>(options.sentinel.command_timeout, 500 * kMicrosPerMilli); }

  // Asks the sentinels in turn from number `first`; switches to the answer when it differs
  // and says it is a master. Returns "" or why the master is not known.
  std::string resolve_once(std::size_t first) {
    std::string errors;
    for (std::size_t k = 0; k < sentinels.size(); ++k) {
      auto& s = sentinels[(first + k) % sentinels.size()];
      auto reply = s->command_sync({"SENTINEL", "get-master-addr-by-name", options.master_name}, sync_timeout());
      std::string why;
      if (!reply) {
        why = reply.error().message;
      } else if (auto master = detail::parse_master_addr(*reply, options.master_name); !master) {
        why = std::move(master.error().message);
      } else {
        resolutions.fetch_add(1, std::memory_order_relaxed);
        return adopt(*master);
      }
      if (!errors.empty()) errors += "; ";
      errors += fmt::format("sentinel {}: {}", s->options().endpoint.to_string(), why);
    }
    return errors;
  }

  std::string adopt(const Endpoint& ep) {
    {
      std::lock_guard lock(mu);
      if (master_ep && *master_ep == ep) return {};
    }
    ConnectionOptions o = options.master;
    o.endpoint = ep;
    auto conn = std::make_shared<Connection>(*loop, o);
    auto role = conn->command_sync({"ROLE"}, sync_timeout());
    if (!role) return fmt::format("master {}: {}", ep.to_string(), role.error().message);
    if (role->is_error() || !role->is_array() || role->elements.empty() || role->elements[0].str != "master") {
      // The sentinels may be ahead of the promotion: asked again soon.
      std::lock_guard lock(mu);
      wanted = true;
      return fmt::format("{} is not a master yet (ROLE: {})", ep.to_string(), role->to_string());
    }
    std::lock_guard lock(mu);
    if (master_ep) switches.fetch_add(1, std::memory_order_relaxed);
    master_ep = ep;
    if (in_use) retired.emplace_back(clock.steady(), std::move(in_use));
    in_use = conn;
    current.store(std::move(conn));
    last_error.clear();
    return {};
  }

  // ---- commands (the hooks of detail::Router) ----

  void reroute() { request_resolve(); }

  Result<Target> route(Request&) {
    if (auto conn = current.load()) return conn.get();
    request_resolve();
    std::string why;
    {
      std::lock_guard lock(mu);
      why = last_error;
    }
    return make_error(ErrorCode::unavailable,
                      fmt::format("redis sentinel: master '{}' not resolved: {}", options.master_name, why));
  }

  void transmit(Request& req, const Target& conn, Micros left, ReplyCallback cb) {
    conn->command(req.argv, std::move(cb), left);
  }

  detail::Disposition on_error_reply(Request&, const Target&, const Reply& reply) {
    const std::string_view code = reply.error_code();
    // The command did not run: the server is a replica now, has lost its master, is loading
    // its data, or refuses writes while it has fewer good replicas than min-replicas-to-write
    // (a master cut off from them, maybe replaced by one of them).
    if (code == "READONLY" || code == "MASTERDOWN" || code == "LOADING" || code == "NOREPLICAS") {
      topology_errors.fetch_add(1, std::memory_order_relaxed);
      request_resolve();
      return detail::Disposition::retry(
          Error{ErrorCode::unavailable, fmt::format("redis sentinel master: {}", reply.str)});
    }
    return detail::Disposition::answer();
  }
};

Sentinel::Sentinel(SentinelOptions options) : impl_(std::make_shared<Impl>(std::move(options))) {}

Sentinel::~Sentinel() = default;

void Sentinel::command(std::span<const std::string_view> argv, ReplyCallback done, Micros timeout) {
  auto req = std::make_shared<Impl::Request>();
  req->argv = argv;
  req->done = std::move(done);
  const std::size_t here = impl_->loop->current_index();
  req->lane = here != EventLoop::npos ? here : impl_->next_lane.fetch_add(1, std::memory_order_relaxed);
  impl_->router.start(std::move(req), timeout > 0 ? timeout : impl_->options.master.command_timeout);
}

void Sentinel::resolve() { impl_->request_resolve(); }

std::optional<Endpoint> Sentinel::master() const {
  std::lock_guard lock(impl_->mu);
  return impl_->master_ep;
}

bool Sentinel::ready() const { return status() == "ok"; }

std::string Sentinel::status() const {
  auto conn = impl_->current.load();
  if (!conn) {
    std::lock_guard lock(impl_->mu);
    return fmt::format("master '{}' not resolved: {}", impl_->options.master_name, impl_->last_error);
  }
  if (conn->state() != ConnectionState::connected || conn->breaker_state() != CircuitBreaker::State::closed) {
    return conn->status();
  }
  return "ok";
}

std::string Sentinel::subscription_status() const {
  std::size_t up = 0;
  std::string down;
  for (const auto& s : impl_->subscribers) {
    if (s->subscribed()) {
      ++up;
    } else {
      down += "; " + s->status();
    }
  }
  return fmt::format("subscribed to {} of {} sentinels{}", up, impl_->subscribers.size(), down);
}

Sentinel::Stats Sentinel::stats() const noexcept {
  const auto& i = *impl_;
  auto r = [](const std::atomic<std::uint64_t>& a) { return a.load(std::memory_order_relaxed); };
  Stats s{r(i.resolutions), r(i.switches), r(i.topology_errors), i.router.unsent_retries(), r(i.switch_messages),
          r(i.switch_announcements)};
  for (const auto& subscriber : i.subscribers) {
    const auto sub = subscriber->stats();
    s.subscriptions += sub.subscriptions;
    s.subscription_failures += sub.failures;
    s.subscribed += subscriber->subscribed() ? 1 : 0;
  }
  return s;
}

}  // namespace ratekeeper::redis
