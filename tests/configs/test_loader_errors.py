"""The loader's promise: every mistake is reported with file, line and key, and nothing else gets through."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from lamplighter.configs.loader import ConfigError, load_job, load_node, parse
from lamplighter.configs.schema import JobConfig


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "job.yaml"
    p.write_text(text)
    return p


def problems(path: Path, overrides: list[str] | None = None, env: dict[str, str] | None = None) -> list[str]:
    with pytest.raises(ConfigError) as e:
        load_job(path, overrides or [], env)
    return [str(p) for p in e.value.problems]


def test_unknown_key_names_line_suggests_nearest_and_lists_valid(tmp_path: Path) -> None:
    p = write(tmp_path, "name: x\nlighthouse:\n  port: 1\n  heartbeat_timout_ms: 900\n")
    [msg] = problems(p)
    assert msg.startswith(f"{p}:4: lighthouse.heartbeat_timout_ms: unknown key 'heartbeat_timout_ms'")
    assert "did you mean 'heartbeat_timeout_ms'?" in msg
    assert "Valid keys: heartbeat_timeout_ms, host, join_timeout_ms" in msg


def test_unknown_top_level_key(tmp_path: Path) -> None:
    [msg] = problems(write(tmp_path, "name: x\ngroup:\n  count: 2\n"))
    assert ":2: group: unknown key 'group' at the top level; did you mean 'groups'?" in msg


def test_wrong_type_says_what_was_expected_and_what_it_got(tmp_path: Path) -> None:
    [msg] = problems(write(tmp_path, "name: x\ngroups:\n  count: three\n"))
    assert ":3: groups.count: input should be a valid integer" in msg
    assert "got 'three'" in msg


def test_missing_required_name(tmp_path: Path) -> None:
    [msg] = problems(write(tmp_path, "groups:\n  count: 2\n"))
    assert "name: required key is missing" in msg


def test_all_hierarchy_violations_reported_each_on_its_line(tmp_path: Path) -> None:
    text = (
        "name: x\n"
        "groups: {count: 2}\n"
        "lighthouse:\n"
        "  heartbeat_timeout_ms: 150\n"
        "  min_replicas: 3\n"
        "health:\n"
        "  hang_timeout_s: 4\n"
    )
    msgs = problems(write(tmp_path, text))
    assert len(msgs) == 3
    assert any(":4: lighthouse.heartbeat_timeout_ms (150) must be at least twice" in m for m in msgs)
    assert any(":5: lighthouse.min_replicas (3) exceeds groups.count (2)" in m for m in msgs)
    assert any(":7: health.hang_timeout_s (4.0 s) must exceed the longest torchft wait" in m for m in msgs)


@pytest.mark.parametrize(
    ("yaml_lines", "expected"),
    [
        (
            "torchft: {quorum_timeout_s: 1}\nlighthouse: {heartbeat_timeout_ms: 1500, join_timeout_ms: 100}",
            "torchft.quorum_timeout_s (1 s) must exceed lighthouse.heartbeat_timeout_ms (1500 ms)",
        ),
        (
            "torchft: {quorum_timeout_s: 2}\nlighthouse: {join_timeout_ms: 5000}",
            "torchft.quorum_timeout_s (2 s) must exceed lighthouse.join_timeout_ms (5000 ms)",
        ),
        (
            "torchft: {timeout_s: 2, pg_timeout_s: 4}",
            "torchft.timeout_s (2 s) must be at least torchft.pg_timeout_s (4 s)",
        ),
        (
            "torchft: {pg_timeout_s: 2, rendezvous_timeout_ms: 2500}",
            "torchft.rendezvous_timeout_ms (2500 ms) is above torchft.pg_timeout_s (2 s)",
        ),
        (
            "placement: bare-metal\nbare_metal: {cluster: c, etcd: {endpoints: ['http://127.0.0.1:2379'], "
            "insecure_lab: true}}\nlighthouse: {port: 29510}\ngroups: {nodes: 2}\nrun_dir: /r",
            "placement bare-metal runs each replica group on one host, but groups.nodes is 2",
        ),
        (
            "placement: bare-metal\nbare_metal: {cluster: c, etcd: {endpoints: ['http://127.0.0.1:2379'], "
            "insecure_lab: true}}\nlighthouse: {port: 29510}\nrun_dir: runs/x",
            "placement bare-metal needs run_dir, an absolute path every host sees",
        ),
        (
            "bare_metal: {etcd: {endpoints: ['http://127.0.0.1:2379']}}",
            "etcd endpoints are http://: anyone who reaches etcd could write a job that every host runs",
        ),
        (
            "bare_metal: {etcd: {endpoints: ['https://e:2379'], ca_file: c, cert_file: c, key_file: k}}",
            "no etcd.user: without etcd auth any certificate holder may write a job to run as anyone",
        ),
        (
            "bare_metal: {etcd: {endpoints: ['https://e:2379'], ca_file: c, cert_file: c, key_file: k, user: u}}",
            "etcd.user and etcd.password_file go together",
        ),
        (
            "bare_metal: {etcd: {endpoints: ['https://e:2379'], ca_file: c, cert_file: c, key_file: k, "
            "user: '-rf', password_file: p}}",
            "etcd user '-rf': 1-128 letters",
        ),
        ("health: {probe_deadline_s: 40, hang_timeout_s: 30}", "health.probe_deadline_s (40.0 s) must be below"),
        ("groups: {gpus_per_node: 2, procs_per_node: 4}", "groups.procs_per_node (4) exceeds groups.gpus_per_node (2)"),
        ("trainer: {model: {dim: 100, heads: 3}}", "model.heads (3) must divide model.dim (100)"),
        ("restart: {backoff_initial_s: 10, backoff_max_s: 5}", "restart.backoff_max_s (5.0) is below"),
    ],
)
def test_cross_field_rules_explain_with_values(tmp_path: Path, yaml_lines: str, expected: str) -> None:
    msgs = problems(write(tmp_path, "name: x\n" + yaml_lines + "\n"))
    assert any(expected in m for m in msgs), msgs


def test_duplicate_key_is_an_error_not_last_wins(tmp_path: Path) -> None:
    [msg] = problems(write(tmp_path, "name: x\ngroups:\n  count: 2\n  count: 3\n"))
    assert ":4: groups.count: key appears twice" in msg


@pytest.mark.parametrize("text", ["", "- a\n- b\n", "name: [unclosed\n", "just a string\n"])
def test_not_a_mapping_or_not_yaml(tmp_path: Path, text: str) -> None:
    assert problems(write(tmp_path, text))


def test_unreadable_file_is_a_config_error(tmp_path: Path) -> None:
    assert "cannot read the file" in problems(tmp_path / "absent.yaml")[0]


def test_overrides_from_env_then_set_and_their_errors_say_where_from(tmp_path: Path) -> None:
    p = write(tmp_path, "name: x\ngroups: {count: 2}\n")
    job = load_job(p, ["groups.count=4"], {"LAMPLIGHTER_SET": "groups.count=3; lighthouse.port=1234"})
    assert job.groups.count == 4 and job.lighthouse.port == 1234
    # An override's mistake is blamed on the override, never on a line of the file.
    [msg] = problems(p, ["lighthouse.prot=5"])
    assert (
        msg.startswith("--set lighthouse.prot=5: lighthouse.prot: unknown key 'prot'") and "did you mean 'port'" in msg
    )
    [msg] = problems(p, ["nosuch.key=1"])
    assert msg.startswith("--set nosuch.key=1: nosuch: unknown key 'nosuch' at the top level"), msg
    [msg] = problems(p, env={"LAMPLIGHTER_SET": "groups.count=-1"})
    assert msg.startswith("$LAMPLIGHTER_SET groups.count=-1: groups.count:")
    assert problems(p, ["no-equals-sign"])


def test_key_errors_and_rules_across_keys_are_reported_together(tmp_path: Path) -> None:
    # A typo, a wrong type, and a timeout hierarchy broken by keys that are themselves valid: all at once.
    p = write(
        tmp_path,
        "name: x\ngroups: {cont: 2}\nrestart: {budget_per_group: many}\n"
        "health: {hang_timeout_s: 5}\ntorchft: {pg_timeout_s: 30, timeout_s: 30}\n",
    )
    with pytest.raises(ConfigError) as e:
        load_job(p)
    text = str(e.value)
    assert "unknown key 'cont'" in text and "restart.budget_per_group" in text
    assert f"{p}:4: health.hang_timeout_s (5.0 s) must exceed the longest torchft wait" in text
    assert not e.value.incomplete
    # A rule involving a broken key is not judged on that key's default.
    p = write(tmp_path, "name: x\nhealth: {hang_timeout_s: soon}\ntorchft: {pg_timeout_s: 3000}\n")
    with pytest.raises(ConfigError) as e:
        load_job(p)
    keys = [pr.key for pr in e.value.problems]
    assert keys == ["health.hang_timeout_s", "torchft.timeout_s"], e.value.problems  # timeout_s: its own rule
    assert "longest torchft wait" not in str(e.value)


def test_when_the_rules_across_keys_cannot_run_the_error_says_more_checks_follow(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as e:
        load_job(write(tmp_path, "groups: {count: 2}\nhealth: {hang_timeout_s: 1}\n"))  # no name
    assert e.value.incomplete and [pr.key for pr in e.value.problems] == ["name"]


def test_unknown_trainer_placeholder_lists_valid_ones() -> None:
    with pytest.raises(ConfigError) as e:
        parse(JobConfig, "name: x\ntrainer:\n  command: [run, '{replica}']\n")
    assert "unknown placeholder {replica}" in str(e.value) and "replica_id" in str(e.value)


@pytest.mark.parametrize(
    "opt",
    [
        "--job-name=evil",
        "--requeue",
        "-x",
        "--foo=bar\nbaz",
        "--output=/tmp/x",
        "not-an-option",
        "--comment=$(id)",
        "--a='b'",
    ],
)
def test_extra_sbatch_refuses_reserved_and_malformed(opt: str) -> None:
    with pytest.raises(ConfigError):
        parse(JobConfig, yaml.safe_dump({"name": "x", "slurm": {"extra_sbatch": [opt]}}))


def test_extra_sbatch_accepts_common_options() -> None:
    opts = [
        "--gres=gpu:8",
        "--signal=B:USR1@90",
        "--mem=0",
        "--reservation=r1",
        "--hint=nomultithread",
    ]
    job = parse(JobConfig, yaml.safe_dump({"name": "x", "slurm": {"extra_sbatch": opts}}))
    assert job.slurm.extra_sbatch == opts


def test_options_lamplighter_sets_point_to_their_key() -> None:
    with pytest.raises(
        ConfigError, match=r"sets --cpus-per-task, which lamplighter sets itself: use slurm\.cpus_per_task"
    ):
        parse(JobConfig, yaml.safe_dump({"name": "x", "slurm": {"extra_sbatch": ["--cpus-per-task=16"]}}))
    # --signal is the renewal's while it is on (slurm.time with slurm.requeue).
    renewing = {"name": "x", "slurm": {"time": "01:00:00", "extra_sbatch": ["--signal=B:USR1@90"]}}
    with pytest.raises(ConfigError, match="sets --signal, which the renewal"):
        parse(JobConfig, yaml.safe_dump(renewing))
    renewing["slurm"]["renewal"] = {"enabled": False}  # type: ignore[index]
    assert parse(JobConfig, yaml.safe_dump(renewing)).slurm.extra_sbatch == ["--signal=B:USR1@90"]


def test_node_config_loads_and_checks(tmp_path: Path) -> None:
    p = tmp_path / "node.yaml"
    p.write_text("role: head\nmetrics: {port: 0}\n")
    assert load_node(p).role == "head"
    p.write_text("role: login\n")
    with pytest.raises(ConfigError) as e:
        load_node(p)
    assert ":1: role:" in str(e.value)


def test_node_config_refuses_the_jobs_settings_and_lists_the_valid_keys(tmp_path: Path) -> None:
    p = tmp_path / "node.yaml"
    p.write_text(
        "role: compute\nrestart:\n  budget_per_group: 3\nhealth:\n  poll_interval_s: 1\n  hang_timeout_s: 30\n"
    )
    with pytest.raises(ConfigError) as e:
        load_node(p)
    msgs = [str(m) for m in e.value.problems]
    assert len(msgs) == 2, msgs
    restart = next(m for m in msgs if "'restart'" in m)
    assert restart.startswith(f"{p}:2: restart: unknown key 'restart' at the top level")
    assert "Valid keys: " in restart and "health" in restart and "max_drain_fraction" in restart
    hang = next(m for m in msgs if "'hang_timeout_s'" in m)
    assert hang.startswith(f"{p}:6: health.hang_timeout_s: unknown key 'hang_timeout_s' in 'health'")
    assert "Valid keys: bad_pages_max, ecc_correctable_max" in hang and "poll_interval_s, probe_deadline_s" in hang


@pytest.mark.parametrize("value", ["fast", "20", "true", "0.5", "'300'"])
def test_a_wrong_rendezvous_bound_gets_one_message_naming_every_accepted_form(tmp_path: Path, value: str) -> None:
    [msg] = problems(write(tmp_path, f"name: x\ntorchft: {{rendezvous_timeout_ms: {value}}}\n"))
    assert "torchft.rendezvous_timeout_ms: expected 'adaptive', a whole number of milliseconds from 50" in msg


def test_the_rendezvous_bound_learns_unless_told_otherwise(tmp_path: Path) -> None:
    assert load_job(write(tmp_path, "name: x\n")).torchft.rendezvous_timeout_ms == "adaptive"
