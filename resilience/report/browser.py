"""Headless Chromium over a report: the page as the browser built it (scripts run, --dump-dom) and a
screenshot of it. The browser is Debian's `chromium` (`make install` brings it where it is root with apt);
each call is one browser process with its own throwaway profile, ended with its process group on a timeout."""

from __future__ import annotations

import os
import pathlib
import shutil
import signal
import subprocess
import tempfile

from ..errors import BrowserFailed, ConfigError

NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
TIMEOUT = 90.0  # seconds for one page; a cold start on a busy 2-core machine takes a few


def find_browser() -> str | None:
    """The path of a Chromium-family browser, from $RESILIENCE_BROWSER or the PATH; None if there is none."""
    named = os.environ.get("RESILIENCE_BROWSER")
    if named:
        return shutil.which(named)
    return next((p for p in map(shutil.which, NAMES) if p), None)


def browser_available() -> tuple[bool, str]:
    """(True, path) or (False, why not)."""
    path = find_browser()
    if path is None:
        wanted = os.environ.get("RESILIENCE_BROWSER") or " or ".join(NAMES)
        return False, f"no headless browser: {wanted} is not on the PATH (Debian: apt-get install chromium)"
    return True, path


def dump_dom(page: str, *, timeout: float = TIMEOUT) -> str:
    """The DOM of `page` (a file path) after its scripts ran, serialized as HTML."""
    return _run(page, ["--dump-dom"], timeout).stdout


def screenshot(page: str, png: str, *, width: int = 1400, height: int = 2400, timeout: float = TIMEOUT) -> str:
    """A PNG of `page` in a window of width x height pixels; the PNG's path."""
    png = os.path.abspath(png)
    _run(page, [f"--screenshot={png}", f"--window-size={width},{height}", "--hide-scrollbars"], timeout)
    if not os.path.isfile(png):
        raise BrowserFailed(f"the browser wrote no {png}")
    return png


def _run(page: str, args: list[str], timeout: float) -> subprocess.CompletedProcess:
    ok, browser = browser_available()
    if not ok:
        raise ConfigError("browser", browser, "install chromium, or name a browser in RESILIENCE_BROWSER")
    if not os.path.isfile(page):
        raise ConfigError("browser", f"{page} does not exist", "give a report.html or timeline.html")
    profile = tempfile.mkdtemp(prefix="resilience-browser-")
    cmd = [
        browser,
        "--headless",
        "--disable-gpu",
        "--no-first-run",
        "--no-default-browser-check",
        "--disable-extensions",
        "--disable-background-networking",
        f"--user-data-dir={profile}",
        *args,
    ]
    if os.geteuid() == 0:
        cmd.append("--no-sandbox")  # Chromium refuses to start as root with its sandbox
    cmd.append(pathlib.Path(page).resolve().as_uri())
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            raise BrowserFailed(f"{browser} did not finish {page} in {timeout:g} s") from None
        except BaseException:  # an interruption: the browser and its helpers go too
            _kill_group(proc)
            raise
        if proc.returncode != 0:
            raise BrowserFailed(f"{browser} exited {proc.returncode} on {page}: {err.strip()[-2000:]}")
        return subprocess.CompletedProcess(cmd, proc.returncode, out, err)
    finally:
        shutil.rmtree(profile, ignore_errors=True)


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the browser's process group (its own session: nothing else is in it), then reap it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()
