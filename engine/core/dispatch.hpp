#pragma once
// Compile-time dispatch on a model's compartment count: every layer that instantiates its code
// per size N (the grid backends, the event solver, the device paths) calls one of these.
#include <type_traits>
#include <utility>

namespace pkscan::detail {

// Calls f(std::integral_constant<int, N>{}) for compartment counts 2..4, the range the batched
// and power paths are compiled for (their unsupported_reason rejects other counts first).
template <class F>
void with_compartments_2_to_4(int n, F&& f) {
  switch (n) {
    case 2:
      f(std::integral_constant<int, 2>{});
      return;
    case 3:
      f(std::integral_constant<int, 3>{});
      return;
    default:
      f(std::integral_constant<int, 4>{});
      return;
  }
}

// Calls f(std::integral_constant<int, N>{}) for N = n in 1..6, the model sizes the reference scan
// is compiled for; false (f not called) for any other n.
template <class F, int... I>
bool with_compartments_in(int n, F& f, std::integer_sequence<int, I...>) {
  return ((n == I + 1 ? (f(std::integral_constant<int, I + 1>{}), true) : false) || ...);
}
template <class F>
bool with_compartments_1_to_6(int n, F&& f) {
  return with_compartments_in(n, f, std::make_integer_sequence<int, 6>{});
}

}  // namespace pkscan::detail
