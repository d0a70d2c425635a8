"""A run's folder and what it holds: run.json, results.jsonl, results.json, report.md, report.html, junit.xml."""

from .folder import RunFolder, make_run_dir, write_run_files

__all__ = ["RunFolder", "make_run_dir", "write_run_files"]
