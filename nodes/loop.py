"""Loop over the blocks with ComfyUI graph expansion: the user builds one block's body between Loop Start and
Loop End; while blocks remain, Loop End splices in a copy of that body plus another Loop End.

The copies are wired with links (not Python values), so ComfyUI can cache every expanded node by its inputs:
re-queueing an unchanged graph re-runs nothing, and moving tau re-runs the nodes downstream of the first
route node while the engine's memo returns every unchanged block without model calls.
"""
from __future__ import annotations

from comfy_api.latest import io, ui
from comfy_execution.graph_utils import GraphBuilder, is_link

from .session import Run
from .surface import CAT_LOOP, SDVGError, SDVGLoop, SDVGState

END_ID = "loop_end"  # id suffix of the next Loop End inside an expansion


class SDVGLoopStart(io.ComfyNode):
    """Opens the per-block loop body: passes the state on and marks where the body begins."""

    @classmethod
    def define_schema(cls) -> io.Schema:
        return io.Schema(
            node_id="SDVGLoopStart", display_name="SDVG Loop Start", category=CAT_LOOP,
            description="Start of the per-block loop. Wire one block's nodes (Draft -> Decode -> Score -> Route) "
                        "from its 'state' to SDVG Loop End; they repeat until every block is committed.",
            inputs=[SDVGState.Input("state", tooltip="the state from SDVG Start")],
            outputs=[SDVGLoop.Output(display_name="loop", tooltip="connect to SDVG Loop End's 'loop' input"),
                     SDVGState.Output(display_name="state", tooltip="the state before this iteration's block")],
        )

    @classmethod
    def execute(cls, state: Run) -> io.NodeOutput:
        spec = state.state.spec
        b = state.state.next_block
        text = f"block {b} of {spec.num_blocks}"
        if spec.schedule.switches and b < spec.num_blocks:  # the schedule's prompt for this block (part of the state's spec)
            text += f", prompt {spec.segment_of(b)}: {spec.prompt_at(b).text[:60]!r}"
        return io.NodeOutput(f"sdvg-loop:{b}", state, ui=ui.PreviewText(text))


def _body(dynprompt, start_id: str, end_id: str) -> list[str]:
    """Ids of the nodes on a path from the loop start to the loop end (both included)."""
    parents: dict[str, list[str]] = {}  # node -> its children, for ancestors of end only
    seen: set[str] = set()
    stack = [end_id]
    while stack:
        nid = stack.pop()
        if nid in seen:
            continue
        seen.add(nid)
        for v in dynprompt.get_node(nid)["inputs"].values():
            if is_link(v):
                parents.setdefault(v[0], []).append(nid)
                stack.append(v[0])
    if start_id not in seen:
        return []
    body, stack = [], [start_id]
    while stack:
        nid = stack.pop()
        if nid in body:
            continue
        body.append(nid)
        stack.extend(parents.get(nid, []))
    return body


class SDVGLoopEnd(io.ComfyNode):
    """Closes the loop: returns the state when every block is committed, else expands one more iteration."""

    @classmethod
    def define_schema(cls) -> io.Schema:
        return io.Schema(
            node_id="SDVGLoopEnd", display_name="SDVG Loop End", category=CAT_LOOP,
            description="End of the per-block loop: repeats the body between SDVG Loop Start and here until all "
                        "blocks are committed, then outputs the final state.",
            inputs=[SDVGLoop.Input("loop", tooltip="the 'loop' output of SDVG Loop Start", extra_dict={"rawLink": True}),
                    SDVGState.Input("state", tooltip="the state after this iteration's block (from SDVG Route)")],
            outputs=[SDVGState.Output(display_name="state", tooltip="the final state, for SDVG Finish")],
            hidden=[io.Hidden.unique_id, io.Hidden.dynprompt],
            enable_expand=True,
        )

    @classmethod
    def execute(cls, loop, state: Run) -> io.NodeOutput:
        st = state.state
        if st.pending is not None:
            raise SDVGError("SDVG Loop End: the state still has an undecided draft; connect SDVG Route's output "
                                 "to Loop End's 'state'")
        if st.done:
            return io.NodeOutput(state)
        me, dynprompt = cls.hidden.unique_id, cls.hidden.dynprompt
        if me.count(END_ID) > st.spec.num_blocks:
            raise SDVGError("SDVG Loop End: the loop body does not commit blocks; put SDVG Route between "
                                 "SDVG Loop Start and SDVG Loop End")
        if not is_link(loop) or dynprompt.get_node(loop[0])["class_type"] != "SDVGLoopStart":
            raise SDVGError("SDVG Loop End: connect its 'loop' input to SDVG Loop Start's 'loop' output")
        body = _body(dynprompt, loop[0], me)
        if not body:
            raise SDVGError("SDVG Loop End: its 'state' does not come from SDVG Loop Start's chain")
        g = GraphBuilder()
        name = {nid: (END_ID if nid == me else dynprompt.get_display_node_id(nid)) for nid in body}
        for nid in body:
            node = g.node(dynprompt.get_node(nid)["class_type"], name[nid])
            node.set_override_display_id(dynprompt.get_display_node_id(nid))
        for nid in body:
            node = g.lookup_node(name[nid])
            for k, v in dynprompt.get_node(nid)["inputs"].items():
                node.set_input(k, g.lookup_node(name[v[0]]).out(v[1]) if is_link(v) and v[0] in name else v)
        # the next iteration starts from the link feeding this node's state (a link keeps the copy cacheable)
        g.lookup_node(name[loop[0]]).set_input("state", dynprompt.get_node(me)["inputs"]["state"])
        return io.NodeOutput(g.lookup_node(END_ID).out(0), expand=g.finalize())
