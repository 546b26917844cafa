"""A bench of real code changes: does the gate catch the edits pull requests make, and does it blame the right module?

    .venv/bin/pip install -c requirements/test.txt -r requirements/bench.txt     # timm, transformers, vit-pytorch, once
    .venv/bin/python bench/code_changes.py --out bench/code_changes.jsonl --neutral-repeats 3
    .venv/bin/python bench/code_changes.py --out q.jsonl --modes against --families gpt-style --changes gpt-gelu-tanh
    .venv/bin/python bench/code_changes.py --out q.jsonl -- --fxprof-schedule alternate   # pytest arguments
    .venv/bin/python bench/code_changes.py --out bench/code_changes.jsonl --summary \\
        --summary-json bench/code_changes_summary.json                 # the tables of what the file holds
    .venv/bin/python bench/code_changes.py --out q.jsonl --verify      # every edit applied, built, timed: no pytest
    .venv/bin/python bench/code_changes.py --out bench/code_changes_compiled.jsonl --compiled --modes against \\
        --families gpt-style   # the same edits to torch.compile'd models

Through the real command line, on a temporary git repository (a ``tempfile`` directory, removed at the end
whatever ends the run). Its base commit holds the source of four model families under ``zoo/``, a
``zoo/build.py`` that builds each model with its input (random weights from seed 0, eval mode, CPU), and
``test_zoo.py``, one test per model, ``test_zoo.py::test_model[<model>]``, that calls the ``fxprof`` fixture.
Each change and each neutral edit is one commit on top of the base: exact string replacements in the model's
source (a replacement whose text is not found exactly once, in the class it names, stops the bench with the file
and the missing text: the installed version's source differs from the one the edit was written for).

Families (the third-party files are copied from the installed package at run time, their relative imports made
absolute, ``from ...activations import`` becoming ``from transformers.activations import``; none is committed
to this project; ``vit-pytorch`` needs ``vit-pytorch`` and ``einops`` installed beside them):

* ``gpt-style``: ``gpt``, our own GPT of ``bench/gpt_style.py`` (nanoGPT's layout, 4 blocks, 192 wide, 6 heads,
  vocabulary 2048; attention through SDPA; an ``assert`` on the sequence length, so that the capture falls back
  to ``torch.export``), 2 sequences of 128 tokens.
* ``transformers``: ``bert``, ``transformers/models/bert/modeling_bert.py``'s ``BertModel`` from a ``BertConfig``
  (4 layers, 256 wide, 4 heads, MLP 1024, vocabulary 2048; SDPA attention), 2 sequences of 128 tokens.
* ``timm``: ``convnext``, ``timm/models/convnext.py``'s ``ConvNeXt`` as ``convnext_atto`` makes it (depths 2, 2,
  6, 2, dims 40 to 320, 1x1-convolution MLPs), 2 images of 160 x 160; its ``@register_model`` lines and its
  ``register_model_deprecations`` call are taken out of the copy (timm's own registry keeps the originals).
* ``torchvision``: ``resnet18``, ``torchvision/models/resnet.py``'s ``ResNet(BasicBlock, [2, 2, 2, 2])``
  (weights=None), 1 image of 160 x 160; its ``@register_model()`` lines are taken out of the copy
  (torchvision refuses a name registered twice).
* ``vit-pytorch``: ``cait``, ``vit_pytorch/cait.py``'s ``CaiT`` (einops throughout: ``rearrange``, ``repeat``,
  ``einsum``; talking-heads attention, ``LayerScale``): images of 128 x 128 in 64 patches of 16, 256 wide, 4
  layers then 1 class-attention layer, 8 heads of 64, MLP 512, 1000 classes; 8 images. Its attention and its
  feed-forward both lie at ``patch_transformer.layers.*.*.fn`` once indices fold (a list of pairs), so that its
  changes' class tells them apart; the class-attention layer (``cls_transformer``, 8 % of the time) holds instances
  of the same classes, inside or on the path to which nothing counts as outside.
* ``vit-pytorch-cct``: ``cct``, the same library's ``vit_pytorch/cct.py``'s ``CCT`` (compact convolutional
  transformer): images of 64 x 64, two 3 x 3 convolutions each pooled by 2 into 256 tokens, 192 wide, 4 layers of 4
  heads, MLP 384, 100 classes; 2 images. einops in its tokenizer stops symbolic tracing, which keeps ``tokenizer``
  and ``classifier`` whole (2 nodes); the automatic capture resolves it further through ``torch.export``.

Each forward takes 10 to 25 ms on one thread here (CaiT's 60 to 80 ms). Changes, with what each should blame (a
module pattern, block indices as ``*``, and the class):

* ``gpt-attention-by-hand``: SDPA replaced by ``softmax(q @ k^T / sqrt(d))`` under a causal mask built in the
  forward: ``transformer.h.*.attn``, ``CausalSelfAttention``.
* ``gpt-heads-loop``: SDPA called once per head in a Python loop, the heads concatenated: ``transformer.h.*.attn``.
* ``gpt-proj-unfused``: the attention's output projection ``c_proj(y)`` as ``y @ w.t() + b`` (addmm split):
  ``transformer.h.*.attn``.
* ``gpt-qkv-contiguous``: ``.contiguous()`` after each of the three head transposes: ``transformer.h.*.attn``.
* ``gpt-gelu-tanh``: the MLP's ``act`` (GELU) replaced by the tanh formula: ``transformer.h.*.mlp``, ``MLP``.
* ``gpt-mlp-double``: the GELU run in float64 (``act(x.double()).float()``): ``transformer.h.*.mlp``, ``MLP``.
* ``gpt-mlp-einsum``: ``c_fc(x)`` as ``einsum("btc,hc->bth", x, w) + b``: ``transformer.h.*.mlp``, ``MLP``.
* ``gpt-layernorm-by-hand``: our ``LayerNorm`` as mean, variance and ``rsqrt`` instead of ``F.layer_norm`` (every
  norm of the model): ``transformer.h.*.ln_?``, ``LayerNorm``.
* ``gpt-mlp-nan-check``: the MLP raises on a non-finite activation (``if not torch.isfinite(x).all()``), a
  data-dependent branch: under ``torch.compile`` a graph break in every block: ``transformer.h.*.mlp``, ``MLP``.
* ``gpt-norm-custom-op``: our ``LayerNorm`` through an opaque custom op (``torch.library.custom_op``), as a team's own
  kernel would be: under ``torch.compile`` nothing fuses into it: ``transformer.h.*.ln_?``, ``LayerNorm``.
* ``gpt-mlp-wider``: the MLP 5 times the width instead of 4: ``transformer.h.*.mlp``, ``MLP``.
* ``bert-eager-attention``: ``BertSelfAttention`` calls ``eager_attention_forward`` (matmul, softmax, matmul)
  instead of the configured SDPA: ``encoder.layer.*.attention.self``, ``BertSelfAttention``.
* ``bert-gelu-tanh``: ``BertIntermediate``'s activation by the tanh formula: ``encoder.layer.*.intermediate``,
  ``BertIntermediate``.
* ``bert-layernorm-by-hand``: ``BertSelfOutput``'s residual layer norm by hand (mean, variance, ``rsqrt``):
  ``encoder.layer.*.attention.output``, ``BertSelfOutput``.
* ``bert-output-unfused``: ``BertOutput``'s ``dense`` as ``x @ w.t() + b``: ``encoder.layer.*.output``,
  ``BertOutput``.
* ``convnext-norm-by-hand``: the block's channels-first layer norm by hand (ConvNeXt's original code: mean,
  variance, ``sqrt``, scale and shift in NCHW): ``stages.*.blocks.*``, ``ConvNeXtBlock``.
* ``convnext-layer-scale-double``: the layer scale multiplied in float64: ``stages.*.blocks.*``, ``ConvNeXtBlock``.
* ``convnext-gelu-tanh``: the block calls its MLP's layers itself, the GELU by the tanh formula:
  ``stages.*.blocks.*``, ``ConvNeXtBlock``.
* ``resnet-bn-by-hand``: ``BasicBlock``'s ``bn2`` by hand from its running statistics: ``layer*.*``, ``BasicBlock``.
* ``resnet-residual-double``: ``BasicBlock``'s residual sum in float64: ``layer*.*``, ``BasicBlock``.
* ``resnet-identity-copy``: ``identity = x.clone()``, an extra copy per block: ``layer*.*``, ``BasicBlock``.
* ``cait-softmax-double``: the attention's softmax in float64 (``attend(dots.double()).float()``):
  ``patch_transformer.layers.*.*.fn``, ``Attention``.
* ``cait-talking-heads-broadcast``: both talking-heads mixes (``einsum('b h i j, h g -> b g i j')``) as a
  broadcast product and a ``sum`` over the heads, a temporary 8 times the attention's:
  ``patch_transformer.layers.*.*.fn``, ``Attention``.
* ``cait-layer-scale-double``: ``LayerScale``'s product in float64: ``patch_transformer.layers.*.*``, ``LayerScale``.
* ``cait-qkv-contiguous``: ``.contiguous()`` after each of the three head ``rearrange``s:
  ``patch_transformer.layers.*.*.fn``, ``Attention``.
* ``cait-heads-loop``: ``q k^T`` and ``attn v`` one head at a time in a Python loop, the heads stacked:
  ``patch_transformer.layers.*.*.fn``, ``Attention``.
* ``cait-gelu-tanh``: ``FeedForward`` calls its layers itself, the GELU by the tanh formula:
  ``patch_transformer.layers.*.*.fn``, ``FeedForward``.
* ``cait-mlp-wider``: the feed-forward 1.25 times as wide (640 instead of 512): ``patch_transformer.layers.*.*.fn``,
  ``FeedForward``.
* ``cct-softmax-double``: CCT's attention softmax in float64 (``attn.double().softmax(dim=-1).float()``):
  ``classifier.blocks.*.self_attn``, ``Attention``.

Neutral edits, which should never fail (their failures are the false alarms): per family a comment
(``*-comment``), a renamed local variable (``*-rename-local``) and a reordering (``*-reorder``): GPT's ``q`` and
``k`` reshapes swapped, BERT's ``query_layer`` and ``key_layer`` lines swapped, ConvNeXt's residual sum with its
operands swapped, ResNet's ``downsample`` of the identity moved before ``conv1``, CaiT's two residual sums with
their operands swapped; CCT has a comment only. Each runs ``--neutral-repeats`` times per mode (3: 48 neutral
checks per mode).

``--compiled``: each test hands the fixture ``torch.compile(model)``, so the checks time Inductor's kernels (each
line says ``compiled``; keep such runs in a file of their own).

Modes (``--modes``), through the real command line, one ``pytest`` process per check, its wall time measured:

* ``against``: the change's commit checked out, ``pytest --fxprof-against <base commit> --fxprof-report R``
  of the model's test.
* ``baseline``: every selected model's baseline recorded once at the base commit before the mode's first check
  (``pytest --fxprof-update`` of each test, one process each, all within minutes; ``baselines/`` is ignored by
  git, so that checkouts keep it, and the recording names the base commit), then per check the change's commit
  checked out, ``pytest --fxprof --fxprof-report R``, and the base checked out again. Where the change's
  operations differ from the base's, that check also measures the change against the base commit in pairs (the
  plugin's default, ``--fxprof-on-code-change revision``; each line keeps what they found as
  ``against_recording``); pass ``-- --fxprof-on-code-change baseline`` for the baseline's bands alone.

Within a mode the checks run in an order shuffled by ``--seed``. Each appends one JSON line to ``--out``: family,
model, change, kind (change or neutral), the expected module and class, mode, exit code, the report's status,
wall seconds, ``flagged`` (what failed the test: kind, name, module, ratio), ``blame`` (the report profile's
``blame``, null where the report has none), the pairs, and ``total_ratio`` (the report's total, new over old:
against a revision the geometric mean of its ratios per pair, each in ``total_ratios``; against a baseline over
the baseline; null where it was not compared; lines written before these two fields lack them); a check already
in the file (same mode, model, change, repeat and pytest arguments) is skipped, so a stopped run goes on where it
ended.

``--summary`` prints per mode and family: changes run, caught (the test failed, 95 % Wilson interval), named
right, named wrong; the changes that slowed the module they should blame (the ratio of its aggregate that the
pairs of the checks against a revision measured, median over the checks, at least x1.05: the node band), and
of those the caught and the named right; and false alarms on neutral edits (95 % Wilson interval), then one line
per change with that ratio. Each check's line keeps that aggregate (``expected``: ratio, band, verdict). Of the
caught changes (module paths compared with block indices, the components made of digits, folded to ``*``; a
``*`` or ``?`` within an expected component matches as in a shell):

* named right: the blame is a module or pattern whose name matches the expected pattern, or a class whose name
  is the expected class.
* named wrong: the blame is a class other than the expected one, or a module or pattern that is neither the
  expected module, one of its ancestors, nor inside it. Inside an instance of the expected class counts as
  inside (a change to ``LayerNorm``'s code slows the final norm too, outside the blocks). A caught change can be
  neither (no blame, or an ancestor named).
* also outside: a flagged node (by its module), module or pattern that lies neither inside the expected module
  nor on its path from the root (nor inside an instance of the edited class or on its path), or a flagged class
  other than the expected one: an unchanged module the failure names "also slower, its code unchanged". Operator
  types (``aten.add.Tensor``) and the total never count. Whether it slowed for real, not by noise between
  processes, ``--verify --module-rounds N`` tells in-process: the base and the change profiled in turn
  (``pytest_fxprof.profile``, the graph the gate measures), N rounds, and the unchanged modules outside that ran
  x1.05 or more slower listed as knock-ons.

``--summary-json PATH`` writes the same as JSON, to commit beside the JSON lines. Each check against a revision
also keeps every item it judged with its ratio per pair (``items``); ``--tradeoff 0.01,0.02,0.05`` judges those
checks again at other node and aggregate tolerances (``bench/ab_tradeoff.py``'s replay, each aggregate at its
level's correction) and prints the false alarms on the neutral edits against the changes caught. ``--keep DIR``
copies the repository and every report into DIR. Exit code of a pytest process: 0 passed, 1 failed; anything else
stops the bench with the output's tail.
"""

from __future__ import annotations

import argparse
import datetime as dt
import fnmatch
import importlib.util
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import ab_quality
import ab_tradeoff
import gate_quality as gq

from pytest_fxprof.judge.aggregates import LEVEL_ITEMS, fold
from pytest_fxprof.judge.band import corrected_confidence
from pytest_fxprof.judge.paired import CONFIDENCE

BENCH = Path(__file__).resolve().parent
INSTALL = ".venv/bin/pip install -c requirements/test.txt -r requirements/bench.txt"
MODES = ("against", "baseline")
KNOWN = ("pass", "regression")
QUIET = ["-q", "-p", "no:cacheprovider", "-W", "ignore"]
TEST_MODULE = "test_zoo.py"


# The families ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Family:
    """One model's source: where it comes from, where it lies in the repository, what the copy needs."""

    name: str
    model: str
    dest: str  # the path in the throw-away repository
    module: str = ""  # the installed module copied (empty: ``bench/gpt_style.py``)
    requires: str = ""  # the distribution it needs beside torch
    drop_lines: tuple[str, ...] = ()  # lines taken out of the copy (each must be there)
    fixes: tuple[tuple[str, str], ...] = ()  # replacements made in the copy (each must be there)


FAMILIES = {
    "gpt-style": Family("gpt-style", "gpt", "zoo/gpt_style.py"),
    "transformers": Family(
        "transformers", "bert", "zoo/hf_bert.py", "transformers.models.bert.modeling_bert", "transformers"
    ),
    "timm": Family(
        "timm",
        "convnext",
        "zoo/timm_convnext.py",
        "timm.models.convnext",
        "timm",
        drop_lines=("@register_model",),
        fixes=(("register_model_deprecations(__name__, {", "_DEPRECATED = ({"),),
    ),
    "torchvision": Family(
        "torchvision", "resnet18", "zoo/tv_resnet.py", "torchvision.models.resnet", drop_lines=("@register_model()",)
    ),
    "vit-pytorch": Family("vit-pytorch", "cait", "zoo/vit_cait.py", "vit_pytorch.cait", "vit_pytorch"),
    "vit-pytorch-cct": Family("vit-pytorch-cct", "cct", "zoo/vit_cct.py", "vit_pytorch.cct", "vit_pytorch"),
}

BUILD = '''\
"""Each model of the bench with its input: random weights from seed 0, eval mode, CPU."""
import importlib

import torch

MODULES = {modules!r}


def make(name, source):
    """The model ``name`` built from its source module ``source`` (the bench passes an edited copy)."""
    torch.manual_seed(0)
    if name == "gpt":
        return source.build()
    if name == "bert":
        from transformers import BertConfig

        config = BertConfig(
            vocab_size=2048,
            hidden_size=256,
            num_hidden_layers=4,
            num_attention_heads=4,
            intermediate_size=1024,
            max_position_embeddings=128,
        )
        return source.BertModel(config).eval(), torch.randint(0, config.vocab_size, (2, 128))
    if name == "convnext":  # convnext_atto
        model = source.ConvNeXt(depths=(2, 2, 6, 2), dims=(40, 80, 160, 320), conv_mlp=True)
        return model.eval(), torch.randn(2, 3, 160, 160)
    if name == "resnet18":
        model = source.ResNet(source.BasicBlock, [2, 2, 2, 2])
        return model.eval(), torch.randn(1, 3, 160, 160)
    if name == "cait":  # vit_pytorch's CaiT, small: 64 patches of 16 x 16, 4 layers then 1 class-attention layer
        model = source.CaiT(
            image_size=128,
            patch_size=16,
            num_classes=1000,
            dim=256,
            depth=4,
            cls_depth=1,
            heads=8,
            mlp_dim=512,
        )
        return model.eval(), torch.randn(8, 3, 128, 128)
    if name == "cct":  # vit_pytorch's compact convolutional transformer, small: 256 tokens from 2 conv layers
        model = source.CCT(
            img_size=(64, 64),
            embedding_dim=192,
            n_conv_layers=2,
            kernel_size=3,
            stride=1,
            padding=1,
            pooling_kernel_size=3,
            pooling_stride=2,
            pooling_padding=1,
            num_layers=4,
            num_heads=4,
            mlp_ratio=2.0,
            num_classes=100,
            positional_embedding="learnable",
        )
        return model.eval(), torch.randn(2, 3, 64, 64)
    raise ValueError(f"unknown model {{name!r}}")


def build(name):
    return make(name, importlib.import_module(MODULES[name]))
'''

TEST = """\
# Generated by bench/code_changes.py: one test per model, each profiled by fxprof.
import pytest
import torch

from zoo.build import build


@pytest.mark.parametrize("name", {models!r})
def test_model(fxprof, name):
    model, x = build(name)
    if {compiled!r}:
        model = torch.compile(model)
    result = fxprof(model, x)
    assert result.nodes
"""


# The edits -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Edit:
    """Replace ``old`` by ``new``, where ``old`` occurs exactly once in the class or function that starts with
    ``within`` (a top-level line such as ``class BertOutput(``; empty: the whole file)."""

    old: str
    new: str
    within: str = ""


@dataclass(frozen=True)
class Change:
    name: str
    family: str
    kind: str  # change or neutral
    edits: tuple[Edit, ...]
    module: str = ""  # the module pattern it should blame
    cls: str = ""  # and its class


class EditError(Exception):
    """An edit that does not apply to the installed source."""


def region(text: str, within: str, where: str) -> tuple[int, int]:
    """The span of the top-level definition starting with ``within`` (the whole text when empty)."""
    if not within:
        return 0, len(text)
    found = [m.start() for m in re.finditer(re.escape("\n" + within), "\n" + text)]  # offsets in text
    if len(found) != 1:
        raise EditError(f"{where}: {len(found)} top-level lines start with {within!r} (the edit expects one)")
    start = found[0]
    end = re.search(r"\n(?=[^\s#)\]}])", text[start + len(within) :])
    return start, start + len(within) + end.start() if end else len(text)


def apply(text: str, edits: tuple[Edit, ...], where: str) -> str:
    """``text`` with every edit made; ``EditError`` names the file and the text that is not there exactly once."""
    for edit in edits:
        start, end = region(text, edit.within, where)
        count = text[start:end].count(edit.old)
        if count != 1:
            scope = f" in {edit.within.strip()}..." if edit.within else ""
            found = "is not there" if count == 0 else f"is there {count} times"
            raise EditError(
                f"{where}: the text to replace {found}{scope} (the installed version's source differs from the one "
                f"this edit was written for):\n{edit.old}"
            )
        at = text.index(edit.old, start)
        text = text[:at] + edit.new + text[at + len(edit.old) :]
    return text


GELU_TANH = "0.5 * {x} * (1.0 + torch.tanh(0.7978845608028654 * ({x} + 0.044715 * torch.pow({x}, 3.0))))"
SDPA = (
    "        y = F.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout if self.training else 0.0, "
    "is_causal=True)\n"
)
QKV = """\
        q = q.view(b, t, self.n_head, c // self.n_head).transpose(1, 2)
        k = k.view(b, t, self.n_head, c // self.n_head).transpose(1, 2)
"""
ATTN = "class CausalSelfAttention("
BERT_QK = """\
        query_layer = self.query(hidden_states).view(*hidden_shape).transpose(1, 2)
        key_layer = self.key(hidden_states).view(*hidden_shape).transpose(1, 2)
"""
BERT_ATTN = "class BertSelfAttention("
BLOCK = "class ConvNeXtBlock("
BASIC = "class BasicBlock("
CAIT_ATTN = "class Attention("
CAIT_FF = "class FeedForward("
CAIT_DOTS = "        dots = einsum('b h i d, b h j d -> b h i j', q, k) * self.scale\n"
CAIT_OUT = "        out = einsum('b h i j, b h j d -> b h i d', attn, v)\n"
CAIT_QKV = "        q, k, v = map(lambda t: rearrange(t, 'b n (h d) -> b h n d', h = h), qkv)\n"
CAIT_SOFTMAX = "        attn = self.attend(dots)\n"
# the patch transformer's LayerScale around each attention and each feed-forward; the ``fn`` in it, the attention
# and the feed-forward alike (their indices fold: the class tells them apart)
CAIT_BLOCK = "patch_transformer.layers.*.*"
CAIT_FN = "patch_transformer.layers.*.*.fn"
CCT_ATTN = "class Attention("
CCT_SOFTMAX = "        attn = attn.softmax(dim=-1)\n"


def change(name: str, family: str, module: str, cls: str, *edits: Edit) -> Change:
    return Change(name, family, "change", edits, module, cls)


def neutral(name: str, family: str, *edits: Edit) -> Change:
    return Change(name, family, "neutral", edits)


CHANGES = (
    change(
        "gpt-attention-by-hand",
        "gpt-style",
        "transformer.h.*.attn",
        "CausalSelfAttention",
        Edit(
            SDPA,
            "        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))\n"
            "        mask = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()\n"
            '        att = att.masked_fill(~mask, float("-inf"))\n'
            "        att = F.softmax(att, dim=-1)\n"
            "        att = self.attn_dropout(att)\n"
            "        y = att @ v\n",
            ATTN,
        ),
    ),
    change(
        "gpt-heads-loop",
        "gpt-style",
        "transformer.h.*.attn",
        "CausalSelfAttention",
        Edit(
            SDPA,
            "        heads = []\n"
            "        for h in range(self.n_head):\n"
            "            one = slice(h, h + 1)\n"
            "            y = F.scaled_dot_product_attention(q[:, one], k[:, one], v[:, one], is_causal=True)\n"
            "            heads.append(y)\n"
            "        y = torch.cat(heads, dim=1)\n",
            ATTN,
        ),
    ),
    change(
        "gpt-proj-unfused",
        "gpt-style",
        "transformer.h.*.attn",
        "CausalSelfAttention",
        Edit(
            "self.resid_dropout(self.c_proj(y))",
            "self.resid_dropout(y @ self.c_proj.weight.t() + self.c_proj.bias)",
            ATTN,
        ),
    ),
    change(
        "gpt-qkv-contiguous",
        "gpt-style",
        "transformer.h.*.attn",
        "CausalSelfAttention",
        Edit(
            QKV + "        v = v.view(b, t, self.n_head, c // self.n_head).transpose(1, 2)\n",
            QKV.replace(".transpose(1, 2)\n", ".transpose(1, 2).contiguous()\n")
            + "        v = v.view(b, t, self.n_head, c // self.n_head).transpose(1, 2).contiguous()\n",
            ATTN,
        ),
    ),
    change(
        "gpt-gelu-tanh",
        "gpt-style",
        "transformer.h.*.mlp",
        "MLP",
        Edit("        x = self.act(x)\n", f"        x = {GELU_TANH.format(x='x')}\n", "class MLP("),
    ),
    change(
        "gpt-mlp-double",
        "gpt-style",
        "transformer.h.*.mlp",
        "MLP",
        Edit("        x = self.act(x)\n", "        x = self.act(x.double()).float()\n", "class MLP("),
    ),
    change(
        "gpt-mlp-einsum",
        "gpt-style",
        "transformer.h.*.mlp",
        "MLP",
        Edit(
            "        x = self.c_fc(x)\n",
            '        x = torch.einsum("btc,hc->bth", x, self.c_fc.weight) + self.c_fc.bias\n',
            "class MLP(",
        ),
    ),
    change(
        "gpt-layernorm-by-hand",
        "gpt-style",
        "transformer.h.*.ln_?",
        "LayerNorm",
        Edit(
            "        return F.layer_norm(input, self.weight.shape, self.weight, self.bias, 1e-5)\n",
            "        mean = input.mean(-1, keepdim=True)\n"
            "        var = (input - mean).pow(2).mean(-1, keepdim=True)\n"
            "        out = (input - mean) * torch.rsqrt(var + 1e-5) * self.weight\n"
            "        return out + self.bias if self.bias is not None else out\n",
            "class LayerNorm(",
        ),
    ),
    # three changes of the kinds that matter most to compiled code (``--compiled``): a graph break, a fusion
    # defeated, a layer widened
    change(
        "gpt-mlp-nan-check",
        "gpt-style",
        "transformer.h.*.mlp",
        "MLP",
        Edit(
            "        x = self.act(x)\n",
            "        x = self.act(x)\n"
            "        if not torch.isfinite(x).all():  # a data-dependent branch: a graph break under torch.compile\n"
            '            raise ValueError("non-finite activation")\n',
            "class MLP(",
        ),
    ),
    change(
        "gpt-norm-custom-op",
        "gpt-style",
        "transformer.h.*.ln_?",
        "LayerNorm",
        Edit(
            "class LayerNorm(nn.Module):\n",
            '@torch.library.custom_op("gptbench::layer_norm", mutates_args=())\n'
            "def layer_norm_op(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:\n"
            "    return F.layer_norm(x, weight.shape, weight, bias, 1e-5)\n"
            "\n"
            "\n"
            "@layer_norm_op.register_fake\n"
            "def _(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:\n"
            "    return torch.empty_like(x)\n"
            "\n"
            "\n"
            "class LayerNorm(nn.Module):\n",
        ),
        Edit(
            "        return F.layer_norm(input, self.weight.shape, self.weight, self.bias, 1e-5)\n",
            "        return layer_norm_op(input, self.weight, self.bias)  # an opaque op: nothing fuses into it\n",
            "class LayerNorm(",
        ),
    ),
    change(
        "gpt-mlp-wider",
        "gpt-style",
        "transformer.h.*.mlp",
        "MLP",
        Edit(
            "        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)\n",
            "        self.c_fc = nn.Linear(config.n_embd, 5 * config.n_embd, bias=config.bias)\n",
            "class MLP(",
        ),
        Edit(
            "        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)\n",
            "        self.c_proj = nn.Linear(5 * config.n_embd, config.n_embd, bias=config.bias)\n",
            "class MLP(",
        ),
    ),
    change(
        "bert-eager-attention",
        "transformers",
        "encoder.layer.*.attention.self",
        "BertSelfAttention",
        Edit(
            "        attention_interface: Callable = ALL_ATTENTION_FUNCTIONS.get_interface(\n"
            "            self.config._attn_implementation, eager_attention_forward\n"
            "        )\n",
            "        attention_interface: Callable = eager_attention_forward\n",
            BERT_ATTN,
        ),
    ),
    change(
        "bert-gelu-tanh",
        "transformers",
        "encoder.layer.*.intermediate",
        "BertIntermediate",
        Edit(
            "        hidden_states = self.intermediate_act_fn(hidden_states)\n",
            f"        hidden_states = {GELU_TANH.format(x='hidden_states')}\n",
            "class BertIntermediate(",
        ),
    ),
    change(
        "bert-layernorm-by-hand",
        "transformers",
        "encoder.layer.*.attention.output",
        "BertSelfOutput",
        Edit(
            "        hidden_states = self.LayerNorm(hidden_states + input_tensor)\n",
            "        hidden_states = hidden_states + input_tensor\n"
            "        mean = hidden_states.mean(-1, keepdim=True)\n"
            "        var = (hidden_states - mean).pow(2).mean(-1, keepdim=True)\n"
            "        hidden_states = (hidden_states - mean) * torch.rsqrt(var + self.LayerNorm.eps)\n"
            "        hidden_states = hidden_states * self.LayerNorm.weight + self.LayerNorm.bias\n",
            "class BertSelfOutput(",
        ),
    ),
    change(
        "bert-output-unfused",
        "transformers",
        "encoder.layer.*.output",
        "BertOutput",
        Edit(
            "        hidden_states = self.dense(hidden_states)\n",
            "        hidden_states = hidden_states @ self.dense.weight.t() + self.dense.bias\n",
            "class BertOutput(",
        ),
    ),
    change(
        "convnext-norm-by-hand",
        "timm",
        "stages.*.blocks.*",
        "ConvNeXtBlock",
        Edit(
            "            x = self.norm(x)\n            x = self.mlp(x)\n        else:\n",
            "            u = x.mean(1, keepdim=True)\n"
            "            s = (x - u).pow(2).mean(1, keepdim=True)\n"
            "            x = (x - u) / torch.sqrt(s + self.norm.eps)\n"
            "            x = self.norm.weight[:, None, None] * x + self.norm.bias[:, None, None]\n"
            "            x = self.mlp(x)\n"
            "        else:\n",
            BLOCK,
        ),
    ),
    change(
        "convnext-layer-scale-double",
        "timm",
        "stages.*.blocks.*",
        "ConvNeXtBlock",
        Edit(
            "            x = x.mul(self.gamma.reshape(1, -1, 1, 1))\n",
            "            x = (x.double() * self.gamma.reshape(1, -1, 1, 1).double()).float()\n",
            BLOCK,
        ),
    ),
    change(
        "convnext-gelu-tanh",
        "timm",
        "stages.*.blocks.*",
        "ConvNeXtBlock",
        Edit(
            "            x = self.norm(x)\n            x = self.mlp(x)\n        else:\n",
            "            x = self.norm(x)\n"
            "            x = self.mlp.fc1(x)\n"
            f"            x = {GELU_TANH.format(x='x')}\n"
            "            x = self.mlp.fc2(self.mlp.norm(self.mlp.drop1(x)))\n"
            "            x = self.mlp.drop2(x)\n"
            "        else:\n",
            BLOCK,
        ),
    ),
    change(
        "resnet-bn-by-hand",
        "torchvision",
        "layer*.*",
        "BasicBlock",
        Edit(
            "        out = self.bn2(out)\n",
            "        bn = self.bn2\n"
            "        scale = torch.rsqrt(bn.running_var + bn.eps) * bn.weight\n"
            "        out = (out - bn.running_mean[None, :, None, None]) * scale[None, :, None, None]\n"
            "        out = out + bn.bias[None, :, None, None]\n",
            BASIC,
        ),
    ),
    change(
        "resnet-residual-double",
        "torchvision",
        "layer*.*",
        "BasicBlock",
        Edit("        out += identity\n", "        out = (out.double() + identity.double()).float()\n", BASIC),
    ),
    change(
        "resnet-identity-copy",
        "torchvision",
        "layer*.*",
        "BasicBlock",
        Edit("        identity = x\n", "        identity = x.clone()\n", BASIC),
    ),
    change(
        "cait-softmax-double",
        "vit-pytorch",
        CAIT_FN,
        "Attention",
        Edit(CAIT_SOFTMAX, "        attn = self.attend(dots.double()).float()\n", CAIT_ATTN),
    ),
    change(
        "cait-talking-heads-broadcast",
        "vit-pytorch",
        CAIT_FN,
        "Attention",
        Edit(
            "        dots = einsum('b h i j, h g -> b g i j', dots, self.mix_heads_pre_attn)    # talking heads, "
            "pre-softmax\n",
            "        dots = (dots.unsqueeze(2) * self.mix_heads_pre_attn[:, :, None, None]).sum(dim = 1)    # talking "
            "heads, pre-softmax\n",
            CAIT_ATTN,
        ),
        Edit(
            "        attn = einsum('b h i j, h g -> b g i j', attn, self.mix_heads_post_attn)   # talking heads, "
            "post-softmax\n",
            "        attn = (attn.unsqueeze(2) * self.mix_heads_post_attn[:, :, None, None]).sum(dim = 1)   # talking "
            "heads, post-softmax\n",
            CAIT_ATTN,
        ),
    ),
    change(
        "cait-layer-scale-double",
        "vit-pytorch",
        CAIT_BLOCK,
        "LayerScale",
        Edit(
            "        return self.fn(x, **kwargs) * self.scale\n",
            "        return (self.fn(x, **kwargs).double() * self.scale.double()).float()\n",
            "class LayerScale(",
        ),
    ),
    change(
        "cait-qkv-contiguous",
        "vit-pytorch",
        CAIT_FN,
        "Attention",
        Edit(CAIT_QKV, CAIT_QKV.replace("h = h), qkv)", "h = h).contiguous(), qkv)"), CAIT_ATTN),
    ),
    change(
        "cait-heads-loop",
        "vit-pytorch",
        CAIT_FN,
        "Attention",
        Edit(
            CAIT_DOTS,
            "        heads = []\n"
            "        for i in range(h):  # one head at a time\n"
            "            heads.append(q[:, i] @ k[:, i].transpose(-1, -2))\n"
            "        dots = torch.stack(heads, dim = 1) * self.scale\n",
            CAIT_ATTN,
        ),
        Edit(
            CAIT_OUT,
            "        heads = []\n"
            "        for i in range(h):\n"
            "            heads.append(attn[:, i] @ v[:, i])\n"
            "        out = torch.stack(heads, dim = 1)\n",
            CAIT_ATTN,
        ),
    ),
    change(
        "cait-gelu-tanh",
        "vit-pytorch",
        CAIT_FN,
        "FeedForward",
        Edit(
            "        return self.net(x)\n",
            "        norm, fc1, _, drop1, fc2, drop2 = self.net\n"
            "        x = fc1(norm(x))\n"
            f"        x = {GELU_TANH.format(x='x')}\n"
            "        return drop2(fc2(drop1(x)))\n",
            CAIT_FF,
        ),
    ),
    change(
        "cct-softmax-double",
        "vit-pytorch-cct",
        "classifier.blocks.*.self_attn",
        "Attention",
        Edit(CCT_SOFTMAX, "        attn = attn.double().softmax(dim=-1).float()\n", CCT_ATTN),
    ),
    change(
        "cait-mlp-wider",
        "vit-pytorch",
        CAIT_FN,
        "FeedForward",
        Edit(
            "            nn.Linear(dim, hidden_dim),\n", "            nn.Linear(dim, hidden_dim * 5 // 4),\n", CAIT_FF
        ),
        Edit(
            "            nn.Linear(hidden_dim, dim),\n", "            nn.Linear(hidden_dim * 5 // 4, dim),\n", CAIT_FF
        ),
    ),
    # Neutral edits: nothing that matters changed.
    neutral(
        "gpt-comment",
        "gpt-style",
        Edit("        x = self.act(x)\n", "        # GELU, exact (erf) form\n        x = self.act(x)\n", "class MLP("),
    ),
    neutral(
        "gpt-rename-local",
        "gpt-style",
        Edit(SDPA, SDPA.replace("        y = ", "        mixed = "), ATTN),
        Edit(
            "        y = y.transpose(1, 2).contiguous().view(b, t, c)\n"
            "        out: torch.Tensor = self.resid_dropout(self.c_proj(y))\n",
            "        mixed = mixed.transpose(1, 2).contiguous().view(b, t, c)\n"
            "        out: torch.Tensor = self.resid_dropout(self.c_proj(mixed))\n",
            ATTN,
        ),
    ),
    neutral("gpt-reorder", "gpt-style", Edit(QKV, "".join(reversed(QKV.splitlines(keepends=True))), ATTN)),
    neutral(
        "bert-comment",
        "transformers",
        Edit(
            "        hidden_states = self.intermediate_act_fn(hidden_states)\n",
            "        # the configured activation (GELU)\n"
            "        hidden_states = self.intermediate_act_fn(hidden_states)\n",
            "class BertIntermediate(",
        ),
    ),
    neutral(
        "bert-rename-local",
        "transformers",
        Edit(
            "        first_token_tensor = hidden_states[:, 0]\n"
            "        pooled_output = self.dense(first_token_tensor)\n",
            "        first_token = hidden_states[:, 0]\n        pooled_output = self.dense(first_token)\n",
            "class BertPooler(",
        ),
    ),
    neutral(
        "bert-reorder", "transformers", Edit(BERT_QK, "".join(reversed(BERT_QK.splitlines(keepends=True))), BERT_ATTN)
    ),
    neutral(
        "convnext-comment",
        "timm",
        Edit("        x = self.conv_dw(x)\n", "        # depthwise 7x7\n        x = self.conv_dw(x)\n", BLOCK),
    ),
    neutral(
        "convnext-rename-local",
        "timm",
        Edit("        shortcut = x\n", "        residual = x\n", BLOCK),
        Edit("self.shortcut(shortcut)\n", "self.shortcut(residual)\n", BLOCK),
    ),
    neutral(
        "convnext-reorder",
        "timm",
        Edit(
            "        x = self.drop_path(x) + self.shortcut(shortcut)\n",
            "        x = self.shortcut(shortcut) + self.drop_path(x)\n",
            BLOCK,
        ),
    ),
    neutral(
        "resnet-comment",
        "torchvision",
        Edit("        out += identity\n", "        # the residual connection\n        out += identity\n", BASIC),
    ),
    neutral(
        "resnet-rename-local",
        "torchvision",
        Edit("        identity = x\n", "        residual = x\n", BASIC),
        Edit("            identity = self.downsample(x)\n", "            residual = self.downsample(x)\n", BASIC),
        Edit("        out += identity\n", "        out += residual\n", BASIC),
    ),
    neutral(
        "resnet-reorder",
        "torchvision",
        Edit(
            "        identity = x\n\n        out = self.conv1(x)\n",
            "        identity = x\n"
            "        if self.downsample is not None:\n"
            "            identity = self.downsample(x)\n\n"
            "        out = self.conv1(x)\n",
            BASIC,
        ),
        Edit(
            "        if self.downsample is not None:\n"
            "            identity = self.downsample(x)\n\n"
            "        out += identity\n",
            "        out += identity\n",
            BASIC,
        ),
    ),
    neutral(
        "cait-comment",
        "vit-pytorch",
        Edit(CAIT_SOFTMAX, "        # softmax over the keys\n" + CAIT_SOFTMAX, CAIT_ATTN),
    ),
    neutral(
        "cait-rename-local",
        "vit-pytorch",
        Edit(
            CAIT_OUT + "        out = rearrange(out, 'b h n d -> b n (h d)')\n        return self.to_out(out)\n",
            CAIT_OUT.replace("        out = ", "        mixed = ")
            + "        mixed = rearrange(mixed, 'b h n d -> b n (h d)')\n        return self.to_out(mixed)\n",
            CAIT_ATTN,
        ),
    ),
    neutral(
        "cait-reorder",
        "vit-pytorch",
        Edit(
            "            x = attn(x, context = context) + x\n            x = ff(x) + x\n",
            "            x = x + attn(x, context = context)\n            x = x + ff(x)\n",
            "class Transformer(",
        ),
    ),
    neutral(
        "cct-comment", "vit-pytorch-cct", Edit(CCT_SOFTMAX, "        # softmax over the keys\n" + CCT_SOFTMAX, CCT_ATTN)
    ),
)


# The repository --------------------------------------------------------------------------------------


def installed_source(family: Family) -> tuple[str, str]:
    """The family's source text as the repository holds it at the base, and where it came from."""
    if not family.module:
        path = BENCH / "gpt_style.py"
        return path.read_text(encoding="utf-8"), "bench/gpt_style.py"
    spec = importlib.util.find_spec(family.module)
    if spec is None or spec.origin is None:
        raise EditError(f"{family.module} is not installed; install the bench's dependencies: {INSTALL}")
    path = Path(spec.origin)
    text = absolute_imports(path.read_text(encoding="utf-8"), family.module.rpartition(".")[0])
    for line in family.drop_lines:
        kept = [x for x in text.splitlines(keepends=True) if x.rstrip() != line]
        if len(kept) == len(text.splitlines()):
            raise EditError(f"{path}: no line {line!r} to take out (the installed version differs)")
        text = "".join(kept)
    for old, new in family.fixes:
        text = apply(text, (Edit(old, new),), str(path))
    version = distribution_version(family.module.partition(".")[0])
    header = f"# Copied from {path} ({family.module.partition('.')[0]} {version}) by bench/code_changes.py:\n"
    taken = ", its registrations taken out" if family.drop_lines or family.fixes else ""
    return f"{header}# its relative imports made absolute{taken}.\n{text}", str(path)


def absolute_imports(text: str, package: str) -> str:
    """``from ..x import y`` in a module of ``package`` as ``from <package's parent>.x import y``."""
    parts = package.split(".")

    def absolute(m: re.Match[str]) -> str:
        up = len(m.group(2)) - 1
        if up >= len(parts):
            raise EditError(f"{package}: the relative import {m.group(0).strip()!r} leaves the package")
        base = ".".join(parts[: len(parts) - up])
        rest = m.group(3)
        return f"{m.group(1)}{base}{'.' + rest if rest else ''}{m.group(4)}"

    return re.sub(r"^(\s*from\s+)(\.+)([\w.]*)(\s+import\b)", absolute, text, flags=re.MULTILINE)


def distribution_version(name: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return "?"


def git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "b@b", "GIT_COMMITTER_NAME": "bench"}
    env["GIT_COMMITTER_EMAIL"] = "b@b"
    done = subprocess.run(["git", *args], cwd=repo, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise gq.PytestError(f"git {' '.join(args)} (in {repo}) failed: {done.stderr.strip()}")
    return done.stdout.strip()


@dataclass(frozen=True)
class Repo:
    path: Path
    base: str
    commits: dict[str, str]  # change name -> its commit
    sources: dict[str, str]  # family -> where its source came from


def make_repo(path: Path, families: list[str], changes: list[Change], *, compiled: bool = False) -> Repo:
    """The base commit (every family's source, the builder, the test module) and one commit per change on it."""
    path.mkdir(parents=True)
    git(path, "init", "-q")
    texts: dict[str, str] = {}
    sources: dict[str, str] = {}
    for name in families:
        texts[name], sources[name] = installed_source(FAMILIES[name])
        (path / FAMILIES[name].dest).parent.mkdir(parents=True, exist_ok=True)
        (path / FAMILIES[name].dest).write_text(texts[name], encoding="utf-8")
    modules = {FAMILIES[f].model: FAMILIES[f].dest.removesuffix(".py").replace("/", ".") for f in families}
    (path / "zoo" / "__init__.py").write_text("", encoding="utf-8")
    (path / "zoo" / "build.py").write_text(BUILD.format(modules=modules), encoding="utf-8")
    test = TEST.format(models=[FAMILIES[f].model for f in families], compiled=compiled)
    (path / TEST_MODULE).write_text(test, encoding="utf-8")
    (path / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    (path / ".gitignore").write_text("baselines/\n__pycache__/\n", encoding="utf-8")
    git(path, "add", ".")
    git(path, "commit", "-qm", "base")
    base = git(path, "rev-parse", "HEAD")
    commits: dict[str, str] = {}
    for c in changes:
        family = FAMILIES[c.family]
        edited = apply(texts[c.family], c.edits, f"{sources[c.family]} ({c.name})")
        git(path, "checkout", "-q", "--detach", base)
        (path / family.dest).write_text(edited, encoding="utf-8")
        git(path, "commit", "-qam", c.name)
        git(path, "branch", c.name)  # so that a kept repository names each change's commit
        commits[c.name] = git(path, "rev-parse", "HEAD")
    git(path, "checkout", "-q", "--detach", base)
    return Repo(path, base, commits, sources)


def require(families: list[str]) -> None:
    """Stop with the install command when a selected family's package is missing."""
    missing = [f.requires for name in families if (f := FAMILIES[name]).requires and not has(f.requires)]
    if missing:
        raise SystemExit(f"error: {', '.join(missing)} not installed; install the bench's dependencies: {INSTALL}")


def has(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


# Checking --------------------------------------------------------------------------------------------


def test_id(model: str) -> str:
    return f"{TEST_MODULE}::test_model[{model}]"


def pytest_env() -> dict[str, str]:
    # no bytecode: a neutral edit keeps the file's size, and a checkout within the same second would look fresh
    return {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}


def record(repo: Repo, model: str, reports: Path, extra: list[str]) -> dict[str, Any]:
    """The model's baseline, recorded at the base commit by one ``pytest --fxprof-update`` process."""
    git(repo.path, "checkout", "-q", "--detach", repo.base)
    report = reports / f"record-{model}.json"
    args = [*QUIET, "--fxprof-update", "--fxprof-report", str(report), *extra, test_id(model)]
    code, wall, output = gq.run_pytest(args, repo.path, pytest_env(), f"recording {model}")
    if code != 0:
        raise gq.PytestError(f"recording {model}: the test failed\n{gq.tail(output)}")
    return {"type": "record", "model": model, "exit": code, "wall_s": round(wall, 2), "args": extra}


def check(repo: Repo, mode: str, c: Change, repeat: int, *, reports: Path, extra: list[str]) -> dict[str, Any]:
    """One check of one change: its commit checked out, one pytest process of the model's test, timed."""
    family = FAMILIES[c.family]
    report = reports / f"{mode}-{c.name}-{repeat}.json"
    report.unlink(missing_ok=True)
    git(repo.path, "checkout", "-q", "--detach", repo.commits[c.name])
    try:
        flag = ["--fxprof-against", repo.base] if mode == "against" else ["--fxprof"]
        args = [*QUIET, *flag, "--fxprof-report", str(report), *extra, test_id(family.model)]
        code, wall, output = gq.run_pytest(args, repo.path, pytest_env(), f"{mode} check of {c.name}")
    finally:
        git(repo.path, "checkout", "-q", "--detach", repo.base)
    profile: dict[str, Any] = {}
    if report.is_file():
        data = json.loads(report.read_text(encoding="utf-8"))
        found = [p for p in data.get("profiles", []) if p.get("test_id") == test_id(family.model)]
        profile = found[0] if found else {}
    status = str(profile.get("status", "absent"))
    keep = ("kind", "name", "module", "ratio")
    classes = (profile.get("capture") or {}).get("classes") or {}
    return {
        # the modules of the class the change edited: a change to a class's code slows every instance of it
        "class_instances": sorted(path for path, cls in classes.items() if c.cls and cls == c.cls),
        "exit": code,
        "status": status,
        "wall_s": round(wall, 2),
        "flagged": [{k: f.get(k) for k in keep} for f in profile.get("flagged", [])],
        "blame": profile.get("blame"),
        "expected": expected_item(profile, c),
        "warned": [f"{w.get('kind')} {w.get('name')}" for w in profile.get("warned", [])],
        "pairs": profile.get("pairs"),
        # the report's total ratio, new over old, what its verdict compares (against a revision the geometric mean of
        # its ratios per pair, each kept in total_ratios; against a baseline over the baseline); null where not compared
        "total_ratio": (profile.get("total") or {}).get("ratio"),
        "total_ratios": (profile.get("total") or {}).get("ratios"),
        # what the total's line rests on: the allocator states its processes fell into, the profiler's overhead per
        # side where it differs, and the verdict's reason (the report's ``total``)
        "states": (profile.get("total") or {}).get("states") or "",
        "overhead_note": (profile.get("total") or {}).get("overhead_note") or "",
        "overhead": [(profile.get("total") or {}).get(f"overhead_{side}") for side in ("before", "after")],
        "total_reason": (profile.get("total") or {}).get("reason") or "",
        # against a revision, where a second set of pairs measured it again: each set's verdict and pairs
        "sets": profile.get("sets"),
        # against a baseline, where the model's code changed since the recording: what the pairs against the
        # revision it was recorded at found (the report's ``code_changed``)
        "against_recording": profile.get("code_changed"),
        # the modules, patterns and classes whose code the check saw change (operations added or removed)
        "code_changed": [a["name"] for a in profile.get("aggregates", []) if a.get("changed")],
        "items": items(profile),
        "tail": gq.tail(output)[-1500:] if status not in ("pass", "regression") else "",
    }


def items(profile: dict[str, Any]) -> list[dict[str, Any]]:
    """Each judged item with its ratio per pair (``ab_quality.items``), each aggregate with how many its level
    holds: what ``--tradeoff`` judges again."""
    levels = {a["name"]: a.get("level_items", 1) for a in profile.get("aggregates", [])}
    return [
        i | ({"level_items": levels.get(i["name"], 1)} if i["kind"] not in ("node", "total") else {})
        for i in ab_quality.items(profile)
    ]


def replayed_failure(check: dict[str, Any], tolerance: float, confidence: float) -> bool:
    """Whether a check against a revision fails when judged again at another tolerance of its nodes and aggregates
    (and ``confidence``), each aggregate at its level's correction (``band.corrected_confidence``)."""
    for item in check.get("items") or []:
        strict = min(1.0, LEVEL_ITEMS / int(item.get("level_items") or 1))
        level = corrected_confidence(confidence, strict) if item["kind"] not in ("node", "total") else confidence
        if ab_tradeoff.failed([item], int(check.get("pairs") or 0), level, tolerance):
            return True
    return False


def tradeoff(out: Path, tolerances: list[float], confidence: float) -> None:
    """The checks against a revision that recorded their items, judged again at each node and aggregate tolerance:
    false alarms on the neutral edits, changes caught."""
    checks = [x for x in read_lines(out) if x.get("type") == "check" and x["mode"] == "against" and x.get("items")]
    neutral = [x for x in checks if x["kind"] == "neutral"]
    changed = [x for x in checks if x["kind"] == "change"]
    print(f"{'tolerance':>9} {'confidence':>10} {'false alarms':>13} {'95 % interval':>13} {'changes caught':>14}")
    for t in tolerances:
        alarms = sum(replayed_failure(x, t, confidence) for x in neutral)
        caught = sum(replayed_failure(x, t, confidence) for x in changed)
        print(
            f"{t:>9.1%} {confidence:>10} {f'{alarms}/{len(neutral)}':>13} {span(alarms, len(neutral)):>13} "
            f"{f'{caught}/{len(changed)}':>14}"
        )
    print("each check judged again on the pairs it measured, no pairs added; the total at its own tolerance")


def expected_item(profile: dict[str, Any], c: Change) -> dict[str, Any] | None:
    """What the gate measured of the module the change should blame: the aggregate of its pattern (or of one module
    of it, or of its class), with its ratio (per pair, against a revision), band and verdict; None where no
    aggregate is it (a module of one node)."""
    found: list[tuple[int, dict[str, Any]]] = []
    for a in profile.get("aggregates", []):
        path = str(a.get("path") or a.get("name") or "")
        if a.get("kind") in ("pattern", "module") and relation(path, c.module) == "same":
            found.append((0 if a["kind"] == "pattern" else 1, a))
        elif a.get("kind") == "class" and c.cls and a.get("name") == c.cls:
            found.append((2, a))
    if not found:
        return None
    _, a = min(found, key=lambda f: f[0])
    return {k: a.get(k) for k in ("kind", "name", "ratio", "ratios", "band", "verdict")}


def slowed(line: dict[str, Any], truth: dict[tuple[str, str], float]) -> bool | None:
    """Whether the change slowed its module beyond the node band, by the ratio the pairs of the check against a
    revision measured of it (the most exact measurement here: fresh processes in pairs); None where unknown."""
    ratio = truth.get((line["model"], line["change"]))
    return None if ratio is None else ratio >= 1.05


def truths(checks: list[dict[str, Any]]) -> dict[tuple[str, str], float]:
    """Per change, the median over its checks against a revision of its expected module's ratio."""
    seen: dict[tuple[str, str], list[float]] = {}
    for x in checks:
        item = x.get("expected")
        if x["mode"] == "against" and x["kind"] == "change" and isinstance(item, dict) and item.get("ratio"):
            seen.setdefault((x["model"], x["change"]), []).append(float(item["ratio"]))
    return {k: statistics.median(v) for k, v in seen.items()}


def read_lines(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def key(line: dict[str, Any]) -> tuple[str, str, str, int, str, bool]:
    args = json.dumps(line.get("args", []))
    return line["mode"], line["model"], line["change"], line["repeat"], args, bool(line.get("compiled"))


def append(out: Path, line: dict[str, Any]) -> None:
    with out.open("a", encoding="utf-8") as f:
        f.write(json.dumps(line) + "\n")


def run(ns: argparse.Namespace, extra: list[str], families: list[str], changes: list[Change]) -> None:
    from ab_quality import code_version

    done = {key(x) for x in read_lines(ns.out) if x.get("type") == "check"}
    todo: dict[str, list[tuple[Change, int]]] = {}
    for mode in ns.modes:
        cases = [(c, r) for c in changes for r in range(1, (ns.neutral_repeats if c.kind == "neutral" else 1) + 1)]
        cases = [(c, r) for c, r in cases if (mode, model_of(c), c.name, r, json.dumps(extra), ns.compiled) not in done]
        todo[mode] = random.Random(f"{ns.seed}-{mode}").sample(cases, len(cases))
    if not any(todo.values()):
        print("every selected check is already in", ns.out)
        return
    commit = code_version()
    work = Path(tempfile.mkdtemp(prefix="fxprof-code-changes-"))
    try:
        repo = make_repo(work / "repo", families, changes, compiled=ns.compiled)
        reports = work / "reports"
        reports.mkdir()
        header = {"type": "header", "date": now(), "machine": gq.machine(), "commit": commit, "sources": repo.sources}
        append(ns.out, header | {"args": extra, "compiled": ns.compiled})
        for mode in ns.modes:
            if mode == "baseline" and todo[mode]:
                for model in dict.fromkeys(model_of(c) for c, _ in todo[mode]):
                    line = record(repo, model, reports, extra)
                    append(ns.out, line | {"date": now(), "commit": commit})
                    print(f"recorded {model}: {line['wall_s']:.0f} s", flush=True)
            for k, (c, repeat) in enumerate(todo[mode], 1):
                result = check(repo, mode, c, repeat, reports=reports, extra=extra)
                line = {
                    "type": "check",
                    "mode": mode,
                    "family": c.family,
                    "model": model_of(c),
                    "change": c.name,
                    "kind": c.kind,
                    "repeat": repeat,
                    "module": c.module,
                    "class": c.cls,
                    "args": extra,
                    "compiled": ns.compiled,
                    "commit": commit,
                    "date": now(),
                }
                append(ns.out, line | result)
                blame = result["blame"]
                named = f", blame {blame.get('kind')} {blame.get('name')}" if isinstance(blame, dict) else ""
                flagged = ", ".join(f"{f['kind']} {f['name']}" for f in result["flagged"])
                print(
                    f"{mode} {k}/{len(todo[mode])}: {c.name} #{repeat}: {result['status']} (exit {result['exit']}), "
                    f"{result['wall_s']:.0f} s{named}{', flagged ' + flagged if flagged else ''}",
                    flush=True,
                )
    finally:
        if ns.keep is not None:
            shutil.copytree(work, ns.keep, dirs_exist_ok=True)
            print(f"kept the repository and the reports in {ns.keep}")
        shutil.rmtree(work, ignore_errors=True)


def model_of(c: Change) -> str:
    return FAMILIES[c.family].model


def now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


# Verifying in-process --------------------------------------------------------------------------------


def load(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise EditError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def forward_ms(model: Any, x: Any, runs: int = 10) -> float:
    import torch

    with torch.no_grad():
        model(x)
        times = []
        for _ in range(runs):
            start = time.perf_counter()
            model(x)
            times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def verify(families: list[str], changes: list[Change], module_rounds: int = 0) -> None:
    """Every edit applied to the installed source, every model built from it and run forward on one thread: its
    median time, and its ratio to the base's (the median of 3 rounds, each timing the base then the change, so that
    the machine's drift cancels). With ``module_rounds``, each change's modules profiled too (``knock_ons``). No
    pytest, no git."""
    import torch

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(prefix="fxprof-code-changes-verify-") as tmp:
        work = Path(tmp)
        builder = work / "build_zoo.py"
        builder.write_text(BUILD.format(modules={}), encoding="utf-8")
        make = load(builder, "code_changes_build").make
        bases: dict[str, tuple[Any, Any]] = {}
        print(f"{'change':30} {'model':9} {'kind':8} {'ms':>6} {'/ base':>7}")
        for n, (name, c) in enumerate([(f, None) for f in families] + [(c.family, c) for c in changes]):
            family = FAMILIES[name]
            text, where = installed_source(family)
            if c is not None:
                text = apply(text, c.edits, f"{where} ({c.name})")
            path = work / f"source_{n}.py"
            path.write_text(text, encoding="utf-8")
            model, x = make(family.model, load(path, f"code_changes_source_{n}"))
            ms = forward_ms(model, x)
            ratio = "-"
            if c is None:
                bases[family.model] = (model, x)
            else:
                base = bases[family.model]
                ratios = [forward_ms(model, x) / forward_ms(*base) for _ in range(3)]
                ratio = f"{statistics.median(ratios):.2f}"
            print(
                f"{c.name if c else 'base':30} {family.model:9} {c.kind if c else '':8} {ms:>6.1f} {ratio:>7}",
                flush=True,
            )
            if c is not None and module_rounds:
                knock_ons(c, bases[family.model], (model, x), module_rounds)


def module_seconds(model: Any, x: Any) -> dict[str, float]:
    """Each module's time by its folded path at every depth (instances of a block summed), from this plugin's own
    profile of the model (``pytest_fxprof.profile``: the graph the gate measures, node by node, the median of 20
    passes): a node counts in every module around it, as the gate's module aggregates count it."""
    from pytest_fxprof import profile

    out: dict[str, float] = {}
    for n in profile(model, x, passes=20, flops=False).nodes:
        parts = n.info.module.split(".") if n.info.module else []
        depth = len(parts) - 1 if n.info.op == "call_module" else len(parts)  # a module called whole is a node
        for path in {fold(".".join(parts[:d])) for d in range(1, depth + 1)}:
            out[path] = out.get(path, 0.0) + n.median_ns * 1e-9
    return out


def knock_ons(c: Change, base: tuple[Any, Any], changed: tuple[Any, Any], rounds: int) -> None:
    """The change's expected module and every module outside it (off its path from the root, not an instance of
    the edited class, 0.2 % of the model or more) that ran x1.05 or more slower than the base, in-process: ``rounds``
    rounds, each profiling the base then the change (``module_seconds``), the median of the rounds' ratios. An
    unchanged module outside that slows here too slowed for real, in one process, not by the noise between the
    pairs' processes: a knock-on of the change."""
    ratios: dict[str, list[float]] = {}
    sizes: dict[str, float] = {}
    for _ in range(rounds):
        old, new = module_seconds(*base), module_seconds(*changed)
        for path in old.keys() & new.keys():
            ratios.setdefault(path, []).append(new[path] / old[path])
            sizes[path] = old[path]
    total = sum(t for p, t in sizes.items() if "." not in p)  # the top-level modules (the root's own nodes aside)
    model = changed[0]
    instances = [fold(n) for n, m in model.named_modules() if n and type(m).__name__ == c.cls]
    line = {"module": c.module, "class_instances": instances}
    expected = {p: statistics.median(r) for p, r in ratios.items() if relation(p, c.module) == "same"}
    for path, ratio in sorted(expected.items()):
        print(f"    {'expected':9} {path:45} x{ratio:.2f}  {sizes[path] / max(total, 1e-12):>5.1%} of the model")
    for path, r in sorted(ratios.items()):
        ratio = statistics.median(r)
        if outside(path, line) and ratio >= 1.05 and sizes[path] >= 0.002 * total:
            print(f"    {'knock-on':9} {path:45} x{ratio:.2f}  {sizes[path] / max(total, 1e-12):>5.1%} of the model")


# The summary -----------------------------------------------------------------------------------------


def relation(module: str, expected: str) -> str:
    """How the folded ``module`` stands to the expected pattern: same, ancestor, inside or outside (``*`` and
    ``?`` within an expected component match as in a shell; the root is an ancestor of everything)."""
    have = fold(module).split(".") if module else []
    want = expected.split(".") if expected else []
    shared = min(len(have), len(want))
    if not all(fnmatch.fnmatchcase(have[i], want[i]) for i in range(shared)):
        return "outside"
    if len(have) == len(want):
        return "same"
    return "ancestor" if len(have) < len(want) else "inside"


def named_right(line: dict[str, Any]) -> bool:
    blame = line.get("blame")
    if not isinstance(blame, dict) or not blame.get("name"):
        return False
    if blame.get("kind") == "class":
        return bool(line["class"]) and blame["name"] == line["class"]
    return relation(str(blame["name"]), line["module"]) == "same"


def outside(module: str, line: dict[str, Any]) -> bool:
    """Whether ``module`` lies outside the change's expected module and off its path from the root, and outside
    every instance of the class the change edited (``class_instances``, where the check recorded them) and off its
    path from the root (a module or pattern compared with each instance's indices folded: CaiT's class-attention
    layer holds an instance of the ``Attention`` its changes edit, outside the expected patch layers)."""
    instances = line.get("class_instances") or []
    if any(module == p or module.startswith(p + ".") or relation(module, fold(p)) != "outside" for p in instances):
        return False
    return relation(module, line["module"]) == "outside"


def named_wrong(line: dict[str, Any]) -> bool:
    """The failure leads with something outside the expected module, or another class."""
    blame = line.get("blame")
    if not isinstance(blame, dict) or not blame.get("name"):
        return False
    if blame.get("kind") == "class":
        return bool(line["class"]) and blame["name"] != line["class"]
    return outside(str(blame["name"]), line)


def flagged_outside(line: dict[str, Any]) -> list[str]:
    """What failed the test outside the expected module (a node by its module), or of another class."""
    out = []
    for f in line.get("flagged", []):
        where = f.get("module") if f.get("kind") == "node" else f.get("name")
        if f.get("kind") in ("node", "module", "pattern") and outside(str(where or ""), line):
            out.append(f"{f.get('kind')} {f.get('name')}")
        if f.get("kind") == "class" and line["class"] and f.get("name") != line["class"]:
            out.append(f"class {f.get('name')}")
    return out


def interval(k: int, n: int) -> list[float] | None:
    w = gq.wilson(k, n)
    return [round(w[0], 4), round(w[1], 4)] if w else None


def span(k: int, n: int) -> str:
    w = gq.wilson(k, n)
    return f"{w[0]:.0%}-{w[1]:.0%}" if w else "-"


def tally(lines: list[dict[str, Any]], truth: dict[tuple[str, str], float]) -> dict[str, Any]:
    changed = [x for x in lines if x["kind"] == "change"]
    caught = [x for x in changed if x["status"] == "regression"]
    real = [x for x in changed if slowed(x, truth)]
    real_caught = [x for x in real if x["status"] == "regression"]
    neutral = [x for x in lines if x["kind"] == "neutral"]
    alarms = sum(x["status"] == "regression" for x in neutral)
    walls = [x["wall_s"] for x in lines]
    return {
        "changes": len(changed),
        "caught": len(caught),
        "caught_wilson95": interval(len(caught), len(changed)),
        "named_right": sum(named_right(x) for x in caught),
        "named_wrong": sum(named_wrong(x) for x in caught),
        "flagged_outside": sum(bool(flagged_outside(x)) for x in caught),
        "slowed_its_module": len(real),
        "slowed_caught": len(real_caught),
        "slowed_named_right": sum(named_right(x) for x in real_caught),
        "blame_absent": sum(not isinstance(x.get("blame"), dict) for x in caught),
        "neutral": len(neutral),
        "false_alarms": alarms,
        "false_alarm_wilson95": interval(alarms, len(neutral)),
        "other_statuses": dict(sorted(Counter(x["status"] for x in lines if x["status"] not in KNOWN).items())),
        "wall_s_median": round(statistics.median(walls), 2) if walls else None,
    }


def summary(out: Path, summary_json: Path | None) -> None:
    checks = [x for x in read_lines(out) if x.get("type") == "check"]
    modes = [m for m in MODES if any(x["mode"] == m for x in checks)]
    truth = truths(checks)
    result: dict[str, Any] = {"source": str(out), "date": now(), "modes": {}, "checks": []}
    for mode in modes:
        of_mode = [x for x in checks if x["mode"] == mode]
        print(f"\nmode {mode}")
        head = f"{'family':13} {'changes':>7} {'caught':>7} {'95 % interval':>13} {'right':>6} {'wrong':>6} {'also':>5}"
        print(
            f"{head} {'slowed':>6} {'caught':>6} {'right':>6} {'neutral':>7} {'alarms':>7} {'95 % interval':>13} "
            f"{'other':10} {'wall s':>6}"
        )
        result["modes"][mode] = {}
        for family in [*FAMILIES, "all"]:
            lines = [x for x in of_mode if family in ("all", x["family"])]
            if not lines:
                continue
            t = tally(lines, truth)
            result["modes"][mode][family] = t
            other = ",".join(f"{s}:{n}" for s, n in t["other_statuses"].items()) or "-"
            print(
                f"{family:13} {t['changes']:>7} {t['caught']:>7} {span(t['caught'], t['changes']):>13} "
                f"{t['named_right']:>6} {t['named_wrong']:>6} {t['flagged_outside']:>5} {t['slowed_its_module']:>6} "
                f"{t['slowed_caught']:>6} "
                f"{t['slowed_named_right']:>6} {t['neutral']:>7} {t['false_alarms']:>7} "
                f"{span(t['false_alarms'], t['neutral']):>13} {other:10} {t['wall_s_median'] or 0:>6.1f}"
            )
    print("\ncaught: the test failed; right, wrong: of the caught, the failure led with the expected module or class,")
    print("or with something outside it; also: of the caught, those where something outside it failed too (an")
    print("unchanged module the gate names 'also slower, its code unchanged'); slowed: changes whose expected module")
    print("the pairs against a revision measured x1.05 or more (median over its checks), then of those, caught and")
    print("named right; alarms: neutral edits failed; wall s: median per check\n")
    for x in sorted(checks, key=lambda x: (MODES.index(x["mode"]), x["kind"], x["change"], x["repeat"])):
        caught = x["status"] == "regression"
        blame = x.get("blame")
        said = f"{blame.get('kind')} {blame.get('name')}" if isinstance(blame, dict) else "-"
        verdict = "" if not caught or x["kind"] == "neutral" else "right" if named_right(x) else ""
        verdict = "wrong" if caught and x["kind"] == "change" and named_wrong(x) else verdict
        verdict += "+also" if caught and x["kind"] == "change" and flagged_outside(x) else ""
        flagged = ", ".join(f"{f.get('kind')} {f.get('name')}" for f in x.get("flagged", []))
        ratio = truth.get((x["model"], x["change"]))
        measured = f"x{ratio:.2f}" if ratio is not None else "-"
        print(
            f"{x['mode']:8} {x['change']:28} #{x['repeat']} {measured:>6} {x['status']:10} {verdict:10} "
            f"blame {said}; {flagged}"
        )
        result["checks"].append(
            {k: x.get(k) for k in ("mode", "family", "model", "change", "kind", "repeat", "module", "class")}
            | {"status": x["status"], "blame": said, "right": named_right(x), "wrong": named_wrong(x)}
            | {"also_outside": flagged_outside(x)}
            | {"expected_module_ratio": truth.get((x["model"], x["change"]))}
            | {"flagged": flagged, "wall_s": x["wall_s"]}
        )
    if summary_json is not None:
        summary_json.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
        print(f"\nwrote {summary_json}")


# Main ------------------------------------------------------------------------------------------------


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    argv, extra = gq.pytest_args(argv)
    parser = argparse.ArgumentParser(
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        usage="%(prog)s --out PATH [options] [-- PYTEST_ARGS ...]",
    )
    parser.add_argument("--out", type=Path, required=True, help="JSON lines: one per check (and per recording)")
    parser.add_argument("--modes", default=",".join(MODES), help=f"comma-separated, of {', '.join(MODES)} (both)")
    parser.add_argument("--families", default=",".join(FAMILIES), help=f"comma-separated, of {', '.join(FAMILIES)}")
    parser.add_argument("--changes", default="", help="comma-separated names of changes and neutral edits (all)")
    parser.add_argument("--neutral-repeats", type=int, default=3, metavar="N", help="checks per neutral edit (3)")
    parser.add_argument("--seed", type=int, default=0, help="of the order of each mode's checks (0)")
    parser.add_argument(
        "--compiled", action="store_true", help="each test hands the fixture torch.compile(model): Inductor's kernels"
    )
    parser.add_argument("--keep", type=Path, metavar="DIR", help="copy the repository and the reports into DIR")
    parser.add_argument("--summary", action="store_true", help="print the tables of what --out holds, run nothing")
    parser.add_argument("--summary-json", type=Path, metavar="PATH", help="write the summary as JSON too")
    parser.add_argument(
        "--tradeoff",
        default="",
        metavar="TOLERANCES",
        help="judge the checks of --out against a revision again at these node and aggregate tolerances "
        "(comma-separated, 0.01,0.02); run nothing",
    )
    parser.add_argument(
        "--verify", action="store_true", help="apply every edit, build and time each model in-process; no pytest"
    )
    parser.add_argument(
        "--module-rounds",
        type=int,
        default=0,
        metavar="N",
        help="with --verify: profile every module too, N rounds, and list the unchanged ones outside that slowed (0)",
    )
    ns = parser.parse_args(argv)
    ns.modes = [m for m in ns.modes.split(",") if m]
    ns.families = [f for f in ns.families.split(",") if f]
    names = [c for c in ns.changes.split(",") if c]
    unknown = (
        [m for m in ns.modes if m not in MODES]
        + [f for f in ns.families if f not in FAMILIES]
        + [c for c in names if c not in {x.name for x in CHANGES}]
    )
    if unknown:
        parser.error(f"unknown: {', '.join(unknown)}; changes: {', '.join(c.name for c in CHANGES)}")
    if ns.neutral_repeats < 0:
        parser.error("--neutral-repeats cannot be negative")
    ns.selected = [c for c in CHANGES if c.family in ns.families and (not names or c.name in names)]
    return ns, extra


def main() -> None:
    ns, extra = parse_args(sys.argv[1:])
    if ns.summary:
        summary(ns.out, ns.summary_json)
        return
    if ns.tradeoff:
        tradeoff(ns.out, [float(t) for t in ns.tradeoff.split(",")], CONFIDENCE)
        return
    families = list(dict.fromkeys(c.family for c in ns.selected))
    require(families)
    try:
        if ns.verify:
            verify(families, ns.selected, ns.module_rounds)
            return
        run(ns, extra, families, ns.selected)
    except (EditError, gq.PytestError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    summary(ns.out, ns.summary_json)


if __name__ == "__main__":
    main()
