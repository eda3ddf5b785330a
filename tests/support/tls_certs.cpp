#include "support/tls_certs.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <stdexcept>
#include <system_error>

#include "support/redis_server.hpp"

namespace ratekeeper::testing {
namespace {

void openssl(const TlsCerts& c, const std::vector<std::string>& args) {
  std::vector<std::string> argv{"openssl"};
  argv.insert(argv.end(), args.begin(), args.end());
  const auto log = c.dir / "openssl.log";
  if (run_process(argv, log) != 0) {
    std::ifstream in(log);
    std::stringstream text;
    text << in.rdbuf();
    throw std::runtime_error(fmt::format("openssl {} failed: {}", args.front(), text.str()));
  }
}

void new_key(const TlsCerts& c, const std::filesystem::path& key) {
  openssl(c, {"genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", key.string()});
}

void self_signed_ca(const TlsCerts& c, const std::string& name) {
  const auto key = c.dir / (name + ".key");
  new_key(c, key);
  openssl(c, {"req", "-x509", "-new", "-key", key.string(), "-out", (c.dir / (name + ".crt")).string(), "-days",
              "30", "-subj", "/CN=ratekeeper test " + name, "-addext", "basicConstraints=critical,CA:TRUE",
              "-addext", "keyUsage=critical,keyCertSign,cRLSign"});
}

// A certificate for `key`, signed by the CA, valid for `days` (negative: expired).
void signed_cert(const TlsCerts& c, const std::filesystem::path& key, const std::filesystem::path& out,
                 const std::string& cn, const std::string& extensions, int days) {
  const auto csr = c.dir / (out.stem().string() + ".csr");
  const auto ext = c.dir / (out.stem().string() + ".ext");
  std::ofstream(ext) << extensions << "\n";
  openssl(c, {"req", "-new", "-key", key.string(), "-out", csr.string(), "-subj", "/CN=" + cn});
  openssl(c, {"x509", "-req", "-in", csr.string(), "-CA", c.ca.string(), "-CAkey", (c.dir / "ca.key").string(),
              "-CAcreateserial", "-out", out.string(), "-days", std::to_string(days), "-extfile", ext.string()});
}

TlsCerts make_certs() {
  TlsCerts c;
  c.dir = std::filesystem::temp_directory_path() / fmt::format("ratekeeper-tls-{}", ::getpid());
  std::filesystem::remove_all(c.dir);
  std::filesystem::create_directories(c.dir);
  c.ca = c.dir / "ca.crt";
  c.other_ca = c.dir / "other-ca.crt";
  c.server_cert = c.dir / "server.crt";
  c.server_key = c.dir / "server.key";
  c.expired_cert = c.dir / "expired.crt";
  c.wrong_name_cert = c.dir / "wrong-name.crt";
  c.client_cert = c.dir / "client.crt";
  c.client_key = c.dir / "client.key";
  self_signed_ca(c, "ca");
  self_signed_ca(c, "other-ca");
  new_key(c, c.server_key);
  // Also a client certificate: nodes present it to each other on the cluster bus and to a
  // master they replicate from.
  const std::string server_ext = "extendedKeyUsage=serverAuth,clientAuth\nsubjectAltName=DNS:localhost,IP:127.0.0.1";
  signed_cert(c, c.server_key, c.server_cert, "localhost", server_ext, 30);
  signed_cert(c, c.server_key, c.expired_cert, "localhost", server_ext, -1);
  signed_cert(c, c.server_key, c.wrong_name_cert, "redis.example",
              "extendedKeyUsage=serverAuth\nsubjectAltName=DNS:redis.example", 30);
  new_key(c, c.client_key);
  signed_cert(c, c.client_key, c.client_cert, "ratekeeper", "extendedKeyUsage=clientAuth", 30);
  return c;
}

}  // namespace

const TlsCerts& tls_certs() {
  // Removed at exit (servers that loaded them keep what they read).
  struct Owned {
    TlsCerts certs = make_certs();
    ~Owned() {
      std::error_code ignored;
      std::filesystem::remove_all(certs.dir, ignored);
    }
  };
  static const Owned owned;
  return owned.certs;
}

std::vector<std::string> redis_tls_args(int tls_port, bool client_certs, const std::filesystem::path& cert) {
  const TlsCerts& c = tls_certs();
  return {"--tls-port",         std::to_string(tls_port),
          "--tls-cert-file",    (cert.empty() ? c.server_cert : cert).string(),
          "--tls-key-file",     c.server_key.string(),
          "--tls-ca-cert-file", c.ca.string(),
          "--tls-auth-clients", client_certs ? "yes" : "no"};
}

namespace {

RedisServer::Options tls_server_options(int& tls_port, bool client_certs, const std::filesystem::path& cert,
                                        std::vector<std::string> extra) {
  RedisServer::Options o;
  o.port = free_port();
  do {
    tls_port = free_port();
  } while (tls_port == o.port);
  o.args = redis_tls_args(tls_port, client_certs, cert);
  o.args.insert(o.args.end(), extra.begin(), extra.end());
  return o;
}

}  // namespace

TlsRedisServer::TlsRedisServer(bool client_certs, const std::filesystem::path& cert, std::vector<std::string> extra)
    : server(tls_server_options(tls_port, client_certs, cert, std::move(extra))) {}

std::string TlsRedisServer::url(std::string_view credentials) const {
  return fmt::format("rediss://{}127.0.0.1:{}", credentials, tls_port);
}

}  // namespace ratekeeper::testing
