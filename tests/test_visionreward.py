"""VisionReward-Video adapter (sdvg_eval/visionreward.py) on CPU, with a stand-in for CogVLM2-Video that records
what it is asked and answers from a table: frame sampling, question substitution, yes/no parsing, weighting,
the shared-prefix batching against one forward per question, and loading from a local folder only."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from sdvg_eval import visionreward as vr

PROMPT = "a red fox jumps over a frozen creek"
# a checklist in the reference's format: [[prompt]] in some lines, the last line without a line break
QUESTIONS = ['Does the video meet all the requirements stated in the text "[[prompt]]"?',
             "Is the composition aesthetically pleasing?",
             "Is the lighting beautiful?",
             'Does the video not completely fail "[[prompt]]"?',
             "Are there any letters present?"]
WEIGHTS = [0.95, 0.25, 1.14, 0.03, 0.39]
ANSWERS = ["yes", "no", "Yes", "yes", "no"]  # "Yes" is not "yes": the reference compares the decoded token exactly


def _checkout(root: Path) -> Path:
    d = root / "VisionReward_Video"
    d.mkdir(parents=True)
    (d / "VisionReward_video_qa_select.txt").write_text("\n".join(QUESTIONS))
    (d / "weight.json").write_text(json.dumps(WEIGHTS))
    return root


def _queries(prompt: str = PROMPT) -> list[str]:
    """What the reference asks: readlines() keeps the line breaks, then [[prompt]] -> the prompt."""
    lines = [q + "\n" for q in QUESTIONS[:-1]] + [QUESTIONS[-1]]
    return [q.replace("[[prompt]]", prompt) for q in lines]


# ------------------------------------------------------------------------------------------ the stand-in
VISION, LANG = 1, 0
BOS, VISION_PAD = 1, 2
TOKENS_PER_FRAME = 3  # vision tokens per frame, then one time-index text token (as CogVLM2-Video lays them out)
TEXT0 = 100  # text token id = TEXT0 + ord(character)
WORDS = {10: "yes", 11: "no", 12: "Yes", 13: "~"}  # answer tokens; "~" answers a position that is not a question's end
ANSWER_ID = {v: k for k, v in WORDS.items()}
VOCAB = TEXT0 + 0x3000


def build_position_ids(x: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
    """The stand-in's position rule (module level, as in CogVLM2's code): a run of vision tokens shares a position."""
    t = x.clone()
    if attention_mask is not None:
        t[~attention_mask.bool()] = -1
    step = torch.ones_like(t)
    step[:, 0] = 0
    step[:, 1:] = ((t[:, 1:] != VISION) | (t[:, :-1] != VISION)).long()
    return step.cumsum(-1)


class Tokenizer:
    def decode(self, token) -> str:
        token = int(token)
        return WORDS[token] if token in WORDS else chr(token - TEXT0)

    def text(self, ids) -> str:
        return "".join(chr(int(i) - TEXT0) for i in ids if int(i) >= TEXT0)


class StandIn:
    """Records every question, video, forward and generate call; answers each question from `table` at the
    position right after its ' Answer:' and nothing sensible anywhere else."""

    def __init__(self, table: dict[str, str], lie_with_cache: bool = False):
        self.table, self.lie_with_cache = table, lie_with_cache
        self.asked: list[str] = []
        self.videos: list[torch.Tensor] = []
        self.forwards: list[dict] = []
        self.generates = 0

    def build_conversation_input_ids(self, tokenizer, *, query, images, history, template_version):
        assert history == [] and template_version == "chat" and len(images) == 1
        video = images[0]
        assert video.dtype == torch.uint8 and video.shape[0] == 3  # [3, T, H, W], the reference's permute
        self.asked.append(query)
        self.videos.append(video.clone())
        ids, tt = [BOS], [LANG]
        for t in range(video.shape[1]):
            ids += [VISION_PAD] * TOKENS_PER_FRAME + [TEXT0 + ord(str(t % 10))]
            tt += [VISION] * TOKENS_PER_FRAME + [LANG]
        text = f"Question: {query} Answer:"  # CogVLM2's chat template
        ids += [TEXT0 + ord(c) for c in text]
        tt += [LANG] * len(text)
        return {"input_ids": torch.tensor(ids), "token_type_ids": torch.tensor(tt),
                "attention_mask": torch.ones(len(ids), dtype=torch.long),
                "images": [video.permute(1, 0, 2, 3).float() / 255]}

    def _answer(self, ids: torch.Tensor, upto: int) -> int:
        text = Tokenizer().text(ids[: upto + 1])
        if not text.endswith(" Answer:"):
            return ANSWER_ID["~"]
        query = text[text.index("Question: ") + len("Question: "): -len(" Answer:")]
        return ANSWER_ID[self.table[query]]

    def __call__(self, input_ids, token_type_ids, attention_mask, images=None, position_ids=None,
                 past_key_values=None, use_cache=None, return_dict=True):
        b, s = input_ids.shape
        self.forwards.append({"rows": b, "tokens": s, "past": 0 if past_key_values is None else
                              past_key_values[0][0].shape[2], "images": images is not None})
        if past_key_values is None:
            assert images is not None and len(images) == b  # CogVLM2 asserts one image list per row
            full_ids, full_tt = input_ids, token_type_ids
            assert attention_mask.shape == (b, s)
        else:
            prefix = past_key_values[0][0][:, 0, :, 0].long()  # this stand-in's "keys" are the prefix token ids
            prefix_tt = past_key_values[0][1][:, 0, :, 0].long()
            assert prefix.shape[0] == b  # the cache was expanded to every row
            full_ids, full_tt = torch.cat([prefix, input_ids], 1), torch.cat([prefix_tt, token_type_ids], 1)
            assert attention_mask.shape == (b, prefix.shape[1] + s)  # prefix + this call's tokens
        want = build_position_ids(full_tt, attention_mask)[:, -s:]
        if position_ids is not None:  # positions as the whole conversation has them (real tokens only)
            real = attention_mask[:, -s:].bool()
            assert torch.equal(position_ids[real], want[real]), "position ids differ from the full conversation's"
        else:
            assert past_key_values is None
        logits = torch.zeros(b, s, VOCAB)
        off = full_ids.shape[1] - s
        for r in range(b):
            for p in range(s):
                if attention_mask[r, off + p]:
                    a = self._answer(full_ids[r], off + p)
                    if self.lie_with_cache and past_key_values is not None and WORDS[a] in ("yes", "no"):
                        a = ANSWER_ID["no" if WORDS[a] == "yes" else "yes"]
                else:
                    a = ANSWER_ID["~"]
                logits[r, p, a] = 1.0
        cache = None
        if use_cache:
            cache = tuple((full_ids[:, None, :, None].float(), full_tt[:, None, :, None].float()) for _ in range(2))
        return SimpleNamespace(logits=logits, past_key_values=cache)

    def generate(self, input_ids, token_type_ids, attention_mask, images, max_new_tokens, **kw):
        assert max_new_tokens == 1 and kw == vr.GEN_KWARGS  # the reference's arguments
        self.generates += 1
        first = self._answer(input_ids[0], input_ids.shape[1] - 1)
        return torch.cat([input_ids, torch.tensor([[first]])], 1)


def _table(prompt: str = PROMPT) -> dict[str, str]:
    return dict(zip(_queries(prompt), ANSWERS))


def _expected(answers=ANSWERS, weights=WEIGHTS) -> float:
    """Written out by hand: +1 for exactly 'yes', -1 otherwise, weighted, averaged over all questions."""
    terms = [(1.0 if a == "yes" else -1.0) * w for a, w in zip(answers, weights)]
    return sum(terms) / len(terms)


def _frames(n: int) -> torch.Tensor:
    """n frames whose pixels all hold the frame's index (so a sampled video tells which frames were taken)."""
    return (torch.arange(n, dtype=torch.float32) / 255).view(n, 1, 1, 1).expand(n, 16, 24, 3).contiguous()


@pytest.fixture()
def checklist(tmp_path) -> vr.Checklist:
    return vr.read_checklist(_checkout(tmp_path / "VisionReward"))


def _metric(checklist, model=None, **kw) -> vr.VisionRewardVideo:
    kw.setdefault("video", "frames")
    return vr.VisionRewardVideo(model or StandIn(_table()), Tokenizer(), checklist, **kw)


# ------------------------------------------------------------------------------------------ tests
def test_checklist_reads_lines_as_readlines_and_pairs_weights(checklist, tmp_path):
    assert checklist.questions[0].endswith("?\n") and not checklist.questions[-1].endswith("\n")
    assert checklist.queries(PROMPT) == _queries()
    assert checklist.weights == tuple(WEIGHTS)
    bad = _checkout(tmp_path / "bad")
    (bad / vr.WEIGHTS_FILE).write_text(json.dumps(WEIGHTS[:-1]))
    with pytest.raises(vr.VisionRewardError, match="pair up"):
        vr.read_checklist(bad)
    with pytest.raises(vr.VisionRewardError, match="--vr-checklist"):
        vr.read_checklist(tmp_path / "nowhere")


def test_chat_sampling_matches_the_reference_rule():
    # 105 frames at 16 fps (9 Krea blocks): one frame per whole second, 0..round(6.5)=6 (half to even)
    assert vr.chat_frame_indices([i / 16 for i in range(105)]) == [0, 16, 32, 48, 64, 80, 96]
    # round(2.5) == 2: seconds 0..2 only (rounding half up would add a 4th frame)
    assert vr.chat_frame_indices([i / 2 for i in range(6)]) == [0, 2, 4]
    # a second half-way between two frames takes the first
    assert vr.chat_frame_indices([0.0, 0.5, 1.5, 2.0]) == [0, 1, 3]
    # at most 24 frames
    assert vr.chat_frame_indices([i / 4 for i in range(200)]) == [4 * s for s in range(24)]


def test_score_asks_every_question_about_the_sampled_video_and_weights_plus_minus_one(checklist):
    model = StandIn(_table())
    m = _metric(checklist, model, mode="single")
    got = m.score(_frames(105), PROMPT)
    assert model.asked == _queries()  # every question, in order, prompt substituted, line breaks kept
    for v in model.videos:  # the video the reference's load_video returns: the sampled frames, uint8 [3, T, H, W]
        assert v[0, :, 0, 0].tolist() == [0, 16, 32, 48, 64, 80, 96]
    assert got == pytest.approx(_expected(), rel=1e-12)
    # the same answers mapped 1/0 or summed would give other numbers
    assert got != pytest.approx(sum((a == "yes") * w for a, w in zip(ANSWERS, WEIGHTS)) / len(WEIGHTS))
    assert got != pytest.approx(_expected() * len(WEIGHTS))


def test_combine_is_the_references_mean_of_signed_weights():
    assert vr.combine([True, False, True], [0.5, 0.25, 2.0]) == pytest.approx((0.5 - 0.25 + 2.0) / 3, rel=1e-15)
    assert vr.combine([False, False], [1.0, 3.0]) == pytest.approx(-2.0)
    with pytest.raises(ValueError):
        vr.combine([True], [1.0, 2.0])


def test_prefix_path_runs_the_video_once_and_answers_like_one_forward_per_question(checklist):
    single_model, prefix_model = StandIn(_table()), StandIn(_table())
    single = _metric(checklist, single_model, mode="single")
    fast = _metric(checklist, prefix_model, mode="prefix", verify_first=False)
    frames = _frames(40)
    assert fast.score(frames, PROMPT) == single.score(frames, PROMPT) == pytest.approx(_expected(), rel=1e-12)
    assert prefix_model.asked == single_model.asked == _queries()
    assert len(single_model.forwards) == len(QUESTIONS) and all(f["images"] for f in single_model.forwards)
    pre, batched = prefix_model.forwards
    assert pre["images"] and pre["rows"] == 1 and pre["past"] == 0  # the video + shared text, once
    assert not batched["images"] and batched["rows"] == len(QUESTIONS) and batched["past"] == pre["tokens"]
    # in batches of 2: one prefix forward, then 3 forwards of at most 2 questions
    chunked_model = StandIn(_table())
    chunked = _metric(checklist, chunked_model, mode="prefix", batch=2, verify_first=False)
    assert chunked.score(frames, PROMPT) == pytest.approx(_expected(), rel=1e-12)
    assert [f["rows"] for f in chunked_model.forwards] == [1, 2, 2, 1]


def test_first_video_is_checked_against_single_forwards(checklist):
    honest = StandIn(_table())
    m = _metric(checklist, honest)  # prefix mode with the check on: prefix pass + one forward per question
    assert m.score(_frames(20), PROMPT) == pytest.approx(_expected(), rel=1e-12)
    assert len(honest.forwards) == 2 + len(QUESTIONS)
    m.score(_frames(20), PROMPT)  # checked once: the second video takes the prefix path only
    assert len(honest.forwards) == 2 + len(QUESTIONS) + 2
    with pytest.raises(vr.VisionRewardError, match="--vr-mode single"):
        _metric(checklist, StandIn(_table(), lie_with_cache=True)).score(_frames(20), PROMPT)


def test_generate_mode_calls_generate_with_the_reference_arguments(checklist):
    model = StandIn(_table())
    m = _metric(checklist, model, mode="generate")
    assert m.score(_frames(33), PROMPT) == pytest.approx(_expected(), rel=1e-12)
    assert model.generates == len(QUESTIONS) and not model.forwards


def test_prompt_is_substituted_in_every_slot(checklist):
    other = "two astronauts play chess"
    model = StandIn(_table(other))
    _metric(checklist, model, mode="prefix").score(_frames(17), other)
    assert model.asked[:len(QUESTIONS)] == _queries(other) and PROMPT not in "".join(model.asked)


def test_mp4_source_samples_the_written_video(checklist):
    pytest.importorskip("imageio_ffmpeg", reason="writing/reading mp4 needs imageio-ffmpeg")
    video, idx = vr.sample_video(_frames(105), 16, "mp4")
    assert idx == [0, 16, 32, 48, 64, 80, 96] and video.shape[:2] == (3, 7) and video.dtype == torch.uint8
    # H.264 is lossy: each sampled frame is close to its index value
    assert (video.float().mean(dim=(0, 2, 3)) - torch.tensor(idx, dtype=torch.float32)).abs().max() < 3


def test_local_folder_only(tmp_path, monkeypatch):
    with pytest.raises(vr.VisionRewardError, match="hub ids"):
        vr.check_model_folder("THUDM/VisionReward-Video")
    f = tmp_path / "VisionReward-Video"
    f.mkdir()
    (f / "config.json").write_text(json.dumps({"auto_map": {
        "AutoModelForCausalLM": "THUDM/cogvlm2-video-llama3-chat--modeling_cogvlm.CogVLMVideoForCausalLM"}}))
    with pytest.raises(vr.VisionRewardError, match="another repository"):
        vr.check_model_folder(f)
    (f / "config.json").write_text(json.dumps({"auto_map": {"AutoModelForCausalLM": "modeling_cogvlm.X"}}))
    with pytest.raises(vr.VisionRewardError, match="modeling_cogvlm.py"):
        vr.check_model_folder(f)
    (f / "modeling_cogvlm.py").write_text("")
    with pytest.raises(vr.VisionRewardError, match="has no weights.*; .* has no tokenizer"):  # both named at once
        vr.check_model_folder(f)
    (f / "model.safetensors").write_bytes(b"")
    (f / "tokenizer.json").write_text("{}")
    assert vr.check_model_folder(f) == f
    calls = []

    class Auto:
        @staticmethod
        def from_pretrained(path, **kw):
            calls.append((path, kw))
            return SimpleNamespace(eval=lambda: SimpleNamespace(to=lambda d: "model"))

    import transformers

    monkeypatch.setattr(transformers, "AutoModelForCausalLM", Auto)
    monkeypatch.setattr(transformers, "AutoTokenizer", Auto)
    assert vr.load_model(f, "cpu", torch.float32)[0] == "model"
    assert [p for p, _ in calls] == [str(f), str(f)]
    assert all(kw["trust_remote_code"] is True and kw["local_files_only"] is True for _, kw in calls)


def test_memory_estimate_counts_each_part():
    g = vr.LMGeometry(layers=32, hidden=4096, heads=32, kv_heads=8, vocab=128256)  # Llama-3-8B's geometry
    est = vr.estimate_gpu_bytes(10, g, prefix_tokens=470, suffix_tokens=50, rows=29)
    per_token = 32 * 2 * 8 * 128 * 2
    assert est["prefix_kv"] == 470 * per_token and est["suffix_kv"] == 29 * 520 * per_token
    assert est["logits"] == 29 * 50 * 128256 * 4
    assert est["total"] == sum(v for k, v in est.items() if k != "total")


def test_real_checklist_when_a_checkout_is_given():
    """With VISIONREWARD_DIR pointing at a checkout of THUDM/VisionReward: 29 questions, 29 weights."""
    import os

    d = os.environ.get("VISIONREWARD_DIR")
    if not d:
        pytest.skip("VISIONREWARD_DIR not set (a local checkout of THUDM/VisionReward)")
    c = vr.read_checklist(d)
    assert len(c.questions) == len(c.weights) == 29
    assert sum(PROMPT in q for q in c.queries(PROMPT)) == 3
