#pragma once
// The configuration examples of envoyproxy/ratelimit's README (examples 1 to 9) and the
// example.yaml of its docker-compose demo, written as our own YAML: one domain file each,
// shared by the conformance tests of matching (conformance_test) and of the service's
// decisions (conformance_decisions_test).

#include <string_view>

namespace ratekeeper::testing::rls_examples {

// Example 1: two values of one key, 500 per second each.
inline constexpr std::string_view kExample1 = R"(
domain: mongo_cps
descriptors:
  - {key: database, value: users, rate_limit: {unit: second, requests_per_unit: 500}}
  - {key: database, value: default, rate_limit: {unit: second, requests_per_unit: 500}}
)";

// Example 2: nested lists; marketing messages per number, and every number.
inline constexpr std::string_view kExample2 = R"(
domain: messaging
descriptors:
  # A placeholder level: marketing messages, limited per number below it.
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit: {unit: day, requests_per_unit: 5}
  # Every number, whatever the message.
  - key: to_number
    rate_limit: {unit: day, requests_per_unit: 100}
)";

// Example 3: every remote address 10 per second, one of them refused.
inline constexpr std::string_view kExample3 = R"(
domain: edge_proxy_per_ip
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 10}
  # One address refused altogether.
  - key: remote_address
    value: 50.0.0.5
    rate_limit: {unit: second, requests_per_unit: 0}
)";

// Example 4, first file: a limit on a descriptor of one entry.
inline constexpr std::string_view kExample4Flat = R"(
domain: example4
descriptors:
  - key: key
    value: value
    rate_limit: {requests_per_unit: 300, unit: second}
)";

// Example 4, second file: the limit one level down.
inline constexpr std::string_view kExample4Nested = R"(
domain: example4
descriptors:
  - key: key
    value: value
    descriptors:
      - key: subkey
        rate_limit: {requests_per_unit: 300, unit: second}
)";

// Example 5: unlimited.
inline constexpr std::string_view kExample5 = R"(
domain: internal
descriptors:
  - key: ldap
    rate_limit: {unlimited: true}
  - key: azure
    rate_limit: {unit: minute, requests_per_unit: 100}
)";

// Example 6: shadow mode for one user.
inline constexpr std::string_view kExample6 = R"(
domain: example6
descriptors:
  - key: service
    descriptors:
      - key: user
        value: user-a
        shadow_mode: true
        rate_limit: {requests_per_unit: 10, unit: second}
      - key: user
        value: user-b
        rate_limit: {requests_per_unit: 20, unit: second}
)";

// Example 7: replaces.
inline constexpr std::string_view kExample7 = R"(
domain: example7
descriptors:
  - key: key_1
    value: value_1
    descriptors:
      - key: user
        value: bkthomps
        rate_limit: {name: specific_limit, requests_per_unit: 5, unit: second}
  - key: key_2
    value: value_2
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          replaces: [{name: specific_limit}]
          requests_per_unit: 10
          unit: second
)";

// Example 8: detailed_metric.
inline constexpr std::string_view kExample8 = R"(
domain: example8
descriptors:
  - key: key1
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: key1
    value: value1
    rate_limit: {unit: minute, requests_per_unit: 20}
)";

// Example 9: wildcard values.
inline constexpr std::string_view kExample9 = R"(
domain: example9
descriptors:
  - key: key1
    value: value*
    rate_limit: {unit: minute, requests_per_unit: 20}
)";

// The example.yaml of the docker-compose demo (it starts with a document marker).
inline constexpr std::string_view kDockerComposeDemo = R"(---
domain: rl
descriptors:
  - key: source_cluster
    value: proxy
    descriptors:
      - key: destination_cluster
        value: mock
        rate_limit: {unit: minute, requests_per_unit: 1}
  - key: foo
    rate_limit: {unit: minute, requests_per_unit: 2}
    descriptors:
      - key: bar
        rate_limit: {unit: minute, requests_per_unit: 3}
      - key: bar
        value: banned
        rate_limit: {unit: minute, requests_per_unit: 0}
      - key: baz
        rate_limit: {unit: second, requests_per_unit: 1}
      - key: bay
        rate_limit: {unlimited: true}
      - key: baz
        value: shady
        shadow_mode: true
        rate_limit: {unit: minute, requests_per_unit: 1}
  - key: qux
    rate_limit: {unlimited: true}
)";

}  // namespace ratekeeper::testing::rls_examples
