"""Which files a checkpoint reader opens: regular files inside the checkpoint folder, nothing else.

The rule, applied to every file read from a checkpoint (manifest, tracker, every listed file, DCP's
`.metadata` and shards):
- Type: only regular files are opened. A FIFO, a device or a socket is refused by type before it
  is opened (reading one blocks forever or has side effects); a folder is an IsADirectoryError.
- Place: the path, with every symlink on it followed, must stay inside the real path of the
  checkpoint folder (the folder given to save and load, LOCAL rank folders included).
  A symlink that stays inside is followed; one that leaves it (a shard, a whole iteration folder,
  the tracker) is refused, without reading a byte of what it points to.
Both refusals are IntegrityError naming the file and the check, so a loader falls back to an older
checkpoint or raises, as for any other damaged file."""

from __future__ import annotations

import errno
import os
import stat

from ..errors import IntegrityError

_KINDS = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISDIR, "a folder"),
)


def kind_of(mode: int) -> str:
    """'a regular file', 'a FIFO', ... for a stat mode."""
    if stat.S_ISREG(mode):
        return "a regular file"
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def is_inside(path: str, root: str) -> bool:
    """Does `path`, symlinks followed, lie inside (or at) `root`, symlinks followed?"""
    real, top = os.path.realpath(path), os.path.realpath(root)
    return real == top or real.startswith(top.rstrip(os.sep) + os.sep)


def check_inside(path: str, root: str) -> None:
    """IntegrityError when `path` leads outside `root` through a symlink."""
    if not is_inside(path, root):
        raise IntegrityError(
            path, "inside the checkpoint folder", f"a symlink leads outside {root}; refused without reading it"
        )


def check_regular(path: str) -> os.stat_result:
    """The stat of `path` (symlinks followed) when it is a regular file; IntegrityError for a FIFO,
    device or socket, IsADirectoryError for a folder, FileNotFoundError when missing or dangling."""
    st = os.stat(path)
    if stat.S_ISDIR(st.st_mode):
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
    if not stat.S_ISREG(st.st_mode):
        raise IntegrityError(path, "regular file", f"is {kind_of(st.st_mode)}; refused without opening it")
    return st


def open_regular(path: str):
    """Open `path` for reading, binary, only if it is a regular file. Checked before opening, and again
    on the open descriptor (opened non-blocking, so a FIFO swapped in between cannot block)."""
    check_regular(path)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise IntegrityError(path, "regular file", f"is {kind_of(st.st_mode)}; refused")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def check_folder(path: str) -> None:
    """IntegrityError saying what `path` is when it is not a folder that can be listed: a file, a
    dangling symlink, a folder that cannot be read."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        what = "a dangling symlink" if os.path.islink(path) else "gone"
        raise IntegrityError(path, "checkpoint folder", f"is {what}, not a folder") from None
    except OSError as e:
        raise IntegrityError(path, "checkpoint folder readable", f"{type(e).__name__}: {e.strerror or e}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise IntegrityError(path, "checkpoint folder", f"is {kind_of(st.st_mode)}, not a folder")
    try:
        os.listdir(path)
    except OSError as e:
        raise IntegrityError(path, "checkpoint folder readable", f"{type(e).__name__}: {e.strerror or e}") from None
