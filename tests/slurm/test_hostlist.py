"""Host lists expand as Slurm expands them: recorded `scontrol show hostnames` output, and the live command."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from lamplighter.slurm.hostlist import HostlistError, expand_hostlist
from lamplighter.slurm.requeue import script_exclusions
from lamplighter.slurm.run import run_slurm

REC = Path(__file__).parent / "recorded" / "scontrol_show_hostnames.txt"


def recorded() -> dict[str, list[str]]:
    """`$ scontrol show hostnames 'SPEC'` followed by its output lines, for each SPEC."""
    out: dict[str, list[str]] = {}
    spec = ""
    for line in REC.read_text().splitlines():
        if line.startswith("$ scontrol show hostnames "):
            spec = line.split(" ", 4)[4].strip("'")
            out[spec] = []
        elif line.strip():
            out[spec].append(line.strip())
    return out


CASES = recorded()


def test_the_recording_has_the_cases_of_the_issue() -> None:
    assert CASES["rack[1-2]-node[01-02]"] == ["rack1-node01", "rack1-node02", "rack2-node01", "rack2-node02"]
    assert len(CASES) >= 8


@pytest.mark.parametrize("spec", sorted(CASES))
def test_expansion_matches_recorded_slurm(spec: str) -> None:
    got = expand_hostlist(spec)
    want = CASES[spec]
    # Slurm orders names with three or more bracket groups its own way; membership is what callers use.
    if spec.count("[") >= 3:
        assert sorted(got) == sorted(want)
    else:
        assert got == want


def test_empty_values_slurm_prints() -> None:
    for empty in (None, "", "(null)", "None", " "):
        assert expand_hostlist(empty) == []


def test_malformed_list_is_an_error_naming_it() -> None:
    with pytest.raises(HostlistError, match=r"'n\[1-'"):
        expand_hostlist("n[1-")


def test_script_exclusion_with_two_bracket_groups() -> None:
    """The list that goes into ExcNodeList on requeue: no `-node01` fragments."""
    script = '#!/bin/bash\n#SBATCH --exclude="rack[1-2]-node[01-02]"\nexec true\n'
    assert script_exclusions(script) == ["rack1-node01", "rack1-node02", "rack2-node01", "rack2-node02"]


SPECS_LIVE = ["rack[1-2]-node[01-02]", "n[1-3,5],gpu07", "gpu[008-010]", "a[9-11]-b[1-2],c1", "node-[001-003]"]


@pytest.mark.parametrize("spec", SPECS_LIVE)
def test_expansion_matches_the_installed_scontrol(spec: str, tmp_path: Path) -> None:
    """The same, against the installed Slurm (scontrol expands host lists without a controller)."""
    if shutil.which("scontrol") is None:
        pytest.skip("scontrol not installed")
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=t\nSlurmctldHost=localhost\nNodeName=n1 CPUs=1\nPartitionName=p Nodes=n1\n")
    out = run_slurm(["scontrol", "show", "hostnames", spec], timeout=10, slurm_conf=str(conf)).split()
    assert expand_hostlist(spec) == out
