// Fuzz target: the decision API, POST /v1/check, with the input as its JSON body, through the
// server's routes (server/api.hpp) over a memory store (fuzz/api_fixture.hpp), three times
// (small limits: the same check is denied soon). Every body gets a JSON answer: 200 or 429
// with the decision, or 400 naming what is wrong.

#include <cstddef>
#include <cstdint>
#include <string>

#include "api_fixture.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace ratekeeper;
  fuzz::ApiFixture api;
  http::Request request;
  request.method = "POST";
  request.target = "/v1/check";
  request.headers = {{"Content-Type", "application/json"}};
  request.body.assign(reinterpret_cast<const char*>(data), size);
  for (int i = 0; i < 3; ++i) {
    const auto response = api.handle(request);
    fuzz::require(response.status == 200 || response.status == 400 || response.status == 429);
    if (response.status != 400) {
      const auto body = nlohmann::json::parse(response.body);
      fuzz::require(body.at("allowed").get<bool>() == (response.status == 200));
    }
  }
  return 0;
}
