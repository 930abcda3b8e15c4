"""A run gets one BLAS/OpenMP thread per CPU it reserved, never more than the station's own
OMP_NUM_THREADS where the operator set one (threads beyond the free cores only spin)."""
from __future__ import annotations

import pytest

from station.core.run_types import RunSpec

SEEN = "import os\n\ndef main():\n    return [os.environ[k] for k in ('OMP_NUM_THREADS', 'OPENBLAS_NUM_THREADS', 'MKL_NUM_THREADS')]\n"


@pytest.mark.parametrize("station_threads, expected", [("1", "1"), (None, "2"), ("8", "2"), ("many", "2")])
def test_a_runs_threads_follow_its_cpus_within_the_stations_own_cap(
    sandbox_executor, monkeypatch: pytest.MonkeyPatch, station_threads: str | None, expected: str
) -> None:
    if station_threads is None:
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    else:
        monkeypatch.setenv("OMP_NUM_THREADS", station_threads)
    result = sandbox_executor.run(RunSpec(code=SEEN, num_cpus=2.0, timeout_s=60))
    assert result.status == "ok", result.stderr[-2000:]
    assert result.value == [expected] * 3
