"""torchtitan 0.3 config for configs/llama3-8b-mi325x.yaml: Llama 3 8B with torchft fault tolerance.

torchtitan 0.3 selects a config with `--module <module> --config <function>`; its
shipped fault-tolerant config (`--module torchft.llama3 --config
llama3_torchft_debugmodel`) is a debug model with DiLoCo. This is torchtitan's
own `llama3_8b` (torchtitan/models/llama3/config_registry.py) turned into a
per-step fault-tolerant config, the way its torchft example is built: the FT
trainer, the FT model spec, the FT optimizer and the FT checkpoint manager
(which keeps each replica's dataloader position).

Put this file on the trainers' PYTHONPATH (the example copies it to
/shared/torchtitan/) and start torchtitan with `--module=llama3_8b_ft
--config=llama3_8b_ft`. lamplighter appends the fault-tolerance flags
(replica id, group size, process group and its timeout, min replica size,
steps, dataloader checkpoint, dump folder) from the job's YAML.
"""

from torchtitan.components.loss import ChunkedLossWrapper, CrossEntropyLoss
from torchtitan.components.metrics import MetricsProcessor
from torchtitan.components.optimizer import default_adamw
from torchtitan.components.validate import Validator
from torchtitan.config import CommConfig, TrainingConfig
from torchtitan.distributed.activation_checkpoint import SelectiveAC
from torchtitan.experiments.torchft.checkpoint import TorchFTCheckpointManager
from torchtitan.experiments.torchft.config.job_config import FaultTolerance
from torchtitan.experiments.torchft.llama3 import model_registry
from torchtitan.experiments.torchft.optimizer import TorchFTOptimizersContainer
from torchtitan.experiments.torchft.trainer import FaultTolerantTrainer
from torchtitan.hf_datasets.text_datasets import HuggingFaceTextDataLoader
from torchtitan.models.common.config_utils import decoder_vocab_size
from torchtitan.tools.profiler import Profiler


def llama3_8b_ft() -> FaultTolerantTrainer.Config:
    model_spec = model_registry("8B")
    return FaultTolerantTrainer.Config(
        loss=ChunkedLossWrapper.Config(
            loss_fn=CrossEntropyLoss.Config(global_vocab_size=decoder_vocab_size(model_spec)),
        ),
        hf_assets_path="/shared/torchtitan/assets/hf/Llama-3.1-8B",
        profiler=Profiler.Config(enable_profiling=False),
        metrics=MetricsProcessor.Config(enable_tensorboard=True),
        model_spec=model_spec,
        optimizer=TorchFTOptimizersContainer.Config(param_groups=default_adamw(lr=3e-4).param_groups),
        training=TrainingConfig(local_batch_size=1, seq_len=8192, steps=1000),
        dataloader=HuggingFaceTextDataLoader.Config(dataset="c4"),
        # Full checkpoints (model, optimizer, ...) every 500 steps by one replica: the durable fallback
        # when no group is left to heal from. Each replica's dataloader position is saved every step.
        checkpoint=TorchFTCheckpointManager.Config(interval=500, last_save_model_only=False),
        activation_checkpoint=SelectiveAC.Config(),
        # Within a group (FSDP over its 16 GPUs): above the job's torchft waits (llama3-8b-mi325x.yaml: timeout_s 120, connect 60 + quorum 180 + 120):
        # ranks that finished healing wait for the last one in their next collective (docs/torchtitan.md).
        comm=CommConfig(init_timeout_seconds=400, train_timeout_seconds=150),
        # Per-step fault tolerance (no semi_sync_method); lamplighter sets the rest from the job.
        fault_tolerance=FaultTolerance(enable=True),
        validator=Validator.Config(freq=500, steps=1200),
    )
