"""One two-stage trial's exchange folders (evaluators/jaxtrain/two_stage.py) and the station's
hands on them: which folders there are, who writes each, and the only operations the station
performs there (present, take, write, remove), all through runfiles (no link followed, bounded).

LocalFolders keeps them on this host: the local executor's path, unchanged. On Ray the same class
runs on the trial's node, inside a small actor of the station's own (station/executors/ray_exchange.py),
and the station holds a proxy with the same methods: the bytes cross through Ray, never through a
shared file system.
"""

from __future__ import annotations

from pathlib import Path

from station.executors import runfiles

TRAIN, INBOX, OUTBOX, CONTROL, SCORING = "train", "inbox", "outbox", "control", "scoring_data"


class LocalFolders:
    """The trial's folders under `folder`, a new subfolder of one of the station's work folders:
    `train/` and `outbox/` are written by the runs (private until the executor mounts them and
    shares them with the sandbox's group), `inbox/` and `control/` by the station (0o755: the runs
    only read them). The scorer's inputs are on this host already (`provide`)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        for where in (INBOX, CONTROL):
            path = folder / where
            path.mkdir()
            path.chmod(0o755)  # the runs read it (the scorer its inbox, the trainer `stop`), none writes
        for where in (TRAIN, OUTBOX):
            runfiles.run_folder(folder / where)

    def path(self, where: str) -> Path:
        """The folder as the trial's runs are given it (a mount source on the runs' host)."""
        return self.folder / where

    def present(self, where: str, name: str) -> bool:
        return runfiles.present(self.path(where), name)

    def take(self, where: str, name: str, limit: int, what: str) -> bytes | None:
        """runfiles.take: the bytes of a run's file, then the file removed; Refused when unusable."""
        return runfiles.take(self.path(where), name, limit, what)

    def write(self, where: str, name: str, data: bytes) -> None:
        runfiles.write(self.path(where), name, data)

    def remove(self, where: str, name: str) -> None:
        """Remove a file the station wrote (never a run's folder: inbox/ or control/)."""
        (self.path(where) / name).unlink(missing_ok=True)

    def provide(self, source: Path) -> Path:
        """Where the scorer finds its inputs (`source`, the station's own folder): here, in place."""
        return source
