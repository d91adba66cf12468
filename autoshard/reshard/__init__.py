"""The cheapest way to turn one sharding of a tensor into another, as named collectives.

:mod:`~autoshard.reshard.state` is the compact layout state and its moves,
:mod:`~autoshard.reshard.convert` translates shardings to states and back,
:mod:`~autoshard.reshard.search` runs shortest paths from many sources at once, and
:mod:`~autoshard.reshard.find` prices a reshard or a whole matrix of them.
"""

from autoshard.reshard.find import (
    Collective,
    Reshard,
    ReshardError,
    ReshardStep,
    find_reshard,
    reshard_cost_matrix,
)

__all__ = ["Collective", "Reshard", "ReshardError", "ReshardStep", "find_reshard",
           "reshard_cost_matrix"]
