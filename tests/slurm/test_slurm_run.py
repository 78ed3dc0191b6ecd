"""run_slurm on real processes: output, failure with Slurm's message, timeout, missing program."""

from __future__ import annotations

from pathlib import Path

import pytest

from lamplighter.slurm.actions import check_node_name, check_reason
from lamplighter.slurm.run import SlurmCli, SlurmError, run_slurm


def test_stdout_and_env(tmp_path: Path) -> None:
    out = run_slurm(["sh", "-c", 'echo "$SLURM_CONF $X"'], timeout=10, env={"X": "y"}, slurm_conf="/c")
    assert out == "/c y\n"
    assert run_slurm(["cat"], timeout=10, input="in") == "in"


def test_failure_carries_command_code_and_message() -> None:
    with pytest.raises(SlurmError) as e:
        run_slurm(["sh", "-c", "echo 'slurm_load_jobs error: Invalid job id specified' >&2; exit 1"], timeout=10)
    err = e.value
    assert (err.returncode, err.timed_out, err.stderr) == (1, False, "slurm_load_jobs error: Invalid job id specified")
    assert "Invalid job id" in str(err) and "exited 1" in str(err) and err.argv[0] == "sh"


def test_message_on_stdout_is_used_when_stderr_is_empty() -> None:
    # `scontrol show node n9` prints "Node n9 not found" on stdout and exits 1.
    msg = (Path(__file__).parent / "recorded" / "stdout_scontrol_show_node_invalid.txt").read_text()
    with pytest.raises(SlurmError, match="Node n9 not found"):
        run_slurm(["sh", "-c", f"printf %s {msg!r}; exit 1"], timeout=10)


def test_timeout() -> None:
    with pytest.raises(SlurmError) as e:
        run_slurm(["sleep", "30"], timeout=0.2)
    assert e.value.timed_out and e.value.returncode is None and "timed out" in str(e.value)


def test_missing_program(tmp_path: Path) -> None:
    with pytest.raises(SlurmError, match="could not start"):
        SlurmCli(bin_dir=tmp_path).run("sbatch", "x")


def test_validation() -> None:
    assert check_node_name("n[1-3],gpu-7") == "n[1-3],gpu-7"
    for bad in ("", "n1 n2", "n1\n", "a;b", "x" * 200):
        with pytest.raises(ValueError):
            check_node_name(bad)
    assert check_reason("ECC: 3 uncorrectable; gpu0 [x]") == "ECC: 3 uncorrectable; gpu0 [x]"
    for bad in ("", "  ", "a\nb", "a\rb", "a\x00", "x" * 1001):
        with pytest.raises(ValueError):
            check_reason(bad)
