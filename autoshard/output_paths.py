"""Where an output path is blocked before anything is written: shared by every command that
writes files (``plan --out``, ``--trace``, ``diff --csv``, ``export``, ``sweep --out``), so
each refuses the same paths, before its work, with its own option's name."""

from __future__ import annotations

from pathlib import Path


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
