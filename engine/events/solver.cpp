// make_event_solver: the solver for the model's compartment count (its definition is in
// events/solver_impl.hpp, compiled once per count in files that CMake generates).
#include "events/solver.hpp"

#include "core/dispatch.hpp"

namespace pkscan::detail {

std::unique_ptr<EventSolver> make_event_solver(const DatasetSetup& setup, std::size_t max_rows,
                                               std::size_t max_events) {
  std::unique_ptr<EventSolver> solver;
  with_compartments_1_to_6(setup.n, [&](auto n) {
    solver = make_event_solver_of<decltype(n)::value>(setup, max_rows, max_events);
  });
  return solver;
}

}  // namespace pkscan::detail
