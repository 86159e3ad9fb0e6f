#!/usr/bin/env python3
"""NUTS on a population model: the seed's plain-JAX `lax.scan` model against pkscan.jax (issue 13).

Same data, same model, same priors, same NUTS settings and seed; only the log-likelihood differs:

  scan    the seed's formulation in plain JAX: per-subject K = expm(A dt) stacked [N, 2, 2],
          lax.scan of x_t = K x_{t-1} + b_t over the T steps of the grid (einsum), amounts
          divided by the central volume at the end, Gaussian log-likelihood of the observations
          on grid points. (K exact, not euler, so both models have the same posterior.)
  pkscan  pkscan.jax.log_likelihood on the same observations as a NONMEM dataset (XLA FFI).

Model: depot + central (ka, ke, v_central), log-normal between-subject variability on all three
(non-centered), additive error; N subjects, T steps of dt, 100 into the depot at 0 and every 24 h,
12 observations per subject. Reports wall time of MCMC.run (compilation included), the minimum
effective sample size over the typical values and sigma, ESS/s and their ratio, and the latency
of one jitted value_and_grad call of each log-likelihood.

Run (after bash test.sh):
    PYTHONPATH=build/python .venv/bin/python bench/jax_nuts.py --subjects 10,100
Prints one JSON line per subject count.
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


def problem(n, steps, dt, seed):
    rng = np.random.default_rng(seed)
    dose_steps = np.arange(0, steps + 1, int(round(24 / dt)))
    obs_steps = np.unique(np.linspace(1, steps, 12).round().astype(int))
    theta = np.array(TRUE) + OMEGA * rng.standard_normal((n, 3))
    return theta, dose_steps, obs_steps, rng


def scan_concentrations(theta, dose_steps, obs_steps, steps, dt):
    ka, ke, v = jnp.exp(theta[:, 0]), jnp.exp(theta[:, 1]), jnp.exp(theta[:, 2])
    zero = jnp.zeros_like(ka)
    A = jnp.stack([jnp.stack([-ka, zero], -1), jnp.stack([ka, -ke], -1)], -2)
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


def latency(f, args, repeat):
    jax.block_until_ready(f(*args))
    ts = []
    for _ in range(repeat):
        t = time.perf_counter()
        jax.block_until_ready(f(*args))
        ts.append(time.perf_counter() - t)
    return float(np.median(ts))


def run(n, args, tmp):
    theta, dose_steps, obs_steps, rng = problem(n, args.steps, args.dt, args.seed)
    pred = np.asarray(scan_concentrations(jnp.asarray(theta), dose_steps, obs_steps, args.steps,
                                          args.dt))
    dv = pred + SIGMA * rng.standard_normal(pred.shape)
    p = pkscan.Predictor(write_dataset(tmp / f"bench_{n}.csv", dv, dose_steps, obs_steps,
                                       args.dt), "two_compartment")
    dv_j = jnp.asarray(dv)

    def scan_loglik(th, sigma):
        c = scan_concentrations(th, dose_steps, obs_steps, args.steps, args.dt)
        r = (dv_j - c) / sigma
        return jnp.sum(-0.5 * r * r - jnp.log(sigma) - 0.5 * jnp.log(2 * jnp.pi))

    def pkscan_loglik(th, sigma):
        rows = pj.parameters(p, {"ka": jnp.exp(th[:, 0]), "ke": jnp.exp(th[:, 1]),
                                 "v_central": jnp.exp(th[:, 2])})
        return pj.log_likelihood(p, rows, sigma)

    # same value on the same problem (a check, not a timing)
    a = float(scan_loglik(jnp.asarray(theta), 0.2))
    b = float(pkscan_loglik(jnp.asarray(theta), 0.2))
    out = {"subjects": n, "steps": args.steps, "dt": args.dt, "observations": int(dv.size),
           "loglik_scan": a, "loglik_pkscan": b, "warmup": args.warmup,
           "samples": args.samples, "seed": args.seed}
    for name, ll in (("scan", scan_loglik), ("pkscan", pkscan_loglik)):
        vg = jax.jit(jax.value_and_grad(ll, argnums=(0, 1)))
        out[f"value_and_grad_s_{name}"] = latency(vg, (jnp.asarray(theta), jnp.float64(0.2)),
                                                  args.repeat)
        mcmc = MCMC(NUTS(make_model(n, ll), init_strategy=init_to_median),
                    num_warmup=args.warmup, num_samples=args.samples, progress_bar=False)
        t = time.perf_counter()
        mcmc.run(jax.random.PRNGKey(args.seed), extra_fields=("num_steps",))
        wall = time.perf_counter() - t
        draws = mcmc.get_samples(group_by_chain=True)
        ess = min(float(effective_sample_size(np.asarray(draws[k])))
                  for k in ("log_ka", "log_ke", "log_v", "sigma"))
        out[f"wall_s_{name}"] = wall
        out[f"min_ess_{name}"] = ess
        out[f"ess_per_s_{name}"] = ess / wall
        out[f"leapfrog_steps_{name}"] = int(np.sum(mcmc.get_extra_fields()["num_steps"]))
        out[f"log_v_mean_{name}"] = float(np.mean(draws["log_v"]))
    out["ess_per_s_ratio"] = out["ess_per_s_pkscan"] / out["ess_per_s_scan"]
    out["value_and_grad_ratio"] = out["value_and_grad_s_scan"] / out["value_and_grad_s_pkscan"]
    return out


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--subjects", default="10,100")
    ap.add_argument("--steps", type=int, default=240, help="grid steps T")
    ap.add_argument("--dt", type=float, default=0.1)
    ap.add_argument("--warmup", type=int, default=300)
    ap.add_argument("--samples", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeat", type=int, default=200, help="timed value_and_grad calls")
    args = ap.parse_args(argv)
    machine = {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
               "jax": jax.__version__, "numpyro": numpyro.__version__}
    with tempfile.TemporaryDirectory() as d:
        for n in [int(x) for x in args.subjects.split(",")]:
            print(json.dumps({**run(n, args, pathlib.Path(d)), **machine}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
