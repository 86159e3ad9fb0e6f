// What is simulated and how: the model (a built-in name or a linear model declared flow by
// flow), the discretization, the precision and the engine's method and device.
#include <memory>
#include <pkscan/backend.hpp>
#include <pkscan/error.hpp>
#include <string>
#include <vector>

#include "load_sections.hpp"

namespace pkscan::config::detail {

std::shared_ptr<const ModelInfo> parse_model(const Loader& L, const Loader::Entries& top) {
  std::shared_ptr<const ModelInfo> model_ptr = ParameterBatch().info_ptr();
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
    } else {
      const std::string name =
          L.scalar_string(mv, "model", "one of " + model_names() + ", or {linear: ...}");
      if (name == "linear")
        L.fail(mv,
               "model linear needs its compartments and flows: model: {linear: {compartments: "
               "[...], flows: [...], eliminations: [...]}}");
      try {
        model_ptr = ParameterBatch(model_from_string(name), 0).info_ptr();
      } catch (const InvalidArgument&) {
        L.fail(mv, "model is \"" + name + "\", but must be one of " + model_names() +
                       ", or {linear: ...}");
      }
    }
  }
  return model_ptr;
}

YAML::Mark parse_options(const Loader& L, const Loader::Entries& top, RunSpec& spec) {
  Problem& p = spec.problem;
  if (auto it = top.find("discretization"); it != top.end()) {
    const std::string d = L.scalar_string(it->second.value, "discretization", "exact or euler");
    try {
      p.discretization = discretization_from_string(d);
    } catch (const InvalidArgument& e) {
      L.fail(it->second.value, e.what());
    }
  }

  // precision and engine (the size check reads them)
  if (auto it = top.find("precision"); it != top.end()) {
    const std::string s = L.scalar_string(it->second.value, "precision", "float64 or float32");
    try {
      spec.options.precision = precision_from_string(s);
    } catch (const InvalidArgument& e) {
      L.fail(it->second.value, e.what());
    }
  }
  // Where an unavailable method/device is reported. A position, not a YAML::Node: a Node
  // variable would be assigned below, which rewrites the document (yaml_reader.hpp).
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
      } catch (const InvalidArgument& e) {
        L.fail(m->second.value, std::string("engine.") + e.what());
      }
    }
    if (auto d = eng.find("device"); d != eng.end()) {
      const std::string s =
          L.scalar_string(d->second.value, "engine.device", "one of auto, cpu, cuda");
      if (s != "auto" && s != "cpu") engine_mark = d->second.value.Mark();
      try {
        spec.options.device = device_from_string(s);
      } catch (const InvalidArgument& e) {
        L.fail(d->second.value, std::string("engine.") + e.what());
      }
    }
  }
  return engine_mark;
}

}  // namespace pkscan::config::detail
