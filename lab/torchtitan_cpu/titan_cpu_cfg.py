"""torchtitan 0.3's fault-tolerant llama3 debug model, sized for this lab's 2 CPU cores (`--module=titan_cpu_cfg`).

Two configs, both torchtitan's own `llama3_torchft_debugmodel` with CPU settings:
- `llama3_ft_cpu`: per-step fault tolerance (semi_sync_method None: every step is a quorum and an all-reduce);
- `llama3_ft_diloco_cpu`: torchtitan's DiLoCo, one fragment (after each sync every replica holds the same
  parameters, which the state hash compares), syncing every TT_SYNC_STEPS inner steps (default 5).

CPU settings: SDPA attention in every layer (torch 2.13 compiles FlexAttention for CPU inference only), gloo,
profiler and validation off, float32, no CUDA graphs, sequence 128 x batch 4. The tokenizer and the data are
the lab's own, generated (make_assets.py): TT_ASSETS is the tokenizer folder, TT_DATA the data folder.
"""

from __future__ import annotations

import os

from torchtitan.experiments.torchft.llama3.config_registry import llama3_torchft_debugmodel
from torchtitan.models.common.attention import ScaledDotProductAttention


def _cpu(semi_sync: str | None):  # type: ignore[no-untyped-def]
    config = llama3_torchft_debugmodel()
    for layer in config.model_spec.model.layers:
        layer.attention.inner_attention = ScaledDotProductAttention.Config()
    config.hf_assets_path = os.environ["TT_ASSETS"]
    config.dataloader.dataset = "c4_test"
    config.dataloader.dataset_path = os.environ["TT_DATA"]
    config.profiler.enable_profiling = False
    config.validator.enable = False
    config.training.seq_len = int(os.environ.get("TT_SEQ_LEN", "128"))
    config.training.local_batch_size = 4
    config.training.dtype = "float32"
    config.training.mixed_precision_param = "float32"
    config.training.disable_cuda_graphs = True
    config.checkpoint.interval = 1_000_000  # only the per-replica dataloader checkpoint, every step
    ft = config.fault_tolerance
    ft.process_group = "gloo"
    ft.semi_sync_method = semi_sync
    ft.num_fragments = 1
    ft.sync_steps = int(os.environ.get("TT_SYNC_STEPS", "5"))
    return config


def llama3_ft_cpu():  # type: ignore[no-untyped-def]
    return _cpu(None)


def llama3_ft_diloco_cpu():  # type: ignore[no-untyped-def]
    return _cpu("diloco")
