"""The whole-block compile: `CausalWan(compile=...)` compiles `wan_block` (q/k/v + RoPE + KV write +
self-attention + cross-attention + FFN) with fullgraph=True; one compiled function serves every layer and every
block of a run, one graph per call shape (counted from torch._dynamo's own counters), and its output equals eager.

Tests use torch's cheap backends ("eager": the graph structure; "aot_eager": the functionalised graph inductor would
get, the in-place KV write included); inductor itself is measured by bench/bench_compile.py."""
from __future__ import annotations

import pytest
import torch
from torch._dynamo.utils import counters

from sdvg_core import (CausalWan, Engine, EngineConfig, FixedPattern, GenerationSpec, KreaRecipe, LongLiveRecipe,
                       PixelInput, PromptConditioning, SelfForcingRecipe, tiny_models)
from sdvg_core.demo.tiny import DEMO_PROMPT
from sdvg_core.engine.prompts import PromptSchedule
from sdvg_core.sampling.timesteps import timestep_tensor
from sdvg_core.io.text import demo_embeddings
from sdvg_core.models.kv_cache import attention_span
from sdvg_core.models.wan import KVCache, attention, build_random, wan_block
from sdvg_core.models.wan_config import PRESETS

pytestmark = pytest.mark.slow  # torch.compile (dynamo) traces the whole block

TOL = 1e-4  # fixtures README §5: the parity bound of every fp32 path
RECIPES = {"krea": KreaRecipe(), "self_forcing": SelfForcingRecipe(), "longlive": LongLiveRecipe(window=9),
           "longlive_infinity": LongLiveRecipe(window=9, variant="infinity")}


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    counters.clear()
    yield
    torch._dynamo.reset()


def _tiny(seed: int = 0):
    cfg = PRESETS["tiny"]
    net = build_random(cfg, seed)
    gen = torch.Generator().manual_seed(seed)
    return cfg, net, torch.randn(1, 8, cfg.text_dim, generator=gen), torch.randn(1, 3, cfg.in_dim, 4, 6, generator=gen)


def _block_args(run: CausalWan, calls) -> list[tuple[tuple, dict]]:
    """The arguments of each layer's wan_block call in the forwards `calls(run)` makes (eagerly)."""
    seen: list[tuple[tuple, dict]] = []

    def record(*a, **kw):
        seen.append((a, kw))
        return wan_block(*a, **kw)

    run._block = record
    calls(run)
    return seen


def _opaque_kernel(q, k, v):
    """A host kernel dynamo could not trace as is (a host read and numpy): it must run as one opaque op."""
    assert float(q.abs().sum()) >= 0.0
    return torch.from_numpy(attention(q, k, v).numpy())


@pytest.mark.parametrize("case", ["no_cache", "cache", "slot_rope", "host_kernel"])
def test_the_whole_block_is_one_graph_without_breaks(case):
    """torch._dynamo.explain over every layer call of a cached run (a full span, a masked span, a commit's keys-only
    last layer): one graph each, 0 graph breaks, also with a host attention kernel (an opaque op)."""
    cfg, net, ctx, x = _tiny()
    run = CausalWan(net, cfg, attention_fn=_opaque_kernel if case == "host_kernel" else None,
                    compile="eager" if case == "host_kernel" else False)
    text = run.encode_text(ctx)

    def calls(r):
        if case == "no_cache":
            r.forward(x, timestep_tensor(700.0, 1, 3), text)
            return
        kv = KVCache.empty(cfg, batch=1, window_frames=9, tokens_per_frame=6, device="cpu", dtype=torch.float32,
                           rope="slot" if case == "slot_rope" else "baked")
        kv = r.forward(x, timestep_tensor(0.0, 1, 3), text, kv=kv, commit=True, want_output=False).kv
        r.forward(x, timestep_tensor(700.0, 1, 3), text, kv=kv, frame_offset=3)  # 6 frames of a 9-frame span

    args = _block_args(run, calls)
    assert len(args) == (1 if case == "no_cache" else 2) * cfg.num_layers
    kinds = set()
    for a, kw in args:
        kinds.add((a[4].kv is not None and a[4].kv.mask is not None, a[9]))  # (masked, keys only)
        explanation = torch._dynamo.explain(wan_block)(*a, **kw)
        assert explanation.graph_break_count == 0 and explanation.graph_count == 1, explanation.break_reasons
    if case != "no_cache":
        assert {(False, True), (True, False)} <= kinds  # a keys-only layer and a masked layer were both traced


def _spec(blocks: int, switch_at: int, pixels: PixelInput | None = None) -> GenerationSpec:
    first = PromptConditioning.make(DEMO_PROMPT, demo_embeddings(DEMO_PROMPT, 32))
    other = PromptConditioning.make("another prompt", demo_embeddings("another prompt", 32))
    return GenerationSpec(PromptSchedule.of([(0, first), (switch_at, other)]), 16, 16, blocks, 5, pixels=pixels)


def _image() -> torch.Tensor:
    """A start image at 16x16 pixels: 1 token per latent frame (a 1-token prefix call has the stride quirks)."""
    return torch.rand(1, 16, 16, 3, generator=torch.Generator().manual_seed(3))


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """Drafter and target of one width (different weights): their calls share graphs, so a run compiles each call
    shape once whichever role makes it first (bench/bench_compile.py counts per role with the demo's two widths)."""
    return tiny_models(seed=0, drafter="tiny", target="tiny", workdir=tmp_path_factory.mktemp("vocab"))


def _compiled(m, backend: str):
    """The tiny models' drafter and target compiled with `backend` (same networks and keys)."""
    out = []
    for r in (m.drafter, m.target):
        c = CausalWan(r.net, r.cfg, key=r.key, compile=backend)
        out.append(c)
    return out


def _graphs_per_role(engine: Engine) -> dict[str, int]:
    """Wrap each role's forward: the graphs torch compiled during that role's calls (its own counter)."""
    made = {"drafter": 0, "target": 0}
    for role, dit in (("drafter", engine.drafter), ("target", engine.target)):
        forward = dit.forward

        def counted(*a, _f=forward, _role=role, **kw):
            before = counters["stats"]["unique_graphs"]
            try:
                return _f(*a, **kw)
            finally:
                made[_role] += counters["stats"]["unique_graphs"] - before
        dit.forward = counted
    return made


@pytest.mark.parametrize("name", list(RECIPES))
def test_one_graph_per_call_shape_serves_every_layer_and_block(models, name):
    """Each recipe, both roles, a prompt switch, given pixels (a start image; Krea: a start image repeated into its
    context): the compiled run equals the eager one, makes no graph break and compiles exactly one graph per
    distinct call shape the dits made (kv_cache.attention_span), whatever the layers and blocks; more blocks of
    a windowed cache add none."""
    recipe = RECIPES[name]
    pattern = (False, True, False, True, False, True, False)
    spec = _spec(len(pattern), switch_at=4, pixels=PixelInput.start_image(_image()))
    eager = Engine(models.target, models.vae, models.drafter, None, EngineConfig(recipe=recipe))
    want = eager.generate(spec, FixedPattern(pattern, score_drafts=False)).committed_latents()
    drafter, target = _compiled(models, "eager")
    engine = Engine(target, models.vae, drafter, None, EngineConfig(recipe=recipe))
    graphs = _graphs_per_role(engine)
    got = engine.generate(spec, FixedPattern(pattern, score_drafts=False)).committed_latents()
    diff = (got - want).abs().max().item()
    shapes = drafter.call_shapes | target.call_shapes  # one width: a shape compiled for one role serves the other
    print(f"\n[compile {name}] graphs {graphs}, distinct call shapes {len(shapes)}, max diff vs eager {diff:.1e}")
    assert diff <= TOL
    assert not counters["graph_break"]
    assert sum(graphs.values()) == counters["stats"]["unique_graphs"] == len(shapes)
    # the bound: per span the cache takes (kv_cache.attention_span) a full and a masked block call, one keys-only
    # commit layer, and the prefix (a start image) and the recache (a prompt switch) once each
    capacity = recipe.window_frames(3, spec.num_latent_frames + 1)
    spans = len({attention_span(e, capacity) for e in range(1, capacity + 1)})
    assert 3 <= len(shapes) <= 2 * spans + 3, (len(shapes), spans)
    if name in ("krea", "longlive"):  # the window is full: more blocks make no new shape, no new graph
        longer = pattern + (True, False)
        engine.generate(_spec(len(longer), switch_at=4, pixels=PixelInput.start_image(_image())),
                        FixedPattern(longer, score_drafts=False))
        assert counters["stats"]["unique_graphs"] == len(shapes) == len(drafter.call_shapes | target.call_shapes)


def test_the_functionalised_graph_keeps_the_in_place_kv_write(models):
    """aot_eager (the graph inductor compiles: the KV write functionalised, then written back into the buffer): a
    LongLive run whose ring wraps and whose recache keeps the sink equals eager."""
    recipe = LongLiveRecipe(window=9)
    pattern = (False, True, False, True, False)
    spec = _spec(len(pattern), switch_at=4)
    want = Engine(models.target, models.vae, models.drafter, None, EngineConfig(recipe=recipe)).generate(
        spec, FixedPattern(pattern, score_drafts=False)).committed_latents()
    drafter, target = _compiled(models, "aot_eager")
    got = Engine(target, models.vae, drafter, None, EngineConfig(recipe=recipe)).generate(
        spec, FixedPattern(pattern, score_drafts=False)).committed_latents()
    assert (got - want).abs().max().item() <= TOL
    assert not counters["graph_break"]



def test_past_the_variant_limit_new_shapes_run_eagerly_with_a_warning(monkeypatch, caplog):
    """A process that meets more call shapes than a compiled block keeps (every model and size of a long session
    shares wan_block's variants) does not fail: the new shapes run uncompiled, the same numbers, one warning."""
    import logging

    from sdvg_core.models import wan

    monkeypatch.setattr(wan, "COMPILE_VARIANTS", 1)
    monkeypatch.setattr(wan, "_WARNED", [])
    cfg, net, ctx, x = _tiny()
    run, ref = CausalWan(net, cfg, compile="eager"), CausalWan(net, cfg)
    text = run.encode_text(ctx)
    outs = []
    for r in (run, ref):
        kv = KVCache.empty(cfg, batch=1, window_frames=9, tokens_per_frame=6, device="cpu", dtype=torch.float32)
        with caplog.at_level(logging.WARNING, logger="SDVG"):
            kv = r.forward(x, timestep_tensor(0.0, 1, 3), text, kv=kv, commit=True).kv  # span 3
            outs.append(r.forward(x, timestep_tensor(700.0, 1, 3), text, kv=kv, frame_offset=3).flow)  # 9, masked
    assert torch.equal(outs[0], outs[1])
    assert counters["stats"]["unique_graphs"] == 1
    assert caplog.text.count("shape variants") == 1


def test_every_copy_of_the_pack_shares_one_host_kernel_table(tmp_path):
    """ComfyUI imports the pack under its own package name beside sdvg_core (a second copy of wan_numerics), while a
    torch.library op is one per process: a kernel registered through either copy is found by the op, whichever
    copy defined it (the table lives in sys.modules, not in a module copy)."""
    import importlib

    import fake_host
    from sdvg_core.models import wan_numerics

    q = torch.randn(1, 2, 5, 8)

    def kernel_a(q, k, v):
        return attention(q, k, v) + 1.0

    def kernel_b(q, k, v):
        return attention(q, k, v) + 2.0

    with fake_host.installed(tmp_path) as pack:
        other = importlib.import_module(f"{pack.__name__}.sdvg_core.models.wan_numerics")
        assert other is not wan_numerics
        a = wan_numerics.register_attention(kernel_a)
        b = other.register_attention(kernel_b)  # through the other copy: another slot of the same table
        assert a != b and other.register_attention(kernel_a) == a
        assert torch.equal(torch.ops.sdvg.host_attention(q, q, q, None, b), attention(q, q, q) + 2.0)
        assert torch.equal(torch.ops.sdvg.host_attention(q, q, q, None, a), attention(q, q, q) + 1.0)
