"""Deliberately broken checkpoint implementations: each a small variation of the reference with one
bug real systems have had. They prove every checker can fail. Select one with
`--backend broken:NAME`; `CATALOGUE` (resilience.broken.catalogue) says what each breaks and which
checker should catch it; the suite (resilience.broken.suite) runs the matrix over them all."""

from __future__ import annotations

from .catalogue import CATALOGUE, BrokenImpl, make_broken

__all__ = ["CATALOGUE", "BrokenImpl", "make_broken"]
