"""One training step as one graph: forward, backward (autodiff) and the optimizer step.

Why one graph: data parallelism, ZeRO/FSDP, tensor and sequence parallelism differ only in
where parameters, gradients, optimizer state and saved activations live and which collectives
move them. With all of them in one graph, the planner's single search chooses among them
instead of being told which one to use.
"""

from __future__ import annotations

from typing import Any

from graphs.autodiff import backward_graph
from graphs.opgraph import OpGraph
from graphs.optimizer import Optimizer, append_optimizer

RECOMPUTE_CHOICES = ("none", "selective", "selective-op", "full")


def training_graph(forward: OpGraph, *, optimizer: str | Optimizer = Optimizer.ADAMW,
                   recompute: str = "none", loss: str | None = None,
                   master_weights: bool | None = None, **hyper: Any) -> OpGraph:
    """Forward + backward + one optimizer step per parameter.

    Args:
        forward: a forward graph (e.g. from :func:`graphs.zoo.build`); not modified.
        optimizer: "adamw" (default; fp32 master weights for 16-bit params) or "sgd".
        recompute: "none", "selective", "selective-op" (torchtitan's op policy) or "full"
            activation recomputation (Korthikanti et al. 2022), see
            :func:`graphs.autodiff.backward_graph`.
        loss: the tensor to differentiate; default the graph's single output.
        master_weights: override the mixed-precision default of the AdamW step.
        **hyper: optimizer step attrs (lr, beta1, beta2, eps, weight_decay, step).

    Returns:
        A new graph; ``forward`` is left unchanged.
    """
    graph = backward_graph(forward, loss=loss, recompute=recompute)
    return append_optimizer(graph, optimizer, master_weights=master_weights, **hyper)
