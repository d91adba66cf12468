"""``autoshard import FRAMEWORK …``: turn a user's model into a graph JSON the planner reads.

The group is framework-neutral; each framework is one subcommand in its own module
(:mod:`~autoshard.cli.import_torch`, :mod:`~autoshard.cli.import_jax`), and all of them load
``MODULE:FACTORY`` and write the graph the same way (:mod:`~autoshard.cli.factory`).
"""

from __future__ import annotations

import click

from autoshard.cli.import_jax import jax_command
from autoshard.cli.import_torch import torch_command


@click.group("import")
def import_group() -> None:
    """Import a model from a framework as a graph JSON (plan it with `autoshard plan --model`)."""


import_group.add_command(torch_command)
import_group.add_command(jax_command)
