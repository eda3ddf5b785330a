// End to end: the decision API's documented Python example (docs/decision-api.md), run as
// written by python3 against a real `ratekeeper serve` with the documented configuration.

#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <string>

#include "support/doc_blocks.hpp"
#include "support/http_client.hpp"

namespace ratekeeper::testing {
namespace {

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

TEST(DecisionApiDocs, PythonExampleRunsAgainstTheDocumentedConfiguration) {
  auto server = serve(doc_block("docs/decision-api.md", "yaml"), {}, 1);
  std::string script = doc_block("docs/decision-api.md", "python");
  const std::string documented = "http://127.0.0.1:8080/v1/check";
  const auto at = script.find(documented);
  ASSERT_NE(at, std::string::npos) << "docs/decision-api.md no longer calls " << documented;
  script.replace(at, documented.size(),
                 "http://127.0.0.1:" + std::to_string(server->port()) + "/v1/check");
  const auto path = write_temp_file("example.py", script);
  const auto dir = path.parent_path();
  const pid_t pid = spawn({"/usr/bin/python3", path.string()}, dir / "out", dir / "err");
  const auto status = wait_pid(pid, std::chrono::seconds(20));
  ASSERT_EQ(status, 0) << read_text(dir / "err");
  EXPECT_EQ(read_text(dir / "out"),
            "None\n"
            "None\n"
            "429 {\"error\":\"Rate limit exceeded\",\"retryAfter\":30}\n"
            "True\n"
            "False\n");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ratekeeper::testing
