"""The proxy's carrier of the fault records (objectstore.carrier) without a proxy: what it takes, what the
seam and the file system leave to it (a case whose way has no carrier of an HTTP kind is refused), and the
firings it records, matched by rank and by key under the case's prefix."""

import pytest

from resilience.errors import ConfigError
from resilience.faults import FaultReport, FaultyFileSystem, faults_from, inject, read_firings
from resilience.fusefs.injector import FuseInjector
from resilience.objectstore.carrier import VIA, ProxyCarrier
from resilience.objectstore.requests import S3Request
from resilience.runner import io_route

HTTP_RECORDS = [
    {"kind": "http_error", "op": "mpu_part"},
    {"kind": "connection_reset", "op": "put"},
    {"kind": "response_lost"},
    {"kind": "slow_write", "op": "get", "delay": 0.5},
    {"kind": "rank_crash", "op": "mpu_part", "when": "after"},
]


@pytest.mark.parametrize("record", HTTP_RECORDS, ids=lambda r: f"{r['kind']}@{r.get('op')}")
def test_the_seam_and_the_file_system_refuse_a_fault_on_a_request(record):
    [f] = faults_from([record])
    assert ProxyCarrier.CARRIES.carries(f)
    assert not FaultyFileSystem.CARRIES.carries(f) and not FuseInjector.CARRIES.carries(f)
    for way in ("seam", "fuse"):
        with pytest.raises(ConfigError, match=f"no carrier of --io {way} carries out {f.kind}"):
            io_route.refuse_uncarried(way, [f])
    with pytest.raises(ConfigError, match=f"the storage seam does not carry out {f.kind}"):
        with inject([f], rank=0):
            pass
    assert FuseInjector([f]).faults == []


def test_the_proxy_leaves_a_files_faults_to_the_seam_and_the_file_system():
    records = faults_from(
        [
            {"kind": "slow_write"},  # a file's writes
            {"kind": "rank_crash", "at_byte": 10},
            {"kind": "rank_crash", "phase": "write"},
            {"kind": "rank_crash", "op": "rename"},
            {"kind": "io_error"},
            {"kind": "rank_kill", "after": 1},
        ]
    )
    assert ProxyCarrier(records).faults == []
    io_route.refuse_uncarried("seam", records)  # the seam's way carries them all, as before
    assert [io_route.carrier_of("fuse", f) for f in records[:2]] == [FuseInjector.CARRIES] * 2


def test_a_record_fires_on_its_ranks_nth_request_under_the_prefix_and_is_reported(tmp_path):
    report = FaultReport(tmp_path / "fired.jsonl")
    carrier = ProxyCarrier(
        [
            {"kind": "http_error", "op": "put", "path": "iter_*/*.distcp", "rank": 1, "nth": 2},
            {"kind": "rank_crash", "op": "mpu_part", "when": "after"},
            {"kind": "io_error"},  # not its own: left out
        ],
        report=report,
        prefix="case3",
    )
    assert [f.kind for f in carrier.faults] == ["http_error", "rank_crash"]
    put = S3Request("put", "bk", "case3/iter_1/a.distcp")
    said = [carrier.before(rank, put, 10).answer for rank in (0, 1, None, 1, 1)]
    assert [a and (a.index, a.status, a.code) for a in said] == [None, None, None, (0, 503, "SlowDown"), None]
    part = S3Request("mpu_part", "bk", "case3/x.pt", upload_id="U", part=1)
    d = carrier.before(0, part, 10)
    assert d.crash is None and carrier.after(d) == 1  # the carrier kills, and reports it then (kill_client)
    [fired] = read_firings(report.path)
    assert (fired["kind"], fired["action"], fired["via"], fired["rank"], fired["key"]) == (
        "http_error",
        "answer 503 SlowDown",
        VIA,
        1,
        "case3/iter_1/a.distcp",
    )


def test_a_rank_armed_late_counts_its_requests_from_the_point_it_reached():
    carrier = ProxyCarrier([{"kind": "response_lost", "op": "put"}], arm_at=[4])
    put = S3Request("put", "bk", "k")
    assert carrier.before(0, put, 1).lose is None
    carrier.reached(0, 4)
    assert carrier.before(0, put, 1).lose == 0
    with pytest.raises(ValueError, match="2 arming points for 1 fault records"):
        ProxyCarrier([{"kind": "response_lost"}], arm_at=[None, 1])
