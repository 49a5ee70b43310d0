"""Units of model work: what a generation's model calls are, what each one costs, measured apart from the runs.

A `CallClass` names one kind of call with the shape that sets its cost: a DiT denoising forward or context forward
(a context forward writes the cache only and skips the last layer's attention, CausalWan.forward want_output=False)
of `frames` query latent frames against `prefix` cached frames, per role; a text encode; one decoded latent frame
(the video's first latent frame decodes to 1 pixel frame, the others to 4), by the VAE or by the tiny routing decoder
(`route_decode*`, TAEHV); one anchor encode; one scored frame.

- `CallLog` wraps the models during a run and records every call's class, units, seconds and block;
- `measure_units` times each class in isolation (micro-benchmarks: separate calls on the same models, never the
  runs' own calls), so a run's "predicted" time = its recorded calls x these unit costs is an independent check;
- `class_flops` runs each class on meta-device models (bench/scale_models.build_meta): exact FLOPs and output
  shapes at any size without memory, for the full-size projection and the GPU check's dry run.
"""
from __future__ import annotations

import statistics
import time
from collections import Counter
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterable

import torch
from torch.utils.flop_counter import FlopCounterMode

from sdvg_core.models.wan import KVCache

DIT_KINDS = ("denoise", "context")
ROUTE_DECODE_KINDS = ("route_decode_first", "route_decode")  # the tiny routing decoder's (Models.route_vae)
DECODE_KINDS = ("decode_first", "decode", *ROUTE_DECODE_KINDS)
KINDS = (*DIT_KINDS, "text", *DECODE_KINDS, "encode", "score_frame")
# Groups for shares of a block's time: the DiTs (with their context forwards apart), the VAE, the tiny routing
# decoder, the scorer.
GROUPS = {"denoise": "dit", "context": "dit context", "text": "dit", "decode_first": "decode", "decode": "decode",
          "route_decode_first": "route decode", "route_decode": "route decode", "encode": "encode",
          "score_frame": "score"}
T_DENOISE = 937.5  # a Krea / Self-Forcing denoising timestep (any value costs the same)


@dataclass(frozen=True, order=True)
class CallClass:
    """One kind of model call and the shape that sets its cost (units: calls, latent frames or scored frames)."""

    kind: str
    role: str = ""  # drafter / target for DiT calls and text encodes
    frames: int = 0  # query latent frames of a DiT call
    prefix: int = 0  # latent frames already in the KV cache a DiT call attends to

    @property
    def label(self) -> str:
        if self.kind in DIT_KINDS:
            return f"{self.role} {self.kind} {self.frames}f+{self.prefix}"
        return f"{self.role} {self.kind}" if self.role else self.kind

    @property
    def group(self) -> str:
        return GROUPS[self.kind]


# ----------------------------------------------------------------------------------------------- recording
_MISSING = object()


def _kv_frames(kv, frames: int) -> int:
    """Cached frames a DiT call of `frames` frames attends to besides its own: what the resulting view holds that
    the call did not write (a view is appended to, the oldest window frames evicted when full; a write plan such
    as a recache's rewrite says itself)."""
    if kv is None:
        return 0
    if not hasattr(kv, "plan") and hasattr(kv, "append"):
        kv = kv.append(frames)  # the plan the forward makes of a view (pure: nothing is written)
    plan = getattr(kv, "plan", None)
    if plan is not None:
        return len(plan.frame_ids) - plan.frames
    return int(getattr(kv, "frames", 0))  # an older cache view: the call attends to all of it


def prefix_view(kv, frames: int):
    """A view of an empty cache holding `frames` committed frames, made without a model call (they stay zeros: a
    call's cost and memory do not depend on the values)."""
    if frames == 0:
        return kv
    if hasattr(kv, "append"):  # the plan-based cache: an append committed without writing
        return kv.append(frames, 0).open().commit()
    view = replace(kv, length=frames * kv.tokens_per_frame)
    kv.buffer.frontier = view.length
    return view


class CallLog:
    """Wraps the model-facing callables; every call: (block, class, units, seconds), CUDA-synchronised if asked."""

    def __init__(self, sync: bool):
        self.sync = sync
        self.block = 0  # the block the engine works on (advanced by the caller at each committed block)
        self.calls: list[tuple[int, CallClass, int, float]] = []
        self._wrapped: list[tuple[Any, str, Any]] = []

    def _wrap(self, obj: Any, name: str, classify: Callable[..., list[tuple[CallClass, int]]]) -> None:
        fn = getattr(obj, name)
        self._wrapped.append((obj, name, vars(obj).get(name, _MISSING)))

        def timed(*a, **k):
            if self.sync:
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            out = fn(*a, **k)  # a call that raises (Cancel) is not recorded
            if self.sync:
                torch.cuda.synchronize()
            dt = time.perf_counter() - t0
            classes = classify(*a, **k)
            total = sum(n for _, n in classes)
            for cls, n in classes:  # a call of several classes (a first chunk) splits its time by units
                self.calls.append((self.block, cls, n, dt * n / total if total else dt))
            return out

        setattr(obj, name, timed)

    def attach(self, models) -> "CallLog":
        for role in ("drafter", "target"):
            dit = getattr(models, role)

            def dit_calls(x, t, text, *, kv=None, want_output=True, _role=role, **_):
                return [(CallClass("denoise" if want_output else "context", _role, int(x.shape[1]),
                                   _kv_frames(kv, int(x.shape[1]))), 1)]

            self._wrap(dit, "forward", dit_calls)
            self._wrap(dit, "encode_text", lambda *a, _role=role, **k: [(CallClass("text", _role), 1)])

        def decode(z, cache=None, *a, **k):
            n = int(z.shape[2])
            if cache is None or getattr(cache, "frames_consumed", 0) == 0:
                return [(CallClass("decode_first"), 1)] + ([(CallClass("decode"), n - 1)] if n > 1 else [])
            return [(CallClass("decode"), n)]

        self._wrap(models.vae, "decode_stream", decode)
        if getattr(models, "route_vae", None) is not None:
            def route_decode(z, cache=None, *a, **k):
                return [(CallClass("route_" + c.kind), n) for c, n in decode(z, cache)]

            self._wrap(models.route_vae, "decode_stream", route_decode)
        self._wrap(models.vae, "encode_anchor_frame", lambda *a, **k: [(CallClass("encode"), 1)])
        self._wrap(models.scorer, "score_frames", lambda frames, *a, **k: [(CallClass("score_frame"),
                                                                             int(frames.shape[0]))])
        return self

    def detach(self) -> None:
        """Put back what each wrapped attribute was (a class method, or an instance attribute set before)."""
        for obj, name, before in reversed(self._wrapped):
            if before is _MISSING:
                vars(obj).pop(name, None)
            else:
                setattr(obj, name, before)
        self._wrapped.clear()

    def units(self) -> Counter:
        """Units per call class over the whole run."""
        c: Counter = Counter()
        for _, cls, n, _ in self.calls:
            c[cls] += n
        return c

    def seconds(self) -> float:
        return sum(s for *_, s in self.calls)


def units_by_block(calls: Iterable[tuple[int, CallClass, int, float]], blocks: int) -> list[Counter]:
    out = [Counter() for _ in range(blocks)]
    for b, cls, n, _ in calls:
        out[min(b, blocks - 1)][cls] += n
    return out


# ----------------------------------------------------------------------------------------------- geometry
@dataclass(frozen=True)
class Geometry:
    """What a unit call needs besides the models: frame size, block length, prompt embeddings."""

    width: int
    height: int
    frames_per_block: int
    embeddings: torch.Tensor  # [1, L, text_dim] (CPU)
    prompt: str


def _latent_hw(models, g: Geometry) -> tuple[int, int]:
    f = models.vae.config.spatial_compression
    return g.height // f, g.width // f


def _device(models) -> torch.device:
    return models.target.device


class _Setup:
    """Inputs of the unit calls, built once per class (never timed)."""

    def __init__(self, models, g: Geometry):
        self.models, self.g = models, g
        self.dev = _device(models)
        self._text: dict[str, Any] = {}
        self._kv: dict[tuple, Any] = {}
        self._cache = None
        self._route_cache = None

    def text(self, role: str):
        if role not in self._text:
            self._text[role] = getattr(self.models, role).encode_text(self.g.embeddings.to(self.dev))
        return self._text[role]

    def latents(self, frames: int) -> torch.Tensor:
        h, w = _latent_hw(self.models, self.g)
        gen = torch.Generator().manual_seed(frames)
        x = torch.randn(1, frames, self.models.target.cfg.in_dim, h, w, generator=gen) \
            if self.dev.type != "meta" else torch.empty(1, frames, self.models.target.cfg.in_dim, h, w)
        return x.to(self.dev)

    def kv(self, role: str, frames: int, prefix: int):
        """A cache view holding `prefix` frames with room for `frames` more."""
        key = (role, frames, prefix)
        if key not in self._kv:
            dit = getattr(self.models, role)
            h, w = _latent_hw(self.models, self.g)
            kv = KVCache.empty(dit.cfg, batch=1, window_frames=prefix + frames,
                               tokens_per_frame=dit.cfg.tokens_per_frame(h, w), device=self.dev, dtype=dit.dtype)
            self._kv[key] = prefix_view(kv, prefix)
        return self._kv[key]

    def decoder_cache(self):
        if self._cache is None:
            z = self.latents(1).permute(0, 2, 1, 3, 4)
            self._cache = self.models.vae.decode_stream(z, None)[1]
        return self._cache

    def route_decoder_cache(self):
        """The tiny routing decoder's memory after one latent frame (what a later frame continues)."""
        if self._route_cache is None:
            z = self.latents(1).permute(0, 2, 1, 3, 4)
            self._route_cache = self.models.route_vae.decode_stream(z, None)[1]
        return self._route_cache

    def pixel_frames(self, n: int) -> torch.Tensor:
        """n decoded frames [n, H, W, 3] in 0..1 (what the engine hands the scorer)."""
        gen = torch.Generator().manual_seed(n)
        return torch.rand(n, self.g.height, self.g.width, 3, generator=gen)


def unit_call(setup: _Setup, cls: CallClass) -> tuple[Callable[[], Any], int]:
    """(a call of class `cls`, the units it does) on the models of `setup`; inputs are prepared here, untimed."""
    m, g = setup.models, setup.g
    if cls.kind in DIT_KINDS:
        dit = getattr(m, cls.role)
        kv = setup.kv(cls.role, cls.frames, cls.prefix)
        x = setup.latents(cls.frames)
        t = torch.full((1, cls.frames), T_DENOISE if cls.kind == "denoise" else 0.0)
        text = setup.text(cls.role)
        # commit=False: the same cache view serves every repeat (a context forward's cost is the same either way)
        return (lambda: dit.forward(x, t, text, frame_offset=cls.prefix, kv=kv,
                                       want_output=cls.kind == "denoise")), 1
    if cls.kind == "text":
        dit = getattr(m, cls.role)
        emb = g.embeddings.to(setup.dev)
        return (lambda: dit.encode_text(emb)), 1
    if cls.kind == "decode_first":
        z = setup.latents(1).permute(0, 2, 1, 3, 4)
        return (lambda: m.vae.decode_stream(z, None)), 1
    if cls.kind == "decode":
        z = setup.latents(1).permute(0, 2, 1, 3, 4)
        cache = setup.decoder_cache()
        return (lambda: m.vae.decode_stream(z, cache)), 1
    if cls.kind == "route_decode_first":
        z = setup.latents(1).permute(0, 2, 1, 3, 4)
        return (lambda: m.route_vae.decode_stream(z, None)), 1
    if cls.kind == "route_decode":
        z = setup.latents(1).permute(0, 2, 1, 3, 4)
        cache = setup.route_decoder_cache()
        return (lambda: m.route_vae.decode_stream(z, cache)), 1
    if cls.kind == "encode":
        frame = (torch.rand(1, 3, g.height, g.width) * 2 - 1).to(setup.dev, m.vae.dtype)  # [1, 3, H, W]
        return (lambda: m.vae.encode_anchor_frame(frame, (g.height, g.width))), 1
    if cls.kind == "score_frame":
        n = m.vae.config.pixel_frames(g.frames_per_block, includes_first=False)  # a block's frames (12)
        frames = setup.pixel_frames(n)
        return (lambda: m.scorer.score_frames(frames, g.prompt)), n
    raise ValueError(f"unknown call kind {cls.kind!r}")


# ----------------------------------------------------------------------------------------------- micro-benchmarks
@dataclass(frozen=True)
class UnitCost:
    """Seconds per unit of one class, from `n` separate timed calls."""

    min_s: float
    median_s: float
    n: int
    measured_at: CallClass  # the class timed (DiT classes between two timed prefixes are interpolated)


def _dit_plan(classes: Iterable[CallClass]) -> set[CallClass]:
    """DiT classes to time: per (kind, role, frames) every prefix when <= 3 distinct, else the smallest and largest
    (attention is linear in the cached length, so the others are interpolated)."""
    groups: dict[tuple, set[int]] = {}
    for c in classes:
        if c.kind in DIT_KINDS:
            groups.setdefault((c.kind, c.role, c.frames), set()).add(c.prefix)
    plan = set()
    for (kind, role, frames), prefixes in groups.items():
        keep = prefixes if len(prefixes) <= 3 else {min(prefixes), max(prefixes)}
        plan |= {CallClass(kind, role, frames, p) for p in keep}
    return plan


class UnitBench:
    """Micro-benchmarks of call classes, repeated over rounds: `add` the classes a run made, `rep` times each once
    (order rotated per repeat), `costs` gives min / median seconds per unit for every class added. Inputs (text K/V,
    caches) are made per `rep` and dropped after it, so nothing stays allocated while the runs are measured."""

    def __init__(self, models, geometry: Geometry, sync: bool = False):
        self.models, self.geometry = models, geometry
        self.sync = sync
        self.wanted: set[CallClass] = set()
        self.samples: dict[CallClass, list[float]] = {}
        self._reps = 0

    def add(self, classes: Iterable[CallClass]) -> None:
        self.wanted |= set(classes)

    def _timed(self) -> list[CallClass]:
        return sorted(_dit_plan(self.wanted) | {c for c in self.wanted if c.kind not in DIT_KINDS})

    def rep(self, reps: int = 1) -> None:
        timed = self._timed()
        setup = _Setup(self.models, self.geometry)
        calls = {c: unit_call(setup, c) for c in timed}
        for fn, _ in calls.values():  # warm every shape once (allocator, kernels), untimed
            fn()
        for _ in range(reps):
            k = self._reps % len(timed) if timed else 0
            for c in timed[k:] + timed[:k]:
                fn, n = calls[c]
                if self.sync:
                    torch.cuda.synchronize()
                t0 = time.perf_counter()
                fn()
                if self.sync:
                    torch.cuda.synchronize()
                self.samples.setdefault(c, []).append((time.perf_counter() - t0) / n)
            self._reps += 1

    def costs(self) -> dict[CallClass, UnitCost]:
        measured = {c: UnitCost(min(s), statistics.median(s), len(s), c) for c, s in self.samples.items() if s}
        return {c: measured.get(c) or _interpolate(c, measured) for c in self.wanted | set(measured)}


def measure_units(models, geometry: Geometry, classes: Iterable[CallClass], reps: int = 3,
                  sync: bool = False) -> dict[CallClass, UnitCost]:
    """Time every class apart from any run: `reps` interleaved repeats (order rotated), one call per class each."""
    ub = UnitBench(models, geometry, sync)
    ub.add(classes)
    ub.rep(reps)
    return ub.costs()


def _interpolate(cls: CallClass, measured: dict[CallClass, UnitCost]) -> UnitCost:
    """A DiT class between (or beyond) timed prefixes of the same kind, role and frames: linear in the prefix."""
    pts = sorted((c.prefix, u) for c, u in measured.items()
                 if (c.kind, c.role, c.frames) == (cls.kind, cls.role, cls.frames))
    if not pts:
        raise KeyError(f"no measured unit for {cls.label}")
    below = [p for p in pts if p[0] <= cls.prefix] or pts[:1]
    above = [p for p in pts if p[0] >= cls.prefix] or pts[-1:]
    (p0, u0), (p1, u1) = below[-1], above[0]
    if p0 == p1 and len(pts) > 1:  # outside the measured range: extrapolate from the nearest two
        (p0, u0), (p1, u1) = (pts[0], pts[1]) if cls.prefix < pts[0][0] else (pts[-2], pts[-1])
    w = (cls.prefix - p0) / (p1 - p0) if p1 != p0 else 0.0
    return UnitCost(u0.min_s + w * (u1.min_s - u0.min_s), u0.median_s + w * (u1.median_s - u0.median_s),
                    min(u0.n, u1.n), replace(cls, prefix=-1))


def price(units: Counter, unit_s: dict[CallClass, float]) -> float:
    """Seconds a set of calls should take: units x seconds per unit."""
    return sum(n * unit_s[c] for c, n in units.items())


def shares(units: Counter, unit_s: dict[CallClass, float]) -> dict[str, float]:
    """Share of the priced time per group (dit, dit context, decode, encode, score)."""
    total = price(units, unit_s)
    out: dict[str, float] = {}
    for c, n in units.items():
        out[c.group] = out.get(c.group, 0.0) + (n * unit_s[c] / total if total else 0.0)
    return dict(sorted(out.items()))


# ----------------------------------------------------------------------------------------------- FLOPs (meta)
@dataclass(frozen=True)
class MetaCall:
    """One class run on meta-device models: FLOPs per unit and the output shape it produced."""

    flops: float
    shape: tuple[int, ...]
    detail: str
    extrapolated: float | None = None  # a full-depth count's layer-extrapolated value (they must agree)


def class_flops(meta_models, geometry: Geometry, classes: Iterable[CallClass],
                full_depth: bool = False) -> dict[CallClass, MetaCall]:
    """FLOPs per unit of each class (torch's FlopCounterMode on meta tensors: matmuls, convs and attention) and the
    output shape of the call.

    DiT calls are counted on 1- and 2-layer copies of each DiT (same widths) and extrapolated to its depth, exactly
    (every layer costs the same; a context forward's skipped attention is in the last layer of either copy): meta
    kernels run in Python, so a full 40-layer forward costs seconds. With `full_depth`, each role's costliest
    denoising and context forward and its text encode also run on the full-depth model, as a shape check and a
    check of the extrapolation. DiT classes between timed prefixes (`_dit_plan`) are interpolated, exactly (FLOPs
    are linear in the cached length); their shape is () and their detail says so."""
    classes = set(classes)
    exact = _dit_plan(classes) | {c for c in classes if c.kind not in DIT_KINDS}
    out: dict[CallClass, MetaCall] = {}
    shallow = {k: _shallow(meta_models, k) for k in (1, 2)} if any(c.role for c in exact) else {}
    setups = {k: _Setup(m, geometry) for k, m in shallow.items()}
    full = _Setup(meta_models, geometry)
    for cls in sorted(exact):
        if cls.kind == "score_frame":  # the bare model on meta: the scorer's uint8 PIL preprocessing needs real data
            n = meta_models.vae.config.pixel_frames(geometry.frames_per_block, includes_first=False)
            res, flops, detail = _score_meta(meta_models.scorer, n)
            out[cls] = MetaCall(flops / n, _shape(res), detail)
        elif not cls.role:  # VAE calls: the real model
            out[cls] = MetaCall(*_count(full, cls), "")
        else:
            depth = getattr(meta_models, cls.role).cfg.num_layers
            (f1, _), (f2, shape) = _count(setups[1], cls), _count(setups[2], cls)
            if cls.kind == "text":  # one K/V pair per layer
                shape = (depth, *shape[1:])
            out[cls] = MetaCall(f1 + (depth - 1) * (f2 - f1), shape, f"extrapolated from 1 and 2 layers to {depth}")
    if full_depth:
        for role in {c.role for c in exact if c.role}:
            picks = [max((c for c in exact if c.role == role and c.kind == kind), key=lambda c: c.prefix, default=None)
                     for kind in (*DIT_KINDS, "text")]
            for cls in filter(None, picks):
                flops, shape = _count(full, cls)
                out[cls] = MetaCall(flops, shape, "full depth", out[cls].flops)
    for cls in classes - exact:
        pts = sorted((c.prefix, m.flops) for c, m in out.items()
                     if (c.kind, c.role, c.frames) == (cls.kind, cls.role, cls.frames))
        (p0, f0), (p1, f1) = pts[0], pts[-1]
        out[cls] = MetaCall(f0 + (cls.prefix - p0) * (f1 - f0) / (p1 - p0), (), "interpolated in the cached length")
    return out


def _count(setup: "_Setup", cls: CallClass) -> tuple[float, tuple[int, ...]]:
    fn, n = unit_call(setup, cls)
    with FlopCounterMode(display=False) as fc:
        res = fn()
    return fc.get_total_flops() / n, _shape(res)


def _shallow(meta_models, layers: int):
    """The meta models with each DiT cut to `layers` layers (same widths); VAE and scorer shared."""
    def cut(dit):
        cfg = replace(dit.cfg, num_layers=layers)
        with torch.device("meta"):
            net = type(dit.net)(cfg).to(dit.dtype)
        return type(dit)(net, cfg, dtype=dit.dtype, device=dit.device, key=f"{dit.key}-{layers}")
    return replace(meta_models, drafter=cut(meta_models.drafter), target=cut(meta_models.target))


def _shape(res) -> tuple[int, ...]:
    if isinstance(res, torch.Tensor):
        return tuple(res.shape)
    if isinstance(res, tuple):  # (pixels, cache) of a decode
        return tuple(res[0].shape)
    if hasattr(res, "k") and hasattr(res, "v"):  # text K/V: layers x [B, heads, text_len, head_dim]
        return (len(res.k), *res.k[0].shape)
    flow = getattr(res, "flow", None)
    if flow is not None:
        return tuple(flow.shape)
    kv = getattr(res, "kv", None)
    return (int(kv.length),) if kv is not None else ()


def _score_meta(model, frames: int):
    """ImageReward's vision tower, cross-encoder and head on meta inputs of one block's frames at 224 px.

    The prompt's padding mask is left out (None): transformers tests it with `.all()`, which needs real data; the
    FLOPs are the same (a mask does not change the matmuls)."""
    cfg = model.cfg
    dtype = next(model.blip.parameters()).dtype
    px = torch.empty(frames, 3, cfg.image_size, cfg.image_size, device="meta", dtype=dtype)
    ids = torch.zeros(frames, cfg.max_tokens, dtype=torch.long, device="meta")
    with FlopCounterMode(display=False) as fc:
        reward = model.head_output(model.encode_text(ids, None, model.encode_image(px)))  # [frames]
    return reward, fc.get_total_flops(), "ImageReward without the prompt's padding mask (meta)"
