"""Loaded by schemathesis.toml (`hooks`) when `st run openapi.yaml ...` runs from the repository root.

Hypothesis, which schemathesis drives, keeps caches (Unicode tables, constants read from source files)
in `.hypothesis/` under the working directory. This points it at a directory outside the checkout
instead, unless HYPOTHESIS_STORAGE_DIRECTORY already names one.
"""

from __future__ import annotations

import os
import tempfile

STORAGE = os.path.join(tempfile.gettempdir(), "grps-py-hypothesis")

os.environ.setdefault("HYPOTHESIS_STORAGE_DIRECTORY", STORAGE)
