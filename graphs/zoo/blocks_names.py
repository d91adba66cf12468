"""Names shared by the zoo's block emitters (kept apart so the emitter modules do not import
each other)."""

ROPE_COS, ROPE_SIN = "rope.cos", "rope.sin"
"""The rotary tables [seq, rotary dim / 2] every layer's ``rotary`` ops read."""
