"""The runner makes each backend of a run once before forking its workers, so no worker imports it again;
a backend that cannot be made is left to its case, which reports why."""

from __future__ import annotations

import subprocess
import sys
import textwrap

PROBE = textwrap.dedent(
    """
    import sys
    from resilience.runner.adapters import preload
    from resilience.vocab import Combination

    module = "resilience.checkpoint.formats.torch_dcp"
    before = module in sys.modules
    preload([
        ("", Combination.parse("TORCH_DCP/torch_dcp/sync")),
        ("no.such.module:factory", Combination.parse("LEGACY/torch/sync")),
    ])
    print(before, module in sys.modules, "torch._dynamo" in sys.modules)
    """
)


def test_preload_imports_each_backend_here_and_leaves_a_broken_one_to_its_case():
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["False", "True", "True"]
