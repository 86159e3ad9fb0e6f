"""Independent reference for pkscan's run files, written from the documentation only.

Nothing here reads pkscan's code or output: the model is rebuilt from the run file's text (the
same dict the generator writes as YAML), and the amounts are computed with SciPy:

- grid runs, `exact`: exact propagation between breakpoints (grid times, infusion starts and
  ends) with the matrix exponential of the augmented matrix [[A, r], [0, 0]];
- grid runs, `euler`: the recurrence x_i = (I + A dt) x_{i-1} + rate x (covered time) + boluses;
- datasets: an event queue in NONMEM's order, exact propagation between events with the record's
  parameters, steady states computed by repeating the dosing cycle until it no longer changes.

`propagator="ode"` replaces the matrix exponential by `solve_ivp(Radau, rtol=1e-12)` restarted at
every event: a cross-check of this reference itself.

Conventions implemented: docs/conventions.md, docs/run-files.md and docs/cli.md; steady states
as docs/conventions.md describes them (an SS dose is a train of doses arriving at
t0 + lag - k II for k = 0, 1, ...; the state from t0 on is that train's periodic solution). For
lag >= II NONMEM's documented advance II - ALAG is not positive and nothing is advanced: the state
at t0 is that of a train arriving at t0 - k II (k = 0, 1, ...: just after an arrival), and only
the record's own dose is still to come, at t0 + lag.
"""

import math

import numpy as np
import scipy.integrate
import scipy.linalg

# Built-in models: compartments, flows (from, to, rate), eliminations (from, rate) and the
# clearance pairs (clearance -> (micro constant, volume it is divided by)).
BUILTIN = {
    "two_compartment": {
        "compartments": ["depot", "central"],
        "flows": [("depot", "central", "ka")],
        "eliminations": [("central", "ke")],
        "clearances": {"cl": [("ke", "v_central")]},
    },
    "three_compartment": {
        "compartments": ["depot", "central", "peripheral"],
        "flows": [("depot", "central", "ka"), ("central", "peripheral", "k12"),
                  ("peripheral", "central", "k21")],
        "eliminations": [("central", "ke")],
        "clearances": {"cl": [("ke", "v_central")],
                       "q": [("k12", "v_central"), ("k21", "v_peripheral")]},
    },
    "four_compartment": {
        "compartments": ["depot", "central", "peripheral1", "peripheral2"],
        "flows": [("depot", "central", "ka"), ("central", "peripheral1", "k12"),
                  ("peripheral1", "central", "k21"), ("central", "peripheral2", "k13"),
                  ("peripheral2", "central", "k31")],
        "eliminations": [("central", "ke")],
        "clearances": {"cl": [("ke", "v_central")],
                       "q": [("k12", "v_central"), ("k21", "v_peripheral1")],
                       "q2": [("k13", "v_central"), ("k31", "v_peripheral2")]},
    },
}
ALIASES = {"k01": "ka", "u": "ke"}


class Model:
    """A linear compartment model: x' = A x + r, built from a run file's `model` value."""

    def __init__(self, spec):
        if isinstance(spec, str):
            b = BUILTIN[spec]
            self.compartments = list(b["compartments"])
            self.flows = list(b["flows"])
            self.eliminations = list(b["eliminations"])
            self.clearances = b["clearances"]
            self.observe = "central"
        else:
            lin = spec["linear"]
            self.compartments = list(lin["compartments"])
            self.flows = [(f["from"], f["to"], f["rate"]) for f in lin.get("flows", [])]
            self.eliminations = [(e["from"], e["rate"]) for e in lin.get("eliminations", [])]
            self.clearances = {}
            self.observe = lin.get("observe") or (
                "central" if "central" in self.compartments else self.compartments[0])
        self.n = len(self.compartments)
        self.index = {c: i for i, c in enumerate(self.compartments)}

    def resolve(self, values):
        """Micro constants, volumes, F and lag from one subject's named values (aliases and
        clearances resolved)."""
        p = {ALIASES.get(k.lower(), k.lower()): float(v) for k, v in values.items()}
        for cl, targets in self.clearances.items():
            if cl in p:
                for micro, volume in targets:
                    p[micro] = p[cl] / p[volume]
        for c in self.compartments:
            p.setdefault("v_" + c, 1.0)
            p.setdefault("f_" + c, 1.0)
            p.setdefault("lag_" + c, 0.0)
        return p

    def matrix(self, p):
        a = np.zeros((self.n, self.n))
        for src, dst, rate in self.flows:
            i, j = self.index[src], self.index[dst]
            a[i, i] -= p[rate]
            a[j, i] += p[rate]
        for src, rate in self.eliminations:
            i = self.index[src]
            a[i, i] -= p[rate]
        return a


class Propagator:
    """x(t + h) = expm(A h) x + integral_0^h expm(A s) ds r, exactly (matrix exponential of the
    augmented matrix) or with Radau (the cross-check)."""

    def __init__(self, kind="expm"):
        self.kind = kind
        self._cache = {}

    def __call__(self, a, x, r, h):
        if h <= 0:
            return x.copy()
        if self.kind == "ode":
            return self._ode(a, x, r, h)
        n = a.shape[0]
        key = (a.tobytes(), h)
        e = self._cache.get(key)
        if e is None:
            aug = np.zeros((2 * n, 2 * n))
            aug[:n, :n] = a * h
            aug[:n, n:] = np.eye(n) * h
            e = scipy.linalg.expm(aug)
            if len(self._cache) > 50000:
                self._cache.clear()
            self._cache[key] = e
        return e[:n, :n] @ x + e[:n, n:] @ r

    @staticmethod
    def _ode(a, x, r, h):
        """x and r: vectors, or matrices whose columns are solved together."""
        shape = x.shape
        cols = 1 if x.ndim == 1 else shape[1]
        r = np.broadcast_to(r.reshape(shape[0], -1), (shape[0], cols))
        scale = max(1.0, float(np.max(np.abs(x))), float(np.max(np.abs(r))) * h)
        sol = scipy.integrate.solve_ivp(
            lambda _t, y: (a @ y.reshape(shape[0], cols) + r).ravel(), (0.0, h), x.ravel(),
            method="Radau", jac=np.kron(a, np.eye(cols)), rtol=1e-12, atol=1e-14 * scale)
        return sol.y[:, -1].reshape(shape)


# --------------------------------------------------------------------------------------------
# Grid runs


def subject_values(parameters, count):
    """One dict of values per subject from subjects.parameters (numbers or lists)."""
    return [{k: (v[s] if isinstance(v, list) else v) for k, v in parameters.items()}
            for s in range(count)]


def subject_count(subjects):
    lengths = [len(v) for v in subjects["parameters"].values() if isinstance(v, list)]
    return lengths[0] if lengths else int(subjects.get("count", 1))


def expand_doses(doses, model):
    """(compartment index, start, amount, duration or None) for every dose of the dose lines."""
    out = []
    for d in doses or []:
        c = model.index[d["compartment"]]
        duration = None
        if "rate" in d:
            duration = d["amount"] / d["rate"]
        elif "duration" in d:
            duration = float(d["duration"])
        for k in range(int(d.get("repeat", 0)) + 1):
            out.append((c, d["time"] + k * d.get("every", 0.0), float(d["amount"]), duration))
    return out


def grid_reference(run, propagator=None):
    """Amounts [subjects, output times, compartments] of a grid run file (dict)."""
    model = Model(run.get("model", "three_compartment"))
    dt, steps = float(run["time"]["dt"]), int(run["time"]["steps"])
    count = subject_count(run["subjects"])
    doses = expand_doses(run.get("doses"), model)
    times = run.get("output", {}).get("times", "all")
    index = (list(range(steps + 1)) if times == "all"
             else [int(round(t / dt)) for t in times])
    euler = run.get("discretization", "exact") == "euler"
    prop = propagator or Propagator()
    out = np.zeros((count, len(index), model.n))
    for s, values in enumerate(subject_values(run["subjects"]["parameters"], count)):
        a = model.matrix(model.resolve(values))
        traj = (_euler_grid if euler else _exact_grid)(a, model.n, dt, steps, doses, prop)
        out[s] = traj[index]
    return out


def _boluses_at(doses, i, dt):
    b = {}
    for c, t, amount, duration in doses:
        if duration is None and int(round(t / dt)) == i:
            b[c] = b.get(c, 0.0) + amount
    return b


def _infusions(doses, dt, t_end):
    """(compartment, start, end, rate) of every infusion, cut at the last grid time."""
    out = []
    for c, t, amount, duration in doses:
        start = int(round(t / dt)) * dt
        if duration is not None and start < t_end:
            out.append((c, start, min(start + duration, t_end), amount / duration))
    return out


def _exact_grid(a, n, dt, steps, doses, prop):
    t_end = steps * dt
    infusions = _infusions(doses, dt, t_end)
    x = np.zeros(n)
    traj = np.zeros((steps + 1, n))
    for i in range(steps + 1):
        if i > 0:
            lo, hi = (i - 1) * dt, i * dt
            cuts = sorted({lo, hi} | {e for _, s, e, _ in infusions if lo < e < hi}
                          | {s for _, s, e, _ in infusions if lo < s < hi})
            for u, v in zip(cuts[:-1], cuts[1:]):
                mid = 0.5 * (u + v)
                r = np.zeros(n)
                for c, s, e, rate in infusions:
                    if s < mid < e:
                        r[c] += rate
                x = prop(a, x, r, v - u)
        for c, amount in _boluses_at(doses, i, dt).items():
            x[c] += amount
        traj[i] = x
    return traj


def _euler_grid(a, n, dt, steps, doses, _prop):
    t_end = steps * dt
    infusions = _infusions(doses, dt, t_end)
    k = np.eye(n) + a * dt
    x = np.zeros(n)
    traj = np.zeros((steps + 1, n))
    for i in range(steps + 1):
        if i > 0:
            x = k @ x
            lo, hi = (i - 1) * dt, i * dt
            for c, s, e, rate in infusions:
                covered = min(hi, e) - max(lo, s)
                if covered > 0:
                    x[c] += rate * covered
        for c, amount in _boluses_at(doses, i, dt).items():
            x[c] += amount
        traj[i] = x
    return traj


# --------------------------------------------------------------------------------------------
# Datasets


def read_dataset(text):
    """Records of a NONMEM CSV (as the generator writes it: no quotes, '.' = missing), grouped
    by subject: [(id, [record dict, ...]), ...]. Names are lower-cased."""
    lines = [ln for ln in text.splitlines() if ln.strip() and ln[0] not in "#@"]
    header = [h.strip().lower() for h in lines[0].split(",")]
    subjects = []
    for ln in lines[1:]:
        fields = [f.strip() for f in ln.split(",")]
        rec = {h: (None if f in (".", "") else f) for h, f in zip(header, fields)}
        if not subjects or subjects[-1][0] != rec["id"]:
            subjects.append((rec["id"], []))
        subjects[-1][1].append(rec)
    return header, subjects


def _num(rec, key, default=0.0):
    v = rec.get(key)
    return default if v is None else float(v)


class _Dose:
    """One dose arriving at `time`: a bolus (duration None) or an infusion of `rate`."""

    def __init__(self, time, cmt, amount, rate=None, duration=None):
        self.time, self.cmt, self.amount, self.rate, self.duration = (
            time, cmt, amount, rate, duration)


def dataset_reference(run, dataset_text, propagator=None, concentrations=False):
    """Amounts [observations, compartments] of a dataset run, in dataset order, with the
    observed compartment's concentration (`pred`) per row; with `concentrations`, also every
    compartment's concentration [observations, compartments] (the volumes of each record)."""
    model = Model(run.get("model", "three_compartment"))
    header, subjects = read_dataset(dataset_text)
    items = {"id", "time", "amt", "rate", "evid", "cmt", "ii", "addl", "ss", "dv", "mdv"}
    names = set(model.resolve({}).keys()) | set(ALIASES) | {r for _, _, r in model.flows} | {
        r for _, r in model.eliminations} | set(model.clearances)
    param_cols = [h for h in header if h not in items and h in names]
    base = subject_values(run["subjects"].get("parameters", {}), len(subjects))
    prop = propagator or Propagator()
    amounts, preds, concs = [], [], []
    for s, (_, records) in enumerate(subjects):
        a_rows, p_rows, c_rows = _simulate_subject(model, base[s], records, param_cols, prop)
        amounts += a_rows
        preds += p_rows
        concs += c_rows
    amounts = np.array(amounts).reshape(-1, model.n)
    if concentrations:
        return amounts, np.array(preds), np.array(concs).reshape(-1, model.n)
    return amounts, np.array(preds)


def _simulate_subject(model, base, records, param_cols, prop):
    n = model.n
    x = np.zeros(n)
    t = float(records[0]["time"])
    infusions = []   # [compartment, rate, end]
    pending = []     # _Dose objects still to arrive
    out_amounts, out_pred, out_conc = [], [], []

    def params_of(rec):
        values = dict(base)
        for col in param_cols:
            if rec.get(col) is not None:
                values[ALIASES.get(col, col)] = float(rec[col])
        return model.resolve(values)

    def start(dose):
        if dose.duration is None:
            x[dose.cmt] += dose.amount
        else:
            infusions.append([dose.cmt, dose.rate, dose.time + dose.duration])

    def advance(a, t_from, t_to):
        """Moves x from t_from to t_to, processing infusion ends and arrivals up to t_to."""
        nonlocal x
        now = t_from
        while True:
            ends = [e for _, _, e in infusions]
            arrivals = [d.time for d in pending]
            nxt = min(ends + arrivals + [math.inf])
            if nxt > t_to:
                break
            x = prop(a, x, _rates(infusions, n), nxt - now)
            now = nxt
            infusions[:] = [f for f in infusions if f[2] > now]      # ends first
            for d in [d for d in pending if d.time <= now]:            # then arrivals
                pending.remove(d)
                start(d)
        x = prop(a, x, _rates(infusions, n), t_to - now)

    for rec in records:
        t_rec = float(rec["time"])
        p = params_of(rec)
        a = model.matrix(p)
        advance(a, t, t_rec)
        t = t_rec
        evid = record_evid(rec)
        if evid == 0:
            out_amounts.append(x.copy())
            cmt = int(_num(rec, "cmt"))
            c = model.index[model.observe] if cmt == 0 else cmt - 1
            out_pred.append(x[c] / p["v_" + model.compartments[c]])
            out_conc.append(x / np.array([p["v_" + name] for name in model.compartments]))
            continue
        if evid in (3, 4):
            x[:] = 0.0
            infusions.clear()
            pending.clear()
        if evid in (1, 4):
            x = _dose_record(model, p, a, rec, t_rec, x, infusions, pending, prop, start)
    return out_amounts, out_pred, out_conc


def record_evid(rec):
    """EVID, or when missing: 1 for AMT > 0 or a steady-state constant infusion, else 0."""
    if rec.get("evid") is not None:
        return int(float(rec["evid"]))
    amt, rate, ss = _num(rec, "amt"), _num(rec, "rate"), _num(rec, "ss")
    return 1 if amt > 0 or (ss == 1 and rate > 0) else 0


def _rates(infusions, n):
    r = np.zeros(n)
    for c, rate, _ in infusions:
        r[c] += rate
    return r


def _dose_record(model, p, a, rec, t0, x, infusions, pending, prop, start):
    cmt = int(_num(rec, "cmt"))
    c = 0 if cmt == 0 else cmt - 1      # doses without CMT: the first compartment
    name = model.compartments[c]
    f, lag = p["f_" + name], p["lag_" + name]
    amt, rate = _num(rec, "amt"), _num(rec, "rate")
    ii, addl, ss = _num(rec, "ii"), int(_num(rec, "addl")), int(_num(rec, "ss"))

    def dose_at(time):
        if rate > 0:
            return _Dose(time, c, f * amt, rate, f * amt / rate)
        return _Dose(time, c, f * amt)

    if ss == 1 and ii == 0 and amt == 0 and rate > 0:
        # Steady-state constant infusion: the equilibrium, the infusion stops at t0.
        infusions.clear()
        pending.clear()
        r = np.zeros(model.n)
        r[c] = rate
        return -np.linalg.solve(a, r)
    if ss in (1, 2):
        steady, running, future = _steady_state(model.n, a, c, f * amt, rate, ii, lag, t0, prop)
        if ss == 1:
            infusions.clear()
            pending.clear()
            x = steady
        else:
            x = x + steady
        infusions.extend(running)
        pending.extend(future)
    else:
        d = dose_at(t0 + lag)
        if lag == 0:
            start(d)
        else:
            pending.append(d)
    for j in range(1, addl + 1):
        pending.append(dose_at(t0 + j * ii + lag))
    return x


def _steady_state(n, a, c, amount, rate, ii, lag, t0, prop):
    """The periodic state at t0 of doses arriving at t0 + lag - k ii (k = 0, 1, ...), computed by
    repeating one dosing cycle (t0 - ii, t0] from an empty system until nothing changes; plus the
    implied infusions still running at t0 and the implied doses that arrive after t0."""
    duration = amount / rate if rate > 0 else None
    if ii <= lag:  # no advance (II - ALAG <= 0): the post-arrival state, then the record's dose
        x, running, _ = _steady_state(n, a, c, amount, rate, ii, 0.0, t0, prop)
        return x, running, [_Dose(t0 + lag, c, amount, rate if duration else None, duration)]
    arrivals = []
    k = 0
    reach = lag + (duration or 0.0) + ii
    while k * ii <= reach + ii:
        arrivals.append(t0 + lag - k * ii)
        k += 1
    lo = t0 - ii

    def cycle(x, w):
        """One cycle from the states in the columns of x; w: 1 for the columns that receive the
        doses, 0 for those that only move."""
        cuts = {lo, t0}
        for s in arrivals:
            for b in ([s] if duration is None else [s, s + duration]):
                if lo < b < t0:
                    cuts.add(b)
        cuts = sorted(cuts)
        for u, v in zip(cuts[:-1], cuts[1:]):
            r = np.zeros(x.shape)
            if duration is not None:
                mid = 0.5 * (u + v)
                r[c] = rate * sum(1 for s in arrivals if s < mid < s + duration) * w
            x = prop(a, x, r, v - u)
            if duration is None:
                x[c] += amount * sum(1 for s in arrivals if s == v) * w
        return x

    # x(t0) = M x(t0 - ii) + g: one cycle is affine in the state it starts from. Column 0 is the
    # cycle from an empty system with the doses (g), the others move the unit vectors (M).
    start = np.hstack([np.zeros((n, 1)), np.eye(n)])
    moved = cycle(start, np.r_[1.0, np.zeros(n)])
    g, m = moved[:, 0], moved[:, 1:]
    # Enough cycles that the first dose's remainder is below 1e-18 of it (spectral radius of M).
    rho = float(np.max(np.abs(np.linalg.eigvals(m))))
    cycles = 100 if rho < 1e-3 else max(100, math.ceil(math.log(1e-18) / math.log(rho)))
    if cycles > 1000000:
        raise ValueError(f"no steady state within 1e6 cycles (spectral radius {rho})")
    x = g.copy()
    for _ in range(cycles):
        x = m @ x + g
    running, future = [], []
    for s in arrivals:
        if duration is not None and s <= t0 < s + duration:
            running.append([c, rate, s + duration])
        elif s > t0:
            future.append(_Dose(s, c, amount, rate if duration else None, duration))
    return x, running, future
