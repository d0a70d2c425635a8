"""The fault-injecting proxy in front of a real S3 server (moto on loopback), with boto3 clients through it:
it passes requests and answers on bit for bit and logs each with the rank whose key signed it, and each
fault on a request does what it says, seen from the client, the server and the log."""

import contextlib
import io
import multiprocessing
import os
import signal
import time

import pytest

pytest.importorskip("moto", reason="moto is not installed (pip install '.[s3]')")
pytest.importorskip("boto3", reason="boto3 is not installed (pip install '.[s3]')")

from botocore.exceptions import BotoCoreError, ClientError  # noqa: E402

from resilience.faults import read_firings  # noqa: E402
from resilience.objectstore.client import s3_client  # noqa: E402
from resilience.objectstore.journal import crash_view  # noqa: E402
from resilience.objectstore.proxy import FaultProxy  # noqa: E402
from resilience.objectstore.requests import rank_access_key  # noqa: E402
from resilience.objectstore.server import REGION, SECRET_KEY, EmbeddedS3  # noqa: E402
from resilience.objectstore.storage import S3FileSystem  # noqa: E402
from resilience.objectstore.url import S3Location  # noqa: E402

pytestmark = pytest.mark.multiprocess
MIB = 1 << 20


@pytest.fixture(scope="module")
def s3():
    with EmbeddedS3() as server:
        yield server


@pytest.fixture
def proxied(s3, tmp_path):
    """proxied(bucket, faults, **kw): a proxy with `faults` in front of the server, a bucket of its own, and
    its log and report in the test's folder."""
    with contextlib.ExitStack() as stack:

        def make(bucket: str, faults=(), **kw) -> FaultProxy:
            s3.bucket(bucket)
            log, report = tmp_path / f"{bucket}.requests.jsonl", tmp_path / f"{bucket}.fired.jsonl"
            return stack.enter_context(FaultProxy(s3.endpoint, faults, log=log, report=report, **kw))

        yield make


def client(endpoint: str, rank: int, attempts: int | None = None):
    """Rank `rank`'s client: the project's (objectstore.client), or one making `attempts` in all."""
    if attempts is None:
        return s3_client(endpoint, rank_access_key(rank), SECRET_KEY, REGION)
    import boto3
    from botocore.config import Config

    config = Config(retries={"total_max_attempts": attempts, "mode": "standard"}, s3={"addressing_style": "path"})
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=rank_access_key(rank),
        aws_secret_access_key=SECRET_KEY,
        region_name=REGION,
        config=config,
    )


# a body of bytes is sent at once; a file's waits for the server's 100 Continue first (Expect: 100-continue)
BODIES = pytest.mark.parametrize("body", [bytes, io.BytesIO], ids=["bytes", "expect-100"])


def logged(proxy: FaultProxy, n: int, timeout: float = 10.0) -> list[dict]:
    """The proxy's log once it holds `n` requests: a client has its answer a moment before its line."""
    deadline = time.monotonic() + timeout
    while len(log := proxy.requests()) < n and time.monotonic() < deadline:
        time.sleep(0.01)
    return log


def is_on_server(s3, bucket: str, key: str) -> bool:
    try:
        s3.client().head_object(Bucket=bucket, Key=key)
        return True
    except ClientError:
        return False


def test_requests_and_answers_pass_bit_for_bit_and_each_is_logged_with_its_rank(s3, proxied):
    proxy = proxied("plain")
    c = client(proxy.endpoint, 2)
    small, big = os.urandom(3 * MIB + 7), os.urandom(6 * MIB + 11)
    c.put_object(Bucket="plain", Key="run/a.bin", Body=small)
    fs = S3FileSystem(c, S3Location("plain", "run"), "/ckpt", part_bytes=5 * MIB)
    with fs.open_write("/ckpt/big.bin") as f:  # a multipart upload of two parts
        f.write(big)
    assert c.get_object(Bucket="plain", Key="run/a.bin")["Body"].read() == small
    assert c.get_object(Bucket="plain", Key="run/big.bin", Range="bytes=5-9")["Body"].read() == big[5:10]
    assert s3.client().get_object(Bucket="plain", Key="run/big.bin")["Body"].read() == big  # the server has it
    assert c.head_object(Bucket="plain", Key="run/big.bin")["ContentLength"] == len(big)
    assert fs.files_under("/ckpt") == ["a.bin", "big.bin"]
    c.copy_object(Bucket="plain", Key="run/c.bin", CopySource={"Bucket": "plain", "Key": "run/a.bin"})
    c.delete_object(Bucket="plain", Key="run/a.bin")
    c.delete_objects(Bucket="plain", Delete={"Objects": [{"Key": "run/c.bin"}]})
    log = logged(proxy, 12)
    assert [r["op"] for r in log] == [
        "put",
        *("mpu_create", "mpu_part", "mpu_part", "mpu_complete"),
        *("get", "get", "head", "list", "copy", "delete", "delete"),
    ]
    assert {r["rank"] for r in log} == {2} and all(r["status"] == r["server_status"] < 300 for r in log)
    create, part1, part2, _ = log[1:5]
    assert create["upload_id"] and part1["upload_id"] == part2["upload_id"] == create["upload_id"]
    assert (part1["part"], part1["bytes_in"], part2["bytes_in"]) == (1, 5 * MIB, len(big) - 5 * MIB)
    assert (log[6]["range"], log[6]["bytes_out"]) == ("bytes=5-9", 5) and log[-1]["keys"] == ["run/c.bin"]
    assert crash_view(log)["objects"] == [
        {"bucket": "plain", "key": "run/big.bin", "op": "mpu_complete", "acknowledged": True}
    ]
    assert all(r["start"] <= r["end"] and r["faults"] == [] for r in log)


@BODIES
def test_a_503_is_seen_without_retries_and_retried_away_with_them(s3, proxied, body):
    faults = [{"kind": "http_error", "op": "put", "rank": 0}, {"kind": "http_error", "op": "put", "rank": 1}]
    name = f"slowdown-{body.__name__.lower()}"
    proxy = proxied(name, faults)
    with pytest.raises(ClientError) as e:
        client(proxy.endpoint, 0, attempts=1).put_object(Bucket=name, Key="a", Body=body(b"x" * 100))
    assert e.value.response["Error"]["Code"] == "SlowDown" and not is_on_server(s3, name, "a")
    client(proxy.endpoint, 1, attempts=3).put_object(Bucket=name, Key="b", Body=body(b"y" * MIB))
    assert s3.client().get_object(Bucket=name, Key="b")["Body"].read() == b"y" * MIB
    log = [(r["rank"], r["status"], r["server_status"], r["faults"]) for r in logged(proxy, 3)]
    assert log == [(0, 503, None, ["http_error"]), (1, 503, None, ["http_error"]), (1, 200, 200, [])]
    fired = read_firings(proxy.report)
    assert [(f["kind"], f["action"], f["rank"], f["via"]) for f in fired] == [
        ("http_error", "answer 503 SlowDown", 0, "s3-proxy"),
        ("http_error", "answer 503 SlowDown", 1, "s3-proxy"),
    ]


@BODIES
def test_a_reset_mid_body_leaves_no_object_and_the_client_an_error(s3, proxied, body):
    name = f"reset-{body.__name__.lower()}"
    proxy = proxied(name, [{"kind": "connection_reset", "op": "put", "keep": 1000}])
    with pytest.raises(BotoCoreError):
        client(proxy.endpoint, 0, attempts=1).put_object(Bucket=name, Key="a", Body=body(os.urandom(MIB)))
    assert not is_on_server(s3, name, "a")
    [r] = logged(proxy, 1)
    assert (r["bytes_in"], r["server_status"], r["status"], r["faults"]) == (1000, None, None, ["connection_reset"])
    assert crash_view([r])["objects"] == []


@BODIES
def test_a_lost_answer_is_an_error_for_a_write_the_server_did(s3, proxied, body):
    name = f"lost-{body.__name__.lower()}"
    proxy = proxied(name, [{"kind": "response_lost", "op": "put"}])
    data = os.urandom(MIB)
    with pytest.raises(BotoCoreError):
        client(proxy.endpoint, 0, attempts=1).put_object(Bucket=name, Key="a", Body=body(data))
    assert s3.client().get_object(Bucket=name, Key="a")["Body"].read() == data
    [r] = logged(proxy, 1)
    assert (r["server_status"], r["status"], r["faults"]) == (200, None, ["response_lost"])
    assert crash_view([r])["objects"] == [{"bucket": name, "key": "a", "op": "put", "acknowledged": False}]


def test_a_delay_shows_in_the_requests_duration(proxied):
    proxy = proxied("delay", [{"kind": "slow_write", "op": "get", "delay": 0.5, "path": "*.pt"}])
    c = client(proxy.endpoint, 0)
    c.put_object(Bucket="delay", Key="run/a.pt", Body=b"x")
    c.get_object(Bucket="delay", Key="run/a.pt")["Body"].read()
    put, get = logged(proxy, 2)
    assert get["end"] - get["start"] >= 0.5 > put["end"] - put["start"]
    assert (put["faults"], get["faults"]) == ([], ["slow_write"])


def _upload_three_parts(endpoint: str) -> None:
    """A rank's multipart upload of three parts (a forked child: the proxy kills it at its second)."""
    c = client(endpoint, 3)
    upload = c.create_multipart_upload(Bucket="crash", Key="run/big.distcp")["UploadId"]
    parts = []
    for n in (1, 2, 3):
        etag = c.upload_part(Bucket="crash", Key="run/big.distcp", UploadId=upload, PartNumber=n, Body=b"p" * 5 * MIB)
        parts.append({"ETag": etag["ETag"], "PartNumber": n})
    c.complete_multipart_upload(Bucket="crash", Key="run/big.distcp", UploadId=upload, MultipartUpload={"Parts": parts})


def test_a_rank_killed_at_a_part_leaves_an_orphaned_upload_and_no_object(s3, proxied):
    proxy = proxied("crash", [{"kind": "rank_crash", "op": "mpu_part", "nth": 2, "rank": 3, "path": "*.distcp"}])
    child = multiprocessing.get_context("fork").Process(target=_upload_three_parts, args=(proxy.endpoint,))
    child.start()
    child.join(60)
    assert child.exitcode == -signal.SIGKILL
    assert not is_on_server(s3, "crash", "run/big.distcp")
    [upload] = s3.client().list_multipart_uploads(Bucket="crash")["Uploads"]
    assert upload["Key"] == "run/big.distcp"
    log = logged(proxy, 3)  # create, part 1, part 2 (killed before it was sent)
    view = crash_view(log)
    assert view["objects"] == [] and view["orphans"] == [
        {"bucket": "crash", "key": "run/big.distcp", "upload_id": upload["UploadId"], "parts": [1]}
    ]
    [fired] = read_firings(proxy.report)
    assert (fired["action"], fired["when"], fired["pids"], fired["rank"]) == ("sigkill", "before", [child.pid], 3)
    assert log[-1]["killed"] == [child.pid] and log[-1]["faults"] == ["rank_crash"]


def test_a_fault_aimed_at_rank_1_never_fires_on_rank_0s_requests(s3, proxied):
    proxy = proxied("ranks", [{"kind": "http_error", "op": "put", "rank": 1, "status": 500}])
    c0 = client(proxy.endpoint, 0)
    for i in range(3):
        c0.put_object(Bucket="ranks", Key=f"r0-{i}", Body=b"x")
    assert read_firings(proxy.report) == []
    with pytest.raises(ClientError, match="InternalError"):
        client(proxy.endpoint, 1, attempts=1).put_object(Bucket="ranks", Key="r1", Body=b"x")
    assert [f["rank"] for f in read_firings(proxy.report)] == [1]


def test_a_record_armed_at_a_rank_operation_counts_from_when_the_rank_says_it_reached_it(proxied):
    proxy = proxied("armed", [{"kind": "http_error", "op": "head"}], arm_at=[4])
    c = client(proxy.endpoint, 0, attempts=1)
    c.put_object(Bucket="armed", Key="a", Body=b"x")
    c.head_object(Bucket="armed", Key="a")  # before the point: not counted
    proxy.reached(0, 4)
    with pytest.raises(ClientError):
        c.head_object(Bucket="armed", Key="a")
    assert [r["status"] for r in logged(proxy, 3)] == [200, 200, 503]


def test_many_clients_at_once(proxied):
    import concurrent.futures

    proxy = proxied("many")
    data = {f"k{i}": os.urandom(100_000 + i) for i in range(32)}

    def roundtrip(key):
        c = client(proxy.endpoint, int(key[1:]) % 4)
        c.put_object(Bucket="many", Key=key, Body=data[key])
        return c.get_object(Bucket="many", Key=key)["Body"].read() == data[key]

    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        assert all(pool.map(roundtrip, data))
    assert len(logged(proxy, 64)) == 64 and time.monotonic() - started < 60


def test_a_proxy_stopped_with_a_request_under_way_logs_it_first(proxied):
    import threading

    proxy = proxied("stopping", [{"kind": "slow_write", "op": "get", "delay": 0.5}])
    c = client(proxy.endpoint, 0)
    c.put_object(Bucket="stopping", Key="a", Body=b"x")
    got = []
    reader = threading.Thread(target=lambda: got.append(c.get_object(Bucket="stopping", Key="a")["Body"].read()))
    reader.start()
    time.sleep(0.2)  # the get is being slowed
    proxy.stop()
    reader.join(30)
    assert got == [b"x"] and [r["op"] for r in proxy.requests()] == ["put", "get"]
