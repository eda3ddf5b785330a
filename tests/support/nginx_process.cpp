#include "support/nginx_process.hpp"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "support/http_client.hpp"

namespace ratekeeper::testing {
namespace {

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

bool accepts(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  ::close(fd);
  return ok;
}

}  // namespace

NginxProcess::NginxProcess(std::string_view http_block, int ready_port) : dir_(fresh_dir("nginx")) {
  if (!std::filesystem::exists(kNginxBinary)) {
    throw std::runtime_error(
        fmt::format("{} is missing (scripts/deps.sh installs nginx)", kNginxBinary));
  }
  const auto d = dir_.string();
  // Workers run as root when the tests do, so that they can use the temporary directories.
  const std::string user = ::geteuid() == 0 ? "user root;\n" : "";
  std::ofstream(dir_ / "nginx.conf") << fmt::format(
      "{}worker_processes 1;\npid {}/nginx.pid;\nerror_log {}/error.log info;\n"
      "events {{ worker_connections 512; }}\n"
      "http {{\n  access_log off;\n  client_body_temp_path {}/client_body;\n"
      "  proxy_temp_path {}/proxy;\n  fastcgi_temp_path {}/fastcgi;\n  uwsgi_temp_path {}/uwsgi;\n"
      "  scgi_temp_path {}/scgi;\n{}\n}}\n",
      user, d, d, d, d, d, d, d, http_block);
  pid_ = spawn({std::string(kNginxBinary), "-p", d, "-c", d + "/nginx.conf", "-e", d + "/error.log",
                "-g", "daemon off;"},
               dir_ / "stdout.log", dir_ / "stderr.log");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!accepts(ready_port)) {
    if (auto status = wait_pid(pid_, std::chrono::milliseconds(0))) {
      pid_ = -1;
      throw std::runtime_error(fmt::format("nginx exited with {}:\n{}{}", *status,
                                           read_text(dir_ / "stderr.log"), error_log()));
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      stop();
      throw std::runtime_error("nginx did not start listening:\n" + error_log());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

NginxProcess::~NginxProcess() {
  stop();
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

std::string NginxProcess::error_log() const {
  return read_text(dir_ / "error.log");
}

void NginxProcess::stop() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGTERM);  // fast shutdown: the master stops its worker and exits
  if (!wait_pid(pid_, std::chrono::seconds(5))) {
    ::kill(pid_, SIGKILL);
    wait_pid(pid_, std::chrono::seconds(5));
  }
  pid_ = -1;
}

}  // namespace ratekeeper::testing
