"""Imported at start-up by every Python process of a run (PYTHONPATH names this folder; the
harness imports it too): folders in research storage import `.py` sources only.

Research storage is written by many runs of many agents. Python would run compiled code found
there before, or instead of, the source everyone reads: `__pycache__/<name>.cpython-311.pyc`
beside an honest `<name>.py` (an unchecked hash-based .pyc is never compared with its source),
a sourceless `<name>.pyc`, an extension module `<name>.cpython-311-x86_64-linux-gnu.so` (the
sandbox holds gcc). In the folders STATION_SOURCE_ONLY names (and below them) imports find `.py`
files only, compiled from their source in memory; where only compiled code exists the import
fails with an ImportError that says so. Not covered, the code's own choice: a process started
with `python -I`, `-E` or `-S` (no site, or no environment), an explicit loader
(importlib.machinery.ExtensionFileLoader, SourcelessFileLoader), ctypes.CDLL of a file.

Stdlib only; it must never fail the interpreter's start.
"""

from __future__ import annotations

import os
import sys
from importlib.machinery import BYTECODE_SUFFIXES, EXTENSION_SUFFIXES, FileFinder, SourceFileLoader

ENV = "STATION_SOURCE_ONLY"  # os.pathsep-separated folders, as the run sees them


class SourceOnlyLoader(SourceFileLoader):
    """A .py file compiled from its source every time: no bytecode read or written."""

    def get_code(self, fullname):
        path = self.get_filename(fullname)
        return self.source_to_code(self.get_data(path), path)

    def set_data(self, path, data, *, _mode=0o666):
        return None


class SourceOnlyFinder(FileFinder):
    """A FileFinder that knows only .py files, and says so when a name exists only compiled."""

    def find_spec(self, fullname, target=None):
        spec = super().find_spec(fullname, target)
        if spec is None or spec.loader is None:  # nothing, or a namespace portion
            compiled = self._compiled(fullname.rpartition(".")[2])
            if compiled:
                raise ImportError(
                    f"{fullname}: storage holds only compiled code for it ({compiled}); runs import only .py "
                    "sources from research storage",
                    name=fullname,
                    path=compiled,
                )
        return spec

    def _compiled(self, tail):
        for stem in (os.path.join(self.path, tail), os.path.join(self.path, tail, "__init__")):
            for suffix in (*EXTENSION_SUFFIXES, *BYTECODE_SUFFIXES):
                if os.path.isfile(stem + suffix):
                    return os.path.relpath(stem + suffix)
        return ""


class _Nothing:
    """The finder of a file on sys.path inside storage (a zip archive): it finds nothing."""

    def find_spec(self, fullname, target=None):
        return None

    def invalidate_caches(self):
        pass


def _inside(path, roots):
    return any(path == root or path.startswith(root.rstrip(os.sep) + os.sep) for root in roots)


def _archive(path):
    """Whether Python could import from the file as from a zip archive (compiled code inside)."""
    import zipfile

    try:
        return zipfile.is_zipfile(path)
    except OSError:
        return True  # unreadable: refused, as archives are


def path_hook(roots):
    def hook(entry):
        real = os.path.realpath(entry or ".")
        if not _inside(real, roots):
            raise ImportError("not in research storage")  # the next hook handles it, as usual
        if not os.path.isdir(real):
            if os.path.isfile(real) and not _archive(real):  # `python storage/system/run.py`: a script
                raise ImportError("a plain file: Python runs it as a script, as usual")
            return _Nothing()
        return SourceOnlyFinder(entry or ".", (SourceOnlyLoader, [".py"]))

    hook.station_source_only = True
    return hook


def install():
    roots = [os.path.realpath(p) for p in os.environ.get(ENV, "").split(os.pathsep) if p]
    if not roots or any(getattr(h, "station_source_only", False) for h in sys.path_hooks):
        return
    sys.path_hooks.insert(0, path_hook(roots))
    sys.path_importer_cache.clear()  # finders made before the hook are made again through it


install()
