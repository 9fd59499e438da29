"""A GPT-2-shaped language model, small and self-contained, for timing training steps.

nanoGPT's shape (karpathy/nanoGPT ``model.py``): learned position embeddings, pre-norm blocks
of causal self-attention and a 4x MLP with GELU, biases everywhere, the output layer tied to
the token embedding. No dropout, no weights to download: a benchmark needs the arithmetic of
the model, not what it has learned. Attention is ``F.scaled_dot_product_attention`` with
``is_causal=True``, which picks flash attention on GPUs where it can.
"""

from __future__ import annotations

import dataclasses

import torch
from torch import nn
from torch.nn import functional as F

VOCAB = 50257  # GPT-2's byte-pair vocabulary (Radford et al. 2019)


@dataclasses.dataclass(frozen=True)
class Shape:
    layers: int
    width: int  # d_model
    heads: int
    seq_len: int = 1024
    vocab: int = VOCAB

    @property
    def params(self) -> int:
        """Per block: attention 4 d^2 + 4 d, MLP 8 d^2 + 5 d, two LayerNorms 4 d; then the
        token and position embeddings and the last LayerNorm (the output layer is tied)."""
        d = self.width
        return self.layers * (12 * d * d + 13 * d) + (self.vocab + self.seq_len) * d + 2 * d


# GPT-2 small and medium (Radford et al. 2019, table 2); "1.3B" is GPT-3 XL's depth and width
# (Brown et al. 2020, table 2.1) with heads of 128 (that table's 24 heads of 128 do not make
# 2048). Their counts by ``Shape.params``: 124,439,808, 354,823,168 and 1,313,626,112.
SHAPES = {"124M": Shape(12, 768, 12), "355M": Shape(24, 1024, 16), "1.3B": Shape(24, 2048, 16)}
QUICK_SHAPES = {"tiny": Shape(2, 128, 4, seq_len=128, vocab=1024),
                "small": Shape(4, 256, 4, seq_len=256, vocab=4096)}


class Block(nn.Module):
    def __init__(self, shape: Shape):
        super().__init__()
        d = shape.width
        self.heads = shape.heads
        self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.up, self.down = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        B, T, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(d, dim=2)
        q, k, v = (t.view(B, T, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(B, T, d))
        return x + self.down(F.gelu(self.up(self.norm2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, shape: Shape):
        super().__init__()
        self.shape = shape
        self.tokens = nn.Embedding(shape.vocab, shape.width)
        self.positions = nn.Embedding(shape.seq_len, shape.width)
        self.blocks = nn.ModuleList(Block(shape) for _ in range(shape.layers))
        self.norm = nn.LayerNorm(shape.width)
        self.apply(self._init)

    @staticmethod
    def _init(module):
        # GPT-2's initialisation (nanoGPT's _init_weights): normal(0, 0.02), zero biases
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.02)
        if isinstance(module, nn.Linear):
            nn.init.zeros_(module.bias)

    def forward(self, idx, targets):
        positions = torch.arange(idx.shape[1], device=idx.device)
        x = self.tokens(idx) + self.positions(positions)
        for block in self.blocks:
            x = block(x)
        logits = self.norm(x) @ self.tokens.weight.T  # tied: the embedding is the output layer
        return F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())


def random_batch(shape: Shape, batch_size: int, device, seed: int = 0):
    """Token ids and next-token targets, uniformly random: the step's arithmetic does not
    depend on what the tokens say."""
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(shape.vocab, (batch_size, shape.seq_len + 1), generator=generator)
    return ids[:, :-1].to(device), ids[:, 1:].to(device)
