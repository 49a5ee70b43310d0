"""peft LoRA merged at load (io/lora.py): a merged model computes what the unmerged LoRA model computes,
W x + (alpha / r) B (A x), for LoRA files written by peft itself; every misfit is refused before any work."""
from __future__ import annotations

import copy

import pytest
import torch
from safetensors.torch import save_file
from torch import nn

import sdvg_core.io.checkpoint as checkpoint
from sdvg_core import CausalWan, CheckpointError, load_drafter, load_wan_dit
from sdvg_core.io.drafters import DrafterError
from sdvg_core.io.lora import (
    PEFT_PREFIX, LoraError, LoraSpec, block_linear_names, merge_lora, parse_lora, read_lora,
)
from sdvg_core.models.wan import KVCache, build_random
from sdvg_core.models.wan_config import PRESETS

TOL = 1e-5  # float32 sums of O(1) terms over 64-128 wide layers: rounding ~1e-6
RANK, ALPHA = 4, 8.0  # scale 2: a merge that drops alpha/r is off by the whole LoRA term
CFG = PRESETS["tiny"]


# ---------------------------------------------------------------------------------------------------------------
# LoRA files: written by peft (dev dependency) or, for the error cases, by hand in peft's key format
# ---------------------------------------------------------------------------------------------------------------
def peft_lora(net: nn.Module, rank: int = RANK, alpha: float = ALPHA, seed: int = 0,
              targets: list[str] | None = None) -> dict[str, torch.Tensor]:
    """get_peft_model_state_dict of `net` wrapped by peft with random A and B (LongLive's save path)."""
    peft = pytest.importorskip("peft")
    torch.manual_seed(seed)
    wrapped = peft.get_peft_model(copy.deepcopy(net), peft.LoraConfig(
        r=rank, lora_alpha=alpha, lora_dropout=0.0, init_lora_weights=False,  # random B too (peft's default is 0)
        target_modules=targets or list(block_linear_names(net))))
    return {k: v.detach().clone() for k, v in peft.get_peft_model_state_dict(wrapped).items()}


def peft_reference(net: nn.Module, lora_sd: dict[str, torch.Tensor], rank: int = RANK, alpha: float = ALPHA) -> nn.Module:
    """The unmerged peft model LongLive runs: base + LoRA loaded with set_peft_model_state_dict."""
    peft = pytest.importorskip("peft")
    targets = sorted({k[len(PEFT_PREFIX):].rsplit(".lora_", 1)[0] for k in lora_sd})
    wrapped = peft.get_peft_model(copy.deepcopy(net), peft.LoraConfig(r=rank, lora_alpha=alpha, lora_dropout=0.0,
                                                                      target_modules=targets))
    result = peft.set_peft_model_state_dict(wrapped, lora_sd)
    assert not [k for k in result.unexpected_keys if "lora_" in k]
    return wrapped.eval()


def hand_lora(net: nn.Module, rank: int = RANK, seed: int = 0, targets: tuple[str, ...] | None = None
              ) -> dict[str, torch.Tensor]:
    """A LoRA state dict in peft's saved format (base_model.model.<module>.lora_A/B.weight), built without peft."""
    gen = torch.Generator().manual_seed(seed)
    modules = dict(net.named_modules())
    out = {}
    for name in targets or block_linear_names(net):
        m = modules[name]
        out[f"{PEFT_PREFIX}{name}.lora_A.weight"] = torch.randn(rank, m.in_features, generator=gen) / m.in_features ** 0.5
        out[f"{PEFT_PREFIX}{name}.lora_B.weight"] = torch.randn(m.out_features, rank, generator=gen) / rank ** 0.5
    return out


class LoraLinear(nn.Module):
    """The definition a merge must reproduce: y = W x + b + (alpha / r) B (A x)."""

    def __init__(self, base: nn.Linear, a: torch.Tensor, b: torch.Tensor, scale: float):
        super().__init__()
        self.base, self.a, self.b, self.scale = base, a, b, scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x) + self.scale * ((x @ self.a.T) @ self.b.T)


def definition_model(net: nn.Module, lora_sd: dict[str, torch.Tensor], alpha: float = ALPHA) -> nn.Module:
    """A copy of `net` whose adapted Linear layers compute W x + (alpha/r) B(A x) from the file's tensors."""
    ref = copy.deepcopy(net)
    for key in lora_sd:
        if not key.endswith(".lora_A.weight"):
            continue
        name = key[len(PEFT_PREFIX):-len(".lora_A.weight")]
        a, b = lora_sd[key], lora_sd[key.replace("lora_A", "lora_B")]
        parent, _, child = name.rpartition(".")
        owner = ref.get_submodule(parent)
        setattr(owner, child, LoraLinear(getattr(owner, child), a, b, alpha / a.shape[0]))
    return ref


def base_file(tmp_path, net: nn.Module, name: str = "longlive_base.pt", prefix: str = "model.") -> str:
    path = tmp_path / name
    torch.save({"generator": {prefix + k: v for k, v in net.state_dict().items()}}, path)
    return str(path)


def forward(net: nn.Module, seed: int = 3) -> torch.Tensor:
    """One cached block-causal forward of the whole DiT (every block's attention and FFN Linear layers)."""
    gen = torch.Generator().manual_seed(seed)
    run = CausalWan(net, CFG)
    x = torch.randn(1, 3, CFG.in_dim, 4, 6, generator=gen)  # [B, F, C, H, W]
    ctx = torch.randn(1, 8, CFG.text_dim, generator=gen)  # [B, L, text_dim]
    kv = KVCache.empty(CFG, batch=1, window_frames=3, tokens_per_frame=6, device="cpu", dtype=torch.float32)
    with torch.no_grad():
        return run.forward(x, torch.full((1, 3), 700.0), run.encode_text(ctx), kv=kv).flow


def layer_diffs(merged: nn.Module, ref: nn.Module, names: tuple[str, ...]) -> dict[str, float]:
    """Largest |merged(x) - ref(x)| per layer for a random input."""
    gen = torch.Generator().manual_seed(7)
    out = {}
    with torch.no_grad():
        for name in names:
            m = merged.get_submodule(name)
            x = torch.randn(5, m.in_features, generator=gen)
            out[name] = (m(x) - ref.get_submodule(name)(x)).abs().max().item()
    return out


@pytest.fixture(scope="module")
def base() -> nn.Module:
    return build_random(CFG, seed=11).eval()


# ---------------------------------------------------------------------------------------------------------------
# the merge equals the LoRA model
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_peft_file_merged_equals_the_unmerged_lora_model(tmp_path, base):
    """LongLive's layout (base .pt entry generator with `model.`, lora.pt entry generator_lora saved by peft):
    every adapted layer and the whole forward equal peft's unmerged model and the definition W x + s B(A x)."""
    lora_sd = peft_lora(base)
    assert len(lora_sd) == 2 * len(block_linear_names(base)) == 2 * 10 * CFG.num_layers
    lora_path = tmp_path / "lora.pt"
    torch.save({"generator_lora": lora_sd, "critic_lora": peft_lora(base, seed=1), "step": 600}, lora_path)
    merged, _, rep = load_wan_dit(base_file(tmp_path, base), pt_entry="generator",
                                  lora=LoraSpec(str(lora_path), alpha=ALPHA))
    names = block_linear_names(base)
    for ref in (peft_reference(base, lora_sd), definition_model(base, lora_sd)):
        diffs = layer_diffs(merged, ref.base_model.model if hasattr(ref, "base_model") else ref, names)
        assert max(diffs.values()) < TOL, {k: v for k, v in diffs.items() if v >= TOL}
        ref_net = ref.base_model.model if hasattr(ref, "base_model") else ref
        assert (forward(merged) - forward(ref_net)).abs().max().item() < TOL
    # and the LoRA matters: the base alone is far from it
    assert (forward(merged) - forward(base)).abs().max().item() > 100 * TOL
    assert "LoRA lora.pt merged (20 layers, rank 4, alpha 8, scale 2)" in rep.describe()


def test_hand_format_is_peft_format(base):
    """The hand-built files of the error tests use exactly peft's key names and shapes."""
    ours, theirs = hand_lora(base), peft_lora(base)
    assert {k: tuple(v.shape) for k, v in ours.items()} == {k: tuple(v.shape) for k, v in theirs.items()}


def test_alpha_defaults_to_rank_and_scales(tmp_path, base):
    """alpha None -> scale 1 (LongLive: alpha = rank = 256); alpha 8 at rank 4 -> twice the LoRA term."""
    lora_sd = hand_lora(base)
    lora = parse_lora(lora_sd, "lora")
    one, two = copy.deepcopy(base), copy.deepcopy(base)
    assert merge_lora(one, lora) == 20 and merge_lora(two, lora, alpha=2 * RANK) == 20
    w0 = base.blocks[1].ffn[2].weight
    a, b = lora_sd[f"{PEFT_PREFIX}blocks.1.ffn.2.lora_A.weight"], lora_sd[f"{PEFT_PREFIX}blocks.1.ffn.2.lora_B.weight"]
    assert torch.allclose(one.blocks[1].ffn[2].weight, w0 + b @ a, atol=1e-6)
    assert torch.allclose(two.blocks[1].ffn[2].weight, w0 + 2 * (b @ a), atol=1e-6)


def test_bare_dict_safetensors_and_fsdp_names_load_the_same(tmp_path, base):
    lora_sd = hand_lora(base)
    wrapped = tmp_path / "lora.pt"
    torch.save({"generator_lora": lora_sd}, wrapped)
    bare = tmp_path / "bare.pt"
    torch.save(lora_sd, bare)
    st = tmp_path / "lora.safetensors"
    save_file(lora_sd, str(st))
    fsdp = tmp_path / "fsdp.pt"  # FSDP wrappers at two depths, as a sharded save without FULL_STATE_DICT would give
    torch.save({k.replace("blocks.0.", "_fsdp_wrapped_module.blocks.0._fsdp_wrapped_module."): v
                for k, v in lora_sd.items()}, fsdp)
    ref = read_lora(wrapped)
    assert ref.entry == "generator_lora" and ref.rank == RANK and len(ref.pairs) == 20
    for other in (bare, st, fsdp):
        got = read_lora(other)
        assert got.pairs.keys() == ref.pairs.keys()
        assert all(torch.equal(got.pairs[n][i], ref.pairs[n][i]) for n in ref.pairs for i in (0, 1))


def test_key_and_report_name_the_lora(tmp_path, base):
    """Merged weights are other weights: the memo key carries the LoRA file and alpha."""
    path = base_file(tmp_path, base)
    lora_a, lora_b = tmp_path / "a.pt", tmp_path / "b.pt"
    torch.save(hand_lora(base, seed=1), lora_a)
    torch.save(hand_lora(base, seed=2), lora_b)
    keys = {load_wan_dit(path, pt_entry="generator")[2].key,
            load_wan_dit(path, pt_entry="generator", lora=LoraSpec(str(lora_a)))[2].key,
            load_wan_dit(path, pt_entry="generator", lora=LoraSpec(str(lora_a), alpha=2.0))[2].key,
            load_wan_dit(path, pt_entry="generator", lora=LoraSpec(str(lora_b)))[2].key}
    assert len(keys) == 4


def test_bf16_merge_rounds_once(tmp_path, base):
    """With a LoRA the base is merged at file precision and cast once: equal to casting the float32 merge."""
    lora_sd = hand_lora(base)
    lora_path = tmp_path / "lora.pt"
    torch.save(lora_sd, lora_path)
    net, _, _ = load_wan_dit(base_file(tmp_path, base), pt_entry="generator", dtype=torch.bfloat16,
                             lora=LoraSpec(str(lora_path)))
    ref = copy.deepcopy(base)
    merge_lora(ref, parse_lora(lora_sd))
    assert all(torch.equal(p, r.to(torch.bfloat16)) for p, r in zip(net.state_dict().values(),
                                                                      ref.state_dict().values()))


# ---------------------------------------------------------------------------------------------------------------
# LongLive as a drafter kind: rank 256, alpha 256, every Linear in the blocks
# ---------------------------------------------------------------------------------------------------------------
def test_longlive_kind_merges_its_rank_256_lora(tmp_path, base):
    lora_sd = peft_lora(base, rank=256, alpha=256)
    lora_path = tmp_path / "lora.pt"
    torch.save({"generator_lora": lora_sd}, lora_path)
    net, _, rep = load_drafter(base_file(tmp_path, base), "longlive", lora_path)
    assert rep.entry == "generator" and "kind longlive" in rep.describe()
    ref = peft_reference(base, lora_sd, rank=256, alpha=256).base_model.model
    assert (forward(net) - forward(ref)).abs().max().item() < TOL


def test_longlive_kind_refuses_a_lora_that_is_not_its_own(tmp_path, base):
    path = base_file(tmp_path, base)
    small = tmp_path / "rank4.pt"
    torch.save(hand_lora(base), small)
    with pytest.raises(LoraError, match="rank 4, but this drafter's LoRA has rank 256"):
        load_drafter(path, "longlive", small)
    partial = tmp_path / "partial.pt"
    names = block_linear_names(base)
    torch.save(hand_lora(base, rank=256, targets=tuple(n for n in names if n != "blocks.1.ffn.2")), partial)
    with pytest.raises(LoraError, match=r"adapts 19 of the 20 Linear layers in the blocks; missing 1 \(blocks.1.ffn.2\)"):
        load_drafter(path, "longlive", partial)
    with pytest.raises(DrafterError, match="needs its LoRA"):
        load_drafter(path, "longlive")


# ---------------------------------------------------------------------------------------------------------------
# misfits: refused with the reason, before the model is built or a weight changes
# ---------------------------------------------------------------------------------------------------------------
def _refused(tmp_path, base, lora_sd, match: str, monkeypatch) -> None:
    """The LoRA is refused by load_wan_dit before the base weights go into a model."""
    lora_path = tmp_path / "lora.pt"
    torch.save(lora_sd, lora_path)

    def no_load(*args, **kwargs):
        raise AssertionError("the base was loaded into a model before the LoRA was checked")

    monkeypatch.setattr(checkpoint, "strict_load", no_load)
    with pytest.raises(CheckpointError, match=match):
        load_wan_dit(base_file(tmp_path, base), pt_entry="generator", lora=LoraSpec(str(lora_path)))


def test_lora_for_another_model_size_is_refused(tmp_path, base, monkeypatch):
    """A LoRA made for the wider, deeper tiny-target (as a 14B LoRA on the 1.3B): widths and missing blocks named."""
    other = hand_lora(build_random(PRESETS["tiny-target"], seed=1))
    _refused(tmp_path, base, other, r"40 \(blocks\.2\..*\) targets are not modules of the base model.*widths do not "
                                    r"match the base model in 20 layers .*LoRA 128 -> 128, model 64 -> 64.*another "
                                    r"model size", monkeypatch)


@pytest.mark.parametrize("case, match", [
    ("rank", r"lora_A must be \[r, in\] and lora_B \[out, r\] with the same r"),
    ("mixed", r"mixes ranks \(r=3: 1 layers \(e.g. blocks.1.ffn.2\), r=4: 19 layers"),
    ("unpaired", r"every lora_A needs its lora_B: 1 \(blocks.0.self_attn.q.lora_B.weight missing\)"),
    ("not_a_module", r"1 \(blocks.0.self_attn.qq\) targets are not modules of the base model"),
    ("not_linear", r"1 \(blocks.0.norm3 \(WanLayerNorm\)\) targets are not Linear layers"),
    ("dora", r"lora_magnitude_vector\) keys are not plain LoRA weights .*DoRA"),
    ("full_model", r"not a peft LoRA state dict.*looks like a full model checkpoint"),
    ("empty", r"empty"),
])
def test_malformed_lora_is_refused(tmp_path, base, monkeypatch, case, match):
    sd = hand_lora(base)
    q_a, q_b = f"{PEFT_PREFIX}blocks.0.self_attn.q.lora_A.weight", f"{PEFT_PREFIX}blocks.0.self_attn.q.lora_B.weight"
    if case == "rank":
        sd[q_b] = torch.zeros(64, RANK + 1)
    elif case == "mixed":
        sd.update(hand_lora(base, rank=3, targets=("blocks.1.ffn.2",)))
    elif case == "unpaired":
        del sd[q_b]
    elif case == "not_a_module":
        sd[q_a.replace(".q.", ".qq.")], sd[q_b.replace(".q.", ".qq.")] = sd.pop(q_a), sd.pop(q_b)
    elif case == "not_linear":
        sd[f"{PEFT_PREFIX}blocks.0.norm3.lora_A.weight"] = torch.zeros(RANK, 64)
        sd[f"{PEFT_PREFIX}blocks.0.norm3.lora_B.weight"] = torch.zeros(64, RANK)
    elif case == "dora":
        sd[f"{PEFT_PREFIX}blocks.0.self_attn.q.lora_magnitude_vector"] = torch.ones(64)
    elif case == "full_model":
        sd = {"model." + k: v for k, v in base.state_dict().items()}
    elif case == "empty":
        sd = {"generator_lora": {}}
    _refused(tmp_path, base, sd, match, monkeypatch)


def test_a_malformed_lora_fails_before_the_base_is_read(tmp_path, base):
    """The LoRA file is read first: with a broken LoRA the (here missing) base file is never opened."""
    lora_path = tmp_path / "lora.pt"
    torch.save({f"{PEFT_PREFIX}blocks.0.self_attn.q.lora_A.weight": torch.zeros(RANK, 64)}, lora_path)
    with pytest.raises(LoraError, match="needs its lora_B"):
        load_wan_dit(tmp_path / "no_such_base.pt", lora=LoraSpec(str(lora_path)))


def test_merge_checks_every_pair_before_changing_any_weight(base):
    """One bad pair (the last one) leaves every weight as it was, the good pairs before it included."""
    sd = hand_lora(base)
    sd[f"{PEFT_PREFIX}blocks.1.self_attn.v.lora_A.weight"] = torch.zeros(RANK, 65)
    net = copy.deepcopy(base)
    with pytest.raises(LoraError, match=r"blocks.1.self_attn.v: LoRA 65 -> 64, model 64 -> 64"):
        merge_lora(net, parse_lora(sd))
    assert all(torch.equal(a, b) for a, b in zip(net.state_dict().values(), base.state_dict().values()))
