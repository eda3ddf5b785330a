#include "support/http_client.hpp"

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <mutex>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "ratekeeper/core/host_port.hpp"
#include "ratekeeper/http/request.hpp"

namespace ratekeeper::testing {

namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

namespace {

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

}  // namespace

// The directories fresh_dir made in this process, removed when it exits.
class TempDirs {
 public:
  ~TempDirs() {
    const std::lock_guard lock(mu_);
    if (owner_ != ::getpid()) return;  // a forked child leaves them to its parent
    for (const auto& dir : dirs_) {
      std::error_code ignored;
      std::filesystem::remove_all(dir, ignored);
    }
  }
  void add(std::filesystem::path dir) {
    const std::lock_guard lock(mu_);
    dirs_.push_back(std::move(dir));
  }

 private:
  std::mutex mu_;
  pid_t owner_ = ::getpid();
  std::vector<std::filesystem::path> dirs_;
};

std::filesystem::path fresh_dir(std::string_view what) {
  static std::atomic<int> counter{0};
  static TempDirs made;
  auto dir = std::filesystem::temp_directory_path() /
             fmt::format("ratekeeper-{}-{}-{}", what, ::getpid(), counter.fetch_add(1));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  made.add(dir);
  return dir;
}

// `max_open_files` > 0: the child's RLIMIT_NOFILE.
pid_t spawn(const std::vector<std::string>& argv, const std::filesystem::path& out,
            const std::filesystem::path& err, int max_open_files) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    int o = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int e = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (o >= 0) ::dup2(o, 1);
    if (e >= 0) ::dup2(e, 2);
    if (max_open_files > 0) {
      const rlimit limit{static_cast<rlim_t>(max_open_files), static_cast<rlim_t>(max_open_files)};
      if (::setrlimit(RLIMIT_NOFILE, &limit) != 0) ::_exit(126);
    }
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  return pid;
}

// Exit status of `pid` if it has exited within `timeout` (-1 for a signal), else nullopt.
std::optional<int> wait_pid(pid_t pid, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    int status = 0;
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    if (r < 0) return -1;
    if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

namespace {

HttpResponse convert(bhttp::response<bhttp::string_body>&& res) {
  HttpResponse out;
  out.status = static_cast<int>(res.result_int());
  for (const auto& field : res) {
    out.headers.emplace_back(std::string(field.name_string()), std::string(field.value()));
  }
  out.body = std::move(res.body());
  return out;
}

}  // namespace

std::optional<std::string> HttpResponse::header(std::string_view name) const {
  for (const auto& [k, v] : headers) {
    if (http::iequals(k, name)) return v;
  }
  return std::nullopt;
}

struct HttpClient::Impl {
  net::io_context ioc;
  std::optional<tcp::socket> socket;
  beast::flat_buffer buffer;
  std::string host;
  int port = 0;
  bool used = false;  // the connection has carried a request already
  std::size_t opened = 0;  // connections opened so far

  void connect() {
    ++opened;
    socket.emplace(ioc);
    buffer.clear();
    used = false;
    tcp::endpoint endpoint(net::ip::make_address(host), static_cast<unsigned short>(port));
    beast::error_code ec;
    socket->connect(endpoint, ec);
    if (ec) {
      socket.reset();
      throw std::runtime_error(fmt::format("connect {}:{}: {}", host, port, ec.message()));
    }
    socket->set_option(tcp::no_delay(true));
    timeval tv{30, 0};  // a server that never answers fails the test instead of hanging it
    ::setsockopt(socket->native_handle(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ::setsockopt(socket->native_handle(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  }

  void close() {
    if (!socket) return;
    beast::error_code ec;
    socket->shutdown(tcp::socket::shutdown_both, ec);
    socket->close(ec);
    socket.reset();
  }

  bhttp::request<bhttp::string_body> build(const HttpRequest& r) const {
    bhttp::request<bhttp::string_body> req;
    req.method_string(r.method);
    req.target(r.target);
    req.version(11);
    req.set(bhttp::field::host, fmt::format("{}:{}", host, port));
    for (const auto& [k, v] : r.headers) req.insert(k, v);
    req.body() = r.body;
    if (!r.body.empty() || r.method == "POST" || r.method == "PUT") req.prepare_payload();
    return req;
  }

  HttpResponse read_one() {
    bhttp::response_parser<bhttp::string_body> parser;
    parser.body_limit(64 * 1024 * 1024);
    // A signal delivered to this process (a child stopped or continued, say) interrupts the
    // blocking read; the parser keeps what it has, so reading on resumes the same response.
    boost::system::error_code ec;
    do {
      ec = {};
      bhttp::read(*socket, buffer, parser, ec);
    } while (ec == boost::asio::error::interrupted);
    if (ec) throw boost::system::system_error(ec);
    auto res = parser.release();
    const bool keep = res.keep_alive();
    auto out = convert(std::move(res));
    if (!keep) close();
    return out;
  }

  template <class Send>
  auto with_retry(Send&& send) {
    for (int attempt = 0;; ++attempt) {
      if (!socket) connect();
      const bool reused = used;
      used = true;
      try {
        return send();
      } catch (const boost::system::system_error& e) {
        close();
        // A kept-alive connection the server closed meanwhile: retry once on a new one.
        if (reused && attempt == 0) continue;
        throw std::runtime_error(fmt::format("HTTP exchange with {}:{}: {}", host, port, e.what()));
      }
    }
  }
};

HttpClient::HttpClient(int port, std::string host) : impl_(std::make_unique<Impl>()) {
  impl_->host = std::move(host);
  impl_->port = port;
}

HttpClient::~HttpClient() {
  impl_->close();
}

std::size_t HttpClient::connections_opened() const { return impl_->opened; }

HttpResponse HttpClient::request(const HttpRequest& request) {
  return impl_->with_retry([&] {
    auto req = impl_->build(request);
    bhttp::write(*impl_->socket, req);
    return impl_->read_one();
  });
}

HttpResponse HttpClient::get(std::string target, Headers headers) {
  return request(HttpRequest{"GET", std::move(target), std::move(headers), {}});
}

HttpResponse HttpClient::post(std::string target, std::string body, Headers headers) {
  return request(HttpRequest{"POST", std::move(target), std::move(headers), std::move(body)});
}

HttpResponse HttpClient::raw(std::string_view bytes) {
  impl_->close();
  impl_->connect();
  impl_->used = true;
  try {
    net::write(*impl_->socket, net::buffer(bytes.data(), bytes.size()));
    return impl_->read_one();
  } catch (const boost::system::system_error& e) {
    impl_->close();
    throw std::runtime_error(fmt::format("raw HTTP exchange: {}", e.what()));
  }
}

std::vector<HttpResponse> HttpClient::pipeline(const std::vector<HttpRequest>& requests) {
  impl_->close();
  impl_->connect();
  impl_->used = true;
  try {
    std::string bytes;
    for (const auto& r : requests) {
      std::ostringstream os;
      os << impl_->build(r);
      bytes += os.str();
    }
    net::write(*impl_->socket, net::buffer(bytes));
    std::vector<HttpResponse> out;
    for (std::size_t i = 0; i < requests.size() && impl_->socket; ++i) {
      out.push_back(impl_->read_one());
    }
    return out;
  } catch (const boost::system::system_error& e) {
    impl_->close();
    throw std::runtime_error(fmt::format("pipelined HTTP exchange: {}", e.what()));
  }
}

void HttpClient::connect() {
  impl_->close();
  impl_->connect();
  impl_->used = true;
}

std::size_t HttpClient::send_raw(std::string_view bytes) {
  if (!impl_->socket) connect();
  std::size_t sent = 0;
  while (sent < bytes.size()) {
    const auto n = ::send(impl_->socket->native_handle(), bytes.data() + sent, bytes.size() - sent,
                          MSG_NOSIGNAL);
    if (n <= 0) break;
    sent += static_cast<std::size_t>(n);
  }
  return sent;
}

std::string HttpClient::read_until_close() {
  std::string out;
  if (!impl_->socket) return out;
  // What the HTTP reader took already, then the socket until it ends.
  const auto buffered = impl_->buffer.data();
  out.append(static_cast<const char*>(buffered.data()), buffered.size());
  impl_->buffer.clear();
  char buf[16 * 1024];
  for (;;) {
    const auto n = ::recv(impl_->socket->native_handle(), buf, sizeof buf, 0);
    if (n <= 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  impl_->close();
  return out;
}

void HttpClient::close() {
  impl_->close();
}
bool HttpClient::connected() const {
  return impl_->socket.has_value();
}

std::unique_ptr<ServerProcess> serve(std::string yaml, std::string store_url, int threads,
                                     int max_open_files) {
  ServerProcess::Options o;
  o.config_yaml = std::move(yaml);
  o.store_url = std::move(store_url);
  o.threads = threads;
  o.max_open_files = max_open_files;
  return std::make_unique<ServerProcess>(std::move(o));
}

HttpResponse http_get(int port, std::string target, Headers headers) {
  HttpClient client(port);
  return client.get(std::move(target), std::move(headers));
}

namespace {

// A blocking socket connected to 127.0.0.1:port, by hand (for what a client does not do on
// purpose).
int connect_loopback(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    throw std::runtime_error(fmt::format("connect to port {} failed", port));
  }
  return fd;
}

}  // namespace

std::optional<std::string> trickle_until_closed(int port, std::string_view head, std::string_view trickle,
                                                std::chrono::milliseconds every,
                                                std::chrono::milliseconds limit) {
  const int fd = connect_loopback(port);
  ::send(fd, head.data(), head.size(), MSG_NOSIGNAL);
  const auto deadline = std::chrono::steady_clock::now() + limit;
  std::string received;
  std::size_t next = 0;
  std::optional<std::string> out;
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(every.count())) > 0) {
      char buf[4096];
      const auto n = ::recv(fd, buf, sizeof buf, 0);
      if (n <= 0) {
        out = received;
        break;
      }
      received.append(buf, static_cast<std::size_t>(n));
      continue;
    }
    if (!trickle.empty()) {
      ::send(fd, trickle.data() + next % trickle.size(), 1, MSG_NOSIGNAL);
      ++next;
    }
  }
  ::close(fd);
  return out;
}

LeftOpen write_after_answer_until_closed(int port, std::string_view request, std::chrono::milliseconds limit) {
  const int fd = connect_loopback(port);
  timeval tv{20, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  LeftOpen out;
  ::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  char buf[4096];
  for (;;) {
    const auto n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;  // the half-close (or a reset, or the 20 s: the answer says which)
    out.answer.append(buf, static_cast<std::size_t>(n));
  }
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!out.closed && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    out.closed = ::send(fd, "x", 1, MSG_NOSIGNAL) < 0;
  }
  ::close(fd);
  return out;
}

HttpResponse http_post(int port, std::string target, std::string body, Headers headers) {
  HttpClient client(port);
  return client.post(std::move(target), std::move(body), std::move(headers));
}

std::optional<double> metric_value(std::string_view exposition, std::string_view series) {
  std::size_t pos = 0;
  while (pos < exposition.size()) {
    auto eol = exposition.find('\n', pos);
    if (eol == std::string_view::npos) eol = exposition.size();
    const auto line = exposition.substr(pos, eol - pos);
    pos = eol + 1;
    if (line.size() > series.size() && line.starts_with(series) && line[series.size()] == ' ') {
      return std::stod(std::string(line.substr(series.size() + 1)));
    }
  }
  return std::nullopt;
}

std::filesystem::path write_temp_file(std::string_view name, std::string_view text) {
  auto path = fresh_dir("file") / std::string(name);
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

namespace {

// Whether `yaml` has the top-level key `key` (written with its colon).
bool has_top_level(const std::string& yaml, std::string_view key) {
  return yaml.starts_with(key) || yaml.find("\n" + std::string(key)) != std::string::npos;
}

// The servers of the HTTP tests serve the seed's demo API (off by default in ratekeeper) unless
// their configuration says otherwise or proxies to an upstream.
std::string with_demo_api(const std::string& yaml) {
  if (has_top_level(yaml, "demo_api:") || has_top_level(yaml, "upstream:")) return yaml;
  return yaml + "\ndemo_api: true\n";
}

// A store given by --store alone gets a deadline far above any stall of a loaded machine, so
// that a test's answers come from the store, not from the failure policy. A test about
// deadlines writes its own `store:` section.
std::string with_store_deadline(const std::string& yaml) {
  if (has_top_level(yaml, "store:")) return yaml;
  return "store: {command_timeout: 2s}\n" + yaml;
}

}  // namespace

ServerProcess::ServerProcess(Options options) : options_(std::move(options)) {
  dir_ = fresh_dir("serve");
  config_path_ = dir_ / "ratekeeper.yaml";
  std::string config = options_.demo_api ? with_demo_api(options_.config_yaml) : options_.config_yaml;
  if (!options_.store_url.empty()) config = with_store_deadline(config);
  std::ofstream(config_path_, std::ios::binary) << config;
  std::vector<std::string> argv = {
      RATEKEEPER_BINARY, "serve",       "--config",  config_path_.string(),
      "--listen",        "127.0.0.1:0", "--threads", std::to_string(options_.threads)};
  if (!options_.store_url.empty()) {
    argv.push_back("--store");
    argv.push_back(options_.store_url);
  }
  argv.insert(argv.end(), options_.extra_args.begin(), options_.extra_args.end());
  pid_ = spawn(argv, dir_ / "stdout.log", dir_ / "stderr.log", options_.max_open_files);

  const auto deadline = std::chrono::steady_clock::now() + options_.start_timeout;
  static constexpr std::string_view kMarker = "listening on ";
  while (std::chrono::steady_clock::now() < deadline) {
    const std::string out = log();
    if (auto at = out.find(kMarker); at != std::string::npos) {
      const auto eol = out.find('\n', at);
      if (eol != std::string::npos) {
        // The address, up to the end of the line or of the JSON string (logging.format: json).
        std::string line = out.substr(at + kMarker.size(), eol - at - kMarker.size());
        line = line.substr(0, line.find_first_of("\",} "));
        const auto address = split_host_port(line);
        if (!address || !address->port) {
          throw std::runtime_error("ratekeeper serve logged a bad address: " + line);
        }
        port_ = std::stoi(std::string(*address->port));
        return;
      }
    }
    if (auto status = wait_pid(pid_, std::chrono::milliseconds(0))) {
      pid_ = -1;
      throw std::runtime_error(
          fmt::format("ratekeeper serve exited with {} before listening:\n{}\n{}", *status,
                      output(), errors()));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  throw std::runtime_error("ratekeeper serve did not start listening:\n" + output() + errors());
}

ServerProcess::~ServerProcess() {
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    wait_pid(pid_, std::chrono::seconds(10));
  }
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

std::string ServerProcess::output() const {
  return read_file(dir_ / "stdout.log");
}
std::string ServerProcess::errors() const {
  return read_file(dir_ / "stderr.log");
}

void ServerProcess::signal(int sig) {
  if (pid_ > 0) ::kill(pid_, sig);
}

std::optional<int> ServerProcess::wait(std::chrono::milliseconds timeout) {
  if (pid_ <= 0) return std::nullopt;
  auto status = wait_pid(pid_, timeout);
  if (status) pid_ = -1;
  return status;
}

ProcessResult run_ratekeeper(const std::vector<std::string>& args,
                             std::chrono::milliseconds timeout) {
  const auto dir = fresh_dir("run");
  std::vector<std::string> argv = {RATEKEEPER_BINARY};
  argv.insert(argv.end(), args.begin(), args.end());
  const pid_t pid = spawn(argv, dir / "stdout.log", dir / "stderr.log");
  ProcessResult result;
  auto status = wait_pid(pid, timeout);
  if (!status) {
    ::kill(pid, SIGKILL);
    wait_pid(pid, std::chrono::seconds(10));
  }
  result.exit_code = status.value_or(-1);
  result.output = read_file(dir / "stdout.log");
  result.errors = read_file(dir / "stderr.log");
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return result;
}

int logged_port(const ServerProcess& server, std::string_view prefix) {
  const auto out = server.log();
  const auto at = out.find(prefix);
  if (at == std::string::npos) return 0;
  return std::stoi(out.substr(at + prefix.size()));
}

}  // namespace ratekeeper::testing
