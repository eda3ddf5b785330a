// The `grpc:` section of the main configuration: Envoy's rate limit service, its listener and
// the directory of its domain files.

#include <gtest/gtest.h>

#include <string>

#include "config.hpp"

namespace ratekeeper::server {
namespace {

void expect_error(const std::string& yaml, const std::string& field, const std::string& reason) {
  try {
    parse_config(yaml, "/etc/ratekeeper/ratekeeper.yaml");
    ADD_FAILURE() << "no error for field " << field;
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.file(), "/etc/ratekeeper/ratekeeper.yaml");
    EXPECT_EQ(e.field(), field) << e.what();
    EXPECT_NE(e.reason().find(reason), std::string::npos) << e.what();
  }
}

TEST(ConfigGrpcTest, AbsentByDefault) {
  EXPECT_FALSE(parse_config("listen: 127.0.0.1:8080\n").grpc.has_value());
}

TEST(ConfigGrpcTest, ReadsEveryField) {
  const auto c = parse_config(R"(
grpc:
  listen: 0.0.0.0:8081
  config: /srv/ratelimit/config
  response_headers: false
  max_message_bytes: 4096
  threads: 4
)",
                              "/etc/ratekeeper/ratekeeper.yaml");
  ASSERT_TRUE(c.grpc.has_value());
  EXPECT_EQ(c.grpc->host, "0.0.0.0");
  EXPECT_EQ(c.grpc->port, 8081);
  EXPECT_EQ(c.grpc->config_dir, "/srv/ratelimit/config");
  EXPECT_FALSE(c.grpc->response_headers);
  EXPECT_EQ(c.grpc->max_message_bytes, 4096u);
  EXPECT_EQ(c.grpc->threads, 4);
}

TEST(ConfigGrpcTest, DefaultsAndARelativeDirectoryFromTheConfigurationsOwn) {
  const auto c = parse_config("grpc: {listen: ':9001', config: rls}\n",
                              "/etc/ratekeeper/ratekeeper.yaml");
  ASSERT_TRUE(c.grpc.has_value());
  EXPECT_EQ(c.grpc->host, "0.0.0.0");
  EXPECT_EQ(c.grpc->port, 9001);
  EXPECT_EQ(c.grpc->config_dir, "/etc/ratekeeper/rls");
  EXPECT_TRUE(c.grpc->response_headers);
  EXPECT_EQ(c.grpc->max_message_bytes, 65536u);
  EXPECT_EQ(c.grpc->threads, 1);
  EXPECT_EQ(parse_config("grpc: {listen: ':9001', config: ./a/../rls}\n", "conf/rk.yaml")
                .grpc->config_dir,
            "conf/rls");
  EXPECT_EQ(parse_config("grpc: {listen: ':9001', config: rls}\n", "rk.yaml").grpc->config_dir,
            "rls");
}

TEST(ConfigGrpcTest, ErrorsNameTheField) {
  expect_error("grpc: {config: rls}\n", "grpc.listen", "required field missing");
  expect_error("grpc: {listen: ':9001'}\n", "grpc.config", "required field missing");
  expect_error("grpc: {listen: ':9001', config: ''}\n", "grpc.config", "must not be empty");
  expect_error("grpc: {listen: 'somewhere', config: rls}\n", "grpc.listen", "host:port");
  expect_error("grpc: {listen: ':9001', config: rls, tls: true}\n", "grpc.tls", "unknown field");
  expect_error("grpc: {listen: ':9001', config: rls, max_message_bytes: 1023}\n",
               "grpc.max_message_bytes", "between 1024 and 4194304");
  expect_error("grpc: {listen: ':9001', config: rls, max_message_bytes: 4194305}\n",
               "grpc.max_message_bytes", "between 1024 and 4194304");
  expect_error("grpc: {listen: ':9001', config: rls, response_headers: yes}\n",
               "grpc.response_headers", "true or false");
  expect_error("grpc: {listen: ':9001', config: rls, threads: 0}\n", "grpc.threads",
               "between 1 and 64");
  expect_error("grpc: rls\n", "grpc", "must be a mapping");
  expect_error("listen: 127.0.0.1:8080\ngrpc: {listen: '127.0.0.1:8080', config: rls}\n",
               "grpc.listen", "must differ from listen");
  expect_error("listen: 127.0.0.1:8080\ngrpc: {listen: ':8080', config: rls}\n", "grpc.listen",
               "must differ from listen");
  expect_error(
      "upstream: {url: 'http://127.0.0.1:9000'}\nadmin: {listen: '127.0.0.1:9090'}\n"
      "grpc: {listen: '127.0.0.1:9090', config: rls}\n",
      "grpc.listen", "must differ from admin.listen");
}

TEST(ConfigGrpcTest, AnyFreePortNeverCollides) {
  const auto c = parse_config("listen: 127.0.0.1:0\ngrpc: {listen: '127.0.0.1:0', config: rls}\n");
  EXPECT_EQ(c.grpc->port, 0);
}

}  // namespace
}  // namespace ratekeeper::server
