"""Stable identities of hosted models, for the shared memo's keys: the same weights give the same key across node
re-executions (so a re-queue finds its cached results); different weights never share one."""
from __future__ import annotations

import os
import uuid
import weakref
from typing import Any


def file_key(path: str, *extra: str) -> str:
    """Identity of weights read from a file: a changed file (mtime/size) or dtype gives a new key."""
    st = os.stat(path)
    return "|".join(("file", os.path.realpath(path), str(st.st_mtime_ns), str(st.st_size), *extra))


_TOKENS: "weakref.WeakKeyDictionary[Any, str]" = weakref.WeakKeyDictionary()


def object_token(obj: Any) -> str:
    """A uuid per live host object (never reused, unlike id()), for memo keys of ComfyUI-loaded models."""
    tok = _TOKENS.get(obj)
    if tok is None:
        tok = _TOKENS[obj] = uuid.uuid4().hex
    return tok
