"""RFC 8785 JSON Canonicalization Scheme for parsed JSON values."""

from __future__ import annotations

import json
import math
from decimal import Decimal
from typing import Any


def canonicalize(value: Any) -> str:
    """Return the RFC 8785 form of a JSON value (dict, list, str, int, float, bool, None)."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, (int, float)):
        return _number(float(value))
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(canonicalize(v) for v in value) + "]"
    if isinstance(value, dict):
        for k in value:
            if not isinstance(k, str):
                raise ValueError("JSON object keys must be strings")
        # Members sorted by the UTF-16 code units of their names.
        keys = sorted(value, key=_utf16)
        return "{" + ",".join(json.dumps(k, ensure_ascii=False) + ":" + canonicalize(value[k]) for k in keys) + "}"
    raise ValueError(f"{type(value).__name__} is not a JSON value")


def _utf16(key: str) -> bytes:
    return key.encode("utf-16-be", "surrogatepass")


def _number(x: float) -> str:
    # ECMAScript Number.prototype.toString of the double x (RFC 8785 3.2.2.3).
    if math.isnan(x) or math.isinf(x):
        raise ValueError("NaN and Infinity are not JSON numbers")
    if x == 0:
        return "0"
    sign = "-" if x < 0 else ""
    # repr gives the shortest digits that round-trip, as ECMAScript does.
    _, digit_tuple, exp = Decimal(repr(abs(x))).as_tuple()
    digits = "".join(map(str, digit_tuple)).rstrip("0")
    assert isinstance(exp, int)
    exp += len("".join(map(str, digit_tuple))) - len(digits)
    k = len(digits)
    n = k + exp  # the value is 0.digits * 10**n
    if k <= n <= 21:
        s = digits + "0" * (n - k)
    elif 0 < n <= 21:
        s = digits[:n] + "." + digits[n:]
    elif -6 < n <= 0:
        s = "0." + "0" * (-n) + digits
    else:
        e = n - 1
        mant = digits if k == 1 else digits[0] + "." + digits[1:]
        s = mant + "e" + ("+" if e >= 0 else "-") + str(abs(e))
    return sign + s
