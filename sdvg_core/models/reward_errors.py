"""ImageReward's error types (below io/, so the model and the file loaders raise the same classes)."""
from __future__ import annotations

from .state_dict import CheckpointError


class ImageRewardError(CheckpointError):
    """Any problem with the ImageReward files; the message names the file and what to do."""


class ImageRewardFileNotFound(ImageRewardError, FileNotFoundError):
    """A weights or vocabulary file is missing; the message lists where it was looked for and where to get it."""


class ImageRewardCheckpointError(ImageRewardError):
    """The weights file exists but cannot be used (corrupt, unsafe pickle, wrong architecture, key mismatch)."""


class ImageRewardVocabError(ImageRewardError):
    """The vocabulary or the tokenizer built from it does not fit the model."""
