"""The routing arithmetic of mixture-of-experts layers, in NumPy, shared by the MoE op kinds.

Why one module: dispatch, combine and the gate gradient must agree on where every routed token
sits in its expert's buffer, so the slot rule is written once.

**Slots (GShard's rule, capacity-limited).** Tokens are routed within a *group* (one sequence:
the zoo's MoE layers use groups = batch rows). A group's routed copies are placed choice-major:
every token's first choice before any token's second choice, tokens in order within a choice
(Lepikhin et al. 2020, GShard, Algorithm 1: ``position_in_expert_2 = cumsum(mask_2) +
sum(mask_1)``). A copy whose position in its expert reaches the ``capacity`` is dropped (slot
−1), Megatron-Core's ``--moe-token-drop-policy position``. Tokens choose distinct experts, so
an expert never holds one token twice.

**Top-k.** ``top_k`` keeps the k largest scores per token, ties broken by the lower expert index
(a stable sort), optionally renormalised to sum 1 over the k (Mixtral; Qwen2-MoE's
``norm_topk_prob``; DeepSeek-V3's ``norm_topk_prob``) and scaled (DeepSeek-V3's
``routed_scaling_factor``): Hugging Face ``MixtralSparseMoeBlock.forward`` (softmax, topk,
``routing_weights /= routing_weights.sum``) and Megatron-Core ``topk_routing_with_score_function``
(``probs = scores / scores.sum``; ``probs * scaling_factor``).

Example:
    >>> import numpy as np
    >>> experts = np.array([[[0, 1], [0, 2], [0, 1]]])   # one group, 3 tokens, top-2 of 3
    >>> slots(experts, num_experts=3, capacity=2).tolist()
    [[[0, 0], [1, 0], [-1, 1]]]
"""

from __future__ import annotations

import numpy as np


def slots(experts: np.ndarray, num_experts: int, capacity: int) -> np.ndarray:
    """The slot of every routed copy ``experts[g, t, j]`` in its expert's buffer, −1 when the
    capacity drops it; same shape as ``experts``."""
    groups, tokens, k = experts.shape
    order = experts.transpose(0, 2, 1).reshape(groups, k * tokens).astype(np.int64)
    onehot = order[..., None] == np.arange(num_experts)
    running = np.cumsum(onehot, axis=1) - 1
    position = np.take_along_axis(running, order[..., None], axis=2)[..., 0]
    position = np.where(position < capacity, position, -1)
    return position.reshape(groups, k, tokens).transpose(0, 2, 1)


def kept(experts: np.ndarray, num_experts: int, capacity: int
         ) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray], np.ndarray, np.ndarray]:
    """Indices (g, t, j) of the routed copies that fit, their experts and their slots."""
    position = slots(experts, num_experts, capacity)
    where = np.nonzero(position >= 0)
    return where, experts[where].astype(np.int64), position[where]


def dispatch(x: np.ndarray, experts: np.ndarray, weights: np.ndarray | None,
             num_experts: int, capacity: int) -> np.ndarray:
    """Buffer [g, E, c, h]: each kept copy of token x[g, t] (times its weight when given) in
    its expert's slot; empty slots are zero."""
    groups, _, hidden = x.shape
    out = np.zeros((groups, num_experts, capacity, hidden), dtype=x.dtype)
    (g, t, j), expert, slot = kept(experts, num_experts, capacity)
    values = x[g, t]
    if weights is not None:
        values = values * weights[g, t, j][:, None]
    out[g, expert, slot] = values
    return out


def combine(y: np.ndarray, experts: np.ndarray, weights: np.ndarray | None) -> np.ndarray:
    """Out [g, t, h]: per token the sum over its kept copies of the expert output in the
    copy's slot (times its weight when given); dropped copies add nothing."""
    groups, num_experts, capacity, hidden = y.shape
    tokens = experts.shape[1]
    out = np.zeros((groups, tokens, hidden), dtype=y.dtype)
    (g, t, j), expert, slot = kept(experts, num_experts, capacity)
    values = y[g, expert, slot]
    if weights is not None:
        values = values * weights[g, t, j][:, None]
    np.add.at(out, (g, t), values)
    return out


def gate_grad(y: np.ndarray, experts: np.ndarray, d: np.ndarray) -> np.ndarray:
    """[g, t, k]: for each kept copy the dot product of d[g, t] with the buffer row of its
    slot, zero for dropped copies (the gradient of a weighted combine or dispatch with respect
    to its weights)."""
    num_experts, capacity = y.shape[1], y.shape[2]
    out = np.zeros(experts.shape, dtype=np.result_type(y, d))
    (g, t, j), expert, slot = kept(experts, num_experts, capacity)
    out[g, t, j] = np.einsum("nh,nh->n", y[g, expert, slot], d[g, t])
    return out


def top_k(scores: np.ndarray, k: int, normalize: bool, scale: float
          ) -> tuple[np.ndarray, np.ndarray]:
    """(gates, experts) over the last dim: the k largest scores (stable order), normalised
    to sum 1 when ``normalize``, times ``scale``."""
    experts = np.argsort(-scores, axis=-1, kind="stable")[..., :k]
    gates = np.take_along_axis(scores, experts, axis=-1)
    if normalize:
        gates = gates / gates.sum(axis=-1, keepdims=True)
    return gates * scale, experts


def top_k_grad(scores: np.ndarray, experts: np.ndarray, dgates: np.ndarray, normalize: bool,
               scale: float) -> np.ndarray:
    """d scores of :func:`top_k`: with picked scores p and S = Σp, gates = scale·p/S give
    dp_i = scale·(dg_i − Σ_j dg_j·p_j/S)/S (scale·dg_i without normalisation); scattered to
    the picked experts, zero elsewhere (selection itself has no gradient)."""
    picked = np.take_along_axis(scores, experts, axis=-1)
    if normalize:
        total = picked.sum(axis=-1, keepdims=True)
        mean = (dgates * picked).sum(axis=-1, keepdims=True) / total
        grad = scale * (dgates - mean) / total
    else:
        grad = scale * dgates
    out = np.zeros(scores.shape, dtype=np.result_type(scores, dgates))
    np.put_along_axis(out, experts, grad, axis=-1)
    return out


def expert_counts(experts: np.ndarray, num_experts: int) -> np.ndarray:
    """Routed copies per expert, before any capacity drop (the Switch Transformer's f_i·T)."""
    return np.bincount(experts.astype(np.int64).ravel(), minlength=num_experts)
