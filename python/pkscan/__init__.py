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
