"""Trusted wrapper for function-mode runs, executed by the sandboxed interpreter.

    python -s harness.py <entry> <filename> <results dir>

Storage imports .py sources only (harness_site/sitecustomize.py, which every Python process of
the run imports). It imports the submission from the working dir (the scratch dir, also sys.path[0], so
`import submission` and relative storage paths work), calls its zero-argument entry function
and writes the outcome to the run's private results dir: `result.json` plus one `.npy` file per
numpy array. The submission runs in this same process and could rewrite all of it; that is
fine because the executor trusts nothing here but plain data, loaded without pickle and within
size caps (results.py), and scores it itself.

Encoding (results.py decodes it): JSON scalars and lists as they are, tuples as {"tuple": [...]}
(a scorer may tell a tuple from a list), dicts as {"dict": {...}} with string keys, arrays as
{"npy": <index>} (their dtype kept). numpy is never
imported here: a value can only hold numpy objects if the submission imported numpy itself.
"""

from __future__ import annotations

import importlib.util
import io
import json
import os
import sys
from typing import NoReturn

MANIFEST = "result.json"
ARRAY_KINDS = "biufc"  # bool, integers, floats, complex
PLAIN = "numbers, strings, lists, dicts, numeric numpy arrays"


class NotPlainData(Exception):
    pass


class Encoder:
    def __init__(self, out_dir: str) -> None:
        self.out_dir = out_dir
        self.arrays = 0
        self.np = sys.modules.get("numpy")

    def encode(self, value):
        if value is None or isinstance(value, (bool, int, float, str)):  # numpy float64 is a float
            return value
        if isinstance(value, list):
            return [self.encode(v) for v in value]
        if isinstance(value, tuple):
            return {"tuple": [self.encode(v) for v in value]}
        if isinstance(value, dict):
            for key in value:
                if not isinstance(key, str):
                    raise NotPlainData(
                        f"the entry point returned a dict with a {type(key).__name__} key; dict keys must be strings"
                    )
            return {"dict": {str(k): self.encode(v) for k, v in value.items()}}
        np = self.np
        if np is not None and isinstance(value, np.generic) and value.dtype.kind in "biuf":
            return self.encode(value.item())
        if np is not None and isinstance(value, np.ndarray) and value.dtype.kind in ARRAY_KINDS:
            np.save(os.path.join(self.out_dir, f"{self.arrays}.npy"), np.asarray(value), allow_pickle=False)
            self.arrays += 1
            return {"npy": self.arrays - 1}
        kind = type(value)
        name = kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
        detail = f" of dtype {value.dtype}" if np is not None and isinstance(value, (np.ndarray, np.generic)) else ""
        raise NotPlainData(f"the entry point returned {name}{detail}, which is not plain data ({PLAIN})")


def one_line(err: BaseException) -> str:
    lines = str(err).strip().splitlines()
    return f"{type(err).__name__}: {lines[0][:500]}" if lines else type(err).__name__


def formatted_traceback(err: BaseException) -> str:
    """The traceback as Python prints it, "Did you mean" hints included (3.11 adds those only
    in the interpreter's own printer), without the harness's and importlib's frames."""
    tb = err.__traceback__
    while tb is not None and (
        tb.tb_frame.f_code.co_filename
        in (__file__, "<frozen importlib._bootstrap>", "<frozen importlib._bootstrap_external>")
    ):
        tb = tb.tb_next
    err.__traceback__ = tb  # the printer reads it from the exception
    buffer, stderr = io.StringIO(), sys.stderr
    sys.stderr = buffer
    try:
        sys.__excepthook__(type(err), err, tb)
    finally:
        sys.stderr = stderr
    return buffer.getvalue()


def finish(out_dir: str, record: dict) -> NoReturn:
    """Write the record and leave at once (no atexit handlers, no waiting for stray threads)."""
    with open(os.path.join(out_dir, MANIFEST), "w") as f:
        json.dump(record, f)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - the submission may have replaced or closed them
            pass
    os._exit(0 if record["status"] == "ok" else 1)


def failure(message: str, err: BaseException | None = None) -> dict:
    return {"status": "error", "error": message, "traceback": formatted_traceback(err) if err else None}


def main(entry: str, filename: str, out_dir: str) -> None:
    # site imported it at start-up (PYTHONPATH); imported here too so that a run without it fails
    # loudly rather than read compiled code from research storage
    import sitecustomize

    sitecustomize.install()
    scratch = os.getcwd()
    sys.path[0] = scratch  # not the harness's folder
    sys.argv = [filename]
    name = os.path.splitext(filename)[0]
    try:
        spec = importlib.util.spec_from_file_location(name, os.path.join(scratch, filename))
        module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]  # None raises: an import failure
        sys.modules[name] = module  # `import submission` from its own helpers finds this one
        spec.loader.exec_module(module)  # type: ignore[union-attr]  # likewise a spec without a loader
    except BaseException as err:  # noqa: BLE001 - SystemExit and KeyboardInterrupt included
        finish(out_dir, failure(f"Import failed: {one_line(err)}", err))
    function = getattr(module, entry, None)
    if not callable(function):
        finish(out_dir, failure(f"Entry point not found: {filename} defines no function {entry}()"))
    try:
        value = function()
    except BaseException as err:  # noqa: BLE001
        finish(out_dir, failure(one_line(err), err))
    try:
        encoded = Encoder(out_dir).encode(value)
    except NotPlainData as err:
        finish(out_dir, failure(str(err)))
    except RecursionError:
        finish(out_dir, failure("the entry point returned data nested too deeply (or containing itself)"))
    except OSError as err:  # RLIMIT_FSIZE, a full disk
        finish(out_dir, failure(f"Could not save the result: {one_line(err)}"))
    finish(out_dir, {"status": "ok", "value": encoded})


if __name__ == "__main__":
    main(*sys.argv[1:4])
