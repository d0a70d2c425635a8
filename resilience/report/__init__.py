"""A run's folder and what it holds: results.json, report.md, report.html, junit.xml."""
from .folder import make_run_dir, write_run_files

__all__ = ["make_run_dir", "write_run_files"]
