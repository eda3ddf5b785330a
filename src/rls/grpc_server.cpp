#include "ratekeeper/rls/grpc_server.hpp"

#include <fmt/format.h>
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <limits>
#include <thread>
#include <vector>

#include "envoy/service/ratelimit/v3/rls.grpc.pb.h"
#include "ratekeeper/core/contained.hpp"
#include "ratekeeper/core/event_loop.hpp"
#include "ratekeeper/rls/service.hpp"

namespace ratekeeper::rls {
namespace {

// Calls requested ahead on each completion queue: a burst of new calls is matched without
// waiting for the queue's thread to request the next one.
constexpr int kRequestsAhead = 8;

}  // namespace

class GrpcServer::Impl {
 public:
  Impl(ServiceSource service, GrpcServerOptions options)
      : service_(std::move(service)), options_(std::move(options)) {}

  Result<void> start();
  void stop();
  std::string address() const;
  Stats stats() const;

 private:

  // One ShouldRateLimit call: requested, answered by the Service (on whichever thread it
  // answers), then released when its completion comes back. Shared between the queue (its
  // reference `self_`, dropped at the last completion) and the Service's callback: whichever
  // lets go last destroys it, so that everything the answering thread did with the call (the
  // answer, Finish) happens before its destruction as the reference count orders it.
  class Call : public std::enable_shared_from_this<Call> {
   public:
    Call(Impl& impl, grpc::ServerCompletionQueue* cq) : impl_(impl), cq_(cq), writer_(&context_) {
      impl_.active_.fetch_add(1, std::memory_order_relaxed);
    }
    ~Call() { impl_.active_.fetch_sub(1, std::memory_order_acq_rel); }
    Call(const Call&) = delete;
    Call& operator=(const Call&) = delete;

    // A new call requested on `cq`.
    static void request(Impl& impl, grpc::ServerCompletionQueue* cq) {
      auto call = std::make_shared<Call>(impl, cq);
      Call& c = *call;
      c.self_ = std::move(call);
      impl.async_.RequestShouldRateLimit(&c.context_, &c.request_, &c.writer_, cq, cq, &c);
    }

    // The completion queue's event for this call. The last use of `this` may be here.
    void proceed(bool ok) {
      if (state_.load(std::memory_order_acquire) == State::answered) {
        if (!ok) impl_.cancelled_.fetch_add(1, std::memory_order_relaxed);
        impl_.in_flight_.fetch_sub(1, std::memory_order_acq_rel);
        const auto last = std::move(self_);
        return;
      }
      if (!ok) {  // the server is shutting down: no call came
        const auto last = std::move(self_);
        return;
      }
      if (!impl_.stopping_.load(std::memory_order_acquire)) request(impl_, cq_);
      impl_.calls_.fetch_add(1, std::memory_order_relaxed);
      impl_.in_flight_.fetch_add(1, std::memory_order_acq_rel);
      if (impl_.options_.loop) {
        const std::size_t index = impl_.next_loop_.fetch_add(1, std::memory_order_relaxed);
        impl_.options_.loop->post(index % impl_.options_.loop->size(),
                                  [call = shared_from_this()] { call->decide(); });
      } else {
        decide();
      }
    }

   private:
    enum class State : std::uint8_t { requested, answered };

    // The answer may come inline or on a store thread. Runs on an event loop: an exception
    // is contained and the call answered INTERNAL (unless an answer went out first).
    void decide() {
      const bool decided = contain("rate limit service call", [this] {
        // The service of the moment, held until the call is answered.
        std::shared_ptr<Service> service = impl_.service_();
        Service& decider = *service;
        decider.should_rate_limit(request_, [call = shared_from_this(),
                                             service = std::move(service)](Answer answer) {
          call->finish(std::move(answer));
        });
      });
      if (!decided) finish(Answer{Status::internal, "internal error", {}});
    }

    // At most once per call: a second answer is dropped.
    void finish(Answer answer) {
      if (finishing_.exchange(true, std::memory_order_acq_rel)) return;
      const bool ok = answer.status == Status::ok;
      if (ok) response_ = std::move(answer.response);
      state_.store(State::answered, std::memory_order_release);
      if (ok) {
        writer_.Finish(response_, grpc::Status::OK, this);
      } else {
        writer_.FinishWithError(
            grpc::Status(static_cast<grpc::StatusCode>(answer.status), answer.message), this);
      }
    }

    Impl& impl_;
    grpc::ServerCompletionQueue* cq_;
    grpc::ServerContext context_;
    pb::RateLimitRequest request_;
    pb::RateLimitResponse response_;
    grpc::ServerAsyncResponseWriter<pb::RateLimitResponse> writer_;
    std::atomic<State> state_{State::requested};
    std::atomic<bool> finishing_{false};
    std::shared_ptr<Call> self_;  // the queue's reference
  };

  ServiceSource service_;
  GrpcServerOptions options_;
  pb::RateLimitService::AsyncService async_;
  std::unique_ptr<grpc::Server> server_;
  std::vector<std::unique_ptr<grpc::ServerCompletionQueue>> queues_;
  std::vector<std::thread> threads_;
  int port_ = 0;
  bool started_ = false;
  bool stopped_ = false;
  std::atomic<bool> stopping_{false};
  std::atomic<std::int64_t> active_{0};     // Call objects alive
  std::atomic<std::int64_t> in_flight_{0};  // calls received and not yet answered and sent
  std::atomic<std::uint64_t> calls_{0};
  std::atomic<std::uint64_t> cancelled_{0};
  std::atomic<std::size_t> next_loop_{0};
};

Result<void> GrpcServer::Impl::start() {
  if (started_) return make_error(ErrorCode::invalid_argument, "the gRPC server is already started");
  const std::string host =
      options_.host.find(':') != std::string::npos ? fmt::format("[{}]", options_.host) : options_.host;
  const std::string address = fmt::format("{}:{}", host, options_.port);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(address, grpc::InsecureServerCredentials(), &port_);
  builder.RegisterService(&async_);
  builder.SetMaxReceiveMessageSize(static_cast<int>(options_.max_receive_bytes));
  builder.AddChannelArgument(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS,
                             static_cast<int>(std::clamp<Micros>(options_.handshake_timeout / kMicrosPerMilli, 1,
                                                                 std::numeric_limits<int>::max())));
  const int threads = std::max(1, options_.threads);
  for (int i = 0; i < threads; ++i) queues_.push_back(builder.AddCompletionQueue());
  server_ = builder.BuildAndStart();
  if (!server_ || port_ == 0) {
    for (auto& q : queues_) {
      q->Shutdown();
      void* tag = nullptr;
      bool ok = false;
      while (q->Next(&tag, &ok)) {
      }
    }
    queues_.clear();
    server_.reset();
    return make_error(ErrorCode::unavailable, fmt::format("gRPC: cannot listen on {}", address));
  }
  started_ = true;
  for (auto& q : queues_) {
    for (int i = 0; i < kRequestsAhead; ++i) Call::request(*this, q.get());
    threads_.emplace_back([queue = q.get()] {
      void* tag = nullptr;
      bool ok = false;
      while (queue->Next(&tag, &ok)) static_cast<Call*>(tag)->proceed(ok);
    });
  }
  return {};
}

void GrpcServer::Impl::stop() {
  if (!started_ || stopped_) return;
  stopped_ = true;
  stopping_.store(true, std::memory_order_release);
  // The calls in flight are answered first (within the store's deadlines), for at most the
  // drain timeout; then the server shuts down at once: a graceful gRPC shutdown would also
  // wait for idle client connections to go away.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(options_.drain_timeout);
  while (in_flight_.load(std::memory_order_acquire) > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  server_->Shutdown(std::chrono::system_clock::now());
  // A call still with the Service completes (cancelled) once it answers; its completion
  // comes back on the queues, which run until every call is gone.
  while (active_.load(std::memory_order_acquire) > 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  for (auto& q : queues_) q->Shutdown();
  for (auto& t : threads_) t.join();
  threads_.clear();
}

GrpcServer::GrpcServer(Service& service, GrpcServerOptions options)
    : GrpcServer(
          [&service] {
            // Not owned: the caller keeps it alive.
            return std::shared_ptr<Service>(std::shared_ptr<void>(), &service);
          },
          std::move(options)) {}

GrpcServer::GrpcServer(ServiceSource service, GrpcServerOptions options)
    : impl_(std::make_unique<Impl>(std::move(service), std::move(options))) {}

GrpcServer::~GrpcServer() { stop(); }

Result<void> GrpcServer::start() { return impl_->start(); }

void GrpcServer::stop() { impl_->stop(); }

std::string GrpcServer::Impl::address() const {
  const auto& host = options_.host;
  return host.find(':') != std::string::npos ? fmt::format("[{}]:{}", host, port_)
                                              : fmt::format("{}:{}", host, port_);
}

GrpcServer::Stats GrpcServer::Impl::stats() const {
  return Stats{calls_.load(std::memory_order_relaxed), cancelled_.load(std::memory_order_relaxed)};
}

std::string GrpcServer::address() const { return impl_->address(); }

GrpcServer::Stats GrpcServer::stats() const { return impl_->stats(); }

}  // namespace ratekeeper::rls
