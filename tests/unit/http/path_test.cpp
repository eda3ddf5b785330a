// The normal form of request paths (http/path.hpp), and the middleware matching it: every
// spelling of a path is charged to the rule of its normal form.

#include "ratekeeper/http/path.hpp"

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include "config.hpp"
#include "ratekeeper/http/middleware.hpp"
#include "ratekeeper/store/memory_store.hpp"

namespace ratekeeper::http {
namespace {

std::string norm(std::string_view path, const PathOptions& options = {}) {
  auto r = normalize_path(path, options);
  return r ? *r : "<error: " + r.error().message + ">";
}

constexpr PathOptions kLower{.lowercase = true};
constexpr PathOptions kKeep{.escaped_slashes = EscapedSlashes::keep, .reject_ambiguous = false};
constexpr PathOptions kUnescape{.escaped_slashes = EscapedSlashes::unescape};

TEST(Path, MergesSlashesAndRemovesDotSegments) {
  EXPECT_EQ(norm("//orders"), "/orders");
  EXPECT_EQ(norm("/a//b///c"), "/a/b/c");
  EXPECT_EQ(norm("/./orders"), "/orders");
  EXPECT_EQ(norm("/x/../orders"), "/orders");
  EXPECT_EQ(norm("/a/b/./../c"), "/a/c");
  EXPECT_EQ(norm("/a/."), "/a/");
  EXPECT_EQ(norm("/a/.."), "/");
  EXPECT_EQ(norm("/a/b/"), "/a/b/");
  EXPECT_EQ(norm("/a//"), "/a/");
  EXPECT_EQ(norm("/"), "/");
  EXPECT_EQ(norm("//"), "/");
  EXPECT_EQ(norm("/.a/..b/..."), "/.a/..b/...");  // not dot segments
}

TEST(Path, NeverGoesAboveTheRoot) {
  EXPECT_EQ(norm("/.."), "/");
  EXPECT_EQ(norm("/../../orders"), "/orders");
  EXPECT_EQ(norm("/a/../../../orders/"), "/orders/");
}

TEST(Path, DecodesUnreservedEscapesBeforeResolvingDotSegments) {
  EXPECT_EQ(norm("/%2e/orders"), "/orders");
  EXPECT_EQ(norm("/%2E%2e/orders"), "/orders");
  EXPECT_EQ(norm("/x/%2e%2e/orders"), "/orders");
  EXPECT_EQ(norm("/%6Frders"), "/orders");
  EXPECT_EQ(norm("/%41%7e%2D%5f"), "/A~-_");
}

TEST(Path, KeepsOtherEscapesWithUpperCaseHexAndSlashAsDataWhenAskedTo) {
  EXPECT_EQ(norm("/a%2fb", kKeep), "/a%2Fb");
  EXPECT_EQ(norm("/a%2Fb/../c", kKeep), "/c");  // one segment "a%2Fb"
  EXPECT_EQ(norm("/x\\..\\orders", kKeep), "/x\\..\\orders");
  EXPECT_EQ(norm("/x/..;/orders", kKeep), "/x/..;/orders");
  EXPECT_EQ(norm("/%25%36%66rders", kKeep), "/%256frders");
  EXPECT_EQ(norm("/%e2%82%ac"), "/%E2%82%AC");
  EXPECT_EQ(norm("/a%20b"), "/a%20b");
}

TEST(Path, RefusesInvalidEscapesControlBytesAndRelativePaths) {
  for (std::string_view bad : {"/a%", "/a%4", "/a%zz", "/a%4g", "/%00", "/%0a", "/%7F",
                               "orders", "", "*", "http://x/orders"}) {
    EXPECT_FALSE(normalize_path(bad)) << bad;
  }
  EXPECT_FALSE(normalize_path(std::string_view("/a\0b", 4)));
  EXPECT_FALSE(normalize_path("/a\rb"));
  EXPECT_FALSE(normalize_path("/a\x7f"));
}

// A fragment is never part of a request: `/login#x` would be `/login` to an application that
// cuts it off, and another path (or an unmatched one) to the rules. `%23` is data.
TEST(Path, RefusesAFragmentAnywhereInTheTarget) {
  for (std::string_view bad : {"/login#x", "/login#", "/#/login", "/a/#/../login"}) {
    const auto r = normalize_path(bad);
    EXPECT_FALSE(r) << bad << " → " << *r;
    EXPECT_FALSE(is_normal_path(bad)) << bad;
    if (!r) {
      EXPECT_NE(r.error().message.find("'#'"), std::string::npos) << r.error().message;
    }
    EXPECT_FALSE(normalize_path(bad, kKeep)) << bad;
    EXPECT_FALSE(normalize_target(bad)) << bad;
  }
  EXPECT_FALSE(normalize_target("/login?a=1#x"));
  EXPECT_EQ(norm("/a%23b"), "/a%23b");
  EXPECT_TRUE(is_normal_path("/a%23b"));
  EXPECT_EQ(normalize_target("/a?b=%23").value_or("<error>"), "/a?b=%23");
}

TEST(Path, CaseKeptUnlessLowercased) {
  EXPECT_EQ(norm("/ORDERS"), "/ORDERS");
  EXPECT_EQ(norm("/ORDERS", kLower), "/orders");
  EXPECT_EQ(norm("/%4F%2f", PathOptions{.lowercase = true, .escaped_slashes = EscapedSlashes::keep}),
            "/o%2F");
  EXPECT_TRUE(is_normal_path("/orders", kLower));
  EXPECT_FALSE(is_normal_path("/Orders", kLower));
  EXPECT_TRUE(is_normal_path("/Orders"));
}

// The spellings an application behind the proxy may read as /orders (a backslash or an escaped
// slash as a separator, Tomcat's path parameters, a second decoding): refused by default,
// whatever the path; under `unescape` the slashes become separators.
TEST(Path, RefusesEscapedSlashesBackslashesAndAmbiguousSpellingsByDefault) {
  for (std::string_view bad : {"/%5Corders", "/%5corders", "/x\\..\\orders", "/%2Forders",
                               "/a%2fb", "/x/..;/orders", "/orders;x=1", "/%3Borders",
                               "/%25%36%66rders", "/100%25"}) {
    const auto r = normalize_path(bad);
    EXPECT_FALSE(r) << bad << " → " << *r;
    EXPECT_FALSE(is_normal_path(bad)) << bad;
    if (!r) {
      EXPECT_NE(r.error().message.find("refused"), std::string::npos) << r.error().message;
    }
  }
  // Under `keep` for slashes only, the ambiguous ones are still refused, and the other way round.
  EXPECT_FALSE(normalize_path("/x/..;/orders", PathOptions{.escaped_slashes = EscapedSlashes::keep}));
  EXPECT_FALSE(normalize_path("/%2Forders", PathOptions{.reject_ambiguous = false}));
  EXPECT_EQ(norm("/x/..;/orders", PathOptions{.reject_ambiguous = false}), "/x/..;/orders");
}

TEST(Path, UnescapeMakesEscapedSlashesAndBackslashesSeparators) {
  EXPECT_EQ(norm("/%5Corders", kUnescape), "/orders");
  EXPECT_EQ(norm("/%2Forders", kUnescape), "/orders");
  EXPECT_EQ(norm("/%2forders", kUnescape), "/orders");
  EXPECT_EQ(norm("/x\\..\\orders", kUnescape), "/orders");
  EXPECT_EQ(norm("/x%5C%2E%2E%2Forders", kUnescape), "/orders");
  EXPECT_EQ(norm("/a%2Fb", kUnescape), "/a/b");
  EXPECT_EQ(norm("/a\\", kUnescape), "/a/");
  EXPECT_EQ(norm("/a%2F", kUnescape), "/a/");
  EXPECT_EQ(norm("\\orders", kUnescape), "<error: the path must start with '/'>");
  EXPECT_FALSE(is_normal_path("/a\\b", kUnescape));
  EXPECT_TRUE(is_normal_path("/a\\b", kKeep));
  EXPECT_TRUE(is_normal_path("/a%2Fb", kKeep));
  EXPECT_FALSE(is_normal_path("/a%2Fb", kUnescape));
  // Still refused under unescape: the ambiguous spellings.
  EXPECT_FALSE(normalize_path("/%25%32%46orders", kUnescape));
}

TEST(Path, TargetKeepsTheQueryAsSent) {
  EXPECT_EQ(*normalize_target("//orders?a=%2e&b=//"), "/orders?a=%2e&b=//");
  EXPECT_EQ(*normalize_target("/orders?a=%2F;b=%25"), "/orders?a=%2F;b=%25");
  EXPECT_EQ(*normalize_target("/x?"), "/x?");
  EXPECT_FALSE(normalize_target("/%zz?q"));
}

void check_normal_form(const std::string& path, const PathOptions& options);

// The normal form is a fixed point, and is_normal_path says exactly when a path is one.
RC_GTEST_PROP(PathProperty, NormalFormIsIdempotentAndRecognised, ()) {
  const auto pieces = *rc::gen::container<std::vector<std::string>>(rc::gen::element<std::string>(
      "/", "//", ".", "..", "a", "B", "%2e", "%2E", "%2f", "%41", "%e2", "%zz", "%", "~", "-",
      "\\", "%5c", ";", "%25", "%3b"));
  std::string path = "/";
  for (const auto& p : pieces) path += p;
  for (const bool lowercase : {false, true}) {
    for (const auto slashes : {EscapedSlashes::reject, EscapedSlashes::unescape, EscapedSlashes::keep}) {
      for (const bool ambiguous : {false, true}) {
        const PathOptions options{.lowercase = lowercase, .escaped_slashes = slashes,
                                  .reject_ambiguous = ambiguous};
        check_normal_form(path, options);
      }
    }
  }
}

void check_normal_form(const std::string& path, const PathOptions& options) {
  {
    auto once = normalize_path(path, options);
    if (!once) {
      RC_ASSERT(!is_normal_path(path, options));
      return;
    }
    RC_ASSERT(is_normal_path(*once, options));
    RC_ASSERT(*normalize_path(*once, options) == *once);
    RC_ASSERT(is_normal_path(path, options) == (*once == path));
    if (options.escaped_slashes != EscapedSlashes::keep) {
      RC_ASSERT(once->find('\\') == std::string::npos);
      RC_ASSERT(once->find("%2F") == std::string::npos);
      RC_ASSERT(once->find("%5C") == std::string::npos);
    }
    if (options.reject_ambiguous) {
      RC_ASSERT(once->find(';') == std::string::npos);
      RC_ASSERT(once->find("%25") == std::string::npos);
    }
    // No empty (but a trailing one), "." or ".." segment is left.
    std::string_view rest = std::string_view(*once).substr(1);
    while (true) {
      const auto slash = rest.find('/');
      const auto seg = rest.substr(0, slash);
      RC_ASSERT(seg != "." && seg != "..");
      if (slash == std::string_view::npos) break;
      RC_ASSERT(!seg.empty());
      rest.remove_prefix(slash + 1);
    }
  }
}

// A rule on /orders limits every spelling of /orders (one bucket), and only those.
TEST(PathMatching, EverySpellingIsChargedToTheRuleOfItsNormalForm) {
  ManualClock clock{1'700'000'000LL * kMicrosPerSecond};
  store::MemoryStore store{store::MemoryStoreOptions{.max_keys = 100, .shards = 1, .clock = &clock}};
  auto config = server::parse_config(R"(
logging: {decisions: {enabled: false}}
rules:
  - name: orders
    match: {path: /orders}
    limits: [{capacity: 6, refill_rate: 1}]
)", "path_test.yaml");
  limiter::Limiter limiter{config.limiter, store};
  Middleware middleware{limiter, config.middleware};
  int admitted = 0;
  for (std::string_view spelling :
       {"//orders", "/./orders", "/%2e/orders", "/x/../orders", "/%6Frders", "/orders?x=1"}) {
    Request r;
    r.method = "GET";
    r.target = std::string(spelling);
    r.peer_address = "192.0.2.1";
    auto apps = middleware.applied_rules(r);
    ASSERT_TRUE(apps) << spelling;
    ASSERT_EQ(apps->size(), 1u) << spelling;
    const auto res = middleware.handle_sync(r);
    admitted += res.admitted ? 1 : 0;
  }
  EXPECT_EQ(admitted, 6);
  Request r;
  r.method = "GET";
  r.target = "/%6frders";
  r.peer_address = "192.0.2.1";
  EXPECT_EQ(middleware.handle_sync(r).status, 429);
  r.target = "/ORDERS";  // another path: case is kept
  EXPECT_TRUE(middleware.applied_rules(r)->empty());
  r.target = "/or%zzders";
  const auto bad = middleware.handle_sync(r);
  EXPECT_EQ(bad.status, 400);
  EXPECT_NE(bad.body.find("percent"), std::string::npos) << bad.body;
  r.target = "/orders#x";  // a fragment: refused, not another path
  const auto fragment = middleware.handle_sync(r);
  EXPECT_EQ(fragment.status, 400);
  EXPECT_NE(fragment.body.find("fragment"), std::string::npos) << fragment.body;
}

// A method is case-sensitive, and the rules name theirs in upper case: `post` would be another
// method to them and POST to an application that upper-cases it. Refused (400), whatever the
// rules; upper-case tokens of any other kind pass.
TEST(PathMatching, AMethodWithALowerCaseLetterIsRefused) {
  ManualClock clock{1'700'000'000LL * kMicrosPerSecond};
  store::MemoryStore store{store::MemoryStoreOptions{.max_keys = 100, .shards = 1, .clock = &clock}};
  auto config = server::parse_config(R"(
logging: {decisions: {enabled: false}}
rules:
  - name: login
    match: {methods: [post], path: /login}
    limits: [{capacity: 1, refill_rate: 0.001}]
)", "path_test.yaml");
  limiter::Limiter limiter{config.limiter, store};
  Middleware middleware{limiter, config.middleware};
  Request r;
  r.target = "/login";
  r.peer_address = "192.0.2.1";
  r.method = "POST";
  EXPECT_TRUE(middleware.handle_sync(r).admitted);
  EXPECT_EQ(middleware.handle_sync(r).status, 429);
  for (const char* method : {"post", "Post", "pOST"}) {
    r.method = method;
    const auto res = middleware.handle_sync(r);
    EXPECT_EQ(res.status, 400) << method;
    EXPECT_EQ(res.outcome, RequestOutcome::bad_request) << method;
    EXPECT_NE(res.body.find("upper case"), std::string::npos) << res.body;
  }
  r.method = "PURGE";  // an extension method, unmatched
  EXPECT_TRUE(middleware.handle_sync(r).admitted);
  r.method = "";
  EXPECT_EQ(middleware.handle_sync(r).status, 400);
}

}  // namespace
}  // namespace ratekeeper::http
