"""ImageReward-v1.0 scorer (the SDVG router): BLIP ViT-L + BERT cross-encoder + MLP head on transformers' BLIP classes.

The PyPI `image-reward` package is deliberately not used (old timm/fairscale pins, undeclared `clip`, breaks on
transformers >= 4.56, strict=False loading, hub downloads). Its numerics are reproduced here and checked against
golden tensors produced by that package (docs/design.md §6).
"""
from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass
from typing import Literal, Mapping

import torch
from torch import nn

from .reward_config import (
    EXTRA_SPECIAL_TOKENS, HEAD_LINEAR_INDICES, IMAGEREWARD_V1, PRESETS, TINY, VOCAB_URL, ImageRewardConfig, get_preset,
)
from .reward_errors import ImageRewardCheckpointError, ImageRewardError, ImageRewardFileNotFound, ImageRewardVocabError
from .reward_preprocess import (
    PREPROCESSING_MODES, UINT8_MODES, Preprocessing, Uint8Mode, frames_to_uint8, normalize_pixels, preprocess_uint8,
    preprocess_uint8_tensor,
)

__all__ = [
    "IMAGEREWARD_V1", "TINY", "PRESETS", "ImageRewardConfig", "get_preset",
    "ImageRewardError", "ImageRewardFileNotFound", "ImageRewardCheckpointError", "ImageRewardVocabError",
    "ImageRewardModel", "ImageRewardScorer", "TextInputs", "build_blip_config", "build_model", "empty_model",
    "fill_model", "check_base_tokenizer",
]
# Reading files (ImageReward.pt, vocab.txt) lives in io/reward_files.py: load_model, load_scorer, random_scorer,
# export_state_dict, find_vocab, load_tokenizer (models/ never imports io/).

Aggregation = Literal["min", "mean"]
# Random-weight init (same recipe as the fixture's generator, meta.json "weight_init"): gains 1 + 0.1 N,
# biases 0.1 N, embeddings and class token N(0, 1), ViT position table 0.5 N, Linear/Conv N(0, 1) / sqrt(fan_in).
_INIT_GAIN_STD = 0.1
_INIT_BIAS_STD = 0.1
_INIT_VIT_POS_STD = 0.5
# Default number of prompts whose token ids are kept (one prompt per video; a few for A/B graphs).
_TEXT_CACHE_SIZE = 16
# torch's CPU allocator aligns storages to 64 bytes; safetensors hands out tensors aligned to only 16, and CPU BLAS
# picks kernels by alignment (measured: head outputs 6e-8 apart for equal weights). Loaded tensors are re-homed.
_CPU_ALIGN_BYTES = 64


def build_blip_config(cfg: ImageRewardConfig):
    """transformers BlipConfig for ImageReward's backbone, built in code (never from the hub)."""
    from transformers import BlipConfig

    return BlipConfig(
        vision_config=dict(
            hidden_size=cfg.vision_width, intermediate_size=cfg.vision_mlp, num_hidden_layers=cfg.vision_layers,
            num_attention_heads=cfg.vision_heads, image_size=cfg.image_size, patch_size=cfg.patch_size,
            layer_norm_eps=cfg.vision_eps, hidden_act="gelu"),
        text_config=dict(
            vocab_size=cfg.vocab_size, hidden_size=cfg.text_width, encoder_hidden_size=cfg.vision_width,
            intermediate_size=cfg.text_ffn, num_hidden_layers=cfg.text_layers, num_attention_heads=cfg.text_heads,
            max_position_embeddings=cfg.max_positions, layer_norm_eps=cfg.text_eps, hidden_act="gelu",
            bos_token_id=cfg.dec_token_id,
            is_decoder=True),  # is_decoder=True creates the cross-attention; the forward stays bidirectional
        image_text_hidden_size=cfg.projection_dim,
    )


class ImageRewardModel(nn.Module):
    """BLIP vision + text cross-encoder (transformers' BlipForImageTextRetrieval, ITM head removed) + reward MLP."""

    def __init__(self, cfg: ImageRewardConfig):
        super().__init__()
        from transformers import BlipForImageTextRetrieval

        self.cfg = cfg
        self.blip = BlipForImageTextRetrieval(build_blip_config(cfg))
        del self.blip.itm_head  # ImageReward has no ITM head; removing it keeps every weight loaded from the file
        widths = (cfg.text_width, *cfg.head_widths)
        layers: list[nn.Module] = []
        for i, (w_in, w_out) in enumerate(zip(widths[:-1], widths[1:])):
            while len(layers) < HEAD_LINEAR_INDICES[i]:
                layers.append(nn.Identity())  # the original's Dropout slots (inactive at inference)
            layers.append(nn.Linear(w_in, w_out))
        self.head = nn.Sequential(*layers)

    def encode_image(self, pixel_values: torch.Tensor) -> torch.Tensor:
        """[B, 3, 224, 224] normalised -> [B, 197, D] ViT tokens after the final LayerNorm."""
        return self.blip.vision_model(pixel_values=pixel_values).last_hidden_state

    def encode_text(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None,
                    image_embeds: torch.Tensor) -> torch.Tensor:
        """Token ids [B, T] + mask [B, T] (None: no padding) cross-attending to image tokens [B, 197, D] -> [CLS]
        feature [B, H]."""
        if TEXT_MASK_PREPARED_4D and attention_mask is not None:
            attention_mask = additive_text_mask(attention_mask, image_embeds.dtype)  # [B, 1, 1, T]
        out = self.blip.text_encoder(input_ids=input_ids, attention_mask=attention_mask,
                                     encoder_hidden_states=image_embeds)
        return out.last_hidden_state[:, 0, :]  # [B, H]

    def head_output(self, feature: torch.Tensor) -> torch.Tensor:
        """[B, H] feature -> [B] raw head output in float32 (the head is kept in float32).

        Row by row: a batched matmul rounds differently from a single row (~1e-6), and the head costs
        nothing next to the encoders, so a frame's reward is the same bits whatever batch it was scored in.
        """
        w = self.head[0].weight
        x = feature.to(device=w.device, dtype=w.dtype)
        return torch.cat([self.head(x[i:i + 1]) for i in range(x.shape[0])]).float().squeeze(-1)  # [B]

    def forward(self, pixel_values: torch.Tensor, input_ids: torch.Tensor,
                attention_mask: torch.Tensor) -> torch.Tensor:
        """Normalised pixels [B, 3, 224, 224] + tokens [B, T] -> normalised reward [B] float32."""
        feature = self.encode_text(input_ids, attention_mask, self.encode_image(pixel_values))  # [B, H]
        return (self.head_output(feature) - self.cfg.reward_mean) / self.cfg.reward_std  # [B]


def _text_mask_prepared_4d() -> bool:
    """Whether this transformers builds BLIP's text mask with `masking_utils` (5.x), which takes a prepared 4D mask
    as it is; 4.x's `get_extended_attention_mask` takes only a 2D or 3D one (and reads no value)."""
    try:
        from transformers.models.blip import modeling_blip_text
    except ImportError:
        return False
    return hasattr(modeling_blip_text, "create_bidirectional_mask")


# transformers 5's 2D -> 4D text mask checks whether any token is padded (`padding_mask.all()`): a value read back to
# the host inside the router, a sync on a GPU. The prepared mask below is the one its eager path builds, so a frame's
# reward is the same bits (tests/test_reward.py), and routing reads only the scores.
TEXT_MASK_PREPARED_4D = _text_mask_prepared_4d()


def additive_text_mask(attention_mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Token mask [B, T] (1 keep, 0 padding) -> additive mask [B, 1, 1, T] in the attention's dtype: 0 where kept, the
    dtype's lowest value where padded (transformers' eager mask; broadcast over the query positions)."""
    keep = attention_mask.to(torch.bool)[:, None, None, :]  # [B, 1, 1, T]
    zero = torch.zeros((), dtype=dtype, device=attention_mask.device)
    return torch.where(keep, zero, torch.finfo(dtype).min)


def empty_model(cfg: ImageRewardConfig) -> ImageRewardModel:
    """The module structure on the meta device (parameter names and shapes, no memory), to be filled by fill_model."""
    with torch.device("meta"):
        return ImageRewardModel(cfg)


def _reset_position_ids(model: ImageRewardModel, device: torch.device | str = "cpu") -> None:
    """Re-create the non-persistent arange buffer (meta / to_empty leave it undefined)."""
    emb = model.blip.text_encoder.embeddings
    emb.position_ids = torch.arange(model.cfg.max_positions, device=device).unsqueeze(0)  # [1, 512] int64


def _finish(model: ImageRewardModel, device: torch.device | str, dtype: torch.dtype) -> ImageRewardModel:
    """Inference mode: eval, no grads, backbone in dtype on device, head in float32."""
    model.eval().requires_grad_(False)
    model.blip.to(device=device, dtype=dtype)
    model.head.to(device=device, dtype=torch.float32)
    return model


def build_model(cfg: ImageRewardConfig, seed: int = 0, device: torch.device | str = "cpu",
                dtype: torch.dtype = torch.float32) -> ImageRewardModel:
    """Random-weight model of any preset (demos, benchmarks): seeded, no download, no transformers init pass."""
    model = empty_model(cfg).to_empty(device="cpu")
    gen = torch.Generator().manual_seed(seed)
    emb = model.blip.vision_model.embeddings
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.LayerNorm):
                module.weight.copy_(1.0 + _INIT_GAIN_STD * torch.randn(module.weight.shape, generator=gen))
            elif isinstance(module, nn.Embedding):
                module.weight.copy_(torch.randn(module.weight.shape, generator=gen))
            elif isinstance(module, (nn.Linear, nn.Conv2d)):
                fan_in = math.prod(module.weight.shape[1:])
                module.weight.copy_(torch.randn(module.weight.shape, generator=gen) / math.sqrt(fan_in))
            else:
                continue
            if getattr(module, "bias", None) is not None:
                module.bias.copy_(_INIT_BIAS_STD * torch.randn(module.bias.shape, generator=gen))
        emb.class_embedding.copy_(torch.randn(emb.class_embedding.shape, generator=gen))
        emb.position_embedding.copy_(_INIT_VIT_POS_STD * torch.randn(emb.position_embedding.shape, generator=gen))
    _reset_position_ids(model)
    return _finish(model, device, dtype)


def _aligned(t: torch.Tensor) -> torch.Tensor:
    """The tensor if its data is 64-byte aligned, else an aligned copy (same numbers from .pt and .safetensors)."""
    return t if t.data_ptr() % _CPU_ALIGN_BYTES == 0 else t.clone()


def fill_model(model: ImageRewardModel, state_dict: Mapping[str, torch.Tensor], device: torch.device | str = "cpu",
               dtype: torch.dtype = torch.float32) -> ImageRewardModel:
    """Adopt a state dict under our parameter names, strictly (io.reward_files.load_model maps a file's keys)."""
    # Every parameter comes from the file; assign=True adopts the loaded tensors (no second 1.8 GB copy).
    model.load_state_dict({k: _aligned(v.float()) for k, v in state_dict.items()}, strict=True, assign=True)
    _reset_position_ids(model)
    return _finish(model, device, dtype)


@dataclass(frozen=True)
class TextInputs:
    """A prompt tokenized the ImageReward way: ids and mask, int64 [1, max_tokens], on CPU."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor


class ImageRewardScorer:
    """Scores video frames against a prompt: batched vision + cross-encoder passes, cached prompt tokens."""

    def __init__(self, model: ImageRewardModel, tokenizer, micro_batch: int = 16, uint8_mode: Uint8Mode = "truncate",
                 text_cache_size: int = _TEXT_CACHE_SIZE, preprocessing: Preprocessing = "pil"):
        if micro_batch < 1 or text_cache_size < 1:
            raise ValueError(f"micro_batch and text_cache_size must be >= 1, got {micro_batch}, {text_cache_size}")
        if uint8_mode not in UINT8_MODES:
            raise ValueError(f"uint8_mode must be one of {UINT8_MODES}, got {uint8_mode!r}")
        check_base_tokenizer_full(tokenizer, model.cfg)
        self.model = model
        self.cfg = model.cfg
        self.key = None  # stable identity for the engine's memo (weights file), set by loaders
        self.tokenizer = tokenizer
        self.micro_batch = micro_batch
        self.uint8_mode = uint8_mode
        self.preprocessing = preprocessing
        self._text_cache: OrderedDict[str, TextInputs] = OrderedDict()
        self._text_cache_size = text_cache_size

    @property
    def key(self) -> str | None:
        """The engine's memo identity: the loader's weights identity plus every non-default option that changes
        scores (uint8 rounding; the tensor preprocessing path, equal to PIL's by construction but keyed apart so
        a Pillow build that rounds a weight differently can never mix its scores with the other path's)."""
        if self._key is None:
            return None
        extra = ([f"uint8={self.uint8_mode}"] if self.uint8_mode != "truncate" else []) + \
                ([f"preprocessing={self.preprocessing}"] if self.preprocessing != "pil" else [])
        return "|".join([self._key, *extra])

    @key.setter
    def key(self, value: str | None) -> None:
        self._key = value

    @property
    def preprocessing(self) -> Preprocessing:
        """"pil" (default: Pillow on the CPU, what the paper measured) or "tensor" (the same integer resampling
        in torch on the scorer's device: no copy of the frames to the host; bit-identical crops)."""
        return self._preprocessing

    @preprocessing.setter
    def preprocessing(self, value: Preprocessing) -> None:
        if value not in PREPROCESSING_MODES:
            raise ValueError(f"preprocessing must be one of {PREPROCESSING_MODES}, got {value!r}")
        self._preprocessing = value

    @property
    def device(self) -> torch.device:
        """Where the backbone currently lives (follows the model if a memory manager moves it)."""
        return next(self.model.blip.parameters()).device

    @property
    def dtype(self) -> torch.dtype:
        """Backbone dtype (the head and the rewards stay float32)."""
        return next(self.model.blip.parameters()).dtype

    # --- text --------------------------------------------------------------------------------------------------------
    def text_inputs(self, prompt: str) -> TextInputs:
        """Prompt -> ids/mask [1, 35] (pad to max_length, truncate, [CLS] kept at 0), memoised in a small LRU."""
        if not isinstance(prompt, str):
            raise TypeError(f"prompt must be a str, got {type(prompt).__name__}")
        hit = self._text_cache.get(prompt)
        if hit is not None:
            self._text_cache.move_to_end(prompt)
            return hit
        enc = self.tokenizer(prompt, padding="max_length", truncation=True, max_length=self.cfg.max_tokens,
                             return_tensors="pt")
        item = TextInputs(enc["input_ids"].to(torch.int64), enc["attention_mask"].to(torch.int64))  # [1, 35] each
        self._text_cache[prompt] = item
        while len(self._text_cache) > self._text_cache_size:
            self._text_cache.popitem(last=False)
        return item

    # --- images ------------------------------------------------------------------------------------------------------
    def preprocess(self, frames: torch.Tensor) -> torch.Tensor:
        """ComfyUI IMAGE [F, H, W, C] (float 0..1 or uint8; [H, W, C] for one frame) -> uint8 [F, 3, 224, 224]
        (on the CPU with "pil", on the scorer's device with "tensor")."""
        if frames.ndim == 3:
            frames = frames.unsqueeze(0)
        if frames.ndim != 4:
            raise ValueError(f"frames must be [F, H, W, C] (ComfyUI IMAGE layout), got shape {tuple(frames.shape)}")
        frames_u8 = frames_to_uint8(frames, self.uint8_mode)  # on the frames' device
        if self.preprocessing == "tensor":  # on the scorer's device; crops stay there for score_pixels
            return preprocess_uint8_tensor(frames_u8.to(self.device), self.cfg.image_size)
        return preprocess_uint8(frames_u8.cpu(), self.cfg.image_size)

    @torch.inference_mode()
    def score_pixels(self, pixels_u8: torch.Tensor, prompt: str) -> torch.Tensor:
        """Preprocessed uint8 crops [F, 3, 224, 224] -> rewards [F] float32 on CPU, micro-batched."""
        text = self.text_inputs(prompt)
        device, dtype = self.device, self.dtype
        ids = text.input_ids.to(device)  # [1, 35]
        mask = text.attention_mask.to(device)  # [1, 35]
        out = []
        for start in range(0, pixels_u8.shape[0], self.micro_batch):
            chunk = pixels_u8[start:start + self.micro_batch].to(device)  # [B, 3, 224, 224] uint8
            px = normalize_pixels(chunk, self.cfg.clip_mean, self.cfg.clip_std).to(dtype)  # [B, 3, 224, 224]
            b = px.shape[0]
            out.append(self.model(px, ids.expand(b, -1), mask.expand(b, -1)).cpu())  # [B] float32
        return torch.cat(out) if out else torch.empty(0, dtype=torch.float32)  # [F]

    def score_frames(self, frames: torch.Tensor, prompt: str) -> torch.Tensor:
        """Frames [F, H, W, C] (float 0..1 or uint8) -> ImageReward rewards [F] float32 on CPU."""
        return self.score_pixels(self.preprocess(frames), prompt)

    def score_block(self, frames: torch.Tensor, prompt: str,
                    aggregation: Aggregation = "min") -> tuple[float, torch.Tensor]:
        """Block score for routing: min (default: one bad frame must not hide) or mean of the per-frame rewards."""
        if aggregation not in ("min", "mean"):
            raise ValueError(f"aggregation must be 'min' or 'mean', got {aggregation!r}")
        rewards = self.score_frames(frames, prompt)  # [F]
        if rewards.numel() == 0:
            raise ValueError("score_block needs at least one frame")
        return float(rewards.min() if aggregation == "min" else rewards.mean()), rewards


def check_base_tokenizer(tokenizer, expected: int, source: str) -> None:
    """Fail loudly unless the tokenizer holds exactly the expected WordPiece entries (refuses the 5-token trap)."""
    n = len(tokenizer)
    if n != expected:
        raise ImageRewardVocabError(
            f"tokenizer built from {source} has {n} tokens, expected {expected}. "
            + ("This is the transformers >= 5 trap where BertTokenizer(vocab_file=...) silently keeps only the "
               "special tokens, so every word would become [UNK]. " if n <= len(EXTRA_SPECIAL_TOKENS) + 5 else "")
            + f"Use the bert-base-uncased vocab.txt ({VOCAB_URL}).")


def check_base_tokenizer_full(tokenizer, cfg: ImageRewardConfig) -> None:
    """A scorer's tokenizer must cover the model's whole word table (base vocab + [DEC] + [ENC])."""
    if len(tokenizer) != cfg.vocab_size:
        check_base_tokenizer(tokenizer, cfg.vocab_size, "the tokenizer given to ImageRewardScorer")
