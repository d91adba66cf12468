"""Static values of a traced torch program: what does not depend on inputs or parameters.

Position ids (``arange``), rotary tables (from the ``inv_freq`` buffer) and causal masks are
computed inside a model's ``forward`` from buffers and literals alone. The importer does not
lower them op by op: the planner would price and shard index arithmetic that real programs
precompute. A static node is a buffer or constant placeholder, a ``get_attr``, or a call whose
every input node is static (``arange`` has none). When a lowered op reads one it becomes a
graph ``input`` (see :mod:`graphs.importers.torch_lower`).

:meth:`StaticValues.evaluate` runs a static node eagerly with torch on the CPU (meta devices
replaced by the CPU) so attention masks can be recognised. It returns None when the value is
unknowable (a buffer that lives on the meta device) or too large to build (more than
``MAX_ELEMENTS`` elements); nothing else calls it, so import stays cheap.
"""

from __future__ import annotations

import logging
from typing import Any

logger = logging.getLogger(__name__)

MAX_ELEMENTS = 1 << 26


class StaticValues:
    """Which fx nodes are static, their eager values on demand, and which became inputs."""

    def __init__(self, program: Any, dynamic_placeholders: set[str],
                 buffer_values: dict[str, Any]) -> None:
        self._program = program
        self._buffers = buffer_values
        self._static: dict[str, bool] = {}
        self._values: dict[str, Any] = {}
        self.materialised: dict[str, str] = {}
        for node in program.graph.nodes:
            if node.op == "placeholder":
                self._static[node.name] = node.name not in dynamic_placeholders
            elif node.op == "get_attr":
                self._static[node.name] = True
            elif node.op == "call_function":
                self._static[node.name] = all(self._static.get(n.name, False)
                                              for n in node.all_input_nodes)

    def is_static(self, node: Any) -> bool:
        return self._static.get(node.name, False)

    def evaluate(self, node: Any) -> Any:
        """The node's value as a CPU torch tensor (or tuple), or None when unknowable."""
        if node.name not in self._values:
            self._values[node.name] = self._compute(node)
        return self._values[node.name]

    def _compute(self, node: Any) -> Any:
        import torch

        if not self.is_static(node):
            return None
        if node.op == "placeholder":
            return self._buffers.get(node.name)
        if node.op == "get_attr":
            return getattr(self._program.graph_module, str(node.target), None)
        value = node.meta.get("val")
        if value is not None and hasattr(value, "numel") and value.numel() > MAX_ELEMENTS:
            return None
        missing = False

        def load(arg: Any) -> Any:
            nonlocal missing
            result = self.evaluate(arg)
            missing = missing or result is None
            return result

        args = torch.fx.node.map_arg(node.args, load)
        kwargs = torch.fx.node.map_arg(node.kwargs, load)
        if missing:
            return None
        if "device" in kwargs:
            kwargs = {**kwargs, "device": torch.device("cpu")}
        try:
            return node.target(*args, **kwargs)
        except Exception as error:  # any failure just means "not recognisable"
            logger.info("static node %s not evaluated: %s", node.name, error)
            return None
