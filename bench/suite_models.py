"""The suites of small models that ``bench/suite_cost.py`` checks as a whole: torchvision, timm, transformers.

Random weights, small configurations, CPU, built from seed 0; images are 2 x 3 x 160 x 160 (224 where the model
needs it), token inputs 2 x 64. ``SUITES`` names the suites of 1, 5, 10 and 20 models; a model whose package is
missing is left out of a suite (``available``). This module is copied into the throw-away repository that the
bench builds, so it imports nothing of the bench.
"""

from __future__ import annotations

import importlib.util
from typing import Any

import torch

TORCHVISION = {
    "resnet18": "resnet18",
    "mobilenet_v3_small": "mobilenet_v3_small",
    "squeezenet1_1": "squeezenet1_1",
    "shufflenet_v2_x0_5": "shufflenet_v2_x0_5",
    "mnasnet0_5": "mnasnet0_5",
    "efficientnet_b0": "efficientnet_b0",
    "regnet_y_400mf": "regnet_y_400mf",
    "mobilenet_v2": "mobilenet_v2",
    "googlenet": "googlenet",
    "resnet34": "resnet34",
}
TIMM = {
    "timm_resnet10t": ("resnet10t", 160),
    "timm_convnext_atto": ("convnext_atto", 160),
    "timm_ghostnet_050": ("ghostnet_050", 160),
    "timm_lcnet_050": ("lcnet_050", 160),
    "timm_efficientvit_m0": ("efficientvit_m0", 224),
    "timm_mobilevitv2_050": ("mobilevitv2_050", 160),
}
TRANSFORMERS = ("hf_bert", "hf_vit", "hf_distilbert", "hf_gpt2")
OWN = ("gpt_style", "gpt_style_64")
"""``bench/gpt_style.py``'s GPT (4 blocks, 192 wide: about 30 ms a forward here), and one of 8 blocks, 256 wide
(about 64 ms)."""

SUITES = {
    "1": ("resnet18",),
    "5": ("resnet18", "mobilenet_v3_small", "timm_resnet10t", "timm_convnext_atto", "hf_bert"),
    "10": (
        "resnet18",
        "mobilenet_v3_small",
        "squeezenet1_1",
        "shufflenet_v2_x0_5",
        "mnasnet0_5",
        "timm_resnet10t",
        "timm_convnext_atto",
        "timm_ghostnet_050",
        "hf_bert",
        "hf_vit",
    ),
    "20": (*TORCHVISION, *TIMM, *TRANSFORMERS),
}


def available(names: tuple[str, ...]) -> tuple[str, ...]:
    """The models of ``names`` whose package is installed."""

    def has(name: str) -> bool:
        if name in OWN:
            return True
        package = "timm" if name in TIMM else "transformers" if name in TRANSFORMERS else "torchvision"
        return importlib.util.find_spec(package) is not None

    return tuple(n for n in names if has(n))


def _eval(model: torch.nn.Module) -> torch.nn.Module:
    return model.eval()


def build(name: str) -> tuple[torch.nn.Module, tuple[Any, ...], dict[str, Any]]:
    """The model in eval mode, its positional and its keyword inputs."""
    torch.manual_seed(0)
    if name in TORCHVISION:
        import torchvision

        options: dict[str, Any] = {"aux_logits": False, "init_weights": False} if name == "googlenet" else {}
        model = getattr(torchvision.models, TORCHVISION[name])(weights=None, **options)
        return model.eval(), (torch.randn(2, 3, 160, 160),), {}
    if name in OWN:
        import gpt_style  # copied beside this module

        if name == "gpt_style":
            model, tokens = gpt_style.build()
        else:
            torch.manual_seed(0)
            config = gpt_style.GPTConfig(n_layer=8, n_embd=256, n_head=8)
            model, tokens = gpt_style.GPT(config).eval(), torch.randint(0, config.vocab_size, (2, config.block_size))
        return model, (tokens,), {}
    if name in TIMM:
        import timm

        arch, size = TIMM[name]
        return timm.create_model(arch, pretrained=False).eval(), (torch.randn(2, 3, size, size),), {}
    import transformers as hf

    ids = torch.randint(0, 1000, (2, 64))
    if name == "hf_bert":
        bert = hf.BertConfig(hidden_size=128, num_hidden_layers=2, num_attention_heads=2, intermediate_size=512)
        return _eval(hf.BertModel(bert)), (), {"input_ids": ids}
    if name == "hf_distilbert":
        distil = hf.DistilBertConfig(dim=128, n_layers=2, n_heads=2, hidden_dim=512)
        return _eval(hf.DistilBertModel(distil)), (), {"input_ids": ids}
    if name == "hf_vit":
        vit = hf.ViTConfig(
            hidden_size=128, num_hidden_layers=2, num_attention_heads=2, intermediate_size=512, image_size=160
        )
        return _eval(hf.ViTModel(vit)), (torch.randn(2, 3, 160, 160),), {}
    if name == "hf_gpt2":
        gpt = hf.GPT2Config(n_embd=128, n_layer=2, n_head=2, n_positions=128, use_cache=False)
        return _eval(hf.GPT2Model(gpt)), (), {"input_ids": ids}
    raise ValueError(f"no model {name!r}")
