"""Typed memo keys: one frozen dataclass per kind of derived data, each naming every identity it depends on.

A key holds the stable keys of the models involved (never `id()`), the prompt, the context recipe, the VAE
decode rule, the noise source and the lineage of the history (docs/design.md §3.2). Two results share a key
only if they are the same computation, so a memo shared by many engines (a ComfyUI server) or a tau sweep can
never hand one history's cache to another. `kind` names the key's family in reports and tests.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, ClassVar, Hashable


@dataclass(frozen=True)
class TextKey:
    """Cross-attention K/V of one prompt for one model."""

    kind: ClassVar[str] = "text"
    model: str
    prompt: str


@dataclass(frozen=True)
class KVKey:
    """A model's self-attention context (KV cache) for the block after `lineage`, as `recipe` builds it.

    `vae` and `rule` are part of it because a recipe may build context from decoded and re-encoded pixels
    (Krea's anchor frame).
    """

    kind: ClassVar[str] = "kv"
    model: str
    prompt: str
    recipe: Hashable
    vae: str
    rule: str
    lineage: str


@dataclass(frozen=True)
class AnchorKey:
    """Krea's anchor latent for the block after `lineage`: a decoded pixel frame re-encoded by the VAE."""

    kind: ClassVar[str] = "anchor"
    vae: str
    rule: str
    recipe: Hashable
    lineage: str


@dataclass(frozen=True)
class BlockKey:
    """The latents one model (`role` = drafter or target) generates for the block after `lineage`, denoised at `plan`
    (the recipe's steps, or a video-to-video block's strength plan: a live run may change the strength between
    blocks of one lineage)."""

    role: str
    model: str
    prompt: str
    recipe: Hashable
    vae: str
    rule: str
    noise: str
    lineage: str
    plan: Hashable = None

    @property
    def kind(self) -> str:
        return self.role


@dataclass(frozen=True)
class PixelsKey:
    """Decoded pixels of the committed block whose lineage (after committing it) is `lineage`."""

    kind: ClassVar[str] = "pixels"
    vae: str
    rule: str
    lineage: str


@dataclass(frozen=True)
class DecoderCacheKey(PixelsKey):
    """The VAE decoder's causal feature cache after the committed block with lineage `lineage` (same identities)."""

    kind: ClassVar[str] = "dcache"


@dataclass(frozen=True)
class DraftDecodeKey:
    """A draft's decoded pixels (from a copy of the committed decoder cache) and the cache after it; `vae` is the
    routing decoder that decoded it (the VAE, or a tiny decoder the run routes on)."""

    kind: ClassVar[str] = "draft_decode"
    draft: BlockKey
    vae: str
    rule: str


@dataclass(frozen=True)
class ScoreKey:
    """ImageReward per-frame scores of a decoded draft against the prompt text."""

    kind: ClassVar[str] = "score"
    draft: DraftDecodeKey
    scorer: str
    prompt_text: str


ROUTE_ROLE = "route_vae"  # the routing decoder's entry in RunKeys.models (absent: the VAE routes)


@dataclass(frozen=True)
class RunKeys:
    """The keys of one engine's operations: its models' identities by role (and "vae", "scorer"), each role's
    recipe, the decode rule and the noise's identity, joined with a block's prompt, lineage and step plan
    (`plans(spec, role)`: the plan a role denoises a block of the spec at)."""

    models: dict[str, str]
    recipes: dict[str, Hashable]
    rule: str
    noise: str
    plans: Callable[[object, str], Hashable] = lambda spec, role: None

    def block(self, role: str, state, b: int) -> BlockKey:
        """The latents `role` generates for block b after the state's history up to b."""
        return BlockKey(role, self.models[role], state.spec.prompt_at(b).key, self.recipes[role], self.models["vae"],
                        self.rule, self.noise, state.lineage_at(b), self.plans(state.spec, role))

    def draft_decode(self, state) -> DraftDecodeKey:
        """The pending draft's decode by the routing decoder (`models["route_vae"]` when the run routes on a decoder
        of its own, else the VAE): scores of two decoders never share a key."""
        return DraftDecodeKey(self.block("drafter", state, state.next_block), self.router, self.rule)

    @property
    def router(self) -> str:
        """The identity of the decoder whose frames the scorer sees."""
        return self.models.get(ROUTE_ROLE, self.models["vae"])

    def score(self, state) -> ScoreKey:
        """The pending draft's scores against its block's prompt (each block is routed against its own prompt)."""
        return ScoreKey(self.draft_decode(state), self.models["scorer"], state.spec.prompt_at(state.next_block).text)


@dataclass(frozen=True)
class GivenKey:
    """A start image's or an extension's latents as one recipe encoding takes them (given/pixels.py); `pixels` is
    PixelInput.identity() (mode, strength, digest)."""

    kind: ClassVar[str] = "given"
    vae: str
    pixels: str
    size: tuple[int, int]
    encoding: Hashable
    frames_per_block: int


@dataclass(frozen=True)
class InputBlockKey:
    """Block `block`'s latents of a video-to-video input and the encoder cache after them."""

    kind: ClassVar[str] = "input"
    vae: str
    digest: str
    size: tuple[int, int]
    frames_per_block: int
    block: int


@dataclass(frozen=True)
class GivenDecodeKey:
    """The VAE decoder cache after the given latents a Self-Forcing / LongLive output decodes before block 0; `lineage`
    is the root lineage (it names the given pixels)."""

    kind: ClassVar[str] = "given_decode"
    vae: str
    rule: str
    lineage: str


def key_kind(key: Hashable) -> str:
    """The family of a memo key: `kind` of a typed key, the first element of a tuple, else its text."""
    kind = getattr(key, "kind", None)
    if isinstance(kind, str):
        return kind
    return str(key[0]) if isinstance(key, tuple) and key else str(key)


def require_key(obj: object, what: str) -> str:
    """The stable identity string of a model; refuse objects without one (ids are reused after GC)."""
    key = getattr(obj, "key", None)
    if not isinstance(key, str) or not key:
        raise ValueError(
            f"the {what} ({type(obj).__name__}) has no stable `key`: set `.key` to a string naming its weights "
            f"(e.g. file path + modification time + dtype). The engine's memo keys derived data by model identity, "
            f"and object ids are reused after garbage collection, so they cannot serve.")
    return key
