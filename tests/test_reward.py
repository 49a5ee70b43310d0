"""ImageReward scorer: parity with the image-reward 1.5 golden fixture, loading errors, tokenizer, odd inputs.

Run with `pytest -s tests/test_reward.py` to see the measured max differences.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from conftest import require_shared
from safetensors.torch import load_file, save_file

from sdvg_core import CheckpointError, ImageRewardConfig, ImageRewardScorer, load_scorer
from sdvg_core.models.reward import (TINY, ImageRewardCheckpointError, ImageRewardFileNotFound, ImageRewardVocabError,
                                     build_model, check_base_tokenizer)
from sdvg_core.demo.vocab import synthetic_tiny_config, write_synthetic_vocab
from sdvg_core.models.reward_config import BERT_BASE_VOCAB_TOKENS, VOCAB_URL, WEIGHTS_REPO
from sdvg_core.io.reward_files import (detect_config, export_state_dict, find_vocab, load_model, load_tokenizer,
                                       random_scorer)
from sdvg_core.models.reward_preprocess import (
    crop_offsets, frames_to_uint8, normalize_pixels, preprocess_uint8, resized_hw,
)

ATOL = 1e-5  # fixtures README §12: values are O(1)
ATOL_BATCHED_HEAD = 2e-5
VOCAB_NAME = "bert-base-uncased-vocab.txt"


def report(name: str, value: float) -> None:
    """Print one measured figure (visible with pytest -s)."""
    print(f"[reward parity] {name}: {value:.3g}")


# ---------------------------------------------------------------------------------------------------------------
# fixtures
# ---------------------------------------------------------------------------------------------------------------
@pytest.fixture
def ir_dir(fixtures_dir: Path) -> Path:
    return fixtures_dir / "imagereward_tiny"


@pytest.fixture
def vocab_file(data_dir: Path) -> Path:
    return data_dir / VOCAB_NAME


@pytest.fixture
def golden(ir_dir: Path) -> dict[str, torch.Tensor]:
    return load_file(str(ir_dir / "tensors.safetensors"))


@pytest.fixture
def meta(ir_dir: Path) -> dict:
    return json.loads((ir_dir / "meta.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def _loaded() -> ImageRewardScorer:
    """Load the fixture model and tokenizer once per module (skips like fixtures_dir when the golden tensors are absent)."""
    return load_scorer(require_shared("fixtures") / "imagereward_tiny" / "weights.safetensors",
                                        vocab_path=require_shared("data") / VOCAB_NAME)


@pytest.fixture
def scorer(_loaded: ImageRewardScorer) -> ImageRewardScorer:
    """A fresh scorer (settings and prompt cache of its own) around the shared model and tokenizer."""
    return ImageRewardScorer(_loaded.model, _loaded.tokenizer)


@pytest.fixture
def fixture_pt(tmp_path: Path, ir_dir: Path, vocab_file: Path) -> Path:
    """The fixture weights re-saved as a torch pickle named like the real file, with the vocab next to it."""
    path = tmp_path / "ImageReward.pt"
    torch.save(load_file(str(ir_dir / "weights.safetensors")), path)
    shutil.copy(vocab_file, tmp_path / "vocab.txt")
    return path


# ---------------------------------------------------------------------------------------------------------------
# preprocessing and tokens: exact
# ---------------------------------------------------------------------------------------------------------------
def test_crops_exact(golden, meta):
    for i, info in enumerate(meta["images"]):
        h, w = info["input_hw"]
        assert resized_hw(h, w) == tuple(info["resized_hw"])
        assert crop_offsets(*info["resized_hw"]) == (info["crop_top"], info["crop_left"])
    crops = torch.cat([preprocess_uint8(golden[f"image{i}"][None]) for i in range(len(meta["images"]))])  # [N, 3, S, S]
    assert crops.dtype == torch.uint8
    assert torch.equal(crops, golden["pixel_values_u8"])
    norm = normalize_pixels(golden["pixel_values_u8"])
    assert torch.equal(norm, (golden["pixel_values_u8"].float() / 255 - golden["clip_mean"].view(1, 3, 1, 1))
                       / golden["clip_std"].view(1, 3, 1, 1))


def test_tokens_exact(scorer, golden, meta):
    for name, strings in (("", meta["prompts"]), ("tok_extra_", meta["tok_extra"])):
        ids = torch.cat([scorer.text_inputs(s).input_ids for s in strings])
        mask = torch.cat([scorer.text_inputs(s).attention_mask for s in strings])
        assert ids.dtype == mask.dtype == torch.int64
        assert torch.equal(ids, golden[f"{name}input_ids"]), name
        assert torch.equal(mask, golden[f"{name}attention_mask"]), name


# ---------------------------------------------------------------------------------------------------------------
# model parity
# ---------------------------------------------------------------------------------------------------------------
@torch.inference_mode()
def test_model_parity(scorer, golden, meta):
    model = scorer.model
    n = len(meta["images"])
    px = normalize_pixels(golden["pixel_values_u8"])  # [N, 3, S, S]
    vit = model.encode_image(px)  # [N, tokens, vision_width]
    d_vit = (vit - golden["vit_last_hidden_state"]).abs().max().item()
    cls = torch.zeros_like(golden["text_cls"])  # [prompts, N, text_width]
    mlp = torch.zeros_like(golden["mlp_out"])  # [prompts, N]
    rewards = torch.zeros_like(golden["rewards"])  # [prompts, N]
    for p, prompt in enumerate(meta["prompts"]):
        t = scorer.text_inputs(prompt)
        cls[p] = model.encode_text(t.input_ids.expand(n, -1), t.attention_mask.expand(n, -1), vit)
        mlp[p] = model.head_output(cls[p])
        rewards[p] = scorer.score_pixels(golden["pixel_values_u8"], prompt)
    single = torch.tensor([[scorer.score_pixels(golden["pixel_values_u8"][i:i + 1], prompt).item()
                            for i in range(n)] for prompt in meta["prompts"]])
    figures = {
        "vit_last_hidden_state": d_vit,
        "text_cls": (cls - golden["text_cls"]).abs().max().item(),
        "mlp_out": (mlp - golden["mlp_out"]).abs().max().item(),
        f"rewards {list(rewards.shape)}, {n} images per batch": (rewards - golden["rewards"]).abs().max().item(),
        f"rewards {list(rewards.shape)}, one pair at a time": (single - golden["rewards"]).abs().max().item(),
    }
    for name, value in figures.items():
        report(name, value)
        assert value <= ATOL, name


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@torch.inference_mode()
def test_the_prepared_text_mask_gives_the_same_bits_as_transformers_own(scorer, golden, meta, monkeypatch, dtype):
    """The text encoder's mask prepared as 4D (no padding check read back to the host) against transformers building it
    from the 2D token mask: the same [CLS] features to the bit, for a padded and for an unpadded prompt."""
    import copy

    import sdvg_core.models.reward as reward

    if not reward.TEXT_MASK_PREPARED_4D:
        pytest.skip("this transformers (4.x) builds BLIP's text mask without a read; the 2D mask is passed as before")
    model = copy.deepcopy(scorer.model).to(dtype)
    n = len(meta["images"])
    vit = model.encode_image(normalize_pixels(golden["pixel_values_u8"]).to(dtype))  # [N, tokens, D]
    padded = scorer.text_inputs(meta["prompts"][0])
    assert int(padded.attention_mask.sum()) < padded.attention_mask.shape[1]  # the prompt is padded
    unpadded = type(padded)(padded.input_ids, torch.ones_like(padded.attention_mask))
    for t in (padded, unpadded):
        ids, mask = t.input_ids.expand(n, -1), t.attention_mask.expand(n, -1)
        prepared = model.encode_text(ids, mask, vit)
        monkeypatch.setattr(reward, "TEXT_MASK_PREPARED_4D", False)
        theirs = model.encode_text(ids, mask, vit)
        monkeypatch.setattr(reward, "TEXT_MASK_PREPARED_4D", True)
        assert prepared.dtype == dtype and torch.equal(prepared, theirs)


def test_frames_parity_and_batching(scorer, golden, meta):
    prompt = meta["prompts"][meta["frames_prompt_index"]]
    n = meta["frames"]["n"]
    batched = scorer.score_frames(golden["frames"], prompt)  # [n]
    assert batched.shape == (n,) and batched.dtype == torch.float32
    one_by_one = torch.cat([scorer.score_frames(golden["frames"][i:i + 1], prompt) for i in range(n)])
    scorer.micro_batch = next(m for m in range(n // 2, 0, -1) if n % m)  # uneven micro-batches (12: 5 + 5 + 2)
    micro = scorer.score_frames(golden["frames"], prompt)
    d_single = (batched - golden["frames_rewards"]).abs().max().item()
    d_batched = (batched - golden["frames_rewards_batched"]).abs().max().item()
    d_1b1 = (one_by_one - golden["frames_rewards"]).abs().max().item()
    d_self = (batched - one_by_one).abs().max().item()
    report("frames_rewards (one at a time) vs ours batched", d_single)
    report("frames_rewards_batched vs ours batched", d_batched)
    report("frames_rewards vs ours one at a time", d_1b1)
    report("ours batched vs ours one at a time", d_self)
    report(f"ours batch {n} vs micro-batches of {scorer.micro_batch}", (batched - micro).abs().max().item())
    assert d_single <= ATOL and d_1b1 <= ATOL
    assert d_batched <= ATOL_BATCHED_HEAD
    # Features are bit-identical across batch sizes and the head runs row by row, so a frame's reward does
    # not depend on the batch it was scored in (the reference package's own batched path differs by 1.3e-6).
    with torch.inference_mode():
        t = scorer.text_inputs(prompt)
        px = normalize_pixels(scorer.preprocess(golden["frames"]))
        feats = scorer.model.encode_text(t.input_ids.expand(n, -1), t.attention_mask.expand(n, -1),
                                         scorer.model.encode_image(px))
        feats1 = torch.cat([scorer.model.encode_text(t.input_ids, t.attention_mask,
                                                     scorer.model.encode_image(px[i:i + 1])) for i in range(n)])
    assert torch.equal(feats, feats1)
    assert (feats - golden["frames_text_cls"]).abs().max().item() <= ATOL
    assert d_self == 0.0 and torch.equal(batched, micro)


def test_block_aggregation(scorer, golden, meta):
    prompt = meta["prompts"][meta["frames_prompt_index"]]
    frames = golden["frames"][:9]  # the pixel frames of a first block (1 + 4 x 2)
    score_min, per_frame = scorer.score_block(frames, prompt)
    assert score_min == pytest.approx(float(per_frame.min()), abs=0)
    score_mean, per_frame2 = scorer.score_block(frames, prompt, aggregation="mean")
    assert torch.equal(per_frame, per_frame2)
    assert score_mean == pytest.approx(float(per_frame.mean()), abs=0)
    assert score_min < score_mean
    assert score_min == pytest.approx(float(golden["frames_rewards"][:9].min()), abs=ATOL)
    with pytest.raises(ValueError, match="aggregation"):
        scorer.score_block(frames, prompt, aggregation="max")


# ---------------------------------------------------------------------------------------------------------------
# prompts
# ---------------------------------------------------------------------------------------------------------------
def test_long_and_empty_prompts(scorer, golden):
    frame = golden["image2"][None]  # [1, 224, 224, 3]: no resampling
    long_prompt = " ".join(["a red dog runs through the tall grass"] * 40)  # ~320 words
    t = scorer.text_inputs(long_prompt)
    assert t.input_ids.shape == (1, 35) and t.input_ids[0, 0].item() == 101 and t.input_ids[0, -1].item() == 102
    assert int(t.attention_mask.sum()) == 35
    assert torch.isfinite(scorer.score_frames(frame, long_prompt)).all()
    e = scorer.text_inputs("")
    assert e.input_ids[0, :3].tolist() == [101, 102, 0] and int(e.attention_mask.sum()) == 2
    assert scorer.score_frames(frame, "").item() == pytest.approx(golden["rewards"][0, 2].item(), abs=ATOL)


def test_text_cache_is_lru(scorer):
    scorer._text_cache_size = 2
    a = scorer.text_inputs("a cat")
    assert scorer.text_inputs("a cat") is a
    scorer.text_inputs("a dog")
    scorer.text_inputs("a cat")  # refresh: "a dog" is now the oldest
    scorer.text_inputs("a bird")
    assert list(scorer._text_cache) == ["a cat", "a bird"]


# ---------------------------------------------------------------------------------------------------------------
# frames: float / uint8 / odd sizes
# ---------------------------------------------------------------------------------------------------------------
def test_uint8_conversion_modes():
    x = torch.tensor([0.0, 10.7 / 255, 10.2 / 255, 1.0, -0.5, 1.5, float("nan")]).view(1, 1, 7, 1)
    assert frames_to_uint8(x, "truncate").flatten().tolist() == [0, 10, 10, 255, 0, 255, 0]
    assert frames_to_uint8(x, "round").flatten().tolist() == [0, 11, 10, 255, 0, 255, 0]
    u = torch.arange(256, dtype=torch.uint8).view(1, 1, 256, 1)
    for mode in ("truncate", "round"):  # uint8 -> float32 /255 -> uint8 is the identity either way
        assert torch.equal(frames_to_uint8(u.float() / 255, mode), u)
    with pytest.raises(ValueError):
        frames_to_uint8(x, "floor")  # type: ignore[arg-type]


def test_float_frames_64x96_match_uint8(scorer, golden, meta):
    u8 = golden["image4"]  # 64x96 uint8
    f32 = u8.float() / 255  # what ComfyUI's LoadImage holds
    r_u8 = scorer.score_frames(u8, meta["prompts"][4])
    r_f32 = scorer.score_frames(f32[None], meta["prompts"][4])
    assert torch.equal(r_u8, r_f32)
    d = abs(r_f32.item() - golden["rewards"][4, 4].item())
    report("64x96 float frame vs fixture reward", d)
    assert d <= ATOL


@pytest.mark.slow
def test_float_frames_1080x1920(scorer, meta):
    g = torch.Generator().manual_seed(0)
    h, w = 1080, 1920
    yy = torch.linspace(0, 1, h).view(h, 1, 1)
    xx = torch.linspace(0, 1, w).view(1, w, 1)
    base = torch.cat([yy.expand(h, w, 1), xx.expand(h, w, 1), (yy * xx)], dim=-1)  # [1080, 1920, 3] smooth
    frames = (base[None] + 0.02 * torch.randn(2, h, w, 3, generator=g)).clamp(0, 1)  # [2, 1080, 1920, 3]
    assert scorer.preprocess(frames).shape == (2, 3, 224, 224)
    assert resized_hw(h, w) == (224, 398)
    rewards = scorer.score_frames(frames, meta["prompts"][4])
    assert rewards.shape == (2,) and torch.isfinite(rewards).all()
    scorer.uint8_mode = "round"
    rounded = scorer.score_frames(frames, meta["prompts"][4])
    report("1080x1920: round vs truncate uint8 conversion (tiny model)", (rounded - rewards).abs().max().item())
    assert torch.isfinite(rounded).all()


def test_bad_frames_rejected(scorer):
    with pytest.raises(ValueError, match="F, H, W, C"):
        scorer.score_frames(torch.zeros(1, 2, 8, 8, 3), "x")
    with pytest.raises(ValueError, match="C in"):
        scorer.score_frames(torch.zeros(1, 8, 8, 2), "x")
    with pytest.raises(TypeError):
        scorer.score_frames(torch.zeros(1, 8, 8, 3, dtype=torch.int32), "x")


# ---------------------------------------------------------------------------------------------------------------
# loading: formats, key variants, lookup of the vocab
# ---------------------------------------------------------------------------------------------------------------
def test_pt_roundtrip_module_prefix_and_position_ids(fixture_pt, ir_dir, golden, meta):
    sd = load_file(str(ir_dir / "weights.safetensors"))
    assert "blip.text_encoder.embeddings.position_ids" in sd and len(sd) == 101
    ref = load_model(sd).state_dict()
    for variant in ({f"module.{k}": v for k, v in sd.items()},
                    {k: v for k, v in sd.items() if not k.endswith("position_ids")}):
        got = load_model(variant).state_dict()
        assert all(torch.equal(got[k], ref[k]) for k in ref)
    sc = load_scorer(fixture_pt)  # vocab found next to it as vocab.txt
    r = sc.score_frames(golden["image2"], meta["prompts"][0])
    assert r.item() == pytest.approx(golden["rewards"][0, 2].item(), abs=ATOL)
    assert detect_config(sd, "x") == TINY


def test_vocab_lookup_order_and_missing(tmp_path, vocab_file):
    weights = tmp_path / "ImageReward.pt"
    with pytest.raises(ImageRewardFileNotFound) as exc:
        find_vocab(weights)
    msg = str(exc.value)
    for part in ("vocab.txt", VOCAB_NAME, str(tmp_path / "bert-base-uncased"), VOCAB_URL):
        assert part in msg
    sub = tmp_path / "bert-base-uncased"
    sub.mkdir()
    shutil.copy(vocab_file, sub / "vocab.txt")
    assert find_vocab(weights) == sub / "vocab.txt"
    shutil.copy(vocab_file, tmp_path / VOCAB_NAME)
    assert find_vocab(weights) == tmp_path / VOCAB_NAME
    assert find_vocab(weights, vocab_path=vocab_file) == vocab_file
    assert find_vocab(weights, vocab_path=sub) == sub / "vocab.txt"
    with pytest.raises(ImageRewardFileNotFound):
        find_vocab(weights, vocab_path=tmp_path / "nope.txt")


def test_missing_vocab_fails_before_reading_weights(tmp_path, ir_dir):
    path = tmp_path / "ImageReward.safetensors"
    shutil.copy(ir_dir / "weights.safetensors", path)
    with pytest.raises(ImageRewardFileNotFound, match="BERT vocabulary not found"):
        load_scorer(path)


# ---------------------------------------------------------------------------------------------------------------
# tokenizer traps
# ---------------------------------------------------------------------------------------------------------------
def test_five_token_vocab_trap_refused(tmp_path, vocab_file):
    from transformers import BertTokenizer

    trap = BertTokenizer(vocab_file=str(vocab_file))  # transformers >= 5: only the 5 special tokens survive
    if len(trap) == BERT_BASE_VOCAB_TOKENS:  # transformers 4.x reads the file correctly here
        short = tmp_path / "vocab.txt"
        short.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n", encoding="utf-8")
        trap = BertTokenizer.from_pretrained(str(tmp_path), local_files_only=True)
    assert len(trap) == 5
    with pytest.raises(ImageRewardVocabError, match="5 tokens"):
        check_base_tokenizer(trap, BERT_BASE_VOCAB_TOKENS, str(vocab_file))
    tok = load_tokenizer(vocab_file, TINY)  # our route builds the full vocabulary on every version
    assert len(tok) == TINY.vocab_size
    assert tok.convert_tokens_to_ids(["puppy", "[DEC]", "[ENC]"]) == [17022, 30522, 30523]


def test_wrong_size_vocab_refused(tmp_path):
    small = write_synthetic_vocab(tmp_path / "vocab.txt")
    with pytest.raises(ImageRewardVocabError, match="30522"):
        load_tokenizer(small, TINY)


def test_crlf_vocab_is_normalised(tmp_path, vocab_file):
    crlf = tmp_path / "vocab.txt"
    crlf.write_bytes(vocab_file.read_bytes().replace(b"\n", b"\r\n"))
    tok = load_tokenizer(crlf, TINY)
    assert tok("a golden retriever")["input_ids"] == load_tokenizer(vocab_file, TINY)("a golden retriever")["input_ids"]


# ---------------------------------------------------------------------------------------------------------------
# checkpoint errors
# ---------------------------------------------------------------------------------------------------------------
def test_missing_weights_error(tmp_path):
    path = tmp_path / "models" / "image_reward" / "ImageReward.pt"
    with pytest.raises(ImageRewardFileNotFound) as exc:  # reported before the (also missing) vocabulary
        load_scorer(path)
    msg = str(exc.value)
    assert str(path) in msg and str(path.parent) in msg and WEIGHTS_REPO in msg and "ImageReward.pt" in msg


def test_directory_given(tmp_path, fixture_pt):
    with pytest.raises(ImageRewardCheckpointError, match="is a folder") as exc:
        load_model(tmp_path)
    assert "ImageReward.pt" in str(exc.value)


def test_truncated_checkpoints(tmp_path, fixture_pt, ir_dir):
    data = fixture_pt.read_bytes()
    cut = tmp_path / "cut.pt"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(ImageRewardCheckpointError, match=r"not a readable checkpoint \(corrupt or truncated\)") as exc:
        load_model(cut)
    assert str(cut) in str(exc.value) and "ImageReward.pt" in str(exc.value)  # where to download it again
    st = ir_dir.joinpath("weights.safetensors").read_bytes()
    cut_st = tmp_path / "cut.safetensors"
    cut_st.write_bytes(st[: len(st) // 2])
    with pytest.raises(ImageRewardCheckpointError, match="corrupt or truncated"):
        load_model(cut_st)
    empty = tmp_path / "empty.pt"
    empty.write_bytes(b"")
    with pytest.raises(ImageRewardCheckpointError, match=r"empty.pt is empty \(0 bytes\)"):
        load_model(empty)


class _RunsCode:
    """A pickle payload whose unpickling would create a marker file (it must never run)."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


def test_code_running_pickle_refused(tmp_path):
    marker = tmp_path / "code_ran"
    evil = tmp_path / "ImageReward.pt"
    torch.save({"blip.visual_encoder.cls_token": torch.zeros(1, 1, 16), "x": _RunsCode(marker)}, evil)
    assert not marker.exists()
    with pytest.raises(ImageRewardCheckpointError, match="refused as unsafe.*run code") as exc:
        load_model(evil)
    assert str(evil) in str(exc.value) and isinstance(exc.value, CheckpointError) and exc.value.path == str(evil)
    assert not marker.exists()


def test_wrong_architecture(tmp_path, ir_dir):
    sd = load_file(str(ir_dir / "weights.safetensors"))
    other = tmp_path / "wan.safetensors"
    save_file({"model.blocks.0.self_attn.q.weight": torch.zeros(4, 4)}, str(other))
    with pytest.raises(ImageRewardCheckpointError, match="not an ImageReward checkpoint") as exc:
        load_model(other)
    assert str(other) in str(exc.value)
    one_block = {k: v for k, v in sd.items() if ".blocks.1." not in k}
    with pytest.raises(ImageRewardCheckpointError, match="unknown sizes"):
        load_model(one_block)
    extra = dict(sd, **{"blip.itm_head.weight": torch.zeros(2, 8), "mlp.layers.9.bias": torch.zeros(1)})
    extra.pop("blip.text_encoder.encoder.layer.1.output.dense.bias")
    with pytest.raises(ImageRewardCheckpointError) as exc:
        load_model(extra, source="extra.pt")
    msg = str(exc.value)
    assert "extra.pt" in msg and "missing keys: 1 (" in msg and "unexpected keys: 2 (" in msg
    assert "blip.itm_head.weight" in msg and "layer.1.output.dense.bias" in msg
    bigger = ImageRewardConfig(name="tiny-wide", vision_width=32, vision_layers=2, vision_heads=2, vision_mlp=64,
                               text_width=8, text_layers=2, text_heads=2, text_ffn=32)
    with pytest.raises(ImageRewardCheckpointError, match="shape mismatches"):
        load_model(sd, cfg=bigger)
    with pytest.raises(ImageRewardCheckpointError, match="wrapped.pt: expected a flat dict of tensors"):
        wrapped = tmp_path / "wrapped.pt"
        torch.save({"weights": sd, "epoch": 3}, wrapped)
        load_model(wrapped)
    wrapped = tmp_path / "state_dict.pt"  # a `state_dict` wrapper is unwrapped by the one reader
    torch.save({"state_dict": sd, "epoch": 3}, wrapped)
    assert load_model(wrapped).cfg == TINY


# ---------------------------------------------------------------------------------------------------------------
# demo path: synthetic vocab + random tiny model, no golden tensors needed
# ---------------------------------------------------------------------------------------------------------------
def test_synthetic_vocab_random_model_roundtrip(tmp_path):
    folder = tmp_path / "image_reward"
    vocab = write_synthetic_vocab(folder / "vocab.txt")
    cfg = synthetic_tiny_config(vocab)
    n = len(vocab.read_text(encoding="utf-8").splitlines())
    assert 200 <= n <= 1000 and cfg.vocab_size == n + 2
    sc = random_scorer(cfg, vocab, seed=1, micro_batch=4)
    ids = sc.text_inputs("a dog runs on the beach").input_ids[0]
    assert 1 not in ids.tolist()  # no [UNK] (id 1 in the synthetic vocabulary)
    frames = torch.rand(6, 48, 80, 3, generator=torch.Generator().manual_seed(0))
    rewards = sc.score_frames(frames, "a dog runs on the beach")
    assert rewards.shape == (6,) and torch.isfinite(rewards).all() and rewards.std() > 0
    save_file(export_state_dict(sc.model), str(folder / "ImageReward.safetensors"))
    again = load_scorer(folder / "ImageReward.safetensors", micro_batch=4)  # same batching
    assert again.cfg == cfg
    assert torch.equal(again.score_frames(frames, "a dog runs on the beach"), rewards)
    m1, m2 = build_model(cfg, seed=1), build_model(cfg, seed=1)
    assert all(torch.equal(a, b) for a, b in zip(m1.state_dict().values(), m2.state_dict().values()))
