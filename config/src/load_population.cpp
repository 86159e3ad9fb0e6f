// subjects.population (typical values, between-subject variability, covariates from a CSV
// file) and sweep (a parameter grid): the subjects of streamed runs.
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <pkscan/error.hpp>
#include <pkscan/output/output.hpp>
#include <pkscan/population.hpp>
#include <string>
#include <vector>

#include "load_sections.hpp"

namespace pkscan::config::detail {

namespace {

// Reads the covariates CSV of a population: a header of names, then one row of numbers per
// subject. Errors name the file, the line and the column.
void read_covariates(const std::string& path, PopulationSpec& pop, std::int64_t max_rows) {
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

}  // namespace

void parse_population(const Loader& L, const YAML::Node& node,
                      const std::shared_ptr<const ModelInfo>& model_ptr, RunSpec& spec,
                      FieldTable& fields, const Dataset* design, std::int64_t arms_count) {
  const ModelInfo& model = *model_ptr;
  auto pop_keys = L.entries(
      node, "subjects.population",
      {"count", "seed", "replicates", "typical", "iiv", "iov", "covariates", "residual", "lloq"});
  const std::string ctx = "subjects.population";
  auto need = [&](const std::string& k) -> const Loader::Entry& {
    auto it = pop_keys.find(k);
    if (it == pop_keys.end()) L.fail(node, "missing key '" + k + "' in " + ctx);
    return it->second;
  };
  if (design) {
    // With a dataset, count resamples its subjects (DesignRun::count).
    if (auto it = pop_keys.find("count"); it != pop_keys.end())
      spec.design_count = L.integer(it->second.value, ctx + ".count", 1, 1'000'000'000);
  } else if (auto it = pop_keys.find("iov"); it != pop_keys.end()) {
    L.fail(it->second.key, ctx +
                               ".iov needs subjects.dataset (the occasions are a column of the "
                               "dataset); remove it, or simulate on a dataset");
  }
  std::int64_t count = arms_count;
  if (design) {
    count = static_cast<std::int64_t>(design->subjects.size());
  } else if (arms_count == 0 || pop_keys.count("count")) {
    count = L.integer(need("count").value, ctx + ".count", 1, 1'000'000'000'000);
    if (arms_count > 0 && count != arms_count)
      L.fail(pop_keys.at("count").value,
             ctx + ".count is " + std::to_string(count) + ", but the arms' counts add up to " +
                 std::to_string(arms_count) + "; give one of them, or make them agree");
  }
  const auto seed = static_cast<std::uint64_t>(
      L.integer(need("seed").value, ctx + ".seed", 0, (std::int64_t{1} << 53)));
  // Typical values at the model's defaults (NaN for the unused one of micro constants /
  // clearances) where not given.
  PopulationSpec& pop = spec.population.emplace(model_ptr, count, seed);
  if (auto it = pop_keys.find("replicates"); it != pop_keys.end())
    spec.replicates = L.integer(it->second.value, ctx + ".replicates", 1, 1'000'000);
  // Residual error: standard deviations, or NONMEM's $SIGMA variances with `variances: true`.
  if (auto it = pop_keys.find("residual"); it != pop_keys.end()) {
    const YAML::Node& rn = it->second.value;
    const std::string rctx = ctx + ".residual";
    auto r = L.entries(rn, rctx, {"additive", "proportional", "exponential", "variances"});
    bool variances = false;
    if (auto v = r.find("variances"); v != r.end()) {
      const YAML::Node& b = v->second.value;
      if (!b.IsScalar() || b.Tag() == "!" || (b.Scalar() != "true" && b.Scalar() != "false"))
        L.fail(b, rctx + ".variances must be true or false");
      variances = b.Scalar() == "true";
    }
    ResidualError e;
    bool any = false;
    for (auto [key, sd] : {std::pair<const char*, double*>{"additive", &e.additive},
                           {"proportional", &e.proportional},
                           {"exponential", &e.exponential}}) {
      auto v = r.find(key);
      if (v == r.end()) continue;
      const std::string what = rctx + "." + key;
      const double x = L.finite(v->second.value, what, "finite and >= 0", false);
      *sd = variances ? std::sqrt(x) : x;
      any = true;
      fields.emplace(std::string("residual.") + key, Located{v->second.value, what, false});
    }
    if (!any)
      L.fail(rn, rctx + " needs additive, proportional or exponential (standard deviations)");
    fields.emplace("residual", Located{it->second.key, rctx, false});
    spec.residual = e;
  }
  if (auto it = pop_keys.find("lloq"); it != pop_keys.end()) {
    const YAML::Node& v = it->second.value;
    char* end = nullptr;
    // With a dataset, a name is the column that holds each observation's LLOQ.
    if (design && v.IsScalar() && !v.Scalar().empty() &&
        (std::strtod(v.Scalar().c_str(), &end), end != v.Scalar().c_str() + v.Scalar().size())) {
      spec.lloq_column = v.Scalar();
      fields.emplace("lloq_column", Located{v, ctx + ".lloq", false});
    } else {
      spec.lloq = L.finite(
          v, ctx + ".lloq",
          design ? "finite and >= 0, or the name of a dataset column" : "finite and >= 0", false);
    }
    fields.emplace("lloq", Located{v, ctx + ".lloq", false});
  }

  // typical values
  const YAML::Node& tn = need("typical").value;
  std::vector<std::string> names;
  for (const ParameterInfo& pi : model.parameters) {
    names.push_back(pi.name);
    if (!pi.alias.empty()) names.push_back(pi.alias);
  }
  auto typ = L.entries(tn, ctx + ".typical", names);
  std::vector<char> given(model.parameters.size(), 0);
  for (auto it = tn.begin(); it != tn.end(); ++it) {
    const int col = parameter_index(model, it->first.Scalar());
    const ParameterInfo& pi = model.parameters[static_cast<std::size_t>(col)];
    const std::string what = ctx + ".typical." + it->first.Scalar();
    if (given[static_cast<std::size_t>(col)])
      L.fail(it->first, "parameter " + pi.name + " is given twice (as " + pi.name +
                            " and as its alias " + pi.alias + "); give one of them");
    given[static_cast<std::size_t>(col)] = 1;
    if (!it->second.IsScalar()) L.fail(it->second, what + " must be a number (the typical value)");
    pop.typical[static_cast<std::size_t>(col)] = L.parameter(it->second, what);
    for (const char* prefix : {"typical[", "population.typical["})
      fields.emplace(prefix + std::to_string(col) + "]", Located{it->second, what});
  }
  // A typical value not given: its errors point at the typical mapping (emplace keeps the
  // entries of the values given).
  for (std::size_t c = 0; c < model.parameters.size(); ++c)
    for (const char* prefix : {"typical[", "population.typical["})
      fields.emplace(prefix + std::to_string(c) + "]",
                     Located{tn, ctx + ".typical." + model.parameters[c].name, true, true});

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
        for (int c : pop.iiv)
          if (c == col) L.fail(bn[i], ctx + ".iiv.block names " + bn[i].Scalar() + " twice");
        const Located at{bn[i], ctx + ".iiv.block[" + std::to_string(i + 1) + "]"};
        fields.emplace("iiv[" + std::to_string(i) + "]", at);
        fields.emplace("population.iiv[" + std::to_string(i) + "]", at);
        pop.iiv.push_back(col);
      }
      const std::size_t m = pop.iiv.size();
      const YAML::Node& on = oi->second.value;
      if (!on.IsSequence() || on.size() != m * (m + 1) / 2)
        L.fail(on, ctx + ".iiv.omega must be a list of " + std::to_string(m * (m + 1) / 2) +
                       " numbers: the lower triangle of the " + std::to_string(m) + "x" +
                       std::to_string(m) + " covariance, row by row" +
                       (on.IsSequence() ? ", but has " + std::to_string(on.size()) : ""));
      pop.omega = Eigen::MatrixXd::Zero(m, m);
      std::size_t k = 0;
      for (std::size_t r = 0; r < m; ++r) {
        for (std::size_t c = 0; c <= r; ++c, ++k) {
          const std::string what = ctx + ".iiv.omega[" + std::to_string(k + 1) + "]";
          const double v = L.number(on[k], what);
          fields.emplace("omega[" + std::to_string(r) + "][" + std::to_string(c) + "]",
                         Located{on[k], what});
          pop.omega(r, c) = pop.omega(c, r) = v;
        }
      }
      fields.emplace("omega", Located{on, ctx + ".iiv.omega"});
    } else {
      std::vector<YAML::Node> values;
      for (const auto& kv : iv) {
        const YAML::Node k = kv.first;
        values.push_back(kv.second);
        const int col = named_parameter(L, model, k, ctx + ".iiv");
        for (int c : pop.iiv)
          if (c == col) L.fail(k, ctx + ".iiv names " + k.Scalar() + " twice");
        const std::string a = std::to_string(pop.iiv.size());
        fields.emplace("iiv[" + a + "]", Located{k, ctx + ".iiv." + k.Scalar()});
        fields.emplace("population.iiv[" + a + "]", Located{k, ctx + ".iiv." + k.Scalar()});
        fields.emplace("omega[" + a + "][" + a + "]",
                       Located{kv.second, ctx + ".iiv." + k.Scalar()});
        pop.iiv.push_back(col);
      }
      const std::size_t m = pop.iiv.size();
      pop.omega = Eigen::MatrixXd::Zero(m, m);
      for (std::size_t k = 0; k < m; ++k)
        pop.omega(k, k) = L.number(
            values[k], ctx + ".iiv." + model.parameters[static_cast<std::size_t>(pop.iiv[k])].name);
      fields.emplace("omega", Located{iv, ctx + ".iiv"});
    }
  }

  // covariates: {file: CSV, effects: [{parameter, covariate, type, coefficient, reference}]};
  // with a dataset, {effects: [...]} on its columns.
  if (auto it = pop_keys.find("covariates"); it != pop_keys.end()) {
    const YAML::Node& cn = it->second.value;
    auto cv = L.entries(cn, ctx + ".covariates", {"file", "effects"});
    auto fi = cv.find("file");
    if (design && fi != cv.end())
      L.fail(fi->second.key, ctx +
                                 ".covariates.file is not used with subjects.dataset (the "
                                 "covariates are the dataset's columns); remove it");
    if (!design && fi == cv.end()) L.fail(cn, "missing key 'file' in " + ctx + ".covariates");
    if (!design) {
      const std::string path =
          L.resolve(L.scalar_string(fi->second.value, ctx + ".covariates.file",
                                    "the path of a CSV file with one row per subject"));
      fields.emplace("covariates", Located{fi->second.value, ctx + ".covariates.file", false});
      if (!std::ifstream(path, std::ios::binary))
        L.fail(fi->second.value,
               ctx + ".covariates.file: cannot read \"" + path + "\": " + std::strerror(errno));
      read_covariates(path, pop, pop.count);
      const std::int64_t rows =
          static_cast<std::int64_t>(pop.covariates.size() / pop.covariate_names.size());
      if (rows != pop.count)
        L.fail(fi->second.value, ctx + ".covariates.file has " + std::to_string(rows) +
                                     " rows, but " + ctx + ".count is " +
                                     std::to_string(pop.count) + "; give one row per subject");
      spec.inputs.push_back(output::InputFile{"subjects.population.covariates.file", path});
    }
    // A design's covariates act through their effects; a grid population's also through doses
    // per unit or by band and as a stratum of the summaries: a file used by none of them would
    // be read for nothing (checked once the doses and summaries are read: covariates_used).
    const auto ei = cv.find("effects");
    const bool no_effects =
        ei == cv.end() || (ei->second.value.IsSequence() && ei->second.value.size() == 0);
    if (no_effects && design)
      L.fail(ei == cv.end() ? it->second.key : ei->second.value,
             ctx +
                 ".covariates has no effects; give effects: [{parameter, covariate, type, "
                 "coefficient, reference}, ...] or remove covariates");
    if (no_effects)
      fields.insert_or_assign(
          "covariates_unused",
          Located{ei == cv.end() ? fi->second.key : ei->second.value, ctx + ".covariates", false});
    const YAML::Node el = no_effects ? YAML::Node(YAML::NodeType::Sequence) : ei->second.value;
    if (!el.IsSequence())
      L.fail(el, ctx +
                     ".covariates.effects must be a list of {parameter, covariate, type, "
                     "coefficient, reference}");
    for (std::size_t i = 0; i < el.size(); ++i) {
      const std::string ectx = ctx + ".covariates.effects[" + std::to_string(i + 1) + "]";
      auto e =
          L.entries(el[i], ectx, {"parameter", "covariate", "type", "coefficient", "reference"});
      for (const char* k : {"parameter", "covariate", "type", "coefficient", "reference"})
        if (e.find(k) == e.end()) L.fail(el[i], "missing key '" + std::string(k) + "' in " + ectx);
      CovariateEffect eff;
      eff.parameter = named_parameter(L, model, e.at("parameter").value, ectx + ".parameter");
      const std::string f = "effects[" + std::to_string(i) + "].";
      for (const char* key : {"parameter", "covariate", "reference"})
        fields.emplace(f + key, Located{e.at(key).value, ectx + "." + key});
      fields.emplace("population." + f + "parameter",
                     Located{e.at("parameter").value, ectx + ".parameter"});
      fields.emplace(f + "theta", Located{e.at("coefficient").value, ectx + ".coefficient"});
      const std::string cov =
          L.scalar_string(e.at("covariate").value, ectx + ".covariate", "a covariate column");
      auto ci = std::find(pop.covariate_names.begin(), pop.covariate_names.end(), cov);
      if (design && ci == pop.covariate_names.end()) {
        // The dataset's column (the library reads it on every record).
        if (std::find(design->covariate_columns.begin(), design->covariate_columns.end(), cov) ==
            design->covariate_columns.end())
          L.fail(e.at("covariate").value,
                 ectx + ".covariate is \"" + cov + "\", but the dataset " + design->file +
                     " has no such column (its columns beyond the NONMEM items and parameters: " +
                     join(design->covariate_columns) + ")");
        pop.covariate_names.push_back(cov);
        ci = pop.covariate_names.end() - 1;
      }
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
      eff.model = type == "power" ? CovariateModel::Power : CovariateModel::Exponential;
      eff.theta = L.number(e.at("coefficient").value, ectx + ".coefficient");
      eff.reference = L.number(e.at("reference").value, ectx + ".reference");
      pop.effects.push_back(eff);
    }
  }

  // iov: {occasion: COLUMN, variances: {name: variance, ...}} or {occasion, block, omega}
  if (auto it = pop_keys.find("iov"); it != pop_keys.end()) {
    const YAML::Node& iv = it->second.value;
    const std::string ictx = ctx + ".iov";
    auto o = L.entries(iv, ictx, {"occasion", "variances", "block", "omega"});
    auto oc = o.find("occasion");
    if (oc == o.end()) L.fail(iv, "missing key 'occasion' in " + ictx + " (the occasion column)");
    spec.occasion = L.scalar_string(oc->second.value, ictx + ".occasion", "a dataset column");
    fields.emplace("occasion", Located{oc->second.value, ictx + ".occasion", false});
    const bool block = o.count("block") || o.count("omega");
    if (block == (o.count("variances") > 0))
      L.fail(iv, ictx +
                     " needs variances: {parameter: variance, ...} or block: [names] with omega: "
                     "[lower triangle] (one of them)");
    if (block) {
      auto bi = o.find("block");
      auto oi = o.find("omega");
      if (bi == o.end() || oi == o.end())
        L.fail(iv, ictx +
                       " needs both block (the parameter names) and omega (the lower "
                       "triangle of their covariance, row by row)");
      const YAML::Node& bn = bi->second.value;
      if (!bn.IsSequence() || bn.size() == 0)
        L.fail(bn, ictx + ".block must be a non-empty list of parameter names");
      for (std::size_t i = 0; i < bn.size(); ++i) {
        if (!bn[i].IsScalar())
          L.fail(bn[i], ictx + ".block[" + std::to_string(i + 1) + "] must be a name");
        const int col = named_parameter(L, model, bn[i], ictx + ".block");
        for (int c : pop.iov)
          if (c == col) L.fail(bn[i], ictx + ".block names " + bn[i].Scalar() + " twice");
        fields.emplace("iov[" + std::to_string(i) + "]",
                       Located{bn[i], ictx + ".block[" + std::to_string(i + 1) + "]"});
        pop.iov.push_back(col);
      }
      const std::size_t m = pop.iov.size();
      const YAML::Node& on = oi->second.value;
      if (!on.IsSequence() || on.size() != m * (m + 1) / 2)
        L.fail(on, ictx + ".omega must be a list of " + std::to_string(m * (m + 1) / 2) +
                       " numbers: the lower triangle of the " + std::to_string(m) + "x" +
                       std::to_string(m) + " covariance, row by row");
      pop.iov_omega =
          Eigen::MatrixXd::Zero(static_cast<Eigen::Index>(m), static_cast<Eigen::Index>(m));
      std::size_t k = 0;
      for (std::size_t r = 0; r < m; ++r)
        for (std::size_t c = 0; c <= r; ++c, ++k) {
          const std::string what = ictx + ".omega[" + std::to_string(k + 1) + "]";
          const double v = L.number(on[k], what);
          fields.emplace("iov_omega[" + std::to_string(r) + "][" + std::to_string(c) + "]",
                         Located{on[k], what});
          pop.iov_omega(static_cast<Eigen::Index>(r), static_cast<Eigen::Index>(c)) = v;
          pop.iov_omega(static_cast<Eigen::Index>(c), static_cast<Eigen::Index>(r)) = v;
        }
      fields.emplace("iov_omega", Located{on, ictx + ".omega"});
    } else {
      const YAML::Node& vn = o.at("variances").value;
      if (!vn.IsMap() || vn.size() == 0)
        L.fail(vn, ictx + ".variances must be a mapping of parameter names to variances");
      std::vector<YAML::Node> values;
      for (const auto& kv : vn) {
        const int col = named_parameter(L, model, kv.first, ictx + ".variances");
        for (int c : pop.iov)
          if (c == col) L.fail(kv.first, ictx + ".variances names " + kv.first.Scalar() + " twice");
        const std::string a = std::to_string(pop.iov.size());
        const std::string what = ictx + ".variances." + kv.first.Scalar();
        fields.emplace("iov[" + a + "]", Located{kv.first, what});
        fields.emplace("iov_omega[" + a + "][" + a + "]", Located{kv.second, what});
        values.push_back(kv.second);
        pop.iov.push_back(col);
      }
      const std::size_t m = pop.iov.size();
      pop.iov_omega =
          Eigen::MatrixXd::Zero(static_cast<Eigen::Index>(m), static_cast<Eigen::Index>(m));
      for (std::size_t k = 0; k < m; ++k)
        pop.iov_omega(static_cast<Eigen::Index>(k), static_cast<Eigen::Index>(k)) =
            L.number(values[k], ictx + ".variances." +
                                    model.parameters[static_cast<std::size_t>(pop.iov[k])].name);
      fields.emplace("iov_omega", Located{vn, ictx + ".variances"});
    }
  }
}

bool dose_target(const std::string& key, DoseTarget& target) {
  static const std::pair<const char*, DoseTarget::Field> fields[] = {
      {"amount", DoseTarget::Field::Amount},
      {"every", DoseTarget::Field::Every},
      {"repeat", DoseTarget::Field::Repeat},
      {"duration", DoseTarget::Field::Duration},
      {"rate", DoseTarget::Field::Rate}};
  if (key.rfind("doses[", 0) != 0) return false;
  const std::size_t close = key.find("].", 6);
  if (close == std::string::npos || close == 6) return false;
  int line = 0;
  for (std::size_t i = 6; i < close; ++i) {
    if (key[i] < '0' || key[i] > '9' || line > 1000000) return false;
    line = line * 10 + (key[i] - '0');
  }
  if (line < 1) return false;
  for (const auto& [name, f] : fields)
    if (key.substr(close + 2) == name) {
      target.line = line - 1;
      target.field = f;
      return true;
    }
  return false;
}

Sweep parse_sweep(const Loader& L, const YAML::Node& node, const ModelInfo& model,
                  FieldTable& fields) {
  Sweep sw;
  if (!node.IsMap() || node.size() == 0)
    L.fail(node, "sweep must be a mapping of parameter names to lists of values");
  std::int64_t points = 1;
  for (const auto& kv : node) {
    const YAML::Node k = kv.first;
    const YAML::Node v = kv.second;
    if (!k.IsScalar()) L.fail(k, "a key in sweep is not a parameter name");
    int col = 0;
    std::string label;
    DoseTarget target;
    if (dose_target(k.Scalar(), target)) {
      // A dose property: doses[K].FIELD (of every arm's line K with arms).
      label = dose_target_name(target);
      for (std::size_t j = 0; j < sw.dose_targets.size(); ++j)
        if (dose_target_name(sw.dose_targets[j]) == label)
          L.fail(k, "sweep names " + k.Scalar() + " twice");
      col = -1 - static_cast<int>(sw.dose_targets.size());
      sw.dose_targets.push_back(target);
    } else {
      if (k.Scalar().rfind("doses", 0) == 0)
        L.fail(k, "sweep key " + k.Scalar() +
                      " is not a dose property; write doses[K].FIELD with K the dose line (from "
                      "1) and FIELD amount, every, repeat, duration or rate");
      col = named_parameter(L, model, k, "sweep");
      label = model.parameters[static_cast<std::size_t>(col)].name;
      for (int c : sw.columns)
        if (c == col) L.fail(k, "sweep names " + label + " twice");
    }
    const std::string what = "sweep." + k.Scalar();
    const std::string field = "sweep.values[" + std::to_string(sw.columns.size()) + "][";
    fields.emplace("sweep.columns[" + std::to_string(sw.columns.size()) + "]", Located{k, what});
    if (!v.IsSequence() || v.size() == 0) L.fail(v, what + " must be a non-empty list of values");
    std::vector<double> vals;
    for (std::size_t i = 0; i < v.size(); ++i) {
      const std::string item = what + "[" + std::to_string(i + 1) + "]";
      vals.push_back(L.number(v[i], item));
      fields.emplace(field + std::to_string(i) + "]", Located{v[i], item});
    }
    points *= static_cast<std::int64_t>(vals.size());
    if (points > 1'000'000'000) L.fail(v, "sweep has more than 10^9 grid points");
    sw.columns.push_back(col);
    sw.values.push_back(std::move(vals));
  }
  return sw;
}

}  // namespace pkscan::config::detail
