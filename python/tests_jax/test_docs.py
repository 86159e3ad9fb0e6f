"""Every ```python block of docs/python.md and README.md runs as printed (with the JAX virtual
environment's Python, from the source folder, so relative paths are those of the repository).
The blocks of one file run in order in one namespace (later blocks use earlier names). No
block is skipped."""
import os
import pathlib
import re

import pytest

SOURCE = pathlib.Path(os.environ.get("PKSCAN_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[2]))


def blocks(doc):
    text = (SOURCE / doc).read_text()
    found = [(text[:m.start()].count("\n") + 1, m.group(1))
             for m in re.finditer(r"```python\n(.*?)```", text, re.S)]
    assert found, f"no python blocks in {doc}"
    return found


@pytest.mark.parametrize("doc", ["docs/python.md", "README.md"])
def test_python_blocks_run(doc, monkeypatch):
    monkeypatch.chdir(SOURCE)
    namespace = {"__name__": "__doc_example__"}
    for line, code in blocks(doc):
        try:
            exec(compile(code, f"{doc}:{line}", "exec"), namespace)
        except Exception as e:  # name the block in the failure
            raise AssertionError(f"{doc}, block at line {line}: {type(e).__name__}: {e}") from e
