"""Heal bandwidth: how fast a restarted replica copies model + optimizer state from a live peer, per
torchft checkpoint transport, against state size, next to this machine's memory-copy bandwidth.

    python -m bench.heal_bandwidth [--sizes 10MB,100MB,1GB,4GB] [--reps 3] [--transports http,pg,...]

For each size and transport: a live peer process builds a state of that size (model weights plus
AdamW's exp_avg and exp_avg_sq, float32, in tensors of --chunk-mb) and serves it with
send_checkpoint; for each repetition a fresh process (as a restarted trainer is) calls
recv_checkpoint over 127.0.0.1 and hashes what arrived: a repetition whose hash differs from the
sender's is reported as not verified and its number is not used. Heal time is the receiver's
recv_checkpoint call; GB/s = state bytes / heal time (1 GB = 1e9 bytes).

The limit, measured in the same run: memory-copy bandwidth (torch copy_ of the same tensors into
resident ones), and a raw loopback TCP socket (transport 'tcp'). The target regime: 400 Gb/s
(50 GB/s) links between MI325X nodes.

Also reported: peak RSS of both processes; for HTTP, the time split into socket I/O and
(de)serialisation on each side, and (sizes up to --profile-max) serialisation alone without a
network. Results: bench/results/heal_bandwidth.json and heal_bandwidth.png; progress on stderr.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import heal_peers
from bench.results_io import RESULTS, environment, spread, write_result

NAME = "heal_bandwidth"
BUILD = Path(__file__).resolve().parent.parent / "build" / "bench"  # as bench.jobspec, without its imports
PEER_LOG = BUILD / "heal_bandwidth-peers.log"
DEFAULT_SIZES = "10MB,100MB,1GB,4GB"
DEFAULT_TRANSPORTS = "http,http-torchft,http-c8,pg,pg-inplace,pg-inplace-model,tcp"
LINK_GBIT_S = 400  # one MI325X node's NIC link in the target regime
GIB = 1 << 30
UNITS = {"KB": 10**3, "MB": 10**6, "GB": 10**9}
# Peak memory of one transfer, in units of the state size, over both processes (the driver checks it
# against what is available before it starts one): the sender's state plus the receiver's copy;
# pg-inplace allocates the receiver's own state before the transfer; none keeps a serialised copy.
MEMORY_FACTOR = {"http": 2.0, "http-torchft": 2.0, "pg": 2.0, "pg-inplace": 2.0, "pg-inplace-model": 2.0, "tcp": 2.0}
PROCESS_OVERHEAD = 1.0 * GIB  # two interpreters with torch imported, socket and pickle buffers


def log(msg: str) -> None:
    print(f"[heal] {msg}", file=sys.stderr, flush=True)


def parse_size(text: str) -> int:
    text = text.strip().upper()
    for unit, mult in UNITS.items():
        if text.endswith(unit):
            return int(float(text.removesuffix(unit)) * mult)
    return int(text)


def size_label(n: int) -> str:
    return f"{n / 10**9:g} GB" if n >= 10**9 else f"{n / 10**6:g} MB"


def check_transport(name: str) -> str:
    if name in MEMORY_FACTOR or (name.startswith("http-c") and name[6:].isdigit()):
        return name
    raise argparse.ArgumentTypeError(
        f"unknown transport {name!r} (http, http-torchft, http-cN, pg, pg-inplace, pg-inplace-model, tcp)"
    )


def describe(name: str) -> str:
    if name == "http":
        return (
            "the reference trainer's heal (transport http, the default): torchft's HTTPTransport server, received "
            "by lamplighter's weights-only loader into the receiver's own tensors"
        )
    if name == "http-torchft":
        return "torchft HTTPTransport(num_chunks=0) on both sides: the Manager's default"
    if name.startswith("http-c"):
        return f"torchft HTTPTransport(num_chunks={name[6:]}): {name[6:]} parallel GETs"
    return {
        "pg": "torchft PGTransport over ProcessGroupGloo, receiver allocates (lamplighter's checkpoint_transport: pg)",
        "pg-inplace": "torchft PGTransport(state_dict=...) over ProcessGroupGloo: received into the receiver's tensors "
        "(the reference trainer with transport pg: it creates its optimizer state when it starts)",
        "pg-inplace-model": "as pg-inplace, but only the weights exist in the receiver (optimizer state allocated)",
        "tcp": "reference, not a torchft transport: raw tensor bytes over one loopback TCP socket into the "
        "receiver's resident tensors (the wire's limit)",
    }[name]


def available_bytes() -> int:
    import psutil

    return int(psutil.virtual_memory().available)


class Peer:
    """One spawned process running a heal_peers function; dict messages both ways."""

    def __init__(self, ctx: Any, target: Callable[..., None], *args: Any) -> None:
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=target, args=(child, *args), daemon=True)
        self.proc.start()
        child.close()

    def recv(self, timeout_s: float) -> dict[str, Any]:
        if not self.conn.poll(timeout_s):
            raise TimeoutError(f"pid {self.proc.pid}: no answer in {timeout_s:.0f} s")
        msg: dict[str, Any] = self.conn.recv()
        if "error" in msg:
            raise RuntimeError(f"pid {self.proc.pid}: {msg['error']} (its stderr: {PEER_LOG})")
        return msg

    def send(self, msg: dict[str, Any]) -> None:
        self.conn.send(msg)

    @classmethod
    def ask_once(cls, ctx: Any, target: Callable[..., None], *args: Any, timeout_s: float) -> dict[str, Any]:
        """Start a peer, take its one answer, let it go."""
        p = cls(ctx, target, *args)
        try:
            return p.recv(timeout_s)
        finally:
            p.close()

    def close(self) -> None:
        self.proc.join(timeout=30)
        if self.proc.is_alive():  # our own child only
            self.proc.kill()
            self.proc.join()
        self.conn.close()


def run_memcpy(ctx: Any, nbytes: int, chunk: int, reps: int, timeout_s: float) -> dict[str, Any]:
    r = Peer.ask_once(ctx, heal_peers.memcpy_main, nbytes, chunk, max(3, reps), timeout_s=timeout_s)
    gb = r["bytes"] / 1e9
    return {
        "bytes": r["bytes"],
        "threads": r["threads"],
        "copy_gbps": spread([gb / s for s in r["copy_s"]]),
        "clone_gbps": spread([gb / s for s in r["clone_s"]]),
    }


def run_profile(ctx: Any, nbytes: int, chunk: int, timeout_s: float) -> dict[str, Any]:
    r = Peer.ask_once(ctx, heal_peers.profile_main, nbytes, chunk, timeout_s=timeout_s)
    gb = r["bytes"] / 1e9
    return {
        **r,
        "save_null_gbps": gb / r["save_null_s"],
        "save_mem_gbps": gb / r["save_mem_s"],
        "load_mem_gbps": gb / r["load_mem_s"],
    }


def run_transport(
    ctx: Any, transport: str, nbytes: int, chunk: int, reps: int, seed: int, timeout_s: float
) -> dict[str, Any]:
    """One live peer for all repetitions; a fresh healing peer per repetition."""

    def receiver() -> Peer:
        return Peer(ctx, heal_peers.receiver_main, transport, nbytes, chunk, timeout_s)

    sender = Peer(ctx, heal_peers.sender_main, transport, nbytes, chunk, seed, timeout_s)
    # The first healing peer imports torch while the live one builds its state: nothing is timed yet.
    first: Peer | None = receiver()
    reps_out: list[dict[str, Any]] = []
    try:
        ready = sender.recv(timeout_s)
        for rep in range(reps):
            recv, first = first or receiver(), None
            try:
                rready = recv.recv(timeout_s)
                sender.send({"cmd": "offer", "rendezvous": rep})
                offered = sender.recv(timeout_s)
                go: dict[str, Any] = {
                    "store_port": ready.get("store_port"),
                    "port": offered.get("port"),
                    "rendezvous": rep,
                }
                if "metadata" in offered:
                    # The Manager passes metadata() as is; here the host is pinned to loopback.
                    host = offered["metadata"].split("/")[2].rsplit(":", 1)[0]
                    go["metadata"] = offered["metadata"].replace(f"//{host}:", "//127.0.0.1:", 1)
                recv.send(go)
                got = recv.recv(timeout_s)
                if transport.startswith("http"):
                    sender.send({"cmd": "release"})
                done = sender.recv(timeout_s)
            finally:
                recv.close()
            ok = got["digest"] == ready["digest"]
            row = {
                "rep": rep,
                "heal_s": got["recv_s"],
                "gbps": ready["state_bytes"] / 1e9 / got["recv_s"],
                "verified": ok,
                "receiver_maxrss_mb": got["maxrss_mb"],
                "receiver_rss_before_mb": rready["rss_ready_mb"],
                "receiver_rss_after_mb": got["rss_after_mb"],
                "receiver_split": got["receiver_split"],
                "sender_split": done.get("sender_split", {}),
                "send_s": done.get("send_s"),
            }
            reps_out.append(row)
            log(
                f"{size_label(nbytes):>7} {transport:<10} rep {rep + 1}/{reps}: {got['recv_s']:.3f} s = "
                f"{row['gbps']:.2f} GB/s, {'bit-identical' if ok else 'HASH MISMATCH'}, "
                f"receiver peak RSS {got['maxrss_mb']:.0f} MB"
            )
        sender.send({"cmd": "exit"})
        bye = sender.recv(timeout_s)
    finally:
        if first is not None:
            first.close()
        sender.close()
    good = [r for r in reps_out if r["verified"]]
    out: dict[str, Any] = {
        "transport": transport,
        "description": describe(transport),
        "state_bytes": ready["state_bytes"],
        "n_tensors": ready["n_tensors"],
        "verified": len(good) == len(reps_out),
        "reps": reps_out,
        "sender_build_s": ready["build_s"],
        "sender_rss_idle_mb": ready["rss_idle_mb"],
        "sender_maxrss_mb": bye["maxrss_mb"],
        "receiver_maxrss_mb": max(r["receiver_maxrss_mb"] for r in reps_out),
    }
    if good:
        out["heal_s"] = spread([r["heal_s"] for r in good])
        out["gbps"] = spread([r["gbps"] for r in good])
        out["split"] = summarize_split(good)
    return out


def summarize_split(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians of where the time went: socket I/O vs the rest, per side (HTTP only)."""
    split: dict[str, Any] = {}
    for side in ("sender_split", "receiver_split"):
        io = [r[side]["io_s"] for r in rows if "io_s" in r[side]]
        tot = [r[side]["total_s"] for r in rows if "total_s" in r[side]]
        if io and tot:
            split[side] = {
                "socket_io_s": statistics.median(io),
                "other_s": statistics.median(t - i for t, i in zip(tot, io, strict=True)),
                "total_s": statistics.median(tot),
            }
    sends = [r["send_s"] for r in rows if r.get("send_s")]
    if sends:
        split["sender_send_s"] = statistics.median(sends)
    return split


def plot(data: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    for tp in data["config"]["transports"]:
        pts = [(r["state_bytes"], r["gbps"]) for r in data["results"] if r["transport"] == tp and "gbps" in r]
        if not pts:
            continue
        xs = [p[0] / 1e9 for p in pts]
        med = [p[1]["median"] for p in pts]
        err = [[p[1]["median"] - p[1]["min"] for p in pts], [p[1]["max"] - p[1]["median"] for p in pts]]
        style = ":" if tp == "tcp" else "-"
        ax.errorbar(xs, med, yerr=err, marker="o", linestyle=style, capsize=3, label=tp)
    copy = [m["copy_gbps"]["median"] for m in data["memcpy"].values() if "copy_gbps" in m]
    if copy:
        limit = copy[-1]  # the largest size's: out of cache, what a real state meets
        ax.axhline(limit, color="k", linestyle="--", label=f"memcpy here ({limit:.1f} GB/s)")
        sizes = [m["bytes"] / 1e9 for m in data["memcpy"].values() if "copy_gbps" in m]
        ax.plot(sizes, copy, "kx", label="memcpy measured per size")
    ax.axhline(LINK_GBIT_S / 8, color="tab:gray", linestyle="-.", label=f"{LINK_GBIT_S} Gb/s link (MI325X cluster)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("model + optimizer state, GB")
    ax.set_ylabel("heal bandwidth, GB/s (state / recv_checkpoint time)")
    env = data["environment"]
    ax.set_title(f"torchft heal over loopback, {env['host_cpus']} cores, torchft {env['torchft']}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m bench.heal_bandwidth",
        description=__doc__,
        epilog=heal_peers.__doc__.split("\n\n", 2)[2] if heal_peers.__doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--sizes", default=DEFAULT_SIZES, help=f"state sizes, decimal units (default {DEFAULT_SIZES})")
    ap.add_argument("--reps", type=int, default=3, help="repetitions per size and transport (default 3)")
    ap.add_argument(
        "--transports",
        default=DEFAULT_TRANSPORTS,
        help=f"comma-separated, see below (default {DEFAULT_TRANSPORTS})",
    )
    ap.add_argument("--chunk-mb", type=float, default=32, help="size of one state tensor, MB (default 32)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument(
        "--profile-max", default="1GB", help="largest size for the network-free serialisation profile (3x memory)"
    )
    ap.add_argument("--timeout-s", type=float, default=300, help="per transfer and per process answer")
    ap.add_argument("--out", type=Path, default=None, help=f"result JSON (default {RESULTS / (NAME + '.json')})")
    ap.add_argument("--no-plot", action="store_true")
    ap.add_argument("--replot", action="store_true", help="only redraw the plot from the result JSON")
    args = ap.parse_args(argv)
    if args.replot:
        path = args.out or RESULTS / f"{NAME}.json"
        plot(json.loads(path.read_text()), path.with_suffix(".png"))
        log(f"wrote {path.with_suffix('.png')}")
        return 0
    sizes = [parse_size(s) for s in args.sizes.split(",") if s]
    transports = [check_transport(t.strip()) for t in args.transports.split(",") if t.strip()]
    chunk = int(args.chunk_mb * 1e6)
    profile_max = parse_size(args.profile_max)
    BUILD.mkdir(parents=True, exist_ok=True)
    PEER_LOG.write_text("")  # one run's peer output, not every run's
    os.environ[heal_peers.LOG_ENV] = str(PEER_LOG)  # inherited by the spawned peers
    ctx = mp.get_context("spawn")  # fresh interpreters: no forked torch state, a healing peer starts clean
    t_start = time.monotonic()
    data: dict[str, Any] = {
        "config": {
            "sizes": sizes,
            "reps": args.reps,
            "transports": transports,
            "chunk_bytes": chunk,
            "state_layout": "float32; weights + AdamW exp_avg + exp_avg_sq (a third each) in tensors of "
            "chunk_bytes, a step tensor per parameter, non-tensor leaves; wrapped as the Manager sends it",
            "heal_time": "the healing process's recv_checkpoint call (fresh process per repetition)",
            "gb": "1e9 bytes",
        },
        "target": {
            "link_gbit_s": LINK_GBIT_S,
            "link_GBps": LINK_GBIT_S / 8,
            "note": "400 Gb/s NIC links between MI325X nodes; a heal crosses one link per receiving rank",
        },
        # The machine is shared: the load around the run says how much to trust its spread.
        "loadavg_start": os.getloadavg(),
        "memcpy": {},
        "serialise_profile": {},
        "results": [],
    }
    log(f"sizes {[size_label(s) for s in sizes]}, transports {transports}, {args.reps} reps; peers' stderr: {PEER_LOG}")
    for nbytes in sizes:
        label = size_label(nbytes)
        avail = available_bytes()
        if 2 * nbytes + PROCESS_OVERHEAD < 0.8 * avail:
            data["memcpy"][label] = m = run_memcpy(ctx, nbytes, chunk, args.reps, args.timeout_s)
            log(f"{label:>7} memcpy {m['copy_gbps']['median']:.2f} GB/s (fresh pages {m['clone_gbps']['median']:.2f})")
        else:
            data["memcpy"][label] = {"skipped": f"needs 2x {label}, {avail / GIB:.1f} GiB available"}
        if nbytes <= profile_max and 3 * nbytes + PROCESS_OVERHEAD < 0.8 * available_bytes():
            data["serialise_profile"][label] = p = run_profile(ctx, nbytes, chunk, args.timeout_s)
            log(
                f"{label:>7} _streaming_save {p['save_null_gbps']:.2f} GB/s to a null sink, "
                f"{p['save_mem_gbps']:.2f} to memory; _streaming_load {p['load_mem_gbps']:.2f} GB/s from memory"
            )
        for tp in transports:
            need = MEMORY_FACTOR[tp.split("-c")[0] if tp.startswith("http") else tp] * nbytes + PROCESS_OVERHEAD
            avail = available_bytes()
            if need > 0.8 * avail:
                why = f"needs ~{need / GIB:.1f} GiB (sender + receiver), {avail / GIB:.1f} GiB available"
                log(f"{label:>7} {tp}: skipped, {why}")
                data["results"].append({"transport": tp, "size": label, "state_bytes": nbytes, "skipped": why})
                continue
            try:
                r = run_transport(ctx, tp, nbytes, chunk, args.reps, args.seed, args.timeout_s)
            except (TimeoutError, RuntimeError) as e:  # one broken transfer does not lose the others
                log(f"{label:>7} {tp}: FAILED: {e}")
                r = {"transport": tp, "state_bytes": nbytes, "verified": False, "error": str(e)}
            r["size"] = label
            data["results"].append(r)
            if "gbps" in r:
                log(
                    f"{label:>7} {tp:<10} median {r['gbps']['median']:.2f} GB/s "
                    f"[{r['gbps']['min']:.2f}-{r['gbps']['max']:.2f}], sender peak RSS {r['sender_maxrss_mb']:.0f} MB"
                )
    data["wall_s"] = time.monotonic() - t_start
    data["loadavg_end"] = os.getloadavg()
    if args.out is None:
        path = write_result(NAME, data)
    else:
        path = args.out
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"name": NAME, "environment": environment(), **data}, indent=2) + "\n")
    log(f"wrote {path}")
    if not args.no_plot:
        png = path.with_suffix(".png")
        plot(json.loads(path.read_text()), png)
        log(f"wrote {png}")
    print(json.dumps({"result": str(path), "wall_s": round(data["wall_s"], 1)}))
    return 0 if all(r.get("verified", True) for r in data["results"]) else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    raise SystemExit(main())
