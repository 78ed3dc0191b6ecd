"""Rendered sbatch scripts: readable, shell-safe, and the argv/env arrive intact.

The scripts run under bash with a PATH shim: a fake `srun` that plays one
task (sets SLURM_PROCID etc., then execs what it was given) and a recorder
standing in for the trainer, which writes its argv and environment as JSON.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from realparts import wait_for

from lamplighter.configs.job_file import FORMAT_KEY, FORMAT_VERSION, load_job_file
from lamplighter.configs.schema import JobConfig, slurm_time_seconds
from lamplighter.rundir import contract
from lamplighter.slurm.submit.render import MASTER_PORT_LINES, RenderError, render_job, sbatch_value

RECORDER = """\
import json, os, sys
out = os.environ["RECORD_TO"]
with open(out, "w") as f:
    json.dump({"argv": sys.argv[1:], "env": dict(os.environ), "pid": os.getpid()}, f)
"""
FAKE_SRUN = """\
#!/bin/bash
# One task of one node: what srun would set, then run the command. Its own options go to $SRUN_RECORD.
: > "${SRUN_RECORD:-/dev/null}"
while [[ "$1" == --* ]]; do printf '%s\\n' "$1" >> "${SRUN_RECORD:-/dev/null}"; shift; done
export SLURM_PROCID=0 SLURM_NTASKS=1 SLURM_LOCALID=0 SLURM_NODEID=0
exec "$@"
"""


@pytest.fixture
def harness(tmp_path: Path) -> dict[str, Path]:
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "srun").write_text(FAKE_SRUN)
    (shim / "srun").chmod(0o755)
    rec = tmp_path / "recorder.py"
    rec.write_text(RECORDER)
    # A "python" whose sibling torchft_lighthouse is a recorder too; it runs this venv's interpreter (the
    # group script's in-job agent is lamplighter's).
    (shim / "python").write_text(f'#!/bin/bash\nexec {shlex.quote(sys.executable)} "$@"\n')
    (shim / "python").chmod(0o755)
    lh = shim / "torchft_lighthouse"
    lh.write_text(f"#!{sys.executable}\n{RECORDER}")
    lh.chmod(0o755)
    return {"shim": shim, "recorder": rec, "tmp": tmp_path}


PUBLISHED = "http://n1:4242"


def run_dir_of(script: Path) -> Path | None:
    """The run directory a group script exports (None for other scripts)."""
    for line in script.read_text().splitlines():
        if line.startswith(f"export {contract.ENV_RUN_DIR}="):
            return Path(shlex.split(line.split("=", 1)[1])[0])
    return None


def publish(run_dir: Path) -> None:
    """What the job's Lighthouse job would have written before any group starts."""
    path = contract.RunPaths(run_dir).lighthouse()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"address": PUBLISHED, "port": 4242, "slurm_job_id": "1"}))


def run_script(script: Path, h: dict[str, Path], extra_env: dict[str, str] | None = None) -> dict[str, Any]:
    out = h["tmp"] / "record.json"
    if out.exists():
        out.unlink()
    run_dir = run_dir_of(script)
    if run_dir is not None:
        publish(run_dir)
        contract.RunPaths(run_dir).completed().unlink(missing_ok=True)  # as `lamplighter submit` does
    env = {
        "PATH": f"{h['shim']}:{os.environ['PATH']}",
        "RECORD_TO": str(out),
        "SLURM_JOB_ID": "4242",
        **(extra_env or {}),
    }
    subprocess.run(["bash", "-n", str(script)], check=True, timeout=10)
    proc = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=30, cwd=h["tmp"])
    assert proc.returncode == 0, proc.stderr
    result: dict[str, Any] = json.loads(out.read_text())
    return result


def make_job(h: dict[str, Path], run_dir: Path, args: list[str], env: dict[str, str], **kw: Any) -> JobConfig:
    slurm = {"head_node": "n1", **kw.pop("slurm", {})}
    return JobConfig(
        name="demo",
        run_dir=str(run_dir),
        trainer={"command": ["{python}", str(h["recorder"]), *args, "{replica_id}", "{lighthouse}"], "env": env},
        # {lighthouse} needs the address fixed: a host of the Lighthouse's node, and a port.
        lighthouse={"host": "10.9.0.1", "port": 29510},
        slurm=slurm,
        **kw,
    )


HOSTILE = [
    "it's",
    'say "hi"',
    "`touch {m}`",
    "$(touch {m})",
    "; touch {m}",
    "a && touch {m} || true",
    "$HOME $PATH $((1+1)) ~ * ? [a] '''",
    "new\nline\n",
    "tab\there",
    "back\\slash\\",
    "-" * 5000,
    "",
    " leading and trailing ",
    "ünïcødé ✓",
]


def test_group_script_hostile_values_arrive_intact(harness: dict[str, Path]) -> None:
    marker = harness["tmp"] / "pwned"
    values = [v.replace("{m}", str(marker)) for v in HOSTILE]
    run_dir = harness["tmp"] / "run dir 'quoted' $(touch x) %j"
    env = {f"V{i}": v for i, v in enumerate(values)}
    # Braces are placeholders in command templates: write hostile args without them.
    job = make_job(harness, run_dir, values, env, groups={"count": 2})
    scripts = render_job(job, harness["tmp"] / "out", python=str(harness["shim"] / "python"))
    assert [p.name for p in scripts] == ["lighthouse.sbatch", "group-0.sbatch", "group-1.sbatch"]
    rec = run_script(scripts[2], harness)
    assert not marker.exists()
    assert not (harness["tmp"] / "x").exists()
    assert rec["argv"] == [*values, "1", "http://10.9.0.1:29510"]
    for k, v in env.items():
        assert rec["env"][k] == v
    e = rec["env"]
    assert e[contract.ENV_REPLICA_ID] == "1"
    assert e[contract.ENV_NUM_GROUPS] == "2"
    assert e[contract.ENV_RUN_DIR] == str(run_dir)
    assert e[contract.ENV_CONFIG] == str(run_dir / "job.json")
    assert e["TORCHFT_LIGHTHOUSE"] == PUBLISHED  # read from where the job's own Lighthouse published it
    assert e[contract.ENV_JOB] == "demo"
    assert e[contract.ENV_ATTEMPT] == "0"
    assert (e["RANK"], e["WORLD_SIZE"], e["LOCAL_RANK"], e["GROUP_RANK"]) == ("0", "1", "0", "0")
    assert e["MASTER_PORT"] == "0"  # one process per group: the trainer picks a free port
    assert e["MASTER_ADDR"]
    # The resolved config the trainer reads: versioned (configs/job_file.py), valid, with the absolute run_dir.
    assert json.loads((run_dir / "job.json").read_text())[FORMAT_KEY] == FORMAT_VERSION
    resolved = load_job_file(run_dir / "job.json")
    assert resolved.run_dir == str(run_dir)
    assert resolved.trainer.env == env


def test_attempt_follows_slurm_restart_count(harness: dict[str, Path]) -> None:
    job = make_job(harness, harness["tmp"] / "run", [], {})
    script = render_job(job, harness["tmp"] / "out", python=str(harness["shim"] / "python"))[1]
    # Slurm's restart count times 100, plus the in-job agent's restarts (none here): rundir/contract.py.
    assert run_script(script, harness, {"SLURM_RESTART_COUNT": "3"})["env"][contract.ENV_ATTEMPT] == "300"


def test_sbatch_header(harness: dict[str, Path]) -> None:
    job = make_job(
        harness,
        harness["tmp"] / "r d's %x",
        [],
        {},
        groups={"count": 1, "nodes": 2, "procs_per_node": 4},
        slurm={
            "partition": "gpu",
            "account": "proj-1",
            "time": "1-00:00:00",
            "qos": "high",
            "exclusive": True,
            "constraint": "mi300&ib",
            "extra_sbatch": ["--comment=a,b:c", "--mail-type=NONE", "--hold"],
            "requeue": False,
        },
    )
    text = render_job(job, harness["tmp"] / "out", python=sys.executable)[1].read_text()
    header = [line for line in text.splitlines() if line.startswith("#SBATCH")]
    assert header == [
        '#SBATCH --job-name="ll-demo-g0"',
        "#SBATCH --nodes=2",
        "#SBATCH --ntasks-per-node=4",
        "#SBATCH --no-requeue",
        "#SBATCH --open-mode=append",
        f'#SBATCH --output="{harness["tmp"]}/r d\'s %%x/logs/g0-%j.out"',
        '#SBATCH --partition="gpu"',
        '#SBATCH --account="proj-1"',
        '#SBATCH --time="1-00:00:00"',
        '#SBATCH --qos="high"',
        '#SBATCH --constraint="mi300&ib"',
        "#SBATCH --exclusive",
        '#SBATCH --comment="a,b:c"',
        '#SBATCH --mail-type="NONE"',
        "#SBATCH --hold",
    ]
    # Every #SBATCH line comes before the first command (sbatch stops reading at it).
    body = text.splitlines()
    first_cmd = next(i for i, line in enumerate(body) if line and not line.startswith("#"))
    assert max(i for i, line in enumerate(body) if line.startswith("#SBATCH")) < first_cmd
    # Eight ranks on two nodes must agree on the store's port before rank 0 binds it.
    assert all(line in body for line in MASTER_PORT_LINES)


def test_by_default_every_script_asks_to_be_requeued(harness: dict[str, Path]) -> None:
    """deploy/README: `--requeue`, which `lamplighter render` writes, lets the daemons requeue a job whatever
    slurm.conf's JobRequeue says (the lab sets JobRequeue=1, so no lab test would see it dropped)."""
    job = make_job(harness, harness["tmp"] / "run", [], {}, groups={"count": 2})
    scripts = render_job(job, harness["tmp"] / "out", python=sys.executable)
    headers = {p.name: [line for line in p.read_text().splitlines() if line.startswith("#SBATCH")] for p in scripts}
    sbatched = {name: h for name, h in headers.items() if h}
    assert len(sbatched) == 3, headers  # the Lighthouse's job and two groups
    for name, header in sbatched.items():
        assert "#SBATCH --requeue" in header and "#SBATCH --no-requeue" not in header, (name, header)


def test_the_store_port_skips_one_another_job_on_the_node_listens_on() -> None:
    """Jobs 13580001 and 31060001 both map to 30001: the second to start on a node takes a port nothing listens on,
    997 ports on, never the next one (the next job id's: a sibling group that may not have bound it yet)."""
    import socket

    pick = "\n".join(["set -euo pipefail", "MASTER_ADDR=127.0.0.1", *MASTER_PORT_LINES, 'echo "$MASTER_PORT"'])

    def run(job: int) -> int:
        out = subprocess.run(["bash", "-c", pick], env={"SLURM_JOB_ID": str(job)}, capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        return int(out.stdout.strip())

    def skip(port: int) -> int:
        return 30000 + (port - 30000 + 997) % 2000

    taken = socket.socket()
    for port in range(31000, 31990):  # one another job's store holds, with a free one 997 on (wrapping)
        try:
            taken.bind(("127.0.0.1", port))
            with socket.socket() as after:
                after.bind(("127.0.0.1", skip(port)))
            break
        except OSError:
            taken.close()
            taken = socket.socket()
    taken.listen()
    with taken:
        job = 13580000 + port - 30000
        assert run(job) == skip(port) != port + 1
        assert run(job + 1) == port + 1  # its own port, free
        assert run(job + 2000) == skip(port)  # the id that clashed before


def test_values_sbatch_would_misread_are_refused(harness: dict[str, Path]) -> None:
    with pytest.raises(RenderError, match="cannot go into an #SBATCH line"):
        render_job(make_job(harness, harness["tmp"] / 'a"b', [], {}), harness["tmp"] / "out")
    with pytest.raises(RenderError, match="cannot go into"):
        render_job(make_job(harness, harness["tmp"] / "a\\b", [], {}), harness["tmp"] / "out")
    for bad in ("a\nb", "a\rb", "a\x00b"):
        with pytest.raises(RenderError):
            sbatch_value(bad, "x")
    assert not (harness["tmp"] / "out").exists()  # nothing written when refused


def test_schema_refuses_newlines_in_sbatch_fields() -> None:
    for slurm in (
        {"partition": "a\nb"},
        {"extra_sbatch": ["--comment=a\nb"]},
        {"time": "1\n#SBATCH --x"},
        {"constraint": "a\nb"},
        {"head_node": "n1\nn2"},
    ):
        with pytest.raises(ValidationError):
            JobConfig(name="x", slurm=slurm)
    with pytest.raises(ValidationError):
        JobConfig(name="x\ny")


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


FAKE_LIGHTHOUSE = """\
#!/bin/bash
# As the release helper: returns once the Lighthouse has been started twice.
if [ "$2" = lamplighter.slurm.submit.release ]; then
    until [ -s "$RECORD_TO.pid" ]; do sleep 0.05; done
    exit 0
fi
# As the Lighthouse: the first start dies (the loop starts it again), the second keeps running.
echo "$*" >> "$RECORD_TO"
[ "$(wc -l < "$RECORD_TO")" -ge 2 ] || exit 3
echo $$ > "$RECORD_TO.pid.tmp" && mv "$RECORD_TO.pid.tmp" "$RECORD_TO.pid"
exec sleep 1000
"""


def test_lighthouse_script_runs_its_own_lighthouse_and_restarts_it(harness: dict[str, Path]) -> None:
    job = JobConfig(
        name="demo",
        run_dir=str(harness["tmp"] / "run"),
        slurm={"head_node": "n1", "extra_sbatch": ["--exclude=n1", "--mem=1G"]},
        lighthouse={"min_replicas": 2, "join_timeout_ms": 2000, "quorum_tick_ms": 50, "heartbeat_timeout_ms": 700},
        groups={"count": 2},
    )
    fake = harness["tmp"] / "fakepy"
    fake.write_text(FAKE_LIGHTHOUSE)
    fake.chmod(0o755)
    script = render_job(job, harness["tmp"] / "out", python=str(fake))[0]
    text = script.read_text()
    assert '#SBATCH --nodelist="n1"' in text and '#SBATCH --job-name="ll-demo-lighthouse"' in text
    # The groups' --exclude of the head would contradict the Lighthouse's own node; other extras stay.
    assert "--exclude" not in text and '#SBATCH --mem="1G"' in text
    out = harness["tmp"] / "starts.txt"
    proc = subprocess.run(["bash", str(script)], env={**os.environ, "RECORD_TO": str(out)}, timeout=30)
    assert proc.returncode == 0  # released once the helper returned
    # The running Lighthouse was stopped with the script, not left behind.
    lighthouse_pid = int(Path(f"{out}.pid").read_text())
    wait_for(lambda: not alive(lighthouse_pid), 10, "the Lighthouse to be stopped")
    starts = out.read_text().splitlines()
    published = contract.RunPaths(harness["tmp"] / "run").lighthouse()
    assert len(starts) == 2 and starts[0] == starts[1]
    assert starts[0].split() == [
        "-m",
        "lamplighter.lighthouse.main",
        "--bind-node-port",
        "0",  # the address of the node it lands on, found there: never a wildcard, never loopback
        "--min_replicas",
        "2",
        "--join_timeout_ms",
        "2000",
        "--quorum_tick_ms",
        "50",
        "--heartbeat_timeout_ms",
        "700",
        "--remember",
        str(published.with_name("lighthouse-memory.json")),
        "--restart-grace-ms",
        "2000",
        "--publish",
        str(published),
        "--record-steps",
        str(contract.RunPaths(harness["tmp"] / "run").lighthouse_steps()),
    ]


def test_lighthouse_command_in_a_group_needs_a_fixed_port(tmp_path: Path) -> None:
    job = JobConfig(name="demo", run_dir=str(tmp_path / "run"), trainer={"command": ["t", "--lh={lighthouse}"]})
    with pytest.raises(RenderError, match=r"uses \{lighthouse\}, but the Lighthouse's address is known only when"):
        render_job(job, tmp_path / "out")
    port_only = job.model_copy(update={"lighthouse": job.lighthouse.model_copy(update={"port": 29511})})
    with pytest.raises(RenderError, match=r"set lighthouse.host and lighthouse.port"):
        render_job(port_only, tmp_path / "out")
    fixed = port_only.model_copy(update={"lighthouse": port_only.lighthouse.model_copy(update={"host": "head01"})})
    assert "--lh=http://head01:29511" in render_job(fixed, tmp_path / "out")[1].read_text()


def test_relative_run_dir_is_made_absolute(tmp_path: Path) -> None:
    job = JobConfig(name="demo")
    script = render_job(job, tmp_path / "out", base=tmp_path)[1]
    assert f"export {contract.ENV_RUN_DIR}={tmp_path}/runs/demo" in script.read_text()
    assert (tmp_path / "runs" / "demo" / "job.json").exists()
    assert (tmp_path / "runs" / "demo" / "logs").is_dir()


_arg = st.text(st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00{}"), max_size=40)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(args=st.lists(_arg, max_size=4), val=_arg)
def test_any_text_arrives_intact(harness: dict[str, Path], args: list[str], val: str) -> None:
    job = make_job(harness, harness["tmp"] / "run", args, {"HOSTILE": val})
    script = render_job(job, harness["tmp"] / "out", python=str(harness["shim"] / "python"))[1]
    rec = run_script(script, harness)
    assert rec["argv"][: len(args)] == args
    assert rec["env"]["HOSTILE"] == val


def test_group_without_a_published_address_uses_the_fixed_one_or_says_why(harness: dict[str, Path]) -> None:
    env = {"PATH": f"{harness['shim']}:{os.environ['PATH']}", "RECORD_TO": str(harness["tmp"] / "r.json")}
    for port, ok in ((29533, True), (0, False)):
        job = JobConfig(
            name="demo",
            run_dir=str(harness["tmp"] / f"run{port}"),
            trainer={"command": ["{python}", str(harness["recorder"])]},
            lighthouse={"host": "10.9.0.1", "port": port} if port else {},
            slurm={"head_node": "n1"},
        )
        script = render_job(job, harness["tmp"] / f"out{port}", python=str(harness["shim"] / "python"))[1]
        proc = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=30)
        if ok:
            assert proc.returncode == 0, proc.stderr
            assert json.loads((harness["tmp"] / "r.json").read_text())["env"]["TORCHFT_LIGHTHOUSE"].endswith(":29533")
        else:
            assert (
                proc.returncode == 1
                and "no Lighthouse address in" in proc.stderr
                and "lamplighter submit" in proc.stderr
            )


TORCHTITAN = ["-m", "torchtitan.train", "--module=torchft.llama3", "--config=llama3_torchft_debugmodel"]


def test_torchtitan_group_script_cpus_and_container(harness: dict[str, Path]) -> None:
    """The torchtitan flags reach the trainer; srun gets --cpus-per-task and the container options."""
    run_dir = harness["tmp"] / "run"
    job = JobConfig(
        name="tt",
        run_dir=str(run_dir),
        trainer={
            "kind": "torchtitan",
            "command": ["{python}", str(harness["recorder"]), *TORCHTITAN],
            "steps": 77,
            "backend": "auto",
        },
        groups={"count": 2, "gpus_per_node": 4, "procs_per_node": 1},
        torchft={"pg_timeout_s": 9, "timeout_s": 9},
        slurm={
            "cpus_per_task": 16,
            "srun_args": ["--container-image=nvcr.io#rocm/pytorch:latest", "--container-mounts=/a:/a,/b:/c"],
        },
    )
    script = render_job(job, harness["tmp"] / "out", python=str(harness["shim"] / "python"))[2]
    text = script.read_text()
    assert "#SBATCH --cpus-per-task=16" in text and "#SBATCH --gpus-per-node=4" in text
    srun_record = harness["tmp"] / "srun.txt"
    rec = run_script(script, harness, {"SRUN_RECORD": str(srun_record)})
    assert srun_record.read_text().split() == [
        "--kill-on-bad-exit=1",
        "--cpus-per-task=16",
        "--container-image=nvcr.io#rocm/pytorch:latest",
        "--container-mounts=/a:/a,/b:/c",
    ]
    boot = TORCHTITAN.index("torchtitan.train")  # lamplighter's launch runs torchtitan's module
    assert rec["argv"] == [
        *TORCHTITAN[:boot],
        "lamplighter_torchtitan",
        *TORCHTITAN[boot:],
        "--fault_tolerance.enable",
        "--fault_tolerance.replica_id=1",
        "--fault_tolerance.group_size=2",
        "--fault_tolerance.min_replica_size=1",
        "--fault_tolerance.process_group=nccl",  # GPUs: NCCL/RCCL
        "--fault_tolerance.process_group_timeout_ms=9000",
        "--training.steps=77",
        "--checkpoint.enable",
        "--checkpoint.enable_ft_dataloader_checkpoints",
        f"--dump_folder={run_dir}/torchtitan",
    ]
    e = rec["env"]
    assert (e["REPLICA_GROUP_ID"], e["NUM_REPLICA_GROUPS"]) == ("1", "2")
    # torchrun needs a port known before it starts, even for one process.
    assert e["MASTER_PORT"] == "30242" and e["PET_RDZV_ENDPOINT"].endswith(":30242")
    # The launch's folder comes first on the trainer's path (the training environment has no lamplighter): the
    # run dir's copy, which a container that mounts the run dir sees (never lamplighter's install).
    assert e["PYTHONPATH"].split(":")[0] == str(run_dir.resolve() / "boot")
    assert (run_dir / "boot" / "lamplighter_torchtitan" / "__main__.py").is_file()
    assert "`lamplighter submit` copies lamplighter's torchtitan" in text
    assert (e["LAMPLIGHTER_TORCHTITAN_FIXES"], e["LAMPLIGHTER_TORCHTITAN_STATE_HASH"]) == ("auto", "0")


@pytest.mark.parametrize(
    "bad",
    ["--container-image=a b", "--container-image=$(id)", "--x='q'", "--x=a;b", "--x=a\nb", "-c", "--cpus-per-task=2"],
)
def test_srun_args_refused(bad: str) -> None:
    with pytest.raises(ValidationError):
        JobConfig(name="x", slurm={"srun_args": [bad]})


def test_hostile_trainer_python_runs_as_one_word(harness: dict[str, Path]) -> None:
    odd = harness["tmp"] / "env $(touch pwned) 'q' \"d\"" / "bin"
    odd.mkdir(parents=True)
    (odd / "python").symlink_to(sys.executable)
    job = make_job(harness, harness["tmp"] / "run", ["a"], {})
    job.trainer.python = str(odd / "python")
    rec = run_script(render_job(job, harness["tmp"] / "out")[1], harness)
    assert rec["argv"][0] == "a" and not (harness["tmp"] / "pwned").exists()


SLEEPER = (
    "import os, pathlib, sys, time; "
    "pathlib.Path(os.environ['STARTED']).write_text(os.environ['LAMPLIGHTER_RENEWALS']); time.sleep(3); sys.exit(3)"
)
FAKE_HELPER = f"""\
#!/bin/bash
# Stands in for lamplighter's python: records how the renewal helper was called (the in-job agent runs).
if [[ "$2" == lamplighter.slurm.injob.renew ]]; then printf '%s\\n' "$@" > "$RENEW_RECORD"; exit 0; fi
exec {shlex.quote(sys.executable)} "$@"
"""


def renewal_job(harness: dict[str, Path], **slurm: Any) -> JobConfig:
    return JobConfig(
        name="rn",
        run_dir=str(harness["tmp"] / "run 'q' $(touch pwned) %j"),
        trainer={"command": [sys.executable, "-c", SLEEPER], "env": {}},
        groups={"count": 3},
        slurm={"time": "01:00:00", "renewal": {"margin_s": 60, "spacing_s": 100}, **slurm},
        restart={"in_job": 0},  # the trainer's status is the script's: no restart inside the allocation
    )


def test_renewal_signals_are_staggered_and_the_trap_keeps_the_trainer_running(harness: dict[str, Path]) -> None:
    helper = harness["tmp"] / "lamplighter-python"
    helper.write_text(FAKE_HELPER)
    helper.chmod(0o755)
    scripts = render_job(
        renewal_job(harness, slurm_conf="/etc/slurm x/slurm.conf"), harness["tmp"] / "out", python=str(helper)
    )
    texts = [p.read_text() for p in scripts]
    # The Lighthouse job first, then group 0, 1, 2: each warned 100 s after the one before.
    assert [t for x in texts for t in x.splitlines() if t.startswith("#SBATCH --signal")] == [
        "#SBATCH --signal=B:USR1@360",
        "#SBATCH --signal=B:USR1@260",
        "#SBATCH --signal=B:USR1@160",
        "#SBATCH --signal=B:USR1@60",
    ]
    started, record = harness["tmp"] / "started", harness["tmp"] / "renew.txt"
    # This Slurm job renewed itself twice before: its restarts are not failures.
    run_dir = harness["tmp"] / "run 'q' $(touch pwned) %j"
    (run_dir / "renewal").mkdir(parents=True)
    (run_dir / "renewal" / "g1-4242.renewals").write_text("2\n")
    publish(run_dir)
    env = {
        "PATH": f"{harness['shim']}:{os.environ['PATH']}",
        "SLURM_JOB_ID": "4242",
        "STARTED": str(started),
        "RENEW_RECORD": str(record),
    }
    proc = subprocess.Popen(["bash", str(scripts[2])], env=env, cwd=harness["tmp"])
    try:
        deadline = time.monotonic() + 20
        while not started.exists():
            assert time.monotonic() < deadline and proc.poll() is None, "trainer did not start"
            time.sleep(0.02)
        proc.send_signal(signal.SIGUSR1)
        # The trainer keeps running through the trap; the script ends with the trainer's own status.
        assert proc.wait(timeout=20) == 3
    finally:
        if proc.poll() is None:
            proc.kill()
    assert started.read_text() == "2"
    assert not (harness["tmp"] / "pwned").exists()
    args = record.read_text().splitlines()
    assert args == [
        "-m",
        "lamplighter.slurm.injob.renew",
        "--group",
        "1",
        "--groups",
        "3",
        "--run-dir",
        str(run_dir),
        "--slurm-conf",
        "/etc/slurm x/slurm.conf",
    ]
    assert "--lighthouse-job" in texts[0] and "trap renew USR1" in texts[0]


def test_no_renewal_without_a_time_limit_or_requeue(harness: dict[str, Path]) -> None:
    for slurm in ({"time": None}, {"requeue": False}, {"renewal": {"enabled": False}}):
        text = render_job(renewal_job(harness, **slurm), harness["tmp"] / "out")[1].read_text()
        assert "--signal" not in text and "trap" not in text and "\n    -- srun --kill-on-bad-exit=1" in text


EXITS_WITH = (
    "import os, pathlib, sys; pathlib.Path(os.environ['STARTED']).touch(); "
    "c = os.environ.get('PEER_COMPLETES'); c and pathlib.Path(c).write_text('group 1'); "
    "sys.exit(int(os.environ['TRAINER_RC']))"
)


@pytest.mark.parametrize("time_limit", [None, "01:00:00"])
def test_a_group_that_starts_or_fails_after_the_job_completed_ends_completed(
    harness: dict[str, Path], time_limit: str | None
) -> None:
    """A group requeued just before the others reached the target must not end FAILED (CI, renewal)."""
    run_dir = harness["tmp"] / "run 'q' $(touch pwned) * [a]"
    job = JobConfig(
        name="done",
        run_dir=str(run_dir),
        trainer={"command": [sys.executable, "-c", EXITS_WITH], "env": {}},
        groups={"count": 2},
        slurm={"time": time_limit},
        restart={"in_job": 0},  # the trainer's status is the group's: no restart inside the allocation
    )
    script = render_job(job, harness["tmp"] / "out")[2]
    completed = contract.RunPaths(run_dir).completed()
    publish(run_dir)
    started = harness["tmp"] / "started"

    def run(rc: int, peer_completes: bool = False) -> subprocess.CompletedProcess[str]:
        started.unlink(missing_ok=True)
        env = {
            "PATH": f"{harness['shim']}:{os.environ['PATH']}",
            "SLURM_JOB_ID": "4242",
            "STARTED": str(started),
            "TRAINER_RC": str(rc),
            **({"PEER_COMPLETES": str(completed)} if peer_completes else {}),
        }
        return subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=30)

    # Before anyone completed, a failure is a failure: Slurm sees the trainer's status.
    assert run(3).returncode == 3 and not completed.exists()
    # A peer completes while this group's trainer runs, then the trainer fails (its peers left).
    proc = run(3, peer_completes=True)
    assert proc.returncode == 0 and "after the job reached its target" in proc.stderr
    completed.unlink()
    # A trainer that ends with 0 marks the job complete...
    assert run(0).returncode == 0 and completed.read_text() == "group 1\n"
    # ...and a group that starts after that does not start its trainer at all.
    proc = run(3)
    assert proc.returncode == 0 and not started.exists() and "nothing to do" in proc.stderr
    assert not (harness["tmp"] / "pwned").exists()
    # srun ends with 0 when Slurm aborts a step for a node failure: a stale attempt (Slurm restarted the
    # job since) must not mark the job complete (found on the test cluster: a node cut off from Slurm).
    completed.unlink()
    scontrol = harness["shim"] / "scontrol"
    scontrol.write_text('#!/bin/bash\necho "JobId=4242 JobName=x JobState=RUNNING Restarts=1 BatchFlag=1"\n')
    scontrol.chmod(0o755)
    proc = run(0)
    assert proc.returncode == 0 and not completed.exists() and "stale attempt (Slurm is at restart 1)" in proc.stderr
    scontrol.write_text('#!/bin/bash\necho "JobId=4242 JobName=x JobState=RUNNING Restarts=0 BatchFlag=1"\n')
    assert run(0).returncode == 0 and completed.exists()


def test_renewal_must_fit_in_the_time_limit() -> None:
    with pytest.raises(ValidationError, match="warns the Lighthouse job 460 s"):
        JobConfig(name="x", groups={"count": 4}, slurm={"time": "7:40", "renewal": {"margin_s": 60, "spacing_s": 100}})
    ok = JobConfig(name="x", groups={"count": 2}, slurm={"time": "1", "renewal": {"margin_s": 5, "spacing_s": 20}})
    assert ok.slurm.time_s == 60 and ok.slurm.renewal.warning_s(0, 2) == 25
    assert ok.slurm.renewal.lighthouse_warning_s(2) == 45
    # The Lighthouse job may have a limit of its own; then group 0's warning must fit the groups' limit.
    long_lh = {"time": "1", "lighthouse_time": "30:00", "renewal": {"margin_s": 5, "spacing_s": 25}}
    assert JobConfig(name="x", groups={"count": 3}, slurm=long_lh).slurm.lighthouse_limit == "30:00"
    with pytest.raises(ValidationError, match="warns group 0 80 s"):
        JobConfig(name="x", groups={"count": 4}, slurm=long_lh)


@pytest.mark.parametrize(
    ("value", "seconds"),
    [("1", 60), ("2:30", 150), ("01:00:00", 3600), ("7-00:00:00", 604800), ("1-2", 93600), ("1-2:30", 95400)],
)
def test_slurm_time_seconds(value: str, seconds: int) -> None:
    assert slurm_time_seconds(value) == seconds
    assert slurm_time_seconds("UNLIMITED") is None


# A trainer that, on its first attempt, beats one heartbeat (its attempt has committed: the agent starts its
# spare), waits until the spare step is started, and fails; on a later attempt it records itself and ends 0.
FAILS_ONCE = """\
import json, os, pathlib, sys, time
run, attempt = pathlib.Path(os.environ["LAMPLIGHTER_RUN_DIR"]), int(os.environ["LAMPLIGHTER_ATTEMPT"])
if attempt % 100 == 0:
    beat = run / "heartbeat" / "0.0.json"
    beat.parent.mkdir(parents=True, exist_ok=True)
    beat.write_text(json.dumps({"step": 1, "time": time.time(), "pid": os.getpid(), "attempt": attempt}))
    journal = run / "injob" / "g0.jsonl"
    while '"spare"' not in (journal.read_text() if journal.exists() else ""):
        time.sleep(0.05)
    sys.exit(75)
with open(os.environ["RECORD_TO"], "w") as f:
    json.dump({"argv": sys.argv[1:], "env": dict(os.environ), "pid": os.getpid()}, f)
"""


def test_a_failed_trainer_restarts_in_its_warm_spare_with_its_argv_intact(harness: dict[str, Path]) -> None:
    """slurm.spare: the in-job agent starts a spare step once the trainer committed, and when the trainer fails
    the spare becomes it (one JSON line on the spare step's stdin, which srun gives every task): the same argv,
    the next attempt, the task's own rank, and no new process."""
    trainer = harness["tmp"] / "fails_once.py"
    trainer.write_text(FAILS_ONCE)
    values = ["it's", "$(touch x)", "a b"]
    job = JobConfig(
        name="warm",
        run_dir=str(harness["tmp"] / "run"),
        trainer={"command": ["{python}", str(trainer), *values], "env": {}},
        slurm={"spare": True},
        restart={"standby_preload": ["json"]},
    )
    script = render_job(job, harness["tmp"] / "out", python=str(harness["shim"] / "python"))[1]
    text = script.read_text()
    assert " --spare " in text and "--overlap" not in text  # the agent derives the spare's step itself
    rec = run_script(script, harness)
    assert rec["argv"] == values and rec["env"]["RANK"] == "0"
    assert rec["env"][contract.ENV_ATTEMPT] == "1"  # Slurm's first run, in-job restart 1
    events = [json.loads(x) for x in (harness["tmp"] / "run" / "injob" / "g0.jsonl").read_text().splitlines()]
    assert [(e["event"], e.get("how")) for e in events if e["event"] in ("started", "spare")] == [
        ("started", "cold"),
        ("spare", None),
        ("started", "warm"),
    ]
    assert [e["action"] for e in events if e["event"] == "ended"] == ["restart_warm", "done"]
    assert not (harness["tmp"] / "x").exists()
