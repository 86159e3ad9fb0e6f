#pragma once
// The readers behind read_result (read.hpp; private to pkscan::output): read_csv.cpp reads CSV
// results and picks what to read, read_h5.cpp reads HDF5 results.
#include <pkscan/output/read.hpp>
#include <string>
#include <vector>

namespace pkscan::output::detail {

// Picks the compartment to read: the asked one, else central, else the first.
// @throws InvalidArgument when the result has none or `asked` is not one of them
std::string choose_compartment(const std::vector<std::string>& available, const std::string& asked);

// The label of a summary group: "ka = 0.5", "replicate 2, ka = 1" (one value per column).
// "arm = high, replicate 2, ka = 1": an arm's number (1-based) as its name in arm_names.
std::string group_label(const std::vector<std::string>& columns, const std::vector<double>& values,
                        const std::vector<std::string>& arm_names = {});

// An HDF5 result: its summary when it has one (of a summary by group, the first max_groups
// groups), else the first max_subjects subjects.
Curves read_h5(const std::string& path, const std::string& asked, int max_subjects, int max_groups);

}  // namespace pkscan::output::detail
