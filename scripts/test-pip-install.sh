#!/usr/bin/env bash
# `pip install .` works as Python users expect: the repository installs into a fresh virtual
# environment (build-pip-venv/, remade each time) as the package pkscan with pkscan.jax, importable
# with no PYTHONPATH from any folder. Run by ctest (label jax) after scripts/setup-venv.sh.
#
# No downloads: the fresh venv sees the JAX venv's packages (numpy, jax, scikit-build-core,
# pybind11) through a .pth file, and pip builds without isolation. The CMake build folder
# build-pip/ (pyproject.toml) is kept, so later runs only rebuild what changed.
#
# Usage: test-pip-install.sh [BUILD_DIR]. With a build folder (ctest passes its own), the wheel's
# module links that build's library (PKSCAN_PREBUILT_DIR) instead of compiling it again.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$(pwd)
venv=$root/build-pip-venv
prebuilt=()
if [[ $# -ge 1 ]]; then
  prebuilt=(--config-settings=cmake.define.PKSCAN_PREBUILT_DIR="$(cd "$1" && pwd)")
fi

/usr/bin/python3 -m venv --clear "$venv"
site=$("$venv/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
"$root/.venv/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])" \
  >"$site/pkscan-jax-venv.pth"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-input \
  --no-build-isolation --no-deps --no-index "${prebuilt[@]}" "$root"

cd "$(mktemp -d)"
env -u PYTHONPATH "$venv/bin/python" - "$root" <<'PY'
import sys
import jax
import numpy as np
import pkscan
import pkscan.jax as pj

jax.config.update("jax_enable_x64", True)
root = sys.argv[1]
assert "build-pip-venv" in pkscan.__file__ and "site-packages" in pkscan.__file__, pkscan.__file__
p = pkscan.Predictor(root + "/config/examples/fit/dataset.csv", "two_compartment")
rows = p.make_parameters({"ka": 1.0, "ke": 0.2, "v_central": 10.0})
value, grad = jax.value_and_grad(lambda r: pj.log_likelihood(p, r, 0.3))(rows)
want = p.log_likelihood_all(rows, "additive", 0.3, gradient=False)
assert np.isclose(float(value), want, rtol=1e-13), (float(value), want)
print("test-pip-install: pkscan", pkscan.__version__, "from", pkscan.__file__, "; pkscan.jax ok")
PY
