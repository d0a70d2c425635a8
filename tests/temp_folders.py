"""A private temp folder (TMPDIR and tempfile's) for a test's runner, so that what its jobs leave in temp is
counted apart from what parallel tests leave in theirs."""

import contextlib
import os
import shutil
import tempfile


@contextlib.contextmanager
def private_temp():
    """This process's temp folder is a new one while the block runs; yields its path. Short (a Unix socket's
    path, which multiprocessing puts below it, holds at most 107 bytes), made in the usual temp folder."""
    folder = tempfile.mkdtemp(prefix="rt-")
    before = (os.environ.get("TMPDIR"), tempfile.tempdir)
    os.environ["TMPDIR"], tempfile.tempdir = folder, folder
    try:
        yield folder
    finally:
        if before[0] is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = before[0]
        tempfile.tempdir = before[1]
        shutil.rmtree(folder, ignore_errors=True)


def left_in(folder: str) -> list[str]:
    """Everything in `folder`, as paths relative to it (folders end with "/")."""
    out = []
    for dirpath, dirnames, files in os.walk(folder):
        out += [os.path.relpath(os.path.join(dirpath, d), folder) + "/" for d in dirnames]
        out += [os.path.relpath(os.path.join(dirpath, f), folder) for f in files]
    return sorted(out)
