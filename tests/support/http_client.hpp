#pragma once
// End-to-end HTTP test support: a small blocking HTTP/1.1 client over a real TCP socket, and
// a real `ratekeeper serve` process started on a free loopback port from inline YAML.
// Neither is thread-safe; use one client per thread.

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ratekeeper::testing {

using Headers = std::vector<std::pair<std::string, std::string>>;

struct HttpResponse {
  int status = 0;
  Headers headers;
  std::string body;

  // First header with this name, compared case-insensitively.
  std::optional<std::string> header(std::string_view name) const;
};

struct HttpRequest {
  std::string method = "GET";
  std::string target = "/";
  Headers headers;
  std::string body;
};

// One keep-alive connection to 127.0.0.1:port, reopened when the server has closed it.
// Throws std::runtime_error when the server cannot be reached or answers garbage.
class HttpClient {
 public:
  explicit HttpClient(int port, std::string host = "127.0.0.1");
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  HttpResponse request(const HttpRequest& request);
  HttpResponse get(std::string target, Headers headers = {});
  HttpResponse post(std::string target, std::string body, Headers headers = {});

  // Writes `bytes` as they are, then reads one response (malformed or oversized requests).
  HttpResponse raw(std::string_view bytes);
  // Writes several requests back to back before reading their responses (pipelining).
  std::vector<HttpResponse> pipeline(const std::vector<HttpRequest>& requests);

  // Bytes by hand, for what the client does not do on purpose (fields the client's own
  // header container refuses, uploads the server cuts off, idle connections): connect()
  // opens a fresh connection now; send_raw() writes as much of `bytes` as the server takes
  // (stopping at the first error) and says how much; read_until_close() returns what
  // arrives, unparsed, until the server closes, an error or the read timeout.
  void connect();
  std::size_t send_raw(std::string_view bytes);
  std::string read_until_close();

  void close();
  bool connected() const;
  // How many connections it has opened: 1 while the server keeps the first one open.
  std::size_t connections_opened() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A slow client: connects to 127.0.0.1:port, writes `head`, then one byte of `trickle` every
// `every` (cycling through it) while reading what the server sends. What it received when the
// server closed the connection, or nothing if it was still open after `limit`.
std::optional<std::string> trickle_until_closed(int port, std::string_view head, std::string_view trickle,
                                                std::chrono::milliseconds every,
                                                std::chrono::milliseconds limit);

// A client left open after an error answered with a close: connects to 127.0.0.1:port, writes
// `request`, reads the answer until the server half-closes, then writes a byte every 50 ms.
// The answer, and whether a write failed (the server closed the connection: reset) within
// `limit` of the answer.
struct LeftOpen {
  std::string answer;
  bool closed = false;
};
LeftOpen write_after_answer_until_closed(int port, std::string_view request, std::chrono::milliseconds limit);

// One-shot request on a fresh connection.
HttpResponse http_get(int port, std::string target, Headers headers = {});
HttpResponse http_post(int port, std::string target, std::string body, Headers headers = {});

// A `ratekeeper serve` process. The configuration is written to a temporary file; the
// server listens on 127.0.0.1:0 and its port is read from the "listening on" log line.
class ServerProcess {
 public:
  struct Options {
    std::string config_yaml;
    std::string store_url;  // --store; empty: as configured. Given alone, with a 2 s deadline.
    int threads = 2;
    std::vector<std::string> extra_args;
    std::chrono::milliseconds start_timeout{20'000};
    int max_open_files = 0;  // > 0: the process's RLIMIT_NOFILE
    // Adds `demo_api: true` to a configuration that names neither it nor an upstream.
    bool demo_api = true;
  };

  explicit ServerProcess(Options options);
  ~ServerProcess();  // SIGKILL when still running
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  const std::filesystem::path& config_path() const { return config_path_; }
  std::string output() const;  // stdout so far: the decision log
  std::string errors() const;  // stderr so far: the server's own log
  std::string log() const { return errors(); }

  void signal(int sig);
  // Waits for the process to exit; its exit status, -1 when killed by a signal, nullopt when
  // still running at the deadline.
  std::optional<int> wait(std::chrono::milliseconds timeout);

 private:
  Options options_;
  std::filesystem::path dir_;
  std::filesystem::path config_path_;
  pid_t pid_ = -1;
  int port_ = 0;
};

// The port after `prefix` in the server's log ("admin endpoints on 127.0.0.1:"); 0 when the
// line is not there.
int logged_port(const ServerProcess& server, std::string_view prefix);

// A `ratekeeper serve` process from inline YAML; `store_url` empty: the configured store.
std::unique_ptr<ServerProcess> serve(std::string yaml, std::string store_url = {}, int threads = 2,
                                     int max_open_files = 0);

struct ProcessResult {
  int exit_code = -1;  // -1: killed by a signal or timed out
  std::string output;  // stdout
  std::string errors;  // stderr
};

// Runs the `ratekeeper` binary with `args` to completion (killed after `timeout`).
ProcessResult run_ratekeeper(const std::vector<std::string>& args,
                             std::chrono::milliseconds timeout = std::chrono::seconds(20));

// The value of one series in Prometheus text, e.g.
// `ratekeeper_decisions_total{rule="api",outcome="allowed"}`; nullopt when absent.
std::optional<double> metric_value(std::string_view exposition, std::string_view series);

// Child processes of the tests. fresh_dir: a new empty directory under the system's temporary
// directory, named after `what`. spawn: runs `argv` (argv[0] a path) with stdout and stderr
// to the files given (`max_open_files` > 0: its RLIMIT_NOFILE). wait_pid: the exit status of
// `pid` once it has exited within `timeout` (-1 for a signal), else nullopt.
std::filesystem::path fresh_dir(std::string_view what);
pid_t spawn(const std::vector<std::string>& argv, const std::filesystem::path& out,
            const std::filesystem::path& err, int max_open_files = 0);
std::optional<int> wait_pid(pid_t pid, std::chrono::milliseconds timeout);

// Writes `text` to a new file in a fresh temporary directory and returns its path.
std::filesystem::path write_temp_file(std::string_view name, std::string_view text);

}  // namespace ratekeeper::testing
