// Fuzz target: the query string of the admin endpoints, sent from a loopback peer through the
// server's routes (server/api.hpp) over a memory store (fuzz/api_fixture.hpp). /admin/keys
// (rule, identity, tier, endpoint): GET, DELETE, GET again, each 200 or 400 (the reason as
// JSON); a 200 names a configured rule and its keys, each in one hash tag; the inspection
// consumes nothing (the second GET sees what the first saw, every limit full), and the reset
// names the keys inspected, none of which held state. /admin/top (rule, minutes, n): 200 or
// 400; a 200 reports no denial (nothing was checked). /admin/overrides: the input as the body of
// a PUT, 200 or 400; a 200 is an override of a configured rule, listed exactly as set, applied
// to the identity's keys (each limit scaled by its factor), and removed by a DELETE that names
// it, leaving the list empty; a DELETE with the input as its query is a 200 or a 400.

#include <algorithm>
#include <cctype>
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

// `s` as a query parameter's value: every byte but the unreserved ones percent-encoded.
std::string percent_encode(std::string_view s) {
  std::string out;
  for (const unsigned char c : s) {
    if (std::isalnum(c) != 0 || c == '-' || c == '.' || c == '_' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += fmt::format("%{:02X}", c);
    }
  }
  return out;
}

// The input as an override: set, listed, applied, removed.
void exercise_overrides(fuzz::ApiFixture& api, const std::string& input) {
  const auto loopback = [&](std::string method, std::string target, std::string body = {}) {
    return api.handle(http::Request{std::move(method), std::move(target), {}, std::move(body), {}, 0}, "127.0.0.1");
  };
  const auto removal = loopback("DELETE", "/admin/overrides?" + input);
  fuzz::require(removal.status == 200 || removal.status == 400);
  const auto set = loopback("PUT", "/admin/overrides", input);
  fuzz::require(set.status == 200 || set.status == 400);
  if (set.status != 200) {
    fuzz::require(json::parse(loopback("GET", "/admin/overrides").body).at("overrides").empty());
    return;
  }
  const json o = json::parse(set.body);
  const std::string rule = o.at("rule").get<std::string>();
  const std::string identity = o.at("identity").get<std::string>();
  const double factor = o.at("factor").get<double>();
  fuzz::require(factor >= limiter::kMinOverrideFactor && factor <= limiter::kMaxOverrideFactor);
  const json listed = json::parse(loopback("GET", "/admin/overrides").body).at("overrides");
  fuzz::require(listed.size() == 1 && listed[0].at("rule") == rule && listed[0].at("identity") == identity &&
                listed[0].at("factor") == o.at("factor"));
  // Applied to the identity's keys: each limit is the rule's scaled (untiered rules without a
  // parent or per-endpoint keys: their keys need more than a rule and an identity).
  const limiter::Rule* r = nullptr;
  for (const auto& rule_of : fuzz::ApiFixture::config().limiter.rules) {
    if (rule_of.name == rule) r = &rule_of;
  }
  fuzz::require(r != nullptr);
  const std::string query = "rule=" + percent_encode(rule) + "&identity=" + percent_encode(identity);
  if (!r->tiered && !r->parent && r->bucket == limiter::BucketScope::shared && !identity.starts_with("ip:")) {
    const auto seen = loopback("GET", "/admin/keys?" + query);
    if (seen.status == 200) {
      const json limits = json::parse(seen.body).at("limits");
      fuzz::require(limits.size() == r->limits.size());
      for (std::size_t i = 0; i < limits.size(); ++i) {
        fuzz::require(limits[i].at("limit") == limiter::scale_limit(r->limits[i].limit, factor, r->cost).capacity);
      }
    }
  }
  const auto removed = loopback("DELETE", "/admin/overrides?" + query);
  fuzz::require(removed.status == 200 && json::parse(removed.body).at("removed") == true);
  fuzz::require(json::parse(loopback("GET", "/admin/overrides").body).at("overrides").empty());
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
  exercise_overrides(api, query);
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
