#pragma once
// A real redis-server process on a free loopback port, for tests. Started in the
// constructor, stopped (SIGTERM, then SIGKILL) in the destructor. Not thread-safe.

#include <sys/types.h>

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace ratekeeper::testing {

// A free TCP port on 127.0.0.1 (bound and released; good enough for tests).
int free_port();

class RedisServer {
 public:
  struct Options {
    std::vector<std::string> args;  // extra redis-server arguments, e.g. {"--requirepass", "x"}
    int port = 0;                   // 0: pick a free one (again if taken before the server binds it)
    std::string password;           // used by command() to authenticate
    std::function<int()> pick_port = {};  // with port 0: how to pick one (default: free_port())
  };

  RedisServer();
  explicit RedisServer(Options options);
  ~RedisServer();
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  int port() const { return port_; }
  std::string host() const { return "127.0.0.1"; }
  std::string url() const;  // redis://127.0.0.1:PORT
  const std::filesystem::path& dir() const { return dir_; }
  pid_t pid() const { return pid_; }

  void start();   // same port, same directory
  void stop();    // SIGTERM and wait
  void kill();    // SIGKILL and wait
  void pause();   // SIGSTOP, and returns once the process is stopped
  void resume();  // SIGCONT
  bool running() const { return pid_ > 0; }

  // Runs one command over a fresh connection; returns the reply as text (integers as
  // decimal, arrays joined by '\n', errors prefixed with "ERR:"). Throws on connect failure.
  std::string command(const std::vector<std::string>& argv) const;

 private:
  void wait_ready() const;

  Options options_;
  int port_ = 0;
  pid_t pid_ = -1;
  std::filesystem::path dir_;
};

// Runs `argv` as a child process and returns its exit status; stdout/stderr to `log`.
int run_process(const std::vector<std::string>& argv, const std::filesystem::path& log);

}  // namespace ratekeeper::testing
