"""Errors of the model zoo, under the :class:`graphs.errors.GraphError` root.

They carry the model name and the offending field so the CLI can print one line that names the
culprit and says what to do (e.g. suggest close model names).
"""

from __future__ import annotations

from graphs.errors import GraphError


class UnknownModelError(GraphError):
    """A model name the zoo does not know; ``suggestions`` holds close names."""

    def __init__(self, name: str, suggestions: tuple[str, ...], known: tuple[str, ...]):
        self.name, self.suggestions, self.known = name, suggestions, known
        if suggestions:
            hint = f"did you mean {', '.join(suggestions)}?"
        else:
            hint = f"choose one of {', '.join(known)}"
        super().__init__(f'unknown model "{name}"; {hint} (`autoshard models` lists them)')


class ModelConfigError(GraphError):
    """An override or a combination of sizes that does not describe a valid model."""

    def __init__(self, model: str, field: str, message: str):
        self.model, self.field = model, field
        super().__init__(f'model "{model}": {message}')
