#!/usr/bin/env python3
"""NUTS on a population model: a plain-JAX `lax.scan` model against pkscan.jax.

Same data, same model, same priors, same NUTS settings and seed; only the log-likelihood differs:

  scan    the formulation in plain JAX: per-subject K stacked [N, 2, 2], lax.scan of
          x_t = K x_{t-1} + b_t over the T steps of the grid (einsum), amounts divided by the
          central volume at the end, Gaussian log-likelihood of the observations on grid points.
          --discretization euler (default, the plain-JAX formulation): K = I + A dt;
          --discretization exact: K = expm(A dt) (same posterior as pkscan).
  pkscan  pkscan.jax.log_likelihood on the same observations as a NONMEM dataset (XLA FFI;
          exact solution, whatever --discretization says).
  floor   the same NumPyro model (same 3 + 3 + 1 + 3N latent dimensions, same priors) with a
          nearly free likelihood, -0.5 sum((theta - TRUE)^2) / 0.01 - 0.5 log(sigma)^2: the cost
          of NumPyro's own work per iteration, which no likelihood implementation goes below.

Data are always simulated from the exact model, so both models see the same observations; under
euler the scan concentrations and log-likelihood differ slightly from pkscan's (reported at the
true values: the log-likelihood difference is not monotone in dt, the concentration difference is).

Model: depot + central (ka, ke, v_central), log-normal between-subject variability on all three
(non-centered), additive error; N subjects, T steps of dt = horizon / T (horizon 24 h), 100 into
the depot at 0 and every 24 h, 12 observations per subject.

Each MCMC object is run twice with the same key (the second run repeats warm-up and sampling and
gives the same draws): wall_first_s includes compilation, wall_compiled_s does not. ESS is the
minimum effective sample size over the typical values and sigma; ESS/s and the ratios
pkscan / scan are given for both walls. ceiling_ratio_* = wall_scan / wall_floor is the ESS/s
ratio a zero-cost likelihood with the same ESS as the scan model would reach. Also the latency of
one jitted value_and_grad call of each log-likelihood and of an empty jitted call with the same
argument shapes (JAX's dispatch floor), and the load average at the start and end of each cell.

Run (after bash test.sh):
    PYTHONPATH=build/python .venv/bin/python bench/jax_nuts.py --subjects 10,100 --steps 240,2400
Prints one JSON line per (subjects, steps) cell.
"""
import argparse
import json
import os
import pathlib
import platform
import sys
import tempfile
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import jaxlib  # noqa: E402
import numpy as np  # noqa: E402
from jax.scipy.linalg import expm  # noqa: E402

jax.config.update("jax_enable_x64", True)

import numpyro  # noqa: E402
import numpyro.distributions as dist  # noqa: E402
from numpyro.diagnostics import effective_sample_size  # noqa: E402
from numpyro.infer import MCMC, NUTS, init_to_median  # noqa: E402

import pkscan  # noqa: E402
import pkscan.jax as pj  # noqa: E402

TRUE = (np.log(1.0), np.log(0.15), np.log(12.0))
OMEGA, SIGMA = 0.25, 0.2
TYPICAL = ("log_ka", "log_ke", "log_v", "sigma")


def problem(n, steps, dt, seed):
    rng = np.random.default_rng(seed)
    dose_steps = np.arange(0, steps + 1, int(round(24 / dt)))
    obs_steps = np.unique(np.linspace(1, steps, 12).round().astype(int))
    theta = np.array(TRUE) + OMEGA * rng.standard_normal((n, 3))
    return theta, dose_steps, obs_steps, rng


def scan_concentrations(theta, dose_steps, obs_steps, steps, dt, discretization):
    ka, ke, v = jnp.exp(theta[:, 0]), jnp.exp(theta[:, 1]), jnp.exp(theta[:, 2])
    zero = jnp.zeros_like(ka)
    A = jnp.stack([jnp.stack([-ka, zero], -1), jnp.stack([ka, -ke], -1)], -2)
    if discretization == "euler":
        K = jnp.eye(2) + A * dt
    else:
        K = jax.vmap(expm)(A * dt)
    b = jnp.zeros((steps + 1, theta.shape[0], 2)).at[dose_steps, :, 0].set(100.0)

    def step(x, b_t):
        x = jnp.einsum("nij,nj->ni", K, x) + b_t
        return x, x

    _, xs = jax.lax.scan(step, b[0], b[1:])
    xs = jnp.concatenate([b[0][None], xs])
    return xs[obs_steps, :, 1].T / v[:, None]


def write_dataset(path, dv, dose_steps, obs_steps, dt):
    lines = ["ID,TIME,AMT,CMT,EVID,DV"]
    for s in range(dv.shape[0]):
        ev = [(k, f"{s + 1},{k * dt:.10g},100,1,1,.") for k in dose_steps]
        ev += [(k + 0.5, f"{s + 1},{k * dt:.10g},.,2,0,{float(dv[s, i])!r}")
               for i, k in enumerate(obs_steps)]
        lines += [line for _, line in sorted(ev)]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def make_model(n, loglik):
    def model():
        log_ka = numpyro.sample("log_ka", dist.Normal(0.0, 1.0))
        log_ke = numpyro.sample("log_ke", dist.Normal(-1.5, 1.0))
        log_v = numpyro.sample("log_v", dist.Normal(2.5, 1.0))
        omega = numpyro.sample("omega", dist.HalfNormal(0.5).expand([3]).to_event(1))
        sigma = numpyro.sample("sigma", dist.HalfNormal(0.5))
        with numpyro.plate("subjects", n):
            eta = numpyro.sample("eta", dist.Normal(0.0, 1.0).expand([3]).to_event(1))
        theta = jnp.stack([log_ka + omega[0] * eta[:, 0], log_ke + omega[1] * eta[:, 1],
                           log_v + omega[2] * eta[:, 2]], -1)
        numpyro.factor("loglik", loglik(theta, sigma))

    return model


def floor_loglik(th, sigma):
    return -0.5 * jnp.sum((th - jnp.asarray(TRUE)) ** 2) / 0.01 - 0.5 * jnp.log(sigma) ** 2


def latency(f, args, repeat):
    jax.block_until_ready(f(*args))
    ts = []
    for _ in range(repeat):
        t = time.perf_counter()
        jax.block_until_ready(f(*args))
        ts.append(time.perf_counter() - t)
    return float(np.median(ts))


def nuts_twice(n, ll, args, out, name):
    """Run one MCMC object twice with the same key: first run compiles, second does not."""
    mcmc = MCMC(NUTS(make_model(n, ll), init_strategy=init_to_median),
                num_warmup=args.warmup, num_samples=args.samples, progress_bar=False)
    walls, draws = [], []
    for _ in range(2):
        t = time.perf_counter()
        mcmc.run(jax.random.PRNGKey(args.seed), extra_fields=("num_steps",))
        jax.block_until_ready(mcmc.get_samples())
        walls.append(time.perf_counter() - t)
        draws.append({k: np.asarray(v) for k, v in mcmc.get_samples(group_by_chain=True).items()})
    ess = min(float(effective_sample_size(draws[1][k])) for k in TYPICAL)
    out[f"wall_first_s_{name}"] = walls[0]
    out[f"wall_compiled_s_{name}"] = walls[1]
    out[f"min_ess_{name}"] = ess
    out[f"ess_per_s_first_{name}"] = ess / walls[0]
    out[f"ess_per_s_compiled_{name}"] = ess / walls[1]
    out[f"leapfrog_steps_sampling_{name}"] = int(np.sum(mcmc.get_extra_fields()["num_steps"]))
    out[f"log_v_mean_{name}"] = float(np.mean(draws[1]["log_v"]))
    out[f"same_draws_both_runs_{name}"] = all(np.array_equal(draws[0][k], draws[1][k])
                                              for k in draws[0])


def run(n, steps, args, tmp, machine):
    dt = args.horizon / steps
    load_start = os.getloadavg()
    theta, dose_steps, obs_steps, rng = problem(n, steps, dt, args.seed)
    th0 = jnp.asarray(theta)
    # data always from the exact model: the same observations for every model
    pred = np.asarray(scan_concentrations(th0, dose_steps, obs_steps, steps, dt, "exact"))
    dv = pred + SIGMA * rng.standard_normal(pred.shape)
    p = pkscan.Predictor(write_dataset(tmp / f"bench_{n}_{steps}.csv", dv, dose_steps,
                                       obs_steps, dt), "two_compartment")
    dv_j = jnp.asarray(dv)

    def scan_loglik(th, sigma, discretization=args.discretization):
        c = scan_concentrations(th, dose_steps, obs_steps, steps, dt, discretization)
        r = (dv_j - c) / sigma
        return jnp.sum(-0.5 * r * r - jnp.log(sigma) - 0.5 * jnp.log(2 * jnp.pi))

    def pkscan_loglik(th, sigma):
        rows = pj.parameters(p, {"ka": jnp.exp(th[:, 0]), "ke": jnp.exp(th[:, 1]),
                                 "v_central": jnp.exp(th[:, 2])})
        return pj.log_likelihood(p, rows, sigma)

    # log-likelihoods at the true values (a check, not a timing)
    c_scan = np.asarray(scan_concentrations(th0, dose_steps, obs_steps, steps, dt,
                                            args.discretization))
    a = float(scan_loglik(th0, SIGMA))
    b = float(pkscan_loglik(th0, SIGMA))
    out = {"subjects": n, "steps": steps, "dt": dt, "horizon_h": args.horizon,
           "observations": int(dv.size), "discretization_scan": args.discretization,
           "loglik_true_scan": a, "loglik_true_pkscan": b,
           "loglik_true_rel_diff": (a - b) / abs(b),
           "loglik_true_scan_exact": float(scan_loglik(th0, SIGMA, "exact")),
           "conc_true_max_abs_diff_scan": float(np.max(np.abs(c_scan - pred))),
           "conc_true_max_rel_diff_scan": float(np.max(np.abs(c_scan - pred) / pred)),
           "warmup": args.warmup, "samples": args.samples, "seed": args.seed,
           "loadavg_start": list(load_start)}

    vg_args = (th0, jnp.float64(SIGMA))
    empty = jax.jit(lambda th, s: (jnp.zeros((), th.dtype), (jnp.zeros_like(th),
                                                             jnp.zeros_like(s))))
    out["empty_jit_call_s"] = latency(empty, vg_args, args.repeat)
    for name, ll in (("scan", scan_loglik), ("pkscan", pkscan_loglik)):
        vg = jax.jit(jax.value_and_grad(ll, argnums=(0, 1)))
        out[f"value_and_grad_s_{name}"] = latency(vg, vg_args, args.repeat)
    out["value_and_grad_ratio"] = out["value_and_grad_s_scan"] / out["value_and_grad_s_pkscan"]

    for name, ll in (("scan", scan_loglik), ("pkscan", pkscan_loglik), ("floor", floor_loglik)):
        nuts_twice(n, ll, args, out, name)
    for w in ("first", "compiled"):
        out[f"ess_per_s_ratio_{w}"] = (out[f"ess_per_s_{w}_pkscan"]
                                       / out[f"ess_per_s_{w}_scan"])
        # ESS/s ratio a zero-cost likelihood reaching the scan model's ESS would have
        out[f"ceiling_ratio_{w}"] = out[f"wall_{w}_s_scan"] / out[f"wall_{w}_s_floor"]
    out["loadavg_end"] = list(os.getloadavg())
    return {**out, **machine}


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--subjects", default="10,100", help="comma-separated subject counts N")
    ap.add_argument("--steps", default="240", help="comma-separated grid step counts T")
    ap.add_argument("--horizon", type=float, default=24.0, help="hours; dt = horizon / T")
    ap.add_argument("--discretization", choices=("euler", "exact"), default="euler",
                    help="K of the plain-JAX scan model: I + A dt (euler) or expm(A dt)")
    ap.add_argument("--warmup", type=int, default=300)
    ap.add_argument("--samples", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeat", type=int, default=200, help="timed value_and_grad calls")
    args = ap.parse_args(argv)
    machine = {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
               "python": platform.python_version(), "jax": jax.__version__,
               "jaxlib": jaxlib.__version__,
               "numpyro": numpyro.__version__}
    with tempfile.TemporaryDirectory() as d:
        for steps in [int(x) for x in args.steps.split(",")]:
            for n in [int(x) for x in args.subjects.split(",")]:
                print(json.dumps(run(n, steps, args, pathlib.Path(d), machine)), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
