"""A torchft trainer that is not lamplighter's: it imports no lamplighter code and writes none of its files.

It stands for what users run (torchtitan, their own torchft loop): torchft's
Manager and OptimizerWrapper with torchft's defaults, started directly or by
torchrun. With several ranks per group it has the HSDP shape: gradients are
averaged inside the group over the default process group (torchrun's
rendezvous, gloo) and across replica groups by torchft, so every rank of
every group holds the same weights.

(Only with --lamplighter-heartbeat does it call lamplighter's public
heartbeat API, as a trainer that wants the finer signal would.)

For the tests it appends one JSON line per committed step to
`<out>/g<group>.r<rank>.jsonl` with a sha256 of its model and optimizer
state, in its own format: lamplighter does not read it, the tests do.

    python ft_trainer.py --group 1 --steps 300 --out DIR       # one process
    torchrun --nproc_per_node=2 ... ft_trainer.py --group 1 ...  # one group of 2 ranks
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torchft.manager import Manager
from torchft.optim import OptimizerWrapper
from torchft.process_group import ProcessGroupGloo


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


def batch(step: int, group: int, rank: int, size: int, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(step * 1_000_003 + group * 1009 + rank)
    x = torch.randn(size, dim, generator=g)
    return x, x.sum(dim=1, keepdim=True).tanh()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--group", type=int, default=int(os.environ.get("REPLICA_GROUP_ID", "0")))
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--dim", type=int, default=32)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument(
        "--target-file",
        default=None,
        help="a file that may hold a smaller target step, read every step (a test ends the run when it is done)",
    )
    ap.add_argument(
        "--pg-timeout",
        type=float,
        default=10.0,
        help="seconds before a collective across groups fails (the job's hang timeout must exceed it)",
    )
    ap.add_argument("--inner-timeout", type=float, default=30.0, help="seconds before the group's own collectives fail")
    ap.add_argument("--step-sleep", type=float, default=0.0, help="seconds per step on top of compute (pacing)")
    ap.add_argument(
        "--lamplighter-heartbeat",
        action="store_true",
        help="also call lamplighter's public heartbeat API after each step (the one lamplighter import it may make)",
    )
    args = ap.parse_args()

    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    inner = None
    if world > 1:  # torchrun's rendezvous: the group's own process group, for the all-reduce inside the group
        dist.init_process_group("gloo", timeout=timedelta(seconds=args.inner_timeout))
        inner = dist.group.WORLD

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(args.dim, args.dim), nn.ReLU(), nn.Linear(args.dim, 1))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def load_state_dict(sd: dict[str, object]) -> None:
        model.load_state_dict(sd["model"])  # type: ignore[arg-type]
        opt.load_state_dict(sd["opt"])  # type: ignore[arg-type]

    def state_dict() -> dict[str, object]:
        return {"model": model.state_dict(), "opt": opt.state_dict()}

    manager = Manager(
        pg=ProcessGroupGloo(timeout=timedelta(seconds=args.pg_timeout)),
        load_state_dict=load_state_dict,
        state_dict=state_dict,
        min_replica_size=1,
        rank=rank,
        world_size=world,
        replica_id=f"ft_trainer_{args.group}",
    )
    ftopt = OptimizerWrapper(manager, opt)
    beat = None
    if args.lamplighter_heartbeat:
        from lamplighter.trainer.heartbeat import beat
    out = Path(args.out) / f"g{args.group}.r{rank}.jsonl"
    out.parent.mkdir(parents=True, exist_ok=True)
    print(f"[{args.group}/{rank}] started, world {world}, target {args.steps} steps", flush=True)
    target = args.steps
    while manager.current_step() < target:
        ftopt.zero_grad()
        x, y = batch(manager.current_step(), args.group, rank, args.batch, args.dim)
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        if inner is not None:
            for g in grads:
                dist.all_reduce(g, group=inner)
                g.div_(world)
        for w in [manager.allreduce(g) for g in grads]:
            w.wait()
        ftopt.step()  # applies the update only if every participant committed (manager.should_commit)
        step = manager.current_step()
        if beat is not None:
            beat(step)
        with out.open("a") as f:
            f.write(json.dumps({"t": time.time(), "step": step, "hash": state_hash(model, opt)}) + "\n")
        if args.step_sleep:
            time.sleep(args.step_sleep)
        if args.target_file and os.path.exists(args.target_file):
            with open(args.target_file) as f:
                target = min(args.steps, int(f.read().strip() or args.steps))
    print(f"[{args.group}/{rank} - step {manager.current_step()}] reached the target", flush=True)
    manager.shutdown(wait=False)
    if inner is not None:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
