"""Tool calls as models emit them: OpenAI, Anthropic, or Countersign's own."""

from __future__ import annotations

import json
from typing import Any, Mapping, Protocol, Union, cast, runtime_checkable

from .errors import InvalidToolCall
from .types import JSONObject, ToolCall


@runtime_checkable
class SupportsModelDump(Protocol):
    """An SDK object (pydantic) that turns into its JSON shape."""

    def model_dump(self) -> Mapping[str, Any]: ...


ToolCallLike = Union[ToolCall, Mapping[str, Any], SupportsModelDump]
"""A tool call in any shape :func:`to_tool_call` reads."""


def to_tool_call(call: ToolCallLike) -> ToolCall:
    """Reads a tool call as a model emitted it:

    - OpenAI Chat Completions: ``{"id", "type": "function", "function": {"name", "arguments": "<JSON>"}}``
    - OpenAI Responses: ``{"type": "function_call", "call_id", "name", "arguments": "<JSON>"}``
    - Anthropic: ``{"type": "tool_use", "id", "name", "input": {...}}``
    - Countersign: ``{"id", "name", "arguments": {...}, "tool_schema": {...}}``

    SDK objects with ``model_dump()`` are read as their dict. Arguments must
    be a JSON object (an OpenAI arguments string must decode to one).
    """
    raw: object = call
    if isinstance(raw, SupportsModelDump) and not isinstance(raw, Mapping):
        raw = raw.model_dump()
    if not isinstance(raw, Mapping):
        raise InvalidToolCall(f"a tool call must be a mapping, got {type(raw).__name__}")
    m = cast(Mapping[str, Any], raw)
    kind = m.get("type")
    if kind == "function" and isinstance(m.get("function"), Mapping):
        fn = m["function"]
        return _make(m.get("id"), fn.get("name"), _decode(fn.get("arguments"), "function.arguments"), None)
    if kind == "function_call":
        return _make(m.get("call_id"), m.get("name"), _decode(m.get("arguments"), "arguments"), None)
    if kind == "tool_use":
        return _make(m.get("id"), m.get("name"), _decode(m.get("input"), "input"), None)
    if kind is not None:
        raise InvalidToolCall(f"unknown tool call type {kind!r}", "type")
    return _make(m.get("id"), m.get("name"), _decode(m.get("arguments"), "arguments"), m.get("tool_schema"))


def _make(call_id: Any, name: Any, args: JSONObject, schema: Any) -> ToolCall:
    if not isinstance(name, str) or not name.strip():
        raise InvalidToolCall("a tool call needs a name", "name")
    if call_id is not None and not isinstance(call_id, str):
        raise InvalidToolCall("a tool call's id must be a string", "id")
    out: ToolCall = {"name": name, "arguments": args}
    if call_id:
        out["id"] = call_id
    if schema is not None:
        if not isinstance(schema, Mapping):
            raise InvalidToolCall("tool_schema must be a JSON Schema object", "tool_schema")
        out["tool_schema"] = dict(schema)
    return out


def _decode(args: Any, field: str) -> JSONObject:
    if args is None or args == "":
        return {}
    if isinstance(args, (str, bytes)):
        try:
            args = json.loads(args)
        except ValueError as e:
            raise InvalidToolCall(f"{field} is not valid JSON: {e}", field) from None
    if not isinstance(args, Mapping):
        raise InvalidToolCall(f"{field} must be a JSON object", field)
    return dict(args)
