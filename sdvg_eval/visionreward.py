"""VisionReward-Video (THUDM), the paper's quality metric, from local files only: column `vr` of rows.csv.

What the reference computes (THUDM/VisionReward `inference-video.py`, `score()`), reproduced here:
- the checklist: every line of `VisionReward_Video/VisionReward_video_qa_select.txt` as `readlines()` gives it
  (the line break kept), `[[prompt]]` replaced by the prompt; one weight per line from `VisionReward_Video/weight.json`;
- the video: its `load_video(strategy='chat')`: for each whole second 0..round(last frame time), the frame whose
  time is closest (the first one on a tie), at most 24 frames, as uint8 [3, T, H, W];
- each question through CogVLM2-Video's own `build_conversation_input_ids(..., template_version='chat')`,
  greedy decoding; the answer is +1 when the first generated token decodes to exactly 'yes', else -1;
- score = mean over the questions of answer x weight.

Fast: the questions share the video, so the video and the template text before the question are run once
(one forward with the KV cache kept) and all questions continue from it in one batched forward that reads the
logits of their first new token only (`mode="prefix"`). The first video a metric scores is also answered one
question at a time (`mode="single"`, the forward `generate` runs for its first token) and the two must agree, so
a model whose remote code does not fit the shared-prefix path fails loudly instead of scoring differently.
`mode="generate"` calls `generate` itself per question, as the reference does (needs a transformers version the
model's remote code supports; VisionReward pins 4.42.4).

The model folder's own remote code runs (`trust_remote_code=True`, `local_files_only=True`); hub ids and
remote code that points at another repository are refused, and nothing is downloaded.
"""
from __future__ import annotations

import json
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

QUESTIONS_FILE = "VisionReward_Video/VisionReward_video_qa_select.txt"  # the checklist the reference's score() asks
WEIGHTS_FILE = "VisionReward_Video/weight.json"  # one weight per checklist line (the reference's `weight`)
PROMPT_SLOT = "[[prompt]]"  # replaced by the prompt text in every question (reference: question.replace)
MAX_FRAMES = 24  # load_video's num_frames: at most this many sampled frames
TEMPLATE = "chat"  # the reference's strategy / template_version
YES = "yes"  # reference: `1 if answer == 'yes' else -1` on tokenizer.decode(first new token)
# the reference's generation arguments (max_new_tokens=2048 there; only the first new token is ever read)
GEN_KWARGS = {"pad_token_id": 128002, "top_k": 1, "do_sample": False, "top_p": 0.1, "temperature": 0.1}
PAD_TOKEN_ID = GEN_KWARGS["pad_token_id"]  # CogVLM2's padding id (Llama-3 reserved token 128002)
LANGUAGE_TOKEN_TYPE = 0  # CogVLM2's token_type_ids: 0 text, 1 vision (its modeling code's constants)
COLUMN = "vr"  # the column name of the paper's per-prompt record
MODES = ("prefix", "single", "generate")
VIDEO_SOURCES = ("mp4", "frames")  # mp4: encode + decode as a saved video (what the reference reads); frames: raw
MODEL_FILES = ("config.json",)  # a local model folder holds at least these
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")  # either one lets AutoTokenizer read the folder
WEIGHT_SUFFIXES = (".safetensors", ".bin")


class VisionRewardError(RuntimeError):
    """The model folder, the checklist or the model's remote code cannot be used as the reference does."""


# ------------------------------------------------------------------------------------------ checklist
@dataclass(frozen=True)
class Checklist:
    """The questions (line breaks kept, as readlines() returns them) and their weights, from a local checkout."""

    questions: tuple[str, ...]
    weights: tuple[float, ...]
    key: str  # the files' identity (path, mtime, size)

    def queries(self, prompt: str) -> list[str]:
        """The questions asked about a video of `prompt` (reference: question.replace('[[prompt]]', prompt))."""
        return [q.replace(PROMPT_SLOT, prompt) for q in self.questions]


def checklist_problems(checkout: str | Path | None) -> list[str]:
    """Why the checklist cannot be read from `checkout` (None or '': not given), without reading the files."""
    if not checkout:
        return [f"--vr-checklist is missing: give a local checkout of THUDM/VisionReward (its {QUESTIONS_FILE} and "
                f"{WEIGHTS_FILE} are read in place)"]
    root = Path(checkout).expanduser()
    missing = [str(p) for p in (root / QUESTIONS_FILE, root / WEIGHTS_FILE) if not p.is_file()]
    return [f"VisionReward checklist not found: {', '.join(missing)} (give --vr-checklist, a local checkout of "
            f"THUDM/VisionReward holding {QUESTIONS_FILE} and {WEIGHTS_FILE})"] if missing else []


def read_checklist(checkout: str | Path) -> Checklist:
    """Questions and weights from a local checkout of THUDM/VisionReward (never copied, never downloaded)."""
    from sdvg_core.io.checkpoint import file_identity

    problems = checklist_problems(checkout)
    if problems:
        raise VisionRewardError(problems[0])
    root = Path(checkout).expanduser()
    qf, wf = root / QUESTIONS_FILE, root / WEIGHTS_FILE
    with open(qf, encoding="utf-8") as f:
        questions = tuple(f.readlines())
    weights = json.loads(wf.read_text(encoding="utf-8"))
    if not isinstance(weights, list) or not all(isinstance(w, (int, float)) for w in weights):
        raise VisionRewardError(f"{wf}: expected a JSON list of numbers")
    if len(weights) != len(questions) or not questions:
        raise VisionRewardError(f"{qf} has {len(questions)} question(s) but {wf} has {len(weights)} weight(s); "
                                f"they must pair up one to one")
    return Checklist(questions, tuple(float(w) for w in weights), f"{file_identity(qf)}|{file_identity(wf)}")


def combine(answers: Sequence[bool], weights: Sequence[float]) -> float:
    """score = mean(answer x weight), answer +1 for yes and -1 otherwise (the reference's numpy expression)."""
    if len(answers) != len(weights):
        raise ValueError(f"{len(answers)} answers for {len(weights)} weights")
    a = np.array([1 if yes else -1 for yes in answers])
    return np.mean(a * np.array(weights)).item()


# ------------------------------------------------------------------------------------------ frames
def chat_frame_indices(timestamps: Sequence[float], max_frames: int = MAX_FRAMES) -> list[int]:
    """The reference's 'chat' sampling: per whole second 0..round(max time) the closest frame, first on ties."""
    ts = [float(t) for t in timestamps]
    if not ts:
        raise ValueError("a video without frames")
    out: list[int] = []
    for second in range(round(max(ts)) + 1):  # Python's round (half to even), as the reference's
        closest = min(ts, key=lambda x: abs(x - second))
        out.append(ts.index(closest))
        if len(out) >= max_frames:
            break
    return out


def decode_mp4(path: str | Path) -> tuple[np.ndarray, list[float]]:
    """uint8 frames [N, H, W, 3] and their start times: decord when installed (the reference's reader), else
    imageio-ffmpeg with times i / fps (what a constant-rate file written from 0 has)."""
    try:
        from decord import VideoReader, cpu
    except ImportError:
        VideoReader = None
    if VideoReader is not None:
        vr = VideoReader(str(path), ctx=cpu(0))
        times = [float(t[0]) for t in vr.get_frame_timestamp(np.arange(len(vr)))]
        return vr.get_batch(list(range(len(vr)))).asnumpy(), times
    import imageio.v2 as imageio

    with imageio.get_reader(str(path), "ffmpeg") as r:
        fps = float(r.get_meta_data()["fps"])
        frames = np.stack([np.asarray(f) for f in r])
    return frames, [i / fps for i in range(len(frames))]


def mp4_decoder_name() -> str:
    """Which reader `decode_mp4` uses here (part of the metric's identity: readers may convert colours differently)."""
    try:
        import decord  # noqa: F401

        return "decord"
    except ImportError:
        return "imageio-ffmpeg"


def sample_video(frames: torch.Tensor, fps: float, source: str = "mp4") -> tuple[torch.Tensor, list[int]]:
    """Generated frames [T, H, W, 3] in 0..1 -> (the model's video uint8 [3, t, H, W], sampled frame indices).

    `mp4`: written with the pack's video writer and read back (the reference reads a saved mp4); `frames`: the
    uint8 frames as they go into the writer, times i / fps."""
    from sdvg_core.io.video import to_uint8, write_video

    if source == "frames":
        data = to_uint8(frames)
        times = [i / fps for i in range(len(data))]
    elif source == "mp4":
        with tempfile.TemporaryDirectory(prefix="sdvg-vr-") as d:
            data, times = decode_mp4(write_video(frames, Path(d) / "video.mp4", fps=round(fps)))
    else:
        raise ValueError(f"video source must be one of {VIDEO_SOURCES}, got {source!r}")
    idx = chat_frame_indices(times)
    video = torch.from_numpy(np.ascontiguousarray(data[idx])).permute(3, 0, 1, 2)  # reference: .permute(3, 0, 1, 2)
    return video, idx


# ------------------------------------------------------------------------------------------ model
def reference_dtype(device: str) -> torch.dtype:
    """The reference's TORCH_TYPE: bf16 on a GPU of compute capability >= 8, else fp16; fp32 on the CPU."""
    if str(device).startswith("cuda") and torch.cuda.is_available():
        return torch.bfloat16 if torch.cuda.get_device_capability(torch.device(device))[0] >= 8 else torch.float16
    return torch.float32


def model_folder_problems(folder: str | Path) -> list[str]:
    """Every reason a VisionReward model folder cannot be loaded, found without loading it: not a local folder (hub
    ids are refused), no config.json, no weights, no tokenizer, remote code that is not in the folder."""
    f = Path(folder).expanduser()
    if not str(folder).strip():
        return ["no model folder given: write visionreward:FOLDER, FOLDER a local copy of THUDM/VisionReward-Video"]
    if not f.is_dir():
        return [f"VisionReward model folder {str(folder)!r} not found: give a local folder (a copy of "
                f"THUDM/VisionReward-Video with its config.json, weights, tokenizer and *.py); hub ids are refused and "
                f"nothing is downloaded"]
    problems = [f"{f} lacks {m}" for m in MODEL_FILES if not (f / m).is_file()]
    if not any(p.suffix in WEIGHT_SUFFIXES for p in f.iterdir() if p.is_file()):
        problems.append(f"{f} has no weights ({' or '.join('*' + s for s in WEIGHT_SUFFIXES)} files)")
    if not any((f / t).is_file() for t in TOKENIZER_FILES):
        problems.append(f"{f} has no tokenizer ({' or '.join(TOKENIZER_FILES)})")
    try:
        auto_map = json.loads((f / "config.json").read_text(encoding="utf-8")).get("auto_map", {})
    except (OSError, ValueError, AttributeError):
        auto_map = {}  # a missing config.json is named above
    for cls, ref in auto_map.items():
        refs = ref if isinstance(ref, list) else [ref]
        for r in refs:
            if isinstance(r, str) and "--" in r:  # "owner/repo--module.Class": code from another hub repository
                problems.append(f"{f / 'config.json'}: auto_map {cls} -> {r} points at another repository's code; "
                                f"copy that code into the folder (nothing is downloaded)")
            elif isinstance(r, str) and not (f / (r.rsplit(".", 1)[0].replace(".", "/") + ".py")).is_file():
                problems.append(f"{f}: auto_map {cls} -> {r} but the folder has no {r.rsplit('.', 1)[0]}.py (the "
                                f"model's own code must be in the folder)")
    return problems


def check_model_folder(folder: str | Path) -> Path:
    """A local model folder whose remote code lives in it (every problem of `model_folder_problems` in one error)."""
    problems = model_folder_problems(folder)
    if problems:
        raise VisionRewardError("; ".join(problems))
    return Path(folder).expanduser()


def weights_bytes(folder: str | Path) -> int:
    """Bytes of the weight files in a model folder (the checkpoint as stored)."""
    return sum(p.stat().st_size for p in Path(folder).iterdir() if p.suffix in WEIGHT_SUFFIXES and p.is_file())


def folder_key(folder: str | Path) -> str:
    """Identity of a model folder: every file's (path, mtime, size)."""
    from sdvg_core.io.checkpoint import file_identity

    return ";".join(file_identity(p) for p in sorted(Path(folder).expanduser().iterdir()) if p.is_file())


def _dtype_kwarg(dtype: torch.dtype) -> dict:
    """transformers >= 4.56 names it `dtype`, earlier versions `torch_dtype` (VisionReward pins 4.42.4)."""
    import transformers

    major, minor = (int(x) for x in transformers.__version__.split(".")[:2])
    return {"dtype": dtype} if (major, minor) >= (4, 56) else {"torch_dtype": dtype}


def load_model(folder: str | Path, device: str, dtype: torch.dtype):
    """(model, tokenizer) from a local folder with its own remote code; never the network."""
    import os

    from transformers import AutoModelForCausalLM, AutoTokenizer

    f = check_model_folder(folder)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # belt and braces: local_files_only already forbids downloads
    tokenizer = AutoTokenizer.from_pretrained(str(f), trust_remote_code=True, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(str(f), trust_remote_code=True, local_files_only=True,
                                                 **_dtype_kwarg(dtype))
    return model.eval().to(device), tokenizer


@dataclass(frozen=True)
class LMGeometry:
    """What the memory estimate needs from the model's config.json."""

    layers: int
    hidden: int
    heads: int
    kv_heads: int
    vocab: int

    @classmethod
    def from_config(cls, cfg: dict) -> "LMGeometry":
        heads = cfg["num_attention_heads"]
        kv = cfg.get("num_multi_query_heads", cfg.get("num_key_value_heads", heads))  # CogVLM2 names it multi-query
        return cls(cfg["num_hidden_layers"], cfg["hidden_size"], heads, kv, cfg["vocab_size"])


def estimate_gpu_bytes(weights: int, g: LMGeometry, prefix_tokens: int, suffix_tokens: int, rows: int,
                       act_bytes: int = 2) -> dict[str, int]:
    """Estimated GPU bytes of one prefix-mode scoring beyond the weights (a computed estimate, not a measurement).

    prefix_kv: the shared prefix's cache; suffix_kv: every row's prefix + suffix keys/values as the attention
    concatenates them (all layers, when the model keeps the cache); gqa: one layer's keys/values expanded to every
    head; logits: float32 [rows, suffix, vocab]; vision activations are not counted."""
    head_dim = g.hidden // g.heads
    per_token_kv = g.layers * 2 * g.kv_heads * head_dim * act_bytes
    out = {"weights": weights,
           "prefix_kv": prefix_tokens * per_token_kv,
           "suffix_kv": rows * (prefix_tokens + suffix_tokens) * per_token_kv,
           "gqa": rows * (prefix_tokens + suffix_tokens) * 2 * g.heads * head_dim * act_bytes,
           "logits": rows * suffix_tokens * g.vocab * 4}
    out["total"] = sum(out.values())
    return out


def _model_module(model):
    return sys.modules.get(type(model).__module__)


def _expand_cache(past, n: int):
    """The prefix's KV cache for n rows (views: the attention's concatenation copies them)."""
    if isinstance(past, (tuple, list)):
        return tuple(tuple(t.expand(n, *t.shape[1:]) for t in layer) for layer in past)
    if hasattr(past, "batch_repeat_interleave"):  # a transformers Cache object
        import copy

        c = copy.deepcopy(past)
        c.batch_repeat_interleave(n)
        return c
    raise VisionRewardError(f"unsupported KV cache type {type(past).__name__}; use --vr-mode single")


def _logits(out) -> torch.Tensor:
    return out.logits if hasattr(out, "logits") else out[0]


class VisionRewardVideo:
    """The `vr` metric: VisionReward-Video's checklist score of a generated video (see the module docstring)."""

    name = COLUMN

    def __init__(self, model, tokenizer, checklist: Checklist, device: str = "cpu", dtype: torch.dtype = torch.float32,
                 mode: str = "prefix", batch: int = 0, video: str = "mp4", fps: float | None = None,
                 model_key: str = "", verify_first: bool = True):
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        if video not in VIDEO_SOURCES:
            raise ValueError(f"video must be one of {VIDEO_SOURCES}, got {video!r}")
        from sdvg_core.io.video import WAN_FPS

        self.model, self.tokenizer, self.checklist = model, tokenizer, checklist
        self.device, self.dtype, self.mode, self.batch, self.video = device, dtype, mode, batch, video
        self.fps = fps or WAN_FPS
        self.verify_pending = verify_first and mode == "prefix"
        decoder = mp4_decoder_name() if video == "mp4" else "raw"
        self.key = (f"visionreward:{model_key}|{checklist.key}|mode={mode}|video={video}:{decoder}|fps={self.fps}"
                    f"|dtype={str(dtype).removeprefix('torch.')}")
        self.last_frames: list[int] = []
        self.geometry: LMGeometry | None = None  # for the memory estimate (from_folder reads config.json)
        self.weights = 0
        self.estimate: dict[str, int] | None = None
        self.forwards = 0  # model forwards run (the speed claim: 2 per video in prefix mode with the default batch)

    @classmethod
    def from_folder(cls, model_folder: str | Path, checklist_dir: str | Path, device: str = "cpu", **kw):
        checklist = read_checklist(checklist_dir)
        dtype = reference_dtype(device)
        model, tok = load_model(model_folder, device, dtype)
        v = cls(model, tok, checklist, device, dtype, model_key=folder_key(model_folder), **kw)
        try:
            cfg = json.loads((Path(model_folder).expanduser() / "config.json").read_text())
            v.geometry, v.weights = LMGeometry.from_config(cfg), weights_bytes(model_folder)
        except (KeyError, ValueError, TypeError):
            pass  # no estimate for a config without these fields
        return v

    def _report_estimate(self, prefix_tokens: int, suffix_tokens: int, rows: int) -> None:
        """Print the computed memory estimate once, with the first video's real token counts."""
        if self.geometry is None or self.estimate is not None:
            return
        self.estimate = estimate_gpu_bytes(self.weights, self.geometry, prefix_tokens, suffix_tokens, rows,
                                           act_bytes=torch.finfo(self.dtype).bits // 8)
        gib = {k: v / (1 << 30) for k, v in self.estimate.items()}
        print(f"VisionReward: estimated GPU memory {gib['total']:.1f} GiB = weights {gib['weights']:.1f} + prefix KV "
              f"{gib['prefix_kv']:.2f} + batched KV {gib['suffix_kv']:.2f} + one layer's expanded KV {gib['gqa']:.2f} + "
              f"logits {gib['logits']:.2f} ({prefix_tokens} prefix + {suffix_tokens} question tokens x {rows} rows; "
              f"computed, not measured; vision activations not counted)", file=sys.stderr)

    # -------------------------------------------------------------------------------------- scoring
    def score(self, frames: torch.Tensor, prompt: str) -> float:
        """frames [T, H, W, 3] in 0..1 (the generated video) -> the VisionReward score."""
        video, self.last_frames = sample_video(frames, self.fps, self.video)
        return self.score_video(video, prompt)

    def score_video(self, video: torch.Tensor, prompt: str) -> float:
        """video uint8 [3, T, H, W] (already sampled, as the reference's load_video returns it) -> score."""
        return combine(self.answers(video, prompt), self.checklist.weights)

    def answers(self, video: torch.Tensor, prompt: str) -> list[bool]:
        queries = self.checklist.queries(prompt)
        with torch.no_grad():
            inputs = [self.model.build_conversation_input_ids(tokenizer=self.tokenizer, query=q, images=[video],
                                                              history=[], template_version=TEMPLATE) for q in queries]
            if self.mode == "generate":
                return [self._generate_one(x) for x in inputs]
            if self.mode == "single":
                return [self._is_yes(self._single_token(x)) for x in inputs]
            tokens = self._prefix_tokens(inputs)
            if self.verify_pending:
                single = [self._single_token(x) for x in inputs]
                bad = [(q.strip(), self._decode(a), self._decode(b)) for q, a, b in zip(queries, tokens, single)
                       if self._is_yes(a) != self._is_yes(b)]
                if bad:
                    raise VisionRewardError(
                        "the shared-prefix path answers differently from one forward per question on "
                        + "; ".join(f"{q!r}: {a!r} vs {b!r}" for q, a, b in bad[:3])
                        + " - this model's remote code does not fit it: use --vr-mode single")
                self.verify_pending = False
        return [self._is_yes(t) for t in tokens]

    def _decode(self, token: int) -> str:
        return self.tokenizer.decode(int(token))

    def _is_yes(self, token: int) -> bool:
        return self._decode(token) == YES

    def _images(self, x: dict) -> list:
        return [x["images"][0].to(self.device).to(self.dtype)]

    def _single_token(self, x: dict) -> int:
        """The greedy first token from one unpadded forward over the whole conversation (generate's first step)."""
        out = self.model(input_ids=x["input_ids"][None].to(self.device),
                         token_type_ids=x["token_type_ids"][None].to(self.device),
                         attention_mask=x["attention_mask"][None].to(self.device), images=[self._images(x)],
                         use_cache=False, return_dict=True)
        self.forwards += 1
        return int(_logits(out)[0, -1].argmax())

    def _generate_one(self, x: dict) -> bool:
        """The reference's call (its generation arguments), stopped after the only token it reads."""
        ids = x["input_ids"][None].to(self.device)
        out = self.model.generate(input_ids=ids, token_type_ids=x["token_type_ids"][None].to(self.device),
                                  attention_mask=x["attention_mask"][None].to(self.device), images=[self._images(x)],
                                  max_new_tokens=1, **GEN_KWARGS)
        self.forwards += 1
        return self._is_yes(int(out[0, ids.shape[1]]))

    def _prefix_tokens(self, inputs: list[dict]) -> list[int]:
        """One forward over the shared prefix (video + template text), then the questions in batched forwards."""
        module = _model_module(self.model)
        position_ids_fn = getattr(module, "build_position_ids", None)
        if position_ids_fn is None:
            raise VisionRewardError(f"{type(self.model).__name__}'s module has no build_position_ids (CogVLM2's "
                                    f"position rule); use --vr-mode single")
        lang = getattr(module, "LANGUAGE_TOKEN_TYPE", LANGUAGE_TOKEN_TYPE)
        ids = [x["input_ids"] for x in inputs]
        tts = [x["token_type_ids"] for x in inputs]
        masks = [x["attention_mask"] for x in inputs]
        split = min(len(i) for i in ids) - 1  # every question keeps at least its last token after the prefix
        for i, t in zip(ids[1:], tts[1:]):
            differs = (i[:split] != ids[0][:split]) | (t[:split] != tts[0][:split])
            if differs.any():
                split = int(differs.nonzero()[0, 0])
        # the prefix must end between two text tokens: the vision expert of a token looks at the next token
        while split > 0 and not all(int(t[split - 1]) == lang and int(t[split]) == lang for t in tts):
            split -= 1
        if split == 0:
            raise VisionRewardError("the questions share no prefix that ends in text; use --vr-mode single")
        positions = [position_ids_fn(t[None], m[None])[0] for t, m in zip(tts, masks)]
        dev = self.device
        pre = self.model(input_ids=ids[0][None, :split].to(dev), token_type_ids=tts[0][None, :split].to(dev),
                         attention_mask=masks[0][None, :split].to(dev), images=[self._images(inputs[0])],
                         position_ids=positions[0][None, :split].to(dev), use_cache=True, return_dict=True)
        self.forwards += 1
        past = pre.past_key_values
        out: list[int] = []
        step = self.batch or len(inputs)
        self._report_estimate(split, max(len(i) for i in ids) - split, min(step, len(inputs)))
        for s in range(0, len(inputs), step):
            rows = range(s, min(s + step, len(inputs)))
            n, width = len(rows), max(len(ids[r]) - split for r in rows)
            sid = torch.full((n, width), PAD_TOKEN_ID, dtype=ids[0].dtype)
            stt = torch.full((n, width), lang, dtype=tts[0].dtype)
            spos = torch.zeros((n, width), dtype=positions[0].dtype)
            smask = torch.zeros((n, split + width), dtype=masks[0].dtype)
            for j, r in enumerate(rows):
                k = len(ids[r]) - split
                sid[j, :k], stt[j, :k], spos[j, :k] = ids[r][split:], tts[r][split:], positions[r][split:]
                spos[j, k:] = positions[r][-1]  # padding (masked out; after every real token, so never attended)
                smask[j, :split + k] = masks[r]
            res = self.model(input_ids=sid.to(dev), token_type_ids=stt.to(dev), attention_mask=smask.to(dev),
                             position_ids=spos.to(dev), past_key_values=_expand_cache(past, n), use_cache=False,
                             return_dict=True)
            self.forwards += 1
            logits = _logits(res)
            for j, r in enumerate(rows):
                out.append(int(logits[j, len(ids[r]) - split - 1].argmax()))
        return out


def main(argv: list[str] | None = None) -> int:
    """Score one mp4 as the reference's `inference-video.py --score` does (to compare the two on a GPU)."""
    import argparse

    p = argparse.ArgumentParser(prog="python -m sdvg_eval.visionreward", description=main.__doc__)
    p.add_argument("model", help="local VisionReward-Video folder")
    p.add_argument("checklist", help="local checkout of THUDM/VisionReward")
    p.add_argument("video", help="an mp4 file")
    p.add_argument("prompt")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--mode", choices=MODES, default="prefix")
    p.add_argument("--batch", type=int, default=0, help="questions per batched forward (0: all)")
    a = p.parse_args(argv)
    try:
        m = VisionRewardVideo.from_folder(a.model, a.checklist, a.device, mode=a.mode, batch=a.batch)
    except VisionRewardError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    data, times = decode_mp4(a.video)
    idx = chat_frame_indices(times)
    video = torch.from_numpy(np.ascontiguousarray(data[idx])).permute(3, 0, 1, 2)
    answers = m.answers(video, a.prompt)
    print(json.dumps({"score": combine(answers, m.checklist.weights), "frames": idx,
                      "answers": [1 if x else -1 for x in answers], "forwards": m.forwards}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
