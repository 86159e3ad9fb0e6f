"""pkscan.jax tests: run with the JAX virtual environment's Python (.venv, scripts/setup-venv.sh)
and PYTHONPATH=build/python (ctest -L jax sets both)."""
import os
import pathlib

import jax
import pytest

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_platforms", "cpu")

SOURCE = pathlib.Path(os.environ.get("PKSCAN_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[2]))


@pytest.fixture(scope="session")
def source_dir():
    return SOURCE
