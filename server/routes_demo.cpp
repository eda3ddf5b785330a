// The demo API (/api/data, /api/profile, /api/search, /api/export/<name>, /auth/login)
// behind the rate-limiting middleware.
#include "routes.hpp"

namespace ratekeeper::server {

// The demo API, then the own endpoints.
void Api::Routes::demo(Request& request, std::string_view path, std::string_view method,
                       Responder respond) {
  if (path == "/api/data") {
    if (method != "GET") return respond(not_allowed("GET"));
    return limited(request, Endpoint::data, {}, std::move(respond));
  }
  if (path == "/api/profile") {
    if (method != "GET") return respond(not_allowed("GET"));
    auto user = request.header("X-User-ID");
    std::string user_id = user && !user->empty() ? std::string(*user) : "anonymous";
    return limited(request, Endpoint::profile, std::move(user_id), std::move(respond));
  }
  if (path == "/api/search") {
    if (method != "GET") return respond(not_allowed("GET"));
    return limited(request, Endpoint::search, query_param(request.query(), "q").value_or(""),
                   std::move(respond));
  }
  if (path.starts_with("/api/export/") && path.size() > 12) {
    if (method != "GET") return respond(not_allowed("GET"));
    return limited(request, Endpoint::export_, url_decode(path.substr(12)), std::move(respond));
  }
  if (path == "/auth/login") {
    if (method != "POST") return respond(not_allowed("POST"));
    std::string body = request.body;
    return limited(request, Endpoint::login, std::move(body), std::move(respond));
  }
  own(std::move(request), std::move(respond));
}

// Runs the middleware, then the endpoint when admitted. `arg` is what the endpoint needs
// from the request (the middleware's callback may run after the request is gone).
void Api::Routes::limited(const Request& request, Endpoint endpoint, std::string arg, Responder respond) {
  middleware_.handle(request, [this, endpoint, arg = std::move(arg), respond = std::move(respond)](
                                  http::MiddlewareResult result) mutable {
    if (!result.admitted) {
      return respond(Response{result.status, std::move(result.content_type), std::move(result.headers),
                              std::move(result.body), std::move(result.rule), result.outcome});
    }
    Response r = serve(endpoint, arg);
    // The endpoint answered at once: a reservation's slots go back, its estimate stays.
    if (result.usage) middleware_.release(*result.usage);
    r.rule = std::move(result.rule);
    r.outcome = result.outcome;
    if (r.headers.empty()) {
      r.headers = std::move(result.headers);
    } else {
      for (auto& h : result.headers) r.headers.push_back(std::move(h));
    }
    answer(result.delay, respond, std::move(r));
  });
}

Response Api::Routes::serve(Endpoint endpoint, const std::string& arg) {
  switch (endpoint) {
    case Endpoint::data:
      return json_response(200, R"({"data":"success"})");
    case Endpoint::profile:
      return json_response(200, json_text(json{{"profile", {{"user_id", arg}}}}));
    case Endpoint::search: {
      json results = json::array();
      if (!arg.empty()) {
        for (int i = 1; i <= 3; ++i) {
          results.push_back({{"id", i}, {"title", fmt::format("Result {} for {}", i, arg)}});
        }
      }
      return json_response(200, json_text(json{{"query", arg}, {"results", std::move(results)}}));
    }
    case Endpoint::export_:
      return json_response(200, json_text(json{{"export", arg}, {"status", "ready"}}));
    case Endpoint::login:
      return login(arg);
  }
  return error_response(500, "Internal server error");
}

// No real authentication: the endpoint exists to be protected against brute force.
Response Api::Routes::login(const std::string& body) {
  std::string username, password;
  if (!body.empty()) {
    json parsed = json::parse(body, nullptr, /*allow_exceptions=*/false);
    if (parsed.is_discarded()) {
      return json_response(400, http::bad_request_body("body is not valid JSON"));
    }
    if (parsed.is_object()) {
      if (auto it = parsed.find("username"); it != parsed.end() && it->is_string()) {
        username = it->get<std::string>();
      }
      if (auto it = parsed.find("password"); it != parsed.end() && it->is_string()) {
        password = it->get<std::string>();
      }
    }
  }
  if (username.empty() || password.empty()) {
    auto r = error_response(401, "Missing credentials");
    r.headers.emplace_back("WWW-Authenticate", R"(Bearer realm="ratekeeper")");
    return r;
  }
  return json_response(200, R"({"status":"ok"})");
}

}  // namespace ratekeeper::server
