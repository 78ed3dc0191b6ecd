"""A CPU stand-in for `python -m torchtitan.train` (torchtitan 0.3 does not run on CPU here).

With tests/torchtitan_standin on PYTHONPATH, `-m torchtitan.train` runs this file, so a
job's command is the same as for torchtitan itself (configs/llama3-8b-mi325x.yaml).

It takes torchtitan's own command line: its argparse is built from the fields of
torchtitan's config classes (tests/trainer/torchtitan_fields.json, extracted
from torchtitan's wheel), `--<section>.<field>` with tyro's spellings ('-' or
'_', `--section.no-field` for a boolean), plus ConfigManager's `--module` and
`--config`; any other flag is an error, as it would be for torchtitan. Like
torchtitan's fault-tolerant trainer it honours:

  --training.steps                       train until the Manager's step reaches it
  --fault_tolerance.enable               a torchft Manager, replica id "torchtitan_ft_<replica_id>"
  --fault_tolerance.replica_id / group_size / min_replica_size
  --fault_tolerance.process_group[_timeout_ms]   gloo here (nccl is taken as gloo: no GPU)
  --checkpoint.enable --checkpoint.enable_ft_dataloader_checkpoints
                                         each replica's dataloader position saved every step
                                         under <dump_folder>/<checkpoint.folder>/ft-replicat-<id>/
                                         (torchtitan's folder name) and loaded at start
  --dump_folder                          where that and its records go
  TORCHFT_LIGHTHOUSE, TORCHFT_*_SEC      read by torchft itself

and, for tests only, STANDIN_STOP_FILE: a file that, once it holds a step number, lowers
--training.steps to it (read every step), so that a test ends a run "until told" once what it
came to see has happened, whatever the machine's pace.

It trains a tiny model on its replica's own data stream (HSDP shape: gradients
averaged inside the group over torchrun's process group, across groups by
torchft) and appends one JSON line per step to
`<dump_folder>/standin/replica<id>.rank<r>.jsonl` (step, committed, the data
position it consumed, a hash of model and optimizer state), and its parsed
flags and environment to `...args.json`. It imports torch and torchft, never
lamplighter.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torchft.manager import Manager
from torchft.optim import OptimizerWrapper
from torchft.process_group import ProcessGroupGloo

FIELDS = Path(__file__).resolve().parents[2] / "trainer" / "torchtitan_fields.json"


def _spellings(section: str, name: str, negative: bool = False) -> list[str]:
    out = []
    for sec in dict.fromkeys([section, section.replace("_", "-")]):
        for field in dict.fromkeys([name, name.replace("_", "-")]):
            for no in ["no-", "no_"] if negative else [""]:
                out.append(f"--{sec}.{no}{field}" if sec else f"--{no}{field}")
    return list(dict.fromkeys(out))


def parser() -> argparse.ArgumentParser:
    """torchtitan's flags, from the fixture of its config classes."""
    fixture = json.loads(FIELDS.read_text())
    p = argparse.ArgumentParser(prog="torchtitan.train (CPU stand-in)", allow_abbrev=False)
    p.add_argument("--module", required=True)
    p.add_argument("--config", required=True)
    fields: list[tuple[str, str, str]] = [("", k, v) for k, v in fixture["top_level"].items()]
    for section, spec in fixture["sections"].items():
        fields += [(section, k, v) for k, v in spec["fields"].items()]
    for section, name, kind in fields:
        dest = f"{section}.{name}" if section else name
        if kind == "bool":
            p.add_argument(*_spellings(section, name), dest=dest, action="store_true", default=None)
            p.add_argument(*_spellings(section, name, negative=True), dest=dest, action="store_false")
            continue
        convert: Any = {"int": int, "float": float, "float | int": float}.get(kind, str)
        p.add_argument(*_spellings(section, name), dest=dest, type=convert, default=None)
    return p


def state_hash(model: nn.Module, opt: torch.optim.Optimizer) -> str:
    h = hashlib.sha256()
    for name, t in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(t.detach().cpu().contiguous().numpy().tobytes())
    for pid, st in sorted(opt.state_dict()["state"].items()):
        for k, v in sorted(st.items()):
            h.update(f"{pid}.{k}".encode())
            h.update(v.detach().cpu().contiguous().numpy().tobytes() if torch.is_tensor(v) else repr(v).encode())
    return h.hexdigest()


def batch(replica: int, rank: int, position: int, size: int = 16, dim: int = 32) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample `position` of this replica's (and rank's) own data stream."""
    g = torch.Generator().manual_seed((replica * 1009 + rank) * 1_000_003 + position)
    x = torch.randn(size, dim, generator=g)
    return x, x.sum(dim=1, keepdim=True).tanh()


def stop_step(path: str | None) -> float:
    """The step STANDIN_STOP_FILE names, or infinity (no file yet, or not a number)."""
    try:
        text = Path(path).read_text().strip() if path else ""
    except OSError:
        return float("inf")
    return int(text) if text.isdigit() else float("inf")


def main(argv: list[str] | None = None) -> int:
    a = vars(parser().parse_args(argv))
    get = a.get
    steps = get("training.steps") or 10000
    ft_on = bool(get("fault_tolerance.enable"))
    replica = get("fault_tolerance.replica_id") or 0
    dump = Path(get("dump_folder") or "./outputs")
    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    if not ft_on:
        print("stand-in: --fault_tolerance.enable not given: this stand-in only trains fault-tolerantly", flush=True)
        return 2
    if os.environ.get("REPLICA_GROUP_ID") not in (None, str(replica)):
        print(
            f"stand-in: REPLICA_GROUP_ID {os.environ['REPLICA_GROUP_ID']} != --fault_tolerance.replica_id", flush=True
        )
        return 2
    records = dump / "standin"
    records.mkdir(parents=True, exist_ok=True)
    attempt = int(os.environ.get("SLURM_RESTART_COUNT", "0"))
    env_keys = ("TORCHFT_LIGHTHOUSE", "REPLICA_GROUP_ID", "NUM_REPLICA_GROUPS", "TORCHFT_TIMEOUT_SEC", "MASTER_ADDR")
    (records / f"replica{replica}.rank{rank}.attempt{attempt}.args.json").write_text(
        json.dumps(
            {"args": {k: v for k, v in a.items() if v is not None}, "env": {k: os.environ.get(k) for k in env_keys}}
        )
    )

    inner = None
    if world > 1:  # the group's own process group (torchrun's rendezvous), for the all-reduce inside it
        dist.init_process_group("gloo", timeout=timedelta(seconds=60))
        inner = dist.group.WORLD

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 1))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def load_state_dict(sd: dict[str, Any]) -> None:
        model.load_state_dict(sd["model"])
        opt.load_state_dict(sd["opt"])

    def state_dict() -> dict[str, Any]:
        return {"model": model.state_dict(), "opt": opt.state_dict()}

    if get("fault_tolerance.process_group") not in (None, "gloo", "nccl"):
        print(f"stand-in: unsupported process group {get('fault_tolerance.process_group')}", flush=True)
        return 2
    pg_timeout = timedelta(milliseconds=get("fault_tolerance.process_group_timeout_ms") or 10000)
    manager = Manager(
        pg=ProcessGroupGloo(timeout=pg_timeout),  # nccl on a GPU node; gloo is what runs here
        load_state_dict=load_state_dict,
        state_dict=state_dict,
        min_replica_size=get("fault_tolerance.min_replica_size") or 1,
        rank=rank,
        world_size=world,
        replica_id=f"torchtitan_ft_{replica}",
        # torchtitan keeps torchft's defaults (async quorum, a weight sync at step 0); with several
        # ranks per group this torchft nightly fails that first sync on CPU ("checkpoint was not
        # staged"). The weights are seeded alike everywhere, and a group that heals receives them
        # before its step: the same recovery path, one step later.
        use_async_quorum=False,
        init_sync=False,
    )
    ftopt = OptimizerWrapper(manager, opt)

    # torchtitan's FT dataloader checkpoint: this replica's data position, every step, in its own folder.
    dl_ckpt = bool(get("checkpoint.enable")) and get("checkpoint.enable_ft_dataloader_checkpoints") is not False
    dl_dir = dump / (get("checkpoint.folder") or "checkpoint") / f"ft-replicat-{replica}"
    dl_file = dl_dir / f"dataloader.rank{rank}.json"
    position = 0
    if dl_ckpt and dl_file.exists():
        position = json.loads(dl_file.read_text())["position"]
    out = records / f"replica{replica}.rank{rank}.jsonl"
    pace = float(os.environ.get("STANDIN_STEP_SLEEP", "0"))  # tests: seconds per step on top of compute
    print(f"stand-in replica {replica} rank {rank}/{world}: target {steps} steps, data from {position}", flush=True)
    stop_file = os.environ.get("STANDIN_STOP_FILE")
    while manager.current_step() < min(steps, stop_step(stop_file)):
        ftopt.zero_grad()
        x, y = batch(replica, rank, position)
        used = position
        position += 1
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        if inner is not None:
            for g in grads:
                dist.all_reduce(g, group=inner)
                g.div_(world)
        for w in [manager.allreduce(g) for g in grads]:
            w.wait()
        committed = manager.should_commit()  # once a step: each call that commits advances the step
        if committed:
            opt.step()
        if dl_ckpt:
            dl_dir.mkdir(parents=True, exist_ok=True)
            tmp = dl_file.with_suffix(".tmp")
            tmp.write_text(json.dumps({"step": manager.current_step(), "position": position}))
            os.replace(tmp, dl_file)
        rec = {
            "t": time.time(),
            "step": manager.current_step(),
            "committed": committed,
            "position": used,
            "participants": manager.num_participants(),
            "attempt": attempt,
            "hash": state_hash(model, opt),
        }
        with out.open("a") as f:
            f.write(json.dumps(rec) + "\n")
        time.sleep(pace)
    print(f"stand-in replica {replica} rank {rank}: reached step {manager.current_step()}", flush=True)
    manager.shutdown(wait=False)
    if inner is not None:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
