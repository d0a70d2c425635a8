"""Cases whose checkpoints live on an S3 server (`storage: s3`): real ranks write through the seam to moto on
loopback, the nemesis watches the bucket's listing, damage at rest is done on a pulled copy and pushed back,
and the case folder keeps the bucket's objects as evidence while the store keeps nothing."""

from __future__ import annotations

import json
import os
from dataclasses import replace

import pytest

pytest.importorskip("moto", reason="moto is not installed (pip install '.[s3]')")
pytest.importorskip("boto3", reason="boto3 is not installed (pip install '.[s3]')")

from resilience.errors import ConfigError  # noqa: E402
from resilience.history import read_events  # noqa: E402
from resilience.objectstore import mirror  # noqa: E402
from resilience.objectstore.server import ACCESS_KEY, SECRET_KEY  # noqa: E402
from resilience.objectstore.store import check_storage, run_store  # noqa: E402
from resilience.runner.run import run_case  # noqa: E402
from resilience.runner.scenario import load_file, load_text as loads  # noqa: E402
from resilience.runner.scenario_schema import ScenarioError  # noqa: E402
from resilience.vocab.combos import Combination  # noqa: E402

pytestmark = pytest.mark.multiprocess
SCENARIOS = os.path.join(os.path.dirname(__file__), "..", "..", "scenarios")
GLOBAL = Combination.parse("GLOBAL/torch_dist/sync")


@pytest.fixture(scope="module")
def store():
    with run_store("s3") as s:
        yield s


def _scenario(name: str):
    return replace(load_file(os.path.join(SCENARIOS, name)), storage="s3")


def _case_line(case_dir) -> dict:
    return next(e.value for e in read_events(os.path.join(case_dir, "history.jsonl")) if e.f == "case")


def test_a_kill_mid_save_on_s3_keeps_the_older_checkpoint_and_the_bucket_as_evidence(store, tmp_path):
    result = run_case(_scenario("external-kill.yaml"), GLOBAL, str(tmp_path / "case"), store=store)
    assert result.verdict == "PASS", result.detail
    assert [f["status"] for f in result.faults if f["fault"].startswith("rank_kill")] == ["fired"], result.faults
    assert _case_line(result.case_dir)["storage"].startswith("s3://")
    kept = sorted(os.listdir(tmp_path / "case" / "ckpt"))
    assert "iter_0000002" in kept and "iter_0000003" not in kept, kept
    assert all(not mirror.keys(s) for s in [store.for_case(str(tmp_path / "case"))])  # nothing left in the store


def test_damage_at_rest_reaches_the_objects_and_the_load_falls_back(store, tmp_path):
    result = run_case(_scenario("corrupt-bitflip.yaml"), GLOBAL, str(tmp_path / "case"), store=store)
    assert result.verdict == "PASS", result.detail
    events = read_events(os.path.join(result.case_dir, "history.jsonl"))
    damaged = [e.value for e in events if e.f == "corrupt" and e.type == "ok"]
    assert damaged and damaged[0]["iteration"] is not None, damaged
    loads_ = [e.value for e in events if e.f == "load" and e.type == "ok"]
    assert loads_ and loads_[-1]["iteration"] < damaged[0]["iteration"], (loads_, damaged)  # the bitflip was seen


def test_a_case_alone_starts_its_own_server_and_lost_unsynced_writes_are_not_applicable(tmp_path):
    scenario = loads(
        """
name: power-loss-on-s3
storage: s3
combinations: [GLOBAL/torch_dist/sync]
topology: tp1pp1dp2
steps:
  - train: 1
  - save: {}
  - lose_unsynced: {max_states: 8}
""",
        "power-loss-on-s3.yaml",
    )
    result = run_case(scenario, GLOBAL, str(tmp_path / "case"))  # no run store: run_case starts one
    statuses = {f["status"] for f in result.faults}
    assert statuses == {"not applicable"}, result.faults
    assert "no unsynced writes to lose" in result.faults[0]["detail"]


def test_a_scenario_file_names_its_storage_and_a_bad_one_is_refused():
    assert loads("name: s\nstorage: s3\nsteps: [{train: 1}]\n").storage == "s3"
    assert loads("name: s\nstorage: s3://bucket/run\nsteps: [{train: 1}]\n").storage == "s3://bucket/run"
    with pytest.raises(ScenarioError, match=r"storage: unknown storage 'ftp://host/x'"):
        loads("name: s\nstorage: ftp://host/x\nsteps: [{train: 1}]\n")
    with pytest.raises(ConfigError, match="bucket name"):
        check_storage("s3://UP/x")


def test_a_cluster_store_is_checked_before_anything_runs(store, monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    with pytest.raises(ConfigError, match="bucket 'no-such-bucket' does not exist"):
        with run_store("s3://no-such-bucket/run", store.endpoint):
            pass
    with pytest.raises(ConfigError, match="nothing answers at http://127.0.0.1:9"):
        with run_store("s3://bucket/run", "http://127.0.0.1:9"):
            pass
    with pytest.raises(ConfigError, match="no endpoint"):
        monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
        with run_store("s3://bucket/run"):
            pass
    store.server.bucket("cluster-bucket")
    with run_store("s3://cluster-bucket/runs/a", store.endpoint) as cluster:
        place = cluster.for_case("/tmp/x/cases/000-kill")
        assert place.bucket == "cluster-bucket" and place.prefix.startswith("runs/a/cases-000-kill-")


@pytest.mark.parametrize("client", ["fsspec", "msc"])
def test_stock_dcp_writes_to_the_bucket_through_its_own_writer(store, tmp_path, client):
    """DCP's fsspec writer over s3fs, and multi-storage-client's writer on an msc:// S3 profile (not its
    default, local one), each through the fault proxy: every request signed by a rank."""
    if client == "msc":
        pytest.importorskip("multistorageclient", reason="multi-storage-client is not installed (pip install '.[s3]')")
    from resilience.runner.matrix import fault_scenario

    scenario = replace(fault_scenario("save/load", 0), storage="s3")
    combo = Combination.parse("TORCH_DCP/torch_dcp/sync")
    result = run_case(scenario, combo, str(tmp_path / "case"), backend=f"dcp:client={client}", store=store)
    requests = [json.loads(line) for line in open(tmp_path / "case" / "s3" / "job0.jsonl")]
    assert {r["rank"] for r in requests if r["op"] == "put"} == {0, 1}, requests
    assert result.verdict == "PASS", result.detail
    kept = sorted(os.listdir(tmp_path / "case" / "ckpt"))
    assert kept and all(k.startswith("step-") for k in kept), kept  # torchtitan's folders, pulled from the bucket
    assert ".metadata" in os.listdir(tmp_path / "case" / "ckpt" / kept[-1])


def test_a_backend_outside_the_seam_that_cannot_reach_a_store_is_refused(store, tmp_path):
    scenario = _scenario("external-kill.yaml")
    with pytest.raises(ConfigError, match="would never reach the object store"):
        run_case(scenario, Combination.parse("LOCAL/torch/sync"), str(tmp_path / "case"), backend="nvrx", store=store)


HTTP_FAULTS = [
    "{kind: http_error, status: 503}",
    "{kind: http_error, status: 500}",
    "{kind: connection_reset}",
    "{kind: response_lost}",
    "{kind: slow_write, op: put, delay: 0.2}",
    "{kind: rank_crash, op: put}",
]


@pytest.mark.parametrize("fault", HTTP_FAULTS)
def test_each_http_fault_fires_at_the_proxy_on_the_upload_it_aims_at(store, tmp_path, fault):
    record = fault[:-1] + ', rank: 1, path: "@data"}'
    scenario = loads(
        f"""
name: http-fault
storage: s3
topology: tp1pp1dp2
steps: [{{train: 2}}, save, finalize, {{train: 1}}, {{fault: {record}}}, save, finalize, {{resume: {{continue: 1}}}}]
""",
        "http-fault.yaml",
    )
    result = run_case(scenario, GLOBAL, str(tmp_path / "case"), store=store)
    assert result.verdict == "PASS", result.detail
    assert [f["status"] for f in result.faults] == ["fired"], result.faults
    requests = [json.loads(line) for line in open(tmp_path / "case" / "s3" / "job0.jsonl")]
    struck = [r for r in requests if r["faults"]]
    assert len(struck) == 1 and struck[0]["rank"] == 1 and struck[0]["key"].endswith("__1_0.distcp"), struck
    from resilience.report.timeline import read_case

    lanes = {m.lane for m in read_case(str(tmp_path / "case"), 0.0).marks if m.kind == "fault"}
    assert "rank 1 · s3" in lanes, lanes  # the request it struck, on the timeline in its rank's lane


def test_a_power_loss_on_an_object_store_loses_an_answer_and_kills_its_rank(store, tmp_path):
    from resilience.runner.matrix import fault_scenario

    scenario = replace(fault_scenario("lost_unsynced", 0), storage="s3")
    result = run_case(scenario, GLOBAL, str(tmp_path / "case"), store=store)
    assert result.verdict == "PASS", result.detail
    assert {f["fault"].split()[0]: f["status"] for f in result.faults} == {
        "response_lost": "fired",
        "rank_crash": "fired",
    }, result.faults
    left = [e.value for e in read_events(os.path.join(result.case_dir, "history.jsonl")) if e.f == "store_after_kill"]
    assert left and any(k.endswith("__1_0.distcp") for k in left[0]["unacknowledged"]), left


def test_a_pull_keeps_what_a_rank_wrote_beside_the_objects_and_drops_what_the_store_no_longer_holds(store, tmp_path):
    """The marker a hostile pickle's command leaves in the checkpoint folder is evidence: pulling the store's
    objects into that folder must not wipe it (it hid a FAIL of stock DCP's pickle column on S3)."""
    place = store.for_case(str(tmp_path / "case"))
    client = place.client()
    for key in ("iter_0000002/a.bin", "iter_0000003/b.bin"):
        client.put_object(Bucket=place.bucket, Key=key, Body=b"x" * 10)
    folder = str(tmp_path / "ckpt")
    assert sorted(mirror.pull(place, folder)) == ["iter_0000002/a.bin", "iter_0000003/b.bin"]
    with open(os.path.join(folder, "HOSTILE_PICKLE_RAN"), "w") as f:
        f.write("ran\n")
    client.delete_object(Bucket=place.bucket, Key="iter_0000003/b.bin")
    assert sorted(mirror.pull(place, folder)) == ["HOSTILE_PICKLE_RAN", "iter_0000002/a.bin"]
    assert not os.path.exists(os.path.join(folder, "iter_0000003"))
    mirror.remove(place)


@pytest.mark.parametrize(
    "broken, column, combo",
    [
        ("store_errors_swallowed", "s3-reset", "GLOBAL/torch_dist/sync"),  # a reset mid-body, swallowed
        ("finalize_timeout", "s3-slow", "GLOBAL/torch_dist/async"),  # a slow upload taken for a finished one
    ],
)
def test_the_other_http_faults_catch_a_broken_variant_on_durability(store, tmp_path, broken, column, combo):
    from resilience.runner.matrix import fault_scenario

    scenario = replace(fault_scenario(column, 0), storage="s3")
    result = run_case(
        scenario, Combination.parse(combo), str(tmp_path / "case"), backend=f"broken:{broken}", store=store
    )
    assert result.verdict == "FAIL", result.detail
    assert "durability" in {v.checker for v in result.verdicts if v.status == "FAIL"}, result.detail
    reference = run_case(scenario, Combination.parse(combo), str(tmp_path / "ref"), store=store)
    assert reference.verdict == "PASS", reference.detail  # the fault itself breaks nothing the reference promises
