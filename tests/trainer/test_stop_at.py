"""The owner's stop-at file: what readers accept, and how often a trainer looks."""

from __future__ import annotations

import os
from pathlib import Path

from lamplighter.rundir.contract import RunPaths
from lamplighter.rundir.stop_at import StopAt, final_target, read_stop_at, write_stop_at


def test_only_a_small_regular_file_holding_a_number_counts(tmp_path: Path) -> None:
    path = RunPaths(tmp_path).stop_at()
    assert read_stop_at(tmp_path) is None
    path.write_text("5000\n")  # as `echo 5000 > stop-at` leaves it
    assert read_stop_at(tmp_path) == 5000
    for bad in ("", "soon", "-3", "12 steps", "9" * 70):
        path.write_text(bad)
        assert read_stop_at(tmp_path) is None, bad
    path.unlink()
    (tmp_path / "elsewhere").write_text("7\n")
    path.symlink_to(tmp_path / "elsewhere")  # never followed
    assert read_stop_at(tmp_path) is None
    path.unlink()
    os.mkfifo(path)  # never blocks on a FIFO
    assert read_stop_at(tmp_path) is None
    path.unlink()
    assert write_stop_at(tmp_path, 120) == path and read_stop_at(tmp_path) == 120


def test_the_target_only_comes_down() -> None:
    assert final_target(1000, None) == 1000
    assert final_target(1000, 400) == 400
    assert final_target(1000, 5000) == 1000  # a stop step past trainer.steps does not extend the job


def test_a_trainer_looks_at_most_once_a_second_and_keeps_the_step_through_a_torn_read(tmp_path: Path) -> None:
    now = [0.0]
    stop = StopAt(tmp_path, 1_000_000, clock=lambda: now[0])
    assert stop.target() == 1_000_000
    write_stop_at(tmp_path, 300)
    now[0] = 0.5
    assert stop.target() == 1_000_000  # read a moment ago: not looked at again yet
    now[0] = 1.0
    assert stop.target() == 300
    RunPaths(tmp_path).stop_at().write_text("")  # a writer truncated it and has not written yet
    now[0] = 2.0
    assert stop.target() == 300
    RunPaths(tmp_path).stop_at().unlink()  # the owner takes the instruction back
    now[0] = 3.0
    assert stop.target() == 1_000_000


def test_the_module_imports_no_torch() -> None:
    import subprocess
    import sys

    code = "import sys, lamplighter.rundir.stop_at; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
