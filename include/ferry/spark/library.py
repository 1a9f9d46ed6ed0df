"""The `ferry` package as one zip for Spark's Python path (`--py-files`, a Connect
session's artifacts): executors on other machines import the same code as the driver."""

from __future__ import annotations

import hashlib
import os
import secrets
import zipfile
from pathlib import Path

import ferry
from ferry.jars import cache_dir


def library_zip() -> str:
    """The `ferry` package zipped for `--py-files`, so executors on other machines import
    the same code as the driver. Rebuilt when any source file changes."""
    package = Path(ferry.__file__).resolve().parent
    files = sorted(p for p in package.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    digest = hashlib.sha256()
    for path in files:
        digest.update(str(path.relative_to(package)).encode())
        digest.update(path.read_bytes())
    target = cache_dir() / "py" / f"ferry-{digest.hexdigest()[:16]}.zip"
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        # A file of this builder's own: another process (a second task on the worker after
        # an upgrade) may build the same zip at once, and a shared partial file would be
        # truncated under one builder and renamed away under the other. The rename is
        # atomic; the last one wins with the same content.
        partial = target.with_name(f"{target.stem}.{os.getpid()}.{secrets.token_hex(4)}.partial")
        try:
            with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as archive:
                for path in files:
                    archive.write(path, str(Path("ferry") / path.relative_to(package)))
            partial.replace(target)
        finally:
            partial.unlink(missing_ok=True)
    return str(target)
