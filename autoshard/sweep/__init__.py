"""What-if studies: one model planned on many meshes, topologies, links and shapes.

:mod:`~autoshard.sweep.points` expands a :class:`SweepSpec` into points,
:mod:`~autoshard.sweep.runner` plans them (in process, a process pool or Dask),
:mod:`~autoshard.sweep.table` keeps ``sweep.csv`` resumable, :mod:`~autoshard.sweep.plots` and
:mod:`~autoshard.sweep.summary` report, and :mod:`~autoshard.sweep.study` ties them together.
"""

from autoshard.sweep.points import SweepSpec
from autoshard.sweep.study import SweepResult, sweep

__all__ = ["SweepResult", "SweepSpec", "sweep"]
