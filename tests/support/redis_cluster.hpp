#pragma once
// A real Redis Cluster for tests: 3 masters with one replica each (by default), started on
// free loopback ports, created by `redis-cli --cluster create`, fast failure detection
// (cluster-node-timeout 1000 ms), no persistence. Stopped in the destructor. Not thread-safe.

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "support/redis_server.hpp"

namespace ratekeeper::testing {

// One command on 127.0.0.1:port over a fresh connection, reply as RedisServer::command
// formats it. Throws when the port does not answer.
std::string command_on(int port, const std::vector<std::string>& argv);

class RedisCluster {
 public:
  struct Options {
    int masters = 3;
    int replicas_per_master = 1;
    std::vector<std::string> args;  // extra redis-server arguments for every node
    // Every node also serves TLS (tls_certs.hpp) on a port of its own, and the cluster bus
    // runs over TLS: clients on a TLS port are told TLS ports (CLUSTER SLOTS, MOVED, ASK),
    // clients on a plain port plain ones.
    bool tls = false;
  };

  RedisCluster();
  explicit RedisCluster(Options options);
  ~RedisCluster();
  RedisCluster(const RedisCluster&) = delete;
  RedisCluster& operator=(const RedisCluster&) = delete;

  // redis-cluster://127.0.0.1:p1,127.0.0.1:p2,... (every node as a seed).
  std::string url() const;
  // rediss-cluster://127.0.0.1:t1,... (Options::tls only).
  std::string tls_url() const;
  std::size_t size() const { return servers_.size(); }
  RedisServer& node(std::size_t index) { return *servers_.at(index); }

  struct NodeInfo {
    std::string id;
    int port = 0;
    bool master = false;
    bool failed = false;  // fail or pfail flag, or disconnected
    std::string master_id;  // replicas: the id of their master
  };
  // The topology from CLUSTER NODES as seen by a running node.
  std::vector<NodeInfo> topology() const;
  // Running servers that are masters owning slots, in port order.
  std::vector<RedisServer*> masters();
  RedisServer& master_of_slot(std::uint16_t slot);
  std::string id_of(const RedisServer& server) const;  // CLUSTER MYID

  // Waits until every running node says cluster_state:ok, they agree on who owns every
  // slot, and every replica is in sync with its master. Throws after `limit`.
  void wait_ok(std::chrono::milliseconds limit = std::chrono::seconds(30)) const;

  // Slot migration in the steps redis-cli --cluster reshard takes.
  void begin_migration(std::uint16_t slot, RedisServer& from, RedisServer& to);
  std::size_t migrate_keys(std::uint16_t slot, RedisServer& from, RedisServer& to);  // keys moved
  void finish_migration(std::uint16_t slot, RedisServer& to);  // SETSLOT NODE on every master

  // The sum of DBSIZE over the masters.
  long long total_keys();

 private:
  Options options_;
  std::vector<std::unique_ptr<RedisServer>> servers_;
  std::vector<int> tls_ports_;
};

// One 3-master, 3-replica cluster per test process, started on first use and stopped at
// exit, shared by the tests that leave it healthy.
RedisCluster& shared_cluster();

}  // namespace ratekeeper::testing
