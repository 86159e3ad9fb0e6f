// Checks made before a run (output.hpp): a result unit can be committed at its path, it replaces
// no file the run reads, and a dataset run's covariate columns cannot be taken for result
// columns.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <climits>
#include <filesystem>
#include <pkscan/error.hpp>
#include <pkscan/output/output.hpp>
#include <pkscan/output/temp_files.hpp>
#include <string>
#include <system_error>
#include <vector>

namespace pkscan::output {

namespace {

// "DIR/" (or "" for a bare name) and "NAME".
std::pair<std::string, std::string> split_path(const std::string& path) {
  const std::size_t slash = path.rfind('/');
  if (slash == std::string::npos) return {std::string(), path};
  return {path.substr(0, slash + 1), path.substr(slash + 1)};
}

// The file system's limit on one name in `dir` (NAME_MAX where it cannot be asked).
std::size_t name_limit(const std::string& dir) {
  const long n = ::pathconf(dir.empty() ? "." : dir.c_str(), _PC_NAME_MAX);
  return n > 0 ? static_cast<std::size_t>(n) : static_cast<std::size_t>(NAME_MAX);
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// How a message names file `f` of the unit whose main file is `main`.
std::string unit_file(const std::string& f, const std::string& main) {
  return f == main ? "\"" + f + "\""
                   : "\"" + f + "\" (a file that the result \"" + main + "\" replaces or removes)";
}

std::vector<std::string> unit_files(const std::string& main,
                                    const std::vector<std::string>& companions) {
  std::vector<std::string> files{main};
  files.insert(files.end(), companions.begin(), companions.end());
  return files;
}

}  // namespace

void check_output_unit(const std::string& main, const std::vector<std::string>& companions) {
  const std::size_t limit = name_limit(split_path(main).first);
  for (const std::string& f : unit_files(main, companions)) {
    const std::size_t bytes = split_path(f).second.size();
    const std::size_t temp = longest_temp_name(f);
    if (bytes > limit || temp > limit)
      throw InvalidArgument(unit_file(f, main) + " needs a name of " +
                            std::to_string(std::max(bytes, temp)) + " bytes" +
                            (bytes > limit ? "" : " (for its temporary file)") +
                            ", but the file system allows at most " + std::to_string(limit) +
                            " bytes per name; give a shorter output path");
    struct stat st {};
    if (::stat(f.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
      throw InvalidArgument(unit_file(f, main) +
                            (S_ISDIR(st.st_mode) ? " is a directory" : " is not a regular file") +
                            "; give another output path");
  }
  const AtomicFile probe(main);  // the directory exists and is writable; removed at once
}

void check_output_not_input(const std::string& main, const std::vector<std::string>& companions,
                            const std::vector<InputFile>& inputs) {
  for (const std::string& f : unit_files(main, companions))
    for (const InputFile& in : inputs) {
      std::error_code ec;
      if (std::filesystem::equivalent(f, in.path, ec) && !ec)
        throw InvalidArgument(unit_file(f, main) + " is the same file as " + in.what + " \"" +
                              in.path + "\", which the run reads; give another output path");
    }
}

std::vector<std::string> dataset_result_columns(const ModelInfo& model) {
  std::vector<std::string> columns = {"id", "time"};
  for (const std::string& c : model.compartments) columns.push_back("amount_" + c);
  for (const std::string& c : model.compartments) columns.push_back("conc_" + c);
  columns.emplace_back("dv");
  columns.emplace_back("pred");
  return columns;
}

namespace {

// No covariate column of `data` is named like one of `result` (the result's own columns) or
// starts with amount_ or conc_, ignoring case.
void check_result_columns(const Dataset& data, const std::vector<std::string>& result) {
  for (const std::string& c : data.covariate_columns) {
    const std::string l = lower(c);
    if (l.rfind("amount_", 0) != 0 && l.rfind("conc_", 0) != 0 &&
        std::find(result.begin(), result.end(), l) == result.end())
      continue;
    std::string names;
    for (const std::string& r : result)
      if (r.rfind("amount_", 0) != 0 && r.rfind("conc_", 0) != 0) names += r + ", ";
    const auto at = std::find(data.columns.begin(), data.columns.end(), c);
    throw InvalidArgument("dataset column " + c + " (column " +
                          std::to_string(at - data.columns.begin() + 1) + " of " + data.file +
                          ") would be written beside the result's own columns, but its name is "
                          "one of theirs (" +
                          names +
                          "and every amount_* and conc_* name, compared ignoring case); rename "
                          "it in the dataset");
  }
}

}  // namespace

void check_dataset_columns(const Dataset& data, const ModelInfo& model) {
  check_result_columns(data, dataset_result_columns(model));
}

std::vector<std::string> design_result_columns(const ModelInfo& model) {
  std::vector<std::string> columns = {"id", "time"};
  for (const std::string& c : model.compartments) columns.push_back("amount_" + c);
  for (const std::string& c : model.compartments) columns.push_back("conc_" + c);
  for (const char* c : {"replicate", "ipred", "dv", "blq"}) columns.emplace_back(c);
  return columns;
}

void check_design_columns(const Dataset& data, const ModelInfo& model) {
  check_result_columns(data, design_result_columns(model));
}

}  // namespace pkscan::output
