// Fuzz target: the decision API, POST /v1/check, with the input as its JSON body (every
// shape: `rule` and `identity`, a described `request`, a list of `checks`), through the
// server's routes (server/api.hpp) over a memory store (fuzz/api_fixture.hpp), three times
// (small limits: the same check is denied soon). Every body gets a JSON answer: 200 or 429
// with the decision, or 400 naming what is wrong. A described request is also sent, on fresh
// state, as nginx's auth subrequest (GET /v1/auth, the request in X-Original-Method,
// X-Original-URI, X-Real-IP and its headers): it must be decided as /v1/check decided it
// (200 ⇔ 200; 403 with X-RateLimit-Status 429 ⇔ 429; 403 with 400 ⇔ a refused identity;
// 500 for a rule with a concurrency limit ⇔ 400).
// The same body is also a settlement (POST /v1/settle), a release (POST /v1/release) and a
// heartbeat (POST /v1/renew): 200 with `settled`, `released` or `renewed`, or 400; and a
// reservation a check answered (of a rate limit or of a concurrency slot) is renewed (true),
// settles once with the body's fields (true, then false), and is released no more (false).

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "api_fixture.hpp"
#include "ratekeeper/http/client_ip.hpp"

namespace {

using namespace ratekeeper;
using json = nlohmann::json;

std::optional<std::string_view> header(const http::Response& r, std::string_view name) {
  for (const auto& [n, v] : r.headers) {
    if (http::iequals(n, name)) return v;
  }
  return std::nullopt;
}

// The /v1/auth subrequest of a described request that /v1/check takes as one (nothing but
// `request`, its fields known, a client address, headers of strings); nullopt for any other
// body. Its method and path may still be refused, by both.
std::optional<http::Request> auth_subrequest(const json& body) {
  if (!body.is_object() || body.contains("checks") || body.contains("rule") ||
      body.contains("identity")) {
    return std::nullopt;
  }
  const auto it = body.find("request");
  if (it == body.end() || !it->is_object()) return std::nullopt;
  const auto& described = *it;
  for (const auto& [key, value] : described.items()) {
    if (key != "method" && key != "path" && key != "headers" && key != "client_ip") {
      return std::nullopt;
    }
  }
  const auto method = described.find("method");
  const auto path = described.find("path");
  const auto client_ip = described.find("client_ip");
  if (method == described.end() || !method->is_string() || path == described.end() ||
      !path->is_string() || client_ip == described.end() || !client_ip->is_string() ||
      !http::parse_ip(client_ip->get_ref<const std::string&>())) {
    return std::nullopt;
  }
  http::Request r;
  r.method = "GET";
  r.target = "/v1/auth";
  r.headers = {{"X-Original-Method", method->get<std::string>()},
               {"X-Original-URI", path->get<std::string>()},
               {"X-Real-IP", client_ip->get<std::string>()}};
  if (const auto headers = described.find("headers"); headers != described.end()) {
    if (!headers->is_object()) return std::nullopt;
    for (const auto& [name, value] : headers->items()) {
      if (name.empty() || !value.is_string()) return std::nullopt;
      r.headers.emplace_back(name, value.get<std::string>());
    }
  }
  return r;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  fuzz::ApiFixture api;
  http::Request request;
  request.method = "POST";
  request.target = "/v1/check";
  request.headers = {{"Content-Type", "application/json"}};
  request.body.assign(reinterpret_cast<const char*>(data), size);
  std::vector<int> statuses;
  std::vector<std::string> reservations;
  for (int i = 0; i < 3; ++i) {
    const auto response = api.handle(request);
    statuses.push_back(response.status);
    fuzz::require(response.status == 200 || response.status == 400 || response.status == 429);
    if (response.status != 400) {
      const auto body = json::parse(response.body);
      if (body.contains("reservation")) {
        fuzz::require(response.status == 200);
        reservations.push_back(body.at("reservation").get<std::string>());
      }
      fuzz::require(body.at("allowed").get<bool>() == (response.status == 200));
      if (body.contains("status")) {  // the caller-shaped answer
        fuzz::require(body.at("status").get<int>() == response.status);
        fuzz::require(body.at("headers").is_object() && body.at("limits").is_array());
        fuzz::require(body.at("headers").contains("Retry-After") == (response.status == 429));
      }
    }
  }

  const json body = json::parse(request.body, nullptr, /*allow_exceptions=*/false);
  http::Request settlement = request;
  settlement.target = "/v1/settle";
  for (const auto& [target, field] : {std::pair{"/v1/settle", "settled"}, std::pair{"/v1/release", "released"},
                                       std::pair{"/v1/renew", "renewed"}}) {
    settlement.target = target;
    const auto answered = api.handle(settlement);
    fuzz::require(answered.status == 200 || answered.status == 400);
    if (answered.status == 200) fuzz::require(json::parse(answered.body).at(field).is_boolean());
  }
  auto held = [&](const char* target, const std::string& id) {
    json call{{"rule", body.at("rule")}, {"identity", body.at("identity")}, {"reservation", id}};
    if (body.contains("tier")) call["tier"] = body.at("tier");
    if (std::string_view(target) == "/v1/settle") call["cost"] = 0;
    settlement.target = target;
    settlement.body = call.dump();
    const auto answer = api.handle(settlement);
    fuzz::require(answer.status == 200);
    return json::parse(answer.body);
  };
  for (const auto& id : reservations) {
    fuzz::require(held("/v1/renew", id).at("renewed").get<bool>());
    for (const bool first : {true, false}) fuzz::require(held("/v1/settle", id).at("settled").get<bool>() == first);
    fuzz::require(!held("/v1/release", id).at("released").get<bool>());
  }
  const auto subrequest = auth_subrequest(body);
  if (!subrequest) return 0;
  fuzz::ApiFixture nginx_side;
  for (int i = 0; i < 3; ++i) {
    const auto response = nginx_side.handle(*subrequest);
    const auto status = header(response, "X-RateLimit-Status");
    // A described request /v1/check refused outright (bad method or path) is a bad
    // description here too; otherwise the same decision.
    if (response.status == 400) {
      fuzz::require(statuses[i] == 400 && !status);
      continue;
    }
    // A rule with a concurrency limit: auth_request cannot release its slot (500), the
    // described request holds no reservation (400).
    if (response.status == 500) {
      fuzz::require(statuses[i] == 400 && response.body.find("concurrency") != std::string::npos);
      continue;
    }
    fuzz::require(response.status == 200 || response.status == 403);
    fuzz::require(status.has_value());
    const int decided = std::stoi(std::string(*status));
    fuzz::require(decided == statuses[i]);
    fuzz::require((response.status == 200) == (decided == 200));
    fuzz::require(header(response, "Retry-After").has_value() == (decided == 429));
  }
  return 0;
}
