#!/usr/bin/env bash
# `pip install` as Python users run it: a fresh virtual environment and pip's build isolation (the
# build requirements of pyproject.toml come from PyPI, among them the pinned jaxlib whose XLA FFI
# headers pkscan.jax's handlers are compiled against), then `import pkscan.jax` from outside the
# repository with no PYTHONPATH, checked against the Predictor (log-likelihood and gradient).
#
# Usage:
#   test-pip-install.sh BUILD_DIR   (ctest -L jax) `pip install .` with the module linking the
#       library of BUILD_DIR (PKSCAN_PREBUILT_DIR), so only the module compiles; `import pkscan.jax`
#       must then say that jax is missing; then `pip install jax` (the pinned version of
#       scripts/requirements-jax.txt) and the check.
#   test-pip-install.sh --full      (.ci/run, after test.sh) `pip install ".[jax]"` compiling
#       everything, and the check; then the oldest jax that docs/python.md lists (the lower bound
#       of pyproject.toml's extra `jax`) passes the check, and the jax before it, whose XLA does
#       not accept the handlers, makes `import pkscan.jax` raise a one-line ImportError.
# Each run has its own venv and CMake build folder in a temporary folder, removed at the end;
# pip's download cache (~/.cache/pip) keeps later runs from downloading again.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$(pwd)

mode=prebuilt
if [[ ${1:-} == --full ]]; then
  mode=full
elif [[ $# -eq 1 && -f $1/CMakeCache.txt ]]; then
  prebuilt_dir=$(cd "$1" && pwd)
else
  echo "usage: $0 BUILD_DIR | --full" >&2
  exit 2
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
venv=$tmp/venv
pip=("$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-input)
# The jax of the project's JAX venv, and the oldest jax that the extra `jax` allows.
pinned_jax=$(sed -n 's/^jax==//p' scripts/requirements-jax.txt)
oldest_jax=$(/usr/bin/python3 -c '
import re, tomllib
extra = tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["jax"]
print(next(m.group(1) for r in extra if (m := re.fullmatch(r"jaxlib>=([0-9.]+)", r))))')
# The last jaxlib with an older XLA FFI API than the pinned headers' (0.2 against 0.3).
too_old_jax=0.9.0.1

seconds() { echo $((SECONDS - $1)); }
passed=0

# check: pkscan installed in the venv (not the repository) and pkscan.jax's value and gradient
# under jax.value_and_grad equal to Predictor.log_likelihood_all's.
check() {
  (cd "$tmp" && env -u PYTHONPATH "$venv/bin/python" - "$root" <<'PY'
import sys
import jax
import jaxlib
import numpy as np
import pkscan
import pkscan.jax as pj

jax.config.update("jax_enable_x64", True)
root = sys.argv[1]
assert pkscan.__file__.startswith(sys.prefix) and "site-packages" in pkscan.__file__, pkscan.__file__
p = pkscan.Predictor(root + "/config/examples/fit/dataset.csv", "two_compartment")
rows = p.make_parameters({"ka": 1.0, "ke": 0.2, "v_central": 10.0})
value, grad = jax.value_and_grad(lambda r: pj.log_likelihood(p, r, 0.3))(rows)
want, want_grad, _ = p.log_likelihood_all(rows, "additive", 0.3)
assert np.isclose(float(value), want, rtol=1e-13), (float(value), want)
assert np.allclose(np.asarray(grad), want_grad, rtol=1e-12, atol=0), (np.asarray(grad), want_grad)
assert np.any(want_grad != 0)
print(f"test-pip-install: pkscan {pkscan.__version__} from {pkscan.__file__}; pkscan.jax ok "
      f"(jax {jax.__version__}, jaxlib {jaxlib.__version__}, handlers of jaxlib "
      f"{pkscan._core._xla_ffi_jaxlib})")
PY
  )
  passed=$((passed + 1))
}

# expect_import_error PATTERN: `import pkscan.jax` raises ImportError with a one-line message
# matching PATTERN, and JAX (when installed) still computes afterwards.
expect_import_error() {
  (cd "$tmp" && env -u PYTHONPATH "$venv/bin/python" - "$1" <<'PY'
import re
import sys
try:
    import pkscan.jax  # noqa: F401
except ImportError as e:
    message = str(e)
    assert "\n" not in message and re.search(sys.argv[1], message), message
    print("test-pip-install: import pkscan.jax refused as expected:", message)
else:
    raise AssertionError("import pkscan.jax worked")
try:
    import jax.numpy as jnp
except ModuleNotFoundError:
    pass
else:
    assert float(jnp.arange(4.0).sum()) == 6.0
PY
  )
  passed=$((passed + 1))
}

/usr/bin/python3 -m venv "$venv"
start=$SECONDS
if [[ $mode == prebuilt ]]; then
  "${pip[@]}" --config-settings=build-dir="$tmp/build" --config-settings=cmake.define.PKSCAN_PREBUILT_DIR="$prebuilt_dir" "$root"
  echo "test-pip-install: pip install . (module only) $(seconds "$start") s"
  expect_import_error "needs jax and jaxlib: pip install 'pkscan\[jax\]'"
  "${pip[@]}" "jax==$pinned_jax"
  check
else
  "${pip[@]}" --config-settings=build-dir="$tmp/build" "$root[jax]"
  echo "test-pip-install: pip install \".[jax]\" (everything compiled) $(seconds "$start") s"
  check
  "${pip[@]}" "jax==$oldest_jax" "jaxlib==$oldest_jax"
  check
  "${pip[@]}" "jax==$too_old_jax" "jaxlib==$too_old_jax"
  expect_import_error "jaxlib $too_old_jax cannot run pkscan's XLA FFI handlers, built with the XLA FFI API 0\.3 of jaxlib $pinned_jax \(its XLA has the older XLA FFI API 0\.2\)"
  echo "test-pip-install: $passed passed, 0 failed"
fi
