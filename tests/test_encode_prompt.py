"""`python -m sdvg_core.io.encode_prompt`: a prompt encoded with a local umT5 becomes the file the demo reads.

The umT5 here is a tiny random UMT5EncoderModel and its tokenizer a T5TokenizerFast built in code from a
hand-written Unigram vocabulary (tokenizer.json): the same classes and folder layout as google/umt5-xxl, but no
sentencepiece model file, since none can be made offline without the sentencepiece trainer.
"""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from sdvg_core.demo.cli import main as demo_main
from sdvg_core.io.encode_prompt import main
from sdvg_core import load_embeddings
from sdvg_core.io.text import WAN_TEXT_LEN
from sdvg_core.models.wan_config import get_preset

PROMPT = "a red fox in the snow"
WORDS = "a red fox in the snow runs".split()
TINY_DIM = get_preset("tiny-target").text_dim  # the text width the demo's tiny DiTs read


def _tiny_umt5(folder: Path, d_model: int = TINY_DIM) -> Path:
    """Save a random 1-layer umT5 encoder and a Unigram tokenizer (pad 0, eos 1, unk 2) into `folder`."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import T5TokenizerFast, UMT5Config, UMT5EncoderModel

    pieces = ["<pad>", "</s>", "<unk>"] + [f"\u2581{w}" for w in WORDS] + list("abcdefghijklmnopqrstuvwxyz")
    tk = Tokenizer(models.Unigram([(w, -1.0) for w in pieces], unk_id=2))
    tk.pre_tokenizer = pre_tokenizers.Metaspace()
    tk.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 1)])
    T5TokenizerFast(tokenizer_object=tk, eos_token="</s>", pad_token="<pad>", unk_token="<unk>",
                    extra_ids=0).save_pretrained(folder)
    cfg = UMT5Config(vocab_size=len(pieces), d_model=d_model, d_kv=8, d_ff=64, num_layers=1, num_heads=4,
                     pad_token_id=0, eos_token_id=1, decoder_start_token_id=0)
    torch.manual_seed(0)
    UMT5EncoderModel(cfg).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def umt5(tmp_path_factory) -> Path:
    return _tiny_umt5(tmp_path_factory.mktemp("umt5"))


def test_encode_prompt_writes_what_the_demo_reads(umt5, tmp_path, capsys):
    out = tmp_path / "fox.safetensors"
    assert main(["--umt5", str(umt5), "--prompt", PROMPT, "--out", str(out), "--device", "cpu"]) == 0
    assert "wrote" in capsys.readouterr().out
    prompt, emb = load_embeddings(out)
    assert prompt == PROMPT and emb.shape == (1, WAN_TEXT_LEN, TINY_DIM)
    n_tokens = len(PROMPT.split()) + 1  # one piece per word here, plus </s>
    assert emb[0, :n_tokens].abs().sum(-1).gt(0).all()  # the prompt's rows are filled ...
    assert emb[0, n_tokens:].abs().sum() == 0  # ... and every row after them is zero, as Wan pads
    # the demo takes the file in place of its stand-in embeddings and keeps the stored prompt
    rc = demo_main(["--embeddings", str(out), "--blocks", "1", "--out", str(tmp_path / "demo"), "--format", "webp",
                    "--quiet"])
    assert rc == 0
    assert f'"prompt": "{PROMPT}"' in (tmp_path / "demo" / "report.json").read_text()


def test_encode_prompt_reads_a_diffusers_wan_folder(umt5, tmp_path):
    """Wan-AI/Wan2.1-T2V-1.3B-Diffusers keeps the encoder in text_encoder/ and the tokenizer in tokenizer/."""
    root = tmp_path / "wan_diffusers"
    (root / "text_encoder").mkdir(parents=True)
    (root / "tokenizer").mkdir()
    for f in umt5.iterdir():
        sub = "tokenizer" if f.name.startswith("tokenizer") else "text_encoder"
        (root / sub / f.name).symlink_to(f)
    a, b = tmp_path / "a.safetensors", tmp_path / "b.safetensors"
    assert main(["--umt5", str(root), "--prompt", PROMPT, "--out", str(a)]) == 0
    assert main(["--umt5", str(umt5), "--prompt", PROMPT, "--out", str(b)]) == 0
    assert torch.equal(load_embeddings(a)[1], load_embeddings(b)[1])


def test_encode_prompt_from_file_and_overwrite_rule(umt5, tmp_path, capsys):
    pf = tmp_path / "prompt.txt"
    pf.write_text(f"  {PROMPT}\n", encoding="utf-8")
    out = tmp_path / "p.safetensors"
    assert main(["--umt5", str(umt5), "--prompt-file", str(pf), "--out", str(out)]) == 0
    assert load_embeddings(out)[0] == PROMPT
    assert main(["--umt5", str(umt5), "--prompt-file", str(pf), "--out", str(out)]) == 2
    assert "add --force" in capsys.readouterr().err
    assert main(["--umt5", str(umt5), "--prompt-file", str(pf), "--out", str(out), "--force"]) == 0


def test_encode_prompt_lists_every_problem_before_loading(tmp_path, capsys, monkeypatch):
    import sdvg_core.io.encode_prompt as cli

    def boom(*_a, **_k):
        raise AssertionError("the encoder was loaded before the inputs were checked")

    monkeypatch.setattr(cli, "encode_umt5", boom)
    rc = main(["--umt5", str(tmp_path / "nope"), "--prompt", "  ", "--out", str(tmp_path / "p.pt")])
    err = capsys.readouterr().err
    assert rc == 2 and "3 problem(s)" in err
    assert "umT5 folder not found" in err and "the prompt is empty" in err and "try " in err
    (tmp_path / "empty").mkdir()
    assert main(["--umt5", str(tmp_path / "empty"), "--prompt", PROMPT, "--out", str(tmp_path / "p.safetensors")]) == 2
    assert "has no config.json" in capsys.readouterr().err
    assert main(["--prompt", PROMPT]) == 2  # argparse: --umt5 and --out are required


def test_kept_encoder_equals_one_shot_encoding(umt5):
    """UMT5Encoder (kept model, used by sdvg_eval for many prompts) gives encode_umt5's bits for every prompt."""
    from sdvg_core import UMT5Encoder, encode_umt5
    from sdvg_eval.prompts import umt5_encoder

    kept, enc = UMT5Encoder(umt5), umt5_encoder(umt5)
    for text in ("a red fox", "a blue bird in the snow"):
        one = encode_umt5(umt5, text)
        assert torch.equal(kept(text), one) and torch.equal(enc.encode(text), one)


@pytest.mark.slow
def test_demo_prompt_schedule_encodes_each_prompt_with_umt5(umt5, tmp_path, monkeypatch):
    """Real-model mode with --prompt-schedule and --umt5: every entry without an embeddings file
    is encoded by the local umT5 (the same bits as encode_umt5 of its text), the engine gets one conditioning per
    entry at its first block, and the report lists the segments and each block's prompt."""
    import json

    from safetensors.torch import save_file

    import sdvg_core.demo.cli as cli
    from sdvg_core import encode_umt5
    from sdvg_core.demo.tiny import random_vae
    from sdvg_core.models.wan import build_random
    from sdvg_core.models.wan_config import PRESETS

    cfg = PRESETS["tiny-target"]
    save_file({f"model.{k}": v.contiguous() for k, v in build_random(cfg, seed=1).state_dict().items()},
              str(tmp_path / "target.safetensors"))
    save_file({k: v.contiguous() for k, v in random_vae(seed=2).state_dict().items()}, str(tmp_path / "vae.safetensors"))
    texts = {0: "a red fox in the snow", 2: "the fox runs", 4: "a fox in the snow"}
    sched = tmp_path / "story.txt"
    sched.write_text("".join(f"{b}: {t}\n" for b, t in texts.items()))
    seen = {}

    class Recording(cli.Engine):
        def generate(self, spec, *a, **k):
            seen["spec"] = spec
            return super().generate(spec, *a, **k)

    monkeypatch.setattr(cli, "Engine", Recording)
    out = tmp_path / "out"
    rc = demo_main(["--policy", "target-only", "--target", str(tmp_path / "target.safetensors"),
                    "--vae", str(tmp_path / "vae.safetensors"), "--umt5", str(umt5), "--prompt-schedule", str(sched),
                    "--width", "48", "--height", "32", "--blocks", "6", "--out", str(out), "--quiet"])
    assert rc == 0
    spec = seen["spec"]
    got = [(b, p) for b, p in spec.schedule]
    assert [(b, c.text) for b, c in got] == list(texts.items())
    for (_, c), text in zip(got, texts.values()):
        assert torch.equal(c.embeddings, encode_umt5(umt5, text).to(c.embeddings.dtype))
    report = json.loads((out / "report.json").read_text())
    assert report["prompts"] == [{"first_block": b, "text": t} for b, t in texts.items()]
    assert [b["prompt"] for b in report["blocks"]] == [0, 0, 1, 1, 2, 2]


def test_a_prompt_longer_than_wans_text_length_is_said_once_with_the_tokens_dropped(umt5):
    """umT5 reads Wan's 512 tokens: a longer prompt is cut there, and the encoder says so, naming how many tokens
    were dropped (the demo prints it as a note); a prompt that fits says nothing."""
    from sdvg_core import UMT5Encoder

    told = []
    enc = UMT5Encoder(umt5, text_len=8, on_cut=told.append)
    enc("a red fox")  # 3 pieces + </s>
    assert told == []
    emb = enc("a red fox in the snow runs a red fox")  # 10 pieces + </s> = 11 tokens
    assert emb.shape[1] == 8 and len(told) == 1 and "has 11 tokens" in told[0] and "last 3 tokens are dropped" in told[0]
