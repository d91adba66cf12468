"""The ``autoshard`` command line: one module per subcommand, registered in
:mod:`~autoshard.cli.app`. Nothing else in autoshard imports this package."""

from autoshard.cli.app import main

__all__ = ["main"]
