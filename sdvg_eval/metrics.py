"""Quality metrics of a finished video, pluggable: `--metrics visionreward:FOLDER imagereward clip:FOLDER py:MOD:ARG`.

Every metric maps frames [T, H, W, 3] in 0..1 and the prompt text to one float, and reads local files only.
Built in: VisionReward-Video (the paper's metric, column `vr`, visionreward.py), ImageReward mean over all frames
(the router's own metric, hence biased toward SDVG), CLIP frame-text cosine from a local folder.
"""
from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import torch
import torch.nn.functional as F

# CLIP's preprocessing (OpenAI CLIP: bicubic resize of the short side, center crop, these mean/std;
# the same constants transformers.image_utils.OPENAI_CLIP_MEAN/STD hold).
CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)
CLIP_BATCH = 16  # frames per CLIP forward (memory bound only; results do not depend on it)
IMAGEREWARD_NOTE = ("imagereward_mean is ImageReward, the router's own score (mean over all frames): it is biased "
                    "toward SDVG, which keeps exactly the drafts ImageReward likes; judge quality with an "
                    "independent metric (clip, visionreward)")


class MetricUnavailable(RuntimeError):
    """A metric's package, adapter or local files are missing (never downloaded)."""


@dataclass(frozen=True)
class MetricOptions:
    """Settings of the built-in metrics that are not part of their spec (VisionReward's checklist and speed)."""

    vr_checklist: str | None = None  # local checkout of THUDM/VisionReward (questions + weights)
    vr_mode: str = "prefix"  # prefix | single | generate (visionreward.py)
    vr_batch: int = 0  # questions per batched forward (0: all)
    vr_video: str = "mp4"  # mp4 | frames: what the sampled frames are read from


class Metric(Protocol):
    name: str  # the CSV column
    key: str  # identity (files) for the run fingerprint

    def score(self, frames: torch.Tensor, prompt: str) -> float:
        """frames [T, H, W, 3] in 0..1 -> one number (higher is better)."""


@dataclass
class ImageRewardMean:
    """ImageReward mean over all frames, with the scorer the worker already holds."""

    scorer: object
    name: str = "imagereward_mean"

    @property
    def key(self) -> str:
        return f"imagereward_mean:{self.scorer.key}"

    def score(self, frames: torch.Tensor, prompt: str) -> float:
        with torch.no_grad():
            return float(self.scorer.score_frames(frames, prompt).double().mean())


class ClipScore:
    """Mean over frames of the cosine between CLIP's image and text embeddings (local folder, transformers)."""

    name = "clip"

    def __init__(self, folder: str | Path, device: str = "cpu"):
        from transformers import AutoTokenizer, CLIPModel

        f = Path(folder).expanduser()
        if not (f / "config.json").is_file():
            raise MetricUnavailable(f"CLIP folder {f} has no config.json (a local CLIPModel folder saved with "
                                    f"save_pretrained, with its tokenizer files)")
        self.key = f"clip:{f.resolve()}"
        self.device = device
        self.model = CLIPModel.from_pretrained(str(f), local_files_only=True).to(device).eval()
        self.tokenizer = AutoTokenizer.from_pretrained(str(f), local_files_only=True)
        self.size = self.model.config.vision_config.image_size
        self.max_len = self.model.config.text_config.max_position_embeddings

    def preprocess(self, frames: torch.Tensor) -> torch.Tensor:
        """[T, H, W, 3] 0..1 -> [T, 3, S, S]: bicubic short side to S, center crop, CLIP mean/std."""
        x = frames.permute(0, 3, 1, 2).float()
        h, w = x.shape[-2:]
        scale = self.size / min(h, w)
        nh, nw = max(self.size, round(h * scale)), max(self.size, round(w * scale))
        x = F.interpolate(x, size=(nh, nw), mode="bicubic", align_corners=False, antialias=True).clamp(0, 1)
        top, left = (nh - self.size) // 2, (nw - self.size) // 2
        x = x[..., top:top + self.size, left:left + self.size]
        mean = torch.tensor(CLIP_MEAN).view(1, 3, 1, 1)
        std = torch.tensor(CLIP_STD).view(1, 3, 1, 1)
        return (x - mean) / std

    def score(self, frames: torch.Tensor, prompt: str) -> float:
        with torch.no_grad():
            tok = self.tokenizer([prompt], padding=True, truncation=True, max_length=self.max_len, return_tensors="pt")
            t = self.model.get_text_features(**{k: v.to(self.device) for k, v in tok.items()})
            t = F.normalize(_features(t), dim=-1)
            sims = []
            for i in range(0, frames.shape[0], CLIP_BATCH):
                px = self.preprocess(frames[i:i + CLIP_BATCH]).to(self.device)
                v = F.normalize(_features(self.model.get_image_features(pixel_values=px)), dim=-1)
                sims.append((v @ t.T)[:, 0].double().cpu())
            return float(torch.cat(sims).mean())


def _features(out) -> torch.Tensor:
    """get_*_features returns a tensor (transformers < 5) or an output object holding the pooled projection."""
    if isinstance(out, torch.Tensor):
        return out
    for name in ("pooler_output", "text_embeds", "image_embeds"):
        v = getattr(out, name, None)
        if isinstance(v, torch.Tensor):
            return v
    raise TypeError(f"unexpected CLIP feature output {type(out).__name__}")


def _plugin(module: str, arg: str, device: str, what: str) -> Metric:
    """A metric from a local module's `make_metric(arg, device)`."""
    if importlib.util.find_spec(module) is None:
        raise MetricUnavailable(f"{what}: Python module {module!r} is not installed (no download is attempted)")
    metric = importlib.import_module(module).make_metric(arg, device)
    for attr in ("name", "key", "score"):
        if not hasattr(metric, attr):
            raise MetricUnavailable(f"{what}: {module}.make_metric returned an object without .{attr}")
    return metric


def metric_spec_problems(spec: str, options: MetricOptions = MetricOptions()) -> list[str]:
    """Every reason a metric spec cannot be used, checked before any model loads (empty: fine)."""
    kind, _, arg = spec.partition(":")
    if kind == "imagereward":
        return []
    if kind == "clip":
        if not arg or not (Path(arg).expanduser() / "config.json").is_file():
            return [f"metric {spec!r}: give a local CLIP folder holding config.json (clip:/path/to/clip)"]
        return []
    if kind == "visionreward":
        from .visionreward import checklist_problems, model_folder_problems

        return [f"metric {spec!r}: {p}" for p in model_folder_problems(arg) + checklist_problems(options.vr_checklist)]
    if kind == "py":
        module, _, rest = arg.partition(":")
        if not module or importlib.util.find_spec(module) is None:
            return [f"metric {spec!r}: module {module!r} not found (py:MODULE[:ARG], MODULE.make_metric(ARG, device))"]
        return []
    return [f"unknown metric {spec!r}; use visionreward:FOLDER, imagereward, clip:FOLDER or py:MODULE[:ARG]"]


def metric_identity(spec: str, options: MetricOptions = MetricOptions()) -> str:
    """What makes a metric column comparable between runs (part of the run fingerprint): its files and settings."""
    kind, _, arg = spec.partition(":")
    if kind == "visionreward":
        from .visionreward import folder_key, mp4_decoder_name, read_checklist

        video = f"mp4:{mp4_decoder_name()}" if options.vr_video == "mp4" else options.vr_video
        return (f"{spec}|model {folder_key(arg)}|checklist {read_checklist(options.vr_checklist).key}|"
                f"mode {options.vr_mode}|video {video}")
    return spec


def build_metric(spec: str, scorer, device: str = "cpu", options: MetricOptions = MetricOptions()) -> Metric:
    """Instantiate one metric from its spec (in the worker, which holds the ImageReward scorer)."""
    problems = metric_spec_problems(spec, options)
    if problems:
        raise MetricUnavailable("; ".join(problems))
    kind, _, arg = spec.partition(":")
    if kind == "imagereward":
        if scorer is None:
            raise MetricUnavailable("metric imagereward needs the ImageReward model (--reward)")
        return ImageRewardMean(scorer)
    if kind == "clip":
        return ClipScore(arg, device)
    if kind == "visionreward":
        from .visionreward import VisionRewardVideo

        return VisionRewardVideo.from_folder(arg, options.vr_checklist, device, mode=options.vr_mode,
                                             batch=options.vr_batch, video=options.vr_video)
    module, _, rest = arg.partition(":")
    return _plugin(module, rest, device, spec)


def metric_name(spec: str) -> str:
    """The CSV column a metric spec writes (known before the worker loads it)."""
    kind, _, arg = spec.partition(":")
    if kind == "imagereward":
        return ImageRewardMean.name
    if kind == "visionreward":
        from .visionreward import COLUMN

        return COLUMN  # `vr`, the paper's column
    if kind == "py":
        return arg.partition(":")[0].rsplit(".", 1)[-1]
    return kind
