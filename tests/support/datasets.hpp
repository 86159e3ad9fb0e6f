#pragma once
// Datasets in tests: a CSV text parsed for a model.
#include <pkscan/pkscan.hpp>
#include <string>

namespace pkscan::test {

/// `csv` parsed as a dataset of model `m` (file name `file` in messages).
inline Dataset parse_for(const ModelInfo& m, const std::string& csv,
                         const std::string& file = "test.csv") {
  return parse_dataset(csv, file, m);
}

}  // namespace pkscan::test
