"""Built-in op kinds; importing this package registers each of them exactly once."""

from graphs.ops import (  # noqa: F401 - imported for their registrations
    attention,
    einsum,
    elementwise,
    embedding,
    loss,
    norm,
    optimizer,
    reduce,
    rotary,
    shape,
    softmax,
    sources,
)
