#pragma once
// A real Sentinel deployment for tests: one master, one replica (or more) and three
// redis-sentinel processes (quorum 2, down-after-milliseconds 1000, failover-timeout 3000) on
// free loopback ports, monitoring the master as "mymaster". Stopped in the destructor. Not
// thread-safe.

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "support/redis_server.hpp"

namespace ratekeeper::testing {

// One redis-sentinel process with its own config file.
class SentinelProcess {
 public:
  // `tls`: the sentinel also serves TLS on tls_port() and talks to the master (given by its TLS
  // port) over TLS (tls_certs.hpp); the plain port stays open for the test's own commands.
  SentinelProcess(const std::string& master_name, int master_port, bool tls = false);
  ~SentinelProcess();
  SentinelProcess(const SentinelProcess&) = delete;
  SentinelProcess& operator=(const SentinelProcess&) = delete;

  int port() const { return port_; }
  int tls_port() const { return tls_port_; }
  void kill();
  void pause();   // SIGSTOP: connections stay open, nothing is answered or published
  void resume();  // SIGCONT

 private:
  int port_ = 0;
  int tls_port_ = 0;
  pid_t pid_ = -1;
  std::filesystem::path dir_;
};

class RedisSentinelGroup {
 public:
  explicit RedisSentinelGroup(std::string master_name = "mymaster", std::size_t replicas = 1);
  ~RedisSentinelGroup();

  // redis-sentinel://127.0.0.1:s1,127.0.0.1:s2,127.0.0.1:s3/<master name>
  std::string url() const;
  const std::string& master_name() const { return master_name_; }
  RedisServer& server(std::size_t index) { return *servers_.at(index); }  // 0: first master
  std::size_t server_count() const { return servers_.size(); }
  SentinelProcess& sentinel(std::size_t index) { return *sentinels_.at(index); }
  std::size_t sentinel_count() const { return sentinels_.size(); }
  // The master's port according to the first sentinel that answers.
  int master_port() const;
  RedisServer& current_master();
  // Waits until the sentinels know each other and the replicas, and the replicas are in sync.
  void wait_ready(std::chrono::milliseconds limit = std::chrono::seconds(30)) const;

 private:
  std::string master_name_;
  std::vector<std::unique_ptr<RedisServer>> servers_;
  std::vector<std::unique_ptr<SentinelProcess>> sentinels_;
};

// One sentinel group per test process, started on first use and stopped at exit, shared by
// the tests that leave it healthy (no failover).
RedisSentinelGroup& shared_sentinel_group();

}  // namespace ratekeeper::testing
