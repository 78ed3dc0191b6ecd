"""Warm standbys, with real processes: what a standby becomes is what a cold start would have run.

The standbys here preload `json` (cheap); what they preload does not change how they become a trainer.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from lamplighter.launch.standby import Activation, target_of
from lamplighter.launch.standby_pool import MAX_DEATHS, StandbyPool
from lamplighter.system.process_tree import GroupProcesses

# Writes what it sees (argv, an env var, cwd, pid, sys.path[0]) and exits with the code it is given.
PROBE = """
import json, os, sys
print("probe says hello")
out = {"argv": sys.argv, "marker": os.environ.get("MARKER"), "standby_only": os.environ.get("STANDBY_ONLY"),
       "cwd": os.getcwd(), "pid": os.getpid(), "path0": sys.path[0], "name": __name__}
open(os.environ["PROBE_OUT"], "w").write(json.dumps(out))
if sys.argv[-1] == "raise":
    raise RuntimeError("the trainer failed")
sys.exit(int(sys.argv[-1]))
"""


def _pool(tmp_path: Path, said: list[str], *, size: int = 1, preload: tuple[str, ...] = ("json",)) -> StandbyPool:
    env = dict(os.environ, STANDBY_ONLY="from the standby's own environment")
    return StandbyPool(
        size=size, python=sys.executable, preload=preload, env=env, log_dir=tmp_path / "logs", say=said.append
    )


def _trainer_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "STANDBY_ONLY"}
    return dict(env, MARKER="group 2's own", PROBE_OUT=str(tmp_path / "probe.json"))


@pytest.mark.parametrize("hostile", ["plain", 'we\'ird "dir" $(x) ;&'])
def test_a_standby_becomes_the_script_with_its_argv_env_cwd_and_exit_code(tmp_path: Path, hostile: str) -> None:
    where = tmp_path / hostile
    where.mkdir()
    script = where / "train me.py"
    script.write_text(PROBE)
    said: list[str] = []
    pool = _pool(tmp_path, said)
    pool.refill(quiet=True)
    pid = pool.idle[0].popen.pid
    argv = [sys.executable, str(script), "--name", "x y", "3"]
    log = tmp_path / "logs" / "group2.log"
    popens = pool.take([argv], [_trainer_env(tmp_path)], cwd=where, log_path=log)
    assert popens is not None and popens[0].pid == pid
    assert popens[0].wait(timeout=60) == 3
    seen = json.loads((tmp_path / "probe.json").read_text())
    assert seen["argv"] == [str(script), "--name", "x y", "3"]
    assert seen["marker"] == "group 2's own" and seen["standby_only"] is None  # the trainer's env, whole
    assert seen["cwd"] == str(where) and seen["pid"] == pid and seen["name"] == "__main__"
    assert seen["path0"] == str(where)  # as `python SCRIPT` sets it
    assert "probe says hello" in log.read_text()
    assert pool.used == 1 and pool.idle == [] and said == []


def test_a_standby_becomes_a_module_and_a_failing_trainer_exits_1_with_its_traceback(tmp_path: Path) -> None:
    (tmp_path / "probe_mod.py").write_text(PROBE)
    pool = _pool(tmp_path, [])
    pool.refill(quiet=True)
    argv = [sys.executable, "-m", "probe_mod", "raise"]
    log = tmp_path / "logs" / "group0.log"
    popens = pool.take([argv], [_trainer_env(tmp_path)], cwd=tmp_path, log_path=log)
    assert popens is not None
    assert popens[0].wait(timeout=60) == 1
    seen = json.loads((tmp_path / "probe.json").read_text())
    assert seen["argv"][1:] == ["raise"] and seen["argv"][0].endswith("probe_mod.py")
    assert seen["path0"] == str(tmp_path) and seen["name"] == "__main__"
    assert "RuntimeError: the trainer failed" in log.read_text()


def test_an_adopted_standby_is_killed_with_its_group(tmp_path: Path) -> None:
    script = tmp_path / "sleeper.py"
    script.write_text("import time\nopen(__import__('os').environ['PROBE_OUT'], 'w').write('up')\ntime.sleep(300)\n")
    pool = _pool(tmp_path, [])
    pool.refill(quiet=True)
    popens = pool.take([[sys.executable, str(script)]], [_trainer_env(tmp_path)], cwd=tmp_path, log_path=tmp_path / "l")
    assert popens is not None
    gp = GroupProcesses.adopt(group=0, attempt=1, popens=popens, log_path=tmp_path / "l", started_at=0.0)
    assert gp.running()
    gp.kill()
    assert popens[0].returncode == -9 and not gp.running()


def test_commands_a_standby_cannot_run_in_place_start_cold_and_say_why_once(tmp_path: Path) -> None:
    said: list[str] = []
    pool = _pool(tmp_path, said, size=1)
    pool.refill(quiet=True)
    env = _trainer_env(tmp_path)
    assert pool.take([["torchrun", "train.py"]], [env], cwd=tmp_path, log_path=tmp_path / "l") is None
    assert pool.take([["torchrun", "train.py"]], [env], cwd=tmp_path, log_path=tmp_path / "l") is None
    assert pool.take([[sys.executable, "-u", "t.py"]], [env], cwd=tmp_path, log_path=tmp_path / "l") is None
    # Two ranks, one standby: the whole group starts cold, and the standby stays for the next restart.
    two = [[sys.executable, "t.py"]] * 2
    assert pool.take(two, [env, env], cwd=tmp_path, log_path=tmp_path / "l") is None
    assert len(pool.idle) == 1 and pool.used == 0
    assert len(said) == 3 and "torchrun" in said[0] and "-u" in said[1] and "1 standby(s) idle for 2" in said[2]
    pool.close()
    assert pool.idle == []


def test_standbys_that_die_before_use_are_replaced_then_given_up(tmp_path: Path) -> None:
    said: list[str] = []
    pool = _pool(tmp_path, said, preload=("no_such_module_here",))
    for _ in range(MAX_DEATHS):
        pool.refill(quiet=True)
        pool.idle[0].popen.wait(timeout=60)
    pool.refill(quiet=True)
    assert pool.given_up and pool.idle == [] and pool.started == MAX_DEATHS
    assert len(said) == MAX_DEATHS and "no_such_module_here" in said[0] and "giving up" in said[-1]
    assert pool.why_cold([[sys.executable, "t.py"]]) == "standbys keep dying before use"


def test_a_pool_refills_only_when_quiet(tmp_path: Path) -> None:
    pool = _pool(tmp_path, [], size=2)
    pool.refill(quiet=False)
    assert pool.idle == []
    pool.refill(quiet=True)
    assert len(pool.idle) == 2
    pool.close()
    assert pool.started == 2


def test_targets_and_activation_lines() -> None:
    assert target_of(["py", "-m", "pkg.mod", "--x"]) == ("module", "pkg.mod")
    assert target_of(["py", "train.py", "-m"]) == ("path", "train.py")
    assert target_of(["py", "-u", "train.py"]) == () and target_of(["py", "-m"]) == () and target_of(["py"]) == ()
    act = Activation(argv=["py", "t.py", "a b"], env={"A": "1"}, cwd="/x y", log="/l")
    assert Activation.parse(act.line()) == act
    for bad in [
        "not json",
        '{"argv": ["py"]}',
        json.dumps({"argv": ["py", "-c", "x"], "env": {}, "cwd": "/", "log": "l"}),
    ]:
        with pytest.raises(ValueError, match="standby"):
            Activation.parse(bad)
