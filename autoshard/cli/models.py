"""``autoshard models``: the built-in model zoo, with parameter counts."""

from __future__ import annotations

import click

from autoshard.cli.common import friendly_errors
from graphs import zoo


@click.command("models")
@friendly_errors
def models_command() -> None:
    """List the built-in models with their parameter counts."""
    for name in zoo.names():
        config = zoo.config(name)
        click.echo(f"{name:<16} {zoo.param_count(name) / 1e9:>9.3f} B params  "
                   f"layers={config.layers} hidden={config.hidden} heads={config.heads}")
