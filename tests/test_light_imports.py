"""Reading and refusing input does not import torch: a bad scenario file or `--help` answers at once."""

from __future__ import annotations

import subprocess
import sys

import pytest

PROBE = """
import contextlib, io, sys
from resilience.cli import main
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    try:
        code = main(sys.argv[1:])
    except SystemExit as e:
        code = e.code
print(code, "torch" in sys.modules)
"""


@pytest.mark.parametrize(
    "argv, code",
    [
        (["--help"], 0),
        (["run", "SCENARIO"], 2),
        (["job", "--", "no-such-trainer", "--ckpt", "{ckpt}"], 2),
        (["job", "--metric", "step (\\d+)", "--", sys.executable], 2),
    ],
)
def test_refusing_input_does_not_import_torch(tmp_path, argv, code):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nsteps:\n  - meteor: {}\n")
    argv = [str(bad) if a == "SCENARIO" else a for a in argv]
    out = subprocess.run([sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == [str(code), "False"], out.stderr[-2000:]


def test_lazy_names_are_never_shadowed_by_a_submodule():
    """A package's lazy name must not share a submodule's name: importing the submodule would put the module
    where the name was expected."""
    import importlib
    import pkgutil
    import types

    for package in ("resilience.state", "resilience.launch"):
        pkg = importlib.import_module(package)
        for info in pkgutil.iter_modules(pkg.__path__):
            importlib.import_module(f"{package}.{info.name}")
        for name in pkg.__all__:
            assert not isinstance(getattr(pkg, name), types.ModuleType), f"{package}.{name} is a module"
