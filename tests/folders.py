"""What a folder holds, for tests that compare folders: relative path -> bytes (a folder: its path with a
trailing "/" -> None, unless `folders` is False)."""

import os


def contents(folder, *, folders: bool = True) -> dict:
    out: dict = {}
    for dirpath, dirnames, files in os.walk(folder):
        if folders:
            for d in dirnames:
                out[os.path.relpath(os.path.join(dirpath, d), folder) + "/"] = None
        for f in files:
            with open(os.path.join(dirpath, f), "rb") as fh:
                out[os.path.relpath(os.path.join(dirpath, f), folder)] = fh.read()
    return out
