// nginx's auth_request endpoint: /v1/auth (docs/nginx.md).
#include "routes.hpp"

#include "ratekeeper/http/client_ip.hpp"
#include "ratekeeper/http/headers.hpp"

namespace ratekeeper::server {

// /v1/auth, nginx's auth_request: the original request as nginx describes it
// (X-Original-Method, X-Original-URI, X-Real-IP, the client's own headers) through the
// middleware, answered 200 (empty) when admitted and 403 when denied (429) or refused
// (400), the only answers nginx takes besides 401; X-RateLimit-Status carries the status
// ratekeeper would have answered, the rate-limit headers are there to be copied. A
// subrequest that does not describe a request is a 400 (nginx: 500, as for an outage).
// Not 204 when admitted: every answer is written with a Content-Length, which 204 forbids.
void Api::Routes::auth(Request subrequest, Responder respond) {
  const auto method = subrequest.header("X-Original-Method");
  if (!method || !is_method(*method)) {
    return respond(bad_request("header X-Original-Method must be the request's method: a token in upper case, such as POST"));
  }
  const auto uri = subrequest.header("X-Original-URI");
  if (!uri || uri->empty() || uri->front() != '/') {
    return respond(bad_request("header X-Original-URI must be the request's path and query"));
  }
  Request original;
  original.method = std::string(*method);
  original.target = std::string(*uri);
  original.peer_address = forwarded_peer(subrequest);
  original.peer_port = subrequest.peer_port;
  original.headers = std::move(subrequest.headers);
  // nginx never says when the request it asked about ends: a concurrency slot would be held
  // until it expired, so a rule with one is a 500 (logged, counted) before any slot is taken.
  // Concurrency limits are for the proxy and the decision API.
  middleware_.handle(original, [this, respond = std::move(respond)](
                                   http::MiddlewareResult result) mutable {
    if (result.usage) middleware_.release(*result.usage);  // its estimate stays: nothing reports a cost
    Response r{result.status, std::move(result.content_type), std::move(result.headers),
               std::move(result.body)};
    r.headers.emplace_back("X-RateLimit-Status", std::to_string(result.status));
    if (result.admitted) {
      r.status = 200;
      r.content_type.clear();
    } else if (result.status == 429 || result.status == 400) {
      r.status = 403;
    }
    answer(result.admitted ? result.delay : 0, respond, std::move(r));
  }, http::HandleOptions{.can_release = false});
}

// The address nginx received the request from: X-Real-IP when the socket peer is a trusted
// proxy and the header is an address, else the peer. The middleware then walks
// X-Forwarded-For from it as from a socket peer.
std::string Api::Routes::forwarded_peer(const Request& subrequest) const {
  const auto& proxies = middleware_.options().trusted_proxies;
  const auto peer = http::parse_ip(subrequest.peer_address);
  if (!peer || !proxies.contains(*peer)) return subrequest.peer_address;
  const auto real_ip = subrequest.header("X-Real-IP");
  const auto ip = real_ip ? http::parse_ip(*real_ip) : std::nullopt;
  return ip ? ip->to_string() : subrequest.peer_address;
}

}  // namespace ratekeeper::server
