#pragma once
// A visitor from lambdas, for std::visit: Overloaded{[](A&) {...}, [](B&) {...}}.

namespace ratekeeper {

template <class... F>
struct Overloaded : F... {
  using F::operator()...;
};
template <class... F>
Overloaded(F...) -> Overloaded<F...>;

}  // namespace ratekeeper
