"""Built-in op kinds; importing this package registers each of them exactly once."""

from graphs.ops import (  # noqa: F401 - imported for their registrations
    attention,
    attention_bwd,
    backward,
    compare,
    einsum,
    elementwise,
    embedding,
    lookup_bwd,
    loss,
    moe,
    norm,
    norm_bwd,
    opaque,
    optimizer,
    reduce,
    rotary,
    scalar,
    shape,
    softmax,
    sources,
)
