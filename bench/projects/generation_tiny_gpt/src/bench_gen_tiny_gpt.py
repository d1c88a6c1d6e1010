"""bench/generation.py's models: the tiny_gpt example's code, registered as its own project does
(TinyGpt for continuous batching, TinyGptRequestBatching for request-level batching)."""

from __future__ import annotations

from pathlib import Path

from grps_py.project import import_sources

import_sources(Path(__file__).resolve().parents[4] / "examples" / "tiny_gpt")
