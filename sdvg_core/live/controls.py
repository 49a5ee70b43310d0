"""What a viewer changes while a live run plays, checked once, whatever carries it (an HTTP route, a test, a script).

`LiveControls` holds the settings in force: set from any thread (`apply`, `stop`), read by the run once per block
boundary (`take`), so a block is never made from two settings. A request the run cannot take raises
`LiveRequestError` with the HTTP status a server answers with (400 malformed, 409 not possible in this run, 413 too
large); the run itself never sees a bad value.
"""
from __future__ import annotations

import json
import math
import threading
from dataclasses import dataclass, replace
from typing import Any, Callable, Mapping

from ..engine.policy_names import PolicyNameError, parse_policy

# Limits of one request. A control request is a few fields of JSON; 64 KiB leaves room for the longest prompt.
MAX_CONTROL_BYTES = 64 * 1024
# umT5 reads 512 tokens (docs/design.md §2.2), about 4 characters each in English: a prompt longer than this is cut by
# the tokenizer anyway, so a longer one is refused rather than silently shortened.
MAX_PROMPT_CHARS = 2048


class LiveRequestError(ValueError):
    """A request the live run cannot take: `status` is the HTTP status a server answers with."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class LiveSettings:
    """The settings in force: read once before each block (`version` counts the changes applied)."""

    tau: float
    drafter: bool = True  # False: the target makes every block from the next one on
    prompt: str = ""
    strength: float | None = None  # a video-to-video run's strength (None: the run has no input video)
    stop: bool = False
    version: int = 0

    def to_dict(self) -> dict:
        return {"tau": self.tau, "drafter": self.drafter, "prompt": self.prompt, "strength": self.strength,
                "stop": self.stop, "version": self.version}


def parse_request(body: bytes, limit: int = MAX_CONTROL_BYTES) -> dict:
    """A request body as a JSON object (413 when larger than `limit`, 400 when it is not a JSON object)."""
    if len(body) > limit:
        raise LiveRequestError(413, f"the request is {len(body):,} bytes; a control request takes at most {limit:,}")
    try:
        value = json.loads(body.decode("utf-8"), parse_constant=_no_constant)
    except (UnicodeDecodeError, json.JSONDecodeError, ValueError) as e:
        raise LiveRequestError(400, f"the request is not JSON: {e}") from None
    if not isinstance(value, dict):
        raise LiveRequestError(400, f"the request must be a JSON object, got {type(value).__name__}")
    return value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


class LiveControls:
    """The controls of one live run. `prepared`: prompts encoded before the run (a switch to one is instant);
    `can_switch_prompts`: the run's recipes can change the prompt between blocks; `encodes_prompts`: the run has a text
    encoder for a prompt nobody prepared (without one such a prompt is refused here, not at the boundary where it
    would end the run); `base_policy`: the policy while the drafter is on (a name of the one grammar that takes a tau,
    e.g. `sdvg`); `strength_problem(s)`: why the run's recipes cannot take a strength (None: they can)."""

    KEYS = ("tau", "prompt", "prompt_index", "drafter", "strength", "stop")

    def __init__(self, settings: LiveSettings, prepared: tuple[str, ...] = (), can_switch_prompts: bool = True,
                 base_policy: str = "sdvg", strength_problem: Callable[[float], str | None] = lambda s: None,
                 encodes_prompts: bool = True):
        spec = parse_policy(base_policy)
        if spec.param != "tau":
            raise ValueError(f"a live run's policy must take a tau (sdvg, sdvg-mean), got {base_policy!r}")
        self.base_policy = spec.kind
        self.prepared = tuple(prepared)
        self.can_switch_prompts = can_switch_prompts
        self.encodes_prompts = encodes_prompts
        self.strength_problem = strength_problem
        self._lock = threading.Lock()
        self._settings = self._checked(settings)

    def _checked(self, s: LiveSettings) -> LiveSettings:
        _tau(s.tau)
        if s.strength is not None:
            _strength(s.strength)
        return s

    def take(self) -> LiveSettings:
        """The settings in force now (the run reads them once, at a block boundary)."""
        with self._lock:
            return self._settings

    def stop(self) -> LiveSettings:
        """End the run after the block in progress (its committed blocks stay written and playable)."""
        return self.apply({"stop": True})

    def apply(self, request: Mapping[str, Any]) -> LiveSettings:
        """Change the settings from a request {tau, prompt | prompt_index, drafter, strength, stop} (any subset); the
        whole request is checked before anything changes. Returns the settings in force after it."""
        unknown = sorted(set(request) - set(self.KEYS))
        if unknown:
            raise LiveRequestError(400, f"unknown control(s) {unknown}; a request may set {list(self.KEYS)}")
        if not request:
            raise LiveRequestError(400, f"an empty request; set one of {list(self.KEYS)}")
        change: dict[str, Any] = {}
        if "tau" in request:
            change["tau"] = _tau(request["tau"])
        if "prompt" in request and "prompt_index" in request:
            raise LiveRequestError(400, "give 'prompt' (a text) or 'prompt_index' (a prepared prompt), not both")
        if "prompt" in request:
            change["prompt"] = self._prompt(request["prompt"])
        if "prompt_index" in request:
            change["prompt"] = self._prepared(request["prompt_index"])
        if "drafter" in request:
            if not isinstance(request["drafter"], bool):
                raise LiveRequestError(400, f"drafter must be true or false, got {request['drafter']!r}")
            change["drafter"] = request["drafter"]
        if "strength" in request:
            change["strength"] = self._strength(request["strength"])
        if "stop" in request:
            if request["stop"] is not True:
                raise LiveRequestError(400, f"stop takes true, got {request['stop']!r}")
            change["stop"] = True
        with self._lock:
            self._settings = replace(self._settings, version=self._settings.version + 1, **change)
            return self._settings

    def _prompt(self, text: Any) -> str:
        if not isinstance(text, str) or not text.strip():
            raise LiveRequestError(400, "prompt must be a non-empty text")
        if len(text) > MAX_PROMPT_CHARS:
            raise LiveRequestError(413, f"the prompt has {len(text):,} characters; at most {MAX_PROMPT_CHARS:,} "
                                        f"(umT5 reads 512 tokens)")
        if not self.can_switch_prompts and text.strip() != self.take().prompt:
            raise LiveRequestError(409, "this run's context recipe cannot change the prompt between blocks: start "
                                        "the live run with the krea or longlive recipe")
        if not self.encodes_prompts and text.strip() not in self.prepared and text.strip() != self.take().prompt:
            raise LiveRequestError(409, "this run has no text encoder for a new prompt: choose a prepared one "
                                        "(prompt_index), or queue the run with a CLIP connected to encode typed prompts")
        return text.strip()

    def _prepared(self, index: Any) -> str:
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(self.prepared):
            raise LiveRequestError(400, f"prompt_index must be 0..{len(self.prepared) - 1} (the prepared prompts), "
                                        f"got {index!r}")
        return self._prompt(self.prepared[index])

    def _strength(self, value: Any) -> float:
        if self.take().strength is None:
            raise LiveRequestError(409, "this run has no input video: strength acts on video-to-video runs only")
        s = _strength(value)
        problem = self.strength_problem(s)
        if problem:
            raise LiveRequestError(400, problem)
        return s


def _number(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise LiveRequestError(400, f"{name} must be a number, got {value!r}")
    if not math.isfinite(value):
        raise LiveRequestError(400, f"{name} must be a finite number, got {value!r}")
    return float(value)


def _tau(value: Any) -> float:
    tau = _number("tau", value)
    try:
        parse_policy("sdvg", tau=tau)  # the grammar's own check of a tau
    except PolicyNameError as e:
        raise LiveRequestError(400, str(e)) from None
    return tau


def _strength(value: Any) -> float:
    s = _number("strength", value)
    if not 0.0 < s <= 1.0:
        raise LiveRequestError(400, f"strength must be in (0, 1], got {s:g}")
    return s
