// YAML run file -> RunSpec. Every error names the file, the node's line:column, the key and what
// is accepted. Nothing here allocates in proportion to a size read from the file before the
// size has been checked against the memory limit.
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <pkscan/config/load.hpp>
#include <pkscan/config/sink.hpp>
#include <pkscan/error.hpp>
#include <pkscan/events.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace pkscan::config {

namespace {

// Largest run file read (a run file is a page of YAML; a huge file is a mistake).
constexpr std::streamsize kMaxFileBytes = 64 << 20;

std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1])});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + v[i];
  return s;
}

class Loader {
 public:
  explicit Loader(std::string file) : file_(std::move(file)) {}

  [[noreturn]] void fail(const YAML::Node& node, const std::string& msg) const {
    const YAML::Mark m = node.Mark();
    if (m.is_null()) throw ConfigError(file_, 0, 0, msg);
    throw ConfigError(file_, m.line + 1, m.column + 1, msg);
  }
  [[noreturn]] void fail(const YAML::Mark& m, const std::string& msg) const {
    throw ConfigError(file_, m.is_null() ? 0 : m.line + 1, m.is_null() ? 0 : m.column + 1, msg);
  }

  // A mapping's entries by key, rejecting non-scalar keys, duplicates and unknown keys.
  struct Entry {
    YAML::Node key;
    YAML::Node value;
  };
  std::map<std::string, Entry> entries(const YAML::Node& node, const std::string& ctx,
                                       const std::vector<std::string>& allowed) const {
    if (!node.IsMap()) {
      fail(node, ctx + " must be a mapping of keys (" + join(allowed) + ")" +
                     (node.IsScalar() ? ", but is the scalar \"" + node.Scalar() + "\"" : ""));
    }
    std::map<std::string, Entry> out;
    for (auto it = node.begin(); it != node.end(); ++it) {
      const YAML::Node key = it->first;
      if (!key.IsScalar()) fail(key, "a key in " + ctx + " is not a plain name");
      const std::string k = key.Scalar();
      if (std::find(allowed.begin(), allowed.end(), k) == allowed.end()) {
        std::string msg = "unknown key '" + k + "' in " + ctx;
        std::string best;
        std::size_t best_d = 3;
        for (const std::string& a : allowed) {
          const std::size_t d = edit_distance(k, a);
          if (d < best_d) best_d = d, best = a;
        }
        if (!best.empty()) msg += " (did you mean '" + best + "'?)";
        fail(key, msg + "; accepted keys: " + join(allowed));
      }
      auto found = out.find(k);
      if (found != out.end()) {
        fail(key, "duplicate key '" + k + "' in " + ctx + " (first given at line " +
                      std::to_string(found->second.key.Mark().line + 1) + ")");
      }
      out.emplace(k, Entry{key, it->second});
    }
    return out;
  }

  static std::string key_name(const std::string& ctx, const std::string& k) {
    return ctx.empty() || ctx == "the run file" ? k : ctx + "." + k;
  }

  std::string scalar_string(const YAML::Node& v, const std::string& what,
                            const std::string& accepted) const {
    if (!v.IsScalar() || v.Scalar().empty())
      fail(v, what + " must be " + accepted + (v.IsNull() ? ", but is empty" : ""));
    return v.Scalar();
  }

  // A plain (unquoted) YAML number. Quoted strings, booleans, empty values are type errors.
  double number(const YAML::Node& v, const std::string& what) const {
    if (!v.IsScalar() || v.Tag() == "!") {
      fail(v, what + " must be a number" +
                  (v.IsScalar() ? ", but is the string \"" + v.Scalar() + "\""
                                : std::string(v.IsSequence() ? ", but is a list"
                                              : v.IsMap()    ? ", but is a mapping"
                                                             : ", but is empty")));
    }
    const std::string& s = v.Scalar();
    std::string t = s;
    if (t == ".nan" || t == ".NaN" || t == ".NAN") t = "nan";
    if (t == ".inf" || t == ".Inf" || t == ".INF" || t == "+.inf") t = "inf";
    if (t == "-.inf" || t == "-.Inf" || t == "-.INF") t = "-inf";
    errno = 0;
    char* end = nullptr;
    const double d = std::strtod(t.c_str(), &end);
    if (t.empty() || end != t.c_str() + t.size() || t.find_first_of("xXpP") != std::string::npos)
      fail(v, what + " must be a number, but is \"" + s + "\"");
    return d;
  }

  double finite(const YAML::Node& v, const std::string& what, const char* rule,
                bool positive) const {
    const double d = number(v, what);
    if (!std::isfinite(d) || d < 0.0 || (positive && d == 0.0))
      fail(v, what + " is " + v.Scalar() + ", but must be " + rule);
    return d;
  }

  std::int64_t integer(const YAML::Node& v, const std::string& what, std::int64_t lo,
                       std::int64_t hi) const {
    const double d = number(v, what);
    if (!std::isfinite(d) || d != std::floor(d))
      fail(v, what + " is " + v.Scalar() + ", but must be a whole number");
    if (d < static_cast<double>(lo) || d > static_cast<double>(hi))
      fail(v, what + " is " + v.Scalar() + ", but must be in [" + std::to_string(lo) + ", " +
                  std::to_string(hi) + "]");
    return static_cast<std::int64_t>(d);
  }

  std::string file_;
};

struct ParamSource {
  int column;
  YAML::Node key;
  YAML::Node value;
};

// Stores a parameter given as one number (every subject) or a list (one per subject; its length
// is checked by the caller), each value under the parameter role's rule.
void store_parameter(const Loader& L, const YAML::Node& v, const std::string& what,
                     const ParameterInfo& pi, ParameterBatch& batch) {
  const bool volume = pi.role == ParameterRole::Volume;
  const char* rule = volume ? "finite and > 0" : "finite and >= 0";
  if (!v.IsSequence()) {
    batch.set_all(pi.name, L.finite(v, what, rule, volume));
    return;
  }
  for (std::size_t i = 0; i < v.size(); ++i) {
    const std::string item = what + "[" + std::to_string(i + 1) + "]";
    if (!v[i].IsScalar()) L.fail(v[i], item + " must be a number");
    batch.set(pi.name, static_cast<std::int64_t>(i), L.finite(v[i], item, rule, volume));
  }
}

// Reads the covariates CSV of a population: a header of names, then one row of numbers per
// subject. Errors name the file, the line and the column.
void read_covariates(const std::string& path, PopulationInput& pop, std::int64_t max_rows) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw ConfigError(path, 0, 0,
                      std::string("cannot read the covariates file: ") + std::strerror(errno));
  std::string line;
  std::int64_t lineno = 0;
  auto split = [](const std::string& l) {
    std::vector<std::string> f;
    std::string cur;
    for (char ch : l) {
      if (ch == ',') {
        f.push_back(cur);
        cur.clear();
      } else if (ch != '\r') {
        cur += ch;
      }
    }
    f.push_back(cur);
    for (std::string& x : f) {
      const auto a = x.find_first_not_of(" \t\"");
      const auto b = x.find_last_not_of(" \t\"");
      x = a == std::string::npos ? std::string() : x.substr(a, b - a + 1);
    }
    return f;
  };
  while (std::getline(in, line)) {
    ++lineno;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    std::vector<std::string> f = split(line);
    if (pop.covariate_names.empty()) {
      for (std::size_t i = 0; i < f.size(); ++i) {
        if (f[i].empty())
          throw ConfigError(path, lineno, static_cast<int>(i + 1),
                            "the covariates header has an empty column name");
        for (std::size_t j = 0; j < i; ++j)
          if (f[j] == f[i])
            throw ConfigError(path, lineno, static_cast<int>(i + 1),
                              "covariate column '" + f[i] + "' appears twice in the header");
      }
      pop.covariate_names = f;
      continue;
    }
    if (f.size() != pop.covariate_names.size())
      throw ConfigError(path, lineno, 0,
                        "the row has " + std::to_string(f.size()) + " fields, but the header has " +
                            std::to_string(pop.covariate_names.size()));
    const std::int64_t rows =
        static_cast<std::int64_t>(pop.covariates.size() / pop.covariate_names.size());
    if (rows >= max_rows)
      throw ConfigError(path, lineno, 0,
                        "the covariates file has more rows than subjects.population.count = " +
                            std::to_string(max_rows) + "; give one row per subject");
    for (std::size_t i = 0; i < f.size(); ++i) {
      char* end = nullptr;
      errno = 0;
      const double v = std::strtod(f[i].c_str(), &end);
      if (f[i].empty() || end != f[i].c_str() + f[i].size() || !std::isfinite(v))
        throw ConfigError(path, lineno, static_cast<int>(i + 1),
                          "covariate " + pop.covariate_names[i] + " is \"" + f[i] +
                              "\", but must be a finite number");
      pop.covariates.push_back(v);
    }
  }
  if (in.bad()) throw ConfigError(path, 0, 0, "cannot read the covariates file (I/O error)");
  if (pop.covariate_names.empty())
    throw ConfigError(path, 0, 0, "the covariates file is empty; it needs a header of names");
}

// Parameter column by name for population and sweep keys, or an error listing the names.
int named_parameter(const Loader& L, const ModelInfo& model, const YAML::Node& key,
                    const std::string& what) {
  const std::string name = key.Scalar();
  const int col = parameter_index(model, name);
  if (col < 0) {
    std::vector<std::string> names;
    for (const ParameterInfo& pi : model.parameters) names.push_back(pi.name);
    L.fail(key, what + " names the parameter '" + name + "', but model " + model.name +
                    " has the parameters " + join(names));
  }
  return col;
}

// A value of a parameter under its role's rule.
double parameter_value(const Loader& L, const YAML::Node& v, const std::string& what,
                       const ParameterInfo& pi) {
  const bool volume = pi.role == ParameterRole::Volume;
  return L.finite(v, what, volume ? "finite and > 0" : "finite and >= 0", volume);
}

// f_* and lag_* keep their defaults in runs on a time grid (every subject gets the same doses).
void reject_dose_parameter(const Loader& L, const YAML::Node& where, const ParameterInfo& pi,
                           const std::string& what) {
  if (pi.role == ParameterRole::Bioavailability || pi.role == ParameterRole::Lag)
    L.fail(where, what + ": " + pi.name +
                      " cannot vary in a run on a time grid (every subject gets the same doses "
                      "there); use subjects.dataset for per-subject bioavailability and lag");
}

std::shared_ptr<const PopulationInput> parse_population(const Loader& L, const YAML::Node& node,
                                                        const ModelInfo& model,
                                                        const std::string& run_file) {
  auto pop_keys = L.entries(node, "subjects.population",
                            {"count", "seed", "replicates", "typical", "iiv", "covariates"});
  auto out = std::make_shared<PopulationInput>();
  PopulationInput& pop = *out;
  const std::string ctx = "subjects.population";
  auto need = [&](const std::string& k) -> const Loader::Entry& {
    auto it = pop_keys.find(k);
    if (it == pop_keys.end()) L.fail(node, "missing key '" + k + "' in " + ctx);
    return it->second;
  };
  pop.count = L.integer(need("count").value, ctx + ".count", 1, 1'000'000'000'000);
  pop.seed = static_cast<std::uint64_t>(
      L.integer(need("seed").value, ctx + ".seed", 0, (std::int64_t{1} << 53)));
  if (auto it = pop_keys.find("replicates"); it != pop_keys.end())
    pop.replicates = L.integer(it->second.value, ctx + ".replicates", 1, 1'000'000);

  // typical values
  const YAML::Node& tn = need("typical").value;
  std::vector<std::string> names;
  for (const ParameterInfo& pi : model.parameters) {
    names.push_back(pi.name);
    if (!pi.alias.empty()) names.push_back(pi.alias);
  }
  auto typ = L.entries(tn, ctx + ".typical", names);
  pop.typical.resize(model.parameters.size());
  std::vector<char> given(model.parameters.size(), 0);
  for (std::size_t c = 0; c < model.parameters.size(); ++c)
    pop.typical[c] = model.parameters[c].default_value;
  for (auto it = tn.begin(); it != tn.end(); ++it) {
    const int col = parameter_index(model, it->first.Scalar());
    const ParameterInfo& pi = model.parameters[static_cast<std::size_t>(col)];
    const std::string what = ctx + ".typical." + it->first.Scalar();
    if (given[static_cast<std::size_t>(col)])
      L.fail(it->first, "parameter " + pi.name + " is given twice (as " + pi.name +
                            " and as its alias " + pi.alias + "); give one of them");
    given[static_cast<std::size_t>(col)] = 1;
    if (!it->second.IsScalar()) L.fail(it->second, what + " must be a number (the typical value)");
    pop.typical[static_cast<std::size_t>(col)] = parameter_value(L, it->second, what, pi);
    if (pop.typical[static_cast<std::size_t>(col)] != pi.default_value)
      reject_dose_parameter(L, it->second, pi, what);
  }
  for (std::size_t c = 0; c < model.parameters.size(); ++c)
    if (!given[c] && std::isnan(model.parameters[c].default_value) && !model.in_alternative[c])
      L.fail(tn, "missing parameter '" + model.parameters[c].name + "' in " + ctx +
                     ".typical (required by model " + model.name + ")");
  {
    const std::string msg = check_parameters(model, pop.typical.data());
    if (!msg.empty()) L.fail(tn, ctx + ".typical: " + msg);
  }

  // iiv: {name: variance, ...} (diagonal) or {block: [names], omega: [lower triangle]}
  if (auto it = pop_keys.find("iiv"); it != pop_keys.end()) {
    const YAML::Node& iv = it->second.value;
    if (!iv.IsMap())
      L.fail(iv, ctx +
                     ".iiv must be a mapping of parameter names to variances of eta "
                     "(omega^2), or {block: [names], omega: [lower triangle of the covariance]}");
    if (iv["block"] || iv["omega"]) {
      auto b = L.entries(iv, ctx + ".iiv", {"block", "omega"});
      auto bi = b.find("block");
      auto oi = b.find("omega");
      if (bi == b.end() || oi == b.end())
        L.fail(iv, ctx +
                       ".iiv needs both block (the parameter names) and omega (the lower "
                       "triangle of their covariance, row by row, as in $OMEGA BLOCK)");
      const YAML::Node& bn = bi->second.value;
      if (!bn.IsSequence() || bn.size() == 0)
        L.fail(bn, ctx + ".iiv.block must be a non-empty list of parameter names");
      for (std::size_t i = 0; i < bn.size(); ++i) {
        if (!bn[i].IsScalar())
          L.fail(bn[i], ctx + ".iiv.block[" + std::to_string(i + 1) + "] must be a name");
        const int col = named_parameter(L, model, bn[i], ctx + ".iiv.block");
        for (int c : pop.eta_columns)
          if (c == col) L.fail(bn[i], ctx + ".iiv.block names " + bn[i].Scalar() + " twice");
        pop.eta_columns.push_back(col);
      }
      const std::size_t m = pop.eta_columns.size();
      const YAML::Node& on = oi->second.value;
      if (!on.IsSequence() || on.size() != m * (m + 1) / 2)
        L.fail(on, ctx + ".iiv.omega must be a list of " + std::to_string(m * (m + 1) / 2) +
                       " numbers: the lower triangle of the " + std::to_string(m) + "x" +
                       std::to_string(m) + " covariance, row by row" +
                       (on.IsSequence() ? ", but has " + std::to_string(on.size()) : ""));
      pop.omega.assign(m * m, 0.0);
      std::size_t k = 0;
      for (std::size_t r = 0; r < m; ++r) {
        for (std::size_t c = 0; c <= r; ++c, ++k) {
          const std::string what = ctx + ".iiv.omega[" + std::to_string(k + 1) + "]";
          const double v = L.number(on[k], what);
          if (!std::isfinite(v) || (r == c && v < 0))
            L.fail(on[k], what + " is " + on[k].Scalar() + ", but must be finite" +
                              (r == c ? " and >= 0 (a variance)" : ""));
          pop.omega[r * m + c] = pop.omega[c * m + r] = v;
        }
      }
      // Positive semi-definite: Cholesky of the block with non-zero variances.
      std::vector<std::size_t> nz;
      for (std::size_t r = 0; r < m; ++r)
        if (pop.omega[r * m + r] > 0) nz.push_back(r);
      for (std::size_t r = 0; r < m; ++r)
        for (std::size_t c = 0; c < m; ++c)
          if (r != c && pop.omega[r * m + c] != 0 &&
              (pop.omega[r * m + r] == 0 || pop.omega[c * m + c] == 0))
            L.fail(on, ctx + ".iiv.omega has a covariance with a zero-variance parameter");
      std::vector<double> l(nz.size() * nz.size(), 0.0);
      for (std::size_t i = 0; i < nz.size(); ++i) {
        for (std::size_t j = 0; j <= i; ++j) {
          double s = pop.omega[nz[i] * m + nz[j]];
          for (std::size_t q = 0; q < j; ++q) s -= l[i * nz.size() + q] * l[j * nz.size() + q];
          if (i == j) {
            if (!(s > 1e-14 * pop.omega[nz[i] * m + nz[i]]))
              L.fail(on,
                     ctx +
                         ".iiv.omega is not positive definite (the correlations are "
                         "impossible): check the covariances of " +
                         model.parameters[static_cast<std::size_t>(pop.eta_columns[nz[i]])].name);
            l[i * nz.size() + i] = std::sqrt(s);
          } else {
            l[i * nz.size() + j] = s / l[j * nz.size() + j];
          }
        }
      }
    } else {
      std::vector<YAML::Node> values;
      for (const auto& kv : iv) {
        const YAML::Node k = kv.first;
        values.push_back(kv.second);
        const int col = named_parameter(L, model, k, ctx + ".iiv");
        for (int c : pop.eta_columns)
          if (c == col) L.fail(k, ctx + ".iiv names " + k.Scalar() + " twice");
        pop.eta_columns.push_back(col);
      }
      const std::size_t m = pop.eta_columns.size();
      pop.omega.assign(m * m, 0.0);
      for (std::size_t k = 0; k < m; ++k)
        pop.omega[k * m + k] = L.finite(
            values[k],
            ctx + ".iiv." + model.parameters[static_cast<std::size_t>(pop.eta_columns[k])].name,
            "finite and >= 0 (the variance of eta, omega^2)", false);
    }
    for (std::size_t i = 0; i < pop.eta_columns.size(); ++i) {
      const ParameterInfo& pi = model.parameters[static_cast<std::size_t>(pop.eta_columns[i])];
      reject_dose_parameter(L, iv, pi, ctx + ".iiv");
      if (std::isnan(pop.typical[static_cast<std::size_t>(pop.eta_columns[i])]))
        L.fail(iv, ctx + ".iiv gives variability to " + pi.name +
                       ", which has no typical value in " + ctx + ".typical");
    }
  }

  // covariates: {file: CSV, effects: [{parameter, covariate, type, coefficient, reference}]}
  if (auto it = pop_keys.find("covariates"); it != pop_keys.end()) {
    const YAML::Node& cn = it->second.value;
    auto cv = L.entries(cn, ctx + ".covariates", {"file", "effects"});
    auto fi = cv.find("file");
    if (fi == cv.end()) L.fail(cn, "missing key 'file' in " + ctx + ".covariates");
    std::string path = L.scalar_string(fi->second.value, ctx + ".covariates.file",
                                       "the path of a CSV file with one row per subject");
    if (path[0] != '/') {
      const auto slash = run_file.find_last_of('/');
      if (slash != std::string::npos) path = run_file.substr(0, slash + 1) + path;
    }
    pop.covariate_file = path;
    if (!std::ifstream(path, std::ios::binary))
      L.fail(fi->second.value,
             ctx + ".covariates.file: cannot read \"" + path + "\": " + std::strerror(errno));
    read_covariates(path, pop, pop.count);
    const std::int64_t rows =
        static_cast<std::int64_t>(pop.covariates.size() / pop.covariate_names.size());
    if (rows != pop.count)
      L.fail(fi->second.value, ctx + ".covariates.file has " + std::to_string(rows) +
                                   " rows, but " + ctx + ".count is " + std::to_string(pop.count) +
                                   "; give one row per subject");
    if (auto ei = cv.find("effects"); ei != cv.end()) {
      const YAML::Node& el = ei->second.value;
      if (!el.IsSequence())
        L.fail(el, ctx +
                       ".covariates.effects must be a list of {parameter, covariate, type, "
                       "coefficient, reference}");
      for (std::size_t i = 0; i < el.size(); ++i) {
        const std::string ectx = ctx + ".covariates.effects[" + std::to_string(i + 1) + "]";
        auto e =
            L.entries(el[i], ectx, {"parameter", "covariate", "type", "coefficient", "reference"});
        for (const char* k : {"parameter", "covariate", "type", "coefficient", "reference"})
          if (e.find(k) == e.end())
            L.fail(el[i], "missing key '" + std::string(k) + "' in " + ectx);
        PopulationInput::Effect eff;
        eff.column = named_parameter(L, model, e.at("parameter").value, ectx + ".parameter");
        const ParameterInfo& pi = model.parameters[static_cast<std::size_t>(eff.column)];
        reject_dose_parameter(L, e.at("parameter").value, pi, ectx);
        if (std::isnan(pop.typical[static_cast<std::size_t>(eff.column)]))
          L.fail(e.at("parameter").value,
                 ectx + " acts on " + pi.name + ", which has no typical value");
        const std::string cov =
            L.scalar_string(e.at("covariate").value, ectx + ".covariate", "a covariate column");
        const auto ci = std::find(pop.covariate_names.begin(), pop.covariate_names.end(), cov);
        if (ci == pop.covariate_names.end())
          L.fail(e.at("covariate").value, ectx + ".covariate is \"" + cov +
                                              "\", but the covariates file has the columns " +
                                              join(pop.covariate_names));
        eff.covariate = static_cast<int>(ci - pop.covariate_names.begin());
        const std::string type =
            L.scalar_string(e.at("type").value, ectx + ".type", "power or exponential");
        if (type != "power" && type != "exponential")
          L.fail(e.at("type").value,
                 ectx + ".type is \"" + type + "\", but must be power or exponential");
        eff.power = type == "power";
        eff.coefficient = L.number(e.at("coefficient").value, ectx + ".coefficient");
        if (!std::isfinite(eff.coefficient))
          L.fail(e.at("coefficient").value, ectx + ".coefficient must be finite");
        eff.reference = L.number(e.at("reference").value, ectx + ".reference");
        if (!std::isfinite(eff.reference) || (eff.power && !(eff.reference > 0)))
          L.fail(e.at("reference").value,
                 ectx + ".reference is " + e.at("reference").value.Scalar() +
                     ", but must be finite" + (eff.power ? " and > 0 (power effect)" : ""));
        if (eff.power) {
          const std::size_t k = pop.covariate_names.size();
          for (std::int64_t r = 0; r < pop.count; ++r) {
            const double v = pop.covariates[static_cast<std::size_t>(r) * k +
                                            static_cast<std::size_t>(eff.covariate)];
            if (!(v > 0))
              L.fail(e.at("covariate").value, ectx + ": covariate " + cov + " of subject " +
                                                  std::to_string(r + 1) + " is " + format_value(v) +
                                                  ", but a power effect needs values > 0");
          }
        }
        pop.effects.push_back(eff);
      }
    }
  }
  return out;
}

SweepInput parse_sweep(const Loader& L, const YAML::Node& node, const ModelInfo& model) {
  SweepInput sw;
  if (!node.IsMap() || node.size() == 0)
    L.fail(node, "sweep must be a mapping of parameter names to lists of values");
  std::int64_t points = 1;
  for (const auto& kv : node) {
    const YAML::Node k = kv.first;
    const YAML::Node v = kv.second;
    if (!k.IsScalar()) L.fail(k, "a key in sweep is not a parameter name");
    const int col = named_parameter(L, model, k, "sweep");
    const ParameterInfo& pi = model.parameters[static_cast<std::size_t>(col)];
    for (int c : sw.columns)
      if (c == col) L.fail(k, "sweep names " + pi.name + " twice");
    reject_dose_parameter(L, k, pi, "sweep");
    const std::string what = "sweep." + k.Scalar();
    if (!v.IsSequence() || v.size() == 0) L.fail(v, what + " must be a non-empty list of values");
    std::vector<double> vals;
    for (std::size_t i = 0; i < v.size(); ++i)
      vals.push_back(parameter_value(L, v[i], what + "[" + std::to_string(i + 1) + "]", pi));
    points *= static_cast<std::int64_t>(vals.size());
    if (points > 1'000'000'000) L.fail(v, "sweep has more than 10^9 grid points");
    sw.columns.push_back(col);
    sw.values.push_back(std::move(vals));
  }
  return sw;
}

// output.summaries: true | false | {percentiles: [..]}
void parse_summaries(const Loader& L, const YAML::Node& v, StreamOutput& so) {
  if (v.IsScalar() && v.Tag() != "!" && (v.Scalar() == "true" || v.Scalar() == "false")) {
    so.summaries = v.Scalar() == "true";
    return;
  }
  if (!v.IsMap())
    L.fail(v, "output.summaries must be true, false or {percentiles: [numbers in 0..100]}");
  auto m = L.entries(v, "output.summaries", {"percentiles"});
  so.summaries = true;
  if (auto it = m.find("percentiles"); it != m.end()) {
    const YAML::Node& pl = it->second.value;
    if (!pl.IsSequence() || pl.size() == 0 || pl.size() > 99)
      L.fail(pl, "output.summaries.percentiles must be a list of 1 to 99 numbers in [0, 100]");
    so.percentiles.clear();
    for (std::size_t i = 0; i < pl.size(); ++i) {
      const std::string what = "output.summaries.percentiles[" + std::to_string(i + 1) + "]";
      const double q = L.number(pl[i], what);
      if (!(q >= 0 && q <= 100))
        L.fail(pl[i], what + " is " + pl[i].Scalar() + ", but must be in [0, 100]");
      if (!so.percentiles.empty() && q <= so.percentiles.back())
        L.fail(pl[i], what + " is " + pl[i].Scalar() + ", but the percentiles must increase");
      so.percentiles.push_back(q);
    }
  }
}

// A run on a NONMEM dataset: `subjects: {dataset: FILE, parameters: {...}}`, `output: {path}`.
void parse_dataset_run(const Loader& L, std::map<std::string, Loader::Entry>& top, RunSpec& spec,
                       const std::shared_ptr<const ModelInfo>& model_ptr,
                       const YAML::Mark& engine_mark) {
  Problem& p = spec.problem;
  const ModelInfo& model = *model_ptr;
  for (const char* key : {"time", "doses"}) {
    if (auto it = top.find(key); it != top.end())
      L.fail(it->second.key, std::string(key) +
                                 " is not used with subjects.dataset (times and doses come from "
                                 "the dataset); remove it");
  }
  if (auto it = top.find("discretization");
      it != top.end() && p.discretization != Discretization::Exact)
    L.fail(it->second.value,
           "discretization is euler, but a dataset run needs discretization: exact (event times "
           "are arbitrary)");
  const Loader::Entry& subj_e = top.at("subjects");
  auto subj = L.entries(subj_e.value, "subjects", {"dataset", "parameters", "count"});
  if (auto it = subj.find("count"); it != subj.end())
    L.fail(it->second.key,
           "subjects.count is not used with subjects.dataset (the dataset's IDs are the subjects); "
           "remove it");
  const YAML::Node dnode = subj.at("dataset").value;
  const std::string dpath =
      L.scalar_string(dnode, "subjects.dataset", "the path of a NONMEM-format CSV file");
  // Relative paths are relative to the run file's folder.
  std::string resolved = dpath;
  if (!dpath.empty() && dpath[0] != '/') {
    const std::size_t slash = L.file_.rfind('/');
    if (slash != std::string::npos) resolved = L.file_.substr(0, slash + 1) + dpath;
  }
  std::vector<std::pair<std::string, std::string>> names;
  for (const ParameterInfo& pi : model.parameters) {
    names.emplace_back(pi.name, pi.name);
    if (!pi.alias.empty()) names.emplace_back(pi.alias, pi.name);
  }
  auto data = std::make_shared<Dataset>(
      read_dataset(resolved, names, static_cast<int>(model.compartments.size())));
  const std::int64_t count = static_cast<std::int64_t>(data->subjects.size());
  p.parameters = ParameterBatch(model_ptr, count);
  std::vector<char> given(model.parameters.size(), 0);
  for (const std::string& c : data->parameter_columns) {
    const int col = parameter_index(model, c);
    if (col < 0) L.fail(dnode, "dataset column " + c + " does not name a parameter of the model");
    given[static_cast<std::size_t>(col)] = 1;
  }
  if (auto it = subj.find("parameters"); it != subj.end()) {
    std::vector<std::string> plain;
    for (const ParameterInfo& pi : model.parameters) {
      plain.push_back(pi.name);
      if (!pi.alias.empty()) plain.push_back(pi.alias);
    }
    auto params = L.entries(it->second.value, "subjects.parameters", plain);
    std::vector<char> seen(model.parameters.size(), 0);
    for (auto& kv : params) {
      const int col = parameter_index(model, kv.first);
      const ParameterInfo& pi = model.parameters[static_cast<std::size_t>(col)];
      if (seen[static_cast<std::size_t>(col)])
        L.fail(kv.second.key, "parameter " + pi.name + " is given twice (as " + pi.name +
                                  " and as its alias " + pi.alias + "); give one of them");
      seen[static_cast<std::size_t>(col)] = 1;
      const std::string what = "subjects.parameters." + kv.first;
      const YAML::Node& v = kv.second.value;
      given[static_cast<std::size_t>(col)] = 1;
      if (v.IsSequence() && static_cast<std::int64_t>(v.size()) != count)
        L.fail(v, what + " has " + std::to_string(v.size()) + " values, but the dataset has " +
                      std::to_string(count) +
                      " subjects (IDs); give one value per subject, in dataset order");
      store_parameter(L, v, what, pi, p.parameters);
    }
  }
  for (std::size_t c = 0; c < model.parameters.size(); ++c) {
    if (!given[c] && std::isnan(model.parameters[c].default_value) && !model.in_alternative[c])
      L.fail(dnode,
             "missing parameter '" + model.parameters[c].name +
                 "': give it in subjects.parameters or as a dataset column (required by model " +
                 model.name + ")");
  }
  if (auto it = top.find("output"); it != top.end()) {
    auto out = L.entries(it->second.value, "output", {"path", "times"});
    spec.output_line = it->second.key.Mark().line + 1;
    spec.output_column = it->second.key.Mark().column + 1;
    if (auto t = out.find("times"); t != out.end())
      L.fail(t->second.key,
             "output.times is not used with subjects.dataset (one row per observation record); "
             "remove it");
    if (auto pth = out.find("path"); pth != out.end()) {
      spec.output_path =
          L.scalar_string(pth->second.value, "output.path", "a file path ending in .csv");
      const std::string& op = spec.output_path;
      if (op.size() < 5 || op.compare(op.size() - 4, 4, ".csv") != 0)
        L.fail(pth->second.value, "output.path is \"" + op + "\", but must end in .csv");
      spec.output_path_line = pth->second.value.Mark().line + 1;
      spec.output_path_column = pth->second.value.Mark().column + 1;
    }
  }
  if (spec.options.device == Device::Cuda) {
    const YAML::Mark& m = engine_mark;
    std::string where = L.file_;
    if (!m.is_null())
      where += ":" + std::to_string(m.line + 1) + ":" + std::to_string(m.column + 1);
    throw BackendUnavailable(
        where + ": engine.device: device 'cuda' has no path for datasets yet; use cpu or auto");
  }
  // Per-record parameter checks (values from the dataset): reported at the dataset's line.
  try {
    check_dataset(*data, p.model, p.parameters, spec.options);
  } catch (const DomainError& e) {
    std::string msg = e.what();
    if (msg.rfind("simulate_dataset: ", 0) == 0) msg = msg.substr(18);
    throw ConfigError("", 0, 0, msg);
  }
  spec.dataset = std::move(data);
}

}  // namespace

RunSpec parse_run_config(const std::string& text, const std::string& file) {
  Loader L(file);
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
  const std::vector<std::string> top_keys = {"model",    "discretization", "time",
                                             "subjects", "doses",          "output",
                                             "engine",   "precision",      "sweep"};
  spec.text = text;
  auto top = L.entries(root, "the run file", top_keys);
  auto require = [&](std::map<std::string, Loader::Entry>& m, const std::string& key,
                     const YAML::Node& parent, const std::string& ctx) -> Loader::Entry& {
    auto it = m.find(key);
    if (it == m.end()) L.fail(parent, "missing key '" + key + "' in " + ctx);
    return it->second;
  };

  // model
  Problem& p = spec.problem;
  std::shared_ptr<const ModelInfo> model_ptr = ParameterBatch(p.model, 0).info_ptr();
  if (auto it = top.find("model"); it != top.end()) {
    const YAML::Node& mv = it->second.value;
    if (mv.IsMap()) {
      // model: {linear: {compartments: [...], flows: [...], eliminations: [...], observe: name}}
      auto outer = L.entries(mv, "model", {"linear"});
      if (outer.find("linear") == outer.end())
        L.fail(mv, "model must be a model name (" + model_names() + ") or {linear: {...}}");
      const YAML::Node lin = outer.at("linear").value;
      auto e = L.entries(lin, "model.linear", {"compartments", "flows", "eliminations", "observe"});
      auto names_of = [&](const YAML::Node& seq, const std::string& what) {
        std::vector<std::string> v;
        if (!seq.IsSequence() || seq.size() == 0)
          L.fail(seq, what + " must be a non-empty list of compartment names");
        for (std::size_t i = 0; i < seq.size(); ++i)
          v.push_back(L.scalar_string(seq[i], what + "[" + std::to_string(i + 1) + "]",
                                      "a compartment name"));
        return v;
      };
      auto cit = e.find("compartments");
      if (cit == e.end()) L.fail(lin, "missing key 'compartments' in model.linear");
      const std::vector<std::string> comps =
          names_of(cit->second.value, "model.linear.compartments");
      std::vector<FlowSpec> flows;
      auto read_flows = [&](const char* key, bool elimination) {
        auto f = e.find(key);
        if (f == e.end()) return;
        const YAML::Node& seq = f->second.value;
        if (!seq.IsSequence()) L.fail(seq, std::string("model.linear.") + key + " must be a list");
        for (std::size_t i = 0; i < seq.size(); ++i) {
          const std::string ctx =
              std::string("model.linear.") + key + "[" + std::to_string(i + 1) + "]";
          auto fe = elimination ? L.entries(seq[i], ctx, {"from", "rate"})
                                : L.entries(seq[i], ctx, {"from", "to", "rate"});
          for (const char* need : elimination ? std::vector<const char*>{"from", "rate"}
                                              : std::vector<const char*>{"from", "to", "rate"})
            if (fe.find(need) == fe.end())
              L.fail(seq[i], "missing key '" + std::string(need) + "' in " + ctx);
          FlowSpec spec_flow;
          spec_flow.from =
              L.scalar_string(fe.at("from").value, ctx + ".from", "a compartment name");
          if (!elimination)
            spec_flow.to = L.scalar_string(fe.at("to").value, ctx + ".to", "a compartment name");
          spec_flow.parameter =
              L.scalar_string(fe.at("rate").value, ctx + ".rate", "a parameter name");
          flows.push_back(spec_flow);
        }
      };
      read_flows("flows", false);
      read_flows("eliminations", true);
      std::string observe;
      if (auto o = e.find("observe"); o != e.end())
        observe = L.scalar_string(o->second.value, "model.linear.observe", "a compartment name");
      try {
        model_ptr = make_linear_model(comps, flows, observe);
      } catch (const InvalidArgument& ex) {
        std::string msg = ex.what();
        if (msg.rfind("linear model: ", 0) == 0) msg = msg.substr(14);
        L.fail(lin, "model.linear: " + msg);
      }
      p.model = ModelKind::Linear;
    } else {
      const std::string name =
          L.scalar_string(mv, "model", "one of " + model_names() + ", or {linear: ...}");
      if (name == "linear")
        L.fail(mv,
               "model linear needs its compartments and flows: model: {linear: {compartments: "
               "[...], flows: [...], eliminations: [...]}}");
      try {
        p.model = model_from_string(name);
      } catch (const InvalidArgument&) {
        L.fail(mv, "model is \"" + name + "\", but must be one of " + model_names() +
                       ", or {linear: ...}");
      }
      model_ptr = ParameterBatch(p.model, 0).info_ptr();
    }
  }
  const ModelInfo& model = *model_ptr;

  if (auto it = top.find("discretization"); it != top.end()) {
    const std::string d = L.scalar_string(it->second.value, "discretization", "exact or euler");
    if (d == "exact")
      p.discretization = Discretization::Exact;
    else if (d == "euler")
      p.discretization = Discretization::Euler;
    else
      L.fail(it->second.value, "discretization is \"" + d + "\", but must be exact or euler");
  }

  // precision and engine (needed for the size check below)
  if (auto it = top.find("precision"); it != top.end()) {
    const std::string s = L.scalar_string(it->second.value, "precision", "float64 or float32");
    if (s == "float64")
      spec.options.precision = Precision::Float64;
    else if (s == "float32")
      spec.options.precision = Precision::Float32;
    else
      L.fail(it->second.value, "precision is \"" + s + "\", but must be float64 or float32");
  }
  // Where an unavailable method/device is reported. A position, not a YAML::Node: assigning a
  // YAML::Node that already refers to a node rebinds that node (yaml-cpp's Node::operator=
  // makes the referenced node share the right-hand side's data), so a Node variable here would
  // rewrite the document it points into.
  YAML::Mark engine_mark = YAML::Mark::null_mark();
  if (auto it = top.find("engine"); it != top.end()) {
    engine_mark = it->second.value.Mark();
    auto eng = L.entries(it->second.value, "engine", {"method", "device"});
    if (auto m = eng.find("method"); m != eng.end()) {
      const std::string s =
          L.scalar_string(m->second.value, "engine.method", "one of auto, scan, batched, power");
      engine_mark = m->second.value.Mark();
      try {
        spec.options.method = method_from_string(s);
      } catch (const InvalidArgument&) {
        L.fail(m->second.value,
               "engine.method is \"" + s + "\", but must be one of auto, scan, batched, power");
      }
    }
    if (auto d = eng.find("device"); d != eng.end()) {
      const std::string s =
          L.scalar_string(d->second.value, "engine.device", "one of auto, cpu, cuda");
      if (s != "auto" && s != "cpu") engine_mark = d->second.value.Mark();
      try {
        spec.options.device = device_from_string(s);
      } catch (const InvalidArgument&) {
        L.fail(d->second.value,
               "engine.device is \"" + s + "\", but must be one of auto, cpu, cuda");
      }
    }
  }

  // subjects.dataset: a NONMEM dataset replaces the grid, the doses and the output times.
  if (auto it = top.find("subjects");
      it != top.end() && it->second.value.IsMap() && it->second.value["dataset"]) {
    parse_dataset_run(L, top, spec, model_ptr, engine_mark);
    return spec;
  }

  // time
  auto& time_e = require(top, "time", root, "the run file");
  auto time = L.entries(time_e.value, "time", {"dt", "steps"});
  const YAML::Node dt_node = require(time, "dt", time_e.value, "time").value;
  p.grid.dt = L.finite(dt_node, "time.dt", "finite and > 0", true);
  const YAML::Node steps_node = require(time, "steps", time_e.value, "time").value;
  p.grid.steps = L.integer(steps_node, "time.steps", 1, 1'000'000'000);
  if (!std::isfinite(p.grid.time(p.grid.steps)))
    L.fail(steps_node, "time.steps * time.dt is not finite; use fewer steps or a smaller dt");
  const double t_end = p.grid.time(p.grid.steps);

  // subjects
  auto& subj_e = require(top, "subjects", root, "the run file");
  auto subj = L.entries(subj_e.value, "subjects", {"count", "parameters", "population"});
  if (auto pit = subj.find("population"); pit != subj.end()) {
    for (const char* k : {"parameters", "count"})
      if (auto it = subj.find(k); it != subj.end())
        L.fail(it->second.key, "subjects." + std::string(k) +
                                   " cannot be given with subjects.population (the population's "
                                   "count and typical values say it); remove it");
    spec.population = parse_population(L, pit->second.value, model, file);
  }
  // With a population, subjects.parameters is absent: an empty mapping stands in for it.
  // Initialised once, never assigned: assigning a Loader::Entry would assign its YAML::Nodes,
  // which rebinds the nodes they refer to (see engine_mark above).
  const Loader::Entry params_e = spec.population
                                     ? Loader::Entry{subj_e.key, YAML::Node(YAML::NodeType::Map)}
                                     : require(subj, "parameters", subj_e.value, "subjects");
  std::vector<std::string> accepted;
  for (const ParameterInfo& pi : model.parameters)
    accepted.push_back(pi.alias.empty() ? pi.name : pi.name + " (alias " + pi.alias + ")");
  if (!params_e.value.IsMap())
    L.fail(params_e.value, "subjects.parameters must be a mapping of parameter names (" +
                               join(accepted) + ") to numbers or lists");
  std::vector<ParamSource> sources;
  std::vector<std::string> plain_names;
  for (const ParameterInfo& pi : model.parameters) {
    plain_names.push_back(pi.name);
    if (!pi.alias.empty()) plain_names.push_back(pi.alias);
  }
  auto params = L.entries(params_e.value, "subjects.parameters", plain_names);
  std::int64_t list_len = -1;
  int list_line = 0;  // 1-based line of the first list (a position: see engine_mark above)
  std::string list_key;
  std::vector<int> seen(model.parameters.size(), 0);
  std::vector<std::pair<std::string, Loader::Entry>> in_order;  // document order
  for (auto it = params_e.value.begin(); it != params_e.value.end(); ++it)
    in_order.emplace_back(it->first.Scalar(), params.at(it->first.Scalar()));
  for (auto& kv : in_order) {
    const int col = parameter_index(model, kv.first);
    if (seen[static_cast<std::size_t>(col)]) {
      const ParameterInfo& pi = model.parameters[static_cast<std::size_t>(col)];
      L.fail(kv.second.key, "parameter " + pi.name + " is given twice (as " + pi.name +
                                " and as its alias " + pi.alias + "); give one of them");
    }
    seen[static_cast<std::size_t>(col)] = 1;
    const YAML::Node& v = kv.second.value;
    if (v.IsSequence()) {
      const std::int64_t len = static_cast<std::int64_t>(v.size());
      if (len == 0)
        L.fail(v, "subjects.parameters." + kv.first +
                      " is an empty list; give a number or one value per subject");
      if (list_len >= 0 && len != list_len)
        L.fail(v, "subjects.parameters." + kv.first + " has " + std::to_string(len) +
                      " values, but subjects.parameters." + list_key + " (line " +
                      std::to_string(list_line) + ") has " + std::to_string(list_len) +
                      " values; every list needs one value per subject");
      if (list_len < 0) {
        list_len = len;
        list_line = v.Mark().line + 1;
        list_key = kv.first;
      }
    } else if (!v.IsScalar()) {
      L.fail(v, "subjects.parameters." + kv.first + " must be a number or a list of numbers");
    }
    sources.push_back({col, kv.second.key, v});
  }
  for (std::size_t c = 0; c < model.parameters.size(); ++c) {
    if (!spec.population && !seen[c] && std::isnan(model.parameters[c].default_value) &&
        !model.in_alternative[c])
      L.fail(params_e.value, "missing parameter '" + model.parameters[c].name +
                                 "' in subjects.parameters (required by model " + model.name + ")");
  }
  std::int64_t count = list_len > 0 ? list_len : 1;
  if (spec.population) {
    std::fill(seen.begin(), seen.end(), 1);  // the typical values were checked above
  }
  if (auto it = subj.find("count"); it != subj.end()) {
    count = L.integer(it->second.value, "subjects.count", 1, 1'000'000'000'000);
    if (list_len >= 0 && count != list_len)
      L.fail(it->second.value, "subjects.count is " + std::to_string(count) +
                                   ", but the parameter lists have " + std::to_string(list_len) +
                                   " values; they must agree");
  }

  // output (before the size check: output.times decides the size)
  // `output` may be left out when the path comes from --output (times then default to all).
  std::map<std::string, Loader::Entry> out;
  if (auto it = top.find("output"); it != top.end()) {
    out = L.entries(it->second.value, "output", {"path", "times", "trajectories", "summaries"});
    spec.output_line = it->second.key.Mark().line + 1;
    spec.output_column = it->second.key.Mark().column + 1;
  }
  if (auto it = out.find("path"); it != out.end()) {
    spec.output_path = L.scalar_string(it->second.value, "output.path",
                                       "a file path ending in .csv, .h5 or .hdf5");
    const std::string& op = spec.output_path;
    if (!is_result_path(op))
      L.fail(it->second.value, "output.path is \"" + op + "\", but must end in .csv, .h5 or .hdf5");
    spec.output_path_line = it->second.value.Mark().line + 1;
    spec.output_path_column = it->second.value.Mark().column + 1;
  }
  if (auto it = out.find("times"); it != out.end()) {
    const YAML::Node& tv = it->second.value;
    if (tv.IsScalar() && tv.Tag() != "!" && tv.Scalar() == "all") {
      p.output = OutputTimes::every_step();
    } else if (tv.IsSequence()) {
      if (tv.size() == 0)
        L.fail(tv, "output.times is an empty list; give all or a list of grid times");
      std::vector<std::int64_t> steps;
      for (std::size_t i = 0; i < tv.size(); ++i) {
        const std::string what = "output.times[" + std::to_string(i + 1) + "]";
        const double t = L.finite(tv[i], what, "finite and >= 0", false);
        const std::int64_t s = p.grid.index_of(t);
        if (s < 0)
          L.fail(tv[i], what + " is " + tv[i].Scalar() +
                            ", but must lie on the time grid (a multiple of time.dt = " +
                            format_value(p.grid.dt) + ")");
        if (t > t_end * (1 + 1e-12) + 1e-12)
          L.fail(tv[i], what + " is " + tv[i].Scalar() + ", but must be <= the last grid time " +
                            format_value(t_end));
        if (!steps.empty() && s <= steps.back())
          L.fail(tv[i],
                 what + " is " + tv[i].Scalar() + ", but output.times must be strictly increasing");
        steps.push_back(s);
      }
      p.output = OutputTimes::at_steps(std::move(steps));
    } else {
      L.fail(tv, "output.times must be all or a list of grid times");
    }
  }

  if (auto it = out.find("trajectories"); it != out.end()) {
    const YAML::Node& v = it->second.value;
    if (!v.IsScalar() || v.Tag() == "!" || (v.Scalar() != "true" && v.Scalar() != "false"))
      L.fail(v, "output.trajectories must be true or false");
    spec.stream.trajectories = v.Scalar() == "true";
    if (!spec.stream.trajectories) spec.stream.summaries = true;  // something must be written
  }
  if (auto it = out.find("summaries"); it != out.end()) {
    parse_summaries(L, it->second.value, spec.stream);
    if (!spec.stream.summaries && !spec.stream.trajectories)
      L.fail(it->second.value,
             "output.summaries is false and output.trajectories is false: nothing to write");
  }
  if (auto it = top.find("sweep"); it != top.end())
    spec.sweep = parse_sweep(L, it->second.value, model);
  if (spec.streaming()) {
    const long double rows =
        static_cast<long double>(spec.sweep.points()) *
        (spec.population ? static_cast<long double>(spec.population->count) *
                               static_cast<long double>(spec.population->replicates)
                         : static_cast<long double>(count));
    if (rows > 1e12L)
      L.fail(subj_e.value, "the run has " + format_value(static_cast<double>(rows)) +
                               " subjects (replicates x sweep points x subjects), more than 10^12");
  }

  // Size check before allocating anything per subject (streamed runs hold one chunk at a time).
  if (!spec.streaming()) {
    Problem sizing;
    sizing.model = p.model;
    sizing.grid = p.grid;
    sizing.output = p.output;
    SimulateOptions so = spec.options;
    so.concentrations = false;  // the CLI writes concentrations at output time
    const std::uint64_t per_subject = result_bytes(
        [&] {
          Problem one = sizing;
          one.parameters = ParameterBatch(model_ptr, 1);
          return one;
        }(),
        so);
    // Result plus the per-subject parameter table.
    const long double need = (static_cast<long double>(per_subject) +
                              8.0L * static_cast<long double>(model.parameters.size())) *
                             static_cast<long double>(count);
    const std::uint64_t limit = result_byte_limit(so);
    if (need > static_cast<long double>(limit)) {
      auto it = subj.find("count");
      const YAML::Node where = it != subj.end() ? it->second.value : steps_node;
      L.fail(where,
             "the run is too large to hold in memory: " + std::to_string(count) + " subjects x " +
                 std::to_string(p.output.all ? p.grid.steps + 1
                                             : static_cast<std::int64_t>(p.output.steps.size())) +
                 " output times need " +
                 format_value(static_cast<double>(need / (1024.0L * 1024 * 1024))) +
                 " GiB, but only " +
                 format_value(static_cast<double>(limit) / (1024.0 * 1024 * 1024)) +
                 " GiB are available; use fewer subjects, fewer steps or sparse output.times");
    }
  } else {
    // A streamed run holds one result chunk at a time, but the whole per-subject parameter
    // table (count rows; a population keeps one row of typical values).
    const long double need =
        8.0L * static_cast<long double>(model.parameters.size()) * static_cast<long double>(count);
    const std::uint64_t limit = result_byte_limit(spec.options);
    if (need > static_cast<long double>(limit)) {
      auto it = subj.find("count");
      L.fail(it != subj.end() ? it->second.value : subj_e.value,
             "the run is too large to hold in memory: the parameters of " + std::to_string(count) +
                 " subjects need " +
                 format_value(static_cast<double>(need / (1024.0L * 1024 * 1024))) +
                 " GiB, but only " +
                 format_value(static_cast<double>(limit) / (1024.0 * 1024 * 1024)) +
                 " GiB are available; use fewer subjects or subjects.population");
    }
  }

  p.parameters = ParameterBatch(model_ptr, count);
  if (spec.population) {
    for (std::size_t c = 0; c < model.parameters.size(); ++c)
      if (!std::isnan(spec.population->typical[c]))
        p.parameters.set(model.parameters[c].name, 0, spec.population->typical[c]);
  }
  for (const ParamSource& src : sources) {
    const ParameterInfo& pi = model.parameters[static_cast<std::size_t>(src.column)];
    const std::string what = "subjects.parameters." + src.key.Scalar();
    if (pi.role == ParameterRole::Bioavailability || pi.role == ParameterRole::Lag) {
      // A grid run gives every subject the same doses: only the defaults make sense here.
      auto is_default = [&](const YAML::Node& v) {
        return v.IsScalar() && v.Tag() != "!" && L.number(v, what) == pi.default_value;
      };
      bool ok = src.value.IsSequence() ? true : is_default(src.value);
      for (std::size_t i = 0; src.value.IsSequence() && i < src.value.size(); ++i)
        ok = ok && is_default(src.value[i]);
      if (!ok)
        L.fail(src.value, what + " must be " + format_value(pi.default_value) +
                              " in a run on a time grid (every subject gets the same doses there); "
                              "use subjects.dataset for per-subject bioavailability and lag");
    }
    store_parameter(L, src.value, what, pi, p.parameters);
  }
  // Micro constants or clearances, per subject (the first subject that breaks a rule is named).
  for (std::int64_t s = 0; s < p.parameters.subjects(); ++s) {
    const std::string msg = check_parameters(model, p.parameters.row(s));
    if (!msg.empty())
      L.fail(params_e.value,
             "subjects.parameters: " +
                 (p.parameters.subjects() > 1 ? "subject " + std::to_string(s + 1) + ": "
                                              : std::string()) +
                 msg);
  }

  // doses
  if (auto it = top.find("doses"); it != top.end()) {
    const YAML::Node& dl = it->second.value;
    if (dl.IsNull()) {
      // "doses:" with nothing: no doses
    } else if (!dl.IsSequence()) {
      L.fail(dl, "doses must be a list of doses, each {compartment, time, amount, ...}");
    } else {
      std::vector<std::string> cnames = model.compartments;
      for (std::size_t i = 0; i < dl.size(); ++i) {
        const std::string ctx = "doses[" + std::to_string(i + 1) + "]";
        const YAML::Node& dn = dl[i];
        auto d = L.entries(
            dn, ctx, {"compartment", "time", "amount", "rate", "duration", "every", "repeat"});
        DoseEvent ev;
        const YAML::Node cn = require(d, "compartment", dn, ctx).value;
        const std::string cname =
            L.scalar_string(cn, ctx + ".compartment", "one of " + join(cnames));
        ev.compartment = compartment_index(model, cname);
        if (ev.compartment < 0)
          L.fail(cn, ctx + ".compartment is \"" + cname + "\", but must be one of " + join(cnames));
        const YAML::Node tn = require(d, "time", dn, ctx).value;
        ev.time = L.finite(tn, ctx + ".time", "finite and >= 0", false);
        if (p.grid.index_of(ev.time) < 0)
          L.fail(tn, ctx + ".time is " + tn.Scalar() +
                         ", but must lie on the time grid (a multiple of time.dt = " +
                         format_value(p.grid.dt) + ")");
        ev.amount = L.finite(require(d, "amount", dn, ctx).value, ctx + ".amount",
                             "finite and >= 0", false);
        auto r = d.find("rate");
        auto du = d.find("duration");
        if (r != d.end() && du != d.end())
          L.fail(du->second.key,
                 ctx + " gives both rate and duration, but an infusion takes exactly one of them");
        if (r != d.end())
          ev.rate = L.finite(r->second.value, ctx + ".rate", "finite and > 0", true);
        if (du != d.end())
          ev.duration = L.finite(du->second.value, ctx + ".duration", "finite and > 0", true);
        auto ev_it = d.find("every");
        auto rep_it = d.find("repeat");
        if ((ev_it == d.end()) != (rep_it == d.end())) {
          const auto& given = ev_it != d.end() ? ev_it->second : rep_it->second;
          L.fail(given.key, ctx + " gives " + given.key.Scalar() + " without " +
                                (ev_it != d.end() ? "repeat" : "every") +
                                "; repeated doses need both (every: interval, repeat: number of "
                                "additional doses)");
        }
        if (ev_it != d.end()) {
          ev.every = L.finite(ev_it->second.value, ctx + ".every", "finite and > 0", true);
          if (p.grid.index_of(ev.every) < 0)
            L.fail(ev_it->second.value,
                   ctx + ".every is " + ev_it->second.value.Scalar() +
                       ", but must be a multiple of time.dt = " + format_value(p.grid.dt));
          ev.repeat = L.integer(rep_it->second.value, ctx + ".repeat", 0, 100'000'000);
        }
        p.doses.push_back(ev);
      }
    }
  }

  // Euler: K = I + A dt must be non-negative; reported at time.dt.
  if (p.discretization == Discretization::Euler) {
    const int n = static_cast<int>(model.compartments.size());
    std::vector<double> a(static_cast<std::size_t>(n * n));
    for (std::int64_t s = 0; s < p.parameters.subjects(); ++s) {
      rate_matrix(model, p.parameters.row(s), a.data());
      for (int r = 0; r < n; ++r) {
        const double k = 1.0 + a[static_cast<std::size_t>(r * n + r)] * p.grid.dt;
        if (k < 0.0)
          L.fail(dt_node,
                 "time.dt is " + dt_node.Scalar() +
                     ", but with discretization euler it must keep 1 + A*dt >= 0: subject " +
                     std::to_string(s + 1) + " has K[" +
                     model.compartments[static_cast<std::size_t>(r)] + "][" +
                     model.compartments[static_cast<std::size_t>(r)] + "] = " + format_value(k) +
                     "; use a smaller dt or discretization: exact");
      }
    }
  }

  // Availability of the requested path: exit status 3, not 2.
  {
    std::string why;
    if (!is_backend_available(spec.options.method, spec.options.device, &why)) {
      const YAML::Mark& m = engine_mark;
      std::string where = file;
      if (!m.is_null())
        where += ":" + std::to_string(m.line + 1) + ":" + std::to_string(m.column + 1);
      throw BackendUnavailable(where + ": engine." +
                               (spec.options.device == Device::Cuda ? "device" : "method") + ": " +
                               why);
    }
  }

  // Backstop: everything simulate() checks (same rules; nothing above should let a bad value by).
  try {
    SimulateOptions so = spec.options;
    so.concentrations = false;
    check(p, so);
  } catch (const BackendUnavailable&) {
    throw;
  } catch (const Error& e) {
    std::string msg = e.what();
    if (msg.rfind("simulate: ", 0) == 0) msg = msg.substr(10);
    throw ConfigError(file, 0, 0, msg);
  }
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
  return parse_run_config(text, path);
}

}  // namespace pkscan::config
