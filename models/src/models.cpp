// Models: the built-ins declared as data, linear models from the user's flows, one rate matrix
// for both, and the parameter rules.
#include <cctype>
#include <cmath>
#include <cstdint>
#include <limits>
#include <pkscan/error.hpp>
#include <pkscan/models/model.hpp>
#include <pkscan/threads.hpp>
#include <string>
#include <string_view>
#include <vector>

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

// ---- The built-in models, as data. ----
//
// A built-in model is its compartments and its flows, like a `linear` model, plus clearances:
// each flow's rate is a micro constant that may instead be given through a clearance
// (k = CL / V of the flow's source compartment). Everything else comes from this declaration:
// the parameter columns (the micro constants in flow order, a volume per compartment, the
// clearances, then f_ and lag_ per compartment), the micro-or-clearance alternatives, the
// dataset column names (parameter names and aliases), the rate matrix and, through it, the
// Predictor's rate structure. Adding a model is adding an entry (and its ModelKind).

struct BuiltinCompartment {
  const char* name;
  double volume_default;  // kRequired: the volume must be given
};

struct BuiltinFlow {
  const char* rate;       // its micro constant
  const char* alias;      // the micro constant's NONMEM name ("" for none)
  const char* from;       // source compartment
  const char* to;         // destination compartment; "" for elimination
  const char* clearance;  // the clearance that may give the rate instead; "" for none
};

struct BuiltinModel {
  ModelKind kind;
  const char* name;
  std::vector<BuiltinCompartment> compartments;
  std::vector<BuiltinFlow> flows;
  std::vector<const char*> clearances;  // in column order
};

const std::vector<BuiltinModel>& builtin_models() {
  static const std::vector<BuiltinModel> models = {
      {ModelKind::TwoCompartment,  // NONMEM ADVAN2
       "two_compartment",
       {{"depot", 1.0}, {"central", kRequired}},
       {{"ka", "k01", "depot", "central", ""}, {"ke", "u", "central", "", "cl"}},
       {"cl"}},
      {ModelKind::ThreeCompartment,  // NONMEM ADVAN4
       "three_compartment",
       {{"depot", 1.0}, {"central", kRequired}, {"peripheral", kRequired}},
       {{"ka", "k01", "depot", "central", ""},
        {"k12", "", "central", "peripheral", "q"},
        {"k21", "", "peripheral", "central", "q"},
        {"ke", "u", "central", "", "cl"}},
       {"cl", "q"}},
      {ModelKind::FourCompartment,  // ADVAN12
       "four_compartment",
       {{"depot", 1.0},
        {"central", kRequired},
        {"peripheral1", kRequired},
        {"peripheral2", kRequired}},
       {{"ka", "k01", "depot", "central", ""},
        {"k12", "", "central", "peripheral1", "q"},
        {"k21", "", "peripheral1", "central", "q"},
        {"k13", "", "central", "peripheral2", "q2"},
        {"k31", "", "peripheral2", "central", "q2"},
        {"ke", "u", "central", "", "cl"}},
       {"cl", "q", "q2"}},
  };
  return models;
}

ModelInfo make_builtin(const BuiltinModel& b) {
  ModelInfo m;
  m.kind = b.kind;
  m.name = b.name;
  for (const BuiltinCompartment& c : b.compartments) m.compartments.emplace_back(c.name);
  auto cmt = [&](const char* name) { return *name ? compartment_index(m, name) : -1; };
  for (const BuiltinFlow& f : b.flows)
    m.flows.push_back(
        {cmt(f.from), cmt(f.to), add(m, f.rate, f.alias, ParameterRole::Rate, kRequired)});
  for (const BuiltinCompartment& c : b.compartments)
    m.volume_parameter.push_back(
        add(m, std::string("v_") + c.name, "", ParameterRole::Volume, c.volume_default));
  for (const char* cl : b.clearances) {
    ParameterAlternative alt;
    alt.clearance = {add(m, cl, "", ParameterRole::Rate, kRequired)};
    for (std::size_t i = 0; i < b.flows.size(); ++i)
      if (std::string_view(b.flows[i].clearance) == cl) {
        alt.micro.push_back(m.flows[i].parameter);
        m.flows[i].clearance = alt.clearance[0];
      }
    m.alternatives.push_back(std::move(alt));
  }
  add_dose_parameters(m);
  return m;
}

bool given(double v) { return !std::isnan(v); }

std::string lower_case(std::string s) {
  for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

}  // namespace

const ModelInfo& model_info(ModelKind kind) noexcept {
  static const ModelInfo linear = [] {
    ModelInfo m;
    m.kind = ModelKind::Linear;
    m.name = "linear";
    return m;
  }();
  static const std::vector<ModelInfo> builtins = [] {
    std::vector<ModelInfo> v;
    for (const BuiltinModel& b : builtin_models()) v.push_back(make_builtin(b));
    return v;
  }();
  for (const ModelInfo& m : builtins)
    if (m.kind == kind) return m;
  return linear;
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

std::string model_names() {
  std::string names;
  for (const BuiltinModel& b : builtin_models())
    names += (names.empty() ? "" : ", ") + std::string(b.name);
  return names;
}

ModelKind model_from_string(std::string_view name) {
  for (const BuiltinModel& b : builtin_models())
    if (name == b.name) return b.kind;
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

namespace {

// A flow's rate: its micro constant when given, else clearance / source volume.
inline double flow_rate(const ModelInfo& model, const Flow& f, const double* p) noexcept {
  return f.clearance >= 0 && !given(p[f.parameter])
             ? p[f.clearance] / p[model.volume_parameter[static_cast<std::size_t>(f.from)]]
             : p[f.parameter];
}

// rate_matrix for N compartments (fixed-size loops: it runs once per subject and simulation).
template <int N>
void rate_matrix_n(const ModelInfo& model, const double* p, double* a) noexcept {
  double m[N * N] = {};
  unsigned outflow = 0;  // bit i: compartment i has an outflow
  for (const Flow& f : model.flows) {
    const int from = f.from;
    const double k = flow_rate(model, f, p);
    m[from * N + from] += k;
    outflow |= 1u << from;
    if (f.to >= 0) m[f.to * N + from] += k;
  }
  for (int i = 0; i < N; ++i)
    if ((outflow >> i) & 1u) m[i * N + i] = -m[i * N + i];
  for (int e = 0; e < N * N; ++e) a[e] = m[e];
}

}  // namespace

void rate_matrix(const ModelInfo& model, const double* p, double* a) noexcept {
  // Each flow's rate: its micro constant when given, else clearance / source volume. A diagonal
  // entry is minus the sum of its compartment's outflows in flow order, -((k1 + k2) + k3) (0
  // for a compartment without outflow).
  switch (model.compartments.size()) {
    case 1:
      return rate_matrix_n<1>(model, p, a);
    case 2:
      return rate_matrix_n<2>(model, p, a);
    case 3:
      return rate_matrix_n<3>(model, p, a);
    case 4:
      return rate_matrix_n<4>(model, p, a);
    case 5:
      return rate_matrix_n<5>(model, p, a);
    default:
      return rate_matrix_n<kMaxLinearCompartments>(model, p, a);  // no model has more
  }
}

void outflow_rates(const ModelInfo& model, const double* p, double* out) noexcept {
  const std::size_t n = model.compartments.size();
  for (std::size_t i = 0; i < n; ++i) out[i] = 0.0;
  for (const Flow& f : model.flows)  // in flow order, as rate_matrix sums the diagonal
    out[static_cast<std::size_t>(f.from)] += flow_rate(model, f, p);
}

void rate_matrix(ModelKind kind, const double* p, double* a) noexcept {
  rate_matrix(model_info(kind), p, a);
}

const char* parameter_rule(ParameterRole role) noexcept {
  return role == ParameterRole::Volume ? "finite and > 0" : "finite and >= 0";
}

bool parameter_value_ok(ParameterRole role, double value) noexcept {
  return std::isfinite(value) && (role == ParameterRole::Volume ? value > 0.0 : value >= 0.0);
}

ParameterViolation parameter_violation(const ModelInfo& model, const double* p) {
  const std::vector<char>& in_group = model.in_alternative;
  for (std::size_t c = 0; c < model.parameters.size(); ++c) {
    const ParameterInfo& info = model.parameters[c];
    const double v = p[c];
    if (std::isnan(v)) {
      if (in_group[c]) continue;
      const char* rule = "given (it has no default)";
      return {static_cast<int>(c), "missing", rule,
              "parameter " + info.name + " is missing, but must be " + rule};
    }
    if (!parameter_value_ok(info.role, v))
      return {static_cast<int>(c), format_value(v), parameter_rule(info.role),
              "parameter " + info.name + " is " + format_value(v) + ", but must be " +
                  parameter_rule(info.role)};
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
    if (micro > 0 && clear > 0) {
      int first = alt.micro.front();  // the first micro constant given
      for (int c : alt.micro)
        if (given(p[c])) {
          first = c;
          break;
        }
      return {first, "given", "",
              "parameters " + names(alt.micro) + " and " + names(alt.clearance) +
                  " are both given, but must be one or the other (micro constants or clearances)"};
    }
    if (!(all_micro && clear == 0) && !(all_clear && micro == 0)) {
      int first = alt.micro.front();  // the first micro constant missing
      for (int c : alt.micro)
        if (!given(p[c])) {
          first = c;
          break;
        }
      return {first, "missing", "",
              "parameter " +
                  (micro > 0 ? names(alt.micro)
                             : names(alt.micro) + " (or " + names(alt.clearance) + ")") +
                  " is missing, but must be given" +
                  (micro > 0 ? " together" : " (it has no default)")};
    }
  }
  return {};
}

std::string check_parameters(const ModelInfo& model, const double* p) {
  return parameter_violation(model, p).message;
}

std::int64_t first_rejected_row(const ModelInfo& model, const double* rows, std::int64_t n,
                                bool grid_doses, int threads) noexcept {
  const std::int64_t columns = static_cast<std::int64_t>(model.parameters.size());
  std::int64_t first = n;
  const int team = threads > 0 ? threads : resolve_threads(0);
  static_cast<void>(team);  // read by the OpenMP pragma only
#pragma omp parallel for reduction(min                       \
                                   : first) schedule(static) \
    num_threads(team) if (n > 4096 && team > 1)
  for (std::int64_t i = 0; i < n; ++i) {
    const double* row = rows + i * columns;
    bool bad = true;
    try {
      bad = static_cast<bool>(parameter_violation(model, row));  // no string copied when valid
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
