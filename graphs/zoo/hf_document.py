"""A Hugging Face ``config.json`` as a document of typed fields, and the test that tells one
from an ``autoshard.graph/v1`` graph file.

Why a layer of its own: every field is read through one typed getter, so a missing size, a
string where an integer belongs or a boolean written as ``"yes"`` is one
:class:`~graphs.zoo.errors.HFConfigError` naming the file and the key, never a ``KeyError`` or
a ``TypeError`` deep in the graph builder. Absent optional fields take the defaults of the
Hugging Face config classes, which the callers pass in (see :mod:`graphs.zoo.hf`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from graphs.zoo.errors import HFConfigError

GRAPH_FORMAT_KEY = "format"
"""The top-level key every ``autoshard.graph/v1`` file has and no Hugging Face config has."""


class _Required:
    """Sentinel default: the field must be present."""

    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Any = _Required()
CONFIG_NAME = "config.json"


@dataclass(frozen=True, slots=True)
class ConfigDocument:
    """The JSON object of a config and where it came from (``file`` None for a dict)."""

    data: Mapping[str, Any]
    file: str | None

    def error(self, field: str | None, message: str) -> HFConfigError:
        return HFConfigError(self.file, field, message)

    def raw(self, key: str, default: Any = None) -> Any:
        """The value as written (``default`` when absent); no type check."""
        return self.data.get(key, default)

    def _present(self, key: str, default: Any) -> tuple[bool, Any]:
        if key in self.data:
            return True, self.data[key]
        if default is REQUIRED:
            raise self.error(key, "missing; the model's shapes need it")
        return False, default

    def positive_int(self, key: str, default: Any = REQUIRED) -> int:
        """A positive integer (not a bool, not a float such as ``4096.0``)."""
        present, value = self._present(key, default)
        if present and not _is_positive_int(value):
            raise self.error(key, f"must be a positive integer, got {_shown(value)}")
        return int(value)

    def optional_positive_int(self, key: str, default: int | None = None) -> int | None:
        """A positive integer, or None when the field is absent or ``null``."""
        present, value = self._present(key, default)
        if not present or value is None:
            return value
        if not _is_positive_int(value):
            raise self.error(key, f"must be a positive integer or null, got {_shown(value)}")
        return int(value)

    def flag(self, key: str, default: bool) -> bool:
        """A JSON boolean."""
        _, value = self._present(key, default)
        if not isinstance(value, bool):
            raise self.error(key, f"must be true or false, got {_shown(value)}")
        return value

    def number(self, key: str, default: float) -> float:
        """A JSON number (integer or float, not a bool)."""
        _, value = self._present(key, default)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.error(key, f"must be a number, got {_shown(value)}")
        return float(value)

    def text(self, key: str, default: str | None = None) -> str | None:
        """A JSON string, or None when absent (and no default) or ``null``."""
        _, value = self._present(key, default)
        if value is not None and not isinstance(value, str):
            raise self.error(key, f"must be a string, got {_shown(value)}")
        return value


def _is_positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _shown(value: Any) -> str:
    kind = {str: "a string", bool: "a boolean", float: "a float", list: "a list",
            dict: "an object", type(None): "null"}.get(type(value), type(value).__name__)
    text = json.dumps(value)
    return f"{text[:40]}… ({kind})" if len(text) > 40 else f"{text} ({kind})"


def read_document(source: str | Path | Mapping[str, Any]) -> ConfigDocument:
    """The config as a :class:`ConfigDocument`: a mapping is taken as is, a path is read as
    UTF-8 JSON (a checkpoint directory means its ``config.json``). Raises HFConfigError
    (naming the file) when unreadable, not JSON, not an object, an ``autoshard.graph/v1``
    file, or without a string ``model_type``."""
    if isinstance(source, Mapping):
        document = ConfigDocument(dict(source), None)
    else:
        path = config_path(source)
        document = ConfigDocument(_parse(path, str(path)), str(path))
    if GRAPH_FORMAT_KEY in document.data:
        raise document.error(GRAPH_FORMAT_KEY, "this is an autoshard graph file, not a Hugging "
                             "Face config; load it with graphs.load")
    if document.text("model_type", REQUIRED) is None:
        raise document.error("model_type", "must be a string, got null")
    return document


def config_path(source: str | Path) -> Path:
    """``source`` as a path; a directory holding a ``config.json`` (a downloaded checkpoint)
    means that file."""
    path = Path(source)
    if path.is_dir() and (path / CONFIG_NAME).is_file():
        return path / CONFIG_NAME
    return path


def _parse(path: Path, file: str) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        reason = getattr(error, "strerror", None) or str(error)
        raise HFConfigError(file, None, f"cannot read the config: {reason}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise HFConfigError(file, None, f"not valid JSON at line {error.lineno} column "
                            f"{error.colno}: {error.msg}") from None
    if not isinstance(data, dict):
        raise HFConfigError(file, None, f"must hold a JSON object, got {_shown(data)}")
    return data


def is_hf_config(source: str | Path | Mapping[str, Any]) -> bool:
    """Whether ``source`` (a path or a mapping) looks like a Hugging Face ``config.json``: a
    JSON object with a string ``model_type`` and no ``format`` key (an ``autoshard.graph/v1``
    graph file has ``"format"`` and no ``model_type``). Never raises: anything unreadable is
    simply not a config (the graph loader then says what is wrong with it).

    Example:
        >>> is_hf_config({"model_type": "llama", "hidden_size": 64})
        True
        >>> is_hf_config({"format": "autoshard.graph/v1", "name": "g"})
        False
        >>> is_hf_config("no/such/config.json")
        False
    """
    try:
        read_document(source)
    except HFConfigError:
        return False
    return True
