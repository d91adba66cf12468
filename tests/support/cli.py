"""Running the ``autoshard`` CLI in-process from tests."""

from __future__ import annotations

from click.testing import CliRunner, Result

from autoshard.cli import main


def run(*args: str) -> Result:
    """``autoshard ARGS`` through click's runner; exceptions propagate (a traceback is a bug)."""
    return CliRunner().invoke(main, list(args), catch_exceptions=False)
