"""The real torchtitan 0.3 on this lab's CPU-only machine: `-m titan_cpu` in place of `-m torchtitan.train`.

The test rig's, never a GPU cluster's: the lab puts this folder on PYTHONPATH of its torchtitan jobs. Three
patches, each for a blocker torchtitan 0.3.0 hits before its first step on a machine with no GPU
(../shared/reviews/real-trainers-2026-11-26.md, section 2.2):

- `import triton` at the top of a MoE kernel module that every model imports: that module becomes a stand-in
  (its kernels run only on the MoE minimal_async_ep backend, which a llama3 never uses);
- the device: torchtitan falls back to "cuda" with no setting to change it; `device_type` and `device_module`
  become the CPU's before any other torchtitan module imports them by name;
- `torch.distributed.set_timeout`, new in torch 2.14, called after step 1: the private 2.13 function it replaced.

The attention backend (SDPA instead of FlexAttention, which torch 2.13 compiles for CPU inference only) is the
config module's business (titan_cpu_cfg.py). Then torchtitan.train runs as `__main__`, with the same argv.
"""

from __future__ import annotations

import runpy
import sys
import types


class _AnyAttr(types.ModuleType):
    """A module whose every attribute is a no-op decorator/callable: enough for `@triton.jit(...)` at import."""

    def __getattr__(self, name: str) -> object:
        if name.startswith("__"):
            raise AttributeError(name)

        def anything(*args: object, **kwargs: object) -> object:
            if len(args) == 1 and callable(args[0]) and not kwargs:
                return args[0]
            return anything

        return anything


def _stub_triton_kernels() -> None:
    """The one module that imports triton: replaced by a stand-in (a stand-in `triton` confuses torch itself)."""
    try:
        import triton  # noqa: F401

        return
    except ImportError:
        pass
    name = "torchtitan.distributed.minimal_async_ep.kernels"
    sys.modules.setdefault(name, _AnyAttr(name))


class _CpuDevice(types.ModuleType):
    """What torchtitan calls on its device module (torch.cuda's API), answered for the CPU."""

    def __init__(self) -> None:
        super().__init__("titan_cpu_device")

    def set_device(self, device: object) -> None:
        pass

    def current_device(self) -> int:
        return 0  # an int: barrier(device_ids=[...]) takes it

    def device_count(self) -> int:
        return 1

    def is_available(self) -> bool:
        return True

    def synchronize(self, device: object = None) -> None:
        pass

    def empty_cache(self) -> None:
        pass

    def reset_peak_memory_stats(self, device: object = None) -> None:
        pass

    def get_device_name(self, device: object = None) -> str:
        return "cpu"

    def get_device_properties(self, device: object = None) -> types.SimpleNamespace:
        import os

        return types.SimpleNamespace(total_memory=os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))

    def memory_stats(self, device: object = None) -> dict[str, int]:
        return {"active_bytes.all.peak": 0, "reserved_bytes.all.peak": 0, "num_alloc_retries": 0, "num_ooms": 0}

    def max_memory_allocated(self, device: object = None) -> int:
        return 0

    def max_memory_reserved(self, device: object = None) -> int:
        return 0


def enable_cpu() -> None:
    _stub_triton_kernels()
    import torch.distributed as dist
    from torch.distributed import distributed_c10d

    if not hasattr(dist, "set_timeout"):
        dist.set_timeout = distributed_c10d._set_pg_timeout  # type: ignore[attr-defined]
    import torchtitan.tools.utils as utils

    utils.device_type = "cpu"
    utils.device_module = _CpuDevice()


def main() -> None:
    enable_cpu()
    sys.argv = ["torchtitan.train", *sys.argv[1:]]
    runpy.run_module("torchtitan.train", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
