"""The versions that wrote a manifest, a run folder or a corpus entry."""

from __future__ import annotations

import platform


def versions() -> dict:
    """python, torch and resilience versions of this process."""
    import torch  # here, not at import: the vocabulary is imported by commands that never need torch

    from .. import __version__

    return {"python": platform.python_version(), "torch": torch.__version__, "resilience": __version__}
