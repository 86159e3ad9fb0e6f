"""Seeded generators of random but valid pkscan run files and NONMEM datasets.

Every case is a dict: `run` (the run file as a dict, written as YAML by `to_yaml` the way a user
writes it), `dataset` (CSV text or None), `features` (tags used to count failures by cause) and
`name`. Case `i` of a kind depends only on (kind, i), so one case can be re-run alone.
"""

import math
import random

from reference import BUILTIN, Model

SEED = 20261124
NONMEM_ITEMS = {"id", "time", "amt", "rate", "evid", "cmt", "ii", "addl", "ss", "dv", "mdv"}
COMPARTMENT_POOL = ["gut", "central", "periph", "liver", "tissue", "skin", "fat", "brain"]


def num(v):
    """A plain YAML/CSV number: integers without a fraction, others in the shortest form."""
    v = float(v)
    return str(int(v)) if v.is_integer() and abs(v) < 1e15 else repr(v)


def sig(rng, lo, hi, digits=3):
    """A log-uniform value in [lo, hi] rounded to `digits` significant digits."""
    v = math.exp(rng.uniform(math.log(lo), math.log(hi)))
    return float(f"{v:.{digits}g}")


# --------------------------------------------------------------------------------------------
# Models and parameters


def random_linear(rng, draining):
    """A `model: {linear: ...}` block; with `draining`, every compartment reaches an
    elimination (a steady state exists)."""
    n = rng.randint(1, 6)
    names = rng.sample(COMPARTMENT_POOL, n)
    flows, eliminations = [], []
    sink = rng.randrange(n)
    eliminations.append({"from": names[sink], "rate": "ke_" + names[sink]})
    order = [sink] + [i for i in range(n) if i != sink]
    for pos, i in enumerate(order[1:], start=1):
        if draining or rng.random() < 0.7:       # a tree towards the sink
            j = order[rng.randrange(pos)]
            flows.append((names[i], names[j]))
    for _ in range(rng.randint(0, n)):             # extra flows, either way
        i, j = rng.sample(range(n), 2) if n > 1 else (0, 0)
        if i != j and (names[i], names[j]) not in flows:
            flows.append((names[i], names[j]))
    if n > 2 and rng.random() < 0.3:
        eliminations.append({"from": names[order[-1]], "rate": "ke_" + names[order[-1]]})
    flow_list = [{"from": a, "to": b, "rate": f"k_{a}_{b}"} for a, b in flows]
    if len(flow_list) >= 2 and rng.random() < 0.3:   # one rate name shared by two flows
        flow_list[1]["rate"] = flow_list[0]["rate"]
    lin = {"compartments": names, "flows": flow_list, "eliminations": eliminations}
    if rng.random() < 0.5:
        lin["observe"] = rng.choice(names)
    return {"linear": lin}


def model_parameters(rng, model_spec, features):
    """Typical values of the parameters of a model, in the form the run file gives them
    (aliases, clearances); returns {name: value}."""
    p = {}
    if isinstance(model_spec, str):
        comps = BUILTIN[model_spec]["compartments"]
        micro = {"ka": sig(rng, 0.2, 2.0), "ke": sig(rng, 0.03, 0.5), "k12": sig(rng, 0.05, 0.8),
                 "k21": sig(rng, 0.05, 0.6), "k13": sig(rng, 0.02, 0.4),
                 "k31": sig(rng, 0.02, 0.3)}
        vols = {"v_" + c: sig(rng, 0.5, 100.0) for c in comps if c != "depot"}
        if rng.random() < 0.3:
            vols["v_depot"] = sig(rng, 0.5, 5.0)
        p["k01" if rng.random() < 0.3 else "ka"] = micro["ka"]
        for cl, targets in BUILTIN[model_spec]["clearances"].items():
            if rng.random() < 0.5:
                micro_name, volume = targets[0]
                p[cl] = float(f"{micro[micro_name] * vols[volume]:.4g}")
                features.add("clearance")
            else:
                for micro_name, _ in targets:
                    name = "u" if micro_name == "ke" and rng.random() < 0.3 else micro_name
                    p[name] = micro[micro_name]
        if "k01" in p or "u" in p:
            features.add("alias")
        p.update(vols)
    else:
        lin = model_spec["linear"]
        for f in lin["flows"]:
            p[f["rate"]] = sig(rng, 0.05, 1.0)
        for e in lin["eliminations"]:
            p[e["rate"]] = sig(rng, 0.03, 0.5)
        for c in lin["compartments"]:
            if rng.random() < 0.6:
                p["v_" + c] = sig(rng, 0.5, 50.0)
    return p


def make_lists(rng, params, count, features, max_lists=None):
    """Turns a random subset of parameters into per-subject lists (values near the typical
    one); tags the number of lists."""
    names = list(params)
    k = rng.choice([0, 0, 1, 2, 2, 3, len(names)])
    if max_lists is not None:
        k = min(k, max_lists)
    chosen = rng.sample(names, min(k, len(names)))
    for name in chosen:
        top = 1.0 if name.startswith("f_") else math.inf     # bioavailability stays <= 1
        params[name] = [min(top, float(f"{params[name] * rng.uniform(0.6, 1.5):.4g}"))
                        for _ in range(count)]
    features.add("lists>=2" if len(chosen) >= 2 else f"lists={len(chosen)}")
    return chosen


def model_of(rng, datasets=False):
    kind = rng.choice(["two_compartment", "three_compartment", "four_compartment", "linear"])
    if kind == "linear":
        return random_linear(rng, draining=datasets), "linear"
    return kind, kind


def euler_ok(model, params, count, dt):
    """1 + A[c][c] dt >= 0 for every subject and compartment (with a margin)."""
    for s in range(count):
        values = {k: (v[s] if isinstance(v, list) else v) for k, v in params.items()}
        a = model.matrix(model.resolve(values))
        if min(1.0 + a[i, i] * dt for i in range(model.n)) < 0.05:
            return False
    return True


# --------------------------------------------------------------------------------------------
# Grid runs


def grid_case(i):
    rng = random.Random(f"{SEED}-grid-{i}")
    features = set()
    model_spec, kind = model_of(rng)
    features.add(kind)
    model = Model(model_spec)
    count = rng.choice([1, 1, 2, 3, 4])
    euler = rng.random() < 0.35
    features.add("euler" if euler else "exact")
    precision = "float32" if rng.random() < 0.3 else "float64"
    features.add(precision)
    dt = rng.choice([0.1, 0.2, 0.25, 0.5, 1.0])
    steps = rng.randint(4, 60 if precision == "float32" else 120)
    while True:
        tags = set()
        params = model_parameters(rng, model_spec, tags)
        lists = make_lists(rng, params, count, tags)
        if not euler or euler_ok(model, params, count, dt):
            break
        dt /= 2
    features |= tags
    subjects = {"parameters": params}
    if not lists:
        if count > 1 or rng.random() < 0.3:
            subjects = {"count": count, "parameters": params}
    elif rng.random() < 0.4:
        subjects = {"count": count, "parameters": params}
    run = {"model": model_spec}
    if euler or rng.random() < 0.5:
        run["discretization"] = "euler" if euler else "exact"
    run["time"] = {"dt": dt, "steps": steps}
    run["subjects"] = subjects
    run["doses"] = [grid_dose(rng, model, dt, steps, features)
                    for _ in range(rng.randint(1, 4))]
    out = {"path": "out.csv"}
    if rng.random() < 0.4:
        k = rng.randint(1, min(8, steps + 1))
        out["times"] = [grid_time(j, dt) for j in sorted(rng.sample(range(steps + 1), k))]
        features.add("times_list")
    elif rng.random() < 0.5:
        out["times"] = "all"
    run["output"] = out
    method = rng.choice(["scan", "batched", "power", "auto"])
    if method in ("batched", "power") and not 2 <= model.n <= 4:
        method = "scan"     # compiled for 2 to 4 compartments (exit 3 otherwise, as documented)
    features.add("method_" + method)
    run["engine"] = {"method": method, "device": rng.choice(["cpu", "auto"])}
    if precision == "float32" or rng.random() < 0.5:
        run["precision"] = precision
    return {"name": f"grid-{i:03d}", "run": run, "dataset": None, "features": features}


def grid_time(j, dt):
    """Grid time j dt as a user writes it (0.3, not 0.30000000000000004)."""
    return float(f"{j * dt:.12g}")


def grid_dose(rng, model, dt, steps, features):
    comp = rng.choice(model.compartments)
    t_index = rng.randint(0, steps + (2 if rng.random() < 0.1 else -1))
    d = {"compartment": comp, "time": grid_time(t_index, dt), "amount": float(rng.randint(1, 200))}
    r = rng.random()
    if r < 0.25:
        d["rate"] = sig(rng, 2.0, 100.0)
        features.add("infusion_rate")
    elif r < 0.5:
        d["duration"] = float(f"{rng.uniform(0.05, steps * dt * 0.6):.3g}")
        features.add("infusion_duration")
    else:
        features.add("bolus")
    if rng.random() < 0.4:
        d["every"] = grid_time(rng.randint(1, max(1, steps // 3)), dt)
        d["repeat"] = rng.randint(0, 6)
        features.add("repeat")
    return d


# --------------------------------------------------------------------------------------------
# Datasets

# Kinds of records and their weights after the first record (a dose). A case takes the plain
# kinds plus one steady-state profile, so that failures can be traced to one feature.
PLAIN_KINDS = [("obs", 40), ("dose", 22), ("evid2", 5), ("evid3", 4), ("evid4", 4)]
SS_PROFILES = {"none": [], "ss1": [("ss1", 10)], "ss2": [("ss2", 10)],
               "ss_const": [("ss_const", 8)],
               "ss_all": [("ss1", 9), ("ss2", 6), ("ss_const", 3)]}


def dataset_case(i):
    rng = random.Random(f"{SEED}-dataset-{i}")
    features = set()
    model_spec, kind = model_of(rng, datasets=True)
    features.add(kind)
    model = Model(model_spec)
    nsub = rng.randint(1, 3)
    params = model_parameters(rng, model_spec, features)
    # F and lag (one value for every subject; lists only when the case has lists at all).
    fl = {}
    for c in model.compartments:
        if rng.random() < 0.3:
            fl["f_" + c] = float(f"{rng.uniform(0.3, 1.0):.2g}")
        if rng.random() < 0.35:
            fl["lag_" + c] = rng.choice([0.25, 0.5, 1.0, 1.5, 3.0, 6.0, 8.0, 13.0])
    params.update(fl)
    make_lists(rng, params, nsub, features, max_lists=None if rng.random() < 0.4 else 1)
    # Compartments with neither F nor lag may take steady-state constant infusions.
    plain = [j for j, c in enumerate(model.compartments)
             if ("f_" + c) not in params and ("lag_" + c) not in params]
    # Time-varying parameter columns: rate constants (or clearances) only.
    rate_names = [k for k in params if not k.startswith(("v_", "f_", "lag_"))
                  and not isinstance(params[k], list)]
    tv = rng.sample(rate_names, min(len(rate_names), rng.choice([0, 0, 1, 2])))
    if tv:
        features.add("tv_params")
    profile = rng.choice(["none", "none", "ss1", "ss2", "ss_const", "ss_all"])
    kinds = PLAIN_KINDS + SS_PROFILES[profile if plain or profile != "ss_const" else "ss1"]
    header = ["ID", "TIME", "AMT", "RATE", "EVID", "CMT", "II", "ADDL", "SS", "DV"]
    rows = []
    for s in range(nsub):
        rows += subject_records(rng, s + 1, model, params, tv, plain, kinds, features)
    if rng.random() < 0.3 and all(r["EVID"] in (0, 1) for r in rows):
        header.remove("EVID")                       # EVID implied by AMT / SS
        features.add("no_evid_column")
    header += [t.upper() for t in tv]
    lines = [",".join(header)]
    for r in rows:
        lines.append(",".join(cell(r.get(h, r.get(h.lower()))) for h in header))
    run = {"model": model_spec,
           "subjects": {"dataset": "data.csv", "parameters": params},
           "output": {"path": "out.csv"}}
    method = rng.choice(["scan", "batched", "auto"])   # a dataset run has no power method
    features.add("method_" + method)
    run["engine"] = {"method": method, "device": "cpu"}
    return {"name": f"dataset-{i:03d}", "run": run, "dataset": "\n".join(lines) + "\n",
            "features": features}


def cell(v):
    return "." if v is None else num(v) if isinstance(v, (int, float)) else str(v)


def subject_records(rng, sid, model, params, tv, plain, kinds, features):
    rows = []
    t = 0.0
    n_records = rng.randint(5, 14)
    last_ss_time = None
    for k in range(n_records):
        if k > 0:
            step = rng.choice([0, 0, 0.5, 1, 1.5, 2, 3, 4, 6, 8, 12])
            t += step
            if step == 0:
                features.add("equal_times")
        kind = "dose" if k == 0 else rng.choices([kd for kd, _ in kinds],
                                                 [w for _, w in kinds])[0]
        if kind == "ss_const" and not plain:
            kind = "ss1"
        r = {"ID": sid, "TIME": t}
        if kind == "obs":
            r.update({"EVID": 0, "DV": float(f"{rng.uniform(0, 10):.3g}")
                      if rng.random() < 0.8 else None})
            if rng.random() < 0.3:
                r["CMT"] = rng.randint(1, model.n)
        elif kind in ("evid2", "evid3"):
            r["EVID"] = 2 if kind == "evid2" else 3
            features.add(kind)
        else:
            r.update(dose_fields(rng, model, params, kind, plain, features))
            if kind == "evid4":
                r["EVID"] = 4
                features.add("evid4")
            if r.get("SS"):
                if last_ss_time == t or (rows and rows[-1]["TIME"] == t):
                    features.add("ss_equal_times")
                last_ss_time = t
        for name in tv:
            base = params[name]
            r[name] = None if rng.random() < 0.2 else float(f"{base * rng.uniform(0.5, 1.8):.4g}")
        rows.append(r)
    if not any(r.get("EVID") == 0 for r in rows):
        rows.append({"ID": sid, "TIME": t + 1.0, "EVID": 0, "DV": None,
                     **{name: params[name] for name in tv}})
    if tv:
        ss_times = {r["TIME"] for r in rows if r.get("SS")}
        if any(sum(1 for r in rows if r["TIME"] == st) > 1 for st in ss_times):
            features.add("ss_tv_params")
    return rows


def dose_fields(rng, model, params, kind, plain, features):
    """AMT, RATE, CMT, II, ADDL, SS of a dose record of the given kind."""
    if kind == "ss_const":
        c = rng.choice(plain)
        features.add("ss_const_infusion")
        return {"EVID": 1, "AMT": 0, "RATE": sig(rng, 1.0, 20.0), "CMT": c + 1, "II": 0,
                "SS": 1}
    c = rng.randrange(model.n)
    name = model.compartments[c]
    amount = float(rng.randint(10, 300))
    r = {"EVID": 1, "AMT": amount, "CMT": c + 1 if (c or rng.random() < 0.7) else None}
    infusion = rng.random() < 0.35
    ii = float(rng.choice([4, 6, 8, 12, 24]))
    if infusion:
        # duration (before F) from half an hour to 2.5 II: infusions longer than II too
        duration = float(f"{rng.uniform(0.5, 2.5 * ii):.3g}")
        r["RATE"] = float(f"{amount / duration:.4g}")
        features.add("infusion")
    lag = params.get("lag_" + name, 0.0)
    f = params.get("f_" + name, 1.0)
    if isinstance(lag, list) or lag > 0:
        features.add("lag")
    if isinstance(f, list) or f != 1.0:
        features.add("f")
    if kind in ("ss1", "ss2"):
        r["SS"] = 1 if kind == "ss1" else 2
        r["II"] = ii
        features.add(kind)
        if isinstance(lag, list) or lag > 0:
            features.add("ss_lag")
            if isinstance(lag, list) or lag >= ii:
                features.add("ss_lag>=ii")
        if isinstance(f, list) or f != 1.0:
            features.add("ss_f")
        if infusion:
            features.add("ss_infusion")
            if amount * (max(f) if isinstance(f, list) else f) / r["RATE"] > ii:
                features.add("ss_infusion>ii")
        if rng.random() < 0.4:
            r["ADDL"] = rng.randint(1, 4)
            features.add("ss_addl")
    elif rng.random() < 0.4:
        r["II"] = ii
        r["ADDL"] = rng.randint(1, 5)
        features.add("addl")
    return r


# --------------------------------------------------------------------------------------------
# YAML, the way a user writes it


def to_yaml(run):
    lines = []
    model = run.get("model")
    if isinstance(model, str):
        lines.append(f"model: {model}")
    elif model is not None:
        lin = model["linear"]
        lines += ["model:", "  linear:",
                  f"    compartments: [{', '.join(lin['compartments'])}]"]
        if lin["flows"]:
            lines.append("    flows:")
            lines += [f"      - {{from: {f['from']}, to: {f['to']}, rate: {f['rate']}}}"
                      for f in lin["flows"]]
        lines.append("    eliminations:")
        lines += [f"      - {{from: {e['from']}, rate: {e['rate']}}}" for e in lin["eliminations"]]
        if "observe" in lin:
            lines.append(f"    observe: {lin['observe']}")
    if "discretization" in run:
        lines.append(f"discretization: {run['discretization']}")
    if "time" in run:
        lines += ["time:", f"  dt: {num(run['time']['dt'])}",
                  f"  steps: {run['time']['steps']}"]
    subjects = run["subjects"]
    lines.append("subjects:")
    if "dataset" in subjects:
        lines.append(f"  dataset: {subjects['dataset']}")
    if "count" in subjects:
        lines.append(f"  count: {subjects['count']}")
    lines.append("  parameters:")
    for k, v in subjects["parameters"].items():
        value = f"[{', '.join(num(x) for x in v)}]" if isinstance(v, list) else num(v)
        lines.append(f"    {k}: {value}")
    if "doses" in run:
        lines.append("doses:")
        for d in run["doses"]:
            fields = ", ".join(f"{k}: {v if isinstance(v, str) else num(v)}"
                               for k, v in d.items())
            lines.append(f"  - {{{fields}}}")
    if "output" in run:
        lines.append("output:")
        out = run["output"]
        if "path" in out:
            lines.append(f"  path: {out['path']}")
        if "times" in out:
            times = out["times"]
            lines.append("  times: " + (times if isinstance(times, str)
                                        else f"[{', '.join(num(t) for t in times)}]"))
    if "engine" in run:
        lines += ["engine:", f"  method: {run['engine']['method']}",
                  f"  device: {run['engine']['device']}"]
    if "precision" in run:
        lines.append(f"precision: {run['precision']}")
    return "\n".join(lines) + "\n"
