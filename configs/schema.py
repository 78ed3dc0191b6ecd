"""The one schema for lamplighter's configuration: a job, and a node supervisor.

Every key a user can write is declared here with its type, default and a
one-line description (docs/config.md's config reference is generated from these
descriptions). Unknown keys are errors. Cross-field rules that torchft needs
and users get wrong (the timeout hierarchy) are checked here too, each with a
one-sentence explanation naming the values.
"""

from __future__ import annotations

import ipaddress
import re
import string
from collections.abc import Callable
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from lamplighter.configs import container_mounts, torchtitan_flags
from lamplighter.configs.bare_metal import BareMetalJobConfig, BareMetalNodeConfig
from lamplighter.configs.slurm_names import JOB_PREFIX

# torchft's Manager sends a heartbeat to the Lighthouse every 100 ms (fixed in
# this torchft version unless the trainer passes heartbeat_interval).
TORCHFT_HEARTBEAT_INTERVAL_MS = 100

TRAINER_PLACEHOLDERS = {
    "replica_id": "index of the replica group, 0..count-1",
    "group_size": "number of replica groups (torchtitan's --fault_tolerance.group_size)",
    "num_groups": "same as group_size",
    "lighthouse": "Lighthouse address, http://host:port",
    "nproc_per_node": "processes per node in a group",
    "gpus_per_node": "groups.gpus_per_node (torchrun's --nproc_per_node when torchrun starts one rank per GPU)",
    "nnodes": "nodes per group",
    "job": "the job's name",
    "run_dir": "the run directory (logs, heartbeats, step logs, checkpoints)",
    "python": "trainer.python: the training environment's interpreter (default: the one running lamplighter)",
    "config": "path of the resolved job config (JSON) the reference trainer reads",
    "steps": "trainer.steps, the target number of committed steps",
}


class Strict(BaseModel):
    """Base: unknown keys are errors, values are validated on assignment too."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, frozen=False)


class ModelConfig(Strict):
    """The reference trainer's transformer and data."""

    vocab_size: int = Field(
        256, ge=2, le=1_000_000, description="Vocabulary size (synthetic byte-level data by default)."
    )
    dim: int = Field(128, ge=8, le=65536, description="Model width.")
    layers: int = Field(2, ge=1, le=1024, description="Transformer blocks.")
    heads: int = Field(4, ge=1, le=1024, description="Attention heads; must divide dim.")
    seq_len: int = Field(64, ge=2, le=1_000_000, description="Tokens per sample.")
    batch_size: int = Field(16, ge=1, le=1_000_000, description="Samples per replica group per step.")
    lr: float = Field(3e-3, gt=0, le=10, description="AdamW learning rate.")
    seed: int = Field(0, ge=0, description="Seed for weights and the synthetic dataset.")
    dataset_size: int = Field(1_000_000, ge=1, description="Samples in the synthetic dataset before it wraps around.")
    step_sleep_s: float = Field(
        0.0,
        ge=0,
        le=3600,
        description="Seconds every step sleeps between forward and backward, standing in for a real model's compute "
        "(this model's step takes milliseconds, a real one's seconds): lab jobs then pace like real ones and leave "
        "the CPU to the rest of the machine. 0: none.",
    )
    heal_pad_mb: int = Field(
        0,
        ge=0,
        le=65536,
        description="Extra state in MB sent with every heal, standing in for a large optimizer state "
        "(not trained, not checkpointed): makes a heal take as long as a real one.",
    )

    @model_validator(mode="after")
    def _heads_divide_dim(self) -> ModelConfig:
        if self.dim % self.heads:
            raise ValueError(f"model.heads ({self.heads}) must divide model.dim ({self.dim})")
        return self


class CheckpointConfig(Strict):
    """The durable fallback checkpoint, used only when no live peer can heal a group."""

    enabled: bool = Field(
        True, description="Write a fallback checkpoint from one replica, off the step's critical path."
    )
    interval_s: float = Field(300.0, gt=0, description="Seconds between fallback checkpoints.")
    dir: str | None = Field(None, description="Where to write it; default <run_dir>/checkpoint.")


class TorchtitanConfig(Strict):
    """What lamplighter adds to a torchtitan command (trainer.kind: torchtitan)."""

    dataloader_checkpoint: bool = Field(
        True,
        description=(
            "Checkpoint each replica's dataloader position every step (--checkpoint.enable_ft_dataloader_checkpoints), "
            "so a group that heals resumes its own data instead of replaying it. Needs a shared dump folder. "
            "--checkpoint.enable is rendered either way: without it torchtitan gives torchft no state to heal from."
        ),
    )
    fixes: Literal["auto", "off"] = Field(
        "auto",
        description=(
            "auto: lamplighter's torchtitan launch fixes the upstream bugs that break healing, on the torchtitan "
            "versions that have them (torchft#347: the state dict taken on the training thread; torchtitan#4598: "
            "the optimizer's current state), and logs each fix once at start; off: torchtitan as it is."
        ),
    )
    state_hash: bool = Field(
        False,
        description=(
            "Log a hash of each group's local parameter shards and optimizer state after every step "
            "(<run_dir>/steps/<group>.jsonl), so the report proves weights identical after a heal. Costs a "
            "pass over the state per step (copied to host memory on GPUs): on in the lab's demos, opt-in here."
        ),
    )


TrainerKind = Literal["reference", "torchtitan", "custom"]


class TrainerConfig(Strict):
    """What runs in every process of a replica group."""

    kind: TrainerKind | None = Field(
        None,
        description=(
            "reference: lamplighter's own trainer; torchtitan: trainer.command runs torchtitan and lamplighter "
            "appends its fault-tolerance, steps and dataloader-checkpoint flags from the job's settings; custom: "
            "any other torchft trainer, started as written. Default: reference without a command, custom with one."
        ),
    )
    python: str | None = Field(
        None,
        description=(
            "The training environment's Python interpreter, for {python} (e.g. a container's python3); "
            "default: the interpreter running lamplighter."
        ),
    )
    command: list[str] | None = Field(
        None,
        description=(
            "Command template (a list of arguments, never run through a shell). Placeholders: "
            + ", ".join("{" + k + "}" for k in TRAINER_PLACEHOLDERS)
            + ". Default: the reference trainer."
        ),
    )
    env: dict[str, str] = Field(default_factory=dict, description="Extra environment for the trainer processes.")
    steps: int = Field(
        200,
        ge=1,
        description=(
            "Target number of committed steps; the job is done when a group reaches it (or the smaller step "
            "its owner writes in <run_dir>/stop-at while it runs)."
        ),
    )
    backend: Literal["auto", "gloo", "nccl"] = Field(
        "auto", description="Process-group backend: auto picks NCCL/RCCL when GPUs exist, else gloo."
    )
    checkpoint_transport: Literal["http", "pg"] = Field(
        "http",
        description=(
            "How a healing group receives weights from a peer (reference trainer). http: torchft's HTTP transport, "
            "loading with weights_only=True (a heal never unpickles code) straight into the trainer's own tensors. "
            "pg: torchft's process-group transport (over RCCL/NCCL on GPU nodes), which unpickles the sender's "
            "metadata: only where the job's network is fenced off (deploy/SECURITY.md)."
        ),
    )
    model: ModelConfig = Field(default_factory=ModelConfig, description="The reference trainer's model and data.")
    checkpoint: CheckpointConfig = Field(default_factory=CheckpointConfig, description="Fallback checkpoint.")
    torchtitan: TorchtitanConfig = Field(
        default_factory=TorchtitanConfig, description="torchtitan settings (trainer.kind: torchtitan)."
    )

    @property
    def resolved_kind(self) -> TrainerKind:
        if self.kind is not None:
            return self.kind
        return "reference" if self.command is None else "custom"

    @field_validator("python")
    @classmethod
    def _python(cls, v: str | None) -> str | None:
        if v is not None and (not v.strip() or any(c in v for c in "\x00\n\r")):
            raise ValueError(f"trainer.python {v!r} is not an interpreter path or name")
        return v

    @model_validator(mode="after")
    def _kind_fits_command(self) -> TrainerConfig:
        if self.kind == "torchtitan":
            if self.command is None:
                raise ValueError(
                    "trainer.kind torchtitan needs trainer.command, e.g. [{python}, -m, torch.distributed.run, ..., "
                    "-m, torchtitan.train, --module=..., --config=...]; lamplighter appends the fault-tolerance flags"
                )
            problems = torchtitan_flags.conflicts(self.command, self.torchtitan.dataloader_checkpoint)
            if torchtitan_flags.entry_module(self.command) is None:
                problems.append(
                    "trainer.kind torchtitan: trainer.command must run torchtitan as a module (`-m torchtitan.train`, "
                    "after torchrun's own options): lamplighter's launch runs that module"
                )
            if problems:
                raise ValueError("\n".join(problems))
        return self

    @field_validator("command")
    @classmethod
    def _placeholders_known(cls, v: list[str] | None) -> list[str] | None:
        if v is None:
            return v
        if not v:
            raise ValueError("trainer.command must not be empty")
        for arg in v:
            for _, name, _, _ in string.Formatter().parse(arg):
                if name is not None and name not in TRAINER_PLACEHOLDERS:
                    raise ValueError(
                        f"unknown placeholder {{{name}}} in {arg!r}; valid: " + ", ".join(sorted(TRAINER_PLACEHOLDERS))
                    )
        return v

    @field_validator("env")
    @classmethod
    def _env_names(cls, v: dict[str, str]) -> dict[str, str]:
        for k in v:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k):
                raise ValueError(f"trainer.env key {k!r} is not a valid environment variable name")
        return v


class GroupsConfig(Strict):
    """Replica groups: torchft's unit of failure and healing."""

    count: int = Field(3, ge=1, le=4096, description="Number of replica groups.")
    nodes: int = Field(1, ge=1, le=4096, description="Nodes per replica group.")
    gpus_per_node: int = Field(0, ge=0, le=64, description="GPUs per node (0: CPU only).")
    procs_per_node: int | None = Field(
        None, ge=1, le=256, description="Trainer processes per node; default gpus_per_node, or 1 without GPUs."
    )

    @property
    def nproc_per_node(self) -> int:
        if self.procs_per_node is not None:
            return self.procs_per_node
        return self.gpus_per_node or 1

    @model_validator(mode="after")
    def _procs_fit_gpus(self) -> GroupsConfig:
        if self.gpus_per_node and self.procs_per_node and self.procs_per_node > self.gpus_per_node:
            raise ValueError(
                f"groups.procs_per_node ({self.procs_per_node}) exceeds groups.gpus_per_node "
                f"({self.gpus_per_node}): each trainer process needs its own GPU"
            )
        return self


LOOPBACK = "127.0.0.1"


def is_loopback(host: str) -> bool:
    """127.0.0.0/8, ::1 and localhost: an address no other machine reaches."""
    h = host.strip("[]").lower()
    return h == "localhost" or h == "::1" or h.startswith("127.")


class LighthouseConfig(Strict):
    """torchft's Lighthouse: forms the quorum of live replica groups."""

    host: str | None = Field(
        None,
        description=(
            "Address the Lighthouse binds and advertises. Default: on Slurm, the address of the node its job "
            "lands on, found at run time (as the groups find theirs); in local mode 127.0.0.1. Given on Slurm, it "
            "must be an address of slurm.head_node (and never a loopback one: the groups run on other nodes)."
        ),
    )
    port: int = Field(
        0,
        ge=0,
        le=65535,
        description=(
            "Port; 0 picks a free one. Each job runs its own Lighthouse (on Slurm: a job of its own, pinned to "
            "slurm.head_node) and publishes its address in <run_dir>/lighthouse.json, where the groups read it."
        ),
    )
    min_replicas: int = Field(1, ge=1, description="Smallest quorum that may train.")
    quorum_tick_ms: int = Field(20, ge=1, le=60_000, description="How often the Lighthouse re-evaluates the quorum.")
    join_timeout_ms: int = Field(
        1000,
        ge=0,
        le=3_600_000,
        description=(
            "How long a quorum waits for more groups to join. Keep it above the longest step: with longer steps "
            "torchft cuts every quorum once just over half the groups have joined, and the rest are left out at "
            "every step (the Lighthouse's log says so: quorum_churn.py). It applies only when a member of the last "
            "quorum is missing: the quorum then waits up to this long for groups that heartbeat but have not asked."
        ),
    )
    heartbeat_timeout_ms: int = Field(
        500, ge=1, le=3_600_000, description="A group silent this long leaves the quorum."
    )
    restart_grace_ms: int | None = Field(
        None,
        ge=0,
        le=600_000,
        description=(
            "After a restart, the Lighthouse counts the groups it last saw alive as heartbeating for this long "
            "(it remembers them in <run_dir>/lighthouse-memory.json), so the first group to reconnect cannot form "
            "a quorum alone and commit a step no peer holds; 0 turns this off. Default: 2000, shortened to "
            "torchft.quorum_timeout_s minus heartbeat_timeout_ms minus 1500 ms (the Lighthouse's restart and a "
            "margin) when that is less, but not below 500."
        ),
    )

    @property
    def local_host(self) -> str:
        """The host of a Lighthouse this machine runs for itself (local mode, bare metal): host, else loopback."""
        return self.host or LOOPBACK

    @field_validator("host")
    @classmethod
    def _host_shape(cls, v: str | None) -> str | None:
        if v is None:
            return v
        if not re.fullmatch(r"[A-Za-z0-9_.:\-\[\]]{1,253}", v):
            raise ValueError(f"lighthouse.host {v!r} is not a host name or address")
        return v


class TorchftConfig(Strict):
    """torchft Manager and process-group timeouts (whole seconds, as torchft's env overrides require)."""

    timeout_s: int = Field(5, ge=1, le=86_400, description="Manager timeout for collectives and checkpoint transfers.")
    quorum_timeout_s: int = Field(10, ge=1, le=86_400, description="How long a group waits for a quorum.")
    connect_timeout_s: int = Field(10, ge=1, le=86_400, description="Connecting to the Lighthouse and peers.")
    pg_timeout_s: int = Field(
        3, ge=1, le=86_400, description="Process-group (gloo/NCCL) operation timeout: bounds a hung peer's stall."
    )
    rendezvous_timeout_ms: int | Literal["adaptive"] | None = Field(
        "adaptive",
        description=(
            "Bound on setting up the process group after each quorum (store, peers' addresses, connections); "
            "collectives keep pg_timeout_s. A member that died just before or after a quorum formed holds the "
            "survivors this long (up to 5 times as long when it died mid-setup). 'adaptive': 4 times the group's "
            "slowest recent setup, at least 300 ms, doubled after each setup that timed out, at most pg_timeout_s. "
            "A number (50 ms or more): fixed. null: pg_timeout_s, torchft's own. A bound too short for the "
            "machine fails a step with live peers (retried, nothing lost). Reference trainer, Gloo (NCCL keeps "
            "pg_timeout_s)."
        ),
    )

    @field_validator("rendezvous_timeout_ms", mode="before")
    @classmethod
    def _rendezvous_setting(cls, v: object) -> object:
        # One message for every wrong form (pydantic's union would give one per member, and take true as 1).
        ok = v is None or v == "adaptive" or (type(v) is int and 50 <= v <= 86_400_000)
        if not ok:
            raise ValueError(
                f"expected 'adaptive', a whole number of milliseconds from 50 to 86400000, or null; got {v!r}"
            )
        return v

    heartbeat_interval_ms: int = Field(
        TORCHFT_HEARTBEAT_INTERVAL_MS, ge=10, le=60_000, description="Manager heartbeat to the Lighthouse."
    )
    quorum_retries: int = Field(
        20,
        ge=0,
        le=10_000,
        description=(
            "Times the Manager retries a failed quorum request (TORCHFT_QUORUM_RETRIES): lets the groups ride "
            "through a Lighthouse restart instead of all exiting at once with no live peer left."
        ),
    )


_SLURM_TIME = re.compile(r"(\d+-)?\d+(:\d{1,2}){0,2}|\d+-\d+|UNLIMITED|INFINITE")
# Options lamplighter sets itself; setting them in extra_sbatch would silently
# break requeueing, naming or placement.
_RESERVED_SBATCH = {
    "--job-name",
    "-J",
    "--nodes",
    "-N",
    "--ntasks",
    "-n",
    "--ntasks-per-node",
    "--requeue",
    "--no-requeue",
    "--output",
    "-o",
    "--error",
    "-e",
    "--partition",
    "-p",
    "--account",
    "-A",
    "--time",
    "-t",
    "--qos",
    "-q",
    "--exclusive",
    "--constraint",
    "-C",
    "--wrap",
    "--chdir",
    "-D",
    "--export",
    "--parsable",
    "--gpus-per-node",
    "--open-mode",
    "--cpus-per-task",
    "-c",
    "--dependency",
    "-d",
}
# Where to set what lamplighter sets itself, when a key of the config does it.
_OPTION_KEYS = {"--cpus-per-task": "slurm.cpus_per_task", "--time": "slurm.time", "--partition": "slurm.partition"}
# srun options lamplighter sets itself (or needs left alone) in a group's script.
_RESERVED_SRUN = {
    "--kill-on-bad-exit",
    "--cpus-per-task",
    "--nodes",
    "--ntasks",
    "--ntasks-per-node",
    "--jobid",
    "--job-name",
    "--export",
    "--output",
    "--error",
    "--input",
}
# '--name=value' or '--flag'. #SBATCH lines are parsed by sbatch, not a shell, so quoting cannot
# protect them: values are limited to characters that need no quoting. srun options sit in the
# shell-quoted body; they also take '#' (pyxis: --container-image=nvcr.io#rocm/pytorch).
_SBATCH_OPTION = re.compile(r"(--[a-z][a-z0-9\-]*)(=([A-Za-z0-9_.,:=/@%+\-\[\]]*))?")
_SRUN_OPTION = re.compile(r"(--[a-z][a-z0-9\-]*)(=([A-Za-z0-9_.,:=/@%+#\-\[\]]*))?")
_TIME_PARTS = re.compile(r"(?:(\d+)-)?(\d+)(?::(\d{1,2}))?(?::(\d{1,2}))?")


def slurm_time_seconds(value: str) -> int | None:
    """A Slurm time limit in seconds (MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS); None if unlimited."""
    if value in ("UNLIMITED", "INFINITE"):
        return None
    m = _TIME_PARTS.fullmatch(value)
    if not m:
        raise ValueError(f"{value!r} is not a Slurm time")
    days, a, b, c = m.groups()
    nums = [int(x) for x in (a, b, c) if x is not None]
    if days is not None:  # D-HH, D-HH:MM, D-HH:MM:SS
        hh, mm, ss = (nums + [0, 0])[:3]
        return int(days) * 86400 + hh * 3600 + mm * 60 + ss
    if len(nums) == 1:  # MM
        return nums[0] * 60
    if len(nums) == 2:  # MM:SS
        return nums[0] * 60 + nums[1]
    return nums[0] * 3600 + nums[1] * 60 + nums[2]


def _check_options(v: list[str], key: str, pattern: re.Pattern[str], reserved: set[str], chars: str) -> list[str]:
    for opt in v:
        m = pattern.fullmatch(opt)
        if not m:
            raise ValueError(
                f"{key} entry {opt!r} must look like '--name=value' or '--flag', the value made of "
                f"letters, digits and {chars} (no spaces or quotes)"
            )
        if m.group(1) in reserved:
            where = f": use {_OPTION_KEYS[m.group(1)]}" if m.group(1) in _OPTION_KEYS else ""
            raise ValueError(f"{key} entry {opt!r} sets {m.group(1)}, which lamplighter sets itself{where}")
    return v


class RenewalConfig(Strict):
    """Renewing groups before slurm.time runs out, one at a time (docs/torchft.md, "Time limits")."""

    enabled: bool = Field(
        True,
        description=(
            "With slurm.time and slurm.requeue: each group's job requeues itself before its time limit, once the "
            "other groups are live, and heals from them; a Lighthouse job renews first. No two groups reach the "
            "limit together."
        ),
    )
    margin_s: int = Field(
        300,
        ge=1,
        le=65535,
        description=(
            "The last group (highest replica id) is warned this long before its time limit "
            "(#SBATCH --signal=B:USR1@margin_s). Slurm checks limits every 30 s: it warns 30-60 s early."
        ),
    )
    spacing_s: int = Field(
        600,
        ge=0,
        le=65535,
        description=(
            "Each lower replica id is warned this much earlier (group i at margin_s + (count-1-i) x spacing_s): "
            "time for a renewed group to start again and heal before the next one leaves."
        ),
    )

    def warning_s(self, replica_id: int, count: int) -> int:
        """Seconds before its time limit at which group `replica_id` of `count` is warned."""
        return self.margin_s + (count - 1 - replica_id) * self.spacing_s

    def lighthouse_warning_s(self, count: int) -> int:
        """A Lighthouse job renews one slot before group 0."""
        return self.margin_s + count * self.spacing_s


class SlurmConfig(Strict):
    """How replica groups are submitted to Slurm."""

    partition: str | None = Field(None, description="Partition (sbatch --partition).")
    account: str | None = Field(None, description="Account (sbatch --account).")
    time: str | None = Field(None, description="Time limit, Slurm format: MM, HH:MM:SS, D-HH:MM:SS, UNLIMITED.")
    lighthouse_time: str | None = Field(
        None,
        description=(
            "The Lighthouse job's own time limit. Default: its partition's MaxTime when that is longer than "
            "slurm.time (`submit` asks Slurm), so that it never renews and waits in the queue mid-run; else "
            "slurm.time, and it renews before any group."
        ),
    )
    qos: str | None = Field(None, description="Quality of service (sbatch --qos).")
    exclusive: bool = Field(False, description="Whole nodes for each group (sbatch --exclusive).")
    constraint: str | None = Field(None, description="Node features (sbatch --constraint).")
    requeue: bool = Field(True, description="Let Slurm requeue a group's job (needed to bring a group back).")
    extra_sbatch: list[str] = Field(
        default_factory=list,
        description="More sbatch options, each '--name=value' or '--flag'; options lamplighter sets itself are refused.",
    )
    cpus_per_task: int | None = Field(
        None,
        ge=1,
        le=4096,
        description=(
            "CPUs for each task of a group (one task per trainer process): #SBATCH --cpus-per-task and "
            "srun --cpus-per-task, since Slurm >= 22.05 no longer passes sbatch's value to srun."
        ),
    )
    srun_args: list[str] = Field(
        default_factory=list,
        description=(
            "More srun options for the trainer step, each '--name=value' or '--flag', e.g. pyxis "
            "--container-image=... --container-mounts=...; options lamplighter sets itself are refused."
        ),
    )
    spare: bool = Field(
        False,
        description="Keep a warm spare step in each group's own allocation (srun --overlap, the trainer's geometry, "
        "past the imports in restart.standby_preload): a failed trainer's in-job restart (restart.in_job) becomes "
        "it instead of starting cold. Needs a `{python} -m MODULE ...` or `{python} SCRIPT ...` command; otherwise "
        "restarts start cold, as the job's log says. Each idle spare process holds its imports' memory.",
    )
    renewal: RenewalConfig = Field(default_factory=RenewalConfig, description="Renewal before the time limit.")
    head_node: str | None = Field(None, description="Node for the Lighthouse job (sbatch --nodelist); default any.")
    lighthouse_partition: str | None = Field(
        None, description="The Lighthouse job's partition (it needs one CPU, no GPU); default: slurm.partition."
    )
    lighthouse_account: str | None = Field(None, description="The Lighthouse job's account; default: slurm.account.")
    lighthouse_qos: str | None = Field(None, description="The Lighthouse job's quality of service; default: slurm.qos.")
    lighthouse_constraint: str | None = Field(
        None,
        description="Node features for the Lighthouse job; default none (slurm.constraint names the groups' GPU "
        "nodes, which the Lighthouse's node need not be).",
    )
    helper_python: str | None = Field(
        None,
        description="The interpreter that runs lamplighter's helpers in the job scripts: the Lighthouse (needs "
        "torchft and lamplighter on the Lighthouse's node, slurm.head_node), the in-job agent and the renewal and "
        "release helpers (lamplighter alone, on the groups' nodes). An absolute path or a name on the nodes' PATH. "
        "Default: the interpreter running `lamplighter submit`, at the same path on every node.",
    )
    slurm_conf: str | None = Field(None, description="SLURM_CONF for Slurm commands; default Slurm's own.")

    @field_validator("helper_python")
    @classmethod
    def _helper_python(cls, v: str | None) -> str | None:
        if v is not None and (not v.strip() or v != v.strip() or any(c in v for c in "\x00\n\r")):
            raise ValueError(f"{v!r} is not an interpreter path or name")
        return v

    @field_validator(
        "partition", "account", "qos", "head_node", "lighthouse_partition", "lighthouse_account", "lighthouse_qos"
    )
    @classmethod
    def _slurm_name(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(r"[A-Za-z0-9_.\-\[\],]{1,128}", v):
            raise ValueError(f"{v!r} is not a Slurm name (letters, digits, _ . - [ ] ,)")
        return v

    @field_validator("constraint", "lighthouse_constraint")
    @classmethod
    def _constraint(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(r"[A-Za-z0-9_.\-&|()\[\]*:,!]{1,256}", v):
            raise ValueError(f"{v!r} is not a Slurm constraint expression")
        return v

    @field_validator("time", "lighthouse_time")
    @classmethod
    def _time(cls, v: str | None) -> str | None:
        if v is not None and not _SLURM_TIME.fullmatch(v):
            raise ValueError(f"{v!r} is not a Slurm time (MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM:SS, UNLIMITED)")
        return v

    @field_validator("extra_sbatch")
    @classmethod
    def _extra(cls, v: list[str]) -> list[str]:
        return _check_options(v, "extra_sbatch", _SBATCH_OPTION, _RESERVED_SBATCH, "_ . , : = / @ % + - [ ]")

    @field_validator("srun_args")
    @classmethod
    def _srun(cls, v: list[str]) -> list[str]:
        return _check_options(v, "srun_args", _SRUN_OPTION, _RESERVED_SRUN, "_ . , : = / @ % + # - [ ]")

    @property
    def time_s(self) -> int | None:
        """The time limit in seconds; None without one."""
        return None if self.time is None else slurm_time_seconds(self.time)

    @property
    def lighthouse_limit(self) -> str | None:
        return self.lighthouse_time if self.lighthouse_time is not None else self.time

    @property
    def renews(self) -> bool:
        """Do groups renew themselves before the time limit?"""
        return self.renewal.enabled and self.requeue and self.time_s is not None


class NodeHealthConfig(Strict):
    """What a node's own checks need: how often they look, the GPU probe's deadline, the GPU thresholds.

    A node daemon's config (`NodeConfig.health`) holds this and its VM fault rule; a job's
    `health` adds its trainers' thresholds (HealthConfig), and uses these
    fields itself only where it runs its own supervisor (local mode).
    """

    poll_interval_s: float = Field(1.0, gt=0, le=3600, description="How often GPUs and processes are checked.")
    probe_deadline_s: float = Field(
        2.0, gt=0, le=3600, description="A GPU probe that takes longer marks the GPU unresponsive."
    )
    ecc_uncorrectable_max: int = Field(
        0, ge=0, description="New uncorrectable ECC errors tolerated per GPU (above: fault)."
    )
    ecc_deferred_max: int = Field(0, ge=0, description="New deferred ECC errors tolerated per GPU (above: fault).")
    ecc_correctable_max: int = Field(
        10_000, ge=0, description="New correctable ECC errors tolerated per GPU (above: fault)."
    )
    temperature_edge_max_c: float = Field(
        100.0, gt=0, le=200, description="Edge temperature above which the GPU is faulty."
    )
    temperature_hotspot_max_c: float = Field(110.0, gt=0, le=200, description="Hotspot (junction) temperature limit.")
    temperature_vram_max_c: float = Field(105.0, gt=0, le=200, description="VRAM temperature limit.")
    bad_pages_max: int = Field(8, ge=0, description="New retired (bad) memory pages tolerated per GPU.")


class NodeDaemonHealthConfig(NodeHealthConfig):
    """A node daemon's `health`: the GPU checks, and how the daemon answers GPU VM faults.

    A VM fault (a GPU page fault) is most often the application's own bug: it
    restarts the group whose process faulted. Only VM faults on one node from
    several different users point at the node, and drain it.
    """

    idle_probe_interval_s: float = Field(
        10.0,
        gt=0,
        le=3600,
        description=(
            "How often the GPUs are probed while no lamplighter trainer runs on this node (each probe is CPU "
            "taken from whatever job does run there; bench/results/gpu_probe_cost.json). A fault found then "
            "still drains the node before a job lands on it. At most poll_interval_s: probed at full pace always."
        ),
    )

    vm_fault_drain_after: int = Field(
        3,
        ge=1,
        le=1000,
        description=(
            "Drain the node once GPU VM faults from this many different users (uids) fell within "
            "vm_fault_window_s (1: drain on the first VM fault). Fewer: only the faulting group is restarted; a "
            "fault of no lamplighter job's process restarts nobody."
        ),
    )
    vm_fault_window_s: float = Field(
        86_400.0,
        gt=0,
        le=30 * 86_400,
        description="The window over which VM faults of different users on this node are counted (kept across "
        "daemon restarts).",
    )


class HealthConfig(NodeHealthConfig):
    """A job's health thresholds: the node's fields (used in local mode) and its trainers' own.

    On Slurm the node daemon applies the trainer thresholds below to this job's
    groups, and its own node config's poll interval, probe deadline and GPU thresholds.
    """

    progress: Literal["auto", "lighthouse", "heartbeat", "off"] = Field(
        "auto",
        description=(
            "Where a group's progress is read: lighthouse (each replica's step as torchft's Lighthouse sees it: "
            "any torchft trainer, no change to it), heartbeat (files the trainer writes, trainer/heartbeat.py), "
            "auto (both: the latest wins), off (no hang check)."
        ),
    )
    hang_timeout_s: float = Field(
        30.0, gt=0, le=86_400, description="A group that made progress and then none for this long is hung."
    )
    startup_timeout_s: float = Field(
        300.0,
        gt=0,
        le=86_400,
        description=(
            "A group with no progress this long after its start is hung (its first step includes loading the "
            "model, joining the quorum and healing from a peer: minutes for a large model)."
        ),
    )
    hang_pace_factor: float = Field(
        2.0,
        ge=0,
        le=100,
        description=(
            "k: a group that made progress is hung after no progress for max(hang_timeout_s, k x the longest "
            "interval between two progress marks seen in this job, at most hang_timeout_max_s). Semi-synchronous "
            "trainers (DiLoCo, LocalSGD) advance torchft's step only at a sync; until one interval was seen, "
            "startup_timeout_s applies. 0: the fixed hang_timeout_s."
        ),
    )
    hang_timeout_max_s: float | None = Field(
        None,
        gt=0,
        le=86_400,
        description="The most the learned hang limit may reach (null: startup_timeout_s): a real hang is seen by then.",
    )
    d_state_max_s: float = Field(
        60.0, gt=0, le=86_400, description="A trainer in uninterruptible sleep this long is stuck."
    )
    memory_max_percent: float = Field(
        95.0, gt=0, le=100, description="A trainer tree using more of the node's memory is killed."
    )


UNIX_PATH_MAX = 107  # sun_path holds 108 bytes, the last a NUL


def unix_socket_path(v: str) -> str:
    if not v.startswith("/"):
        raise ValueError(f"{v!r} is not an absolute path (a task and the daemon resolve it from different places)")
    if len(v.encode()) > UNIX_PATH_MAX:
        raise ValueError(f"{v!r} is {len(v.encode())} bytes; a Unix socket's path holds at most {UNIX_PATH_MAX}")
    return v


# torch._dynamo: torch imports it when the first optimizer is built, about 1.3 s here.
DEFAULT_PRELOAD = ("torch", "torch._dynamo", "torchft")


def module_names(v: list[str]) -> list[str]:
    bad = [m for m in v if not all(p.isidentifier() for p in m.split("."))]
    if bad:
        raise ValueError(f"not module names: {bad} (dotted Python names, as `import` takes them)")
    return v


class RestartConfig(Strict):
    """When a failed group is brought back, and when lamplighter gives up."""

    budget_per_group: int = Field(10, ge=0, description="Restarts allowed per group over the job's life.")
    backoff_initial_s: float = Field(0.0, ge=0, description="Delay before the first restart of a group.")
    backoff_factor: float = Field(2.0, ge=1, description="Each further restart waits this much longer...")
    backoff_max_s: float = Field(60.0, ge=0, description="...up to this delay.")
    crash_loop_window_s: float = Field(120.0, gt=0, description="Window for crash-loop detection.")
    crash_loop_max: int = Field(
        5, ge=1, description="Failures within the window that mean a crash loop (the group is left down)."
    )
    no_restart_exit_codes: list[int] = Field(
        default_factory=lambda: [78],
        description="Trainer exit codes that mean 'do not restart' (78: the trainer refused).",
    )
    in_job: int = Field(
        3,
        ge=0,
        le=99,
        description="Slurm: restarts of a failed or hung trainer inside its own allocation (the group's in-job "
        "agent, as the job's user: from slurm.spare, or cold) before the group's job ends FAILED and is requeued "
        "under budget_per_group; a crash loop ends them sooner. They count apart from budget_per_group. A node "
        "fault always requeues. 0: every failure requeues.",
    )
    standby: int = Field(
        0,
        ge=0,
        le=64,
        description="Local mode: trainer processes kept started, past the imports in standby_preload; a restart "
        "turns them into the group's ranks instead of starting cold (0: off). The command must be "
        "`{python} -m MODULE ...` or `{python} SCRIPT ...`; otherwise restarts start cold, as said in the log.",
    )
    standby_preload: list[str] = Field(
        default_factory=lambda: list(DEFAULT_PRELOAD),
        description="Modules a standby imports while it waits (the reference trainer's own module is added). "
        "torch._dynamo: torch imports it when the first optimizer is built, about 1.3 s here.",
    )

    @field_validator("standby_preload")
    @classmethod
    def _module_names(cls, v: list[str]) -> list[str]:
        return module_names(v)

    @model_validator(mode="after")
    def _backoff_order(self) -> RestartConfig:
        if self.backoff_max_s < self.backoff_initial_s:
            raise ValueError(
                f"restart.backoff_max_s ({self.backoff_max_s}) is below restart.backoff_initial_s "
                f"({self.backoff_initial_s}): the delay could never reach its start"
            )
        return self


ChaosKind = Literal[
    "kill",
    "hang",
    "hang-collective",
    "exception",
    "lighthouse-kill",
    "gpu",
    "gpu-hang",
    "gpu-lost",
    "node-crash",
    "supervisor-kill",
    "kill-healer",
    "partition",
    "slurmctld-restart",
]
DEFAULT_CHAOS_KINDS: tuple[ChaosKind, ...] = ("kill", "hang", "exception")


class ChaosEvent(Strict):
    """One scheduled fault."""

    at_s: float = Field(ge=0, description="Seconds after training starts.")
    kind: ChaosKind = Field(description="Fault kind.")
    group: int | None = Field(None, ge=0, description="Target group; default chosen by the seed.")
    mode: Literal["exact", "gentle"] | None = Field(
        None, description="This fault's mode (see ChaosConfig.mode); default: the schedule's."
    )


class ChaosConfig(Strict):
    """Default fault injection (`--chaos` on the command line replaces it)."""

    enabled: bool = Field(False, description="Inject faults by default.")
    mtbf_s: float | None = Field(None, gt=0, description="Mean time between random faults.")
    seed: int = Field(0, ge=0, description="Seed for random faults.")
    kinds: list[ChaosKind] = Field(default_factory=lambda: list(DEFAULT_CHAOS_KINDS), description="Kinds to draw from.")
    start_after_s: float = Field(10.0, ge=0, description="No fault before this many seconds of training.")
    max_faults: int | None = Field(None, ge=0, description="Stop injecting after this many.")
    schedule: list[ChaosEvent] = Field(
        default_factory=list, description="Explicit faults (used instead of mtbf_s when given)."
    )
    mode: Literal["exact", "gentle"] | None = Field(
        None,
        description=(
            "exact: each fault fires at its time, whatever state its target is in (restarting, healing); "
            "gentle: a fault waits for a healthy target and a live peer left. Default: exact for a schedule, "
            "gentle for random draws (mtbf_s)."
        ),
    )

    @property
    def resolved_mode(self) -> str:
        return self.mode or ("exact" if self.schedule else "gentle")


class JobConfig(Strict):
    """A lamplighter job: one YAML file."""

    name: str = Field(
        description="Job name: letters, digits, '-', '_', '.'; names the Slurm jobs and the run directory."
    )
    run_dir: str | None = Field(None, description="Where logs, heartbeats and step logs go; default runs/<name>.")
    trainer: TrainerConfig = Field(default_factory=TrainerConfig, description="The trainer.")
    groups: GroupsConfig = Field(default_factory=GroupsConfig, description="Replica groups.")
    lighthouse: LighthouseConfig = Field(default_factory=LighthouseConfig, description="The torchft Lighthouse.")
    torchft: TorchftConfig = Field(default_factory=TorchftConfig, description="torchft timeouts.")
    slurm: SlurmConfig = Field(default_factory=SlurmConfig, description="Slurm submission.")
    health: HealthConfig = Field(
        default_factory=HealthConfig,
        description=(
            "Health thresholds. On Slurm the node daemons apply the trainer thresholds (progress, hang, start-up, "
            "D state, memory) to this job; poll interval, probe deadline and GPU thresholds are the node's."
        ),
    )
    restart: RestartConfig = Field(
        default_factory=RestartConfig, description="Restart policy (on Slurm too: the node daemons apply it)."
    )
    chaos: ChaosConfig = Field(default_factory=ChaosConfig, description="Fault injection.")
    placement: Literal["slurm", "bare-metal"] = Field(
        "slurm",
        description="Where `lamplighter submit` sends the job: Slurm (sbatch), or a bare-metal cluster's hosts (etcd).",
    )
    bare_metal: BareMetalJobConfig | None = Field(
        None, description="The bare-metal cluster (placement: bare-metal): its name and etcd."
    )

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}", v):
            raise ValueError(
                f"{v!r} is not a job name: 1-64 letters, digits, '-', '_' or '.', starting with a letter or digit"
            )
        return v

    @model_validator(mode="after")
    def _hierarchy(self) -> JobConfig:
        problems = timeout_hierarchy_problems(self) + cross_section_problems(self)
        if problems:
            # One line per violated rule: the loader turns each into its own error with a line number.
            raise ValueError("\n".join(problems))
        if self.lighthouse.restart_grace_ms is None:
            self.lighthouse.restart_grace_ms = default_restart_grace_ms(self.lighthouse, self.torchft)
        return self


# A killed Lighthouse is back after about 0.5 s here (its job script restarts it); a quorum request in
# flight meanwhile spends that too. CI saw a 3 s quorum timeout expire with a 2 s grace and 0.45 s of restart.
LIGHTHOUSE_RESTART_MS = 1000
MIN_RESTART_GRACE_MS = 500


def default_restart_grace_ms(lh: LighthouseConfig, ft: TorchftConfig) -> int:
    """2 s, or less when survivors' quorum timeout would not outlast the Lighthouse's restart, the grace and a
    heartbeat timeout; never below 500 ms (0 would let the first group back commit a step alone)."""
    room = ft.quorum_timeout_s * 1000 - lh.heartbeat_timeout_ms - 500 - LIGHTHOUSE_RESTART_MS
    return max(MIN_RESTART_GRACE_MS, min(2000, room))


def lighthouse_place_problems(job: JobConfig) -> list[str]:
    """A Slurm job's Lighthouse is a job of its own that Slurm places: a host it names must be that node's."""
    host, head = job.lighthouse.host, job.slurm.head_node
    if job.placement != "slurm" or host is None:
        return []
    if is_loopback(host):
        return [
            f"lighthouse.host {host!r} is a loopback address, which only the Lighthouse's own node reaches, and the "
            "groups run on other nodes: remove lighthouse.host (the Lighthouse then binds the address of the node "
            "it lands on and publishes it; `lamplighter local` binds loopback without it) or set it to an address "
            "of slurm.head_node"
        ]
    if head is None:
        return [
            f"lighthouse.host {host!r} names one machine, but without slurm.head_node the Lighthouse job may land "
            "on any node of its partition: remove lighthouse.host (it binds where it lands), or set slurm.head_node "
            "to the node that holds that address"
        ]
    if not _is_ip(host) and host.split(".")[0] != head.split(".")[0]:
        return [
            f"lighthouse.host {host!r} is not slurm.head_node ({head!r}), where Slurm runs the Lighthouse: remove "
            "lighthouse.host (it binds the address of the node it lands on), or make the two name one node"
        ]
    return []


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return True


def cross_section_problems(job: JobConfig) -> list[str]:
    """Rules across sections other than the timeout hierarchy, one sentence each."""
    out: list[str] = []
    if job.placement == "bare-metal" and job.bare_metal is None:
        out.append("placement bare-metal needs bare_metal: the cluster's name and its etcd endpoints")
    out += lighthouse_place_problems(job)
    if job.placement == "bare-metal" and (job.lighthouse.port == 0 or job.lighthouse.host is None):
        out.append(
            "placement bare-metal needs a fixed lighthouse.host and lighthouse.port: the hosts' trainers join it there"
        )
    if job.placement == "bare-metal" and not (job.run_dir and job.run_dir.startswith("/")):
        out.append(
            "placement bare-metal needs run_dir, an absolute path every host sees: the job's trainers create their "
            "logs, heartbeats and job.json there, as the job's user"
        )
    if job.placement == "bare-metal" and job.groups.nodes > 1:
        out.append(
            f"placement bare-metal runs each replica group on one host, but groups.nodes is {job.groups.nodes}: "
            "set groups.nodes: 1 (groups of several nodes run on Slurm)"
        )
    command = job.trainer.command or []
    if job.trainer.kind == "torchtitan":
        ft = job.torchft
        out += torchtitan_flags.comm_timeout_problems(
            command,
            quorum_s=ft.quorum_timeout_s,
            timeout_s=ft.timeout_s,
            connect_s=ft.connect_timeout_s,
            pg_s=ft.pg_timeout_s,
        )
    if job.groups.gpus_per_node == 0 and any("{gpus_per_node}" in arg for arg in command):
        out.append(
            "trainer.command uses {gpus_per_node} but groups.gpus_per_node is 0: set the GPUs per node, "
            "or write the number of processes"
        )
    s = job.slurm
    limit = s.time_s
    if s.renews and any(o.split("=", 1)[0] == "--signal" for o in s.extra_sbatch):
        out.append(
            "slurm.extra_sbatch sets --signal, which the renewal before slurm.time uses: remove it, "
            "or set slurm.renewal.enabled false"
        )
    if s.renews and limit is not None:
        lh_limit = slurm_time_seconds(s.lighthouse_limit) if s.lighthouse_limit else None
        earliest, who = s.renewal.lighthouse_warning_s(job.groups.count), "the Lighthouse job"
        if lh_limit is not None and lh_limit != limit:
            limit = lh_limit  # the Lighthouse job's own limit; the groups' is checked below
            if earliest >= limit:
                out.append(
                    f"slurm.renewal warns the Lighthouse job {earliest} s before its time limit, not below "
                    f"slurm.lighthouse_time ({s.lighthouse_time} = {limit} s): raise it, or lower the renewal's times"
                )
            limit = s.time_s or 0
            earliest, who = s.renewal.warning_s(0, job.groups.count), "group 0"
        if earliest >= limit:
            out.append(
                f"slurm.renewal warns {who} {earliest} s before its time limit (margin_s {s.renewal.margin_s} + "
                f"spacing_s {s.renewal.spacing_s} per later group), not below slurm.time ({s.time} = {limit} s): "
                "lower them, or set slurm.renewal.enabled false"
            )
    return out


def container_path_problems(
    job: JobConfig, run_dir: str, on_host: Callable[[str], bool] = lambda path: False
) -> list[tuple[str, str]]:
    """(key, sentence) for each host path a trainer in a pyxis container needs and does not see there.

    With --container-image (or --container-name) in slurm.srun_args, the trainer sees the image and the
    mounts only (configs/container_mounts.py), yet the scripts name host paths: `run_dir` (absolute, as
    submit resolves it) for job.json, the step logs and `<run_dir>/boot` (lamplighter's torchtitan launch);
    a typed --dump_folder or --job.config_file; the trainer.env PYTHONPATH folders (the torchtitan config
    module) that `on_host` says exist on this machine (others may be the image's). A custom trainer needs
    none of lamplighter's files, so only its own paths are its business."""
    s = job.slurm
    kind = job.trainer.resolved_kind
    if job.placement != "slurm" or kind == "custom" or not container_mounts.in_container(s.srun_args):
        return []
    mounts = container_mounts.container_mounts(s.srun_args)
    specs = ",".join(m.spec() for m in mounts) or "none"
    uses = {
        "torchtitan": "job.json, lamplighter's torchtitan launch (boot/), the step logs and torchtitan's dump folder",
        "reference": "job.json, the heartbeats and the step logs",
    }[kind]
    needs: list[tuple[str, str, str, bool]] = [("run_dir", run_dir, uses, True)]  # key, path, why, written to
    command = job.trainer.command or []
    if kind == "torchtitan":
        for flag, why, writes in (
            ("dump_folder", "torchtitan's checkpoints and dataloader positions", True),
            ("job.config_file", "torchtitan's config file", False),
        ):
            value = torchtitan_flags.flag_value(command, flag)
            if value and value.startswith("/"):
                needs.append((f"trainer.command (--{flag})", value, why, writes))
        for entry in job.trainer.env.get("PYTHONPATH", "").split(":"):
            if entry.startswith("/") and on_host(entry):
                needs.append(("trainer.env.PYTHONPATH", entry, "its modules (the torchtitan config module)", False))
    out = []
    for key, path, why, writes in needs:
        m = container_mounts.shown_by(path, mounts)
        fix = f"add {path}:{path} (or a folder above it) to --container-mounts in slurm.srun_args"
        if m is None:
            where = f"is not in the trainer's container (--container-mounts: {specs})"
            if key == "run_dir":
                fix += ", or put run_dir under a mounted folder"
        elif not container_mounts.same_path(path, m):
            where = f"is mounted at another path in the trainer's container ({m.spec()}; the scripts name the host's)"
        elif writes and m.read_only:
            where, fix = f"is mounted read-only in the trainer's container ({m.spec()})", "mount it without ro"
        else:
            continue
        out.append((key, f"{path} {where}, and the trainer needs {why} there: {fix}"))
    return out


def timeout_hierarchy_problems(job: JobConfig) -> list[str]:
    """Each violated rule of the timeout hierarchy, in one sentence with the values."""
    lh, ft, h, g = job.lighthouse, job.torchft, job.health, job.groups
    out: list[str] = []
    if lh.heartbeat_timeout_ms < 2 * ft.heartbeat_interval_ms:
        out.append(
            f"lighthouse.heartbeat_timeout_ms ({lh.heartbeat_timeout_ms}) must be at least twice "
            f"torchft.heartbeat_interval_ms ({ft.heartbeat_interval_ms}): one late heartbeat would "
            "evict a healthy group and cause constant quorum changes"
        )
    if ft.quorum_timeout_s * 1000 <= lh.heartbeat_timeout_ms:
        out.append(
            f"torchft.quorum_timeout_s ({ft.quorum_timeout_s} s) must exceed lighthouse.heartbeat_timeout_ms "
            f"({lh.heartbeat_timeout_ms} ms): survivors would time out waiting for a quorum before the "
            "Lighthouse drops the dead group, and crash"
        )
    if lh.restart_grace_ms and ft.quorum_timeout_s * 1000 <= lh.restart_grace_ms + lh.heartbeat_timeout_ms:
        out.append(
            f"torchft.quorum_timeout_s ({ft.quorum_timeout_s} s) must exceed lighthouse.restart_grace_ms "
            f"({lh.restart_grace_ms} ms) plus heartbeat_timeout_ms ({lh.heartbeat_timeout_ms} ms): after a "
            "Lighthouse restart, survivors of a group that died meanwhile would time out waiting for a quorum"
        )
    if ft.quorum_timeout_s * 1000 <= lh.join_timeout_ms:
        out.append(
            f"torchft.quorum_timeout_s ({ft.quorum_timeout_s} s) must exceed lighthouse.join_timeout_ms "
            f"({lh.join_timeout_ms} ms): a group would give up on the quorum while the Lighthouse still waits for joiners"
        )
    if isinstance(ft.rendezvous_timeout_ms, int) and ft.rendezvous_timeout_ms > ft.pg_timeout_s * 1000:
        out.append(
            f"torchft.rendezvous_timeout_ms ({ft.rendezvous_timeout_ms} ms) is above torchft.pg_timeout_s "
            f"({ft.pg_timeout_s} s), which already bounds the process group's setup: set it lower, 'adaptive', or null"
        )
    if ft.timeout_s < ft.pg_timeout_s:
        out.append(
            f"torchft.timeout_s ({ft.timeout_s} s) must be at least torchft.pg_timeout_s ({ft.pg_timeout_s} s): "
            "the Manager would abandon a collective the process group is still allowed to finish"
        )
    slowest = max(ft.pg_timeout_s, ft.timeout_s, ft.quorum_timeout_s)
    if h.hang_timeout_s <= slowest:
        out.append(
            f"health.hang_timeout_s ({h.hang_timeout_s} s) must exceed the longest torchft wait "
            f"(pg {ft.pg_timeout_s} s, timeout {ft.timeout_s} s, quorum {ft.quorum_timeout_s} s): "
            "the supervisor would kill groups that are only waiting for a peer's timeout"
        )
    if h.hang_timeout_max_s is not None and h.hang_timeout_max_s < h.hang_timeout_s:
        out.append(
            f"health.hang_timeout_max_s ({h.hang_timeout_max_s} s) is below health.hang_timeout_s "
            f"({h.hang_timeout_s} s): the cap on the learned hang limit cannot be below the fixed one"
        )
    if h.startup_timeout_s < h.hang_timeout_s:
        out.append(
            f"health.startup_timeout_s ({h.startup_timeout_s} s) is below health.hang_timeout_s "
            f"({h.hang_timeout_s} s): a group's first step does everything a later step does, and more"
        )
    if h.probe_deadline_s >= h.hang_timeout_s:
        out.append(
            f"health.probe_deadline_s ({h.probe_deadline_s} s) must be below health.hang_timeout_s "
            f"({h.hang_timeout_s} s): an unresponsive GPU would be noticed only after the hang timeout"
        )
    if lh.min_replicas > g.count:
        out.append(
            f"lighthouse.min_replicas ({lh.min_replicas}) exceeds groups.count ({g.count}): no quorum could ever form"
        )
    return out


class MetricsConfig(Strict):
    """Prometheus metrics endpoint of the node supervisor."""

    enabled: bool = Field(True, description="Serve Prometheus metrics.")
    host: str = Field("127.0.0.1", description="Bind address; localhost unless you mean to expose it.")
    port: int = Field(9464, ge=0, le=65535, description="Port (0: pick a free one).")


NETDEV = re.compile(r"[A-Za-z0-9_.:@\-]{1,15}")  # a Linux interface name (IFNAMSIZ 16)
RDMA_PORT = re.compile(r"[A-Za-z0-9_.\-]{1,63}(:[0-9]{1,3})?")  # NCCL_IB_HCA's device[:port]


class NetworkConfig(Strict):
    """The links training uses on this node: a link down or flapping is a node fault (drain), read from sysfs."""

    interfaces: list[str] = Field(
        default_factory=list,
        description="Network interfaces training traffic uses (/sys/class/net/NAME), e.g. the RoCE or TCP ones "
        "RCCL is given (NCCL_SOCKET_IFNAME); down, missing or flapping: the node is faulty.",
    )
    rdma: list[str] = Field(
        default_factory=list,
        description="RDMA devices training uses, as NCCL_IB_HCA names them: DEVICE (every port) or DEVICE:PORT "
        "(/sys/class/infiniband/DEVICE/ports/PORT/state must be ACTIVE).",
    )
    flap_max_changes: int = Field(
        4,
        ge=1,
        le=1000,
        description="Link state changes tolerated within flap_window_s (a down and an up are 2; sysfs "
        "carrier_changes, link_downed for RDMA ports); more: the link is flapping, the node is faulty.",
    )
    flap_window_s: float = Field(600.0, gt=0, le=86_400, description="The window flap_max_changes is counted over.")

    @field_validator("interfaces")
    @classmethod
    def _netdevs(cls, v: list[str]) -> list[str]:
        for name in v:
            if not NETDEV.fullmatch(name) or name in (".", ".."):
                raise ValueError(f"network.interfaces: {name!r} is not an interface name (as in `ip link`)")
        return v

    @field_validator("rdma")
    @classmethod
    def _rdma(cls, v: list[str]) -> list[str]:
        for name in v:
            if not RDMA_PORT.fullmatch(name) or name.split(":")[0] in (".", ".."):
                raise ValueError(f"network.rdma: {name!r} is not DEVICE or DEVICE:PORT (as `ibv_devices` lists them)")
        return v


class AutoResumeConfig(Strict):
    """When a node lamplighter drained comes back by itself (supervisor/node/auto_resume.py)."""

    enabled: bool = Field(
        True,
        description="Resume a node this daemon drained once its checks (GPUs, GPU count, links) have passed; "
        "never a node an admin or Slurm drained. Rate-limited like drains (max_drain_fraction per "
        "drain_window_s, counted apart), through the mark each resume leaves in the node's Comment.",
    )
    passes: int = Field(3, ge=1, le=100, description="Checks that must pass in a row, at least over_s/passes apart...")
    over_s: float = Field(600.0, ge=1, le=7 * 86_400, description="...the first and the last at least this far apart.")
    relapse_hold_s: float = Field(
        86_400.0,
        ge=0,
        description="Drained again within this long of an automatic resume: held for a person (the reason says so).",
    )


class NodeConfig(Strict):
    """The per-node supervisor daemon (`lamplighter supervise --config node.yaml`).

    Only what belongs to the node: a job's trainer thresholds and restart
    policy travel with the job (its job.json) and are applied per job.
    """

    role: Literal["compute", "head", "bare-metal"] = Field(
        "compute",
        description="compute: watch GPUs and trainers; head: watch the compute nodes and publish the job table; "
        "bare-metal: a host of a cluster without Slurm (etcd; see bare_metal).",
    )
    bare_metal: BareMetalNodeConfig | None = Field(
        None, description="role bare-metal: etcd, the cluster's hosts and spares, the lease timing."
    )
    node_name: str | None = Field(None, description="This node's Slurm name; default the host name.")
    state_dir: str = Field("/var/lib/lamplighter", description="Persistent state (restart counts, baselines, journal).")
    status_socket: str = Field(
        "/run/lamplighter/status.sock", description="Unix socket that `lamplighter status` reads."
    )
    cluster_status_dir: str | None = Field(
        None,
        description="Folder shared by all nodes and login nodes where the daemon publishes its health "
        "(<node>.json) for `lamplighter status` and `lamplighter nodes`; null: not published.",
    )
    cluster_status_owner: str = Field(
        "root",
        min_length=1,
        pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$",
        description="Whose files in cluster_status_dir the daemons take (the head's table and ring, the nodes' "
        "suspect reports), a user name or uid: root; `nobody` where the folder is on an NFS export with "
        "root_squash (root writes there as nobody); the dedicated user the daemons run as. A file of anyone "
        "else is refused (a log line and lamplighter_job_table_refused).",
    )
    job_prefix: str = Field(
        JOB_PREFIX,
        description="Slurm job names of lamplighter jobs start with this (as `lamplighter render` names them).",
    )
    gpus: bool = Field(True, description="Watch this node's GPUs through amdsmi.")
    gpu_count: int | None = Field(
        None,
        ge=1,
        le=64,
        description="GPUs this node must have (8 on an MI300X/MI325X node): fewer found is a fault (drain, the "
        "count in the reason); healthcheck and nodes resume check it too. null: as many as amdsmi finds.",
    )
    network: NetworkConfig = Field(
        default_factory=NetworkConfig, description="The network and RDMA links training uses, checked from sysfs."
    )
    health: NodeDaemonHealthConfig = Field(
        default_factory=NodeDaemonHealthConfig,
        description="The node's checks: poll interval, GPU probe deadline, GPU thresholds, the VM fault drain rule "
        "(trainer thresholds are the job's).",
    )
    metrics: MetricsConfig = Field(default_factory=MetricsConfig, description="Prometheus metrics.")
    slurm_conf: str | None = Field(None, description="SLURM_CONF for Slurm commands.")
    max_drain_fraction: float = Field(0.25, gt=0, le=1, description="Never drain more than this fraction of nodes...")
    drain_window_s: float = Field(3600.0, gt=0, description="...within this window.")
    node_silence_s: float = Field(
        5.0,
        gt=0,
        description="Head role: a node whose slurmd is silent this long is drained and its lamplighter groups "
        "moved; it is marked down only if Slurm too reports it not responding, or if Slurm says every job on it "
        "is a lamplighter group's and three probes in a row agree.",
    )
    head_probe_sweep: int = Field(
        8,
        ge=0,
        le=100_000,
        description="Head role, with cluster_status_dir: the compute daemons probe each other's slurmd (two "
        "each) and report the silent ones, and the head probes each cycle only those, the nodes it holds silent, "
        "and this many others in turn (so its cycle does not grow with the cluster, and a node whose watchers "
        "died with it is still found within nodes / this cycles); 0: the head probes every node every cycle.",
    )
    slurm_poll_s: float = Field(
        5.0,
        ge=0,
        le=300,
        description="Head role: how often the head reads Slurm's queue and nodes (at once while a node is silent "
        "or a failed group job awaits its grace) and publishes the job table to cluster_status_dir, from which "
        "every node daemon checks its trainers' jobs instead of asking slurmctld itself (it asks only about what "
        "the table lacks or shows changed, or when the table is over max(15 s, 3 x this) old); 0: every cycle.",
    )
    mode: Literal["act", "observe"] = Field(
        "act",
        description="act: carry the actions out; observe: decide and log every action it would take "
        "('would requeue', 'would drain') to the journal and the action logs (`lamplighter why` shows them), "
        "and take none. Roll out with observe first.",
    )
    auto_resume: AutoResumeConfig = Field(
        default_factory=AutoResumeConfig, description="Nodes this daemon drained come back once their checks pass."
    )

    @model_validator(mode="after")
    def _bare_metal(self) -> NodeConfig:
        bm = self.bare_metal
        if self.role != "bare-metal":
            if bm is not None:
                raise ValueError(f"bare_metal is given but role is {self.role}: set role: bare-metal, or drop it")
            return self
        if bm is None:
            raise ValueError("role bare-metal needs bare_metal: etcd, the hosts and the spares")
        if self.node_name is not None and self.node_name not in bm.hosts + bm.spares:
            raise ValueError(f"node_name {self.node_name!r} is in neither bare_metal.hosts nor bare_metal.spares")
        if bm.fence_margin_s <= self.health.poll_interval_s:
            raise ValueError(
                f"bare_metal.fence_margin_s ({bm.fence_margin_s:g} s) must exceed health.poll_interval_s "
                f"({self.health.poll_interval_s:g} s): the host checks its lease once per poll, and must kill its "
                "trainers before the lease can expire"
            )
        return self


def node_job_problems(node: NodeConfig, job: JobConfig) -> list[str]:
    """Each rule a node config and a job config break together, in one sentence with the values.

    The node daemon applies the job's trainer thresholds at the node's pace.
    """
    nh, jh = node.health, job.health
    out: list[str] = []
    if nh.probe_deadline_s >= jh.hang_timeout_s:
        out.append(
            f"node health.probe_deadline_s ({nh.probe_deadline_s:g} s) must be below the job's health.hang_timeout_s "
            f"({jh.hang_timeout_s:g} s): a wedged GPU would get its group killed as hung before the GPU is "
            "found unresponsive and the node drained"
        )
    if 2 * nh.poll_interval_s > jh.hang_timeout_s:
        out.append(
            f"node health.poll_interval_s ({nh.poll_interval_s:g} s) must be at most half the job's "
            f"health.hang_timeout_s ({jh.hang_timeout_s:g} s): progress is sampled once per poll, so a hang "
            "would be judged on one or two samples and seen up to a poll late"
        )
    return out


def ignored_off_local(job: JobConfig) -> list[str]:
    """Settings this job sets that only `lamplighter local` honours: what `submit` (Slurm or bare metal) says
    it will not do, rather than ignore them silently."""
    notes = []
    if job.restart.standby:
        notes.append(
            f"restart.standby ({job.restart.standby}) applies to `lamplighter local` only: "
            "on Slurm, slurm.spare keeps a warm spare in each group's allocation; on bare metal, restarts start cold"
        )
    return notes
