"""peft LoRA files merged into a Wan DiT's weights at load: W += (alpha / r) * B @ A, no peft needed at run time.

The format is what peft's `get_peft_model_state_dict` returns for a model wrapped by `get_peft_model`, as LongLive
v1.0 saves it (`lora.pt`: entry `generator_lora`, or the bare dict): `base_model.model.<module>.lora_A.weight`
[r, in] and `...lora_B.weight` [out, r], the adapter name already stripped by peft. FSDP's
`_fsdp_wrapped_module.` is dropped anywhere in a name. The state dict holds no alpha (it lives in the training
config: LongLive uses rank 256, alpha 256), so alpha is given by the caller; None means alpha = r (scale 1).

Every problem (not a peft LoRA, unpaired A/B, mixed ranks, targets the base lacks or that are not Linear layers,
widths of another model, a missing required target) is reported before any weight changes.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

import torch
from torch import nn

from ..models.state_dict import CheckpointError, key_list, strip_wrapper_names
from .tensor_file import LORA_ENTRY, file_identity, read_state_dict

__all__ = ["LoraError", "LoraSpec", "LoraWeights", "read_lora", "parse_lora", "block_linear_names",
           "lora_problems", "check_lora", "merge_lora", "lora_identity", "describe_lora", "LORA_ENTRY", "PEFT_PREFIX"]

# peft names a wrapped model's modules under `base_model.model.` (PeftModel -> LoraModel -> the model itself).
PEFT_PREFIX = "base_model.model."
# peft's plain LoRA weights of one Linear; other peft tensors (DoRA magnitudes, embedding LoRA, biases) are refused.
_PAIR_KEY = re.compile(r"^(?P<module>.+)\.lora_(?P<half>[AB])\.weight$")
# Module holding the transformer blocks in WanDiT (LongLive targets every nn.Linear inside them).
BLOCKS = "blocks"


class LoraError(CheckpointError):
    """A LoRA file cannot be merged into this model; the message names the file, what does not fit and why."""


@dataclass(frozen=True)
class LoraSpec:
    """A LoRA file to merge at load, and what it must look like (a drafter kind fills these in)."""

    path: str
    alpha: float | None = None  # peft lora_alpha; None: alpha = the file's rank (scale 1)
    rank: int | None = None  # required rank (LongLive's lora.pt: 256); None: any single rank
    every_block_linear: bool = False  # True: one pair for every nn.Linear inside the blocks, nothing else (LongLive)


@dataclass(frozen=True)
class LoraWeights:
    """The pairs of a LoRA file under the model's module names: name -> (A [r, in], B [out, r])."""

    source: str
    pairs: Mapping[str, tuple[torch.Tensor, torch.Tensor]]
    rank: int
    entry: str | None = None  # `generator_lora` when the file wraps the dict, None for a bare peft state dict

    def scale(self, alpha: float | None) -> float:
        """alpha / r, with alpha = r when not given."""
        return 1.0 if alpha is None else float(alpha) / self.rank


def parse_lora(sd: Mapping[str, torch.Tensor], source: str | os.PathLike = "<state dict>",
               entry: str | None = None) -> LoraWeights:
    """peft LoRA state dict -> LoraWeights; LoraError naming every key that is not a plain Linear LoRA pair."""
    src = str(source)
    if not sd:
        raise LoraError(f"{src} holds no LoRA weights (an empty state dict)", src)
    try:
        sd = strip_wrapper_names(sd, src)
    except CheckpointError as e:
        raise LoraError(str(e), src) from e
    halves: dict[str, dict[str, torch.Tensor]] = {}
    not_peft, unsupported = [], []
    for raw_key, value in sd.items():
        key = raw_key
        if not key.startswith(PEFT_PREFIX):
            not_peft.append(raw_key)
            continue
        m = _PAIR_KEY.match(key[len(PEFT_PREFIX):])
        if m is None:
            unsupported.append(raw_key)
            continue
        halves.setdefault(m["module"], {})[m["half"]] = value
    if not_peft:
        looks_like = (" It looks like a full model checkpoint, not a LoRA." if any(k.endswith("patch_embedding.weight")
                                                                                  for k in not_peft) else "")
        raise LoraError(f"{src} is not a peft LoRA state dict: {key_list(not_peft)} keys do not start with "
                        f"'{PEFT_PREFIX}' (peft's get_peft_model_state_dict names, as LongLive's lora.pt).{looks_like}",
                        src)
    if unsupported:
        raise LoraError(f"{src}: {key_list(unsupported)} keys are not plain LoRA weights of a Linear layer "
                        f"(<module>.lora_A.weight / <module>.lora_B.weight); DoRA, embedding LoRA and LoRA biases "
                        f"are not supported", src)
    unpaired = [f"{name}.lora_{'B' if 'A' in h else 'A'}.weight missing" for name, h in halves.items() if len(h) != 2]
    if unpaired:
        raise LoraError(f"{src}: every lora_A needs its lora_B: {key_list(unpaired)}", src)
    pairs: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
    ranks: dict[int, list[str]] = {}
    bad_ranks = []
    for name, h in sorted(halves.items()):
        a, b = h["A"], h["B"]
        if a.ndim != 2 or b.ndim != 2 or a.shape[0] != b.shape[1] or a.shape[0] == 0:
            bad_ranks.append(f"{name}: lora_A {list(a.shape)}, lora_B {list(b.shape)}")
            continue
        ranks.setdefault(int(a.shape[0]), []).append(name)
        pairs[name] = (a, b)
    if bad_ranks:
        raise LoraError(f"{src}: lora_A must be [r, in] and lora_B [out, r] with the same r > 0: "
                        f"{len(bad_ranks)} pairs do not ({'; '.join(bad_ranks[:5])})", src)
    if len(ranks) > 1:
        seen = ", ".join(f"r={r}: {len(n)} layers (e.g. {n[0]})" for r, n in sorted(ranks.items()))
        raise LoraError(f"{src}: the LoRA mixes ranks ({seen}); a per-layer rank needs a per-layer alpha, which the "
                        f"state dict does not hold", src)
    return LoraWeights(source=src, pairs=pairs, rank=next(iter(ranks)), entry=entry)


def read_lora(path: str | os.PathLike) -> LoraWeights:
    """Read a LoRA file (.pt with entry `generator_lora` or a bare peft dict, or .safetensors) and parse it."""
    sd, entry = read_state_dict(path, pt_entry=LORA_ENTRY, entries=(LORA_ENTRY,), what="LoRA file")
    return parse_lora(sd, path, entry)


def block_linear_names(net: nn.Module) -> tuple[str, ...]:
    """Every nn.Linear inside the transformer blocks: LongLive's LoRA targets (q, k, v, o of both attentions, FFN)."""
    return tuple(name for name, m in net.named_modules() if name.startswith(BLOCKS + ".") and isinstance(m, nn.Linear))


def lora_problems(lora: LoraWeights, net: nn.Module, rank: int | None = None,
                  every_block_linear: bool = False) -> list[str]:
    """Why this LoRA does not fit `net` (a meta-device model is enough): empty list when it fits.

    `rank`: the rank it must have; `every_block_linear`: it must adapt exactly the Linear layers inside the blocks.
    """
    modules = dict(net.named_modules())
    problems = []
    missing = [n for n in lora.pairs if n not in modules]
    if missing:
        problems.append(f"{key_list(missing)} targets are not modules of the base model (a LoRA for another "
                        f"architecture?)")
    not_linear = [f"{n} ({type(modules[n]).__name__})" for n in lora.pairs
                  if n in modules and not isinstance(modules[n], nn.Linear)]
    if not_linear:
        problems.append(f"{key_list(not_linear)} targets are not Linear layers")
    widths = []
    for name, (a, b) in lora.pairs.items():
        m = modules.get(name)
        if isinstance(m, nn.Linear) and (a.shape[1] != m.in_features or b.shape[0] != m.out_features):
            widths.append(f"{name}: LoRA {a.shape[1]} -> {b.shape[0]}, model {m.in_features} -> {m.out_features}")
    if widths:
        problems.append(f"widths do not match the base model in {len(widths)} layers ({'; '.join(sorted(widths)[:3])}"
                        f"{'; ...' if len(widths) > 3 else ''}): a LoRA made for another model size")
    if rank is not None and lora.rank != rank:
        problems.append(f"rank {lora.rank}, but this drafter's LoRA has rank {rank}")
    if every_block_linear:
        wanted = set(block_linear_names(net))
        absent, extra = sorted(wanted - set(lora.pairs)), sorted(set(lora.pairs) - wanted)
        if absent:
            problems.append(f"it adapts {len(wanted) - len(absent)} of the {len(wanted)} Linear layers in the blocks; "
                            f"missing {key_list(absent)} (this drafter's LoRA adapts every one of them)")
        if extra:
            problems.append(f"{key_list(extra)} targets lie outside the blocks' Linear layers")
    return problems


def check_lora(lora: LoraWeights, net: nn.Module, rank: int | None = None, every_block_linear: bool = False,
               base: str = "the base model") -> None:
    """Raise LoraError listing every problem of `lora_problems` (nothing is changed)."""
    problems = lora_problems(lora, net, rank, every_block_linear)
    if problems:
        raise LoraError(f"{lora.source} does not fit {base}: " + "; ".join(problems), lora.source)


@torch.no_grad()
def merge_lora(net: nn.Module, lora: LoraWeights, alpha: float | None = None, rank: int | None = None,
               every_block_linear: bool = False) -> int:
    """W += (alpha / r) * B @ A in float32 for every pair, after checking all of them; returns the layers merged.

    alpha None: alpha = r (scale 1). `rank` / `every_block_linear`: requirements checked first (see lora_problems).
    """
    check_lora(lora, net, rank, every_block_linear)
    scale = lora.scale(alpha)
    modules = dict(net.named_modules())
    for name, (a, b) in lora.pairs.items():
        w = modules[name].weight  # [out, in]
        delta = (b.to(device=w.device, dtype=torch.float32) @ a.to(device=w.device, dtype=torch.float32)) * scale
        w.copy_((w.to(torch.float32) + delta).to(w.dtype))
    return len(lora.pairs)


def lora_identity(spec: LoraSpec) -> str:
    """Part of a merged model's memo key: the LoRA file's identity and the alpha used."""
    return f"lora:{file_identity(spec.path)}:alpha={spec.alpha}"


def describe_lora(spec: LoraSpec, lora: LoraWeights) -> str:
    alpha = lora.rank if spec.alpha is None else spec.alpha
    return (f"LoRA {Path(spec.path).name} merged ({len(lora.pairs)} layers, rank {lora.rank}, alpha {alpha:g}, "
            f"scale {lora.scale(spec.alpha):g})")
