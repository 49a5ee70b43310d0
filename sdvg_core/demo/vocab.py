"""A synthetic WordPiece vocabulary for demos, tests and benchmarks on a fresh machine (no real vocab, no network).

Its tokens are BERT's special tokens, letters, digits, punctuation, a few hundred common English words and `##`
suffix pieces, so prompts tokenize without [UNK]; only the tiny random ImageReward is sized to it.
"""
from __future__ import annotations

from pathlib import Path

from ..io.reward_files import count_vocab_lines, read_vocab_bytes
from ..models.reward_config import EXTRA_SPECIAL_TOKENS, TINY, ImageRewardConfig

__all__ = ["synthetic_vocab_tokens", "write_synthetic_vocab", "synthetic_tiny_config"]

# BERT's special tokens, in bert-base-uncased order ([PAD] id 0, [UNK] id 1).
_SPECIAL = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
_PUNCT = tuple(".,;:!?'\"()-/&%$#@*+=<>[]_~`^|\\{}")
_WORDS = (
    "a an the of and or in on at to from with by for over under into through near above below behind between "
    "is are was were be been it its this that these those there here he she they we you i his her their our "
    "man woman person people child dog cat bird horse fish car boat train plane tree forest mountain river lake "
    "sea ocean beach sky cloud sun moon star rain snow fire water light night day morning evening city street "
    "road house room window door table chair field meadow grass flower garden park bridge tower castle "
    "red orange yellow green blue purple white black brown gray golden silver dark bright "
    "big small tall short long old young new happy slow fast soft warm cold beautiful "
    "run walk fly swim jump dance sit stand look play drive ride fall rise move turn "
    "camera shot view close wide aerial slow motion video scene shallow depth focus cinematic style"
).split()
_SUFFIXES = ("s", "es", "ed", "ing", "ly", "er", "est", "tion", "ness", "ful", "y", "al", "ic", "ous")


def synthetic_vocab_tokens() -> list[str]:
    """A small WordPiece vocabulary: BERT's specials, letters, digits, punctuation, common words, ## pieces."""
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)]
    digits = [str(d) for d in range(10)]
    tokens = list(_SPECIAL) + list(_PUNCT) + letters + digits + list(_WORDS)
    tokens += [f"##{s}" for s in letters + digits + list(_SUFFIXES)]
    return list(dict.fromkeys(tokens))  # drop duplicates, keep order


def write_synthetic_vocab(path: str | Path) -> Path:
    """Write the synthetic vocab.txt (a few hundred entries) and return its path."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text("\n".join(synthetic_vocab_tokens()) + "\n", encoding="utf-8")
    return p


def synthetic_tiny_config(vocab_file: str | Path) -> ImageRewardConfig:
    """The tiny preset with its word table sized to a vocab file (entries + [DEC] + [ENC])."""
    n = count_vocab_lines(read_vocab_bytes(Path(vocab_file)))
    return TINY.with_vocab(n + len(EXTRA_SPECIAL_TOKENS))
