"""Fake graph expansion helpers with ComfyUI's id scheme: '<expanding node>.<call index>.<graph index>.<id>'."""
from __future__ import annotations


def is_link(obj) -> bool:
    return (isinstance(obj, list) and len(obj) == 2 and isinstance(obj[0], str)
            and isinstance(obj[1], (int, float)) and not isinstance(obj[1], bool))


class Node:
    def __init__(self, id: str, class_type: str, inputs: dict):
        self.id, self.class_type, self.inputs = id, class_type, dict(inputs)
        self.override_display_id = None

    def out(self, index: int) -> list:
        return [self.id, index]

    def set_input(self, key: str, value) -> None:
        if value is None:
            self.inputs.pop(key, None)
        else:
            self.inputs[key] = value

    def get_input(self, key: str):
        return self.inputs.get(key)

    def set_override_display_id(self, display_id: str) -> None:
        self.override_display_id = display_id

    def serialize(self) -> dict:
        d = {"class_type": self.class_type, "inputs": self.inputs}
        if self.override_display_id is not None:
            d["override_display_id"] = self.override_display_id
        return d


class GraphBuilder:
    _root, _call, _graph = "", 0, 0

    def __init__(self, prefix: str | None = None):
        if prefix is None:
            prefix = f"{GraphBuilder._root}.{GraphBuilder._call}.{GraphBuilder._graph}."
            GraphBuilder._graph += 1
        self.prefix, self.nodes, self._next = prefix, {}, 1

    @classmethod
    def set_default_prefix(cls, root: str, call_index: int, graph_index: int = 0) -> None:
        cls._root, cls._call, cls._graph = root, call_index, graph_index

    def node(self, class_type: str, id: str | None = None, **kwargs) -> Node:
        if id is None:
            id, self._next = str(self._next), self._next + 1
        full = self.prefix + id
        if full not in self.nodes:
            self.nodes[full] = Node(full, class_type, kwargs)
        return self.nodes[full]

    def lookup_node(self, id: str) -> Node | None:
        return self.nodes.get(self.prefix + id)

    def finalize(self) -> dict:
        return {nid: n.serialize() for nid, n in self.nodes.items()}
