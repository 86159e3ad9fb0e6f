#pragma once
// Datasets in tests: the parameter names a reader accepts for a model, and a CSV text parsed
// for it.
#include <pkscan/pkscan.hpp>
#include <string>
#include <utility>
#include <vector>

namespace pkscan::test {

/// (name or alias, canonical name) of every parameter of `m`: what parse_dataset takes.
inline std::vector<std::pair<std::string, std::string>> parameter_names(const ModelInfo& m) {
  std::vector<std::pair<std::string, std::string>> v;
  for (const ParameterInfo& p : m.parameters) {
    v.emplace_back(p.name, p.name);
    if (!p.alias.empty()) v.emplace_back(p.alias, p.name);
  }
  return v;
}

/// `csv` parsed as a dataset of model `m` (file name `file` in messages).
inline Dataset parse_for(const ModelInfo& m, const std::string& csv,
                         const std::string& file = "test.csv") {
  return parse_dataset(csv, file, parameter_names(m), static_cast<int>(m.compartments.size()));
}

}  // namespace pkscan::test
