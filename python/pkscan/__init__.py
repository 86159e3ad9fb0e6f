"""pkscan: linear pharmacokinetic compartment models for many subjects at once (simulation on a
time grid, NONMEM-format datasets, predictions, log-likelihoods and exact gradients for fitting).
See docs/python.md. `import pkscan.jax` adds the JAX operations (pkscan.jax.log_likelihood,
pkscan.jax.predict)."""

from . import _core
from ._core import *  # noqa: F401,F403  (the extension's public names: simulate, Predictor, ...)
from ._core import __version__, has_cuda  # noqa: F401

# The classes are defined in pkscan._core; name them as users import them.
for _name in dir(_core):
    _obj = getattr(_core, _name)
    if isinstance(_obj, type) and getattr(_obj, "__module__", None) == "pkscan._core":
        try:
            _obj.__module__ = "pkscan"
        except (AttributeError, TypeError):
            pass
del _name, _obj


class FitResult:
    """The result of :func:`fit`: a population estimation, as `pkscan fit FILE.yaml` writes it.

    Attributes: ``method``; ``ofv`` (NONMEM's objective, without the n log 2 pi constant);
    ``estimates`` ({'theta.ka': ..., 'omega.ka.ka': ..., 'sigma.proportional': ...}: THETA, the
    OMEGA elements as variances and covariances, SIGMA as variances; with covariates also
    'effect.<parameter>.<covariate>') and ``fixed`` (the same names: held or estimated);
    ``converged``, ``iterations``, ``evaluations``, ``message``,
    ``seconds``; ``se`` and ``rse`` (% of |estimate|) of the estimated quantities after a
    covariance step (empty without one), ``covariance`` and ``correlation`` (NumPy arrays over
    ``covariance_names``), ``condition_number``, ``covariance_ok`` (None: no step) and
    ``covariance_message``; ``cv`` (% : 100 sqrt(exp(OMEGA_kk) - 1) per OMEGA variance, 100
    sqrt(SIGMA) for the proportional SIGMA); ``shrinkage`` (% : NONMEM's ETAshrinkSD per OMEGA
    variance, EPSshrinkSD as 'eps'); ``subjects`` ({'id', 'eta' [subjects, ETAs], 'obji',
    'status'}), ``eta_names``; ``table`` (per observation: 'id', 'line', 'time', 'dv', 'pred',
    'ipred', 'res', 'ires', 'wres', 'cwres', 'cwresi', 'iwres', NONMEM's definitions in
    docs/run-files.md); ``history`` (per iteration: {'iteration', 'ofv'})."""

    def __init__(self, d):
        self.__dict__.update(d)
        self.se = d.get("se", {})
        self.covariance_names = d.get("covariance_names", [])
        self.covariance = d.get("covariance")
        self.correlation = d.get("correlation")
        self.condition_number = d.get("condition_number")
        self.covariance_message = d.get("covariance_message", "")
        self.rse = {k: 100.0 * v / abs(self.estimates[k]) for k, v in self.se.items()}
        import math
        self.cv = {}
        for k, v in self.estimates.items():
            parts = k.split(".")
            if parts[0] == "omega" and parts[1] == parts[2]:
                self.cv[k] = 100.0 * math.sqrt(math.expm1(v))
            elif k == "sigma.proportional":
                self.cv[k] = 100.0 * math.sqrt(v)

    def __repr__(self):
        return (f"FitResult(method={self.method!r}, ofv={self.ofv:.6f}, "
                f"converged={self.converged}, estimates={self.estimates!r})")


def fit(model, dataset, theta, iiv, error, estimation=None, covariates=None, threads=0):
    return FitResult(_core._fit(model, dataset, theta, iiv, error, estimation, covariates,
                                threads))


fit.__doc__ = _core._fit.__doc__
