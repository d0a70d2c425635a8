"""The FUSE benchmark runs end to end on a small file (its figures are printed, never judged here)."""

import json

from benchmarks import fusefs


def test_the_fusefs_benchmark_runs(tmp_path, fuse):
    out = tmp_path / "figures.json"
    assert fusefs.main(["--size-mib", "2", "--repeats", "1", "--folder", str(tmp_path), "--json", str(out)]) == 0
    fig = json.loads(out.read_text())
    assert set(fig["ways"]) == {"bare", "seam+log", "mount", "mount+log"}
    assert set(fig["ratio_to_bare"]) == {"seam+log", "mount", "mount+log"} and fig["mount_log_to_seam_log"] > 0
    assert all(len(w["runs_s"]) == 1 for w in fig["ways"].values())
