"""The embedded S3 server is a real moto server on loopback, in a process of its own that ends with the run;
an endpoint that does not answer, a missing bucket and refused credentials are one clear error each."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from resilience.errors import ConfigError
from resilience.objectstore import S3Location

pytest.importorskip("moto", reason="moto is not installed (pip install '.[s3]')")
pytest.importorskip("boto3", reason="boto3 is not installed (pip install '.[s3]')")

from resilience.objectstore.client import check_bucket, check_endpoint_url, s3_client  # noqa: E402
from resilience.objectstore.server import EmbeddedS3, _free_port  # noqa: E402


def test_a_case_bucket_holds_what_is_put_and_the_server_is_gone_after_the_run():
    with EmbeddedS3() as s3:
        pid = s3._proc.pid
        loc = s3.bucket("case-001")
        client = s3.client()
        client.put_object(Bucket=loc.bucket, Key=loc.key("iter_0000001/a"), Body=b"payload")
        assert client.get_object(Bucket=loc.bucket, Key="iter_0000001/a")["Body"].read() == b"payload"
        check_bucket(client, s3.endpoint, loc)  # answers, exists, credentials accepted
        assert s3.endpoint.startswith("http://127.0.0.1:")
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_an_endpoint_that_does_not_answer_is_one_error():
    endpoint = f"http://127.0.0.1:{_free_port()}"
    with pytest.raises(ConfigError, match="nothing answers at") as e:
        check_bucket(s3_client(endpoint, "k", "s"), endpoint, S3Location("bucket"))
    assert e.value.field == "--endpoint-url"


def test_a_missing_bucket_is_one_error():
    with EmbeddedS3() as s3:
        with pytest.raises(ConfigError, match="'nosuch' does not exist") as e:
            check_bucket(s3.client(), s3.endpoint, S3Location("nosuch"))
    assert e.value.field == "--storage"


def test_refused_credentials_are_one_error(monkeypatch):
    monkeypatch.setenv("INITIAL_NO_AUTH_ACTION_COUNT", "0")  # moto then checks every request's key
    with EmbeddedS3() as s3:
        with pytest.raises(ConfigError, match="refused the credentials") as e:
            check_bucket(s3_client(s3.endpoint, "AKIANOTAKEY", "wrong"), s3.endpoint, S3Location("bucket"))
    assert e.value.field == "credentials"


@pytest.mark.parametrize(
    "url", ["127.0.0.1:9000", "ftp://host", "http://", "http://h:99999", "http://h/x", "http://h:p", "http://[h"]
)
def test_an_endpoint_url_that_does_not_parse_is_one_error(url):
    with pytest.raises(ConfigError, match="not an endpoint URL"):
        check_endpoint_url(url)


def test_the_server_dies_with_a_runner_that_is_killed(tmp_path):
    """A runner SIGKILLed mid-run leaves no S3 server behind (it asked the kernel to kill it)."""
    script = textwrap.dedent(
        """
        import sys, time
        from resilience.objectstore.server import EmbeddedS3
        s3 = EmbeddedS3(); s3.start()
        print(s3._proc.pid, flush=True)
        time.sleep(600)
        """
    )
    runner = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, cwd=os.getcwd())
    try:
        server = int(runner.stdout.readline())
        assert psutil.pid_exists(server)
    finally:
        runner.send_signal(signal.SIGKILL)
        runner.wait()
    deadline = time.monotonic() + 10
    while psutil.pid_exists(server) and psutil.Process(server).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, "the S3 server outlived its runner"
        time.sleep(0.1)
