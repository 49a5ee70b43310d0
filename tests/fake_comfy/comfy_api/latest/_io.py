"""Fake V3 schema objects: the attributes ComfyUI's frontend/executor read, nothing more."""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any


class NumberDisplay(str, Enum):
    number = "number"
    slider = "slider"


class Hidden(str, Enum):
    unique_id = "UNIQUE_ID"
    prompt = "PROMPT"
    extra_pnginfo = "EXTRA_PNGINFO"
    dynprompt = "DYNPROMPT"
    auth_token_comfy_org = "AUTH_TOKEN_COMFY_ORG"
    api_key_comfy_org = "API_KEY_COMFY_ORG"


class Input:
    io_type = "*"
    is_widget = False
    allowed: frozenset = frozenset()  # widget keyword arguments the real class accepts

    def __init__(self, id: str, display_name: str | None = None, optional: bool = False, tooltip: str | None = None,
                 lazy: bool | None = None, extra_dict: dict | None = None, **widget: Any):
        self.id, self.display_name, self.optional, self.tooltip = id, display_name, optional, tooltip
        self.lazy = lazy
        unknown = set(widget) - self.allowed
        if unknown:
            raise TypeError(f"{type(self).__qualname__}({id!r}): unexpected keyword arguments {sorted(unknown)} "
                            f"for a {self.io_type} input")
        self.extra_dict = dict(extra_dict or {})
        self.widget = widget  # default, min, max, step, options, multiline, control_after_generate, ...
        self.default = widget.get("default")

    def as_dict(self) -> dict:
        d = {k: v for k, v in self.widget.items() if v is not None}
        for k in ("display_name", "tooltip", "lazy"):
            if getattr(self, k) is not None:
                d[k] = getattr(self, k)
        if self.optional:
            d["optional"] = True
        d.update(self.extra_dict)
        if isinstance(d.get("display_mode"), Enum):
            d["display"] = d.pop("display_mode").value
        if "force_input" in d:  # the real as_dict's key
            d["forceInput"] = d.pop("force_input")
        return d


class Output:
    io_type = "*"

    def __init__(self, id: str | None = None, display_name: str | None = None, tooltip: str | None = None,
                 is_output_list: bool = False):
        self.id, self.display_name, self.tooltip, self.is_output_list = id, display_name, tooltip, is_output_list


_NUMBER = {"default", "min", "max", "step", "display_mode", "socketless", "force_input"}
_ALLOWED = {
    "BOOLEAN": {"default", "label_on", "label_off", "socketless", "force_input"},
    "INT": _NUMBER | {"control_after_generate"},
    "FLOAT": _NUMBER | {"round"},
    "STRING": {"multiline", "placeholder", "default", "dynamic_prompts", "socketless", "force_input"},
    "COMBO": {"options", "default", "control_after_generate", "upload", "image_folder", "remote", "socketless"},
}


def _widget_init(self, id: str, display_name: str | None = None, optional: bool = False, tooltip: str | None = None,
                 lazy: bool | None = None, **widget: Any):
    """A widget input takes no extra_dict (ComfyUI 0.3.64's widget inputs do not)."""
    Input.__init__(self, id, display_name, optional, tooltip, lazy, None, **widget)


def _make_type(io_type: str, widget: bool = False) -> type:
    in_cls = type("Input", (Input,), {"io_type": io_type, "is_widget": widget,
                                      "allowed": frozenset(_ALLOWED.get(io_type, ())),
                                      **({"__init__": _widget_init} if widget else {})})
    out_cls = type("Output", (Output,), {"io_type": io_type})
    return type(io_type.title().replace("_", ""), (), {"io_type": io_type, "Input": in_cls, "Output": out_cls})


Boolean = _make_type("BOOLEAN", widget=True)
Int = _make_type("INT", widget=True)
Float = _make_type("FLOAT", widget=True)
String = _make_type("STRING", widget=True)
Combo = _make_type("COMBO", widget=True)
Image = _make_type("IMAGE")
Mask = _make_type("MASK")
Latent = _make_type("LATENT")
Conditioning = _make_type("CONDITIONING")
Model = _make_type("MODEL")
Vae = _make_type("VAE")
Clip = _make_type("CLIP")
Video = _make_type("VIDEO")
Sampler = _make_type("SAMPLER")
Sigmas = _make_type("SIGMAS")
Noise = _make_type("NOISE")
Guider = _make_type("GUIDER")
AnyType = _make_type("*")

class MultiType:
    """An input that takes more than one socket type (ComfyUI 0.3.6x and later): the types' io_types joined by
    commas, as the real `get_io_type` gives them (the frontend links any of them)."""

    class Input(Input):
        def __init__(self, id: str, types: list, display_name: str | None = None, optional: bool = False,
                     tooltip: str | None = None, lazy: bool | None = None, extra_dict: dict | None = None):
            Input.__init__(self, id, display_name, optional, tooltip, lazy, extra_dict)
            self.types = list(types)
            self.io_type = ",".join(dict.fromkeys(t.io_type for t in self.types))


def _input_dict(inputs: list) -> dict:
    """{"required": {id: [type, options]}, "optional": {...}} of a list of inputs (a dynamic combo option's)."""
    out: dict = {"required": {}}
    for i in inputs:
        out.setdefault("optional" if i.optional else "required", {})[i.id] = [i.io_type, i.as_dict()]
    return out


class DynamicCombo:
    """A combo whose chosen option brings inputs of its own (ComfyUI 0.33: Save Video's format -> codec). The prompt
    names them `<combo>.<input>`; `execute` gets the combo as {combo id: chosen key, input id: value, ...}."""

    io_type = "COMFY_DYNAMICCOMBO_V3"

    class Option:
        def __init__(self, key: str, inputs: list):
            self.key, self.inputs = key, list(inputs)

        def as_dict(self) -> dict:
            return {"key": self.key, "inputs": _input_dict(self.inputs)}

    class Input(Input):
        io_type = "COMFY_DYNAMICCOMBO_V3"
        is_widget = True

        def __init__(self, id: str, options: list, display_name: str | None = None, optional: bool = False,
                     tooltip: str | None = None, lazy: bool | None = None, extra_dict: dict | None = None):
            super().__init__(id, display_name, optional, tooltip, lazy, extra_dict)
            self.options = list(options)

        def as_dict(self) -> dict:
            return {**super().as_dict(), "options": [o.as_dict() for o in self.options]}


def build_nested_inputs(values: dict, inputs: list) -> dict:
    """The keyword arguments a V3 node gets: a dynamic combo's dotted keys folded into its dict, at any depth."""
    values = dict(values)

    def fold(inp, key: str) -> dict:
        out = {inp.id: values.pop(key)}
        option = next((o for o in inp.options if o.key == out[inp.id]), None)
        for sub in option.inputs if option is not None else []:
            sub_key = f"{key}.{sub.id}"
            if sub_key in values:
                out[sub.id] = fold(sub, sub_key) if isinstance(sub, DynamicCombo.Input) else values.pop(sub_key)
        return out

    for inp in inputs:
        if isinstance(inp, DynamicCombo.Input) and inp.id in values:
            values[inp.id] = fold(inp, inp.id)
    return values


_CUSTOM: dict[str, type] = {}


def Custom(io_type: str) -> type:
    if io_type not in _CUSTOM:
        _CUSTOM[io_type] = _make_type(io_type)
    return _CUSTOM[io_type]


@dataclass
class Schema:
    node_id: str
    display_name: str | None = None
    category: str = "sd"
    inputs: list = field(default_factory=list)
    outputs: list = field(default_factory=list)
    hidden: list = field(default_factory=list)
    description: str = ""
    is_input_list: bool = False
    is_output_node: bool = False
    is_deprecated: bool = False
    is_experimental: bool = False
    is_api_node: bool = False
    not_idempotent: bool = False
    enable_expand: bool = False

    def validate(self) -> None:
        ids = [i.id for i in self.inputs or []]
        outs = [o.id for o in self.outputs or [] if o.id is not None]
        if len(set(ids)) != len(ids) or len(set(outs)) != len(outs) or set(ids) & set(outs):
            raise ValueError(f"{self.node_id}: input/output ids must be unique")


class NodeOutput:
    def __init__(self, *args: Any, ui: Any = None, expand: dict | None = None, block_execution: str | None = None):
        self.args, self.ui, self.expand, self.block_execution = args, ui, expand, block_execution

    @property
    def result(self):
        return self.args if self.args else None


class HiddenHolder:
    def __init__(self, **values: Any):
        self.unique_id = values.get("unique_id")
        self.prompt = values.get("prompt")
        self.extra_pnginfo = values.get("extra_pnginfo")
        self.dynprompt = values.get("dynprompt")


class ComfyNode:
    hidden: HiddenHolder | None = None

    @classmethod
    def define_schema(cls) -> Schema:
        raise NotImplementedError

    @classmethod
    def execute(cls, **kwargs) -> NodeOutput:
        raise NotImplementedError

    @classmethod
    def GET_SCHEMA(cls) -> Schema:
        schema = cls.define_schema()
        schema.validate()
        return schema
