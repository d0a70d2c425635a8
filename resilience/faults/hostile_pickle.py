"""The hostile pickle: a checkpoint file that runs a command when a loader unpickles it.

Two kinds of file hold a pickle a loader unpickles. DCP's `.metadata` is replaced by a pickle that
unpickles, with plain pickle, to exactly the original metadata after running
`os.system("echo ran >> MARKER")`; loaders with a restricted unpickler refuse the first class it names
(`_operator.getitem`). A torch.save archive (a zip holding `<folder>/data.pkl` and the tensor storages)
gets a `data.pkl` whose first opcodes run the same command and pop its result, followed by the original
pickle unchanged: `torch.load(weights_only=False)` runs it and returns exactly the original object;
`weights_only=True` refuses the first global it names (`posix.system`).

Either way the loader loads normally and only the marker file shows that code from the checkpoint ran
(one line per time it ran). MARKER is `HOSTILE_PICKLE_RAN` in the checkpoint root, so a run can tell
afterwards; the Damage record names it. Planting only reads and writes bytes: nothing from the
checkpoint is unpickled, and no symlink or path leading out of the root is followed."""

from __future__ import annotations

import json
import operator
import os
import pickle
import pickletools
import random
import shlex
import stat
import tempfile

import xxhash

from ..errors import ConfigError
from ..storage.contained import is_inside
from ..vocab.folders import MANIFEST
from ..vocab.manifest_format import FORMAT_VERSION, KIND, manifest_text
from . import torch_archive
from .damage_records import NotApplicable, Planted

DCP_METADATA = ".metadata"
PICKLE_NAME = torch_archive.PICKLE
MARKER = "HOSTILE_PICKLE_RAN"


class _Command:
    def __init__(self, command: str):
        self.command = command

    def __reduce__(self):
        return os.system, (self.command,)


class _ThenValue:
    """Unpickles to `value`, after unpickling `first` (the command)."""

    def __init__(self, first, value):
        self.first, self.value = first, value

    def __reduce__(self):
        return operator.getitem, ((self.first, self.value), 1)


class _Unpickled:
    """Unpickles to what the pickle `data` holds: the original metadata, byte for byte as written."""

    def __init__(self, data: bytes):
        self.data = data

    def __reduce__(self):
        return pickle.loads, (self.data,)


def _command(marker: str) -> str:
    return f"echo ran >> {shlex.quote(marker)}"


def hostile_bytes(original: bytes, marker: str) -> bytes:
    """A pickle that appends a line to `marker` and then yields what `original` (DCP metadata) holds.
    The original is embedded, not unpickled here: nothing in the checkpoint runs while planting."""
    return pickle.dumps(_ThenValue(_Command(_command(marker)), _Unpickled(original)))


def command_opcodes(marker: str) -> bytes:
    """Pickle opcodes that call os.system("echo ran >> marker") and pop its result, leaving the stack
    and the memo as they were: put after a pickle's PROTO header, the rest of it unpickles unchanged
    (its persistent ids, memo indices and frames included). Made by pickling the call rather than typed
    by hand, so the pickle module writes the opcodes and encodes the string's length; optimize drops the
    memo PUTs pickle adds, so the memo stays the original pickle's own."""
    made = pickletools.optimize(pickle.dumps(_Command(_command(marker)), protocol=2))
    ops = [op.name for op, _, _ in pickletools.genops(made)]
    if ops != ["PROTO", "GLOBAL", "BINUNICODE", "TUPLE1", "REDUCE", "STOP"]:  # what protocol 2 writes
        raise AssertionError(f"unexpected opcodes for a call: {ops}")
    return made[2:-1] + pickle.POP  # without PROTO 2 and STOP


def hostile_pickle_stream(original: bytes, marker: str) -> bytes:
    """`original` (a pickle of protocol 2 or later) with the command's opcodes after its PROTO header."""
    if not _protocol_2_or_later(original):
        raise ValueError("not a pickle of protocol 2 or later (it does not begin with PROTO)")
    return original[:2] + command_opcodes(marker) + original[2:]


def _protocol_2_or_later(data: bytes) -> bool:
    """Whether `data` begins as a pickle of protocol 2 or later does: PROTO and its number."""
    return data[:1] == pickle.PROTO and len(data) >= 2 and data[1] >= 2


def hostile_archive(raw: bytes, marker: str) -> tuple[bytes, str]:
    """The torch.save archive `raw` with its data.pkl running the command first: (the new archive, the
    record replaced). ValueError saying why when `raw` is not such an archive."""
    archive = torch_archive.read(raw)
    if isinstance(archive, str):
        raise ValueError(archive)
    name = archive.pickle_name
    stream = hostile_pickle_stream(torch_archive.data(raw, archive.record(name)), marker)
    return torch_archive.replace_record(raw, archive, name, stream), name


def archive_problem(raw: bytes) -> str | None:
    """Why `raw` is not a torch.save archive whose pickle can be made hostile; None when it is one."""
    archive = torch_archive.read(raw)
    if isinstance(archive, str):
        return archive
    pickled = torch_archive.data(raw, archive.record(archive.pickle_name))
    if not _protocol_2_or_later(pickled):
        return f"holds a {PICKLE_NAME} that is not a pickle of protocol 2 or later"
    return None


def plant_metadata(root: str, path: str) -> Planted:
    """Replace DCP's `.metadata` at `path`."""
    original = _read_safely(root, path)
    if not original.startswith(pickle.PROTO):  # pickle protocol 2 and later start with PROTO
        raise ConfigError("target", f"{path} is not a pickle to replace")
    marker = _fresh_marker(root)
    data = hostile_bytes(original, marker)
    _replace(path, data)
    return Planted(path, marker, len(original), len(data), None, _rewrite_manifest(root, path, data))


def plant_among(root: str, files: list[str], rng: random.Random, where: str) -> Planted:
    """Rewrite one torch.save archive among `files` (drawn from `rng`), so its data.pkl runs the command.
    NotApplicable (the case is N/A with the reason) when none of them is one."""
    safe = [p for p in sorted(files) if _unsafe(root, p) is None]
    archives, zips = [], []  # zips: (file, why it is not an archive torch.save writes)
    for p in safe:
        if _read_safely(root, p, 4) != b"PK\x03\x04":
            continue
        why = archive_problem(_read_safely(root, p))
        if why is None:
            archives.append(p)
        else:
            zips.append((p, why))
    if not archives:
        names = ", ".join(os.path.relpath(p, root) for p in sorted(files)[:4]) or "none"
        skipped = len(files) - len(safe)
        raise NotApplicable(
            "target",
            f"{where} holds no pickle: no {DCP_METADATA} and no torch.save archive among its files ({names}"
            + (f"; {skipped} not followed: symlinks, special files or paths leading outside" if skipped else "")
            + "".join(f"; {os.path.relpath(p, root)} {why}" for p, why in zips[:2])
            + ")",
        )
    path = archives[rng.randrange(len(archives))]
    raw = _read_safely(root, path)
    marker = _fresh_marker(root)
    data, record = hostile_archive(raw, marker)
    _replace(path, data)
    return Planted(path, marker, len(raw), len(data), record, _rewrite_manifest(root, path, data))


def _fresh_marker(root: str) -> str:
    """The marker's path, with any file an earlier run left there removed."""
    marker = os.path.join(root, MARKER)
    if os.path.lexists(marker):
        os.unlink(marker)  # the marker must say what the next load did, not an earlier one
    return marker


def _unsafe(root: str, path: str) -> str | None:
    """Why `path` may not be read or rewritten: not a regular file itself (a symlink is not followed,
    a FIFO would block), or a path that leaves the root."""
    rel = os.path.relpath(path, root)
    if rel == os.pardir or rel.startswith(os.pardir + os.sep) or os.pardir in rel.split(os.sep):
        return f"{path} lies outside {root}"
    try:
        st = os.lstat(path)
    except OSError as e:
        return f"{path}: {e.strerror or e}"
    if not stat.S_ISREG(st.st_mode):
        return f"{path} is not a regular file (a symlink is not followed)"
    if not is_inside(path, root):
        return f"{path} leads outside {root}"
    return None


def _read_safely(root: str, path: str, size: int = -1) -> bytes:
    """The bytes of `path` (the first `size`), opened only as the regular file inside the root it is:
    no symlink followed, no FIFO waited on."""
    why = _unsafe(root, path)
    if why is not None:
        raise NotApplicable("target", f"{why}: the pickle it holds is not replaced")
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise NotApplicable("target", f"{path} is not a regular file: the pickle it holds is not replaced")
        return f.read(size)


def _replace(path: str, data: bytes) -> None:
    """Write `data` as `path` through a new file renamed over it: the name is replaced, never written
    through (were it swapped for a symlink since it was checked)."""
    mode = stat.S_IMODE(os.lstat(path).st_mode)
    fd, tmp = tempfile.mkstemp(prefix=".hostile-", dir=os.path.dirname(path))
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        if os.path.lexists(tmp):
            os.unlink(tmp)
        raise


def reference_manifest_body(path: str) -> dict | None:
    """The body of the manifest at `path` when it is the reference's format (vocab.manifest_format: its
    kind, format version and a body with a file list); None for any other file of that name (another
    library's manifest.json), which a forging step must leave alone."""
    try:
        with open(path, "rb") as f:
            doc = json.loads(f.read())
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or doc.get("kind") != KIND or doc.get("format_version") != FORMAT_VERSION:
        return None
    body = doc.get("body")
    return body if isinstance(body, dict) and isinstance(body.get("files"), dict) else None


def _rewrite_manifest(root: str, path: str, data: bytes) -> str:
    """Give the file its new size and checksum in the manifest of the nearest folder above it that
    has one, digest recomputed (a checksum is not authentication). What was done, "" when no folder
    up to the root holds a manifest (another implementation's checkpoint)."""
    folder = os.path.dirname(path)
    while is_inside(folder, root) and os.path.realpath(folder) != os.path.realpath(root):
        manifest = os.path.join(folder, MANIFEST)
        if os.path.lexists(manifest):
            break
        folder = os.path.dirname(folder)
    else:
        return ""
    why = _unsafe(root, manifest)
    if why is not None:
        return f"manifest left as it is: {why}"
    body = reference_manifest_body(manifest)
    if body is None:  # another library's file of that name: never parsed as ours
        return f"{os.path.relpath(manifest, root)} is not a {KIND} (another format): left as it is"
    files = dict(body["files"])
    rel = os.path.relpath(path, folder).replace(os.sep, "/")
    if rel not in files:
        return f"{os.path.relpath(manifest, root)} does not list {rel}: left as it is"
    files[rel] = {"size": len(data), "xxh3_128": xxhash.xxh3_128_hexdigest(data)}
    _replace(manifest, manifest_text(dict(body, files=dict(sorted(files.items())))).encode())
    return "manifest size and xxh3 updated"
