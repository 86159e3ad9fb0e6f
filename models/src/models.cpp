// Built-in model registry: an enum and a switch, no string-keyed registry of code.
#include <cctype>
#include <cmath>
#include <limits>
#include <pkscan/error.hpp>
#include <pkscan/models/model_kind.hpp>
#include <pkscan/models/three_cpt.hpp>

namespace pkscan {

namespace {
constexpr double kRequired = std::numeric_limits<double>::quiet_NaN();

int add(ModelInfo& m, const std::string& name, const std::string& alias, ParameterRole role,
        double def) {
  m.parameters.push_back({name, alias, role, def});
  return static_cast<int>(m.parameters.size()) - 1;
}

// f_<compartment> and lag_<compartment> for every compartment, after the model's own parameters.
void add_dose_parameters(ModelInfo& m) {
  for (const std::string& c : m.compartments) {
    m.f_parameter.push_back(add(m, "f_" + c, "", ParameterRole::Bioavailability, 1.0));
    m.lag_parameter.push_back(add(m, "lag_" + c, "", ParameterRole::Lag, 0.0));
  }
  m.in_alternative.assign(m.parameters.size(), 0);
  for (const ParameterAlternative& alt : m.alternatives) {
    for (int c : alt.micro) m.in_alternative[static_cast<std::size_t>(c)] = 1;
    for (int c : alt.clearance) m.in_alternative[static_cast<std::size_t>(c)] = 1;
  }
}

ModelInfo make_two_compartment() {
  ModelInfo m;
  m.kind = ModelKind::TwoCompartment;
  m.name = "two_compartment";
  m.compartments = {"depot", "central"};
  const int ka = add(m, "ka", "k01", ParameterRole::Rate, kRequired);
  const int ke = add(m, "ke", "u", ParameterRole::Rate, kRequired);
  const int vd = add(m, "v_depot", "", ParameterRole::Volume, 1.0);
  const int vc = add(m, "v_central", "", ParameterRole::Volume, kRequired);
  const int cl = add(m, "cl", "", ParameterRole::Rate, kRequired);
  (void)ka;
  m.volume_parameter = {vd, vc};
  m.alternatives = {{{ke}, {cl}}};
  add_dose_parameters(m);
  return m;
}

ModelInfo make_three_compartment() {
  ModelInfo m;
  m.kind = ModelKind::ThreeCompartment;
  m.name = "three_compartment";
  m.compartments = {"depot", "central", "peripheral"};
  // Column order of the first seven is fixed by three_cpt.hpp (ThreeCptParam).
  add(m, "ka", "k01", ParameterRole::Rate, kRequired);
  const int k12 = add(m, "k12", "", ParameterRole::Rate, kRequired);
  const int k21 = add(m, "k21", "", ParameterRole::Rate, kRequired);
  const int ke = add(m, "ke", "u", ParameterRole::Rate, kRequired);
  const int vd = add(m, "v_depot", "", ParameterRole::Volume, 1.0);
  const int vc = add(m, "v_central", "", ParameterRole::Volume, kRequired);
  const int vp = add(m, "v_peripheral", "", ParameterRole::Volume, kRequired);
  const int cl = add(m, "cl", "", ParameterRole::Rate, kRequired);
  const int q = add(m, "q", "", ParameterRole::Rate, kRequired);
  m.volume_parameter = {vd, vc, vp};
  m.alternatives = {{{ke}, {cl}}, {{k12, k21}, {q}}};
  add_dose_parameters(m);
  return m;
}

ModelInfo make_four_compartment() {
  ModelInfo m;
  m.kind = ModelKind::FourCompartment;
  m.name = "four_compartment";
  m.compartments = {"depot", "central", "peripheral1", "peripheral2"};
  add(m, "ka", "k01", ParameterRole::Rate, kRequired);
  const int k12 = add(m, "k12", "", ParameterRole::Rate, kRequired);
  const int k21 = add(m, "k21", "", ParameterRole::Rate, kRequired);
  const int k13 = add(m, "k13", "", ParameterRole::Rate, kRequired);
  const int k31 = add(m, "k31", "", ParameterRole::Rate, kRequired);
  const int ke = add(m, "ke", "u", ParameterRole::Rate, kRequired);
  const int vd = add(m, "v_depot", "", ParameterRole::Volume, 1.0);
  const int vc = add(m, "v_central", "", ParameterRole::Volume, kRequired);
  const int vp1 = add(m, "v_peripheral1", "", ParameterRole::Volume, kRequired);
  const int vp2 = add(m, "v_peripheral2", "", ParameterRole::Volume, kRequired);
  const int cl = add(m, "cl", "", ParameterRole::Rate, kRequired);
  const int q = add(m, "q", "", ParameterRole::Rate, kRequired);
  const int q2 = add(m, "q2", "", ParameterRole::Rate, kRequired);
  m.volume_parameter = {vd, vc, vp1, vp2};
  m.alternatives = {{{ke}, {cl}}, {{k12, k21}, {q}}, {{k13, k31}, {q2}}};
  add_dose_parameters(m);
  return m;
}

const char* role_rule(ParameterRole role) {
  return role == ParameterRole::Volume ? "finite and > 0" : "finite and >= 0";
}

bool given(double v) { return !std::isnan(v); }

std::string lower_case(std::string s) {
  for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

// Micro constant if given, else the clearance divided by the volume.
double micro_or(const double* p, int micro, int clearance, int volume) {
  return given(p[micro]) ? p[micro] : p[clearance] / p[volume];
}

}  // namespace

const ModelInfo& model_info(ModelKind kind) noexcept {
  static const ModelInfo linear = [] {
    ModelInfo m;
    m.kind = ModelKind::Linear;
    m.name = "linear";
    return m;
  }();
  static const ModelInfo two = make_two_compartment();
  static const ModelInfo three = make_three_compartment();
  static const ModelInfo four = make_four_compartment();
  switch (kind) {
    case ModelKind::TwoCompartment:
      return two;
    case ModelKind::ThreeCompartment:
      return three;
    case ModelKind::FourCompartment:
      return four;
    case ModelKind::Linear:
      return linear;
  }
  return three;
}

std::shared_ptr<const ModelInfo> make_linear_model(const std::vector<std::string>& compartments,
                                                   const std::vector<FlowSpec>& flows,
                                                   const std::string& observe) {
  auto m = std::make_shared<ModelInfo>();
  m->kind = ModelKind::Linear;
  m->name = "linear";
  const int n = static_cast<int>(compartments.size());
  if (n < 1 || n > kMaxLinearCompartments)
    throw InvalidArgument("linear model: compartments has " + std::to_string(n) +
                          " names, but must have 1 to " + std::to_string(kMaxLinearCompartments));
  auto valid_name = [](const std::string& s) {
    if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
    for (char ch : s)
      if (!(std::isalnum(static_cast<unsigned char>(ch)) || ch == '_')) return false;
    return true;
  };
  for (int i = 0; i < n; ++i) {
    const std::string& c = compartments[static_cast<std::size_t>(i)];
    if (!valid_name(c))
      throw InvalidArgument("linear model: compartment name \"" + c +
                            "\" is not a name (letters, digits and _, not starting with a digit)");
    for (int j = 0; j < i; ++j)
      if (lower_case(compartments[static_cast<std::size_t>(j)]) == lower_case(c))
        throw InvalidArgument(
            "linear model: compartment \"" + c +
            "\" is declared twice (names are compared ignoring case, as dataset columns are)");
  }
  m->compartments = compartments;
  auto index = [&](const std::string& name, const char* what) {
    for (int i = 0; i < n; ++i)
      if (compartments[static_cast<std::size_t>(i)] == name) return i;
    throw InvalidArgument(std::string("linear model: flow ") + what + " \"" + name +
                          "\" is not a declared compartment");
  };
  for (const FlowSpec& f : flows) {
    const int from = index(f.from, "from");
    const int to = f.to.empty() ? -1 : index(f.to, "to");
    if (to == from) throw InvalidArgument("linear model: a flow from \"" + f.from + "\" to itself");
    if (!valid_name(f.parameter))
      throw InvalidArgument("linear model: flow rate \"" + f.parameter +
                            "\" is not a parameter name");
    for (const std::string& c : compartments)
      if (f.parameter == "v_" + c || f.parameter == "f_" + c || f.parameter == "lag_" + c)
        throw InvalidArgument("linear model: flow rate \"" + f.parameter +
                              "\" clashes with the volume, f_ or lag_ parameter of a compartment");
    int col = parameter_index(*m, f.parameter);
    if (col < 0) {
      for (const ParameterInfo& q : m->parameters)
        if (lower_case(q.name) == lower_case(f.parameter))
          throw InvalidArgument(
              "linear model: flow rates \"" + q.name + "\" and \"" + f.parameter +
              "\" differ only in case (dataset columns are matched ignoring case)");
      for (const char* reserved :
           {"id", "time", "amt", "rate", "evid", "cmt", "ii", "addl", "ss", "dv", "mdv"})
        if (lower_case(f.parameter) == reserved)
          throw InvalidArgument("linear model: flow rate \"" + f.parameter +
                                "\" is the name of a NONMEM data item; choose another name");
      col = add(*m, f.parameter, "", ParameterRole::Rate, kRequired);
    }
    for (const Flow& g : m->flows)
      if (g.from == from && g.to == to)
        throw InvalidArgument("linear model: two flows from \"" + f.from + "\" to \"" +
                              (f.to.empty() ? std::string("elimination") : f.to) + "\"");
    m->flows.push_back({from, to, col});
  }
  for (const std::string& c : compartments)
    m->volume_parameter.push_back(add(*m, "v_" + c, "", ParameterRole::Volume, 1.0));
  add_dose_parameters(*m);
  m->default_dose_compartment = 0;
  if (!observe.empty()) {
    m->default_observation_compartment = -1;
    for (int i = 0; i < n; ++i)
      if (compartments[static_cast<std::size_t>(i)] == observe)
        m->default_observation_compartment = i;
    if (m->default_observation_compartment < 0)
      throw InvalidArgument("linear model: observe \"" + observe +
                            "\" is not a declared compartment");
  } else {
    const int central = compartment_index(*m, "central");
    m->default_observation_compartment = central >= 0 ? central : 0;
  }
  return m;
}

std::string to_string(ModelKind kind) { return model_info(kind).name; }

std::string model_names() { return "two_compartment, three_compartment, four_compartment"; }

ModelKind model_from_string(std::string_view name) {
  for (ModelKind k :
       {ModelKind::TwoCompartment, ModelKind::ThreeCompartment, ModelKind::FourCompartment})
    if (name == model_info(k).name) return k;
  throw InvalidArgument("model is \"" + std::string(name) + "\", but must be one of " +
                        model_names());
}

int parameter_index(const ModelInfo& model, std::string_view name) noexcept {
  for (std::size_t i = 0; i < model.parameters.size(); ++i) {
    const ParameterInfo& p = model.parameters[i];
    if (p.name == name || (!p.alias.empty() && p.alias == name)) return static_cast<int>(i);
  }
  return -1;
}

int compartment_index(const ModelInfo& model, std::string_view name) noexcept {
  for (std::size_t i = 0; i < model.compartments.size(); ++i) {
    if (model.compartments[i] == name) return static_cast<int>(i);
  }
  return -1;
}

void rate_matrix(const ModelInfo& model, const double* p, double* a) noexcept {
  if (model.kind != ModelKind::Linear) {
    rate_matrix(model.kind, p, a);
    return;
  }
  const std::size_t n = model.compartments.size();
  for (std::size_t i = 0; i < n * n; ++i) a[i] = 0.0;
  for (const Flow& f : model.flows) {
    const double k = p[f.parameter];
    a[static_cast<std::size_t>(f.from) * n + static_cast<std::size_t>(f.from)] -= k;
    if (f.to >= 0) a[static_cast<std::size_t>(f.to) * n + static_cast<std::size_t>(f.from)] += k;
  }
}

void rate_matrix(ModelKind kind, const double* p, double* a) noexcept {
  const ModelInfo& m = model_info(kind);
  const std::size_t n = m.compartments.size();
  for (std::size_t i = 0; i < n * n; ++i) a[i] = 0.0;
  auto at = [&](std::size_t r, std::size_t c) -> double& { return a[r * n + c]; };
  switch (kind) {
    case ModelKind::TwoCompartment: {
      const double ka = p[0];
      const double ke = micro_or(p, 1, 4, 3);
      at(0, 0) = -ka;
      at(1, 0) = ka;
      at(1, 1) = -ke;
      return;
    }
    case ModelKind::ThreeCompartment: {
      const double ke = micro_or(p, kThreeCptKe, 7, kThreeCptVCentral);
      const double k12 = micro_or(p, kThreeCptK12, 8, kThreeCptVCentral);
      const double k21 = micro_or(p, kThreeCptK21, 8, kThreeCptVPeripheral);
      const Eigen::Matrix3d m3 = three_compartment_rate_matrix(p[kThreeCptKa], k12, k21, ke);
      for (int r = 0; r < 3; ++r)
        for (int c = 0; c < 3; ++c) a[r * 3 + c] = m3(r, c);
      return;
    }
    case ModelKind::Linear:
      return;  // needs the ModelInfo: rate_matrix(const ModelInfo&, ...)
    case ModelKind::FourCompartment: {
      // columns: ka 0, k12 1, k21 2, k13 3, k31 4, ke 5, v_depot 6, v_central 7, v_peripheral1 8,
      // v_peripheral2 9, cl 10, q 11, q2 12
      const double ka = p[0];
      const double k12 = micro_or(p, 1, 11, 7), k21 = micro_or(p, 2, 11, 8);
      const double k13 = micro_or(p, 3, 12, 7), k31 = micro_or(p, 4, 12, 9);
      const double ke = micro_or(p, 5, 10, 7);
      at(0, 0) = -ka;
      at(1, 0) = ka;
      at(1, 1) = -(k12 + k13 + ke);
      at(1, 2) = k21;
      at(1, 3) = k31;
      at(2, 1) = k12;
      at(2, 2) = -k21;
      at(3, 1) = k13;
      at(3, 3) = -k31;
      return;
    }
  }
}

std::string check_parameters(const ModelInfo& model, const double* p) {
  const std::vector<char>& in_group = model.in_alternative;
  for (std::size_t c = 0; c < model.parameters.size(); ++c) {
    const ParameterInfo& info = model.parameters[c];
    const double v = p[c];
    if (std::isnan(v)) {
      if (in_group[c]) continue;
      return "parameter " + info.name + " is missing, but must be given (it has no default)";
    }
    const bool ok = std::isfinite(v) && (info.role == ParameterRole::Volume ? v > 0.0 : v >= 0.0);
    if (!ok)
      return "parameter " + info.name + " is " + format_value(v) + ", but must be " +
             role_rule(info.role);
  }
  auto names = [&](const std::vector<int>& cols) {
    std::string s;
    for (std::size_t i = 0; i < cols.size(); ++i)
      s += (i ? (i + 1 == cols.size() ? " and " : ", ") : "") +
           model.parameters[static_cast<std::size_t>(cols[i])].name;
    return s;
  };
  for (const ParameterAlternative& alt : model.alternatives) {
    int micro = 0, clear = 0;
    for (int c : alt.micro) micro += given(p[c]);
    for (int c : alt.clearance) clear += given(p[c]);
    const bool all_micro = micro == static_cast<int>(alt.micro.size());
    const bool all_clear = clear == static_cast<int>(alt.clearance.size());
    if (micro > 0 && clear > 0)
      return "parameters " + names(alt.micro) + " and " + names(alt.clearance) +
             " are both given, but must be one or the other (micro constants or clearances)";
    if (!(all_micro && clear == 0) && !(all_clear && micro == 0))
      return "parameter " +
             (micro > 0 ? names(alt.micro)
                        : names(alt.micro) + " (or " + names(alt.clearance) + ")") +
             " is missing, but must be given" + (micro > 0 ? " together" : " (it has no default)");
  }
  return {};
}

std::int64_t first_rejected_row(const ModelInfo& model, const double* rows, std::int64_t n,
                                bool grid_doses) noexcept {
  const std::int64_t columns = static_cast<std::int64_t>(model.parameters.size());
  std::int64_t first = n;
#pragma omp parallel for reduction(min : first) schedule(static) if (n > 4096)
  for (std::int64_t i = 0; i < n; ++i) {
    const double* row = rows + i * columns;
    bool bad = true;
    try {
      bad = !check_parameters(model, row).empty();
    } catch (...) {  // no memory for the message: rejected (the caller's check reports it)
    }
    bad = bad || (grid_doses && !default_bioavailability_and_lag(model, row));
    if (bad && i < first) first = i;
  }
  return first;
}

bool default_bioavailability_and_lag(const ModelInfo& model, const double* p) noexcept {
  for (int c : model.f_parameter)
    if (p[c] != 1.0) return false;
  for (int c : model.lag_parameter)
    if (p[c] != 0.0) return false;
  return true;
}

}  // namespace pkscan
