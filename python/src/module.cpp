// ratekeeper._native: the C++ limiter in a Python process. A Limiter is built from
// ratekeeper's YAML configuration (the file `serve` reads: rules, matches, identities, tiers,
// trusted proxies, headers, failure policies, store URL), over its own store and event loop.
// Every call has a synchronous form, which releases the GIL while the store answers, and an
// asyncio form, which returns a future completed on the event loop (the store's thread queues
// the answer and wakes the loop through an eventfd it watches): the loop never blocks on the
// store.

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <spdlog/spdlog.h>

#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <thread>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "config.hpp"
#include "ratekeeper/core/event_loop.hpp"
#include "ratekeeper/core/periodic.hpp"
#include "ratekeeper/http/client_ip.hpp"
#include "ratekeeper/http/headers.hpp"
#include "ratekeeper/http/middleware.hpp"
#include "ratekeeper/limiter/limiter.hpp"
#include "ratekeeper/store/leasing_store.hpp"
#include "ratekeeper/store/open_store.hpp"

namespace py = pybind11;

namespace ratekeeper::python {
namespace {

using Headers = std::vector<std::pair<std::string, std::string>>;

double seconds(Micros t) { return static_cast<double>(t) / kMicrosPerSecond; }

// One check of a rule for an identity (Limiter::evaluate of one application). The evaluation
// is kept as the limiter answered it: its headers and body are written only when asked for
// (a batch of checks seldom reads them).
struct Decision {
  bool allowed = true;
  std::int64_t limit = 0;
  std::int64_t remaining = 0;
  double retry_after = 0;  // seconds, 0 when allowed
  double reset_after = 0;  // seconds until the limit is full again
  bool by_failure_policy = false;
  std::string rule;
  limiter::Evaluation evaluation;
  http::HeaderOptions header_options;

  const std::string& identity() const {
    static const std::string none;
    return evaluation.rules.empty() ? none : evaluation.rules.front().identity;
  }
  // RateLimit-Policy, RateLimit (and Retry-After when denied), per the configuration.
  Headers headers() const { return http::rate_limit_headers(evaluation, header_options); }
  // Denied: the 429's body, {"error":"Rate limit exceeded","retryAfter":N}; empty when allowed.
  std::string body() const {
    return allowed ? std::string() : http::rejection_body(http::retry_after_seconds(evaluation.decision.retry_after));
  }
};

// The middleware's answer to a request (http::Middleware::handle).
struct RequestDecision {
  bool admitted = true;
  int status = 200;  // 200 admitted; 429 limited; 400 a request the rules cannot read; 500
  std::string body;  // the JSON of a rejection (the seed's body on 429); empty when admitted
  std::string content_type;
  Headers headers;  // to add to the response, admitted or not
  double delay = 0;  // admitted, to be served after this many seconds (on_limit: delay)
  std::string rule;  // the rule the answer came from; empty when none applied
  // Admitted with a reservation (a concurrency or usage rule): the request holds it until
  // Limiter.release (or settle) is called when it ends.
  std::shared_ptr<http::UsageReservation> reservation;
  // Renews the reservation's concurrency slots every heartbeat() while the request lasts (as
  // the proxy does), until it is released or settled, or the decision is dropped.
  std::shared_ptr<Periodic> heartbeat;
};

// What a Limiter's background work checks before it touches the store: close() shuts it
// first (under its lock), then takes the store away.
struct Gate {
  std::mutex mu;
  bool closed = false;
};

// Errors of the store that no failure policy answered.
PyObject* store_error = nullptr;

[[noreturn]] void raise(const Error& error) {
  if (error.code == ErrorCode::invalid_argument) throw py::value_error(error.message);
  PyErr_SetString(store_error, error.message.c_str());
  throw py::error_already_set();
}

Decision decision_of(limiter::Evaluation ev, const http::HeaderOptions& options) {
  Decision d;
  d.allowed = ev.allowed;
  d.limit = ev.decision.limit;
  d.remaining = std::max<std::int64_t>(0, ev.decision.remaining);
  d.retry_after = ev.allowed ? 0 : seconds(ev.decision.retry_after);
  d.reset_after = seconds(ev.decision.reset_after);
  d.by_failure_policy = ev.by_failure_policy;
  // The rule's name is copied: the evaluation's rule pointers are the limiter's, which may be
  // closed while the decision lives on.
  if (!ev.rules.empty()) d.rule = ev.rules.front().rule->name;
  d.evaluation = std::move(ev);
  d.header_options = options;
  return d;
}

// One application as the limiter takes them (moved: a braced list would copy it).
std::vector<limiter::AppliedRule> alone(limiter::AppliedRule app) {
  std::vector<limiter::AppliedRule> rules;
  rules.push_back(std::move(app));
  return rules;
}

// Where a Limiter's requests renew their concurrency slots.
struct Heartbeats {
  EventLoop* loop;
  http::Middleware* middleware;  // valid while the gate is open
  std::shared_ptr<Gate> gate;
};

RequestDecision request_decision_of(http::MiddlewareResult r, const Heartbeats& heartbeats) {
  RequestDecision d;
  d.admitted = r.admitted;
  d.status = r.status;
  d.body = std::move(r.body);
  d.content_type = std::move(r.content_type);
  for (auto& [name, value] : r.headers) d.headers.emplace_back(std::move(name), std::move(value));
  d.delay = seconds(r.delay);
  d.rule = std::move(r.rule);
  if (!r.usage) return d;
  d.reservation = std::make_shared<http::UsageReservation>(std::move(*r.usage));
  if (const Micros every = d.reservation->heartbeat(); every > 0) {
    d.heartbeat = std::make_shared<Periodic>(
        *heartbeats.loop, every, [h = heartbeats, usage = d.reservation](Periodic::Done done) {
          const std::lock_guard lock(h.gate->mu);
          if (h.gate->closed) return;
          h.middleware->renew(*usage);
          done();
        });
  }
  return d;
}

// The bytes of a value given as bytes (as they are) or str (as UTF-8); anything else is a
// TypeError saying `wrong()`. Reads by type only: no Python code runs.
template <class Wrong>
std::string bytes_or_str(PyObject* value, Wrong&& wrong) {
  if (PyBytes_Check(value)) return std::string(PyBytes_AS_STRING(value), static_cast<std::size_t>(PyBytes_GET_SIZE(value)));
  if (PyUnicode_Check(value)) {
    Py_ssize_t size = 0;
    const char* text = PyUnicode_AsUTF8AndSize(value, &size);
    if (text == nullptr) throw py::error_already_set();
    return std::string(text, static_cast<std::size_t>(size));
  }
  throw py::type_error(wrong());
}

// An ASGI scope's value: bytes, or str (some servers give a WebSocket's raw_path as str).
std::string scope_text(PyObject* value, const char* what) {
  return bytes_or_str(value, [what] { return fmt::format("scope[\"{}\"] must be bytes or str", what); });
}

// A request as the middleware reads it. `headers`: (name, value) pairs as received (bytes or
// str; ASGI gives bytes), `client`: the socket peer's address.
http::Request request_of(std::string method, std::string path, const py::iterable& headers, std::string client) {
  http::Request request;
  request.method = std::move(method);
  request.target = std::move(path);
  if (request.target.empty() || request.target.front() != '/') {
    throw py::value_error("path must start with / (the path and query as received)");
  }
  if (PyList_Check(headers.ptr())) request.headers.reserve(static_cast<std::size_t>(PyList_GET_SIZE(headers.ptr())));
  for (const auto& item : headers) {
    // ASGI's pairs are tuples of bytes: read in place. Anything else through the generic path.
    if (PyTuple_Check(item.ptr()) && PyTuple_GET_SIZE(item.ptr()) == 2 && PyBytes_Check(PyTuple_GET_ITEM(item.ptr(), 0)) &&
        PyBytes_Check(PyTuple_GET_ITEM(item.ptr(), 1))) {
      PyObject* name = PyTuple_GET_ITEM(item.ptr(), 0);
      PyObject* value = PyTuple_GET_ITEM(item.ptr(), 1);
      request.headers.emplace_back(std::string(PyBytes_AS_STRING(name), PyBytes_GET_SIZE(name)),
                                   std::string(PyBytes_AS_STRING(value), PyBytes_GET_SIZE(value)));
      continue;
    }
    const auto pair = item.cast<py::sequence>();
    if (pair.size() != 2) throw py::value_error("headers must be (name, value) pairs");
    const auto wrong = [] { return "a header's name and value are bytes or str"; };
    request.headers.emplace_back(bytes_or_str(py::object(pair[0]).ptr(), wrong),
                                 bytes_or_str(py::object(pair[1]).ptr(), wrong));
  }
  if (http::is_canonical_ipv4(client)) {
    request.peer_address = std::move(client);  // its own canonical form: nothing to parse
  } else if (!client.empty()) {
    const auto ip = http::parse_ip(client);
    if (!ip) throw py::value_error("client must be an IP address");
    request.peer_address = ip->to_string();
  }
  return request;
}

// A request as the middleware reads it, from an ASGI scope (http or websocket): its method (a
// WebSocket's handshake is a GET), its path and query as received (raw_path, else path), its
// headers, and the socket peer's address (none: a Unix socket's).
http::Request request_of_scope(const py::dict& scope) {
  PyObject* dict = scope.ptr();
  static PyObject* const k_method = PyUnicode_InternFromString("method");
  static PyObject* const k_raw_path = PyUnicode_InternFromString("raw_path");
  static PyObject* const k_path = PyUnicode_InternFromString("path");
  static PyObject* const k_query = PyUnicode_InternFromString("query_string");
  static PyObject* const k_headers = PyUnicode_InternFromString("headers");
  static PyObject* const k_client = PyUnicode_InternFromString("client");
  PyObject* method = PyDict_GetItemWithError(dict, k_method);
  PyObject* raw_path = PyDict_GetItemWithError(dict, k_raw_path);
  PyObject* path = PyDict_GetItemWithError(dict, k_path);
  PyObject* query = PyDict_GetItemWithError(dict, k_query);
  PyObject* headers = PyDict_GetItemWithError(dict, k_headers);
  PyObject* client = PyDict_GetItemWithError(dict, k_client);
  if (PyErr_Occurred()) throw py::error_already_set();
  if (headers == nullptr) throw py::value_error("an ASGI scope has headers");
  // The values are read by type only (no Python code runs while they are borrowed).
  std::string target;
  if (raw_path != nullptr && raw_path != Py_None) target = scope_text(raw_path, "raw_path");
  if (target.empty()) target = path != nullptr ? scope_text(path, "path") : std::string("/");
  if (query != nullptr && query != Py_None) {
    const std::string text = scope_text(query, "query_string");
    if (!text.empty()) {
      target += '?';
      target += text;
    }
  }
  std::string peer;
  if (client != nullptr && client != Py_None) {
    const bool tuple = PyTuple_Check(client);
    if ((!tuple && !PyList_Check(client)) || Py_SIZE(client) < 1) {
      throw py::type_error("scope[\"client\"] is (host, port) or None");
    }
    PyObject* host = tuple ? PyTuple_GET_ITEM(client, 0) : PyList_GET_ITEM(client, 0);
    if (!PyUnicode_Check(host)) throw py::type_error("scope[\"client\"] is (host, port) or None");
    peer = scope_text(host, "client");
  }
  std::string verb = method != nullptr ? scope_text(method, "method") : std::string("GET");
  return request_of(std::move(verb), std::move(target), py::reinterpret_borrow<py::iterable>(headers), std::move(peer));
}

// Headers as ASGI sends them: a new list of (bytes, bytes), names in lower case; nullptr with
// the exception set when Python is out of memory. With the GIL.
PyObject* asgi_header_list(const Headers& headers) {
  PyObject* list = PyList_New(static_cast<Py_ssize_t>(headers.size()));
  if (list == nullptr) return nullptr;
  for (std::size_t i = 0; i < headers.size(); ++i) {
    const auto& [name, value] = headers[i];
    PyObject* lower = PyBytes_FromStringAndSize(nullptr, static_cast<Py_ssize_t>(name.size()));
    PyObject* bytes = PyBytes_FromStringAndSize(value.data(), static_cast<Py_ssize_t>(value.size()));
    PyObject* pair = lower != nullptr && bytes != nullptr ? PyTuple_New(2) : nullptr;
    if (pair == nullptr) {
      Py_XDECREF(lower);
      Py_XDECREF(bytes);
      Py_DECREF(list);
      return nullptr;
    }
    char* out = PyBytes_AS_STRING(lower);
    for (const char c : name) *out++ = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    PyTuple_SET_ITEM(pair, 0, lower);
    PyTuple_SET_ITEM(pair, 1, bytes);
    PyList_SET_ITEM(list, static_cast<Py_ssize_t>(i), pair);
  }
  return list;
}

// `self.name(arg)` (or `self.name()` without one), `name` an interned str: called by name,
// without a bound method object each time.
py::object call_method(const py::handle& self, PyObject* name, PyObject* arg = nullptr) {
  PyObject* args[] = {self.ptr(), arg};
  const std::size_t n = arg == nullptr ? 1 : 2;
  auto result =
      py::reinterpret_steal<py::object>(PyObject_VectorcallMethod(name, args, n | PY_VECTORCALL_ARGUMENTS_OFFSET, nullptr));
  if (!result) throw py::error_already_set();
  return result;
}

// The answers of one asyncio loop's checks, handed over by the store's threads without the GIL:
// a thread queues its answer as C++ values and, when the queue was empty, writes to an
// eventfd the loop watches (add_reader); the loop's drain, on its thread, makes the Python
// values and completes the futures. A store thread never waits for the GIL (which the loop
// holds while it runs Python code): it is also the thread that talks to Redis. Many checks in
// flight cost one wake-up of the loop, not one each.
class Completions {
 public:
  struct Item {
    PyObject* future;                  // a reference of its own, given up by the drain
    std::function<py::object()> make;  // the value, made with the GIL on the loop's thread
    std::optional<Error> error;        // or the exception
  };

  // With the GIL, on the loop's thread.
  explicit Completions(const py::object& loop) : fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
    if (fd_ < 0) throw std::runtime_error("eventfd failed");
    // A loop whose create_future is asyncio's own gets asyncio.Future(loop=loop) made here,
    // without a call through Python code; any other loop is asked each time.
    const py::module_ asyncio = py::module_::import("asyncio");
    const py::object stock = asyncio.attr("BaseEventLoop").attr("create_future");
    const py::object own = py::type::of(loop).attr("create_future");
    if (own.is(stock)) future_type_ = py::object(asyncio.attr("Future")).release().ptr();
    loop_ = loop.inc_ref().ptr();
  }
  // Its Python objects are let go by let_go() (with the GIL), never here: the last owner may
  // be a store thread.
  ~Completions() { ::close(fd_); }
  Completions(const Completions&) = delete;
  Completions& operator=(const Completions&) = delete;

  // A new future of the loop. With the GIL, on the loop's thread.
  py::object new_future() const {
    if (future_type_ == nullptr) {
      static PyObject* const create_future = PyUnicode_InternFromString("create_future");
      return call_method(py::handle(loop_), create_future);
    }
    static PyObject* const loop_name = Py_BuildValue("(s)", "loop");
    PyObject* args[] = {nullptr, loop_};
    auto future = py::reinterpret_steal<py::object>(
        PyObject_Vectorcall(future_type_, args + 1, 0 | PY_VECTORCALL_ARGUMENTS_OFFSET, loop_name));
    if (!future) throw py::error_already_set();
    return future;
  }

  // With the GIL: the loop calls `drainer` when the eventfd is written.
  void watch(py::object drainer) {
    py::handle(loop_).attr("add_reader")(fd_, drainer);
    drainer_ = drainer.release().ptr();
  }

  // Called from any thread, without the GIL.
  void push(Item item) {
    bool first = false;
    {
      const std::lock_guard lock(mu_);
      first = queue_.empty();
      queue_.push_back(std::move(item));
    }
    if (!first) return;  // the eventfd is written already, its drain not yet begun
    const std::uint64_t one = 1;
    [[maybe_unused]] const auto written = ::write(fd_, &one, sizeof one);
  }

  // On the loop's thread, with the GIL.
  void drain() {
    std::uint64_t count = 0;
    [[maybe_unused]] const auto read = ::read(fd_, &count, sizeof count);  // before the queue is taken
    std::vector<Item> items;
    {
      const std::lock_guard lock(mu_);
      items.swap(queue_);
    }
    for (auto& item : items) complete(item);
  }

  // Completes one item's future (not if cancelled) and gives up its reference. With the GIL,
  // on the loop's thread.
  static void complete(Item& item) {
    static PyObject* const done = PyUnicode_InternFromString("done");
    static PyObject* const set_result = PyUnicode_InternFromString("set_result");
    static PyObject* const set_exception = PyUnicode_InternFromString("set_exception");
    const auto future = py::reinterpret_steal<py::object>(item.future);
    const auto call = [&future](PyObject* name, PyObject* arg) { return call_method(future, name, arg); };
    if (call(done, nullptr).ptr() == Py_True) return;  // cancelled
    try {
      if (item.error) {
        const py::object type = item.error->code == ErrorCode::invalid_argument
                                    ? py::reinterpret_borrow<py::object>(PyExc_ValueError)
                                    : py::reinterpret_borrow<py::object>(store_error);
        call(set_exception, type(item.error->message).ptr());
      } else {
        call(set_result, item.make().ptr());
      }
    } catch (py::error_already_set& e) {
      call(set_exception, e.value().ptr());
    }
  }

  // With the GIL.
  bool closed() const { return loop_ == nullptr || py::handle(loop_).attr("is_closed")().cast<bool>(); }
  // With the GIL, once its loop is closed: its Python objects let go (a closed loop watches
  // nothing, and answers still queued have nobody awaiting them).
  void let_go() {
    std::vector<Item> items;
    {
      const std::lock_guard lock(mu_);
      items.swap(queue_);
    }
    for (auto& item : items) Py_DECREF(item.future);
    Py_XDECREF(drainer_);
    Py_XDECREF(loop_);
    Py_XDECREF(future_type_);
    drainer_ = loop_ = future_type_ = nullptr;
  }

 private:
  int fd_;
  PyObject* loop_ = nullptr;
  PyObject* future_type_ = nullptr;  // asyncio.Future, when the loop makes its futures so
  PyObject* drainer_ = nullptr;
  std::mutex mu_;
  std::vector<Item> queue_;
};

// The completions of `loop` (one per loop, made on first use; those of closed
// loops are let go then). With the GIL.
std::shared_ptr<Completions> completions_of(const py::object& loop) {
  static auto* by_loop = new std::unordered_map<PyObject*, std::shared_ptr<Completions>>();
  if (const auto it = by_loop->find(loop.ptr()); it != by_loop->end()) return it->second;
  std::erase_if(*by_loop, [](const auto& entry) {
    if (!entry.second->closed()) return false;
    entry.second->let_go();
    return true;
  });
  auto made = std::make_shared<Completions>(loop);
  std::weak_ptr<Completions> weak = made;
  made->watch(py::cpp_function([weak] {
    if (auto c = weak.lock()) c->drain();
  }));
  by_loop->emplace(loop.ptr(), made);
  return made;
}

// An asyncio future completed from a store thread through its loop's Completions.
class Pending {
 public:
  Pending() {
    static auto* get_running_loop = new py::object(py::module_::import("asyncio").attr("get_running_loop"));
    const py::object loop = (*get_running_loop)();
    completions_ = completions_of(loop);
    future_ = completions_->new_future();
  }
  Pending(const Pending&) = delete;
  Pending& operator=(const Pending&) = delete;

  const py::object& future() const { return future_; }

  // Each called once, from any thread, without the GIL: `value` makes the result on the
  // loop's thread (it holds C++ values only).
  void resolve(std::function<py::object()> value) { hand_over(std::move(value), std::nullopt); }
  void fail(const Error& error) { hand_over(nullptr, error); }

  // The call that made the check returned (on the loop's thread, with the GIL): an answer
  // given during it (the memory store, a cached denial, a failure policy answering at once)
  // completes the future now, without waking the loop.
  void called() {
    in_call_.store(false);
    if (answered_during_call_) Completions::complete(*answered_during_call_);
  }

 private:
  void hand_over(std::function<py::object()> value, std::optional<Error> error) {
    // The reference moves on (release() touches no count: no GIL needed).
    Completions::Item item{future_.release().ptr(), std::move(value), std::move(error)};
    if (in_call_.load() && std::this_thread::get_id() == caller_) {
      answered_during_call_ = std::move(item);
      return;
    }
    completions_->push(std::move(item));
  }

  std::shared_ptr<Completions> completions_;
  py::object future_;
  const std::thread::id caller_ = std::this_thread::get_id();
  std::atomic<bool> in_call_{true};
  std::optional<Completions::Item> answered_during_call_;
};

// Calls `start` with a callback and waits, the GIL released, for its one answer.
template <class T, class Start>
T wait_for(Start&& start) {
  py::gil_scoped_release release;
  std::promise<T> done;
  auto answer = done.get_future();
  start([&done](T r) { done.set_value(std::move(r)); });
  return answer.get();
}

class Limiter;
std::mutex live_mu;
std::unordered_set<Limiter*> live;  // closed at interpreter exit

class Limiter {
 public:
  // `path`: a configuration file; `yaml`: its text instead; `store`: a store URL replacing the
  // file's. Invalid configuration: ValueError naming the file, field and reason.
  Limiter(std::optional<std::string> path, std::optional<std::string> yaml, std::optional<std::string> store,
          int threads, std::string source) {
    if (path.has_value() == yaml.has_value()) throw py::value_error("give either a configuration file or yaml");
    if (threads < 1 || threads > 64) throw py::value_error("threads must be from 1 to 64");
    try {
      config_ = path ? server::load_config(*path) : server::parse_config(*yaml, source);
    } catch (const server::ConfigError& e) {
      throw py::value_error(e.what());
    } catch (const std::exception& e) {
      throw py::value_error(fmt::format("configuration: {}", e.what()));
    }
    if (store) {
      config_.store.url = *store;
    } else if (!config_.store_configured) {
      config_.store.url = "memory://";
    }
    if (config_.limiter.decision_log.enabled) config_.limiter.decision_log.sink = limiter::stdout_decision_sink();
    loop_ = std::make_shared<EventLoop>(static_cast<std::size_t>(threads));
    config_.store.loop = loop_;
    auto opened = store::open_store_stack(config_.store, {.denied_cache_keys = config_.denied_cache_keys,
                                                          .leases = limiter::any_leased(config_.limiter.rules)});
    if (!opened) throw py::value_error(fmt::format("store: {}", opened.error().message));
    stack_ = std::move(*opened);
    try {
      limiter_ = std::make_shared<limiter::Limiter>(config_.limiter, *stack_.store);
      middleware_ = std::make_unique<http::Middleware>(*limiter_, config_.middleware);
    } catch (const std::exception& e) {
      throw py::value_error(e.what());
    }
    // The per-identity overrides, read again every `overrides.refresh`, as `serve` does.
    refresh_.emplace(*loop_, 0, [every = config_.overrides_refresh] { return every; },
                     [limiter = limiter_](Periodic::Done done) {
                       // A failure is logged and counted by the limiter; the table held stays.
                       limiter->refresh_overrides([done = std::move(done)](Result<bool>) { done(); });
                     });
    const std::lock_guard lock(live_mu);
    live.insert(this);
  }

  ~Limiter() { close(); }

  // Waits for nothing in flight: callbacks still held by the store answer with an error.
  void close() {
    {
      const std::lock_guard lock(live_mu);
      live.erase(this);
    }
    py::gil_scoped_release release;
    const std::lock_guard lock(mu_);
    if (closed_) return;
    closed_ = true;
    refresh_.reset();
    {
      const std::lock_guard shut(gate_->mu);
      gate_->closed = true;
    }
    if (stack_.leasing != nullptr) stack_.leasing->shutdown();
    stack_.store.reset();  // its callbacks refer to the limiter
    middleware_.reset();
    limiter_.reset();
    loop_.reset();
  }

  Decision check(const std::string& rule, const std::string& identity, std::int64_t cost, const std::string& tier,
                 const std::string& parent) {
    return evaluate_now(application(rule, identity, cost, tier, parent));
  }

  py::object check_async(const std::string& rule, const std::string& identity, std::int64_t cost,
                         const std::string& tier, const std::string& parent) {
    return evaluate_later(application(rule, identity, cost, tier, parent));
  }

  // One rule for each of many identities, each decided on its own (not all-or-nothing), in
  // one call: the checks go to the store together (coalesced into batch calls on Redis).
  std::vector<Decision> check_many(const std::string& rule, const std::vector<std::string>& identities,
                                   std::int64_t cost, const std::string& tier) {
    auto many = start_many(rule, identities, cost, tier, nullptr);
    {
      py::gil_scoped_release release;
      many->done.get_future().wait();
    }
    if (many->error) raise(*many->error);
    return std::move(many->decisions);
  }

  py::object check_many_async(const std::string& rule, const std::vector<std::string>& identities, std::int64_t cost,
                              const std::string& tier) {
    auto pending = std::make_shared<Pending>();
    py::object future = pending->future();
    start_many(rule, identities, cost, tier, pending);
    pending->called();
    return future;
  }

  // One rule (matched or not) for a request: its identity resolved from the request as the
  // rule says (header, API key, client IP behind the trusted proxies).
  Decision check_rule_request(const std::string& rule, std::string method, std::string path,
                              const py::iterable& headers, std::string client) {
    return evaluate_now(resolved(rule, request_of(std::move(method), std::move(path), headers, std::move(client))));
  }

  py::object check_rule_request_async(const std::string& rule, std::string method, std::string path,
                                      const py::iterable& headers, std::string client) {
    return evaluate_later(resolved(rule, request_of(std::move(method), std::move(path), headers, std::move(client))));
  }

  py::object check_rule_asgi_async(const std::string& rule, const py::dict& scope) {
    return evaluate_later(resolved(rule, request_of_scope(scope)));
  }

  RequestDecision check_request(std::string method, std::string path, const py::iterable& headers,
                                std::string client) {
    open();
    const http::Request request = request_of(std::move(method), std::move(path), headers, std::move(client));
    http::MiddlewareResult result;
    {
      py::gil_scoped_release release;
      result = middleware_->handle_sync(request);
    }
    return request_decision_of(std::move(result), heartbeats());
  }

  py::object check_request_async(std::string method, std::string path, const py::iterable& headers,
                                 std::string client) {
    return handle_later(request_of(std::move(method), std::move(path), headers, std::move(client)));
  }

  py::object check_asgi_async(const py::dict& scope) { return handle_later(request_of_scope(scope)); }

  // check_asgi_async, but an admission at once that holds nothing (the common answer) is
  // answered by the list of headers to add alone, without a RequestDecision object.
  py::object check_asgi_async_lean(const py::dict& scope) {
    return handle_later(request_of_scope(scope), Answer::lean);
  }

  // The request ended: the slots of its reservation are given back (its estimate stays).
  void release(const RequestDecision& decision) {
    open();
    if (!decision.reservation) return;
    py::gil_scoped_release release;
    if (decision.heartbeat) decision.heartbeat->stop();
    middleware_->release(*decision.reservation);
  }

  // The response's header of a `usage` rule (its value as sent, or None when absent): the
  // reservation is settled to the cost it carries, or keeps its estimate (logged) when it
  // carries none.
  void settle_from_header(const RequestDecision& decision, std::optional<std::string> value) {
    open();
    if (!decision.reservation) return;
    py::gil_scoped_release release;
    if (decision.heartbeat) decision.heartbeat->stop();
    const auto& usage = *decision.reservation;
    if (!usage.costed()) return middleware_->release(usage);
    const auto& header = usage.application.rule->usage.response_header;
    middleware_->settle(usage, http::Middleware::header_cost(value), fmt::format("the response header {}", header));
  }

  // The request's response reported its cost (a `usage` rule): the reservation is settled to it.
  void settle(const RequestDecision& decision, std::int64_t cost) {
    open();
    if (!decision.reservation) return;
    if (cost < 0) throw py::value_error("cost must be >= 0");
    py::gil_scoped_release release;
    if (decision.heartbeat) decision.heartbeat->stop();
    middleware_->settle(*decision.reservation, cost, "the application");
  }

  std::vector<std::string> rules() const {
    std::vector<std::string> out;
    for (const auto& r : config_.limiter.rules) out.push_back(r.name);
    return out;
  }

  bool ready() const {
    const std::lock_guard lock(mu_);
    return !closed_ && stack_.store->health().ready;
  }

  std::string store_kind() const {
    const std::lock_guard lock(mu_);
    return closed_ ? std::string("closed") : std::string(stack_.store->kind());
  }

  std::string metrics() const {
    open();
    return limiter_->metrics_text();
  }

  void refresh_overrides() {
    open();
    auto r = wait_for<Result<bool>>([&](auto done) { limiter_->refresh_overrides(std::move(done)); });
    if (!r) raise(r.error());
  }

  // Per-identity overrides (docs/configuration.md): in effect here at once, on every other
  // instance sharing the store within its refresh. Answers whether one was replaced.
  bool set_override(const std::string& rule, const std::string& identity, double factor, const std::string& note) {
    open();
    limiter::Override o{rule, identity, factor, note, "python", SystemClock::instance().now()};
    auto r = wait_for<Result<store::TableWrite>>(
        [&](auto done) { limiter_->set_override(std::move(o), std::move(done)); });
    if (!r) raise(r.error());
    spdlog::info("python: set the override of {} under rule '{}' to x{}", identity, rule, factor);
    return r->existed;
  }

  bool remove_override(const std::string& rule, const std::string& identity) {
    open();
    auto r = wait_for<Result<bool>>([&](auto done) { limiter_->remove_override(rule, identity, std::move(done)); });
    if (!r) raise(r.error());
    if (*r) spdlog::info("python: removed the override of {} under rule '{}'", identity, rule);
    return *r;
  }

  // The factor in effect here for an identity under a rule (1: none).
  double override_factor(const std::string& rule, const std::string& identity) {
    open();
    const auto table = limiter_->overrides().table();
    const limiter::Override* o = table ? table->find(rule, identity) : nullptr;
    return o != nullptr ? o->factor : 1.0;
  }

 private:
  void open() const {
    if (closed_) throw py::value_error("the limiter is closed");
  }

  // How handle_later answers: a RequestDecision always, or (lean) the headers' list alone for
  // an admission at once that holds nothing.
  enum class Answer { decision, lean };

  // The middleware's answer to `request`, as a future of a RequestDecision (or, lean, of the
  // ASGI headers of a plain admission).
  py::object handle_later(const http::Request& request, Answer answer = Answer::decision) {
    open();
    auto pending = std::make_shared<Pending>();
    py::object future = pending->future();
    {
      py::gil_scoped_release release;
      middleware_->handle(request, [pending, heartbeats = heartbeats(), answer](http::MiddlewareResult r) mutable {
        if (answer == Answer::lean && r.admitted && r.delay == 0 && !r.usage) {
          pending->resolve([headers = std::move(r.headers)] {
            auto list = py::reinterpret_steal<py::object>(asgi_header_list(headers));
            if (!list) throw py::error_already_set();
            return list;
          });
        } else {
          pending->resolve(
              [d = request_decision_of(std::move(r), heartbeats)]() mutable { return py::cast(std::move(d)); });
        }
        pending.reset();
      });
    }
    pending->called();
    return future;
  }

  // The checks of check_many in flight: each answer in its place; the last one completes.
  struct Many {
    std::vector<Decision> decisions;
    std::optional<Error> error;
    std::atomic<std::size_t> left{0};
    std::mutex mu;  // guards error
    std::promise<void> done;
    std::shared_ptr<Pending> pending;  // the asyncio form's future
  };

  std::shared_ptr<Many> start_many(const std::string& rule, const std::vector<std::string>& identities,
                                   std::int64_t cost, const std::string& tier, std::shared_ptr<Pending> pending) {
    if (identities.size() > 100'000) throw py::value_error("at most 100000 identities in one call");
    std::vector<limiter::AppliedRule> apps;
    apps.reserve(identities.size());
    for (const auto& identity : identities) apps.push_back(application(rule, identity, cost, tier, {}));
    auto many = std::make_shared<Many>();
    many->decisions.resize(apps.size());
    many->left = apps.size();
    many->pending = std::move(pending);
    const http::HeaderOptions headers = config_.middleware.headers;
    auto finish = [headers](const std::shared_ptr<Many>& m) {
      if (m->pending) {
        if (m->error) {
          m->pending->fail(*m->error);
        } else {
          m->pending->resolve([d = std::move(m->decisions)]() mutable { return py::cast(std::move(d)); });
        }
        m->pending.reset();
      }
      m->done.set_value();
    };
    if (apps.empty()) {
      finish(many);
      return many;
    }
    auto keep = limiter_;
    py::gil_scoped_release release;
    for (std::size_t i = 0; i < apps.size(); ++i) {
      keep->evaluate(alone(std::move(apps[i])), [many, i, headers, finish](Result<limiter::Evaluation>&& ev) {
        if (ev) {
          many->decisions[i] = decision_of(std::move(*ev), headers);
        } else {
          const std::lock_guard lock(many->mu);
          if (!many->error) many->error = ev.error();
        }
        if (many->left.fetch_sub(1) == 1) finish(many);
      });
    }
    return many;
  }

  Decision evaluate_now(limiter::AppliedRule app) {
    Result<limiter::Evaluation> ev;
    {
      py::gil_scoped_release release;
      ev = limiter_->evaluate_sync(alone(std::move(app)));
    }
    if (!ev) raise(ev.error());
    return decision_of(std::move(*ev), config_.middleware.headers);
  }

  py::object evaluate_later(limiter::AppliedRule app) {
    auto pending = std::make_shared<Pending>();
    py::object future = pending->future();
    const http::HeaderOptions headers = config_.middleware.headers;
    auto keep = limiter_;
    {
      py::gil_scoped_release release;
      keep->evaluate(alone(std::move(app)), [pending, headers](Result<limiter::Evaluation>&& ev) mutable {
        if (ev) {
          pending->resolve([d = decision_of(std::move(*ev), headers)]() mutable { return py::cast(std::move(d)); });
        } else {
          pending->fail(ev.error());
        }
        pending.reset();
      });
    }
    pending->called();
    return future;
  }

  limiter::AppliedRule resolved(const std::string& rule, const http::Request& request) const {
    open();
    const limiter::Rule* r = limiter_->find_rule(rule);
    if (r == nullptr) throw py::value_error(fmt::format("unknown rule '{}'", rule.substr(0, 64)));
    auto app = middleware_->resolve(*r, request);
    if (!app) raise(app.error());
    return std::move(*app);
  }

  limiter::AppliedRule application(const std::string& rule, const std::string& identity, std::int64_t cost,
                                   const std::string& tier, const std::string& parent) const {
    open();
    auto app = limiter_->application(rule, identity, cost, tier, parent);
    if (!app) raise(app.error());
    return std::move(*app);
  }

  Heartbeats heartbeats() const { return {loop_.get(), middleware_.get(), gate_}; }

  server::Config config_;
  std::shared_ptr<Gate> gate_ = std::make_shared<Gate>();
  std::optional<Periodic> refresh_;
  std::shared_ptr<EventLoop> loop_;
  store::StoreStack stack_;
  std::shared_ptr<limiter::Limiter> limiter_;
  std::unique_ptr<http::Middleware> middleware_;
  mutable std::mutex mu_;
  bool closed_ = false;
};

// Attributes read on every decision or request are served by CPython's own getset descriptors:
// pybind11's generic dispatch (argument vectors, a type lookup) costs several times the read.
// The descriptor is the type's, so CPython has checked that `self` is one of its instances; the
// objects are made from C++ values only (no constructor is exposed), so each holds one.
template <class T>
const T& value_of(PyObject* self) {
  return *static_cast<const T*>(reinterpret_cast<py::detail::instance*>(self)->get_value_and_holder().value_ptr());
}
template <class T, bool T::*M>
PyObject* get_bool(PyObject* self, void*) {
  return PyBool_FromLong(value_of<T>(self).*M ? 1 : 0);
}
template <class T, std::int64_t T::*M>
PyObject* get_int(PyObject* self, void*) {
  return PyLong_FromLongLong(value_of<T>(self).*M);
}
template <class T, int T::*M>
PyObject* get_small_int(PyObject* self, void*) {
  return PyLong_FromLong(value_of<T>(self).*M);
}
template <class T, double T::*M>
PyObject* get_float(PyObject* self, void*) {
  return PyFloat_FromDouble(value_of<T>(self).*M);
}

// Installs `defs` (ended by an entry without a name; static: CPython keeps pointers to them).
void add_getters(const py::handle& type, PyGetSetDef* defs) {
  for (PyGetSetDef* def = defs; def->name != nullptr; ++def) {
    const auto descriptor =
        py::reinterpret_steal<py::object>(PyDescr_NewGetSet(reinterpret_cast<PyTypeObject*>(type.ptr()), def));
    if (!descriptor) throw py::error_already_set();
    type.attr(def->name) = descriptor;
  }
}

// A decision's headers as ASGI sends them: (bytes, bytes) pairs, names in lower case.
PyObject* asgi_headers(PyObject* self, void*) { return asgi_header_list(value_of<RequestDecision>(self).headers); }

PyGetSetDef decision_getters[] = {
    {"allowed", get_bool<Decision, &Decision::allowed>, nullptr, nullptr, nullptr},
    {"limit", get_int<Decision, &Decision::limit>, nullptr, nullptr, nullptr},
    {"remaining", get_int<Decision, &Decision::remaining>, nullptr, nullptr, nullptr},
    {"retry_after", get_float<Decision, &Decision::retry_after>, nullptr,
     "Seconds until the request could be admitted; 0 when allowed.", nullptr},
    {"reset_after", get_float<Decision, &Decision::reset_after>, nullptr, "Seconds until the limit is full again.",
     nullptr},
    {"by_failure_policy", get_bool<Decision, &Decision::by_failure_policy>, nullptr,
     "The store failed and the rule's failure policy answered.", nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr},
};

PyGetSetDef request_decision_getters[] = {
    {"admitted", get_bool<RequestDecision, &RequestDecision::admitted>, nullptr, nullptr, nullptr},
    {"status", get_small_int<RequestDecision, &RequestDecision::status>, nullptr, nullptr, nullptr},
    {"delay", get_float<RequestDecision, &RequestDecision::delay>, nullptr,
     "Admitted, to be served after this many seconds (on_limit: delay); 0 otherwise.", nullptr},
    {"holds_reservation",
     [](PyObject* self, void*) { return PyBool_FromLong(value_of<RequestDecision>(self).reservation != nullptr); },
     nullptr, "Admitted with a reservation: release (or settle) it when the request ends.", nullptr},
    {"asgi_headers", asgi_headers, nullptr, "The headers as ASGI sends them: (bytes, bytes), names in lower case.",
     nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr},
};

}  // namespace
}  // namespace ratekeeper::python

PYBIND11_MODULE(_native, m) {
  using namespace ratekeeper::python;
  m.doc() = "ratekeeper's limiter, in process (see ratekeeper/__init__.py)";
  store_error = PyErr_NewExceptionWithDoc("ratekeeper._native.StoreError",
                                          "The store failed and no failure policy answered.", PyExc_RuntimeError,
                                          nullptr);
  m.attr("StoreError") = py::handle(store_error);

  py::class_<Decision> decision(m, "Decision");
  add_getters(decision, decision_getters);
  decision.def_readonly("rule", &Decision::rule)
      .def_property_readonly("identity", &Decision::identity)
      .def_property_readonly("headers", &Decision::headers)
      .def_property_readonly("body", [](const Decision& d) { return py::bytes(d.body()); })
      .def("__bool__", [](const Decision& d) { return d.allowed; })
      .def("__repr__", [](const Decision& d) {
        return fmt::format("Decision(allowed={}, limit={}, remaining={}, retry_after={})", d.allowed ? "True" : "False",
                           d.limit, d.remaining, d.retry_after);
      });
  // `if decision:` is read through the type's slot directly (the __bool__ above stays for
  // introspection and answers the same).
  reinterpret_cast<PyTypeObject*>(decision.ptr())->tp_as_number->nb_bool = [](PyObject* self) {
    return value_of<Decision>(self).allowed ? 1 : 0;
  };
  PyType_Modified(reinterpret_cast<PyTypeObject*>(decision.ptr()));

  py::class_<RequestDecision> request_decision(m, "RequestDecision");
  add_getters(request_decision, request_decision_getters);
  request_decision.def_property_readonly("body", [](const RequestDecision& d) { return py::bytes(d.body); })
      .def_readonly("content_type", &RequestDecision::content_type)
      .def_readonly("headers", &RequestDecision::headers)
      .def_readonly("rule", &RequestDecision::rule)
      .def_property_readonly("usage_header",
                             [](const RequestDecision& d) {
                               // The response header whose integer settles the reservation; "" for none.
                               if (!d.reservation || !d.reservation->costed()) return std::string();
                               return d.reservation->application.rule->usage.response_header;
                             })
      .def("__repr__", [](const RequestDecision& d) {
        return fmt::format("RequestDecision(admitted={}, status={}, rule='{}')", d.admitted ? "True" : "False",
                           d.status, d.rule);
      });

  py::class_<Limiter>(m, "Limiter")
      .def(py::init<std::optional<std::string>, std::optional<std::string>, std::optional<std::string>, int,
                    std::string>(),
           py::arg("config") = py::none(), py::kw_only(), py::arg("yaml") = py::none(),
           py::arg("store") = py::none(), py::arg("threads") = 1, py::arg("source") = "<yaml>")
      .def("check", &Limiter::check, py::arg("rule"), py::arg("identity"), py::arg("cost") = 1,
           py::kw_only(), py::arg("tier") = "", py::arg("parent") = "")
      .def("check_async", &Limiter::check_async, py::arg("rule"), py::arg("identity"), py::arg("cost") = 1,
           py::kw_only(), py::arg("tier") = "", py::arg("parent") = "")
      .def("check_many", &Limiter::check_many, py::arg("rule"), py::arg("identities"), py::arg("cost") = 1,
           py::kw_only(), py::arg("tier") = "")
      .def("check_many_async", &Limiter::check_many_async, py::arg("rule"), py::arg("identities"),
           py::arg("cost") = 1, py::kw_only(), py::arg("tier") = "")
      .def("check_rule_request", &Limiter::check_rule_request, py::arg("rule"), py::arg("method"), py::arg("path"),
           py::arg("headers"), py::arg("client"))
      .def("check_rule_request_async", &Limiter::check_rule_request_async, py::arg("rule"), py::arg("method"),
           py::arg("path"), py::arg("headers"), py::arg("client"))
      .def("check_request", &Limiter::check_request, py::arg("method"), py::arg("path"), py::arg("headers"),
           py::arg("client"))
      .def("check_request_async", &Limiter::check_request_async, py::arg("method"), py::arg("path"),
           py::arg("headers"), py::arg("client"))
      .def("check_asgi_async", &Limiter::check_asgi_async, py::arg("scope"))
      .def("check_asgi_async_lean", &Limiter::check_asgi_async_lean, py::arg("scope"))
      .def("check_rule_asgi_async", &Limiter::check_rule_asgi_async, py::arg("rule"), py::arg("scope"))
      .def("release", &Limiter::release, py::arg("decision"))
      .def("settle", &Limiter::settle, py::arg("decision"), py::arg("cost"))
      .def("settle_from_header", &Limiter::settle_from_header, py::arg("decision"), py::arg("value"))
      .def("close", &Limiter::close)
      .def("refresh_overrides", &Limiter::refresh_overrides)
      .def("set_override", &Limiter::set_override, py::arg("rule"), py::arg("identity"), py::arg("factor"),
           py::arg("note") = "")
      .def("remove_override", &Limiter::remove_override, py::arg("rule"), py::arg("identity"))
      .def("override_factor", &Limiter::override_factor, py::arg("rule"), py::arg("identity"))
      .def_property_readonly("rules", &Limiter::rules)
      .def_property_readonly("ready", &Limiter::ready)
      .def_property_readonly("store_kind", &Limiter::store_kind)
      .def("metrics", &Limiter::metrics);

  // Store threads must not call into an interpreter that is going away: every limiter still
  // open is closed first.
  py::module_::import("atexit").attr("register")(py::cpp_function([] {
    std::vector<Limiter*> open;
    {
      const std::lock_guard lock(live_mu);
      open.assign(live.begin(), live.end());
    }
    for (Limiter* l : open) l->close();
  }));
}
