"""ImageReward's tensor preprocessing path: Pillow's bicubic resize re-done in integer torch ops, equal bit for bit.

The PIL path (the default, what the paper measured) and the tensor path (`preprocessing="tensor"`, runs on the
scorer's device) must give identical crops and identical rewards; the memo key tells them apart anyway.
"""
from __future__ import annotations


import pytest
import torch

from sdvg_core import tiny_models
from sdvg_core.demo.frames import natural_frames
from sdvg_core.models import reward_preprocess as rp
from sdvg_core.models.reward_preprocess import frames_to_uint8, pil_bicubic_taps, preprocess_uint8, preprocess_uint8_tensor

REAL_H, REAL_W = 480, 832  # the paper's frame size


@pytest.mark.parametrize("h,w", [(REAL_H, REAL_W), (REAL_W, REAL_H), (32, 48), (224, 224), (223, 225), (100, 300),
                                 (7, 5), (1080, 1920)])
def test_tensor_crops_equal_pil_crops(h, w):
    frames = frames_to_uint8(natural_frames(2, h, w, seed=h * 7 + w))
    assert torch.equal(preprocess_uint8_tensor(frames), preprocess_uint8(frames))


def test_tensor_crops_equal_pil_on_white_noise_and_extremes():
    g = torch.Generator().manual_seed(3)
    noise = torch.randint(0, 256, (2, REAL_H, REAL_W, 3), dtype=torch.uint8, generator=g)
    edges = torch.zeros(2, REAL_H, REAL_W, 3, dtype=torch.uint8)
    edges[:, :, ::2] = 255  # every other column saturated: overshoot on both sides, clipped
    for frames in (noise, edges):
        assert torch.equal(preprocess_uint8_tensor(frames), preprocess_uint8(frames))


def test_grey_and_rgba_frames():
    grey = frames_to_uint8(natural_frames(2, 60, 90, channels=1))
    assert torch.equal(preprocess_uint8_tensor(grey), preprocess_uint8(grey))
    rgba = frames_to_uint8(torch.cat([natural_frames(2, 60, 90), torch.rand(2, 60, 90, 1)], dim=-1))
    assert torch.equal(preprocess_uint8_tensor(rgba), preprocess_uint8(rgba))  # through Pillow (premultiplied)


def test_tensor_path_does_not_use_pil(monkeypatch):
    frames = frames_to_uint8(natural_frames(2, REAL_H, REAL_W))
    want = preprocess_uint8(frames)

    def no_pil(*a, **k):
        raise AssertionError("the tensor path called Pillow")

    monkeypatch.setattr(rp.Image, "fromarray", no_pil)
    assert torch.equal(preprocess_uint8_tensor(frames), want)


def test_pillow_weights_sum_to_one_in_fixed_point():
    for n_in, n_out in ((832, 388), (480, 224), (48, 336), (224, 224)):
        starts, weights = pil_bicubic_taps(n_in, n_out)
        assert len(starts) == n_out and all(0 <= s < n_in for s in starts)
        assert all(abs(sum(w) - (1 << 22)) <= len(w) for w in weights)


@pytest.fixture(scope="module")
def scorer(tmp_path_factory):
    return tiny_models(seed=0, workdir=tmp_path_factory.mktemp("vocab")).scorer


@pytest.mark.slow
def test_scorer_tensor_path_gives_the_pil_rewards_on_real_size_frames(scorer):
    frames = natural_frames(4, REAL_H, REAL_W, seed=5)
    assert scorer.preprocessing == "pil"
    pil = scorer.score_frames(frames, "a red fox in the snow")
    key_pil = scorer.key
    scorer.preprocessing = "tensor"
    try:
        assert torch.equal(scorer.preprocess(frames), preprocess_uint8(frames_to_uint8(frames)))
        tensor = scorer.score_frames(frames, "a red fox in the snow")
        assert scorer.key != key_pil and scorer.key.startswith(key_pil)
    finally:
        scorer.preprocessing = "pil"
    assert torch.equal(tensor, pil)
    assert scorer.key == key_pil


def test_scorer_key_names_every_option_that_changes_scores(scorer):
    base = scorer.key
    scorer.uint8_mode = "round"
    try:
        rounded = scorer.key
    finally:
        scorer.uint8_mode = "truncate"
    assert rounded != base and scorer.key == base
    with pytest.raises(ValueError, match="preprocessing must be one of"):
        scorer.preprocessing = "gpu"
