"""Runs a station's engine in a background thread of the web server, so the page can pause and
resume it. If another process (`station run`) holds the station, the page can still pause it
(through a queued operator command) but cannot run it as well.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from station.apps import report
from station.apps.task_checks import TaskCannotWork, check_folder_tasks, remember_checks
from station.core import commands
from station.core.engine import Engine, Progress, StationPaused
from station.core.run_lock import StationBusy, is_running, run_lock
from station.core.store import Store


class StationRunner:
    def __init__(self, directory: str | Path) -> None:
        self.dir = Path(directory)
        self._thread: threading.Thread | None = None
        self._engine: Engine | None = None
        self._lock = threading.Lock()
        self.last: Progress | None = None
        self.why: str | None = None  # why the last run in this server stopped
        self.until_tick: int | None = None  # the tick limit of the run in this server (None: no limit)
        self.preparing: str | None = None  # what the run prepares before its first tick (its tasks' data, scorers)

    @property
    def running_here(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def state(self) -> str:
        if self.running_here:
            return "running"
        if is_running(self.dir):
            return "running elsewhere"
        return "paused" if (self.dir / report.PAUSE_FILE).exists() else "stopped"

    def resume(self, until_tick: int | None = None) -> str:
        with self._lock:
            state = self.state()
            if state.startswith("running"):
                return f"the station is already {state}"
            self.why, self.until_tick = None, until_tick
            self._thread = threading.Thread(target=self._run, args=(until_tick,), name="station-engine", daemon=True)
            self._thread.start()
        return f"the station is {self._limit_text()}"

    def pause(self) -> str:
        with self._lock:
            if self.running_here and self._engine is not None:
                self._engine.stop.set()  # the turn in flight finishes and commits first
                return "the station stops after the turn in flight"
            if self.state() == "running elsewhere":
                store = Store(self.dir)
                try:
                    commands.queue(store, {"op": "pause"})
                finally:
                    store.close()
                return "a pause was sent to the process running the station"
            return "the station is not running"

    def started_at(self) -> float | None:
        """When the run in progress (here or in another process) began: it writes run.lock then."""
        if not self.state().startswith("running"):
            return None
        try:
            return (self.dir / "run.lock").stat().st_mtime
        except FileNotFoundError:
            return None

    def pause_reason(self) -> str | None:
        """Why the station is paused ("" if it does not say), or None when it is not paused."""
        try:
            return (
                (self.dir / report.PAUSE_FILE).read_text(encoding="utf-8").strip() if self.state() == "paused" else None
            )
        except FileNotFoundError:  # a run started in between
            return None

    def wait(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self, until_tick: int | None) -> None:
        from station.apps.world import Station

        pause_file = self.dir / report.PAUSE_FILE
        try:
            with run_lock(self.dir):
                station = Station.open(self.dir)
                try:
                    pause_file.unlink(missing_ok=True)
                    self._prepare(station)
                    self._engine = Engine(station, on_progress=self._progress)
                    self.why = self._engine.run(until_tick=until_tick)
                except StationPaused as err:
                    pause_file.write_text(f"{err}\n", encoding="utf-8")
                    self.why = f"paused: {err}"
                finally:
                    self._engine = None
                    station.close()
        except (StationBusy, TaskCannotWork) as err:
            self.why = str(err)
        except Exception as err:  # noqa: BLE001 - shown on the page; the server stays up
            self.why = f"the engine stopped on an error: {err!r}"

    def _prepare(self, station: Any) -> None:
        """What `station run` prepares before the first tick (the tasks' data, their scorers), shown on the page."""

        def say(step: str) -> None:
            self.preparing = step

        try:
            # the checks `station run` makes: a folder task that cannot work is refused, in one line, on the page
            refusal = "the station did not run and is unchanged"
            remember_checks(self.dir, check_folder_tasks(station.config, self.dir, refusal, say))
            station.prepare_tasks(say, warm_up=True)
        finally:
            self.preparing = None

    def _progress(self, progress: Progress) -> None:
        self.last = progress

    def _limit_text(self) -> str:
        return (
            "running with no tick limit"
            if self.until_tick is None
            else f"running until the end of tick {self.until_tick}"
        )

    def describe(self) -> dict[str, Any]:
        last = self.last
        return {
            "state": self.state(),
            "why": self.why,
            "limit": self._limit_text() if self.running_here else None,
            "preparing": self.preparing,
            "last": None
            if last is None
            else {"tick": last.tick, "kind": last.kind, "agent": last.agent, "room": last.room, "note": last.note},
        }
