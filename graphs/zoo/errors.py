"""Errors of the model zoo, under the :class:`graphs.errors.GraphError` root (and the one
warning a Hugging Face config can raise).

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


class HFConfigError(GraphError):
    """A Hugging Face ``config.json`` that cannot be read as a model: not JSON, not an object,
    a required field missing, a field of the wrong type or value. ``file`` is the path as given
    (None for a dict), ``field`` the config key at fault (None when the whole file is)."""

    def __init__(self, file: str | None, field: str | None, message: str):
        self.file, self.field = file, field
        where = file if file is not None else "Hugging Face config"
        what = f'field "{field}": ' if field is not None else ""
        super().__init__(f"{where}: {what}{message}")


class UnknownModelTypeError(HFConfigError):
    """A ``model_type`` with no graph builder; ``known`` lists the supported ones and
    ``reason`` says why a recognised but unsupported type (e.g. ``mixtral``) is not built."""

    def __init__(self, file: str | None, model_type: str, known: tuple[str, ...],
                 suggestions: tuple[str, ...] = (), reason: str = ""):
        self.model_type, self.known, self.suggestions = model_type, known, suggestions
        why = f" ({reason})" if reason else ""
        hint = f"did you mean {', '.join(suggestions)}? " if suggestions else ""
        super().__init__(file, "model_type", f'model_type "{model_type}" is not supported{why}; '
                         f"{hint}supported model types: {', '.join(known)}")


class UnmodelledFieldsWarning(UserWarning):
    """A Hugging Face config sets fields that change the model's math but that the graph does
    not model (a sliding window shorter than seq, dropout, …); the message is one line naming
    each field, its value and what the graph does instead."""
