"""resilience.job.report, the optional two-line hook: the line it prints is a point of the metric curve
with a digest of the whole state, and a state the printed loss cannot tell apart fails curve_equal."""

import io

import pytest
import torch

from resilience.job import report, state_digest
from resilience.job.matrix import run_job
from resilience.job.patterns import Patterns, read_lines
from resilience.verdicts import FAIL, PASS

from .conftest import options, quick


def test_the_line_is_a_metric_point_with_the_rank_and_the_digest():
    model = torch.nn.Linear(3, 2)
    line = report(7, loss=0.25, state=model, rank=1, file=io.StringIO())
    [p] = read_lines(Patterns.from_options(), [line]).points
    assert (p.step, p.loss, dict(p.extra)["rank"]) == (7, 0.25, "1")
    assert dict(p.extra)["digest"] == state_digest(model.state_dict()) == state_digest(model)
    assert read_lines(Patterns.from_options(), [line]).digests() == {(7, 1): state_digest(model)}


def test_the_digest_sees_one_ulp_a_dtype_and_a_shape():
    t = torch.arange(6, dtype=torch.float32)
    base = state_digest({"w": t, "step": 3})
    nudged = t.clone()
    nudged[2] = torch.nextafter(nudged[2], torch.tensor(10.0))
    assert state_digest({"w": nudged, "step": 3}) != base
    assert state_digest({"w": t.to(torch.float64), "step": 3}) != base
    assert state_digest({"w": t.reshape(2, 3), "step": 3}) != base
    assert state_digest({"w": t.to(torch.bfloat16), "step": 3}) == state_digest({"w": t.to(torch.bfloat16), "step": 3})
    assert state_digest({"step": 3, "w": t}) == base  # key order does not matter


@pytest.mark.multiprocess
def test_weights_restored_through_float32_fail_only_with_the_hook(tmp_path, fuse):
    hooked = run_job(
        options(tmp_path / "a", quick("--report-state", "--variant", "rounded"), columns=("kill-job-between",))
    )
    [row] = hooked.rows
    curve = {v.checker: v for v in row.checkers}["curve_equal"]
    assert row.verdict == FAIL and curve.status == FAIL, row.detail
    assert "the state differs from the golden run's" in curve.detail and "whatever its loss" in curve.detail
    plain = run_job(options(tmp_path / "b", quick("--variant", "rounded"), columns=("kill-job-between",)))
    assert plain.rows[0].verdict == PASS, plain.rows[0].detail  # the printed loss hides it
