#include "support/redis_sentinel.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <stdexcept>
#include <thread>

#include <fmt/format.h>

#include "support/redis_cluster.hpp"
#include "support/tls_certs.hpp"

namespace ratekeeper::testing {
namespace {

// The value of `field` in a flat field/value reply formatted one element per line.
std::string field_of(const std::string& flat, const std::string& field) {
  std::vector<std::string> lines;
  std::size_t start = 0;
  while (start <= flat.size()) {
    auto end = flat.find('\n', start);
    if (end == std::string::npos) end = flat.size();
    lines.push_back(flat.substr(start, end - start));
    start = end + 1;
  }
  for (std::size_t i = 0; i + 1 < lines.size(); i += 2) {
    if (lines[i] == field) return lines[i + 1];
  }
  return {};
}

}  // namespace

SentinelProcess::SentinelProcess(const std::string& master_name, int master_port, bool tls) : port_(free_port()) {
  dir_ = std::filesystem::temp_directory_path() / fmt::format("ratekeeper-sentinel-{}-{}", ::getpid(), port_);
  std::filesystem::create_directories(dir_);
  const auto conf = dir_ / "sentinel.conf";
  {
    std::ofstream out(conf);
    out << fmt::format(
        "port {}\nbind 127.0.0.1\nprotected-mode no\ndir {}\n"
        "sentinel monitor {} 127.0.0.1 {} 2\n"
        "sentinel down-after-milliseconds {} 1000\n"
        "sentinel failover-timeout {} 3000\n"
        "sentinel parallel-syncs {} 1\n",
        port_, dir_.string(), master_name, master_port, master_name, master_name, master_name);
    if (tls) {
      do {
        tls_port_ = free_port();
      } while (tls_port_ == port_);
      const auto& c = tls_certs();
      out << fmt::format("tls-port {}\ntls-cert-file {}\ntls-key-file {}\ntls-ca-cert-file {}\n"
                         "tls-auth-clients no\ntls-replication yes\n",
                         tls_port_, c.server_cert.string(), c.server_key.string(), c.ca.string());
    }
  }
  const auto log = dir_ / "sentinel.log";
  pid_ = ::fork();
  if (pid_ < 0) throw std::runtime_error("fork failed");
  if (pid_ == 0) {
    int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      ::close(fd);
    }
    ::execlp("redis-sentinel", "redis-sentinel", conf.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (true) {
    try {
      if (command_on(port_, {"PING"}) == "PONG") break;
    } catch (const std::exception&) {
    }
    if (std::chrono::steady_clock::now() > deadline) {
      throw std::runtime_error(fmt::format("redis-sentinel did not start; see {}", log.string()));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

SentinelProcess::~SentinelProcess() {
  kill();
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

void SentinelProcess::kill() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGKILL);
  int status = 0;
  ::waitpid(pid_, &status, 0);
  pid_ = -1;
}

void SentinelProcess::pause() {
  if (pid_ > 0) ::kill(pid_, SIGSTOP);
}

void SentinelProcess::resume() {
  if (pid_ > 0) ::kill(pid_, SIGCONT);
}

RedisSentinelGroup::RedisSentinelGroup(std::string master_name, std::size_t replicas)
    : master_name_(std::move(master_name)) {
  // A deployment that does not form (a sentinel that never reaches the master, e.g. a port
  // taken between being found free and bound, on a loaded machine) is built once more, on
  // new ports, before the test is failed for it.
  for (int attempt = 1;; ++attempt) {
    servers_.push_back(std::make_unique<RedisServer>());
    RedisServer::Options replica;
    replica.args = {"--replicaof", "127.0.0.1", std::to_string(servers_[0]->port())};
    for (std::size_t i = 0; i < std::max<std::size_t>(1, replicas); ++i) {
      servers_.push_back(std::make_unique<RedisServer>(replica));
    }
    for (int i = 0; i < 3; ++i) {
      sentinels_.push_back(std::make_unique<SentinelProcess>(master_name_, servers_[0]->port()));
    }
    try {
      wait_ready();
      return;
    } catch (const std::exception& e) {
      if (attempt == 2) throw;
      std::fprintf(stderr, "sentinel group did not form (%s): building it again\n", e.what());
      sentinels_.clear();
      servers_.clear();
    }
  }
}

RedisSentinelGroup::~RedisSentinelGroup() {
  sentinels_.clear();  // first, so that they do not fail over while the servers stop
  servers_.clear();
}

std::string RedisSentinelGroup::url() const {
  std::string out = "redis-sentinel://";
  for (std::size_t i = 0; i < sentinels_.size(); ++i) {
    if (i) out += ',';
    out += fmt::format("127.0.0.1:{}", sentinels_[i]->port());
  }
  return out + "/" + master_name_;
}

int RedisSentinelGroup::master_port() const {
  for (const auto& s : sentinels_) {
    try {
      auto r = command_on(s->port(), {"SENTINEL", "get-master-addr-by-name", master_name_});
      const auto nl = r.find('\n');
      if (nl != std::string::npos) return std::stoi(r.substr(nl + 1));
    } catch (const std::exception&) {
    }
  }
  throw std::runtime_error("no sentinel knows the master");
}

RedisServer& RedisSentinelGroup::current_master() {
  const int port = master_port();
  for (auto& s : servers_) {
    if (s->port() == port) return *s;
  }
  throw std::runtime_error(fmt::format("master port {} is not one of the group's servers", port));
}

void RedisSentinelGroup::wait_ready(std::chrono::milliseconds limit) const {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  std::string last;
  while (std::chrono::steady_clock::now() < deadline) {
    bool ok = true;
    try {
      for (const auto& s : sentinels_) {
        auto master = command_on(s->port(), {"SENTINEL", "MASTER", master_name_});
        if (field_of(master, "num-other-sentinels") != std::to_string(sentinels_.size() - 1) ||
            field_of(master, "num-slaves") != std::to_string(servers_.size() - 1)) {
          ok = false;
          last = fmt::format("sentinel {}: {} other sentinels, {} replicas", s->port(),
                             field_of(master, "num-other-sentinels"), field_of(master, "num-slaves"));
          break;
        }
      }
      for (std::size_t i = 1; ok && i < servers_.size(); ++i) {
        auto info = command_on(servers_[i]->port(), {"INFO", "replication"});
        if (info.find("master_link_status:up") == std::string::npos) {
          ok = false;
          last = fmt::format("replica {} not in sync", servers_[i]->port());
        }
      }
    } catch (const std::exception& e) {
      ok = false;
      last = e.what();
    }
    if (ok) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  throw std::runtime_error("sentinels not ready: " + last);
}

RedisSentinelGroup& shared_sentinel_group() {
  static RedisSentinelGroup group;
  return group;
}

}  // namespace ratekeeper::testing
