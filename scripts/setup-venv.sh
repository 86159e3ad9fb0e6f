#!/usr/bin/env bash
# Creates the JAX virtual environment .venv/ of the repository with the pinned packages of
# scripts/requirements-jax.txt (jax, jaxlib, numpyro, their own numpy, pytest, hypothesis, mpi4py) from
# PyPI, for pkscan.jax and its tests and the MPI test from Python. Called by test.sh.
#
# Fast and idempotent: when .venv/ already holds exactly the pinned set (a stamp with the hash
# of the requirements file), nothing is run. Built from /usr/bin/python3 (the interpreter the
# pkscan extension module is built for), without the system site packages: Debian's numpy stays
# for the rest of the project, the venv has its own.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

python=${PKSCAN_VENV_PYTHON:-/usr/bin/python3}
venv=.venv
requirements=scripts/requirements-jax.txt
stamp=$venv/.pkscan-requirements.sha256
want=$( (sha256sum "$requirements"; "$python" --version) | sha256sum | cut -d' ' -f1)

if [[ -x $venv/bin/python && -f $stamp && "$(cat "$stamp")" == "$want" ]]; then
  echo "setup-venv: $venv up to date"
  exit 0
fi

echo "setup-venv: creating $venv from $python with $requirements"
rm -rf "$venv"
"$python" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-input \
  -r "$requirements"
"$venv/bin/python" -c "import jax, jaxlib, numpyro, numpy, pytest, hypothesis; print('setup-venv: jax', jax.__version__, 'jaxlib', jaxlib.__version__, 'numpyro', numpyro.__version__, 'numpy', numpy.__version__, 'hypothesis', hypothesis.__version__)"
echo "$want" >"$stamp"
