"""Helpers the tests share: where the test data lives, and the oracles for the importer tests."""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
DATA_DIR = REPO_ROOT / "tests" / "data"
KNOWN_ANSWERS = DATA_DIR / "known-answers.json"
