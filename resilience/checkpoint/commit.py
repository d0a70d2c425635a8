"""Atomic commit on a POSIX filesystem: stage, fsync, manifest, rename into place, fsync, tracker. On a
storage without an atomic rename (an object store: `atomic_rename = False`), the same order with the rename
made of copies: every object of the staged save, then its manifest, the commit marker, last.

`commit_folder` is that order, the one every save path of the reference follows. A save is visible
only once its folder is renamed into place with a complete manifest inside; the tracker is written
after, atomically, and is a hint: loaders trust folders with valid manifests.
A LOCAL re-save of an iteration keeps the copy it replaces beside it (`iter_N.replaced-XXXXXXXX`): without
a collective another rank may still hold only that copy, and a loader must find it whole."""

from __future__ import annotations

import os
import re
import uuid

from .. import storage
from ..errors import IntegrityError
from ..storage.contained import is_inside
from ..vocab import folders, phases
from ..vocab.folders import ITER_FOLDER, MANIFEST, STAGING_PREFIX, TRACKER, iter_name, iteration_of
from .manifest import Manifest

REPLACED_MARK = ".replaced-"
_REPLACED = re.compile(rf"{ITER_FOLDER.pattern}\.replaced-[0-9a-f]{{8}}")
MAX_TRACKER_BYTES = 64  # an iteration number and a newline; anything longer is not a tracker
MAX_TRACKER_DIGITS = 15


def staging_name(iteration: int) -> str:
    return folders.staging_name(iteration, uuid.uuid4().hex[:8])


def list_iterations(root: str) -> list[tuple[int, str]]:
    """Committed-looking entries (iter_NNNNNNN), newest first. Whether each is valid is for the loader:
    one that is not a readable folder (a file, a dangling symlink) is listed too, so that it is
    reported as what it is rather than passed over."""
    fs = storage.current()
    if not fs.is_dir(root):
        return []
    out = []
    for name in fs.listdir(root):
        n = iteration_of(name)
        if n is not None:
            out.append((n, os.path.join(root, name)))
    return sorted(out, reverse=True)


def list_replaced(root: str) -> list[tuple[int, str]]:
    """Copies a later save of the same iteration replaced and kept (publish(keep_replaced=True)),
    newest iteration first. Retention removes them with their iteration."""
    fs = storage.current()
    if not fs.is_dir(root):
        return []
    out = []
    for name in fs.listdir(root):
        m = _REPLACED.fullmatch(name)
        if m:
            out.append((int(m.group(1)), os.path.join(root, name)))
    return sorted(out, reverse=True)


def stale_staging(root: str) -> list[str]:
    fs = storage.current()
    if not fs.is_dir(root):
        return []
    return [os.path.join(root, n) for n in fs.listdir(root) if n.startswith(STAGING_PREFIX)]


def ensure_dir(path: str, top: str) -> None:
    """Create `path` and make its entry durable: fsync every folder from its parent up to `top`.
    A folder created and never fsynced in its parent can vanish at a power loss with all it holds."""
    fs = storage.current()
    if fs.is_dir(path):
        return
    fs.mkdir(path)
    path, top = os.path.abspath(path), os.path.abspath(top)
    while path != top and path.startswith(top):
        path = os.path.dirname(path)
        fs.fsync_dir(path)


def fsync_tree_dirs(folder: str) -> None:
    """fsync a folder and every folder below it, so the entries of the files in them are durable."""
    fs = storage.current()
    for dirpath, dirnames, _ in os.walk(folder):
        for d in dirnames:
            fs.fsync_dir(os.path.join(dirpath, d))
    fs.fsync_dir(folder)


def publish(staging: str, final: str, *, keep_replaced: bool = False) -> None:
    """Make a fully written, fsynced staging folder the checkpoint at `final`, atomically.
    An existing checkpoint at `final` is swapped out in one step, never torn, then removed; with
    `keep_replaced` it is renamed aside first and kept (at every point one copy or the other is whole
    under a name list_iterations or list_replaced finds)."""
    fs = storage.current()
    if not getattr(fs, "atomic_rename", True):
        _publish_by_copies(fs, staging, final, keep_replaced)
        return
    parent = os.path.dirname(final)
    if keep_replaced and fs.exists(final):
        fs.rename(final, f"{final}{REPLACED_MARK}{uuid.uuid4().hex[:8]}")
        fs.fsync_dir(parent)
        fs.rename(staging, final)
    elif fs.exists(final):
        fs.exchange(staging, final)
        fs.fsync_dir(parent)
        fs.rmtree(staging)  # now holds the replaced checkpoint
    else:
        fs.rename(staging, final)
    fs.fsync_dir(parent)


def _publish_by_copies(fs, staging: str, final: str, keep_replaced: bool) -> None:
    """publish() where nothing renames atomically: a checkpoint is committed once its manifest, copied
    last, is there. A committed copy at `final` is first copied aside whole (manifest last) and then
    uncommitted (manifest deleted first), so at every point one copy of the iteration is whole under a name
    list_iterations or list_replaced finds; without `keep_replaced` the aside copy goes once the new one
    is committed."""
    aside = None
    if fs.exists(os.path.join(final, MANIFEST)):
        aside = f"{final}{REPLACED_MARK}{uuid.uuid4().hex[:8]}"
        _copy_tree(fs, final, aside)
        fs.unlink(os.path.join(final, MANIFEST))
    fs.rmtree(final)  # what is left of the replaced copy, or of an uncommitted one
    _copy_tree(fs, staging, final)
    fs.rmtree(staging)
    if aside is not None and not keep_replaced:
        fs.unlink(os.path.join(aside, MANIFEST))
        fs.rmtree(aside)


def _copy_tree(fs, src: str, dst: str) -> None:
    """Copy every object under `src` to `dst`, the manifest last (the commit marker)."""
    for rel in sorted(fs.files_under(src), key=lambda rel: rel == MANIFEST):
        if rel == MANIFEST:
            _copy_marker(fs, os.path.join(src, rel), os.path.join(dst, rel))
        else:
            fs.copy(os.path.join(src, rel), os.path.join(dst, rel))


def _copy_marker(fs, src: str, dst: str) -> None:
    """The commit marker copied into place. A copy that raised may still have been done by the store, its
    answer lost on the way back: the marker is read back, and when it is there, byte for byte the staged one,
    the save is committed and says so (saying it failed would hide a checkpoint a loader then picks)."""
    try:
        fs.copy(src, dst)
    except Exception:
        if not _same_object(fs, src, dst):
            raise


def _same_object(fs, a: str, b: str) -> bool:
    try:
        if not fs.exists(b) or fs.size(a) != fs.size(b):
            return False
        with fs.open_read(a) as x, fs.open_read(b) as y:
            return bool(x.read() == y.read())
    except Exception:
        return False  # it cannot be read back: the failure stands


def commit_folder(
    staging: str, root: str, manifest: Manifest, *, keep_last: int | None, keep_replaced: bool = False
) -> None:
    """Commit the staging folder of a save whose files are all written and fsynced (with their
    folders): the manifest into it and fsynced, the folder renamed into place as iter_N under `root`,
    the tracker, then retention of the newest `keep_last` (None: keep all). Each step is announced
    (vocab.phases) just before it is done, so a fault can strike between any two."""
    iteration = manifest.iteration
    phases.reached("manifest", iteration=iteration, path=staging)
    manifest.write(staging)
    storage.current().fsync_dir(staging)
    phases.reached("commit_rename", iteration=iteration, path=staging)
    publish(staging, os.path.join(root, iter_name(iteration)), keep_replaced=keep_replaced)
    phases.reached("tracker_update", iteration=iteration, path=root)
    write_tracker(root, iteration)
    if keep_last:
        phases.reached("retention", iteration=iteration, path=root)
        apply_retention(root, keep_last, iteration)


def write_tracker(root: str, iteration: int) -> None:
    """Megatron's tracker file, replaced atomically: temp file, fsync, rename, fsync the folder."""
    fs = storage.current()
    tmp = os.path.join(root, f".{TRACKER}.tmp")
    with fs.open_write(tmp) as f:
        storage.write_all(f, str(iteration).encode())
    fs.rename(tmp, os.path.join(root, TRACKER))
    fs.fsync_dir(root)


def read_tracker(root: str) -> tuple[int | None, str | None]:
    """(iteration, None) or (None, why the tracker cannot be used)."""
    fs = storage.current()
    path = os.path.join(root, TRACKER)
    if not (fs.exists(path) or os.path.islink(path)):
        return None, f"{path}: tracker missing"
    if not is_inside(path, root):  # never read, nor quote, a file outside the checkpoint folder
        return None, f"{path}: tracker is a symlink leading outside {root}; not read"
    try:
        with fs.open_read(path) as f:  # a FIFO, a device: refused by type (storage.contained)
            raw = f.read(MAX_TRACKER_BYTES + 1)
    except OSError as e:  # a folder, an I/O error: a problem to report, not to raise on one rank
        detail = e.detail if isinstance(e, IntegrityError) else e.strerror or e
        return None, f"{path}: tracker unreadable ({type(e).__name__}: {detail})"
    if len(raw) > MAX_TRACKER_BYTES:
        return None, f"{path}: tracker is longer than {MAX_TRACKER_BYTES} bytes, not an iteration number"
    text = raw.decode("utf-8", "replace").strip()
    if not text:
        return None, f"{path}: tracker is empty"
    # str.isdigit admits '²' and other digits int() refuses: ASCII digits only
    if not (text.isascii() and text.isdigit() and len(text) <= MAX_TRACKER_DIGITS):
        return None, f"{path}: tracker is not a number ({text[:20]!r})"
    return int(text), None


def check_tracker(root: str, iterations: list[int]) -> IntegrityError | None:
    """Why the tracker disagrees with the iter_ folders found (the folders win), or None.
    No folders: nothing to disagree with."""
    if not iterations:
        return None
    path = os.path.join(root, TRACKER)
    tracked, why = read_tracker(root)
    if why is not None:
        return IntegrityError(path, "tracker", why.removeprefix(f"{path}: tracker ").removeprefix(f"{path}: "))
    newest = max(iterations)
    if tracked not in iterations:
        return IntegrityError(path, "tracker", f"names iteration {tracked}, which has no checkpoint folder")
    if tracked != newest:
        return IntegrityError(path, "tracker", f"names iteration {tracked}, but iteration {newest} is newer (stale)")
    return None


def apply_retention(root: str, keep_last: int, newest_valid: int) -> list[str]:
    """Delete all but the newest `keep_last` checkpoints (with the copies they replaced), never
    `newest_valid`; remove stale staging folders. Returns what was removed."""
    fs = storage.current()
    removed = []
    found = list_iterations(root) + list_replaced(root)
    keep = set(sorted({it for it, _ in found}, reverse=True)[:keep_last]) | {newest_valid}
    for it, path in found:
        if it not in keep:
            fs.rmtree(path)
            removed.append(path)
    for path in stale_staging(root):
        fs.rmtree(path)
        removed.append(path)
    if removed:
        fs.fsync_dir(root)
    return removed
