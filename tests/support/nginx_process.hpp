#pragma once
// A real nginx (Debian's /usr/sbin/nginx) for tests: its own prefix, configuration, pid file,
// temporary directories and error log in a fresh temporary directory, in the foreground
// (`daemon off`), one worker. Started in the constructor, stopped (SIGTERM, then SIGKILL) in
// the destructor. Not thread-safe.

#include <sys/types.h>

#include <filesystem>
#include <string>
#include <string_view>

namespace ratekeeper::testing {

inline constexpr std::string_view kNginxBinary = "/usr/sbin/nginx";

class NginxProcess {
 public:
  // `http_block`: what goes inside `http { }` (upstreams, servers). Returns once nginx
  // accepts connections on 127.0.0.1:`ready_port`; throws std::runtime_error with the error
  // log when nginx is missing, refuses the configuration or does not start.
  NginxProcess(std::string_view http_block, int ready_port);
  ~NginxProcess();
  NginxProcess(const NginxProcess&) = delete;
  NginxProcess& operator=(const NginxProcess&) = delete;

  const std::filesystem::path& dir() const { return dir_; }
  std::string error_log() const;
  void stop();

 private:
  std::filesystem::path dir_;
  pid_t pid_ = -1;
};

}  // namespace ratekeeper::testing
