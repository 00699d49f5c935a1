"""The approval statement an approver signs with a passkey, and the check of its WebAuthn assertion (as
contracts/passkey does in Go). Signatures are ES256 (``countersign._p256``) or EdDSA
(``countersign._ed25519``)."""

from __future__ import annotations

import base64
import binascii
import calendar
import hashlib
import hmac
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from . import _ed25519, _p256
from ._jcs import canonicalize
from ._strictjson import loads

STATEMENT_SPEC = "countersign.statement/v1"
# How far after a receipt's iat a statement's time may be, in seconds.
CLOCK_SKEW = 30

_FIELDS = frozenset({"spec", "event_id", "approver", "tool", "arguments_sha256", "decision",
                     "edited_arguments_sha256", "at"})
_REQUIRED = ("event_id", "approver", "tool", "arguments_sha256", "decision", "at")
_TIME = re.compile(r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})Z")
_B64URL = re.compile(r"[A-Za-z0-9_-]+")


class InvalidAssertion(ValueError):
    """An assertion or statement that does not hold; the message says what failed."""


def b64url_decode(s: str) -> bytes:
    """Strict base64url without padding: the canonical encoding of some non-empty bytes."""
    if not isinstance(s, str) or not _B64URL.fullmatch(s) or len(s) % 4 == 1:
        raise ValueError("not base64url")
    try:
        out = base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))
    except (binascii.Error, ValueError) as e:
        raise ValueError("not base64url") from e
    if base64.urlsafe_b64encode(out).rstrip(b"=").decode() != s:
        raise ValueError("not canonical base64url")
    return out


def statement_time(st: Mapping[str, str]) -> int:
    """The statement's time in Unix seconds; ValueError when ``at`` is not a valid YYYY-MM-DDTHH:MM:SSZ."""
    m = _TIME.fullmatch(st.get("at", ""))
    if not m:
        raise ValueError("not YYYY-MM-DDTHH:MM:SSZ")
    y, mo, d, h, mi, s = (int(g) for g in m.groups())
    if not (1 <= mo <= 12 and 1 <= d <= calendar.monthrange(y, mo)[1] and h <= 23 and mi <= 59 and s <= 59):
        raise ValueError("not a valid time")
    return calendar.timegm((y, mo, d, h, mi, s, 0, 0, 0))


def effective_sha256(st: Mapping[str, str]) -> str:
    """The hash of the arguments the statement approves to run: the edit's, or else those under review."""
    return st.get("edited_arguments_sha256") or st["arguments_sha256"]


def parse_statement(text: str) -> dict[str, str]:
    """Read a statement in its canonical form, strictly: unknown fields, missing fields, a value that is not a
    string, another spec or a text that is not the statement's canonical JSON are errors."""
    try:
        st = loads(text)
    except ValueError as e:
        raise InvalidAssertion(f"statement: {e}") from e
    if not isinstance(st, dict):
        raise InvalidAssertion("statement: not a JSON object")
    for k, v in st.items():
        if k not in _FIELDS:
            raise InvalidAssertion(f"statement: unknown field {k!r}")
        if not isinstance(v, str):
            raise InvalidAssertion(f"statement: {k} is not a string")
    if st.get("spec") != STATEMENT_SPEC:
        raise InvalidAssertion(f"statement: spec {st.get('spec')!r}, want {STATEMENT_SPEC}")
    for f in _REQUIRED:
        if not st.get(f):
            raise InvalidAssertion(f"statement: {f} is required")
    try:
        statement_time(st)
    except ValueError:
        raise InvalidAssertion(f"statement: at {st['at']!r} is not YYYY-MM-DDTHH:MM:SSZ") from None
    # The canonical form leaves an empty edited_arguments_sha256 out.
    canonical = canonicalize({k: v for k, v in st.items() if not (k == "edited_arguments_sha256" and v == "")})
    if canonical != text:
        raise InvalidAssertion("statement: not in canonical form (RFC 8785)")
    return st


def verify_assertion(a: Mapping[str, str], key: Mapping[str, Any], rp_id: str,
                     origins: Sequence[str]) -> dict[str, str]:
    """Check that ``a`` is a valid WebAuthn assertion, by the passkey whose public key (a JWK) is ``key``,
    bound to the relying party ``rp_id`` used from ``origins``, over the statement it carries, and return
    that statement. The checks: the statement is canonical; the client data (no key named twice) is of type
    webauthn.get, its challenge is the statement's SHA-256, its origin one of ``origins`` and not
    cross-origin; the authenticator data is for ``rp_id`` with the user present and verified; the
    signature over the authenticator data and the client data's hash verifies with ``key``. What the
    statement says, and when, is the caller's to check. Raises InvalidAssertion."""
    statement = a.get("statement") or ""
    st = parse_statement(statement)
    verify_signature = _public_key(key)
    try:
        auth = b64url_decode(a.get("authenticator_data") or "")
        client = b64url_decode(a.get("client_data_json") or "")
        sig = b64url_decode(a.get("signature") or "")
    except ValueError:
        raise InvalidAssertion("authenticator_data, client_data_json and signature must be base64url") from None
    _check_client_data(client, statement, origins)
    _check_authenticator_data(auth, rp_id)
    if not verify_signature(auth + hashlib.sha256(client).digest(), sig):
        raise InvalidAssertion("the signature does not verify with the passkey's public key")
    return st


def _check_client_data(data: bytes, statement: str, origins: Sequence[str]) -> None:
    try:
        cd = loads(data.decode("utf-8"))
    except ValueError as e:  # UnicodeDecodeError is a ValueError
        raise InvalidAssertion(f"client data: {e}") from e
    if not isinstance(cd, dict):
        raise InvalidAssertion("client data is not a JSON object")
    for f in ("type", "challenge", "origin"):
        if cd.get(f) is not None and not isinstance(cd[f], str):
            raise InvalidAssertion(f"client data: {f} is not a string")
    if cd.get("crossOrigin") is not None and not isinstance(cd["crossOrigin"], bool):
        raise InvalidAssertion("client data: crossOrigin is not a boolean")
    if cd.get("type") != "webauthn.get":
        raise InvalidAssertion(f"client data type {cd.get('type')!r}, want webauthn.get")
    try:
        got = b64url_decode(cd.get("challenge") or "")
    except ValueError:
        got = b""
    if not hmac.compare_digest(got, hashlib.sha256(statement.encode("utf-8")).digest()):
        raise InvalidAssertion("the assertion's challenge is not the SHA-256 of the statement it carries")
    if cd.get("origin") not in origins:
        raise InvalidAssertion(f"origin {cd.get('origin')!r} is not one of the inbox's")
    if cd.get("crossOrigin") is True:
        raise InvalidAssertion("the assertion was made in a cross-origin frame")


def _check_authenticator_data(auth: bytes, rp_id: str) -> None:
    if len(auth) < 37:
        raise InvalidAssertion(f"authenticator data is {len(auth)} bytes, at least 37 expected")
    if not hmac.compare_digest(auth[:32], hashlib.sha256(rp_id.encode("utf-8")).digest()):
        raise InvalidAssertion(f"the assertion is for another relying party than {rp_id!r}")
    flags = auth[32]
    if not flags & 0x01 or not flags & 0x04:
        raise InvalidAssertion(f"the authenticator did not verify the user (flags {flags:#04x})")


def _public_key(k: Mapping[str, Any]) -> Callable[[bytes, bytes], bool]:
    """The signature check of a passkey's JWK: EC P-256 (ES256) or OKP Ed25519 (EdDSA). A point off the
    curve is an error."""
    kty, crv, alg = k.get("kty"), k.get("crv"), k.get("alg") or ""
    try:
        x = b64url_decode(k.get("x") or "")
    except ValueError:
        x = b""
    if kty == "EC" and crv == "P-256" and alg in ("", "ES256"):
        try:
            y = b64url_decode(k.get("y") or "")
        except ValueError:
            y = b""
        if len(x) != 32 or len(y) != 32:
            raise InvalidAssertion("public key: x and y must be 32 bytes of base64url")
        px, py = int.from_bytes(x, "big"), int.from_bytes(y, "big")
        if not _p256.on_curve(px, py):
            raise InvalidAssertion("public key: the point is not on the P-256 curve")
        return lambda signed, sig: _p256.verify(px, py, hashlib.sha256(signed).digest(), sig)
    if kty == "OKP" and crv == "Ed25519" and alg in ("", "EdDSA"):
        if len(x) != 32 or k.get("y"):
            raise InvalidAssertion("public key: x must be 32 bytes of base64url")
        return lambda signed, sig: _ed25519.verify(x, signed, sig)
    raise InvalidAssertion(f"public key: kty {kty!r} crv {crv!r} alg {alg!r} is not ES256 (EC P-256) or EdDSA "
                           "(OKP Ed25519)")
