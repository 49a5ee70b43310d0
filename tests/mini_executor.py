"""A small stand-in for ComfyUI's executor, enough to run the example workflows through the pack's nodes.

It follows ComfyUI's rules where they matter to the pack: demand-driven from output nodes; links resolved to
upstream values, except rawLink inputs (the link itself); lazy inputs passed as None until `check_lazy_status`
asks for them; hidden unique_id/dynprompt/prompt on a class clone; node expansion (GraphBuilder prefix
'<node>.<call>.<graph>.', ephemeral nodes, results resolved through links, duplicate ids refused); and a
CLASSIC-like output cache keyed by class, constants, fingerprint, ancestors' keys (and the node id for nodes
with a hidden unique_id), so a re-queue re-runs only what changed; each `run` has its own prompt id, set as
the executing context around every node (comfy_execution.utils); a dynamic combo's dotted prompt keys
(`format.codec`) reach the node as one nested dict, as ComfyUI 0.33 builds them. Before anything runs, the prompt
is validated as POST /prompt does (execution.py validate_inputs): each node an output needs whose class has its own
`validate_inputs` is asked with the constants it names, None for a linked input it names, and `input_types` (the
types of its linked inputs) when it takes that; an answer other than True refuses the prompt (`PromptInvalid`).
"""
from __future__ import annotations

import inspect
import json
import uuid
from typing import Any


def _host():
    """The (fake) host modules, imported when used: they exist only while `fake_host.installed` is active."""
    from comfy_api.latest import io
    from comfy_execution.graph_utils import GraphBuilder, is_link

    return io, GraphBuilder, is_link


class DynamicPrompt:
    def __init__(self, prompt: dict):
        self.original, self.ephemeral, self.parents, self.display = prompt, {}, {}, {}

    def get_node(self, node_id: str) -> dict:
        if node_id in self.ephemeral:
            return self.ephemeral[node_id]
        return self.original[node_id]

    def has_node(self, node_id: str) -> bool:
        return node_id in self.original or node_id in self.ephemeral

    def add_ephemeral_node(self, node_id: str, info: dict, parent_id: str, display_id: str) -> None:
        self.ephemeral[node_id], self.parents[node_id], self.display[node_id] = info, parent_id, display_id

    def get_real_node_id(self, node_id: str) -> str:
        while node_id in self.parents:
            node_id = self.parents[node_id]
        return node_id

    def get_display_node_id(self, node_id: str) -> str:
        while node_id in self.display:
            node_id = self.display[node_id]
        return node_id

    def get_original_prompt(self) -> dict:
        return self.original


class PromptInvalid(RuntimeError):
    """The prompt was refused at validation (ComfyUI's POST /prompt answers 400 with node_errors): nothing ran."""

    def __init__(self, node_id: str, class_type: str, message: str):
        super().__init__(f"{class_type} {node_id}: {message}")
        self.node_id, self.class_type, self.message = node_id, class_type, message


class MiniExecutor:
    def __init__(self, classes: dict[str, type]):
        self.classes = classes
        self.cache: dict[Any, tuple] = {}  # key -> (outputs, ui)
        self.executed: list[tuple[str, str]] = []

    def validate(self, prompt: dict) -> None:
        """POST /prompt's validation of the nodes the outputs need (see the module docstring); raises PromptInvalid."""
        _, _, is_link = _host()
        seen: set[str] = set()

        def visit(nid: str) -> None:
            if nid in seen:
                return
            seen.add(nid)
            node = prompt[nid]
            for v in node["inputs"].values():
                if is_link(v):
                    visit(v[0])
            check = getattr(self.classes[node["class_type"]], "validate_inputs", None)
            if check is None:
                return
            params = inspect.signature(check).parameters
            anything = any(p.kind is p.VAR_KEYWORD for p in params.values())
            kwargs = {k: (None if is_link(v) else v) for k, v in node["inputs"].items() if anything or k in params}
            if "input_types" in params:
                kwargs["input_types"] = {k: self._schema(prompt[v[0]]["class_type"]).outputs[v[1]].io_type
                                         for k, v in node["inputs"].items() if is_link(v)}
            answer = check(**kwargs)
            if answer is not True:
                raise PromptInvalid(nid, node["class_type"], str(answer))

        for nid, node in prompt.items():
            if self._schema(node["class_type"]).is_output_node:
                visit(nid)

    def run(self, prompt: dict) -> dict[str, dict]:
        """Validate, then execute every output node; returns {node id: ui dict}. `executed` / `cached` list what
        happened (a refused prompt executes nothing)."""
        self.executed = []
        self.validate(prompt)
        self.dyn = DynamicPrompt(prompt)
        self.prompt_id = uuid.uuid4().hex  # like ComfyUI's prompt id: the executing context of every node
        self.values: dict[str, tuple] = {}
        self.ui: dict[str, dict] = {}
        self.cached: list[str] = []
        self._keys: dict[str, Any] = {}
        for nid, node in prompt.items():
            if self._schema(node["class_type"]).is_output_node:
                self.evaluate(nid)
        return self.ui

    def count(self, class_type: str) -> int:
        return sum(1 for _, c in self.executed if c == class_type)

    def _schema(self, class_type: str):
        return self.classes[class_type].GET_SCHEMA()

    def _key(self, nid: str) -> Any:
        io, _, is_link = _host()
        if nid in self._keys:
            return self._keys[nid]
        node = self.dyn.get_node(nid)
        cls, schema = self.classes[node["class_type"]], self._schema(node["class_type"])
        parts: list[Any] = [node["class_type"]]
        consts = {}
        for k in sorted(node["inputs"]):
            v = node["inputs"][k]
            if is_link(v):
                parts.append((k, "link", self._key(v[0]), v[1]))
            else:
                try:
                    parts.append((k, "const", json.dumps(v, sort_keys=True)))
                except TypeError:
                    parts.append((k, "object", object()))  # like ComfyUI's Unhashable: never equal
                consts[k] = v
        if io.Hidden.unique_id in (schema.hidden or []) or schema.not_idempotent:
            parts.append(("id", nid))
        if "fingerprint_inputs" in vars(cls):
            parts.append(("fingerprint", repr(cls.fingerprint_inputs(**consts))))
        key = self._keys[nid] = tuple(parts)
        return key

    def evaluate(self, nid: str) -> tuple:
        io, GraphBuilder, is_link = _host()
        if nid in self.values:
            return self.values[nid]
        node = self.dyn.get_node(nid)
        ct = node["class_type"]
        cls, schema = self.classes[ct], self._schema(ct)
        key = self._key(nid)
        if key in self.cache:
            self.values[nid], ui = self.cache[key]
            if ui:
                self.ui[nid] = ui
            self.cached.append(nid)
            return self.values[nid]
        spec = {i.id: i for i in schema.inputs or []}
        kwargs, pending = {}, {}
        for k, v in node["inputs"].items():
            inp = spec.get(k)
            if inp is None:
                continue
            if is_link(v) and not inp.extra_dict.get("rawLink"):
                if inp.lazy:
                    kwargs[k], pending[k] = None, v
                else:
                    kwargs[k] = self.evaluate(v[0])[v[1]]
            else:
                kwargs[k] = v
        nested = {k: v for k, v in node["inputs"].items() if "." in k}  # a dynamic combo's inputs, as the frontend sends them
        if nested or any(isinstance(i, io.DynamicCombo.Input) for i in spec.values()):
            kwargs = io.build_nested_inputs({**kwargs, **nested}, schema.inputs or [])
        if hasattr(cls, "check_lazy_status"):  # the fake ComfyNode base has none
            while pending:
                asked = cls.check_lazy_status(**kwargs)
                absent = [n for n in asked if n not in node["inputs"]]
                if absent:  # ComfyUI raises NodeInputError when a node asks for an unconnected input
                    raise RuntimeError(f"{ct} {nid} asked for unconnected lazy inputs {absent}")
                need = [n for n in asked if n in pending]
                if not need:
                    break
                for n in need:
                    v = pending.pop(n)
                    kwargs[n] = self.evaluate(v[0])[v[1]]
        clone = type(cls.__name__, (cls,), {"hidden": io.HiddenHolder(unique_id=nid, dynprompt=self.dyn,
                                                                         prompt=self.dyn.original)})
        GraphBuilder.set_default_prefix(nid, 0, 0)
        from comfy_execution.utils import CurrentNodeContext

        with CurrentNodeContext(self.prompt_id, nid):
            out = clone.execute(**kwargs)
        self.executed.append((nid, ct))
        if out.expand is not None:
            if not schema.enable_expand:
                raise RuntimeError(f"{ct} returned expand without enable_expand")
            for new_id, info in out.expand.items():
                if self.dyn.has_node(new_id):
                    raise RuntimeError(f"duplicate node id {new_id} in the expansion of {nid}")
                self.dyn.add_ephemeral_node(new_id, info, nid, info.get("override_display_id", nid))
            for new_id, info in out.expand.items():
                if self._schema(info["class_type"]).is_output_node:
                    self.evaluate(new_id)
            result = tuple(self.evaluate(v[0])[v[1]] if is_link(v) else v for v in out.args)
        else:
            result = tuple(out.args)
        ui = None
        if out.ui is not None:
            ui = out.ui.as_dict() if hasattr(out.ui, "as_dict") else dict(out.ui)
            self.ui[nid] = ui
        self.values[nid] = result
        self.cache[key] = (result, ui)
        return result
