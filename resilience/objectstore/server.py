"""A real S3 server for a run: moto's server mode on 127.0.0.1, on a port the OS picked, in a process of its
own (the runner forks rank processes, so no server thread may run in it), SIGKILLed with its runner however
that ends, and stopped at the end of the run with nothing left. Each case gets a bucket of its own."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from typing import IO

from ..errors import ConfigError, ResilienceError
from ..launch.lifetime import argv_dying_with_parent
from .url import S3Location

START_TIMEOUT = 30.0  # seconds for moto's server to answer its first request
STOP_GRACE = 5.0  # seconds between SIGTERM and SIGKILL
ATTEMPTS = 3  # another free port when one was taken between choosing it and the server binding it
# the credentials of the embedded server: moto accepts any; each rank gets its own access key later
ACCESS_KEY, SECRET_KEY, REGION = "resilience", "resilience-secret", "us-east-1"


class ServerFailed(ResilienceError, RuntimeError):
    """The embedded S3 server did not start or answer."""


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _moto_server_argv(port: int) -> list[str]:
    exe = shutil.which("moto_server", path=os.path.dirname(sys.executable)) or shutil.which("moto_server")
    if exe is None:
        raise ConfigError(
            "storage",
            "moto's S3 server (moto_server) is not installed",
            "install the project's s3 extra: pip install -e '.[s3]' -c ci/constraints.txt (make test does)",
        )
    return [exe, "-H", "127.0.0.1", "-p", str(port)]


def stop_group(proc: subprocess.Popen, grace: float = STOP_GRACE) -> None:
    """SIGTERM a process started in a session of its own, SIGKILL it after `grace` seconds, then whatever
    it left in its group."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        except ProcessLookupError:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


class EmbeddedS3:
    """`with EmbeddedS3() as s3:` a moto S3 server at `s3.endpoint`; `s3.bucket(name)` creates a bucket."""

    def __init__(self, start_timeout: float = START_TIMEOUT):
        self.start_timeout = start_timeout
        self.endpoint = ""
        self._proc: subprocess.Popen | None = None
        self._log: IO[bytes] | None = None

    def __enter__(self) -> EmbeddedS3:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> str:
        """Start the server; its endpoint URL. ServerFailed, with what it printed, when it never answers."""
        last = ""
        for _ in range(ATTEMPTS):
            port = _free_port()
            argv = _moto_server_argv(port)
            self._log = tempfile.TemporaryFile(prefix="resilience-s3-")  # noqa: SIM115 (closed in stop)
            env = dict(os.environ, PYTHONUNBUFFERED="1")
            self._proc = subprocess.Popen(
                argv_dying_with_parent(argv),
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,  # its own group: stop() ends whatever it started
            )
            self.endpoint = f"http://127.0.0.1:{port}"
            if self._wait_ready():
                return self.endpoint
            last = self._output()
            self.stop()
        raise ServerFailed(f"moto's S3 server did not answer on 127.0.0.1 within {self.start_timeout:g} s: {last}")

    def _wait_ready(self) -> bool:
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self._proc is None or self._proc.poll() is not None:
                return False  # it exited: the port was taken, or it could not start
            try:
                with urllib.request.urlopen(self.endpoint + "/moto-api/", timeout=1.0) as r:
                    if r.status == 200:
                        return True
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.05)
        return False

    def _output(self) -> str:
        if self._log is None:
            return ""
        self._log.seek(0)
        return self._log.read()[-2000:].decode("utf-8", "replace").strip()

    def stop(self) -> None:
        """Stop the server and its process group; idempotent."""
        proc, self._proc = self._proc, None
        if proc is not None:
            stop_group(proc)
        if self._log is not None:
            self._log.close()
            self._log = None

    def client(self):
        """A boto3 S3 client of this server."""
        from .client import s3_client

        return s3_client(self.endpoint, ACCESS_KEY, SECRET_KEY, REGION)

    def bucket(self, name: str) -> S3Location:
        """Create bucket `name` (a case's own) and return its location."""
        location = S3Location.parse(f"s3://{name}", "bucket")
        self.client().create_bucket(Bucket=location.bucket)
        return location
