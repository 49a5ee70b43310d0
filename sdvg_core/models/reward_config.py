"""ImageReward-v1.0 sizes, constants and presets (no torch, no transformers: pure data)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

# --- Constants of the published ImageReward-v1.0 scorer (THUDM/ImageReward, PyPI `image-reward` 1.5) ---------------
# Reward normalisation: ImageReward's `score()` returns (head(x) - mean) / std with these two float64 literals
# (ImageReward/ImageReward.py in THUDM/ImageReward; docs/design.md §2).
REWARD_MEAN = 0.16717362830052426
REWARD_STD = 1.0333394966054072
# CLIP pixel statistics used by ImageReward's transform (BLIP/CLIP `Normalize`); applied in float32.
CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)
# ImageReward tokenizes every prompt to exactly this many ids (padding="max_length", truncation=True).
PROMPT_MAX_TOKENS = 35
# The vision input is a 224x224 centre crop after resizing the short side to 224 (BLIP "large" ViT at 224 px).
IMAGE_SIZE = 224
PATCH_SIZE = 16
# bert-base-uncased WordPiece vocabulary: 30522 entries; ImageReward appends [DEC] (bos, 30522) and [ENC] (30523).
BERT_BASE_VOCAB_TOKENS = 30522
EXTRA_SPECIAL_TOKENS = ("[DEC]", "[ENC]")
# sha256 of the verified bert-base-uncased vocab.txt (docs/design.md §2); informative only.
BERT_BASE_VOCAB_SHA256 = "07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3"
# LayerNorm epsilons: timm ViT uses 1e-6 (HF's BLIP vision default is 1e-5, so it must be set); BERT uses 1e-12.
VISION_LAYER_NORM_EPS = 1e-6
TEXT_LAYER_NORM_EPS = 1e-12
# BLIP's image-text projection width (vision_proj / text_proj, present in the checkpoint but unused by the reward).
PROJECTION_DIM = 256
# Inner widths of ImageReward's MLP head (five Linear layers at Sequential indices 0, 2, 4, 6, 7; no activations).
HEAD_WIDTHS = (1024, 128, 64, 16, 1)
HEAD_LINEAR_INDICES = (0, 2, 4, 6, 7)

# Where the files come from (used in error messages and the README).
WEIGHTS_FILENAME = "ImageReward.pt"
WEIGHTS_URL = "https://huggingface.co/THUDM/ImageReward/resolve/main/ImageReward.pt"
WEIGHTS_REPO = "https://huggingface.co/THUDM/ImageReward"
VOCAB_FILENAMES = ("vocab.txt", "bert-base-uncased-vocab.txt")
VOCAB_SUBFOLDER = "bert-base-uncased"
VOCAB_URL = "https://huggingface.co/google-bert/bert-base-uncased/resolve/main/vocab.txt"


@dataclass(frozen=True)
class ImageRewardConfig:
    """Every size and constant of one ImageReward model; presets below, detection from a state dict in reward_io."""

    name: str
    # vision: BLIP ViT (timm layout) with a fused qkv, pre-norm blocks, exact GELU
    vision_width: int
    vision_layers: int
    vision_heads: int
    vision_mlp: int
    # text: BLIP "med" BERT with cross-attention in every layer, bidirectional, post-norm
    text_width: int
    text_layers: int
    text_heads: int
    text_ffn: int
    vocab_size: int = BERT_BASE_VOCAB_TOKENS + len(EXTRA_SPECIAL_TOKENS)
    max_positions: int = 512
    image_size: int = IMAGE_SIZE
    patch_size: int = PATCH_SIZE
    vision_eps: float = VISION_LAYER_NORM_EPS
    text_eps: float = TEXT_LAYER_NORM_EPS
    projection_dim: int = PROJECTION_DIM
    head_widths: tuple[int, ...] = HEAD_WIDTHS
    max_tokens: int = PROMPT_MAX_TOKENS
    reward_mean: float = REWARD_MEAN
    reward_std: float = REWARD_STD
    clip_mean: tuple[float, float, float] = CLIP_MEAN
    clip_std: tuple[float, float, float] = CLIP_STD

    @property
    def base_vocab_tokens(self) -> int:
        """Size the WordPiece vocabulary file must have: the model's table minus [DEC] and [ENC]."""
        return self.vocab_size - len(EXTRA_SPECIAL_TOKENS)

    @property
    def dec_token_id(self) -> int:
        """Id of [DEC] (registered as bos); ImageReward keeps [CLS] at position 0, so this is never fed."""
        return self.vocab_size - 2

    @property
    def enc_token_id(self) -> int:
        """Id of [ENC]; only reachable when a prompt contains the literal text "[ENC]"."""
        return self.vocab_size - 1

    @property
    def num_image_tokens(self) -> int:
        """Patches plus the class token (197 at 224 px / 16 px patches)."""
        return (self.image_size // self.patch_size) ** 2 + 1

    def architecture_key(self) -> tuple[int, ...]:
        """The shape-determining sizes other than the vocabulary (what a state dict can reveal)."""
        return (self.vision_width, self.vision_layers, self.vision_mlp, self.text_width, self.text_layers,
                self.text_ffn, self.max_positions, self.num_image_tokens, self.patch_size, *self.head_widths)

    def with_vocab(self, vocab_size: int) -> "ImageRewardConfig":
        """Same architecture with another word-embedding table size (synthetic demo vocabularies)."""
        return dataclasses.replace(self, vocab_size=vocab_size)


# Real sizes: BLIP ViT-L/16 (width 1024, 24 blocks, 16 heads) + BERT-base (768, 12 layers, 12 heads) -> 446.67 M params.
IMAGEREWARD_V1 = ImageRewardConfig(
    name="imagereward-v1.0",
    vision_width=1024, vision_layers=24, vision_heads=16, vision_mlp=4096,
    text_width=768, text_layers=12, text_heads=12, text_ffn=3072,
)
# The sizes of the golden-tensor model (docs/design.md §6).
TINY = ImageRewardConfig(
    name="tiny",
    vision_width=16, vision_layers=2, vision_heads=2, vision_mlp=64,
    text_width=8, text_layers=2, text_heads=2, text_ffn=32,
)
PRESETS: dict[str, ImageRewardConfig] = {c.name: c for c in (IMAGEREWARD_V1, TINY)}


def get_preset(name: str) -> ImageRewardConfig:
    """Look a preset up by name, with an error listing the known ones."""
    try:
        return PRESETS[name]
    except KeyError:
        raise KeyError(f"unknown ImageReward preset {name!r}; known: {sorted(PRESETS)}") from None
