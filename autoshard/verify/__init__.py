"""Prove a plan by running it: a NumPy SPMD emulator of every device of the mesh.

:mod:`~autoshard.verify.emulator` runs each op on its local shards and each reshard through
exactly the collectives that were priced (:mod:`~autoshard.verify.replay`,
:mod:`~autoshard.verify.collectives`), comparing every value with the unsharded reference
program (:mod:`~autoshard.verify.reference`, :mod:`~autoshard.verify.blocks`);
:mod:`~autoshard.verify.verification` does it on a scaled-down copy of a large model.
"""

from autoshard.verify.emulator import emulate
from autoshard.verify.results import EmulationError, EmulationResult
from autoshard.verify.verification import Verification, verify, verify_and_attach

__all__ = ["EmulationError", "EmulationResult", "Verification", "emulate", "verify",
           "verify_and_attach"]
