// Fuzz target: the query string of the admin endpoints, sent from a loopback peer through the
// server's routes (server/api.hpp) over a memory store (fuzz/api_fixture.hpp). /admin/keys
// (rule, identity, tier, endpoint): GET, DELETE, GET again, each 200 or 400 (the reason as
// JSON); a 200 names a configured rule and its keys, each in one hash tag; the inspection
// consumes nothing (the second GET sees what the first saw, every limit full), and the reset
// names the keys inspected, none of which held state. /admin/top (rule, minutes, n): 200 or
// 400; a 200 reports no denial (nothing was checked).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

#include "api_fixture.hpp"

namespace {

using namespace ratekeeper;
using json = nlohmann::json;

http::Response ask(fuzz::ApiFixture& api, std::string method, const std::string& query) {
  return api.handle(http::Request{std::move(method), "/admin/keys?" + query, {}, {}, {}, 0}, "127.0.0.1");
}

// The keys of an answer, each of them "ratelimit:{...}:<rule>..." with one hash tag for all.
void require_keys(const json& keys, const std::string& rule) {
  fuzz::require(keys.is_array() && !keys.empty());
  std::string tag;
  for (const auto& key : keys) {
    fuzz::require(key.is_string());
    const auto k = key.get<std::string>();
    const auto open = k.find('{');
    const auto close = k.find('}');
    fuzz::require(k.starts_with("ratelimit:{") && close != std::string::npos && close > open);
    fuzz::require(k.find('{', open + 1) == std::string::npos && k.find('}', close + 1) == std::string::npos);
    fuzz::require(k.compare(close + 1, rule.size() + 1, ":" + rule) == 0);
    if (tag.empty()) tag = k.substr(open, close - open + 1);
    fuzz::require(k.substr(open, close - open + 1) == tag);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string query(reinterpret_cast<const char*>(data), size);
  fuzz::ApiFixture api;
  const auto top = api.handle(http::Request{"GET", "/admin/top?" + query, {}, {}, {}, 0}, "127.0.0.1");
  fuzz::require(top.status == 200 || top.status == 400);
  if (top.status == 200) {
    const json report = json::parse(top.body);
    fuzz::require(report.at("denials") == 0 && report.at("identities").empty());
  }
  const auto first = ask(api, "GET", query);
  fuzz::require(first.status == 200 || first.status == 400);
  const auto reset = ask(api, "DELETE", query);
  fuzz::require(reset.status == first.status);
  const auto again = ask(api, "GET", query);
  fuzz::require(again.status == first.status);
  if (first.status != 200) return 0;

  const json seen = json::parse(first.body);
  const std::string rule = seen.at("rule").get<std::string>();
  fuzz::require(fuzz::ApiFixture::config().limiter.rules.end() !=
                std::find_if(fuzz::ApiFixture::config().limiter.rules.begin(),
                             fuzz::ApiFixture::config().limiter.rules.end(),
                             [&](const limiter::Rule& r) { return r.name == rule; }));
  json keys = json::array();
  for (const auto& limit : seen.at("limits")) keys.push_back(limit.at("key"));
  require_keys(keys, rule);
  // Fresh state and a peek: every limit is full, before and after the reset.
  for (const auto& limit : seen.at("limits")) fuzz::require(limit.at("remaining") == limit.at("limit"));
  fuzz::require(json::parse(again.body) == seen);
  const json deleted = json::parse(reset.body);
  fuzz::require(deleted.at("keys") == keys);
  fuzz::require(deleted.at("existed") == 0);
  return 0;
}
