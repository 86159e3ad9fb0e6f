// Loader: the run-file loader's view of YAML (yaml_reader.hpp).
#include "yaml_reader.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <pkscan/error.hpp>

namespace pkscan::config::detail {

namespace {

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

}  // namespace

Locate locate_in(const FieldTable& table) {
  return [&table](const std::string& field) -> std::optional<Located> {
    // The field, else its nearest ancestor ("omega[1][0]" -> "omega"), which keeps the library's
    // message (its rule is about the field, not the ancestor's text).
    for (std::string f = field; !f.empty();) {
      if (auto it = table.find(f); it != table.end()) {
        Located at = it->second;
        at.reword = at.reword && f == field;
        return at;
      }
      const std::size_t cut = f.find_last_of(".[");
      f.resize(cut == std::string::npos ? 0 : cut);
    }
    return std::nullopt;
  };
}

bool field_index(const std::string& field, const std::string& prefix, std::size_t* index,
                 std::string* rest) {
  if (field.size() < prefix.size() + 3 || field.compare(0, prefix.size(), prefix) != 0 ||
      field[prefix.size()] != '[')
    return false;
  std::size_t i = prefix.size() + 1, value = 0;
  const std::size_t first = i;
  while (i < field.size() && field[i] >= '0' && field[i] <= '9' && i - first < 18)
    value = value * 10 + static_cast<std::size_t>(field[i++] - '0');
  if (i == first || i >= field.size() || field[i] != ']') return false;
  *index = value;
  *rest = field.substr(i + 1);
  return true;
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + v[i];
  return s;
}

void Loader::fail(const YAML::Node& node, const std::string& msg) const {
  const YAML::Mark m = node.Mark();
  if (m.is_null()) throw ConfigError(file_, 0, 0, msg);
  throw ConfigError(file_, m.line + 1, m.column + 1, msg);
}

void Loader::fail(const YAML::Mark& m, const std::string& msg) const {
  throw ConfigError(file_, m.is_null() ? 0 : m.line + 1, m.is_null() ? 0 : m.column + 1, msg);
}

std::string Loader::where(const YAML::Mark& m) const {
  if (m.is_null()) return file_;
  return file_ + ":" + std::to_string(m.line + 1) + ":" + std::to_string(m.column + 1);
}

std::string Loader::resolve(const std::string& path) const {
  if (path.empty() || path[0] == '/') return path;
  const std::size_t slash = file_.rfind('/');
  return slash == std::string::npos ? path : file_.substr(0, slash + 1) + path;
}

Loader::Entries Loader::entries(const YAML::Node& node, const std::string& ctx,
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

const Loader::Entry& Loader::require(const Entries& m, const std::string& key,
                                     const YAML::Node& parent, const std::string& ctx) const {
  auto it = m.find(key);
  if (it == m.end()) fail(parent, "missing key '" + key + "' in " + ctx);
  return it->second;
}

std::string Loader::scalar_string(const YAML::Node& v, const std::string& what,
                                  const std::string& accepted) const {
  if (!v.IsScalar() || v.Scalar().empty())
    fail(v, what + " must be " + accepted + (v.IsNull() ? ", but is empty" : ""));
  return v.Scalar();
}

double Loader::number(const YAML::Node& v, const std::string& what) const {
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

double Loader::parameter(const YAML::Node& v, const std::string& what) const {
  const double d = number(v, what);
  if (std::isnan(d))
    fail(v, what + " is " + v.Scalar() +
                ", but must be a number (leave the parameter out when it is not given)");
  return d;
}

double Loader::finite(const YAML::Node& v, const std::string& what, const char* rule,
                      bool positive) const {
  const double d = number(v, what);
  if (!std::isfinite(d) || d < 0.0 || (positive && d == 0.0))
    fail(v, what + " is " + v.Scalar() + ", but must be " + rule);
  return d;
}

std::int64_t Loader::integer(const YAML::Node& v, const std::string& what, std::int64_t lo,
                             std::int64_t hi) const {
  const double d = number(v, what);
  if (!std::isfinite(d) || d != std::floor(d))
    fail(v, what + " is " + v.Scalar() + ", but must be a whole number");
  if (d < static_cast<double>(lo) || d > static_cast<double>(hi))
    fail(v, what + " is " + v.Scalar() + ", but must be in [" + std::to_string(lo) + ", " +
                std::to_string(hi) + "]");
  return static_cast<std::int64_t>(d);
}

std::int64_t Loader::whole(const YAML::Node& v, const std::string& what) const {
  const double d = number(v, what);
  if (std::isnan(d) || (std::isfinite(d) && d != std::floor(d)))
    fail(v, what + " is " + v.Scalar() + ", but must be a whole number");
  constexpr double kClamp = 4611686018427387904.0;  // 2^62
  return static_cast<std::int64_t>(std::clamp(d, -kClamp, kClamp));
}

void Loader::checked(const Locate& locate, const std::function<void()>& check) const {
  try {
    check();
  } catch (const BackendUnavailable&) {
    throw;
  } catch (const ConfigError&) {
    throw;
  } catch (const Error& e) {
    std::string message = e.what();
    // The library's "<where>: " prefix ("simulate: ", "population: ").
    if (const std::size_t colon = message.find(": ");
        colon != std::string::npos && message.find(' ') > colon)
      message = message.substr(colon + 2);
    const std::optional<Located> at =
        e.field().empty() || !locate ? std::nullopt : locate(e.field());
    if (!at) throw ConfigError(file_, 0, 0, message);
    if (at->reword && !e.rule().empty()) {
      const std::string text = at->absent ? "not given"
                               : at->node.IsScalar() && !at->node.Scalar().empty()
                                   ? at->node.Scalar()
                                   : e.value();
      fail(at->node, at->name + " is " + text + ", but must be " + e.rule());
    }
    fail(at->node, message);
  }
}

}  // namespace pkscan::config::detail
