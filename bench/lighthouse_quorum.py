"""Lighthouse quorum time as the number of replica groups grows.

N lightweight clients (torchft's own LighthouseClient, no model, no process
group) ask the real Lighthouse for a quorum at the same moment; the figure is
the time from the first request to the last client holding the quorum. Each N
is repeated; medians and ranges go to bench/results/lighthouse_quorum.json and
a plot to bench/results/lighthouse_quorum.png.
"""

from __future__ import annotations

import argparse
import threading
import time
from datetime import timedelta
from typing import Any

from bench.results_io import RESULTS, spread, write_result


def one_round(n: int, timeout_s: float = 30.0) -> float:
    from torchft._torchft import LighthouseClient, LighthouseServer

    lh = LighthouseServer(bind="127.0.0.1:0", min_replicas=n, join_timeout_ms=60_000, quorum_tick_ms=20)
    try:
        addr = lh.address()
        clients = [LighthouseClient(addr, connect_timeout=timedelta(seconds=10)) for _ in range(n)]
        barrier = threading.Barrier(n + 1)
        done: list[float] = []
        errors: list[BaseException] = []

        def join(i: int) -> None:
            barrier.wait()
            try:
                clients[i].quorum(
                    replica_id=f"{i}:bench",
                    timeout=timedelta(seconds=timeout_s),
                    address=f"http://127.0.0.1:{i + 1}",
                    store_address=f"127.0.0.1:{i + 1}",
                    step=0,
                    world_size=1,
                    shrink_only=False,
                )
                done.append(time.monotonic())
            except BaseException as e:  # reported after the round
                errors.append(e)

        threads = [threading.Thread(target=join, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        barrier.wait()
        start = time.monotonic()
        for t in threads:
            t.join(timeout_s + 5)
        if errors or len(done) != n:
            raise RuntimeError(f"quorum of {n} failed: {errors[:1]}")
        return max(done) - start
    finally:
        lh.shutdown()


def plot(rows: list[dict[str, Any]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ns = [r["groups"] for r in rows]
    med = [r["quorum_s"]["median"] * 1000 for r in rows]
    lo = [m - r["quorum_s"]["min"] * 1000 for m, r in zip(med, rows, strict=True)]
    hi = [r["quorum_s"]["max"] * 1000 - m for m, r in zip(med, rows, strict=True)]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.errorbar(ns, med, yerr=[lo, hi], marker="o", capsize=3)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("replica groups (lightweight clients)")
    ax.set_ylabel("quorum time, ms (median, range)")
    ax.set_title("torchft Lighthouse: time to form a quorum")
    fig.tight_layout()
    fig.savefig(RESULTS / "lighthouse_quorum.png", dpi=110)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--groups", default="2,4,8,16,32,64", help="comma-separated group counts")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)
    rows = []
    for n in [int(x) for x in args.groups.split(",")]:
        times = [one_round(n) for _ in range(args.repeat)]
        quorum = spread(times)
        rows.append({"groups": n, "quorum_s": quorum})
        print(
            f"{n:3d} groups: quorum {quorum['median'] * 1000:7.1f} ms median "
            f"({min(times) * 1000:.1f}-{max(times) * 1000:.1f}, n={len(times)})",
            flush=True,
        )
    path = write_result("lighthouse_quorum", {"rows": rows, "repeat": args.repeat})
    plot(rows)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
