// The process's own metrics, as Prometheus' client libraries name them.
#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <fstream>

#include "api.hpp"
#include "ratekeeper/core/metrics_writer.hpp"

namespace ratekeeper::server {

namespace {

// When this process started (Unix seconds): read once, at the first scrape's latest, from the
// time of static initialisation.
const double kStartSeconds =
    std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();

std::int64_t open_fds() {
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  std::int64_t n = 0;
  while (const dirent* e = ::readdir(dir)) {
    if (e->d_name[0] != '.') ++n;
  }
  ::closedir(dir);
  return n - 1;  // the directory's own descriptor
}

}  // namespace

void write_process_metrics(MetricsWriter& out) {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  const auto seconds = [](const timeval& t) { return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) / 1e6; };
  out.counter("process_cpu_seconds_total", "Total user and system CPU time spent in seconds.",
              seconds(usage.ru_utime) + seconds(usage.ru_stime));
  std::ifstream statm("/proc/self/statm");
  std::int64_t size_pages = 0, resident_pages = 0;
  if (statm >> size_pages >> resident_pages) {
    const std::int64_t page = ::sysconf(_SC_PAGESIZE);
    out.gauge("process_resident_memory_bytes", "Resident memory size in bytes.", resident_pages * page);
    out.gauge("process_virtual_memory_bytes", "Virtual memory size in bytes.", size_pages * page);
  }
  if (const auto fds = open_fds(); fds >= 0) out.gauge("process_open_fds", "Number of open file descriptors.", fds);
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) == 0) {
    out.gauge("process_max_fds", "Maximum number of open file descriptors.", static_cast<std::int64_t>(limit.rlim_cur));
  }
  out.gauge("process_start_time_seconds", "Start time of the process since unix epoch in seconds.", kStartSeconds);
}

}  // namespace ratekeeper::server
