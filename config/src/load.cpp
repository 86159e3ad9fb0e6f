// YAML run file -> RunSpec (docs/run-files.md). Every error names the file, the node's
// line:column, the key and what is accepted. Nothing here allocates in proportion to a size read
// from the file before the size has been checked against the memory limit.
//
// The sections are read by load_model.cpp (model, discretization, precision, engine),
// load_dataset_run.cpp (subjects.dataset), load_doses.cpp (time, doses, the euler step),
// load_subjects.cpp (subjects, the size check, the parameter rows), load_output.cpp (output)
// and load_population.cpp (subjects.population, sweep), on yaml_reader.hpp's Loader.
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <memory>
#include <pkscan/backend.hpp>
#include <pkscan/checks.hpp>
#include <pkscan/config/load.hpp>
#include <pkscan/engine.hpp>
#include <pkscan/error.hpp>
#include <pkscan/population_run.hpp>
#include <string>
#include <vector>

#include "load_sections.hpp"

namespace pkscan::config {

namespace {

// Largest run file read (a run file is a page of YAML; a huge file is a mistake).
constexpr std::streamsize kMaxFileBytes = 64 << 20;

}  // namespace

RunSpec parse_run_config(const std::string& text, const std::string& file) {
  using namespace detail;  // NOLINT(google-build-using-namespace)
  const Loader L(file);
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    L.fail(e.mark, "YAML syntax error: " + e.msg);
  }
  if (!root.IsDefined() || root.IsNull())
    throw ConfigError(
        file, 0, 0,
        "the run file is empty; it must be a YAML mapping with keys time, subjects, ...");

  RunSpec spec;
  spec.file = file;
  spec.text = text;
  const Loader::Entries top = L.entries(root, "the run file",
                                        {"model", "discretization", "time", "subjects", "doses",
                                         "output", "engine", "precision", "sweep", "arms"});
  Problem& p = spec.problem;
  const std::shared_ptr<const ModelInfo> model_ptr = parse_model(L, top);
  const YAML::Mark engine_mark = parse_options(L, top, spec);

  // subjects.dataset: a NONMEM dataset replaces the grid, the doses and the output times.
  if (auto it = top.find("subjects");
      it != top.end() && it->second.value.IsMap() && it->second.value["dataset"]) {
    parse_dataset_run(L, top, spec, model_ptr, engine_mark);
    return spec;
  }

  // Each part is checked by the library's rules as soon as it is read (pkscan/checks.hpp,
  // check_population_run), and each error reported at its value's node (Loader::checked).
  const TimeNodes time = parse_time(L, top, root, p);
  FieldTable population_fields;  // where the values check_population_run checks are
  const GridSubjects subjects = parse_subjects(L, top, root, spec, model_ptr, population_fields);
  parse_output(L, top, spec, population_fields);  // before the size check (output.times)
  if (auto it = top.find("sweep"); it != top.end()) {
    spec.sweep = parse_sweep(L, it->second.value, *model_ptr, population_fields);
    // A swept parameter's per-subject values would be replaced at every grid point.
    for (const int col : spec.sweep.columns)
      for (const ParamSource& src : subjects.sources)
        if (src.column == col && src.value.IsSequence())
          L.fail(src.value, "subjects.parameters." + src.key.Scalar() +
                                " gives one value per subject, but sweep replaces " +
                                model_ptr->parameters[static_cast<std::size_t>(col)].name +
                                " at every grid point, so they would not be used; remove it "
                                "from sweep, or give one number (which the sweep replaces)");
  }
  check_run_size(L, spec, subjects, model_ptr, time.steps);
  fill_parameters(L, spec, subjects, model_ptr);
  parse_arms(L, top, spec, population_fields);  // the grid and the population are read
  parse_summary_by(L, top, *model_ptr, spec, population_fields);
  parse_doses(L, top, spec, population_fields);
  // A grid population's covariates file without effects must be read for its doses or strata.
  if (auto u = population_fields.find("covariates_unused"); u != population_fields.end()) {
    bool used = spec.stream.by && spec.stream.by->covariate >= 0;
    const auto scales = [](const std::vector<DoseScaling>& s) {
      return std::any_of(s.begin(), s.end(), [](const DoseScaling& d) { return d.covariate >= 0; });
    };
    used = used || scales(spec.dose_scaling);
    for (const Arm& a : spec.arms) used = used || scales(a.scaling);
    if (!used)
      L.fail(u->second.node,
             u->second.name +
                 " has no effects, and no dose (per, bands) or output.summaries.by uses it, so its "
                 "file would be read for nothing; give effects: [{parameter, covariate, type, "
                 "coefficient, reference}, ...], use a column in doses or summaries, or remove "
                 "covariates");
  }
  if (spec.streaming())
    L.checked(locate_in(population_fields), [&] { check_population_run(population_parts(spec)); });
  if (p.discretization == Discretization::Euler)
    L.checked(locate_time(time), [&] { check_euler_step(p.parameters, p.grid.dt); });

  // Availability of the requested path: exit status 3, not 2.
  if (std::string why; !is_backend_available(spec.options.method, spec.options.device, &why))
    throw BackendUnavailable(L.where(engine_mark) + ": engine." +
                             (spec.options.device == Device::Cuda ? "device" : "method") + ": " +
                             why);

  // Nothing more to check: each part went through its library check above (check() in parts;
  // the size by check_run_size), so no rule is applied twice and every error has a position.
  return spec;
}

RunSpec load_run_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw ConfigError(path, 0, 0, std::string("cannot read the run file: ") + std::strerror(errno));
  std::string text;
  char buf[65536];
  std::streamsize total = 0;
  while (in.read(buf, sizeof buf) || in.gcount() > 0) {
    total += in.gcount();
    if (total > kMaxFileBytes)
      throw ConfigError(path, 0, 0,
                        "the run file is larger than 64 MiB; a run file is a page of YAML");
    text.append(buf, static_cast<std::size_t>(in.gcount()));
  }
  if (in.bad())
    throw ConfigError(path, 0, 0, "cannot read the run file (I/O error, or it is a directory)");
  RunSpec spec = parse_run_config(text, path);
  spec.inputs.insert(spec.inputs.begin(), output::InputFile{"the run file", path});
  return spec;
}

}  // namespace pkscan::config
