"""Tests that run pytest in this process (pytester.runpytest) import torch through the plugin's runner.
pytester puts sys.modules back after each inner run, so a torch first imported inside one would be
imported a second time by the next, which its C extension does not survive (a crash, not a failure):
torch is imported here, before any inner run, so every run finds it already loaded."""

import torch  # noqa: F401
