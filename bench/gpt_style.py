"""A small GPT of our own, in the layout of nanoGPT, for ``bench/code_changes.py``.

Written here from scratch (not a copy of anyone's file): ``bench/code_changes.py`` copies this file into its
throw-away repository as the model's source and edits it there, as a pull request would. The module paths are
nanoGPT's: ``transformer.wte`` and ``transformer.wpe`` (token and position embeddings), ``transformer.h.N`` (a
``Block``: ``ln_1``, ``attn``, a ``CausalSelfAttention`` with ``c_attn``, ``c_proj``, ``attn_dropout`` and
``resid_dropout``, ``ln_2``, ``mlp``, an ``MLP`` with ``c_fc``, ``act`` (GELU), ``c_proj`` and ``dropout``),
``transformer.ln_f`` and ``lm_head`` (its weight tied to ``wte``'s). ``LayerNorm`` is our own class around
``F.layer_norm`` (a bias that can be left out), attention goes through ``F.scaled_dot_product_attention``, and
``GPT.forward`` asserts the sequence length, so that symbolic tracing cannot capture it (``bool`` of a proxy)
and the plugin's automatic capture falls back to ``torch.export``.

``build()``: 4 blocks, 192 wide, 6 heads, a vocabulary of 2048, random weights from seed 0, in eval mode, and
its input, 2 sequences of 128 tokens.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F  # noqa: N812 (the usual name)


@dataclass(frozen=True)
class GPTConfig:
    block_size: int = 128
    vocab_size: int = 2048
    n_layer: int = 4
    n_head: int = 6
    n_embd: int = 192
    dropout: float = 0.0
    bias: bool = True


class LayerNorm(nn.Module):
    """A layer norm whose bias can be left out (``nn.LayerNorm`` before torch 2.1 could not)."""

    def __init__(self, ndim: int, bias: bool) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(input, self.weight.shape, self.weight, self.bias, 1e-5)


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention: one projection to queries, keys and values, SDPA, an output projection."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        assert config.n_embd % config.n_head == 0
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.attn_dropout = nn.Dropout(config.dropout)
        self.resid_dropout = nn.Dropout(config.dropout)
        self.n_head = config.n_head
        self.n_embd = config.n_embd
        self.dropout = config.dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.size()  # batch, sequence length, embedding width
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        q = q.view(b, t, self.n_head, c // self.n_head).transpose(1, 2)
        k = k.view(b, t, self.n_head, c // self.n_head).transpose(1, 2)
        v = v.view(b, t, self.n_head, c // self.n_head).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout if self.training else 0.0, is_causal=True)
        y = y.transpose(1, 2).contiguous().view(b, t, c)
        out: torch.Tensor = self.resid_dropout(self.c_proj(y))
        return out


class MLP(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
        self.act = nn.GELU()
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.c_fc(x)
        x = self.act(x)
        x = self.c_proj(x)
        out: torch.Tensor = self.dropout(x)
        return out


class Block(nn.Module):
    """A pre-norm transformer block: attention and an MLP, each behind a layer norm and a residual."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.ln_1 = LayerNorm(config.n_embd, bias=config.bias)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = LayerNorm(config.n_embd, bias=config.bias)
        self.mlp = MLP(config)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        out: torch.Tensor = x + self.mlp(self.ln_2(x))
        return out


class Trunk(nn.Module):
    """The parts under ``transformer.`` (nanoGPT's ``ModuleDict``, with typed attributes); ``GPT.forward`` calls
    them one by one."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.wpe = nn.Embedding(config.block_size, config.n_embd)
        self.drop = nn.Dropout(config.dropout)
        self.h = nn.ModuleList([Block(config) for _ in range(config.n_layer)])
        self.ln_f = LayerNorm(config.n_embd, bias=config.bias)


class GPT(nn.Module):
    """Token and position embeddings, ``n_layer`` blocks, a final layer norm and the language-model head."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.config = config
        self.transformer = Trunk(config)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # weight tying
        self.apply(self._init_weights)
        for name, p in self.named_parameters():  # scaled init of the residual projections, as in GPT-2
            if name.endswith("c_proj.weight"):
                torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))

    def _init_weights(self, module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                torch.nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        _, t = idx.size()
        assert t <= self.config.block_size, (
            f"cannot forward a sequence of {t} tokens, the block size is only {self.config.block_size}"
        )
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
        tok_emb = self.transformer.wte(idx)
        pos_emb = self.transformer.wpe(pos)
        x = self.transformer.drop(tok_emb + pos_emb)
        for block in self.transformer.h:
            x = block(x)
        x = self.transformer.ln_f(x)
        logits: torch.Tensor = self.lm_head(x)
        return logits


def build() -> tuple[GPT, torch.Tensor]:
    """The model (random weights from seed 0, eval mode) and its input: 2 sequences of 128 tokens."""
    torch.manual_seed(0)
    config = GPTConfig()
    model = GPT(config).eval()
    return model, torch.randint(0, config.vocab_size, (2, config.block_size))
