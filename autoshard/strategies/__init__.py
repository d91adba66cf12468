"""Every way one op can run on the mesh: derived from its dimension signature, per mesh axis,
then expanded to the N-D mesh (:mod:`~autoshard.strategies.derive`); the few ops no signature
describes get hand-written rules beside it (:mod:`~autoshard.strategies.hand_rules`)."""

from autoshard.strategies.derive import Strategy, enumerate_strategies, strategy_by_label

__all__ = ["Strategy", "enumerate_strategies", "strategy_by_label"]
