#include "support/redis_cluster.hpp"

#include "support/tls_certs.hpp"

#include <arpa/inet.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <stdexcept>
#include <thread>

#include <fmt/format.h>

namespace ratekeeper::testing {
namespace {

std::string reply_text(const redisReply* r) {
  switch (r->type) {
    case REDIS_REPLY_STRING:
    case REDIS_REPLY_STATUS: return std::string(r->str, r->len);
    case REDIS_REPLY_ERROR: return "ERR:" + std::string(r->str, r->len);
    case REDIS_REPLY_INTEGER: return std::to_string(r->integer);
    case REDIS_REPLY_NIL: return "(nil)";
    case REDIS_REPLY_ARRAY: {
      std::string out;
      for (size_t i = 0; i < r->elements; ++i) {
        if (i) out += '\n';
        out += reply_text(r->element[i]);
      }
      return out;
    }
  }
  return {};
}

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> out;
  std::string part;
  std::istringstream in(text);
  while (std::getline(in, part, sep)) {
    if (!part.empty() && part.back() == '\r') part.pop_back();
    out.push_back(part);
  }
  return out;
}

}  // namespace

std::string command_on(int port, const std::vector<std::string>& argv) {
  timeval tv{2, 0};
  std::unique_ptr<redisContext, decltype(&redisFree)> c(redisConnectWithTimeout("127.0.0.1", port, tv), &redisFree);
  if (!c || c->err) throw std::runtime_error(fmt::format("cannot connect to 127.0.0.1:{}", port));
  redisSetTimeout(c.get(), tv);
  std::vector<const char*> ptrs;
  std::vector<size_t> lens;
  for (const auto& a : argv) {
    ptrs.push_back(a.data());
    lens.push_back(a.size());
  }
  auto* r = static_cast<redisReply*>(redisCommandArgv(c.get(), static_cast<int>(argv.size()), ptrs.data(), lens.data()));
  if (r == nullptr) throw std::runtime_error(fmt::format("command on 127.0.0.1:{} failed: connection error", port));
  std::string text = reply_text(r);
  freeReplyObject(r);
  return text;
}

namespace {

bool bindable(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  ::close(fd);
  return ok;
}

// A cluster node also listens on port + 10000 (the cluster bus): both free, below 65536.
int free_cluster_port() {
  static std::mt19937 rng(static_cast<unsigned>(::getpid()) * 7919u +
                          static_cast<unsigned>(std::chrono::steady_clock::now().time_since_epoch().count()));
  // Below the kernel's ephemeral ports (32768 and up, bus ports included), which outgoing
  // connections and free_port() take.
  std::uniform_int_distribution<int> pick(10000, 22767);
  for (;;) {
    const int port = pick(rng);
    if (bindable(port) && bindable(port + 10000)) return port;
  }
}

}  // namespace

RedisCluster::RedisCluster() : RedisCluster(Options{}) {}

RedisCluster::RedisCluster(Options options) : options_(std::move(options)) {
  const int n = options_.masters * (1 + options_.replicas_per_master);
  std::vector<std::string> create = {"redis-cli", "--cluster", "create"};
  for (int i = 0; i < n; ++i) {
    RedisServer::Options o;
    o.args = {"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "1000"};
    o.args.insert(o.args.end(), options_.args.begin(), options_.args.end());
    int tls_port = 0;  // its cluster bus is on tls_port + 10000
    if (options_.tls) {
      tls_port = free_cluster_port();
      tls_ports_.push_back(tls_port);
      const auto tls = redis_tls_args(tls_port);
      o.args.insert(o.args.end(), tls.begin(), tls.end());
      o.args.insert(o.args.end(), {"--tls-cluster", "yes", "--tls-replication", "yes"});
    }
    o.pick_port = [tls_port] {
      int port = 0;
      do {
        port = free_cluster_port();
      } while (tls_port != 0 && (port == tls_port || port == tls_port + 10000 || port + 10000 == tls_port));
      return port;
    };
    servers_.push_back(std::make_unique<RedisServer>(o));
    create.push_back(fmt::format("127.0.0.1:{}", servers_.back()->port()));
  }
  create.insert(create.end(), {"--cluster-replicas", std::to_string(options_.replicas_per_master), "--cluster-yes"});
  const auto log = servers_.front()->dir() / "cluster-create.log";
  if (run_process(create, log) != 0) {
    std::ifstream in(log);
    std::stringstream text;
    text << in.rdbuf();
    throw std::runtime_error(fmt::format("redis-cli --cluster create failed: {}", text.str()));
  }
  wait_ok();
}

RedisCluster::~RedisCluster() = default;

std::string RedisCluster::tls_url() const {
  std::string out = "rediss-cluster://";
  for (std::size_t i = 0; i < tls_ports_.size(); ++i) {
    if (i > 0) out += ',';
    out += fmt::format("127.0.0.1:{}", tls_ports_[i]);
  }
  return out;
}

std::string RedisCluster::url() const {
  std::string out = "redis-cluster://";
  for (std::size_t i = 0; i < servers_.size(); ++i) {
    if (i) out += ',';
    out += fmt::format("127.0.0.1:{}", servers_[i]->port());
  }
  return out;
}

std::vector<RedisCluster::NodeInfo> RedisCluster::topology() const {
  for (const auto& s : servers_) {
    if (!s->running()) continue;
    std::vector<NodeInfo> out;
    for (const auto& line : split(command_on(s->port(), {"CLUSTER", "NODES"}), '\n')) {
      auto f = split(line, ' ');
      if (f.size() < 8) continue;
      NodeInfo info;
      info.id = f[0];
      // "127.0.0.1:7000@17000"
      const auto colon = f[1].rfind(':');
      info.port = std::stoi(f[1].substr(colon + 1, f[1].find('@') - colon - 1));
      info.master = f[2].find("master") != std::string::npos;
      info.failed = f[2].find("fail") != std::string::npos || f[7] == "disconnected";
      if (f[3] != "-") info.master_id = f[3];
      out.push_back(info);
    }
    return out;
  }
  throw std::runtime_error("no cluster node is running");
}

std::string RedisCluster::id_of(const RedisServer& server) const {
  return command_on(server.port(), {"CLUSTER", "MYID"});
}

std::vector<RedisServer*> RedisCluster::masters() {
  std::vector<RedisServer*> out;
  for (auto& s : servers_) {
    if (!s->running()) continue;
    // The "myself" line: a master with at least one slot range.
    for (const auto& line : split(command_on(s->port(), {"CLUSTER", "NODES"}), '\n')) {
      auto f = split(line, ' ');
      if (f.size() < 8 || f[2].find("myself") == std::string::npos) continue;
      if (f[2].find("master") != std::string::npos && f.size() > 8) out.push_back(s.get());
    }
  }
  return out;
}

RedisServer& RedisCluster::master_of_slot(std::uint16_t slot) {
  for (auto* m : masters()) {
    const auto myid = id_of(*m);
    for (const auto& line : split(command_on(m->port(), {"CLUSTER", "NODES"}), '\n')) {
      auto f = split(line, ' ');
      if (f.size() < 9 || f[0] != myid) continue;
      for (std::size_t i = 8; i < f.size(); ++i) {
        if (f[i].starts_with('[')) continue;  // migration marks
        const auto dash = f[i].find('-');
        const int lo = std::stoi(f[i].substr(0, dash));
        const int hi = dash == std::string::npos ? lo : std::stoi(f[i].substr(dash + 1));
        if (slot >= lo && slot <= hi) return *m;
      }
    }
  }
  throw std::runtime_error(fmt::format("no master owns slot {}", slot));
}

void RedisCluster::wait_ok(std::chrono::milliseconds limit) const {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  std::string last;
  while (std::chrono::steady_clock::now() < deadline) {
    bool ok = true;
    std::string slots;
    for (const auto& s : servers_) {
      if (!s->running()) continue;
      try {
        auto info = command_on(s->port(), {"CLUSTER", "INFO"});
        if (info.find("cluster_state:ok") == std::string::npos) {
          ok = false;
          last = fmt::format("127.0.0.1:{} not ok", s->port());
          break;
        }
        // A replica that never finished its first sync cannot be promoted.
        auto replication = command_on(s->port(), {"INFO", "replication"});
        if (replication.find("role:slave") != std::string::npos &&
            replication.find("master_link_status:up") == std::string::npos) {
          ok = false;
          last = fmt::format("replica 127.0.0.1:{} not in sync", s->port());
          break;
        }
        // Every node must see the same owner for every slot: compare the masters' slot lists.
        std::vector<std::string> owners;
        for (const auto& line : split(command_on(s->port(), {"CLUSTER", "NODES"}), '\n')) {
          auto f = split(line, ' ');
          if (f.size() > 8 && f[2].find("master") != std::string::npos && f[2].find("fail") == std::string::npos) {
            std::string ranges;
            for (std::size_t i = 8; i < f.size(); ++i) {
              if (!f[i].starts_with('[')) ranges += f[i] + ' ';
            }
            owners.push_back(f[0] + ' ' + ranges);
          }
        }
        std::sort(owners.begin(), owners.end());
        std::string view;
        for (auto& o : owners) view += o + '\n';
        if (slots.empty()) {
          slots = view;
        } else if (slots != view) {
          ok = false;
          last = "nodes disagree on slot owners";
          break;
        }
      } catch (const std::exception& e) {
        ok = false;
        last = e.what();
        break;
      }
    }
    if (ok) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  throw std::runtime_error("redis cluster not ok: " + last);
}

void RedisCluster::begin_migration(std::uint16_t slot, RedisServer& from, RedisServer& to) {
  const auto s = std::to_string(slot);
  auto r1 = command_on(to.port(), {"CLUSTER", "SETSLOT", s, "IMPORTING", id_of(from)});
  auto r2 = command_on(from.port(), {"CLUSTER", "SETSLOT", s, "MIGRATING", id_of(to)});
  if (r1 != "OK" || r2 != "OK") throw std::runtime_error(fmt::format("SETSLOT failed: {} / {}", r1, r2));
}

std::size_t RedisCluster::migrate_keys(std::uint16_t slot, RedisServer& from, RedisServer& to) {
  std::size_t moved = 0;
  for (;;) {
    auto keys = split(command_on(from.port(), {"CLUSTER", "GETKEYSINSLOT", std::to_string(slot), "100"}), '\n');
    std::erase_if(keys, [](const std::string& k) { return k.empty(); });
    if (keys.empty()) return moved;
    // With a TLS cluster bus the source migrates over TLS: to the target's TLS port.
    int port = to.port();
    for (std::size_t i = 0; i < tls_ports_.size(); ++i) {
      if (servers_[i].get() == &to) port = tls_ports_[i];
    }
    std::vector<std::string> argv = {"MIGRATE", "127.0.0.1", std::to_string(port), "", "0", "5000", "KEYS"};
    argv.insert(argv.end(), keys.begin(), keys.end());
    auto r = command_on(from.port(), argv);
    if (r != "OK" && r != "NOKEY") throw std::runtime_error("MIGRATE failed: " + r);
    moved += keys.size();
  }
}

void RedisCluster::finish_migration(std::uint16_t slot, RedisServer& to) {
  const auto id = id_of(to);
  const auto s = std::to_string(slot);
  // The new owner first, then the others (as redis-cli does).
  auto r = command_on(to.port(), {"CLUSTER", "SETSLOT", s, "NODE", id});
  if (r != "OK") throw std::runtime_error("SETSLOT NODE failed: " + r);
  for (auto* m : masters()) {
    if (m != &to) command_on(m->port(), {"CLUSTER", "SETSLOT", s, "NODE", id});
  }
}

long long RedisCluster::total_keys() {
  long long total = 0;
  for (auto* m : masters()) total += std::stoll(command_on(m->port(), {"DBSIZE"}));
  return total;
}

RedisCluster& shared_cluster() {
  static RedisCluster cluster;
  return cluster;
}

}  // namespace ratekeeper::testing
