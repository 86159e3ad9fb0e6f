// `arms`: the arms of a trial on a time grid, each with its name, its subjects (a count, or a
// share of subjects.population.count), its doses and its output times.
#include <cmath>
#include <cstdint>
#include <pkscan/error.hpp>
#include <pkscan/population_run.hpp>
#include <string>
#include <vector>

#include "load_sections.hpp"

namespace pkscan::config::detail {

std::int64_t arms_count(const Loader& L, const Loader::Entries& top) {
  auto it = top.find("arms");
  if (it == top.end() || !it->second.value.IsSequence()) return 0;
  std::int64_t total = 0;
  for (std::size_t k = 0; k < it->second.value.size(); ++k) {
    const YAML::Node& a = it->second.value[k];
    if (!a.IsMap() || !a["count"]) return 0;
    total +=
        L.integer(a["count"], "arms[" + std::to_string(k + 1) + "].count", 1, 1'000'000'000'000);
  }
  return total;
}

void parse_arms(const Loader& L, const Loader::Entries& top, RunSpec& spec, FieldTable& fields) {
  auto it = top.find("arms");
  if (it == top.end()) return;
  const YAML::Node& al = it->second.value;
  if (!al.IsSequence() || al.size() == 0)
    L.fail(al, "arms must be a non-empty list of arms, each {name, count or share, times, doses}");
  if (!spec.population)
    L.fail(it->second.key,
           "arms need subjects.population (the arms split its subjects; give the typical values "
           "and variability there)");
  fields.emplace("arms", Located{it->second.key, "arms", false});
  const std::int64_t n = spec.population->count;
  std::vector<double> shares;
  std::vector<YAML::Node> share_nodes;
  for (std::size_t k = 0; k < al.size(); ++k) {
    const std::string ctx = "arms[" + std::to_string(k + 1) + "]";
    const std::string f = "arms[" + std::to_string(k) + "]";
    const YAML::Node& an = al[k];
    auto a = L.entries(an, ctx, {"name", "count", "share", "times", "doses"});
    Arm arm;
    const YAML::Node& name = L.require(a, "name", an, ctx).value;
    arm.name = L.scalar_string(name, ctx + ".name", "the arm's name");
    fields.emplace(f + ".name", Located{name, ctx + ".name", false});
    const auto count = a.find("count");
    const auto share = a.find("share");
    if ((count == a.end()) == (share == a.end()))
      L.fail(an, ctx +
                     " needs count (its subjects) or share (its fraction of "
                     "subjects.population.count), one of them");
    if (count != a.end()) {
      arm.count = L.integer(count->second.value, ctx + ".count", 1, 1'000'000'000'000);
      fields.emplace(f + ".count", Located{count->second.value, ctx + ".count"});
    } else {
      const double s = L.number(share->second.value, ctx + ".share");
      if (!(s > 0.0 && s <= 1.0))
        L.fail(share->second.value,
               ctx + ".share is " + share->second.value.Scalar() + ", but must be in (0, 1]");
      shares.push_back(s);
      share_nodes.push_back(share->second.value);
    }
    if (auto t = a.find("times"); t != a.end())
      arm.output = parse_output_times(L, t->second.value, ctx + ".times", spec.problem.grid);
    if (auto d = a.find("doses"); d != a.end() && !d->second.value.IsNull())
      parse_dose_list(L, d->second.value, ctx + ".doses", spec.problem, &*spec.population,
                      arm.doses, arm.scaling, &fields, f + ".scaling");
    spec.arms.push_back(std::move(arm));
  }
  if (!shares.empty()) {
    if (shares.size() != al.size())
      L.fail(al, "arms give count for some arms and share for others; give one kind for all");
    double sum = 0.0;
    for (double s : shares) sum += s;
    if (std::fabs(sum - 1.0) > 1e-9)
      L.fail(share_nodes.back(),
             "the arms' shares add up to " + format_value(sum) + ", but must add up to 1");
    const std::vector<std::int64_t> counts = arm_counts_of_shares(shares, n);
    for (std::size_t k = 0; k < counts.size(); ++k) spec.arms[k].count = counts[k];
    for (std::size_t k = 0; k < spec.arms.size(); ++k)
      if (spec.arms[k].count < 1)
        L.fail(share_nodes[k], "arms[" + std::to_string(k + 1) +
                                   "].share gives the arm no "
                                   "subject of subjects.population.count = " +
                                   std::to_string(n));
  }
}

}  // namespace pkscan::config::detail
