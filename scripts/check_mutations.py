"""Break the routing rule and the memo keys on purpose, one change at a time, and see which test notices.

Each mutation edits one line of sdvg_core in a private git worktree of HEAD (never the shared checkout), runs the
given tests with `-x`, records the first failing test (or "SURVIVED"), and restores the file. Every field of
every memo key (sdvg_core/derived/keys.py) is dropped from equality and hashing in turn (`field(compare=False)`),
so a new field gets checked without editing this list. A mutation whose text is no longer (exactly once) in its file,
or whose file is gone (the code moved on), is stale, and so is a test it names (its `tests`, or --tests) whose file or
test function is gone (tests moved or renamed: pytest would answer "not found" and the mutation would read as
caught): the script names every stale one and exits 1 before running any test, so an anchor that went out of date
fails the run instead of being skipped (tests/test_check_mutations.py checks every anchor against the tree on each
test run).

    .venv/bin/python scripts/check_mutations.py                   # all, markdown table on stdout
    .venv/bin/python scripts/check_mutations.py --only P1 P2 --tests tests/test_rules.py
    .venv/bin/python scripts/check_mutations.py --anchors-only    # only check that every anchor is in the tree
"""
from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parents[1]
DEFAULT_TESTS = ("tests/test_rules.py", "tests/test_memo_keys.py")
TIMEOUT_S = 1800  # one mutation's test run; a hang counts as caught (reported as "timeout")


@dataclass(frozen=True)
class Mutation:
    id: str
    file: str
    what: str
    old: str = ""
    new: str = ""
    edit: Callable[[str], str] | None = None  # for generated mutations: text -> mutated text
    tests: tuple[str, ...] = ()  # run these instead of --tests (e.g. the preprocessing tests)

    def apply(self, text: str) -> str | None:
        """The mutated text, or None when the mutation's text is not (exactly once) in the file."""
        if self.edit is not None:
            return self.edit(text)
        return text.replace(self.old, self.new) if text.count(self.old) == 1 else None


PRE = "sdvg_core/models/reward_preprocess.py"
SCHED, VAE, VIDEO_IN, FIT, VIDEOS, DRIVER = ("sdvg_core/sampling/timesteps.py", "sdvg_core/models/vae.py",
                                             "sdvg_core/given/encode.py", "sdvg_core/given/fit.py",
                                             "sdvg_core/given/videos.py", "tests/pixels_reference.py")
X_TESTS = ("tests/test_schedule.py", "tests/test_vae_encode.py", "tests/test_pixels_in.py",
           "tests/test_pixels_reference.py")
PRE_TESTS = ("tests/test_reward_tensor_path.py",)
KV_TESTS = ("tests/test_static_kv.py", "tests/test_kv_cache.py", "tests/test_longlive.py")
CONFIG = "sdvg_core/engine/config.py"
ROUTE_DECODER = "sdvg_core/engine/route_decoder.py"
POLICY, ENGINE, STATE, KEYS, PIXELS = ("sdvg_core/engine/policy.py", "sdvg_core/engine/engine.py",
                                       "sdvg_core/engine/state.py", "sdvg_core/derived/keys.py", "sdvg_core/engine/decoded.py")
WORK, NOISE, PROMPTS = "sdvg_core/engine/work.py", "sdvg_core/engine/noise.py", "sdvg_core/engine/prompts.py"
MEMO, TALLY, KV = "sdvg_core/derived/memo.py", "sdvg_core/derived/tally.py", "sdvg_core/models/kv_cache.py"
APPEND, REGISTRY_FILE = "sdvg_core/engine/recipes/append_cache.py", "sdvg_core/engine/recipes/__init__.py"
PIXEL_INPUT, GIVEN, KREA = ("sdvg_core/given/request.py", "sdvg_core/given/pixels.py", "sdvg_core/engine/recipes/krea.py")
STREAM, LATENTS, SOURCES, IMAGES = ("sdvg_core/given/stream.py", "sdvg_core/given/latents.py",
                                    "sdvg_core/given/sources.py", "sdvg_core/given/images.py")
REPORT, DEMO_RUN, PIXEL_ARGS, EVAL = ("sdvg_core/engine/report.py", "sdvg_core/demo/to_file.py",
                                      "sdvg_core/demo/pixel_args.py", "sdvg_eval/eval.py")
DEMO_CLI, CLI_ARGS, NODE_OUTPUTS = "sdvg_core/demo/cli.py", "sdvg_core/demo/cli_args.py", "nodes/outputs.py"
# G mutations name the one pixels-in test meant to catch each (the whole file takes minutes per mutation)
PIXEL_KEYS = ("GivenKey", "InputBlockKey", "GivenDecodeKey")  # their fields are checked against PIXEL_KEY_TESTS
PIXEL_KEY_TESTS = tuple(f"tests/test_pixels_engine.py::{t}" for t in (
    "test_given_and_input_latents_are_keyed_by_encoding_size_vae_and_decode_rule",
    "test_changing_the_given_pixels_or_the_strength_reuses_nothing",
    "test_requeue_after_moving_tau_reuses_every_block_before_the_first_flip",
    "test_every_recipe_and_mode_runs_and_the_output_begins_with_the_given_frames",
    "test_fixture_run_through_the_engine"))
ROUTE_TESTS = ("tests/test_route_decoder.py",)
# a draft's decode and scores name the routing decoder (DraftDecodeKey.vae): with the VAE routing that identity is in
# the draft's BlockKey too, so only a run on a routing decoder of its own tells a dropped field
ROUTE_KEYS = ("DraftDecodeKey", "ScoreKey")
ROUTE_KEY_TESTS = (*DEFAULT_TESTS, *ROUTE_TESTS)
# what the accounting mutations are checked against: fresh-run costs, reuse and carry-over, re-queues
ACCOUNT_TESTS = (
    "tests/test_memo.py", "tests/test_engine.py", "tests/test_run_scope.py", "tests/test_memo_keys.py")

MUTATIONS = [
    # the SDVG rule (policy.py)
    Mutation("P1", POLICY, "accept on score > tau instead of >=", "score >= self.tau", "score > self.tau"),
    Mutation("P2", POLICY, "aggregate('min') returns the mean", "return min(frame_scores)",
             "return sum(frame_scores) / len(frame_scores)"),
    Mutation("P3", POLICY, "ThresholdPolicy aggregates by mean by default",
             'tau: float = DEFAULT_TAU\n    aggregation: Aggregation = "min"',
             'tau: float = DEFAULT_TAU\n    aggregation: Aggregation = "mean"'),
    Mutation("P4", POLICY, "aggregate('mean') divides by n - 1", "sum(frame_scores) / len(frame_scores)",
             "sum(frame_scores) / (len(frame_scores) - 1)"),
    Mutation("P5", POLICY, "ThresholdPolicy: block 0 no longer forced",
             "return (self.force_reject_first and block == 0) or self.tau == math.inf", "return self.tau == math.inf"),
    Mutation("P6", POLICY, "ThresholdPolicy: tau = +inf no longer forces every block",
             "return (self.force_reject_first and block == 0) or self.tau == math.inf",
             "return self.force_reject_first and block == 0"),
    Mutation("P7", POLICY, "ThresholdPolicy: force_reject_first ignored (always forces block 0)",
             "return (self.force_reject_first and block == 0) or self.tau == math.inf",
             "return block == 0 or self.tau == math.inf"),
    Mutation("P8", POLICY, "ThresholdPolicy: force_reject_first defaults to False",
             'aggregation: Aggregation = "min"\n    force_reject_first: bool = True\n\n    def __post_init__(self):\n        if isinstance(self.tau',
             'aggregation: Aggregation = "min"\n    force_reject_first: bool = False\n\n    def __post_init__(self):\n        if isinstance(self.tau'),
    Mutation("P9", POLICY, "ThresholdPolicy: tau = -inf still asks for a score",
             "return not self.forced(block) and self.tau != -math.inf", "return not self.forced(block)"),
    Mutation("P10", POLICY, "ThresholdPolicy: forced blocks ask for a score",
             "return not self.forced(block) and self.tau != -math.inf", "return self.tau != -math.inf"),
    Mutation("P11", POLICY, "ThresholdPolicy.accept: forced check dropped",
             "        if self.forced(block):\n            return False\n        if self.tau == -math.inf:",
             "        if False:\n            return False\n        if self.tau == -math.inf:"),
    Mutation("P12", POLICY, "ThresholdPolicy.accept: tau = -inf branch dropped",
             "        if self.tau == -math.inf:\n            return True", "        if False:\n            return True"),
    Mutation("P13", POLICY, "ThresholdPolicy.accept: no score counts as accepted",
             "return score is not None and score >= self.tau", "return score is None or score >= self.tau"),
    Mutation("P14", POLICY, "TargetOnly no longer forces", '        return "target-only"\n\n    def forced(self, block: int) -> bool:\n        return True',
             '        return "target-only"\n\n    def forced(self, block: int) -> bool:\n        return False'),
    Mutation("P15", POLICY, "DraftOnly forces block 0 even without force_reject_first",
             '" (block 0 from the target)" if self.force_reject_first else "")\n\n    def forced(self, block: int) -> bool:\n        return self.force_reject_first and block == 0',
             '" (block 0 from the target)" if self.force_reject_first else "")\n\n    def forced(self, block: int) -> bool:\n        return block == 0'),
    Mutation("P16", POLICY, "DraftOnly accepts forced blocks", "        return not self.forced(block)\n",
             "        return True\n"),
    Mutation("P17", POLICY, "RandomPolicy: < rate becomes <= rate", "random() < self.accept_rate",
             "random() <= self.accept_rate"),
    Mutation("P18", POLICY, "RandomPolicy ignores its seed", 'random.Random(f"{self.seed}:{block}")',
             'random.Random(f"{block}")'),
    Mutation("P19", POLICY, "RandomPolicy: block 0 never forced",
             'return f"random accept {self.accept_rate:.0%} (seed {self.seed})"\n\n    def forced(self, block: int) -> bool:\n        return self.force_reject_first and block == 0',
             'return f"random accept {self.accept_rate:.0%} (seed {self.seed})"\n\n    def forced(self, block: int) -> bool:\n        return False'),
    Mutation("P20", POLICY, "FixedPattern forces block 0 even when it is accepted",
             "return block == 0 and not self.decisions[0]", "return block == 0"),
    Mutation("P21", POLICY, "FixedPattern: score_drafts ignored", "return self.score_drafts and not self.forced(block)",
             "return not self.forced(block)"),
    Mutation("P22", POLICY, "StridePolicy: block 0 no longer the target's", "        return block % self.k == 0\n",
             "        return block % self.k == 0 and block > 0\n", tests=("tests/test_stride.py",)),
    Mutation("P23", POLICY, "StridePolicy: target blocks shifted by one", "        return block % self.k == 0\n",
             "        return (block + 1) % self.k == 0\n", tests=("tests/test_stride.py",)),
    Mutation("P24", POLICY, "StridePolicy asks for scores", "        return False\n\n    def accept(self, block: int, "
             "score: float | None) -> bool:\n        return block % self.k != 0",
             "        return True\n\n    def accept(self, block: int, score: float | None) -> bool:\n        return "
             "block % self.k != 0", tests=("tests/test_stride.py",)),
    Mutation("P25", POLICY, "StridePolicy: target blocks drafted first (not forced)",
             "        return block % self.k == 0\n", "        return False\n", tests=("tests/test_stride.py",)),
    # what a routing step computes (work.py: the engine's lazy work and the reference's) and Engine.route
    Mutation("E1", WORK, "route drafts forced blocks in lazy mode",
             "        if policy.forced(b):\n            return BlockWork(draft=False, score=False, target_context=False)\n",
             "        if False:\n            return BlockWork(draft=False, score=False, target_context=False)\n"),
    Mutation("E2", WORK, "lazy=False no longer drafts forced blocks",
             "draft = has_drafter or not policy.forced(b)", "draft = not policy.forced(b)"),
    Mutation("E3", WORK, "route ignores policy.needs_score",
             "return BlockWork(draft=True, score=policy.needs_score(b), target_context=False)",
             "return BlockWork(draft=True, score=False, target_context=False)"),
    Mutation("E4", WORK, "lazy=False no longer scores every draft",
             "score=draft and (policy.needs_score(b) or has_scorer)", "score=draft and policy.needs_score(b)"),
    Mutation("E5", WORK, "route scores every draft (score-blind policies too)",
             "return BlockWork(draft=True, score=policy.needs_score(b), target_context=False)",
             "return BlockWork(draft=True, score=True, target_context=False)"),
    Mutation("E6", ENGINE, "route accepts forced blocks the policy would accept",
             "accepted = (not forced) and policy.accept(b, score)", "accepted = policy.accept(b, score)"),
    Mutation("E7", ENGINE, "route aggregates by min whatever the policy says",
             "aggregate(p.frame_scores, policy.aggregation)", 'aggregate(p.frame_scores, "min")'),
    Mutation("E8", WORK, "lazy engine rebuilds the target context every block",
             "return BlockWork(draft=True, score=policy.needs_score(b), target_context=False)",
             "return BlockWork(draft=True, score=policy.needs_score(b), target_context=b > 0 and target_rebuilds)"),
    # (no mutation for "lazy=False also builds block 0's target context": Krea's block-0 context is an empty cache with
    # no forward, and the other recipes build none ahead, so that change is equivalent: nothing observable moves)
    Mutation("E10", WORK, "lazy=False no longer rebuilds the target context every block",
             "target_context=b > 0 and target_rebuilds)", "target_context=False)"),
    Mutation("E11", ENGINE, "an accepted draft is decoded again at commit",
             "if accepted and p.frames is not None else None", "if False else None"),
    Mutation("E12", ENGINE, "a rejected draft's decode is committed", "if accepted and p.frames is not None else None",
             "if p.frames is not None else None"),
    Mutation("E13", ENGINE, "forced blocks recorded as rejected", 'decision = "forced" if forced else "rejected"',
             'decision = "rejected"'),
    Mutation("E14", NOISE, "a custom noise function's key is ignored (shares the seeded noise's entries)",
             "    if isinstance(key, str) and key:\n        return key",
             '    if isinstance(key, str) and key:\n        return "seeded"'),
    Mutation("M1", CONFIG, "per-role recipes ignored (both roles run `recipe`)",
             "return own if own is not None else self.recipe", "return self.recipe"),
    Mutation("M2", CONFIG, "per-role recipes swapped",
             'own = self.drafter_recipe if role == "drafter" else self.target_recipe',
             'own = self.target_recipe if role == "drafter" else self.drafter_recipe'),
    # lineage and prompt identity (state.py)
    Mutation("L1", STATE, "root lineage without the seed", "|seed{self.seed}", ""),
    Mutation("L2", STATE, "root lineage without the prompt", 'base = f"{self.prompt.key}|{self.width}', 'base = f"|{self.width}'),
    Mutation("L3", STATE, "root lineage without the size", "|{self.width}x{self.height}", ""),
    Mutation("L4", STATE, "root lineage without the block count and length", "|{self.num_blocks}x{self.frames_per_block}", ""),
    Mutation("L5", STATE, "lineage without the producer", "return tensor_digest(latents, parent, producer, prompt_key)",
             "return tensor_digest(latents, parent, prompt_key)"),
    Mutation("L6", STATE, "lineage without the parent", "return tensor_digest(latents, parent, producer, prompt_key)",
             "return tensor_digest(latents, producer, prompt_key)"),
    Mutation("L7", STATE, "lineage without the block's latents",
             "return tensor_digest(latents, parent, producer, prompt_key)",
             "return tensor_digest(latents[..., :0], parent, producer, prompt_key)"),
    Mutation("L10", STATE, "lineage without the block's prompt",
             "return tensor_digest(latents, parent, producer, prompt_key)", "return tensor_digest(latents, parent, producer)"),
    Mutation("L8", PROMPTS, "prompt key without the text", "tensor_digest(embeddings, text)", "tensor_digest(embeddings)"),
    Mutation("L9", PROMPTS, "prompt key without the embeddings", "tensor_digest(embeddings, text)",
             "tensor_digest(embeddings[..., :0], text)"),
    Mutation("K0", PIXELS, "decoder caches stored under the pixels' key (PixelsKey for both)",
             "return DecoderCacheKey(self.vae_key, self.rule, lineage)", "return PixelsKey(self.vae_key, self.rule, lineage)"),
    # the one owner of memo entries and accounting (memo.Memoiser, tally.Account), the instrumentation seams
    Mutation("A1", MEMO, "credit-once dropped: a reused entry is credited every time it is looked up",
             "        if key not in tally.counted:\n            tally.counted.add(key)\n            tally.credit(entry.cost)",
             "        if True:\n            tally.counted.add(key)\n            tally.credit(entry.cost)", tests=ACCOUNT_TESTS),
    Mutation("A2", MEMO, "a result the operation computed is not marked counted (credited again when reused)",
             "        if tally is not None:\n            tally.counted.add(key)\n        return value",
             "        return value", tests=ACCOUNT_TESTS),
    Mutation("A3", TALLY, "Account + drops the second account's cost", "self.work + other.work, self.cost + other.cost,",
             "self.work + other.work, self.cost,", tests=ACCOUNT_TESTS),
    Mutation("A4", TALLY, "Account + drops the second account's carried labels",
             "self.reused + other.reused, self.carried + other.carried)", "self.reused + other.reused, self.carried)",
             tests=ACCOUNT_TESTS),
    Mutation("A5", MEMO, "entries stored without the run id (reuse within a run counts as carried over)",
             'tally.run_id if tally is not None else "")', '"")', tests=ACCOUNT_TESTS),
    Mutation("A6", TALLY, "reuse of an earlier execution's result not marked carried",
             "if origin != self.run_id or not origin:", "if not origin:", tests=ACCOUNT_TESTS),
    Mutation("A7", MEMO, "a memoised result stored without its cost (a reuse credits nothing)",
             "Entry(value, {k: n for k, n in (cost or {}).items() if n})", "Entry(value, {})", tests=ACCOUNT_TESTS),
    Mutation("A8", MEMO, "links rebuilt before a lost view count as the block's cost",
             "(tally.add if k >= fresh_from else tally.rebuilt)(name, n)", "tally.add(name, n)",
             tests=("tests/test_memo.py", "tests/test_longlive.py")),
    Mutation("A9", MEMO, "a lost view's cost is not credited to the block it served",
             "if lost is not None and lost[0] == b and b > 0:", "if False:",
             tests=("tests/test_memo.py", "tests/test_longlive.py")),
    Mutation("A10", TALLY, "a memoised computation's work not added to the operation",
             "            self.work[k] = self.work.get(k, 0) + v\n        self.credit(part.cost)",
             "            pass\n        self.credit(part.cost)", tests=ACCOUNT_TESTS),
    Mutation("A11", MEMO, "the memo's sizer ignored (entries charged their tensor bytes)",
             "size = self.sizer(key, value)", "size = nbytes_of(value)", tests=("tests/test_run_scope.py",)),
    Mutation("A12", KV, "forks of a cache not counted (the copy counter not passed to a fork's buffer)",
             "self.tokens_per_frame, self.sink_frames, self.rope, self.copies)",
             "self.tokens_per_frame, self.sink_frames, self.rope, None)", tests=("tests/test_kv_cache.py",)),
    # one schedule shape, one append-cache implementation, one registry, no import circles
    Mutation("S1", PROMPTS, "a schedule whose first blocks repeat is accepted",
             "if cur.first_block <= prev.first_block:", "if cur.first_block < prev.first_block:",
             tests=("tests/test_prompt_schedule.py",)),
    Mutation("S2", APPEND, "LongLive's global sink ignored at a recache",
             "keep_sink=self.rule().keep_sink and first > 0", "keep_sink=False", tests=("tests/test_longlive.py",)),
    Mutation("S3", REGISTRY_FILE, "dashed recipe names no longer read", 'REGISTRY.get(base.replace("-", "_"))',
             "REGISTRY.get(base)", tests=("tests/test_longlive.py", "tests/test_demo.py")),
    Mutation("S4", "sdvg_core/io/lora.py", "lora.py reads files through checkpoint.py again (an import circle)",
             "from .tensor_file import LORA_ENTRY, file_identity, read_state_dict",
             "from .checkpoint import LORA_ENTRY, file_identity, read_state_dict", tests=("tests/test_layers.py",)),
    # ImageReward's tensor preprocessing path (must equal Pillow bit for bit)
    Mutation("R1", PRE, "no rounding half before the shift", "acc.add_(1 << (_PIL_PRECISION_BITS - 1))", "acc.add_(0)",
             tests=PRE_TESTS),
    Mutation("R2", PRE, "weights rounded with Python round()", "int(-0.5 + w * one) if w < 0 else int(0.5 + w * one)",
             "round(w * one)", tests=PRE_TESTS),
    Mutation("R3", PRE, "no uint8 clip between the passes", ".bitwise_right_shift_(_PIL_PRECISION_BITS).clamp_(0, int(_U8_MAX))",
             ".bitwise_right_shift_(_PIL_PRECISION_BITS)", tests=PRE_TESTS),
    Mutation("R4", PRE, "horizontal resize skipped (columns only cropped)",
             "    if new_w != width:  # Pillow: horizontal pass first", "    if False:  # Pillow: horizontal pass first",
             tests=PRE_TESTS),
    Mutation("R5", PRE, "weights not normalised to sum 1", "        if ww != 0.0:\n            k = [w / ww for w in k]",
             "        if False:\n            k = [w / ww for w in k]", tests=PRE_TESTS),
    Mutation("R6", PRE, "bicubic a = -0.75 (torch's non-antialiased kernel)", "_PIL_BICUBIC_A = -0.5", "_PIL_BICUBIC_A = -0.75",
             tests=PRE_TESTS),
    Mutation("R7", PRE, "support not widened when shrinking", "support = _PIL_BICUBIC_SUPPORT * filterscale",
             "support = _PIL_BICUBIC_SUPPORT", tests=PRE_TESTS),
    # pixels in (issue 26): the VAE encoder, the strength schedules, the fit rule, the reference procedures
    Mutation("X1", SCHED, "v2v noise level a = the strength (from the plan's name) instead of t0 / 1000",
             "return torch.tensor(plan.timesteps[0], dtype=torch.float32) / NUM_TRAIN_TIMESTEPS",
             'return torch.tensor(float(plan.name.rpartition("_s")[2]), dtype=torch.float32)', tests=X_TESTS),
    Mutation("X2", VAE, "encoder chunks of 5 pixel frames instead of 4",
             "size = 1 if consumed == 0 else self.config.temporal_compression",
             "size = 1 if consumed == 0 else self.config.temporal_compression + 1", tests=X_TESTS),
    Mutation("X3", VAE, "frames short of a chunk dropped between calls instead of kept pending",
             "pending = rest.clone(memory_format=torch.contiguous_format) if rest.shape[2] else None",
             "pending = None", tests=X_TESTS),
    Mutation("X4", VAE, "encode_chunks reads the whole video before encoding", "for piece in chunks:",
             "for piece in list(chunks):", tests=X_TESTS),
    Mutation("X5", VIDEO_IN, "start image repeated ctx * 4 times instead of 1 + (ctx - 1) * 4",
             "return 1 + (context_frames - 1) * temporal_compression",
             "return context_frames * temporal_compression", tests=X_TESTS),
    Mutation("X6", VIDEO_IN, "clip never resized to the run's size", "if tuple(frames.shape[-2:]) == target:",
             "if True:", tests=X_TESTS),
    Mutation("X7", SCHED, "Self-Forcing v2v starts at the step before the strength's (noisier than asked)",
             "kept = tuple(n for n in SELF_FORCING_NOMINAL if n <= start)",
             "kept = tuple(n for n in SELF_FORCING_NOMINAL if n < start + 250)", tests=X_TESTS),
    Mutation("X8", SCHED, "Krea v2v plan keeps the text-to-video name (two strengths share memo entries)",
             "return plan if strength == 1.0 else replace(plan, name=f\"{plan.name}_s{strength:g}\")",
             "return plan", tests=X_TESTS),
    Mutation("X9", FIT, "crop offsets floored instead of rounded",
             "y = round((h - h * (src_aspect / run_aspect)) / 2)", "y = int((h - h * (src_aspect / run_aspect)) / 2)",
             tests=X_TESTS),
    Mutation("X10", FIT, "exactly half cropped is refused", "if lost > MAX_CROPPED_FRACTION:",
             "if lost >= MAX_CROPPED_FRACTION:", tests=X_TESTS),
    Mutation("X11", VIDEOS, "rotation turned the wrong way",
             'return round(getattr(frame, "rotation", 0) / 90) % 4',
             'return -round(getattr(frame, "rotation", 0) / 90) % 4', tests=X_TESTS),
    Mutation("X12", VIDEOS, "resampling takes the newest frame instead of the nearest",
             "while start + n * step <= (prev[0] + t) / 2:", "while start + n * step < t:", tests=X_TESTS),
    Mutation("X13", FIT, "no centre crop (the whole picture squeezed to the run's size)",
             "x = x[:, :, top:top + h, left:left + w]", "top, left = 0, 0", tests=X_TESTS),
    # the reference procedures the driver pins (tests/pixels_reference.py): the fixture must notice each
    Mutation("D1", DRIVER, "Krea anchor from the newest decoded frame instead of the oldest of 9",
             "frame = self.history[0]", "frame = self.history[-1]", tests=X_TESTS),
    Mutation("D2", DRIVER, "SF blocks after given latents start their RoPE at 3b (not shifted)",
             "start = n + F * b", "start = F * b", tests=X_TESTS),
    Mutation("D3", DRIVER, "Krea v2v runs the full text-to-video schedule",
             'self.plan = krea_strength_plan(self.run["strength"])', "self.plan = krea_strength_plan(1.0)",
             tests=X_TESTS),
    Mutation("D4", DRIVER, "Krea start frame: the first block at RoPE 0-2 after the rebuild",
             "rope_start = min(self.current_start, self.ctx)", "rope_start = 0", tests=X_TESTS),
    Mutation("D5", DRIVER, "webcam: each block encoded with a fresh encoder cache",
             "self.vae.encode_stream(self._clip(*stream_frames), self.encoder_cache)",
             "self.vae.encode_stream(self._clip(*stream_frames), None)", tests=X_TESTS),
    # pixels in through the engine, CLI and evaluation (issue 26 items 2-5; docs/pixels.md)
    Mutation("G1", STATE, "the root lineage ignores the given pixels (a new image reuses the old video)",
             'return base if self.pixels is None else f"{base}|pixels:{self.pixels.identity()}"', "return base",
             tests=("tests/test_pixels_engine.py::test_changing_the_given_pixels_or_the_strength_reuses_nothing",)),
    Mutation("G2", PIXEL_INPUT, "the pixels' identity leaves out the strength",
             'return f"{self.mode}|s{self.strength!r}|{self.digest}"', 'return f"{self.mode}|{self.digest}"',
             tests=("tests/test_pixels_engine.py::test_digest_names_the_pixels_not_the_object",)),
    Mutation("G3", GIVEN, "a video-to-video block starts from pure noise instead of its noised input",
             "return noise_input(self.inputs.block(state, b, part).to(initial.device), initial, plan)",
             "return initial", tests=("tests/test_pixels_engine.py::test_video_to_video_blocks_start_from_the_noised_input_at_the_strength",)),
    Mutation("G4", GIVEN, "video-to-video runs the text-to-video plan, not the strength's",
             "return recipe.strength_plan(spec.pixels.strength)", "return recipe.plan", tests=("tests/test_pixels_engine.py::test_video_to_video_blocks_start_from_the_noised_input_at_the_strength",)),
    Mutation("G5", APPEND, "SF/LongLive blocks after given latents keep RoPE 3b (not shifted by g)",
             "prefix=prefix if g else None), g + spec.frames_before(b)", "prefix=prefix if g else None), spec.frames_before(b)", tests=("tests/test_pixels_engine.py::test_fixture_run_through_the_engine",)),
    Mutation("BS1", APPEND, "a short last block committed as a whole block's frames",
             "s, n = spec.block_start(k), spec.block_frames(k)", "s, n = spec.block_start(k), F",
             tests=("tests/test_block_sizes.py::test_the_committed_view_past_a_short_last_block_holds_the_video_and_nothing_more",)),
    Mutation("BS2", APPEND, "the committed view past a short last block ends at whole blocks (9, not 7)",
             "prefix=prefix if g else None), g + spec.frames_before(b)", "prefix=prefix if g else None), g + spec.block_start(b)",
             tests=("tests/test_block_sizes.py::test_the_committed_view_past_a_short_last_block_holds_the_video_and_nothing_more",)),
    Mutation("G6", APPEND, "the given latents never enter the SF/LongLive cache (no prefix calls)",
             "prefix=prefix if g else None)", "prefix=None)", tests=("tests/test_pixels_engine.py::test_fixture_run_through_the_engine",)),
    Mutation("G7", KREA, "Krea block 0 ignores the start image (no rebuild from the given latents)",
             "if b == 0 and given is None:", "if b == 0:", tests=("tests/test_pixels_engine.py::test_fixture_run_through_the_engine",)),
    Mutation("G8", STREAM, "each input block encoded with a fresh encoder cache (not one causal stream)",
             "None if prev is None else prev.cache", "None", tests=("tests/test_pixels_engine.py::test_fixture_run_through_the_engine",)),
    Mutation("G9", STREAM, "an input that ends inside a block is not noticed (the run does not stop there)",
             "if frames is None or frames.shape[2] < n:", "if frames is None:", tests=("tests/test_pixels_engine.py::test_video_to_video_reads_the_input_as_the_run_goes_and_stops_where_it_ends",)),
    Mutation("G10", LATENTS, "an extension taken from the video's first frames, not its last whole blocks",
             "return total_frames - used, used", "return 0, used", tests=("tests/test_pixels_engine.py::test_self_forcing_extends_from_the_last_whole_blocks_of_the_video",)),
    Mutation("G11", ENGINE, "the output leaves out the given frames",
             "        if first == 0:\n            for pixels in given_output(", "        if False:\n            for pixels in given_output(", tests=("tests/test_pixels_engine.py::test_every_recipe_and_mode_runs_and_the_output_begins_with_the_given_frames",)),
    Mutation("G12", GIVEN, "the stop for a short input is not reported (a v2v run carries on)",
             "        if entry is not None and entry.latents is not None:\n            return state",
             "        if True:\n            return state", tests=("tests/test_pixels_engine.py::test_video_to_video_reads_the_input_as_the_run_goes_and_stops_where_it_ends",)),
    Mutation("G13", REPORT, "the report drops the pixels entry",
             "pixels=None if state.spec.pixels is None else state.spec.pixels.report(state.given_frames),",
             "pixels=None,", tests=("tests/test_pixels_engine.py::test_every_recipe_and_mode_runs_and_the_output_begins_with_the_given_frames",)),
    Mutation("G14", DEMO_RUN, "the demo's video does not begin with the given frames",
             "for piece in eng.output_frames(st, st.next_block - 1):",
             "for piece in [eng.block_frames(st, st.next_block - 1)]:", tests=("tests/test_pixels_cli.py::test_each_pixel_mode_runs_end_to_end_on_the_tiny_default",)),
    Mutation("G15", SCHED, "a strength up to 1.5 passes (the one range rule: preflight, nodes, engine)",
             "if not 0.0 <= float(strength) <= 1.0:", "if not 0.0 <= float(strength) <= 1.5:", tests=("tests/test_pixels_cli.py::test_unusable_pixel_input_is_refused_before_any_model_loads",)),
    Mutation("G16", PIXEL_ARGS, "two pixel modes at once pass preflight",
             "if len(given) > 1:", "if len(given) > 2:", tests=("tests/test_pixels_cli.py::test_unusable_pixel_input_is_refused_before_any_model_loads",)),
    Mutation("G17", PIXEL_INPUT, "an extension shorter than a block passes preflight (PixelInput.check_run)",
             "        if have is not None and have < need:", "        if False:", tests=("tests/test_pixels_cli.py::test_unusable_pixel_input_is_refused_before_any_model_loads",)),
    Mutation("G18", EVAL, "prompt rows' pixels are not checked before the sweep",
             "return _pixel_row_problems(a, prompts)", "return []", tests=("tests/test_eval_pixels.py",)),    # pixels in, second pass (issue 31): users' real files, SIGTERM, the nodes' counts, per-block input time
    Mutation("I1", SOURCES, "a video's frames are not resampled to the run's 16 fps (time not kept)",
             "    return None if keep_frames else RUN_FPS\n", "    return None\n",
             tests=("tests/test_pixels_in.py::test_a_30_fps_and_a_variable_rate_clip_keep_their_duration_on_the_runs_clock",
                    "tests/test_pixels_cli.py::test_a_30_fps_input_video_keeps_its_duration")),
    Mutation("I2", IMAGES, "transparency not composited: the colour stored under alpha 0 shows",
             "    if img.mode in ALPHA_MODES:\n        img = img.convert(ALPHA_MODES[img.mode])",
             "    if False:\n        img = img.convert(ALPHA_MODES[img.mode])",
             tests=("tests/test_pixels_in.py::test_transparent_pixels_are_composited_over_white_never_the_colour_under_them",)),
    Mutation("I3", IMAGES, "16-bit pictures clipped at 255 instead of scaled by their range",
             "SIXTEEN_BIT_STEP = 257", "SIXTEEN_BIT_STEP = 1",
             tests=("tests/test_pixels_in.py::test_sixteen_bit_and_other_modes_are_read_by_their_value_range",)),
    Mutation("I4", STREAM, "a frame that cannot be decoded mid-run escapes as an exception (a traceback, no report)",
             "                except InputUnreadable as e:\n                    self.error = e",
             "                except ZeroDivisionError as e:\n                    self.error = e",
             tests=("tests/test_pixels_cli.py::test_a_frame_that_cannot_be_decoded_mid_run_ends_the_run_like_an_input_that_runs_out",)),
    Mutation("I5", SOURCES, "no up-front check of a file cut short before the frames the run reads",
             "        check_readable_until(self.info, needs, self.what)",
             "        pass",
             tests=("tests/test_pixels_cli.py::test_a_file_cut_short_is_refused_before_any_model_loads",)),
    Mutation("I6", CLI_ARGS, "SIGTERM left to its default (exit -15, no report, the mp4 finished after the exit)",
             "STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, *", "STOP_SIGNALS = (signal.SIGINT, *",
             tests=("tests/test_demo_edges.py::test_sigterm_during_video_to_video_is_handled_as_ctrl_c_and_the_file_is_whole_when_the_process_ends",)),
    Mutation("I7", NODE_OUTPUTS, "the nodes count the target-only baseline with the text-to-video plan",
             'engine.plan_for(run.state.spec, "target").num_steps', 's.config.recipe_for("target").plan.num_steps',
             tests=("tests/test_nodes_pixels.py::test_target_only_video_to_video_counts_1x_with_the_plan_it_ran",)),
    Mutation("I8", GIVEN, "reading a block's input is timed in no block (a tally thrown away)",
             '        with tally.phase("input"):\n            entry = self.inputs.entry(state, b, tally)',
             "        entry = self.inputs.entry(state, b, Tally())",
             tests=("tests/test_pixels_engine.py::test_reading_and_encoding_the_input_is_each_blocks_input_phase",)),
    Mutation("I9", GIVEN, "Krea's restarted decoder shows block 0's first frames after given pixels",
             "RESTART_HIDDEN_FRAMES = 3", "RESTART_HIDDEN_FRAMES = 0",
             tests=("tests/test_pixels_engine.py::test_every_recipe_and_mode_runs_and_the_output_begins_with_the_given_frames",)),
    Mutation("I10", PIXEL_INPUT, "a recipe's lowest strength not asked of its plan (Self-Forcing at 0.1 passes)",
             "            recipe.strength_plan(strength)\n", "            pass\n",
             tests=("tests/test_pixels_cli.py::test_unusable_pixel_input_is_refused_before_any_model_loads",)),
    # the static-shape KV (issue 33): the span attention reads, the mask of its empty slots, where new keys go
    Mutation("C4", KV, "attention reads one frame slot short of the newest occupied one",
             "attention_span(max(phys) + 1, buf.frames)", "attention_span(max(phys), buf.frames)", tests=KV_TESTS),
    Mutation("C5", KV, "the span's empty slots are not masked (attention reads stale or zero keys)",
             "            mask.fill_(MASKED)\n", "            mask.fill_(0.0)\n", tests=KV_TESTS),
    Mutation("C6", KV, "new keys written one frame slot later than their place",
             "self.runs = [(p * tpf, (p + c) * tpf, j * tpf)", "self.runs = [((p + 1) * tpf, (p + c + 1) * tpf, j * tpf)",
             tests=KV_TESTS),
    # a committed block decoded only when something reads it (EngineConfig.decode_committed=False: the AR sampler)
    Mutation("C1", PIXELS, "decode_committed ignored: every committed block decoded at its commit",
             "        if not self.decode_on_commit:\n            return None\n", "", tests=("tests/test_lazy_decode.py",)),
    Mutation("C2", PIXELS, "a draft continues the decoder cache of the block before the last committed one",
             "        for k in range(start + 1, b + 1):", "        for k in range(start + 1, b):",
             tests=("tests/test_lazy_decode.py",)),
    # pixels in, third pass: containers as players read them, colour as a player shows it, no run loses data
    Mutation("J1", VIDEOS, "the end check wants the header's end to the millisecond (no slack for its rounding)",
             "END_SLACK_FRAMES = 0.5\nEND_SLACK_MIN = Fraction(2, 1000)", "END_SLACK_FRAMES = 0\nEND_SLACK_MIN = Fraction(0)",
             tests=("tests/test_pixels_containers.py::test_webm_and_mkv_at_film_and_recorder_rates_pass_the_end_check",)),
    Mutation("J2", VIDEOS, "the end check ignores the stream's start (an MPEG-TS at 1.4 s)",
             "    target = info.start + max(Fraction(0), need - slack)", "    target = max(Fraction(0), need - slack)",
             tests=("tests/test_pixels_containers.py::test_a_recording_whose_timestamps_start_late_passes_whole_and_is_refused_cut_short",)),
    Mutation("J18", VIDEOS, "a WebM / MKV's duration taken as a length from the stream's start (a late start refused)",
             "    return said if segment_end and said > begin else begin + said", "    return begin + said",
             tests=("tests/test_pixels_containers.py::test_a_recording_whose_timestamps_start_late_passes_whole_and_is_refused_cut_short",)),
    Mutation("J3", VIDEOS, "no packet fallback where a seek decodes nothing (one keyframe)",
             "    if found is None:\n        found = _end_of_packets(info, target)", "",
             tests=("tests/test_pixels_containers.py::test_an_mpeg_ts_whose_timestamps_start_late_with_one_keyframe_passes",)),
    Mutation("J4", VIDEOS, "the clock's count rounds up (ceil) instead of to nearest as ffmpeg's fps filter",
             "math.floor(_exact(seconds) * _exact(fps) + Fraction(1, 2))", "math.ceil(_exact(seconds) * _exact(fps))",
             tests=("tests/test_pixels_containers.py::test_frames_on_the_16_fps_clock_are_as_many_as_ffmpegs_fps_filter_makes",)),
    Mutation("J5", SOURCES, "a stream without timestamps passes the checks (a traceback after loading)",
             "        if rate is not None and not info.timestamped:", "        if False:",
             tests=("tests/test_pixels_containers.py::test_a_stream_without_timestamps_is_refused_before_loading_naming_keep_frames",
                    "tests/test_pixels_containers.py::test_a_raw_stream_read_as_it_is_keeps_every_frame")),
    Mutation("J6", PIXEL_INPUT, "the frames a mode needs taken from the header (a duration-less WebM passes)",
             "        have = count(need) if count is not None else None", "        have = None",
             tests=("tests/test_pixels_containers.py::test_a_picture_as_input_video_and_a_short_webm_without_duration_are_refused_before_loading",)),
    Mutation("J7", VIDEOS, "a picture read as a one-frame video", "    if PICTURE_DEMUXERS.fullmatch(container.format.name or \"\"):",
             "    if False:",
             tests=("tests/test_pixels_containers.py::test_a_picture_as_input_video_and_a_short_webm_without_duration_are_refused_before_loading",)),
    Mutation("J8", FIT, "the sample aspect ratio ignored by the fit rule",
             "    return (h, w) if pixel_aspect == 1.0 else (h, max(1, round(w * pixel_aspect)))", "    return (h, w)",
             tests=("tests/test_pixels_containers.py::test_non_square_pixels_are_stretched_as_a_player_shows_them",)),
    Mutation("J9", IMAGES, "an ICC profile read but not applied",
             "    rgb = _to_rgb8(_upright(decoded, kind, info.orientation), kind, transform)",
             "    rgb = _to_rgb8(_upright(decoded, kind, info.orientation), kind)",
             tests=("tests/test_pixels_colour.py::test_a_display_p3_picture_is_converted_to_srgb_and_said_once",)),
    Mutation("J10", IMAGES, "an sRGB profile converted (lcms rounding changes the pixels) and mentioned",
             "SRGB_LEVELS = 1", "SRGB_LEVELS = -1",
             tests=("tests/test_pixels_colour.py::test_an_srgb_profile_changes_nothing_and_is_not_mentioned",)),
    Mutation("J11", IMAGES, "an animated picture's first frame used without a word",
             '        if getattr(img, "is_animated", False):', "        if False:",
             tests=("tests/test_pixels_colour.py::test_an_animated_picture_uses_its_first_frame_and_says_so_once",)),
    Mutation("J12", PIXEL_ARGS, "a URL flag read as a path (\"not found\", a slash lost)",
             "    problems = flag_problems(a) or url_problems(a)", "    problems = flag_problems(a)",
             tests=("tests/test_pixels_colour.py::test_a_url_is_refused_as_a_url",)),
    Mutation("J13", "sdvg_core/demo/claim.py", "a locked claim taken as an unfinished one (two runs write one folder)",
             "            if not _lock(old):", "            if False:",
             tests=("tests/test_demo_outputs.py::test_a_folder_claimed_by_a_running_run_is_refused_even_with_overwrite",)),
    Mutation("J14", DEMO_CLI, "the video written under its final name while the run goes (an input truncated)",
             'claim.staged(f"{VIDEO_STEM}.{a.format}")', 'claim.folder / f"{VIDEO_STEM}.{a.format}"',
             tests=("tests/test_demo_outputs.py::test_extending_or_restyling_a_runs_own_output_into_its_folder_keeps_the_input",)),
    Mutation("J15", CLI_ARGS, "SIGHUP left to its default (no message, no report, an unfinished mp4)",
             "*((HANGUP,) if HANGUP is not None else ())", "*()",
             tests=("tests/test_demo_outputs.py::test_sighup_is_handled_as_sigterm",)),
    Mutation("J16", "sdvg_core/demo/terminal.py", "a print to a terminal that hung up raises (the files left unfinished)",
             "        except OSError:\n            self._lost()\n            return len(text)",
             "        except ZeroDivisionError:\n            self._lost()\n            return len(text)",
             tests=("tests/test_demo_outputs.py::test_a_closed_terminal_still_leaves_a_playable_video_and_its_report",)),
    Mutation("J17", "sdvg_core/demo/claim.py", "a load that crashed before any file leaves the folder claimed",
             "            if partial_files(self.folder):\n                self.abandon()",
             "            if True:\n                self.abandon()",
             tests=("tests/test_demo_outputs.py::test_a_crash_before_any_file_is_begun_leaves_the_folder_free",)),
    # a routing decoder of its own (engine/route_decoder.py): drafts scored on its frames, from its committed memory
    Mutation("RD1", "sdvg_core/engine/router.py", "a draft decoded by the output VAE although a routing decoder was given",
             "entry = self.decoders.route.decode_draft(", "entry = self.decoders.vae.decode_draft(", tests=ROUTE_TESTS),
    Mutation("RD2", ENGINE, "the routing decoder's committed memory advanced by a rejected draft",
             "if accepted and p.frames is not None else None", "if p.frames is not None else None",
             tests=ROUTE_TESTS),
    Mutation("RD3", ROUTE_DECODER, "an accepted draft's tiny decode not taken as its committed one (decoded again)",
             "routed = self.route.commit(state, latents, lineage, draft, tally)",
             "routed = self.route.commit(state, latents, lineage, None, tally)", tests=ROUTE_TESTS),
    Mutation("RD4", KEYS, "draft decodes and scores keyed by the VAE whatever decoder routed",
             "return self.models.get(ROUTE_ROLE, self.models[\"vae\"])", "return self.models[\"vae\"]",
             tests=ROUTE_TESTS),
    Mutation("RD5", ROUTE_DECODER, "the video decoded by the routing decoder without output_decoder 'route'",
             "self.output = self.route if routed_output else self.vae",
             "self.output = self.route", tests=ROUTE_TESTS),
    Mutation("RD6", ROUTE_DECODER, "a routing decoder's decodes counted as the VAE's",
             'role="route_", work_key="route_decode_frames"', 'role="route_", work_key="vae_decode_frames"',
             tests=ROUTE_TESTS),
    Mutation("RD7", ROUTE_DECODER, "a draft's tiny decode timed as the VAE's decode phase",
             'return "decode" if self.route is self.vae else "route_decode"', 'return "decode"',
             tests=ROUTE_TESTS),
    Mutation("RD8", ROUTE_DECODER, "the routing decoder's store shares the VAE's hold slots (its memory evicts the VAE's)",
             'role="route_", work_key=', 'role="", work_key=', tests=ROUTE_TESTS),
    Mutation("CR1", "sdvg_core/engine/calibration_run.py", "the candidate takes the reference's scores (not its own decode)",
             "cand, _ = candidate.scored(drafted)", "cand, _ = candidate.scored(ref)",
             tests=("tests/test_calibration_run.py",)),
    Mutation("CR2", "sdvg_core/engine/calibration_run.py", "the history follows the candidate's decisions",
             "state = reference.route(ref, policy)", "state = reference.route(cand, policy)",
             tests=("tests/test_calibration_run.py",)),
    Mutation("C3", "nodes/ar_sampling.py", "the AR sampler decodes every committed block (core's VAE Decode does it after)",
             "decode_committed=False)", "decode_committed=True)",
             tests=("tests/test_ar_sampler.py::test_target_only_equals_the_engine_on_cores_terms",)),
]


def key_field_mutations(keys_text: str) -> list[Mutation]:
    """One mutation per field of every frozen dataclass in keys.py: the field no longer counts in == and hash."""
    out, cls = [], None
    lines = keys_text.splitlines(keepends=True)
    for i, line in enumerate(lines):
        m = re.match(r"(class|def) (\w+)", line)
        if m:
            cls = m.group(2) if m.group(1) == "class" else None
            continue
        f = re.match(r"    (\w+): (?!ClassVar)([^=\n]+?)\s*$", line)
        if cls and f and not line.lstrip().startswith(("def ", "#", "return")):
            name, typ = f.groups()

            def edit(text: str, i=i, name=name, typ=typ) -> str | None:
                ls = text.splitlines(keepends=True)
                if i >= len(ls) or not re.match(rf"    {name}: ", ls[i]):
                    return None
                ls[i] = f"    {name}: {typ} = _field(compare=False)\n"
                out = "".join(ls)
                future = "from __future__ import annotations\n"
                return out.replace(future, future + "from dataclasses import field as _field\n", 1)

            out.append(Mutation(f"K:{cls}.{name}", KEYS, f"{cls}.{name} dropped from the key", edit=edit,
                                tests=PIXEL_KEY_TESTS if cls in PIXEL_KEYS else
                                ROUTE_KEY_TESTS if cls in ROUTE_KEYS else ()))
    return out


def all_mutations(root: Path) -> list[Mutation]:
    """The listed mutations and one per memo-key field (read from `root`'s keys.py)."""
    keys = root / KEYS
    return MUTATIONS + (key_field_mutations(keys.read_text()) if keys.is_file() else [])


def stale(mutations: list[Mutation], root: Path) -> list[str]:
    """'id: file: why' for every mutation that no longer applies to the tree at `root` (its file is gone, or its text
    is not in it exactly once, or the edit changes nothing)."""
    out = []
    for m in mutations:
        path = root / m.file
        if not path.is_file():
            out.append(f"{m.id}: {m.file}: the file is gone")
            continue
        text = path.read_text()
        mutated = m.apply(text)
        if mutated is None or mutated == text:
            what = f"{m.old[:60]!r} is {'not in it' if m.old and m.old not in text else 'not in it exactly once'}" \
                if m.edit is None else "the edit no longer applies"
            out.append(f"{m.id}: {m.file}: {what}")
    return out


def missing_tests(mutations: list[Mutation], root: Path, default_tests: tuple[str, ...] | list[str] = DEFAULT_TESTS
                  ) -> list[str]:
    """'ids: test: why' for every test a mutation would run (its own `tests`, else `default_tests`) that is not in the
    tree at `root`: a file that is gone, or a `file::name` whose test function is not defined in that file (a
    parametrised id's `[...]` is not checked, its function is)."""
    users: dict[str, list[str]] = {}
    for m in mutations:
        for test in m.tests or default_tests:
            users.setdefault(test, []).append(m.id)
    out = []
    for test, ids in users.items():
        path, _, name = test.partition("::")
        func = name.split("[")[0]
        named = ", ".join(ids[:5]) + (f" (+{len(ids) - 5} more)" if len(ids) > 5 else "")
        if not (root / path).is_file():
            out.append(f"{named}: {test}: the test file is gone")
        elif func and not re.search(rf"^\s*(?:async\s+)?def {re.escape(func)}\(", (root / path).read_text(), re.MULTILINE):
            out.append(f"{named}: {test}: no test function {func!r} in {path}")
    return out


def run_tests(worktree: Path, tests: list[str]) -> tuple[str, float]:
    t0 = time.time()
    try:
        # the private worktree lives in a temp folder: point the tests at this checkout's golden data, or every
        # fixture test would skip and its mutations "survive"
        env = {**os.environ, "SDVG_SHARED_DIR": os.environ.get("SDVG_SHARED_DIR", str(REPO.parent / "shared"))}
        r = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests], cwd=worktree,
                           capture_output=True, text=True, timeout=TIMEOUT_S, env=env)
    except subprocess.TimeoutExpired:
        return "timeout", time.time() - t0
    if r.returncode == 0:
        return "SURVIVED", time.time() - t0
    failed = re.findall(r"^(?:FAILED|ERROR) (\S+)", r.stdout, re.MULTILINE)
    return (failed[0].split("/")[-1] if failed else f"exit {r.returncode}"), time.time() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tests", nargs="+", default=list(DEFAULT_TESTS))
    ap.add_argument("--only", nargs="+", help="mutation ids (K:Class.field for key fields)")
    ap.add_argument("--rev", default="HEAD", help="the commit to mutate (default HEAD)")
    ap.add_argument("--anchors-only", action="store_true",
                    help="check that every mutation still applies to the working tree and every test it names is "
                         "there (no tests run); exit 1 if not")
    a = ap.parse_args(argv)
    if a.anchors_only:
        muts = [m for m in all_mutations(REPO) if not a.only or m.id in a.only]
        bad = stale(muts, REPO) + missing_tests(muts, REPO, a.tests)
        print("\n".join(f"stale: {b}" for b in bad) or "every mutation's text and every test it names is in the tree")
        return 1 if bad else 0
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwind: restore nothing, remove the worktree
    with tempfile.TemporaryDirectory(prefix="sdvg-mut-") as tmp:
        wt = Path(tmp) / "wt"
        subprocess.run(["git", "worktree", "add", "--detach", str(wt), a.rev], cwd=REPO, check=True, capture_output=True)
        try:
            muts = all_mutations(wt)
            if a.only:
                muts = [m for m in muts if m.id in a.only]
            bad = stale(muts, wt) + missing_tests(muts, wt, a.tests)
            if bad:  # an out-of-date anchor fails the run, before any test: never a silent skip
                print("stale mutations (update their text, or the tests they name, to the tree):\n  " + "\n  ".join(bad),
                      file=sys.stderr)
                return 1
            print("| id | mutation | file | first failing test | s |\n|---|---|---|---|---|", flush=True)
            for m in muts:
                path = wt / m.file
                original = path.read_text()
                path.write_text(m.apply(original))
                try:
                    result, secs = run_tests(wt, list(m.tests) or a.tests)
                finally:
                    path.write_text(original)
                print(f"| {m.id} | {m.what} | {m.file.removeprefix('sdvg_core/')} | {result} | {secs:.0f} |", flush=True)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(wt)], cwd=REPO, capture_output=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
