"""The ``autoshard`` command group: logging options, and every subcommand registered.

Every error the user can cause (bad files, unknown names, impossible meshes, memory too small)
arrives in a subcommand as one of the packages' exceptions and leaves as one line on stderr
with a non-zero exit (:func:`autoshard.cli.common.friendly_errors`): 2 for usage errors, 1 for
problems with no feasible plan. Never a traceback. Each subcommand lives in its own module.
"""

from __future__ import annotations

import logging

import click

from autoshard.cli.bench import bench_command
from autoshard.cli.calibrate import calibrate_command
from autoshard.cli.diff import diff_command
from autoshard.cli.explain import explain_command
from autoshard.cli.export import export_command
from autoshard.cli.importing import import_group
from autoshard.cli.models import models_command
from autoshard.cli.plan import plan_command
from autoshard.cli.sweep import sweep_command
from autoshard.cli.trace import trace_command
from autoshard.cli.verify import verify_command
from autoshard.logs import configure_logging


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-v", "--verbose", count=True, help="More log output on stderr (-vv for debug).")
def main(verbose: int) -> None:
    """autoshard: plan how every tensor of a model is sharded over a device mesh."""
    level = logging.WARNING - 10 * min(verbose, 2)
    configure_logging(level)


for _command in (plan_command, models_command, bench_command, calibrate_command, export_command,
                 import_group, sweep_command, verify_command, explain_command, diff_command,
                 trace_command):
    main.add_command(_command)
