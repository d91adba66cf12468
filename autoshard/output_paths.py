"""Where an output path is blocked before anything is written: shared by every command that
writes files (``plan --out``, ``--trace``, ``diff --csv``, ``export``, ``sweep --out``), so
each refuses the same paths, before its work, with its own option's name.

What a path's shape cannot say (``/proc`` takes no new files, even from root; a read-only
disk; a directory without write permission) is asked of the operating system by creating and
removing a probe (:func:`write_refused`): a fresh, randomly named entry that nothing else uses,
so no file of the user's is opened, truncated or left behind.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

PROBE_PREFIX = ".autoshard-probe-"


def file_in_the_way(path: Path) -> Path | None:
    """The nearest existing ancestor of ``path`` (``path`` itself included) when it is a file,
    so ``path`` cannot be a directory or lie under one; ``None`` when nothing is in the way.

    Example:
        >>> import tempfile
        >>> root = Path(tempfile.mkdtemp())
        >>> (root / "notes.txt").write_text("mine")
        4
        >>> file_in_the_way(root / "notes.txt" / "plan") == root / "notes.txt"
        True
        >>> file_in_the_way(root / "new" / "plan") is None
        True
    """
    for ancestor in (path, *path.parents):
        if ancestor.exists():
            return None if ancestor.is_dir() else ancestor
    return None


def write_refused(path: Path, *, directory: bool) -> str | None:
    """Why the operating system would refuse to write ``path`` (a directory of outputs when
    ``directory``, else one file), or ``None`` when it would not. The nearest existing
    directory the writes need is probed: a file created and removed in the directory the
    outputs go to when it exists, else a directory created and removed in its nearest
    existing ancestor (whose parents the command creates). An existing file to be replaced
    must be writable too. Call after :func:`file_in_the_way` (its message is clearer).

    Example:
        >>> import tempfile
        >>> root = Path(tempfile.mkdtemp())
        >>> write_refused(root / "new" / "plan", directory=True) is None
        True
        >>> sorted(root.iterdir())  # nothing left behind
        []

    On Linux, ``/proc/x/plan.json`` gives ``'cannot create a directory in "/proc" (no such
    file or directory)'``.
    """
    target = path if directory else path.parent
    anchor = next((a for a in (target, *target.parents) if a.is_dir()), None)
    if anchor is None:
        return None  # no existing ancestor (a deleted working directory): left to the write
    if not directory and path.is_file() and not os.access(path, os.W_OK):
        return f'"{path}" is not writable'
    try:
        if anchor == target:
            handle, probe = tempfile.mkstemp(prefix=PROBE_PREFIX, dir=anchor)
            os.close(handle)
            os.remove(probe)
        else:
            os.rmdir(tempfile.mkdtemp(prefix=PROBE_PREFIX, dir=anchor))
    except OSError as exc:
        what = "a file" if anchor == target else "a directory"
        reason = (exc.strerror or type(exc).__name__).lower()
        return f'cannot create {what} in "{anchor}" ({reason})'
    return None
