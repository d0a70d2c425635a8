"""What of a file name written in one clean save is the same in every save: the learned layout's globs keep
that and make a wildcard of the rest (a temp name's pid, thread id, uuid, random suffix, timestamp,
hostname), so a fault aimed at `rank_00001.pt.tmp-26863-k3j9x2` in the probe fires in a later run, whose
processes have other pids. The iteration and every short number (a rank, tp or pp index the aiming relies
on) are always kept."""

from __future__ import annotations

import re
from collections.abc import Collection

_UUID = re.compile(r"[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}")
_RUN = re.compile(r"[A-Za-z0-9]+")  # a run between separators (. - _ + ~ and the like)
_WORD_AND_NUMBER = re.compile(r"[A-Za-z]+\d+|\d+[A-Za-z]+")  # rank00001, 16bit: a name, not a random part
_WORD_THEN_NUMBER = re.compile(r"([A-Za-z]+)(\d+)")
_HEX = re.compile(r"[0-9a-fA-F]+")
TIMESTAMP_DIGITS = 10  # seconds since 1970 have had 10 digits since 2001
HEX_MIN = 8  # a hex tag of 8 or more digits is random even when it drew only digits
FIRST_USER_PID = 300  # Linux gives pids below it to kernel threads only: never a rank index taken for a pid
HOST_MIN = 4  # a shorter host name would wildcard common parts of names
RANDOM_MIN = 6  # shorter mixed runs are names (bf16, v2, fp8e4)


def stable_name(name: str, iteration: int, pids: Collection[int] = (), hostname: str | None = None) -> str:
    """`name` (one path component or a whole relative path) with each part that differs between runs made
    '*': `hostname` (and its first label, HOST_MIN characters or more), a uuid, a number that is one of
    `pids` (the probe's processes and threads), a run of TIMESTAMP_DIGITS or more digits, a run of HEX_MIN
    or more hex digits, and a run of RANDOM_MIN or more characters mixing letters and digits that is not a
    word followed by a number. A number equal to `iteration` is never touched, nor any other short number.
    Adjacent wildcards merge into one."""
    if hostname:
        for host in sorted({hostname, hostname.split(".")[0]}, key=len, reverse=True):
            if len(host) >= HOST_MIN:
                name = name.replace(host, "*")
    name = _UUID.sub("*", name)
    known = {str(p) for p in pids if p >= FIRST_USER_PID}
    out = _RUN.sub(lambda m: _stable_run(m.group(0), iteration, known), name)
    return re.sub(r"\*+", "*", out)


def _stable_run(run: str, iteration: int, pids: set[str]) -> str:
    if _unstable(run, iteration, pids):
        return "*"
    glued = _WORD_THEN_NUMBER.fullmatch(run)  # tid812345: a pid glued to a word
    if glued and _is_pid(glued.group(2), pids) and int(glued.group(2)) != iteration:
        return glued.group(1) + "*"
    return run


def _is_pid(digits: str, pids: set[str]) -> bool:
    return digits in pids or digits.lstrip("0") in pids


def _unstable(run: str, iteration: int, pids: set[str]) -> bool:
    if run.isdigit() and int(run) == iteration:
        return False
    if len(run) >= HEX_MIN and _HEX.fullmatch(run):
        return True  # a hex tag (uuid4().hex[:8]), even one that drew only digits
    if run.isdigit():
        return _is_pid(run, pids) or len(run) >= TIMESTAMP_DIGITS
    if len(run) < RANDOM_MIN or run.isalpha() or _WORD_AND_NUMBER.fullmatch(run):
        return False
    # letters and digits interleaved: a random suffix (hex or not)
    return bool(_HEX.fullmatch(run)) or any(c.isdigit() for c in run)


__all__ = ["stable_name"]
