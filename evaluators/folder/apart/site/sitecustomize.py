"""Child Python interpreters of an evaluator whose program runs apart (apart_standin.py): the same
hooks as in the evaluator, and `python program.py ARGS` forwarded to the program's own process
(its prints and exit code come back). It is on the PYTHONPATH the stand-in sets, first: the
sitecustomize found after it on the path (the run's own, station/executors/harness_site) is run
first, as it would have been."""

import importlib.util
import os
import sys
from typing import Any


def _exec(name: str, path: str) -> Any:
    """The file at `path` run as module `name`."""
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _next_sitecustomize() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    for entry in sys.path:
        found = os.path.join(entry or os.curdir, "sitecustomize.py")
        if os.path.abspath(entry or os.curdir) != here and os.path.isfile(found):
            _exec("station_next_sitecustomize", found)
            return


def _apart() -> None:
    program = os.environ.get("STATION_APART_PROGRAM")
    channel = os.environ.get("STATION_CHANNEL")
    if not program or not channel:
        return
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "apart_standin.py")
    standin = _exec("station_apart_standin", here)
    standin.install(program, channel)
    if sys.argv and sys.argv[0] not in ("", "-c", "-m") and standin.is_program(sys.argv[0]):
        code = standin.run_as_main(list(sys.argv))
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


_next_sitecustomize()
_apart()
