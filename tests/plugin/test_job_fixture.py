"""The `resilience_job` fixture from a test, as a team would use it: the columns asked for run into the
session's run folder, and failing ones raise one JobFailed naming each with its replay."""

import pytest

from resilience.pytest_plugin.job_trial import JobFailed
from resilience.verdicts import PASS
from tests.job.conftest import quick

pytestmark = pytest.mark.multiprocess


def test_a_correct_job_returns_its_run(resilience_job, fuse):
    done = resilience_job(quick(), ["kill-job-between", "tracker-empty"])
    assert [(r.column, r.verdict) for r in done.rows] == [("kill-job-between", PASS), ("tracker-empty", PASS)]


def test_every_failing_column_is_named_with_its_replay(resilience_job, fuse):
    with pytest.raises(JobFailed) as failed:
        resilience_job(quick("--variant", "scratch"), ["kill-job-between", "kill-rank-write", "tracker-empty"])
    text = str(failed.value)
    assert text.startswith("3 column(s) of ") and "--variant scratch" in text, text
    for column in ("kill-job-between", "kill-rank-write", "tracker-empty"):
        assert f"  {column}: FAIL: " in text and f"resilience job --column {column} --golden " in text, text
