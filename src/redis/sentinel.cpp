#include "redis/sentinel.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <mutex>

#include "ratekeeper/core/contained.hpp"
#include "ratekeeper/core/event_loop.hpp"
#include "ratekeeper/core/shared_value.hpp"
#include "refresher.hpp"
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
    resolver = detail::Refresher::start(*loop, options.poll_interval, options.min_resolve_gap,
                                        "a Sentinel master resolution",
                                        [this](detail::Refresher::Done done) { resolve(std::move(done)); });
    for (std::size_t i = 0; i < options.sentinels.size(); ++i) {
      detail::SubscriberOptions so;
      so.endpoint = options.sentinels[i];
      so.credentials = options.sentinel.credentials;
      so.tls = options.sentinel.tls;
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
  }

  // Before destruction, off the loop's threads (or on one while no other thread sends).
  void shutdown() {
    subscribers.clear();  // no message callback runs once this returns
    stopping.store(true, std::memory_order_release);
    resolver->stop();
    // Commands waiting for a retry fail now; handlers running on the loop threads have
    // finished when it returns, and those that start later see `stopping` and the router
    // closed.
    router.close();
    current.store(nullptr);
    // Taken out under the lock, destroyed after it: a connection's destructor waits for its
    // loop thread, which may be waiting for the lock (a resolution's answer arriving).
    std::shared_ptr<Connection> probe;
    std::shared_ptr<Connection> used;
    std::vector<std::pair<Micros, std::shared_ptr<Connection>>> old;
    {
      std::lock_guard lock(mu);
      old.swap(retired);
      used = std::move(in_use);
      probe = std::move(probing);
    }
    old.clear();
    used.reset();
    probe.reset();  // what is pending fails with unavailable
    sentinels.clear();
  }

  SentinelOptions options;
  std::shared_ptr<EventLoop> loop;  // the given one, or the client's own
  const Clock& clock;
  detail::Router<Impl> router;
  std::vector<std::unique_ptr<Connection>> sentinels;
  SharedValue<Connection> current;
  std::vector<std::unique_ptr<detail::Subscriber>> subscribers;  // one per sentinel, same order

  std::shared_ptr<detail::Refresher> resolver;
  std::atomic<bool> stopping{false};
  mutable std::mutex mu;
  // The address request, kept for the connections (argv must outlive the commands).
  const std::array<std::string_view, 3> addr_command{"SENTINEL", "get-master-addr-by-name", options.master_name};
  std::shared_ptr<Connection> probing;          // under mu: the last candidate master asked ROLE
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
    bool announced = false;
    {
      std::lock_guard lock(mu);
      if (change.empty() || change != announced_switch) {
        announced_switch = change;
        first_asked = from;
        announced = true;
      }
    }
    if (announced) switch_announcements.fetch_add(1, std::memory_order_relaxed);
    // Counted once handled (released to stats(), which reads it first): whoever sees the
    // message counted sees the announcement it made.
    switch_messages.fetch_add(1, std::memory_order_release);
    if (announced) resolver->request();
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

  void request_resolve() { resolver->request(); }

  Micros sync_timeout() const { return std::max<Micros>(options.sentinel.command_timeout, 500 * kMicrosPerMilli); }

  // One resolution: the sentinels asked in turn from the one that announced the last switch;
  // the answer, when it differs from the master in use, verified with ROLE and switched to.
  struct ResolveRun {
    std::size_t first = 0;
    std::size_t asked = 0;
    std::string errors;
    detail::Refresher::Done done;
  };

  void resolve(detail::Refresher::Done done) {
    auto run = std::make_shared<ResolveRun>();
    std::vector<std::shared_ptr<Connection>> expired;  // destroyed after the lock (see shutdown)
    {
      std::lock_guard lock(mu);
      // Connections replaced long ago have nothing in flight any more.
      const Micros now = clock.steady();
      std::erase_if(retired, [&](auto& r) {
        if (now - r.first <= 10 * kMicrosPerSecond) return false;
        expired.push_back(std::move(r.second));
        return true;
      });
      run->first = first_asked;
    }
    expired.clear();
    run->done = [this, done = std::move(done)](std::string error) {
      if (!error.empty()) {
        std::lock_guard lock(mu);
        last_error = error;
      }
      done(std::move(error));
    };
    ask_sentinel(run);
  }

  void ask_sentinel(const std::shared_ptr<ResolveRun>& run) {
    if (stopping.load(std::memory_order_acquire)) {
      run->done("stopping");
      return;
    }
    if (run->asked == sentinels.size()) {
      run->done(run->errors);
      return;
    }
    Connection* s = sentinels[(run->first + run->asked++) % sentinels.size()].get();
    s->command(addr_command, [this, run, s](Result<Reply> reply) {
      if (stopping.load(std::memory_order_acquire)) {
        run->done("stopping");
        return;
      }
      std::string why;
      std::optional<Endpoint> master;
      // Sentinel replies come from outside: whatever they make throw ends this attempt.
      const bool contained = contain("a Sentinel master resolution", [&] {
        if (!reply) {
          why = reply.error().message;
        } else if (auto m = detail::parse_master_addr(*reply, options.master_name); !m) {
          why = std::move(m.error().message);
        } else {
          master = std::move(*m);
        }
      });
      if (!contained) why = "the master resolution failed with an exception";
      if (master) {
        resolutions.fetch_add(1, std::memory_order_relaxed);
        adopt(*master, run);
        return;
      }
      if (!run->errors.empty()) run->errors += "; ";
      run->errors += fmt::format("sentinel {}: {}", s->options().endpoint.to_string(), why);
      ask_sentinel(run);
    }, sync_timeout());
  }

  void adopt(const Endpoint& ep, const std::shared_ptr<ResolveRun>& run) {
    static constexpr std::string_view kRole[] = {"ROLE"};
    ConnectionOptions o = options.master;
    o.endpoint = ep;
    std::shared_ptr<Connection> conn;
    std::shared_ptr<Connection> previous;  // destroyed after the lock (see shutdown)
    {
      std::lock_guard lock(mu);
      if (!(master_ep && *master_ep == ep) && !stopping.load(std::memory_order_acquire)) {
        // The previous candidate, if any, has its ROLE answered: nothing of it is pending.
        previous = std::move(probing);
        probing = std::make_shared<Connection>(*loop, o);
        conn = probing;
      }
    }
    previous.reset();
    if (!conn) {  // the master in use, or stopping
      run->done(stopping.load(std::memory_order_acquire) ? "stopping" : "");
      return;
    }
    conn->command(kRole, [this, run, ep, candidate = conn.get()](Result<Reply> role) {
      if (stopping.load(std::memory_order_acquire)) {
        run->done("stopping");
        return;
      }
      if (!role) {
        run->done(fmt::format("master {}: {}", ep.to_string(), role.error().message));
        return;
      }
      if (role->is_error() || !role->is_array() || role->elements.empty() || role->elements[0].str != "master") {
        // The sentinels may be ahead of the promotion: asked again soon.
        request_resolve();
        run->done(fmt::format("{} is not a master yet (ROLE: {})", ep.to_string(), role->to_string()));
        return;
      }
      bool adopted = false;
      {
        std::lock_guard lock(mu);
        if (probing.get() == candidate) {  // else stopping: shutdown() took it
          if (master_ep) switches.fetch_add(1, std::memory_order_relaxed);
          master_ep = ep;
          if (in_use) retired.emplace_back(clock.steady(), std::move(in_use));
          in_use = std::move(probing);
          current.store(in_use);
          last_error.clear();
          adopted = true;
        }
      }
      run->done(adopted ? "" : "stopping");
    }, sync_timeout());
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

Sentinel::~Sentinel() { impl_->shutdown(); }

void Sentinel::command(std::span<const std::string_view> argv, ReplyCallback done, Micros timeout) {
  auto req = std::make_shared<Impl::Request>();
  req->argv = argv;
  req->done = std::move(done);
  const std::size_t here = impl_->loop->current_index();
  req->lane = here != EventLoop::kNoContext ? here : impl_->next_lane.fetch_add(1, std::memory_order_relaxed);
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
  // Braced initialisers run in order: the messages (acquired) before the announcements.
  Stats s{r(i.resolutions),
          r(i.switches),
          r(i.topology_errors),
          i.router.unsent_retries(),
          i.switch_messages.load(std::memory_order_acquire),
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
