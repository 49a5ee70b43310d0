"""Cancel latency inside long model operations, before vs after in-call interrupt checks (issue 11).

    .venv/bin/python bench/bench_cancel.py [--layers 4] [--latent 30x52] [--vae-size 240x416]

A timer thread requests Cancel `--at` of the way through one long call; latency = time from the request to the
call giving control back. "before": the host is asked only between model calls (the call runs to its end, as the
engine did before interrupt= existed); "after": interrupt= is passed, so the call stops at the next transformer
layer / decoder block. Calls: a DiT forward at the real 1.3B widths (random weights, few layers) on one 3-frame
block, and the real Wan 2.1 VAE decoding one 3-latent-frame block, both in fp32 on the CPU.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import threading
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sdvg_core.demo.tiny import random_vae  # noqa: E402
from sdvg_core.engine.report import compile_backend  # noqa: E402
from sdvg_core.demo.cli_args import add_compile_arg  # noqa: E402
from sdvg_core.models.wan import CausalWan, build_random_on  # noqa: E402
from sdvg_core.models.wan_config import PRESETS  # noqa: E402


class Cancelled(Exception):
    """Stands for ComfyUI's InterruptProcessingException."""


class CancelButton:
    """A flag a timer thread sets; `check` raises once it is set (the host's interrupt callback)."""

    def __init__(self):
        self.pressed_at: float | None = None

    def press(self) -> None:
        self.pressed_at = time.perf_counter()

    def check(self) -> None:
        if self.pressed_at is not None:
            raise Cancelled


def latency(call, at_s: float, in_call: bool) -> float:
    """Seconds from the Cancel request (at_s into the call) to the call returning or raising."""
    button = CancelButton()
    timer = threading.Timer(at_s, button.press)
    timer.start()
    try:
        call(button.check if in_call else None)
    except Cancelled:
        pass
    end = time.perf_counter()
    timer.cancel()
    if button.pressed_at is None:
        raise RuntimeError(f"the call ended before the Cancel request at {at_s:.2f} s; lower --at")
    return end - button.pressed_at


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--latent", default="30x52", help="DiT latent h x w per frame (30x52: 240x416 px)")
    ap.add_argument("--vae-size", default="240x416", help="pixel h x w of the VAE decode")
    ap.add_argument("--at", type=float, default=0.3, help="fraction of the call's duration when Cancel is pressed")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", default=None)
    add_compile_arg(ap)
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    out: dict = {"threads": a.threads, "torch": torch.__version__}

    cfg = dataclasses.replace(PRESETS["wan2.1-t2v-1.3b"], num_layers=a.layers)
    run = CausalWan(build_random_on(cfg, "cpu", torch.float32, seed=0), cfg, compile=a.compile)
    out.update(compiled=bool(a.compile), compile_backend=compile_backend(run))
    h, w = (int(v) for v in a.latent.split("x"))
    x = torch.randn(1, 3, cfg.in_dim, h, w)  # [B, F, C, h, w]
    text = run.encode_text(torch.randn(1, 512, cfg.text_dim))
    t = torch.full((1, 3), 937.5)

    def dit(interrupt):
        run.forward(x, t, text, interrupt=interrupt)

    vae = random_vae(3, "wan2.1-vae")
    vh, vw = (int(v) for v in a.vae_size.split("x"))
    z = torch.randn(1, vae.config.z_dim, 3, vh // 8, vw // 8)  # one 3-latent-frame block

    def decode(interrupt):
        vae.decode_stream(z, None, interrupt=interrupt)

    for name, call, what in (("dit", dit, f"1.3B widths, {a.layers} layers, {3 * (h // 2) * (w // 2)} tokens"),
                             ("vae", decode, f"real Wan 2.1 VAE, 3 latent frames at {vw}x{vh} px")):
        t0 = time.perf_counter()
        call(None)
        full = time.perf_counter() - t0
        at = a.at * full
        before, after = latency(call, at, False), latency(call, at, True)
        out[name] = {"what": what, "call_s": full, "cancel_at_s": at, "latency_before_s": before,
                     "latency_after_s": after}
        print(f"{name}: {what}: call {full:.2f} s; Cancel at {at:.2f} s -> latency before {before:.2f} s, "
              f"after {after:.3f} s", flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
