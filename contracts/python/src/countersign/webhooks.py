"""Receiving Countersign's webhooks (Standard Webhooks v1, HMAC-SHA256).

A receiver reads the raw body, verifies it before decoding anything, drops
a ``webhook-id`` it has processed already (delivery is at least once), and
answers 2xx quickly::

    receiver = WebhookReceiver(os.environ["COUNTERSIGN_WEBHOOK_SECRET"], on_decision=resume)
    status = receiver.handle(request_headers, raw_body)   # 204, or 400/401 for a bad webhook
"""

from __future__ import annotations

import base64
import binascii
import collections
import hashlib
import hmac
import json
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, List, Mapping, Optional, Union

from .errors import WebhookVerificationError, codes
from .types import Decision

SECRET_PREFIX = "whsec_"
DEFAULT_TOLERANCE = 300.0
"""How far (seconds) a webhook-timestamp may be from the receiver's clock, either way."""

Secrets = Union[str, bytes, Iterable[Union[str, bytes]]]


def parse_secret(secret: Union[str, bytes]) -> bytes:
    """Decodes a signing secret: ``whsec_`` and standard base64 of 24 to 64
    bytes (the prefix may be left out). Raw bytes are taken as the key.
    The error never contains the secret."""
    if isinstance(secret, bytes):
        key = secret
    else:
        s = secret.strip()
        if s.startswith(SECRET_PREFIX):
            s = s[len(SECRET_PREFIX):]
        try:
            key = base64.b64decode(s, validate=True)
        except (binascii.Error, ValueError):
            raise WebhookVerificationError(codes.INVALID_SECRET,
                                           "the secret is not whsec_ followed by standard base64") from None
    if not 24 <= len(key) <= 64:
        raise WebhookVerificationError(codes.INVALID_SECRET, f"the secret decodes to {len(key)} bytes, want 24 to 64")
    return key


def sign(secret: Union[str, bytes], msg_id: str, timestamp: int, body: bytes) -> str:
    """The ``v1,<base64>`` signature of body sent as msg_id at timestamp."""
    return "v1," + base64.b64encode(_mac(parse_secret(secret), msg_id, timestamp, body)).decode()


def _mac(key: bytes, msg_id: str, timestamp: int, body: bytes) -> bytes:
    return hmac.new(key, f"{msg_id}.{timestamp}.".encode() + body, hashlib.sha256).digest()


def _header(headers: Any, name: str) -> str:
    getter = getattr(headers, "get_all", None)  # email.message.Message, http.client headers
    if callable(getter):
        values = getter(name) or []
        return " ".join(str(v) for v in values)
    if isinstance(headers, Mapping):
        for k, v in headers.items():
            if isinstance(k, str) and k.lower() == name:
                return " ".join(v) if isinstance(v, (list, tuple)) else str(v)
    return ""


def _keys(secrets: Secrets) -> List[bytes]:
    if isinstance(secrets, (str, bytes)):
        return [parse_secret(secrets)]
    return [parse_secret(s) for s in secrets]


def verify_webhook(secret: Secrets, headers: Any, body: bytes, *, tolerance: float = DEFAULT_TOLERANCE,
                   now: Optional[float] = None) -> Any:
    """Verifies a webhook and returns its decoded JSON body.

    ``secret`` is one secret or several (during a rotation); ``headers`` any
    mapping of the request's headers (names in any case); ``body`` the raw
    bytes as received. The timestamp must be within ``tolerance`` seconds of
    ``now`` (default: the clock) either way; any ``v1`` signature may match
    any secret, compared in constant time. Raises
    :class:`WebhookVerificationError` (codes missing_headers,
    bad_timestamp, too_old, too_new, no_matching_signature, invalid_secret).
    """
    keys = _keys(secret)
    if isinstance(body, str):
        raise TypeError("verify_webhook needs the raw body as bytes")
    msg_id, ts = _header(headers, "webhook-id").strip(), _header(headers, "webhook-timestamp").strip()
    sigs = _header(headers, "webhook-signature").split()
    if not msg_id or not ts or not sigs:
        raise WebhookVerificationError(codes.MISSING_HEADERS,
                                       "missing webhook-id, webhook-timestamp or webhook-signature")
    if not ts.isdigit() or not ts.isascii() or len(ts) > 18:
        raise WebhookVerificationError(codes.BAD_TIMESTAMP, "webhook-timestamp is not unix seconds")
    sent = int(ts)
    now = time.time() if now is None else now
    if now - sent > tolerance:
        raise WebhookVerificationError(codes.TOO_OLD, "webhook-timestamp is too old")
    if sent - now > tolerance:
        raise WebhookVerificationError(codes.TOO_NEW, "webhook-timestamp is too far in the future")
    want = [_mac(k, msg_id, sent, body) for k in keys]
    ok = False
    for s in sigs:
        version, _, b64 = s.partition(",")
        if version != "v1":
            continue
        try:
            got = base64.b64decode(b64, validate=True)
        except (binascii.Error, ValueError):
            continue
        for w in want:
            ok |= hmac.compare_digest(got, w)
    if not ok:
        raise WebhookVerificationError(codes.NO_MATCHING_SIGNATURE, "no matching signature")
    try:
        return json.loads(body)
    except ValueError:
        raise WebhookVerificationError(codes.BAD_ANSWER, "the webhook's body is not JSON") from None


@dataclass(frozen=True)
class Webhook:
    """A verified webhook."""

    id: str
    """webhook-id: the same for every delivery of one notification."""
    kind: str
    """countersign-kind: requested, reminder.<n> or decided."""
    payload: Any


class WebhookReceiver:
    """Verifies webhooks, drops repeated deliveries, and hands every decision
    to ``on_decision`` (and every verified webhook to ``on_webhook``).

    :meth:`handle` returns the HTTP status to answer: 204 when handled (or a
    repeat), 401 for a signature or timestamp that does not verify, 400 for a
    body that is not a Countersign event. If a callback raises, the webhook
    is not remembered and the exception propagates: answer 5xx and the
    notifier delivers it again.
    """

    def __init__(self, secret: Secrets, *, on_decision: Optional[Callable[[Decision], None]] = None,
                 on_webhook: Optional[Callable[[Webhook], None]] = None, tolerance: float = DEFAULT_TOLERANCE,
                 remember: int = 10_000) -> None:
        self._keys = _keys(secret)
        self._on_decision = on_decision
        self._on_webhook = on_webhook
        self._tolerance = tolerance
        self._remember = remember
        self._seen: "collections.OrderedDict[str, float]" = collections.OrderedDict()
        self._lock = threading.Lock()

    def handle(self, headers: Any, body: bytes, *, now: Optional[float] = None) -> int:
        try:
            payload = verify_webhook(self._keys, headers, body, tolerance=self._tolerance, now=now)
        except WebhookVerificationError as e:
            return 400 if e.code == codes.BAD_ANSWER else 401
        msg_id = _header(headers, "webhook-id").strip()
        with self._lock:
            if msg_id in self._seen:
                return 204
        if not isinstance(payload, dict):
            return 400
        hook = Webhook(id=msg_id, kind=_header(headers, "countersign-kind").strip(), payload=payload)
        if self._on_webhook is not None:
            self._on_webhook(hook)
        if payload.get("spec") == "countersign.approval.decided/v1" and self._on_decision is not None:
            self._on_decision(Decision.from_json(payload))
        with self._lock:
            self._seen[msg_id] = time.time()
            while len(self._seen) > self._remember:
                self._seen.popitem(last=False)
        return 204
