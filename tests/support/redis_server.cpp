#include "support/redis_server.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <cerrno>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <iterator>
#include <memory>
#include <stdexcept>
#include <thread>

#include <fmt/format.h>

namespace ratekeeper::testing {
namespace {

pid_t spawn(const std::vector<std::string>& argv, const std::filesystem::path& log) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      ::close(fd);
    }
    ::execvp(args[0], args.data());
    ::_exit(127);
  }
  return pid;
}

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

}  // namespace

int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

int run_process(const std::vector<std::string>& argv, const std::filesystem::path& log) {
  pid_t pid = spawn(argv, log);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

RedisServer::RedisServer() : RedisServer(Options{}) {}

RedisServer::RedisServer(Options options) : options_(std::move(options)) {
  // A port found free may be taken by another process before redis-server binds it (tests run
  // in parallel): a port chosen here is chosen again then, a few times.
  for (int attempt = 1;; ++attempt) {
    port_ = options_.port != 0 ? options_.port : options_.pick_port ? options_.pick_port() : free_port();
    dir_ = std::filesystem::temp_directory_path() / fmt::format("ratekeeper-redis-{}-{}", ::getpid(), port_);
    std::filesystem::create_directories(dir_);
    try {
      start();
      return;
    } catch (const std::runtime_error&) {
      std::ifstream log(dir_ / "redis.log");
      const std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
      if (options_.port != 0 || attempt == 5 || text.find("Address already in use") == std::string::npos) throw;
      pid_ = -1;  // exited, and reaped by wait_ready
      std::error_code ignored;
      std::filesystem::remove_all(dir_, ignored);
    }
  }
}

RedisServer::~RedisServer() {
  try {
    if (pid_ > 0) {
      ::kill(pid_, SIGCONT);
      stop();
    }
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  } catch (...) {
  }
}

std::string RedisServer::url() const { return fmt::format("redis://127.0.0.1:{}", port_); }

void RedisServer::start() {
  if (pid_ > 0) return;
  std::vector<std::string> argv = {"redis-server",  "--port",       std::to_string(port_),
                                   "--bind",        "127.0.0.1",    "--dir",
                                   dir_.string(),   "--save",       "",
                                   "--appendonly",  "no",           "--daemonize",
                                   "no",            "--protected-mode", "no"};
  argv.insert(argv.end(), options_.args.begin(), options_.args.end());
  pid_ = spawn(argv, dir_ / "redis.log");
  wait_ready();
}

void RedisServer::wait_ready() const {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    timeval tv{0, 200'000};
    std::unique_ptr<redisContext, decltype(&redisFree)> c(
        redisConnectWithTimeout("127.0.0.1", port_, tv), &redisFree);
    if (c && !c->err) return;
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      throw std::runtime_error(fmt::format("redis-server exited at start; see {}", (dir_ / "redis.log").string()));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  throw std::runtime_error(fmt::format("redis-server on port {} did not start", port_));
}

void RedisServer::stop() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGCONT);
  ::kill(pid_, SIGTERM);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  int status = 0;
  while (::waitpid(pid_, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  pid_ = -1;
}

void RedisServer::kill() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGKILL);
  int status = 0;
  ::waitpid(pid_, &status, 0);
  pid_ = -1;
}

void RedisServer::pause() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGSTOP);
  // Returns once it is stopped: a signal is acted on when the process next runs, and until
  // then it may still serve what arrives (on a loaded machine, a command sent right after).
  int status = 0;
  while (::waitpid(pid_, &status, WUNTRACED) < 0 && errno == EINTR) {
  }
}

void RedisServer::resume() {
  if (pid_ > 0) ::kill(pid_, SIGCONT);
}

std::string RedisServer::command(const std::vector<std::string>& argv) const {
  timeval tv{2, 0};
  std::unique_ptr<redisContext, decltype(&redisFree)> c(redisConnectWithTimeout("127.0.0.1", port_, tv),
                                                        &redisFree);
  if (!c || c->err) throw std::runtime_error(fmt::format("cannot connect to redis on {}", port_));
  redisSetTimeout(c.get(), tv);
  auto run = [&](const std::vector<std::string>& args) {
    std::vector<const char*> ptrs;
    std::vector<size_t> lens;
    for (const auto& a : args) {
      ptrs.push_back(a.data());
      lens.push_back(a.size());
    }
    auto* r = static_cast<redisReply*>(
        redisCommandArgv(c.get(), static_cast<int>(args.size()), ptrs.data(), lens.data()));
    if (r == nullptr) throw std::runtime_error("redis command failed: connection error");
    std::string text = reply_text(r);
    freeReplyObject(r);
    return text;
  };
  if (!options_.password.empty()) run({"AUTH", options_.password});
  return run(argv);
}

}  // namespace ratekeeper::testing
