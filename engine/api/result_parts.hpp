#pragma once
// The members of a SimulationResult, for code that moves a result whole (a run split over
// processes sends it: population/exchange.cpp). Defined beside the results' only writer
// (ResultBuilder, api/engine.cpp).
#include <cstdint>
#include <pkscan/result.hpp>
#include <vector>

namespace pkscan::detail {

struct ResultParts {
  std::int64_t* subjects;
  int* compartments;
  Precision* precision;
  std::vector<double>* output_times;
  std::vector<std::int64_t>* output_steps;
  std::vector<double>* volumes;
  Array<double>* amounts_f64;
  Array<float>* amounts_f32;
  Array<double>* conc_f64;
  Array<float>* conc_f32;
  std::vector<SubjectStatus>* status;
  RunSummary* summary;
};

ResultParts result_parts(SimulationResult& r) noexcept;

}  // namespace pkscan::detail
