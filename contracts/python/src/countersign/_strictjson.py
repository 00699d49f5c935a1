"""JSON reading for what a verifier trusts: an object that names a key twice is refused, so two JSON
readers never see different claims."""

from __future__ import annotations

import json
from typing import Any


def no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An ``object_pairs_hook`` for ``json.loads`` that refuses a key named twice."""
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise ValueError(f"duplicate key {k!r}")
        out[k] = v
    return out


def loads(text: str | bytes) -> Any:
    """``json.loads`` that refuses duplicate keys (ValueError)."""
    return json.loads(text, object_pairs_hook=no_duplicates)
