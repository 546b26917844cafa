"""What the gate blames on a device: the GPT-style model of ``bench/gpt_style.py`` profiled on CUDA (or the CPU),
its code changed the way pull requests change it, judged by both rules in one process.

    .venv/bin/python bench/device_blame.py --device cuda --out device_blame.json
    .venv/bin/python bench/device_blame.py --device cpu --changes gelu --pairs 4 --capture dynamo

A smoke check of the device's code paths (capture, the timing engine's events, module classes, the decision and
what a failure leads with), not a measurement of the gate's error rates: the old and new code alternate in one
process (``--pairs`` times each), where the plugin's check against a revision runs them in fresh processes
(``bench/code_changes.py`` does that, on the CPU). Each change replaces one class's ``forward`` while it is
profiled: ``gelu`` (the MLP's GELU by its tanh formula: should lead with ``transformer.h.*.mlp``), ``attention``
(attention by hand instead of SDPA: ``transformer.h.*.attn``), ``norm`` (layer norm by hand in every norm:
class ``LayerNorm``) and ``none`` (nothing changed: should pass). Prints, per change and rule, the status and the
lead, and writes them as JSON (``--out``).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from torch.nn import functional as F  # noqa: N812 (the usual name)

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpt_style

from pytest_fxprof import profile
from pytest_fxprof.judge.decision import Policy, compare
from pytest_fxprof.judge.paired import PairedPolicy, compare_pairs
from pytest_fxprof.records.measurement import BaselineEntry, Tolerances
from pytest_fxprof.records.verdicts import Comparison
from pytest_fxprof.views.render import regression_message


def gelu_by_formula(self: gpt_style.MLP, x: torch.Tensor) -> torch.Tensor:
    x = self.c_fc(x)
    x = 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))
    out: torch.Tensor = self.dropout(self.c_proj(x))
    return out


def norm_by_hand(self: gpt_style.LayerNorm, x: torch.Tensor) -> torch.Tensor:
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    y = (x - mean) * torch.rsqrt(var + 1e-5) * self.weight
    return y + self.bias if self.bias is not None else y


def attention_by_hand(self: gpt_style.CausalSelfAttention, x: torch.Tensor) -> torch.Tensor:
    b, t, c = x.size()
    q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
    q, k, v = (z.view(b, t, self.n_head, c // self.n_head).transpose(1, 2) for z in (q, k, v))
    att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
    mask = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
    att = F.softmax(att.masked_fill(~mask, float("-inf")), dim=-1)
    y = (att @ v).transpose(1, 2).contiguous().view(b, t, c)
    out: torch.Tensor = self.resid_dropout(self.c_proj(y))
    return out


CHANGES: dict[str, tuple[type[torch.nn.Module], Callable[..., torch.Tensor] | None, str]] = {
    "gelu": (gpt_style.MLP, gelu_by_formula, "transformer.h.*.mlp"),
    "attention": (gpt_style.CausalSelfAttention, attention_by_hand, "transformer.h.*.attn"),
    "norm": (gpt_style.LayerNorm, norm_by_hand, "LayerNorm"),
    "none": (gpt_style.MLP, None, ""),
}


def merged(entries: list[BaselineEntry]) -> BaselineEntry:
    return replace(entries[0], runs=tuple(e.runs[0] for e in entries))


def lead(c: Comparison) -> str:
    if c.blame is None:
        return ""
    return c.blame.name


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--changes", default=",".join(CHANGES))
    parser.add_argument("--pairs", type=int, default=6)
    parser.add_argument("--capture", default="auto", help="the capture method (auto: export, for the assert)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    model, x = gpt_style.build()
    model, x = model.to(args.device), x.to(args.device)
    tolerances = Tolerances(0.05, 0.03)
    rows: list[dict[str, Any]] = []
    for name in args.changes.split(","):
        cls, changed, expected = CHANGES[name]
        original = cls.forward
        old: list[BaselineEntry] = []
        new: list[BaselineEntry] = []
        try:
            for _ in range(args.pairs):
                for side, forward in ((old, original), (new, changed or original)):
                    cls.forward = forward
                    torch._dynamo.reset()  # as a fresh process would: dynamo does not guard on a class's method
                    side.append(profile(model, x, passes=20, warmup=5, capture=args.capture).entry(tolerances))
        finally:
            cls.forward = original
        paired = compare_pairs(merged(old), merged(new), PairedPolicy(), against="the old code")
        half = len(old) // 2
        stored = compare(merged(old[:half]), merged(new[half : half + 2]), Policy())
        for rule, c in (("against a revision", paired), ("against a baseline", stored)):
            row = {
                "device": args.device,
                "change": name,
                "rule": rule,
                "status": c.status.value,
                "lead": lead(c),
                "expected": expected,
                "capture": old[0].capture.method,
                "clock": old[0].environment.clock,
                "undecided": list(c.noisy),  # what could not be decided, where nothing failed
            }
            rows.append(row)
            print(f"{name:10} {rule:20} {row['status']:10} lead {row['lead'] or '-':24} expected {expected or '-'}")
            if c.status.value == "regression":
                print("\n".join("    " + line for line in regression_message(name, c).splitlines()[:4]))
    if args.out is not None:
        args.out.write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
