"""The costmodel exception tree: one root, subclasses named for what went wrong.

Every error carries structured fields (the spec, the file, the key) so callers such as the
``autoshard`` CLI can enrich or reformat them; every message names the culprit and what is
accepted instead.
"""

from __future__ import annotations


class CostModelError(ValueError):
    """Root of every error raised by :mod:`costmodel`."""


class UnitError(CostModelError):
    """A quantity string ("80GiB", "5us", "25GB/s") could not be parsed.

    Fields: ``text`` the culprit, ``quantity`` what it should have been ("bytes", ...).
    """

    def __init__(self, message: str, *, text: str = "", quantity: str = "") -> None:
        super().__init__(message)
        self.text, self.quantity = text, quantity


class UnknownPresetError(CostModelError):
    """A topology preset name is not known; ``close`` lists near matches."""

    def __init__(self, message: str, *, name: str, close: tuple[str, ...] = (),
                 known: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.name, self.close, self.known = name, close, known


class LinkSpecError(CostModelError):
    """A ``--link`` spec ("nvlink", "alpha:5us,bw:25GB/s") is malformed or unknown."""

    def __init__(self, message: str, *, spec: str) -> None:
        super().__init__(message)
        self.spec = spec


class TopologyFileError(CostModelError):
    """A TOML topology file is unreadable or has a bad key; names the file and the key."""

    def __init__(self, file: str, key: str, message: str) -> None:
        where = f"{file}: key {key!r}: " if key else f"{file}: "
        super().__init__(where + message)
        self.file, self.key, self.detail = file, key, message


class InvalidValueError(CostModelError):
    """A value handed to a costmodel constructor or function is out of range.

    Fields: ``field`` the parameter name, ``value`` the rejected value.
    """

    def __init__(self, message: str, *, field: str = "", value: object = None) -> None:
        super().__init__(message)
        self.field, self.value = field, value


class UnknownDtypeError(CostModelError):
    """A dtype has no peak FLOP/s on the device (nor any documented fallback)."""

    def __init__(self, message: str, *, dtype: str, device: str) -> None:
        super().__init__(message)
        self.dtype, self.device = dtype, device


class NcclTestsError(CostModelError):
    """An nccl-tests table is not one, is empty, or is inconsistent; names the file and line.

    Fields: ``file`` the source, ``line`` the 1-based line (0 for the whole file), ``detail``.
    """

    def __init__(self, file: str, line: int, message: str) -> None:
        where = f"{file}, line {line}: " if line else f"{file}: "
        super().__init__(where + message)
        self.file, self.line, self.detail = file, line, message


class CalibrationError(CostModelError):
    """Tables cannot be fitted or checked against a topology (group does not fit, no data)."""

    def __init__(self, message: str, *, table: str = "") -> None:
        super().__init__(message)
        self.table = table


class MatmulTableError(CostModelError):
    """A matmul benchmark table (CSV) is unreadable, empty or has a bad row; names the file
    and the 1-based line (0 for the whole file).

    Fields: ``file``, ``line``, ``detail``.
    """

    def __init__(self, file: str, line: int, message: str) -> None:
        where = f"{file}, line {line}: " if line else f"{file}: "
        super().__init__(where + message)
        self.file, self.line, self.detail = file, line, message


class LaunchFloorWarning(UserWarning):
    """A user-written alpha-beta link prices small collectives below the measured floor of the
    topology's links (:func:`costmodel.launch_floor.undercut_floor`): a warning, since a
    textbook link is a legitimate what-if, but one whose small messages are too cheap."""
