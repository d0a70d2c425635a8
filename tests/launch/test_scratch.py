"""A job's temporary files go with the job: every rank, and everything it starts (forked, spawned or
exec'd), keeps them in the job's own folder, which the teardown removes however the ranks ended (SIGKILL,
SIGTERM, os._exit), so that no multiprocessing pymp-* folder or other temp file outlives a job."""

import json
import multiprocessing as mp
import multiprocessing.util
import os
import subprocess
import sys
import tempfile
import time

import pytest
import torch.distributed as dist

from resilience.launch import Job
from resilience.launch.scratch import PREFIX
from tests.temp_folders import left_in, private_temp

pytestmark = pytest.mark.multiprocess


def _make_temp_files(ctx, report_dir, then):
    """Temp files every way a rank or its writers make them, then the paths each way chose."""
    mp.current_process()._config["daemon"] = False  # a rank may start children, as the adapters allow
    fd, path = tempfile.mkstemp()
    os.write(fd, b"half a write")
    manager = mp.get_context("fork").Manager()  # a server in a pymp folder of its own, as megatron-core's
    queue = manager.Queue()
    queue.put(1)
    seen = {
        "tempfile": tempfile.gettempdir(),
        "multiprocessing": multiprocessing.util.get_temp_dir(),  # the rank's own pymp folder
        "new interpreter": subprocess.run(
            [sys.executable, "-c", "import tempfile; print(tempfile.gettempdir())"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip(),
        "file": path,
    }
    dist.barrier()
    report = os.path.join(report_dir, f"rank{ctx.rank}.json")
    with open(report + ".part", "w") as f:
        json.dump(seen, f)
    os.replace(report + ".part", report)
    if then == "killed":
        time.sleep(3600)  # the test SIGKILLs rank 1 here; the teardown ends rank 0
    return seen


def _reports(job, folder, world) -> list[dict]:
    end = time.monotonic() + 120
    while sum(f.endswith(".json") for f in os.listdir(folder)) < world:
        assert time.monotonic() < end and all(p.exitcode in (None, 0) for p in job.procs), "the ranks never reported"
        time.sleep(0.05)
    return [json.load(open(os.path.join(folder, f"rank{r}.json"))) for r in range(world)]


@pytest.mark.parametrize("then", ["killed", "returned"])
def test_nothing_a_rank_makes_in_temp_outlives_its_job(tmp_path, then):
    with private_temp() as temp:
        job = Job(_make_temp_files, 2, args=(str(tmp_path), then), timeout=120).start()
        try:
            seen = _reports(job, tmp_path, 2)
            folders = os.listdir(temp)
            assert len(folders) == 1 and folders[0].startswith(PREFIX), f"outside the job's folder: {left_in(temp)}"
            job_folder = os.path.join(temp, folders[0])
            for s in seen:  # every way a temp folder is found leads into the job's
                assert s["tempfile"] == s["new interpreter"] == job_folder, s
                assert os.path.dirname(s["multiprocessing"]) == job_folder, s
                assert os.path.isdir(s["multiprocessing"]) and os.path.isfile(s["file"]), left_in(temp)
            if then == "killed":
                job.kill(1)  # mid-way: its file half written, its Manager serving
            outcome = job.wait()
        finally:
            job.teardown()
        if then == "killed":
            assert outcome.outcomes[1].status == "signal", outcome.outcomes
        else:
            assert outcome.ok, outcome.failures
        assert left_in(temp) == []
