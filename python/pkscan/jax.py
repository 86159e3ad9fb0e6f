"""pkscan as JAX operations: log-likelihoods and predictions of a pkscan.Predictor inside `jit`,
`grad`, `value_and_grad` and `vmap`, evaluated by pkscan's C++ engine through XLA's foreign
function interface (jax.ffi; the handlers are python/src/jax_ffi.cpp), with pkscan's exact
gradients (jax.custom_jvp: forward and reverse mode) and exact second derivatives
(jax.hessian, jax.jacfwd(jax.grad(f)), also under vmap).

- A vmap (NumPyro's chain_method="vectorized", or a vmap over parameter sets) is one call that
  evaluates every batch element and subject on all cores (vmap_method="broadcast_all").
- Out-of-domain or non-finite parameters or sigma give a log-likelihood of -inf with zero
  gradients, and NaN predictions with zero derivatives; never an exception inside a trace.
  Errors about the problem itself (unknown error model, wrong shapes) raise ValueError when the
  function is traced.
- float32 and float64 (computed in float64 inside; results in the dtype of the inputs); CPU.
- A Predictor used here is kept alive until the interpreter exits (compiled programs hold its
  address).

See docs/python.md.
"""

try:
    import jax
except ModuleNotFoundError:
    raise ImportError("pkscan.jax needs jax and jaxlib: pip install 'pkscan[jax]' (or pip install "
                      "jax; docs/python.md lists the versions that work)") from None
import os
import re

import jax.numpy as jnp
import numpy as np

from . import _core

__all__ = ["log_likelihood", "predict", "parameters", "Simulator"]

if not hasattr(_core, "_xla_ffi_targets"):
    raise ImportError(
        "pkscan.jax: this pkscan was built without the XLA FFI handlers (no jaxlib found when "
        "configuring); install it with pip's build isolation (pip install .), or run "
        "scripts/setup-venv.sh, then configure and build again")


def _xla_ffi_api_version():
    """The XLA FFI API version of the installed jaxlib (from its own headers), or None."""
    try:
        with open(os.path.join(jax.ffi.include_dir(), "xla", "ffi", "api", "c_api.h")) as f:
            text = f.read()
        return tuple(int(re.search(rf"#define XLA_FFI_API_{part}\s+(\d+)", text).group(1))
                     for part in ("MAJOR", "MINOR"))
    except (OSError, AttributeError):
        return None


def _register_handlers():
    # XLA accepts handlers built with its own XLA FFI API version or an older one that it still
    # supports. JAX registers a handler with XLA only when it starts its CPU backend, and a
    # handler XLA refuses then stops that backend (every JAX computation fails): so a jaxlib
    # whose API version is older than the handlers' is refused here, before registering.
    import jaxlib

    def refuse(reason):
        raise ImportError(
            f"pkscan.jax: jax {jax.__version__} with jaxlib {jaxlib.__version__} cannot run "
            f"pkscan's XLA FFI handlers, built with the XLA FFI API {built} of jaxlib "
            f"{_core._xla_ffi_jaxlib} ({reason}); install jax and jaxlib {_core._xla_ffi_jaxlib} "
            f"or another version docs/python.md lists, or rebuild pkscan against this jaxlib "
            f"(pip install --no-build-isolation)") from None

    built = ".".join(map(str, _core._xla_ffi_api_version))
    installed = _xla_ffi_api_version()
    if installed is not None and installed < tuple(_core._xla_ffi_api_version):
        refuse(f"its XLA has the older XLA FFI API {'.'.join(map(str, installed))}")
    try:
        for name, capsule in _core._xla_ffi_targets().items():
            jax.ffi.register_ffi_target(name, capsule, platform="cpu")
    except Exception as e:  # noqa: BLE001  (a refusal by XLA, or a jax without jax.ffi)
        refuse((str(e).strip().splitlines() or [type(e).__name__])[0])


_register_handlers()

_ERRORS = {"additive": (0, 1), "proportional": (1, 1), "combined": (2, 2)}
_alive = {}  # Predictor address -> (Predictor, {key: function})


def _check(predictor):
    if not isinstance(predictor, _core.Predictor):
        raise TypeError(f"pkscan.jax: predictor must be a pkscan.Predictor, not {type(predictor)}")


def _entry(predictor):
    if not isinstance(predictor, (_core.Predictor, _core.GridGradient)):
        raise TypeError(f"pkscan.jax: predictor must be a pkscan.Predictor, not {type(predictor)}")
    addr = predictor._address
    entry = _alive.get(addr)
    if entry is None or entry[0] is not predictor:
        entry = _alive[addr] = (predictor, {})
    return addr, entry[1]


def _float_dtype(*xs):
    dt = jnp.result_type(*xs)
    if dt in (jnp.float32, jnp.float64):
        return dt
    return jnp.result_type(float)  # float64 with jax_enable_x64, else float32


def _loglik_function(predictor, kind, log_scale):
    addr, cache = _entry(predictor)
    key = ("loglik", kind, log_scale)
    if key in cache:
        return cache[key]

    def call(params, sigma, with_gradient):
        S, P = params.shape[-2:]
        K = sigma.shape[-1]
        dt = params.dtype
        shapes = (jax.ShapeDtypeStruct((S,), dt), jax.ShapeDtypeStruct((S, P), dt),
                  jax.ShapeDtypeStruct((S, K), dt))
        return jax.ffi.ffi_call("pkscan_loglik", shapes, vmap_method="broadcast_all")(
            params, sigma, predictor=np.int64(addr), error_kind=np.int64(kind),
            log_scale=np.int64(log_scale), with_gradient=np.int64(with_gradient))

    def hessian_call(params, sigma):
        S, P = params.shape[-2:]
        K = sigma.shape[-1]
        shape = jax.ShapeDtypeStruct((S, P + K, P + K), params.dtype)
        return jax.ffi.ffi_call("pkscan_loglik_hessian", shape, vmap_method="broadcast_all")(
            params, sigma, predictor=np.int64(addr), error_kind=np.int64(kind),
            log_scale=np.int64(log_scale))

    # The value with its gradients, differentiable once more through the exact per-subject
    # Hessians over (params, sigma): jax.hessian and jacfwd(grad) work.
    @jax.custom_jvp
    def with_gradient(params, sigma):
        return call(params, sigma, 1)

    @with_gradient.defjvp
    def with_gradient_jvp(primals, tangents):
        params, sigma = primals
        t_params, t_sigma = tangents
        ll, g, gs = call(params, sigma, 1)
        h = hessian_call(params, sigma)
        P = params.shape[-1]
        t = jnp.concatenate([t_params, jnp.broadcast_to(t_sigma, gs.shape)], axis=-1)
        dh = jnp.einsum("sij,sj->si", h, t)
        return (ll, g, gs), (jnp.sum(g * t_params, axis=-1) + gs @ t_sigma, dh[:, :P], dh[:, P:])

    # custom_jvp with a rule linear in the tangents: JAX gets forward mode from it and reverse
    # mode by transposing it; either way one handler call with gradients (the residuals g, gs).
    @jax.custom_jvp
    def per_subject(params, sigma):
        return call(params, sigma, 0)[0]

    @per_subject.defjvp
    def per_subject_jvp(primals, tangents):
        params, sigma = primals
        t_params, t_sigma = tangents
        ll, g, gs = with_gradient(params, sigma)
        return ll, jnp.sum(g * t_params, axis=-1) + gs @ t_sigma

    cache[key] = per_subject
    return per_subject


def log_likelihood(predictor, params, sigma, error="additive", log_scale=False,
                   per_subject=False):
    """Log-likelihood of the predictor's dataset (the values of Predictor.log_likelihood_all).

    params: [subjects, parameters] rows (Predictor.parameter_names order, NaN for unused
    columns); sigma: a number or [k] (error="combined": [sigma_add, sigma_prop]); error:
    "additive", "proportional" or "combined"; log_scale: additive on log(DV) (the exponential
    error model). Returns the total, or (total, per-subject [subjects]) with per_subject=True.
    Out-of-domain values give -inf (zero gradients) for the subjects concerned."""
    if error not in _ERRORS:
        raise ValueError(f"pkscan.jax.log_likelihood: error is {error!r}, but must be one of "
                         f"{', '.join(_ERRORS)}")
    kind, k = _ERRORS[error]
    _check(predictor)
    if log_scale and kind != 0:
        raise ValueError("pkscan.jax.log_likelihood: log_scale=True needs error='additive'")
    if log_scale:
        dv, observed = np.asarray(predictor.dv), np.asarray(predictor.observed, dtype=bool)
        if np.any(dv[observed] <= 0):
            raise ValueError("pkscan.jax.log_likelihood: log_scale=True needs every observed DV "
                             "> 0; the dataset has DV <= 0")
    S, P = predictor.subjects, len(predictor.parameter_names)
    params = jnp.asarray(params)
    sigma = jnp.asarray(sigma)
    if params.shape != (S, P):
        raise ValueError(f"pkscan.jax.log_likelihood: params has shape {params.shape}, but must be "
                         f"({S}, {P}): one row per subject, one column per parameter "
                         f"({', '.join(predictor.parameter_names)})")
    if sigma.size != k or sigma.ndim > 1:
        raise ValueError(f"pkscan.jax.log_likelihood: sigma has shape {sigma.shape}, but the "
                         f"{error} error model needs {k} value{'s' if k > 1 else ''}")
    dt = _float_dtype(params, sigma)
    ll = _loglik_function(predictor, kind, bool(log_scale))(
        params.astype(dt), jnp.reshape(sigma, (k,)).astype(dt))
    # One subject out of the domain rejects the whole set: -inf with zero gradients throughout
    # (Predictor.log_likelihood_all's total).
    total = jnp.sum(ll)
    total = jnp.where(total > -jnp.inf, total, -jnp.inf)
    return (total, ll) if per_subject else total


def _ffi_rows(target, out_shape, attrs, tangent, hessian=None):
    """params -> the first output of the FFI target `target` (shape out_shape), as a custom_jvp
    function whose tangent is tangent(jacobian, t_params), with the Jacobian (out_shape + (P,))
    the target's second output when asked for (with_gradient=1). With hessian = (target,
    tangent2) the Jacobian is differentiable once more: its tangent is tangent2(H, t_params),
    H (out_shape + (P, P)) that target's output."""

    def call(params, with_gradient):
        dt = params.dtype
        shapes = (jax.ShapeDtypeStruct(out_shape, dt),
                  jax.ShapeDtypeStruct(out_shape + (params.shape[-1],), dt))
        return jax.ffi.ffi_call(target, shapes, vmap_method="broadcast_all")(
            params, with_gradient=np.int64(with_gradient), **attrs)

    def value_and_jacobian(params):
        return call(params, 1)

    if hessian is not None:
        hessian_target, tangent2 = hessian

        @jax.custom_jvp
        def value_and_jacobian(params):
            return call(params, 1)

        @value_and_jacobian.defjvp
        def value_and_jacobian_jvp(primals, tangents):
            (params,), (t_params,) = primals, tangents
            value, jac = call(params, 1)
            P = params.shape[-1]
            shape = jax.ShapeDtypeStruct(out_shape + (P, P), params.dtype)
            h = jax.ffi.ffi_call(hessian_target, shape, vmap_method="broadcast_all")(
                params, **attrs)
            return (value, jac), (tangent(jac, t_params), tangent2(h, t_params))

    @jax.custom_jvp
    def rows(params):
        return call(params, 0)[0]

    @rows.defjvp
    def rows_jvp(primals, tangents):
        (params,), (t_params,) = primals, tangents
        value, jac = value_and_jacobian(params)
        return value, tangent(jac, t_params)

    return rows


def _predict_function(predictor):
    addr, cache = _entry(predictor)
    if "predict" not in cache:
        # Row i of the Jacobian is d pred[i] / d params[subject of i]: the tangent is a gather
        # and a row-wise dot (its transpose, for reverse mode, a segment sum over each subject's
        # rows).
        subject_of = np.asarray(predictor.observation_subjects, dtype=np.int32)
        cache["predict"] = _ffi_rows(
            "pkscan_predict", (predictor.observations,), {"predictor": np.int64(addr)},
            lambda jac, t: jnp.sum(jac * t[subject_of], axis=-1),
            hessian=("pkscan_predict_hessian",
                     lambda h, t: jnp.einsum("ipq,iq->ip", h, t[subject_of])))
    return cache["predict"]


def _grid_function(grid, shape):
    addr, cache = _entry(grid)
    if "grid" not in cache:
        # Each subject's concentrations depend on its own row only: the tangent is a batched
        # matrix-vector product (its transpose, for reverse mode, the same contraction).
        cache["grid"] = _ffi_rows(
            "pkscan_grid", tuple(shape), {"gradient": np.int64(addr), "subjects": np.int64(shape[0])},
            lambda jac, t: jnp.einsum("stcp,sp->stc", jac, t))
    return cache["grid"]


def predict(predictor, params):
    """Predictions at the dataset's observation records ([observations], dataset order; the
    values of Predictor.predict_all). params: [subjects, parameters]. A subject with
    out-of-domain parameters gets NaN predictions (and zero derivatives)."""
    _check(predictor)
    S, P = predictor.subjects, len(predictor.parameter_names)
    params = jnp.asarray(params)
    if params.shape != (S, P):
        raise ValueError(f"pkscan.jax.predict: params has shape {params.shape}, but must be "
                         f"({S}, {P})")
    return _predict_function(predictor)(params.astype(_float_dtype(params)))


def parameters(predictor, values, dtype=None):
    """Parameter rows [subjects, parameters] for JAX: the model's defaults (NaN for required or
    unused columns) with `values` ({name or alias: number or [subjects] array}, traced values
    allowed) set. `predictor`: a Predictor or a Simulator."""
    if isinstance(predictor, Simulator):
        if predictor.predictor is not None:
            predictor = predictor.predictor
        else:
            names = list(predictor.parameter_names)
            aliases = predictor.model.aliases
            defaults = predictor.model.defaults
            base = np.tile([defaults[n] for n in names], (predictor.subjects, 1))
    if not isinstance(predictor, Simulator):
        names = list(predictor.parameter_names)
        aliases = predictor.model.aliases
        base = np.asarray(predictor.make_parameters({}))
    dt = dtype or _float_dtype(*[jnp.asarray(v) for v in values.values()], base.dtype)
    rows = jnp.asarray(base, dtype=dt)
    for name, value in values.items():
        column = aliases.get(name, name)
        if column not in names:
            raise ValueError(f"pkscan.jax.parameters: unknown parameter {name!r}; the model has "
                             f"{', '.join(names)}")
        rows = rows.at[:, names.index(column)].set(jnp.asarray(value, dtype=dt))
    return rows


class Simulator:
    """A grid problem as a JAX operation: concentrations (and amounts) of `subjects` subjects at
    the output times, from per-subject parameter rows, differentiable.

    Simulator(model, doses, dt, steps, subjects, times=None): the arguments of pkscan.simulate
    (doses as dicts with amount, compartment, time, rate or duration, every, repeat; output
    times on the grid, default every grid point 0, dt, ..., steps * dt). The problem is built
    once, here, so errors about it raise here. discretization="exact" (the default; the matrix
    exponential): a dataset with the doses and one observation record per output time and
    compartment, evaluated by a Predictor. discretization="euler": K = I + A dt on the grid, the
    values of pkscan.simulate(..., discretization="euler") bit for bit, with the exact
    derivatives of that recurrence (pkscan.GridGradient).

    sim(params) -> concentrations [subjects, times, compartments]; sim.amounts(params) the
    amounts (concentrations times the compartments' volume columns v_<compartment>).
    sim.predictor (None for euler), sim.parameter_names, sim.compartments, sim.times describe
    it; pkscan.jax.parameters(sim, {...}) makes parameter rows for it."""

    def __init__(self, model, doses, dt, steps, subjects, times=None, discretization="exact"):
        m = model if isinstance(model, _core.Model) else _core.Model(model) \
            if isinstance(model, str) else None
        if m is None:
            raise TypeError("pkscan.jax.Simulator: model must be a built-in model name or a "
                            "pkscan.Model")
        if not (dt > 0) or int(steps) != steps or steps < 0 or int(subjects) < 1:
            raise ValueError("pkscan.jax.Simulator: dt must be > 0, steps >= 0 and subjects >= 1")
        if discretization not in ("exact", "euler"):
            raise ValueError(f"pkscan.jax.Simulator: discretization is {discretization!r}, but "
                             "must be 'exact' or 'euler'")
        # One evaluation with derivatives holds [subjects, times, compartments] values and their
        # Jacobian (x parameters): MemoryError before anything is built when that cannot fit.
        n_times = int(steps) + 1 if times is None else np.size(times)
        _core._check_memory("pkscan.jax.Simulator",
                            8.0 * int(subjects) * n_times * len(m.compartments) *
                            (1 + len(m.parameters)),
                            f"the concentrations and derivatives of {int(subjects)} subjects x "
                            f"{n_times} output times",
                            "use fewer subjects, fewer steps or sparse output times")
        self.model = m
        self.subjects = int(subjects)
        self.discretization = discretization
        self.compartments = list(m.compartments)
        self._grid = None
        if discretization == "euler":
            self._grid = _core.GridGradient(m, list(doses), float(dt), int(steps),
                                            None if times is None else np.asarray(times, float))
            _entry(self._grid)  # kept alive with the compiled programs that hold its address
            self.predictor = None
            self.parameter_names = list(m.parameters)
            self.times = np.asarray(self._grid.output_steps, dtype=float) * float(dt)
            self._shape = (self.subjects, len(self.times), len(self.compartments))
            self._volumes = [self.parameter_names.index(f"v_{c}")
                             if f"v_{c}" in self.parameter_names else None
                             for c in self.compartments]
            return
        grid = np.arange(int(steps) + 1) * float(dt)
        if times is None:
            times = grid
        times = np.asarray(times, dtype=float)
        on_grid = np.abs(times / dt - np.round(times / dt)) <= 1e-9 * np.maximum(1, times / dt)
        if times.ndim != 1 or not np.all(on_grid) or np.any(times < 0) or \
                np.any(times > grid[-1] * (1 + 1e-12)):
            raise ValueError("pkscan.jax.Simulator: times must be grid points 0 .. steps * dt")
        if np.any(np.diff(times) <= 0):
            raise ValueError("pkscan.jax.Simulator: times must be increasing")
        comps = list(m.compartments)
        lines = ["ID,TIME,AMT,RATE,CMT,EVID,II,ADDL,DV"]
        for s in range(int(subjects)):
            records = []   # (time, 0 for doses / 1 for outputs, line): doses first at a time
            for d in doses:
                d = dict(d)
                cmt = d.pop("compartment", None)
                c = 0 if cmt is None else (comps.index(cmt) + 1 if isinstance(cmt, str)
                                           else int(cmt) + 1)
                amount = float(d.pop("amount"))
                rate = float(d.pop("rate", 0.0))
                if "duration" in d:
                    rate = amount / float(d.pop("duration"))
                every, repeat = float(d.pop("every", 0.0)), int(d.pop("repeat", 0))
                t = float(d.pop("time", 0.0))
                if d:
                    raise ValueError(f"pkscan.jax.Simulator: unknown dose keys {sorted(d)}")
                records.append((t, 0, f"{s + 1},{t!r},{amount!r},{rate!r},{c},1,{every!r},"
                                      f"{repeat},."))
            for t in times:
                for c in range(len(comps)):
                    records.append((float(t), 1, f"{s + 1},{float(t)!r},.,.,{c + 1},0,.,.,0"))
            lines += [line for _, _, line in sorted(records, key=lambda r: r[:2])]
        self.predictor = _core.Predictor("\n".join(lines) + "\n", m)
        self.parameter_names = list(self.predictor.parameter_names)
        self.compartments = comps
        self.times = times
        self._shape = (int(subjects), len(times), len(comps))
        self._volumes = [self.parameter_names.index(f"v_{c}") if f"v_{c}" in self.parameter_names
                         else None for c in comps]

    def __call__(self, params):
        if self._grid is None:
            return jnp.reshape(predict(self.predictor, params), self._shape)
        params = jnp.asarray(params)
        P = len(self.parameter_names)
        if params.shape != (self.subjects, P):
            raise ValueError(f"pkscan.jax.Simulator: params has shape {params.shape}, but must "
                             f"be ({self.subjects}, {P})")
        return _grid_function(self._grid, self._shape)(params.astype(_float_dtype(params)))

    def amounts(self, params):
        params = jnp.asarray(params)
        if any(v is None for v in self._volumes):
            raise ValueError("pkscan.jax.Simulator.amounts: a compartment has no v_<name> column")
        conc = self(params)
        return conc * params[:, None, jnp.array(self._volumes)].astype(conc.dtype)
