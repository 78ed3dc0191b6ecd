"""A small decoder-only transformer language model (torch.nn only).

Token + learned position embeddings, N pre-norm blocks of causal
self-attention and an MLP, tied output head. Weights come from the config's
seed so every replica group starts from the same weights without a transfer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

    from lamplighter.configs.schema import ModelConfig


def build_model(cfg: ModelConfig) -> torch.nn.Module:
    """The model for `cfg`, initialised from `cfg.seed` (identical in every process)."""
    import torch
    from torch import nn
    from torch.nn import functional as F

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.heads = cfg.heads
            self.ln1 = nn.LayerNorm(cfg.dim)
            self.qkv = nn.Linear(cfg.dim, 3 * cfg.dim)
            self.proj = nn.Linear(cfg.dim, cfg.dim)
            self.ln2 = nn.LayerNorm(cfg.dim)
            self.mlp = nn.Sequential(nn.Linear(cfg.dim, 4 * cfg.dim), nn.GELU(), nn.Linear(4 * cfg.dim, cfg.dim))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            b, t, d = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
            q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
            att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(att.transpose(1, 2).reshape(b, t, d))
            return x + self.mlp(self.ln2(x))

    class TinyLM(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tok = nn.Embedding(cfg.vocab_size, cfg.dim)
            self.pos = nn.Embedding(cfg.seq_len, cfg.dim)
            self.blocks = nn.ModuleList(Block() for _ in range(cfg.layers))
            self.ln_f = nn.LayerNorm(cfg.dim)
            # Small embeddings: the tied head starts near uniform logits (loss ~ log(vocab)).
            nn.init.normal_(self.tok.weight, std=0.02)
            nn.init.normal_(self.pos.weight, std=0.02)

        def forward(self, tokens: torch.Tensor) -> torch.Tensor:
            pos = torch.arange(tokens.shape[1], device=tokens.device)
            x = self.tok(tokens) + self.pos(pos)
            for blk in self.blocks:
                x = blk(x)
            return self.ln_f(x) @ self.tok.weight.T  # tied head: logits over the vocabulary

    # A private generator state: building the model must not depend on, or
    # disturb, anything else that drew random numbers in this process.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.seed)
        return TinyLM()


def lm_loss(model: torch.nn.Module, tokens: torch.Tensor) -> torch.Tensor:
    """Next-token cross-entropy over a batch of token sequences (batch, seq_len)."""
    from torch.nn import functional as F

    logits = model(tokens[:, :-1])
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))
