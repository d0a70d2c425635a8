import sys
from pathlib import Path

import pytest

from resilience.fusefs import fuse_available
from resilience.job.command import JobCommand
from resilience.job.matrix import run_job
from resilience.job.options import JobOptions

ROOT = Path(__file__).resolve().parents[2]  # the repository
JOBS = Path(__file__).parent / "jobs"
QUICK = JOBS / "quick_train.py"


def quick(*extra: str) -> list[str]:
    """The quick test job's command line, {ckpt} in it."""
    return [sys.executable, str(QUICK), "--ckpt-dir", "{ckpt}", *extra]


def options(out, argv, **kw) -> JobOptions:
    return JobOptions(JobCommand.parse(argv, ckpt_dir=kw.pop("ckpt_dir", None), out=str(out)), out=str(out), **kw)


@pytest.fixture(scope="module")
def quick_golden(tmp_path_factory):
    """The golden run of the correct quick job, made once for a module (its golden/ folder)."""
    ok, why = fuse_available()
    if not ok:
        pytest.skip(why)
    out = tmp_path_factory.mktemp("golden")
    done = run_job(options(out, quick()))
    return done.reference.folder
