#include "support/test_upstream.hpp"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <charconv>
#include <limits>
#include <stdexcept>

#include "ratekeeper/http/request.hpp"

namespace ratekeeper::testing {

namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

namespace {

constexpr std::size_t kKeptBody = std::size_t{1} << 20;
constexpr std::size_t kPiece = std::size_t{64} * 1024;

std::uint64_t number_after(std::string_view target, std::string_view prefix) {
  std::uint64_t n = 0;
  const auto digits = target.substr(prefix.size());
  std::from_chars(digits.data(), digits.data() + digits.size(), n);
  return n;
}

}  // namespace

std::string pattern(std::uint64_t offset, std::size_t n) {
  // The pattern repeats every 26 bytes: cut from one long run of it.
  static const std::string run = [] {
    std::string r(kPatternPiece + 26, '\0');
    for (std::size_t i = 0; i < r.size(); ++i) r[i] = pattern_byte(i);
    return r;
  }();
  std::string out;
  out.reserve(n);
  while (out.size() < n) {
    const auto at = (offset + out.size()) % 26;
    out.append(run, at, std::min(n - out.size(), run.size() - at));
  }
  return out;
}

std::uint64_t checksum(std::string_view bytes, std::uint64_t hash) {
  for (const char c : bytes) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 1099511628211ULL;
  }
  return hash;
}

std::optional<std::string> TestUpstream::Seen::header(std::string_view name) const {
  for (const auto& [n, v] : headers) {
    if (http::iequals(n, name)) return v;
  }
  return std::nullopt;
}

TestUpstream::TestUpstream() {
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0) throw std::runtime_error("test upstream: socket");
  const int one = 1;
  ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::listen(listen_fd_, 128) != 0) {
    ::close(listen_fd_);
    throw std::runtime_error("test upstream: bind/listen");
  }
  socklen_t len = sizeof addr;
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  port_ = ntohs(addr.sin_port);
  acceptor_ = std::thread([this] { accept_loop(); });
}

TestUpstream::~TestUpstream() {
  stopping_ = true;
  acceptor_.join();
  ::close(listen_fd_);
  std::vector<std::thread> threads;
  {
    std::lock_guard lock(mu_);
    for (const int fd : open_fds_) ::shutdown(fd, SHUT_RDWR);
    threads.swap(threads_);
  }
  for (auto& t : threads) t.join();
}

void TestUpstream::accept_loop() {
  while (!stopping_) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (::poll(&p, 1, 20) <= 0) continue;
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    std::lock_guard lock(mu_);
    ++connections_;
    open_fds_.insert(fd);
    threads_.emplace_back([this, fd] { serve(fd); });
    cv_.notify_all();
  }
}

void TestUpstream::notify() {
  cv_.notify_all();
}

void TestUpstream::serve(int fd) {
  net::io_context context;
  tcp::socket socket(context);
  beast::error_code ec;
  socket.assign(tcp::v4(), fd, ec);
  beast::flat_buffer buffer;
  bool cut = false;
  bool drop_this = false;  // the previous request was /drop-next
  auto send = [&](std::string_view bytes) {
    net::write(socket, net::buffer(bytes.data(), bytes.size()), ec);
    if (ec) cut = true;
    return !ec;
  };
  while (!ec && !stopping_) {
    bhttp::request_parser<bhttp::buffer_body> parser;
    parser.body_limit(std::numeric_limits<std::uint64_t>::max());
    parser.header_limit(1 << 20);
    bhttp::read_header(socket, buffer, parser, ec);
    if (ec) break;
    Seen seen;
    seen.method = std::string(parser.get().method_string());
    seen.target = std::string(parser.get().target());
    for (const auto& f : parser.get()) {
      seen.headers.emplace_back(std::string(f.name_string()), std::string(f.value()));
    }
    seen.chunked = parser.chunked();
    seen.body_checksum = checksum({});
    if (seen.target.starts_with("/stall-body/")) {
      std::this_thread::sleep_for(std::chrono::milliseconds(number_after(seen.target, "/stall-body/")));
    }
    std::vector<char> piece(kPiece);
    while (!parser.is_done()) {
      parser.get().body().data = piece.data();
      parser.get().body().size = piece.size();
      bhttp::read(socket, buffer, parser, ec);
      if (ec == bhttp::error::need_buffer) ec = {};
      if (ec) break;
      const std::size_t n = piece.size() - parser.get().body().size;
      const std::string_view got(piece.data(), n);
      seen.body_size += n;
      seen.body_checksum = checksum(got, seen.body_checksum);
      if (seen.body.size() < kKeptBody) seen.body.append(got.substr(0, kKeptBody - seen.body.size()));
    }
    if (ec) {
      cut = true;
      break;
    }
    const bool keep = parser.keep_alive();
    const std::string target = seen.target;
    const std::uint64_t body_size = seen.body_size;
    {
      std::lock_guard lock(mu_);
      seen_.push_back(std::move(seen));
    }
    notify();

    if (drop_this) break;
    const std::string_view path = std::string_view(target).substr(0, target.find('?'));
    drop_this = path == "/drop-next";
    const std::string connection = keep ? "" : "Connection: close\r\n";
    if (path.starts_with("/sleep/")) {
      std::this_thread::sleep_for(std::chrono::milliseconds(number_after(path, "/sleep/")));
    }
    if (path.starts_with("/status/")) {
      const auto status = number_after(path, "/status/");
      if (send(fmt::format("HTTP/1.1 {} X\r\n{}{}\r\n", status,
                           status == 304 ? "Content-Length: 50\r\n" : "", connection)) && keep) {
        continue;
      }
      break;
    }
    if (path == "/garbage") {
      send("this is no HTTP response\r\n\r\n");
      break;
    }
    if (path == "/close-in-header") {
      send("HTTP/1.1 200 OK\r\nContent-Len");
      break;
    }
    if (path == "/endless-chunk-line") {  // a chunk's extensions that never end (16 MiB of them)
      bool sent = send("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;");
      const std::string more(64 * 1024, 'x');
      for (int i = 0; sent && i < 256; ++i) sent = send(more);
      break;
    }
    if (path == "/close-in-body") {
      send("HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\n" + pattern(0, 1000));
      break;
    }
    bool ok = true;
    if (path.starts_with("/usage-json/")) {  // the cost in the body, as OpenAI reports it
      const auto value = path.substr(std::string_view("/usage-json/").size());
      const std::string body =
          fmt::format(R"({{"id":"c-1","choices":[{{"text":"hi"}}],"usage":{{"prompt_tokens":2,"total_tokens":{}}}}})",
                      value);
      ok = send(fmt::format("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n{}\r\n{}",
                            body.size(), connection, body));
      if (!ok || !keep) break;
      continue;
    }
    if (path.starts_with("/usage-sse/")) {  // a streamed completion: the usage in its last chunk
      const auto value = path.substr(std::string_view("/usage-sse/").size());
      ok = send(fmt::format("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n{}\r\n",
                            connection));
      const std::string events[] = {
          "data: {\"choices\":[{\"delta\":\"he\"}],\"usage\":null}\n\n",
          ": keep-alive\r\n\r\n",
          "data: {\"choices\":[{\"delta\":\"llo\"}],\"usage\":null}\n\n",
          fmt::format("data: {{\"choices\":[],\"usage\":{{\"total_tokens\":{}}}}}\n\n", value),
          "data: [DONE]\n\n"};
      for (const auto& event : events) {
        if (ok) ok = send(fmt::format("{:x}\r\n{}\r\n", event.size(), event));
      }
      if (ok) ok = send("0\r\n\r\n");
      if (!ok || !keep) break;
      continue;
    }
    if (path.starts_with("/stream/") || path.starts_with("/chunked/")) {
      const bool chunked = path.starts_with("/chunked/");
      const std::uint64_t total = number_after(path, chunked ? "/chunked/" : "/stream/");
      ok = send(chunked ? fmt::format("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n{}\r\n",
                                      connection)
                        : fmt::format("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n{}\r\n", total,
                                      connection));
      for (std::uint64_t sent = 0; ok && sent < total;) {
        const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(kPiece, total - sent));
        const std::string data = pattern(sent, n);
        if (chunked) ok = send(fmt::format("{:x}\r\n", n));
        if (ok) ok = send(data);
        if (ok && chunked) ok = send("\r\n");
        sent += n;
      }
      if (ok && chunked) ok = send("0\r\n\r\n");
    } else {
      std::string extra;
      if (path.starts_with("/usage/")) {  // the request's cost, as an upstream reports it
        const auto value = path.substr(std::string_view("/usage/").size());
        if (value != "none") extra = fmt::format("X-Usage-Tokens: {}\r\n", value);
      }
      if (path == "/hop-by-hop") {
        extra = "Keep-Alive: timeout=5\r\nX-Secret: 1\r\nConnection: X-Secret\r\n"
                "Proxy-Authenticate: Basic\r\nRateLimit: \"upstream\";r=1;t=1\r\n"
                "X-Upstream: kept\r\n";
      }
      ok = send(fmt::format("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-Body-Bytes: {}\r\n{}{}\r\nok",
                            body_size, extra, connection));
    }
    if (!ok || !keep || path == "/then-close") break;
  }
  socket.close(ec);
  std::lock_guard lock(mu_);
  open_fds_.erase(fd);
  if (cut) ++cut_off_;
  cv_.notify_all();
}

std::vector<TestUpstream::Seen> TestUpstream::requests() const {
  std::lock_guard lock(mu_);
  return seen_;
}

std::size_t TestUpstream::request_count() const {
  std::lock_guard lock(mu_);
  return seen_.size();
}

std::size_t TestUpstream::connections() const {
  std::lock_guard lock(mu_);
  return connections_;
}

std::size_t TestUpstream::cut_off() const {
  std::lock_guard lock(mu_);
  return cut_off_;
}

std::size_t TestUpstream::open_connections() const {
  std::lock_guard lock(mu_);
  return open_fds_.size();
}

bool TestUpstream::wait_for(const std::function<bool()>& done,
                            std::chrono::milliseconds timeout) const {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::unique_lock lock(mu_);
  while (true) {
    lock.unlock();
    if (done()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    lock.lock();
    // Woken by the upstream's own events; conditions on the proxy are looked at again soon.
    cv_.wait_for(lock, std::chrono::milliseconds(5));
  }
}

}  // namespace ratekeeper::testing
