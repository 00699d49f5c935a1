"""Verify Countersign receipts: the signed countersignature a tool checks before it runs a call.

A receipt is a compact JWS (EdDSA over Ed25519, RFC 8037) the arbiter signs when an approved call
is claimed. ``verify_receipt`` checks it against the tool's own name and the arguments it is about
to run, with the issuer's public keys (``JWKSFetcher`` for ``/.well-known/jwks.json``, or a pinned
``KeySet``), and uses up its id in a replay store. With ``humans`` it also requires the approvers' own
passkey signatures, checked against the signed approvers document (``ApproversFetcher``, or
``parse_approvers`` once). Every refusal is a ``ReceiptError`` subclass with a stable ``code``.
Standard library only: Ed25519 is ``countersign._ed25519``, ECDSA P-256 ``countersign._p256``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import re
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from . import _ed25519, _webauthn
from ._jcs import canonicalize
from ._strictjson import no_duplicates as _no_duplicates

TYPE = "countersign-receipt+jwt"
ALGORITHM = "EdDSA"
DEFAULT_ISSUER = "countersign"
HEADER = "Countersign-Receipt"
MAX_RECEIPT_BYTES = 16 << 10


class ReceiptError(Exception):
    """A receipt was refused. ``code`` is stable; ``status`` is the HTTP status to answer with."""

    code = "receipt_unavailable"
    status = 503

    def __init__(self, message: str) -> None:
        super().__init__(f"receipt: {message}")


class MissingReceipt(ReceiptError):
    code, status = "receipt_missing", 401


class MalformedReceipt(ReceiptError):
    code, status = "receipt_malformed", 401


class UnknownKey(ReceiptError):
    code, status = "receipt_unknown_key", 401


class BadSignature(ReceiptError):
    code, status = "receipt_bad_signature", 401


class WrongIssuer(ReceiptError):
    code, status = "receipt_wrong_issuer", 401


class ExpiredReceipt(ReceiptError):
    code, status = "receipt_expired", 401


class WrongTool(ReceiptError):
    code, status = "receipt_wrong_tool", 403


class BasisNotAccepted(ReceiptError):
    code, status = "receipt_basis_not_accepted", 403


class ArgumentsDiffer(ReceiptError):
    code, status = "receipt_arguments_differ", 403


class SignaturesMissing(ReceiptError):
    """The tool requires approvers' own signatures (``humans``) and the receipt carries fewer distinct signers
    than it requires: a receipt the server signed alone."""

    code, status = "receipt_signatures_missing", 403


class SignatureInvalid(ReceiptError):
    """An approver's signature in the receipt does not hold: it does not verify, is by an unknown or revoked
    passkey, is stale, or signs another call, arguments or decision."""

    code, status = "receipt_signature_invalid", 403


class ReplayedReceipt(ReceiptError):
    code, status = "receipt_replayed", 409


class KeySource(Protocol):
    def key(self, kid: str) -> bytes:
        """Return the raw 32-byte Ed25519 public key ``kid`` names, or raise UnknownKey."""
        ...


class ReplayStore(Protocol):
    def use(self, receipt_id: str, until: float) -> None:
        """Mark ``receipt_id`` used until ``until`` (Unix seconds); raise ReplayedReceipt if it was.

        Must be atomic across the tool's replicas when they share it."""
        ...


def _b64decode(s: str) -> bytes:
    if not s or "=" in s or not all(c.isalnum() or c in "-_" for c in s):
        raise ValueError("not base64url")
    try:
        return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))
    except (binascii.Error, ValueError) as e:
        raise ValueError("not base64url") from e


class KeySet:
    """Pinned public keys by key id, read from a JWKS. Keys that are not Ed25519 signing keys are skipped."""

    def __init__(self, keys: Mapping[str, bytes]) -> None:
        self._keys = dict(keys)

    @classmethod
    def from_jwks(cls, jwks: str | bytes | Mapping[str, Any]) -> KeySet:
        try:
            doc = json.loads(jwks) if isinstance(jwks, (str, bytes)) else jwks
        except ValueError as e:
            raise MalformedReceipt(f"JWKS: {e}") from e
        keys = doc.get("keys") if isinstance(doc, Mapping) else None
        if not isinstance(keys, list):
            raise MalformedReceipt("JWKS: no keys member")
        out: dict[str, bytes] = {}
        for i, k in enumerate(keys):
            if not isinstance(k, Mapping) or k.get("kty") != "OKP" or k.get("crv") != "Ed25519":
                continue
            if k.get("use", "sig") != "sig" or k.get("alg", ALGORITHM) != ALGORITHM:
                continue
            kid, x = k.get("kid"), k.get("x")
            if not isinstance(kid, str) or not kid:
                raise MalformedReceipt(f"JWKS: keys[{i}] has no kid")
            try:
                raw = _b64decode(x) if isinstance(x, str) else b""
            except ValueError:
                raw = b""
            if len(raw) != 32:
                raise MalformedReceipt(f"JWKS: keys[{i}].x is not a 32-byte base64url key")
            if kid in out:
                raise MalformedReceipt(f"JWKS: kid {kid!r} appears twice")
            out[kid] = raw
        return cls(out)

    def key(self, kid: str) -> bytes:
        try:
            return self._keys[kid]
        except KeyError:
            raise UnknownKey(f"no key {kid!r} in the key set") from None

    def __len__(self) -> int:
        return len(self._keys)


class JWKSFetcher:
    """Fetches the issuer's JWKS over HTTP and caches it for ``ttl`` seconds.

    A kid the cached set lacks fetches again, at most once per ``min_refresh`` seconds (a key added by a
    rotation). Fails closed: a set older than ``ttl`` that cannot be fetched again is an error."""

    def __init__(self, url: str, *, ttl: float = 300, min_refresh: float = 10, timeout: float = 10,
                 clock: Any = time.time) -> None:
        self._url, self._ttl, self._min_refresh, self._timeout, self._clock = url, ttl, min_refresh, timeout, clock
        self._lock = threading.Lock()
        self._set: KeySet | None = None
        self._fetched = 0.0
        self._tried = float("-inf")

    def key(self, kid: str) -> bytes:
        with self._lock:
            now = self._clock()
            if self._set is None or now - self._fetched >= self._ttl:
                self._fetch(now)
            assert self._set is not None
            try:
                return self._set.key(kid)
            except UnknownKey:
                if now - self._tried < self._min_refresh:
                    raise
            self._fetch(now)
            return self._set.key(kid)

    def _fetch(self, now: float) -> None:
        self._tried = now
        req = urllib.request.Request(self._url, headers={"Accept": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=self._timeout) as resp:  # noqa: S310 (the configured URL)
                data = resp.read(1 << 20)
        except OSError as e:
            raise ReceiptError(f"fetch JWKS {self._url}: {e}") from e
        self._set, self._fetched = KeySet.from_jwks(data), now


class MemoryReplayStore:
    """An in-memory ReplayStore: receipts are single-use within this process."""

    def __init__(self, clock: Any = time.time) -> None:
        self._seen: dict[str, float] = {}
        self._lock = threading.Lock()
        self._clock = clock

    def use(self, receipt_id: str, until: float) -> None:
        with self._lock:
            now = self._clock()
            for k in [k for k, t in self._seen.items() if t < now]:
                del self._seen[k]
            if receipt_id in self._seen:
                raise ReplayedReceipt(f"receipt {receipt_id} was already used")
            self._seen[receipt_id] = until


DEFAULT_REPLAY_STORE = MemoryReplayStore()


class ServerReplayStore:
    """A ReplayStore kept by Countersign: each use asks the API (``POST /v1/receipts/use``) to record the
    receipt's id, and the first use of an id wins. Every replica of a tool that verifies with a
    ServerReplayStore of the same Countersign refuses a receipt another replica used, and a restarted
    replica still refuses it, for as long as the receipt is valid: what a tool with several replicas, or one
    that restarts, uses instead of the in-memory default.

    ``url`` is the API's base URL, ``token`` any valid bearer token of it. It fails closed: a replay raises
    :class:`ReplayedReceipt` (409); an API that cannot be asked or answers otherwise raises
    :class:`ReceiptError` (``receipt_unavailable``, 503). A use is not retried: a retry after a lost answer
    would find the receipt used, by itself. The API refuses an ``until`` more than two hours ahead."""

    def __init__(self, url: str, token: str, *, timeout: float = 10) -> None:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"ServerReplayStore: url {url!r} is not an http(s) URL")
        if not token:
            raise ValueError("ServerReplayStore: a token is required")
        self._endpoint = url.rstrip("/") + "/v1/receipts/use"
        self._token, self._timeout = token, timeout

    def use(self, receipt_id: str, until: float) -> None:
        exp = int(until) + (1 if until > int(until) else 0)
        body = json.dumps({"jti": receipt_id, "exp": exp}).encode()
        req = urllib.request.Request(self._endpoint, data=body, method="POST", headers={
            "Authorization": "Bearer " + self._token, "Content-Type": "application/json",
            "Accept": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=self._timeout) as resp:  # noqa: S310 (the configured URL)
                status, data = resp.status, resp.read(64 << 10)
        except urllib.error.HTTPError as e:
            status, data = e.code, e.read(64 << 10)
        except (OSError, ValueError) as e:
            raise ReceiptError(f"replay store {self._endpoint}: {e}") from e
        try:
            answer = json.loads(data or b"{}")
        except ValueError:
            answer = {}
        err = answer.get("error") if isinstance(answer, dict) else None
        code = err.get("code") if isinstance(err, dict) else None
        if status == 200 and isinstance(answer, dict) and answer.get("used") is True:
            return
        if status == 409 and code == ReplayedReceipt.code:
            raise ReplayedReceipt(f"receipt {receipt_id} was already used")
        raise ReceiptError(f"replay store {self._endpoint}: {code or 'HTTP'} ({status})")


def arguments_sha256(arguments: Any) -> str:
    """The hex SHA-256 of the RFC 8785 form of tool-call arguments (a JSON value, or its text as bytes)."""
    if isinstance(arguments, (bytes, bytearray)):
        arguments = json.loads(arguments.decode("utf-8") or "{}", object_pairs_hook=_no_duplicates)
    _check_safe_integers(arguments, "")
    return hashlib.sha256(canonicalize(arguments).encode("utf-8")).hexdigest()


_MAX_SAFE_INTEGER = 2**53 - 1


def _check_safe_integers(value: Any, path: str) -> None:
    """Refuse an integer beyond ±(2^53−1), as the server does: the hash is over its nearest double, while
    Python keeps the exact integer the tool would run."""
    if isinstance(value, bool):
        return
    if isinstance(value, int):
        if abs(value) > _MAX_SAFE_INTEGER:
            raise ValueError(f"the integer at {path or '/'} is beyond ±(2^53−1); a double would round it")
    elif isinstance(value, dict):
        for k, v in value.items():
            _check_safe_integers(v, path + "/" + str(k).replace("~", "~0").replace("/", "~1"))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _check_safe_integers(v, f"{path}/{i}")


def inspect_receipt(receipt: str | None, *, keys: KeySource, issuer: str = DEFAULT_ISSUER,
                    now: float | None = None, leeway: float = 0) -> dict[str, Any]:
    """Check a receipt's signature, issuer and times and return its claims (not tool, arguments or replay)."""
    receipt = (receipt or "").strip()
    if not receipt:
        raise MissingReceipt("no receipt")
    if len(receipt) > MAX_RECEIPT_BYTES:
        raise MalformedReceipt(f"longer than {MAX_RECEIPT_BYTES} bytes")
    parts = receipt.split(".")
    if len(parts) != 3:
        raise MalformedReceipt("not a compact JWS (header.payload.signature)")
    header = _part(parts[0], "header")
    if header.get("alg") != ALGORITHM:
        raise MalformedReceipt(f"alg {header.get('alg')!r}, want {ALGORITHM}")
    if header.get("typ") != TYPE:
        raise MalformedReceipt(f"typ {header.get('typ')!r}, want {TYPE}")
    kid = header.get("kid")
    if not isinstance(kid, str) or not kid:
        raise MalformedReceipt("no kid in the header")
    if header.get("crit"):
        raise MalformedReceipt("critical header parameters are not understood")
    public = keys.key(kid)
    try:
        sig = _b64decode(parts[2])
    except ValueError:
        sig = b""
    if len(sig) != 64 or not _ed25519.verify(public, (parts[0] + "." + parts[1]).encode("ascii"), sig):
        raise BadSignature(f"the signature does not verify with key {kid!r}")
    claims = _part(parts[1], "payload")
    _check_claims(claims)
    if not hmac.compare_digest(str(claims["iss"]).encode(), issuer.encode()):
        raise WrongIssuer(f"issuer {claims['iss']!r}, want {issuer!r}")
    t = time.time() if now is None else now
    if t >= claims["exp"] + leeway:
        raise ExpiredReceipt(f"expired at {claims['exp']}")
    if t + leeway < claims["iat"]:
        raise ExpiredReceipt(f"issued in the future ({claims['iat']})")
    return claims


def verify_receipt(receipt: str | None, tool: str, arguments: Any, *, keys: KeySource,
                   replay: ReplayStore | None = None, issuer: str = DEFAULT_ISSUER,
                   now: float | None = None, leeway: float = 0,
                   bases: Collection[str] = (), humans: Humans | None = None) -> dict[str, Any]:
    """Verify that ``receipt`` allows running ``tool`` with ``arguments`` now, once, and return its claims.

    ``arguments`` is the JSON value about to run (or its JSON text as bytes). ``bases`` are how a call
    must have been allowed for the tool to run it ("approval", "grant", "policy"; empty: any). ``humans``
    requires the approvers' own passkey signatures (see :class:`Humans`). Raises MissingReceipt,
    MalformedReceipt, UnknownKey, BadSignature, WrongIssuer, ExpiredReceipt, WrongTool, BasisNotAccepted,
    ArgumentsDiffer, SignaturesMissing, SignatureInvalid or ReplayedReceipt (all ReceiptError). Only a
    receipt that passes every other check uses up its id."""
    claims = inspect_receipt(receipt, keys=keys, issuer=issuer, now=now, leeway=leeway)
    if not hmac.compare_digest(claims["tool"].encode(), tool.encode()):
        raise WrongTool(f"the receipt is for tool {claims['tool']!r}, not {tool!r}")
    if bases and claims["basis"] not in bases:
        raise BasisNotAccepted(f"the call was allowed by {claims['basis']}; this tool accepts {', '.join(bases)}")
    try:
        sha = arguments_sha256(arguments)
    except ValueError as e:
        raise ArgumentsDiffer(f"the arguments are not valid JSON: {e}") from e
    if not hmac.compare_digest(sha.encode(), claims["args_sha256"].encode()):
        raise ArgumentsDiffer(f"the arguments' SHA-256 is {sha}, the receipt allows {claims['args_sha256']}")
    if humans is not None:
        _check_humans(claims, humans, leeway)
    (replay or DEFAULT_REPLAY_STORE).use(claims["jti"], claims["exp"] + leeway)
    return claims


def _part(s: str, name: str) -> dict[str, Any]:
    try:
        value = json.loads(_b64decode(s).decode("utf-8"), object_pairs_hook=_no_duplicates)
    except ValueError as e:
        raise MalformedReceipt(f"{name}: {e}") from e
    if not isinstance(value, dict):
        raise MalformedReceipt(f"{name} is not a JSON object")
    return value


def _check_claims(c: dict[str, Any]) -> None:
    missing = [n for n in ("iss", "jti", "agent", "tool", "args_sha256", "basis") if not isinstance(c.get(n), str) or not c[n]]
    missing += [n for n in ("iat", "exp") if not isinstance(c.get(n), int) or isinstance(c.get(n), bool) or c[n] <= 0]
    if missing:
        raise MalformedReceipt(f"claims {', '.join(missing)} are required")
    if c["exp"] <= c["iat"]:
        raise MalformedReceipt("exp must be after iat")
    if c["basis"] not in ("approval", "grant", "policy"):
        raise MalformedReceipt(f"basis {c['basis']!r} is not approval, grant or policy")
    sha = c["args_sha256"]
    if len(sha) != 64 or any(ch not in "0123456789abcdef" for ch in sha):
        raise MalformedReceipt("args_sha256 must be 64 lowercase hex digits")
    q = c.get("quorum")
    if q is not None and (not isinstance(q, dict) or not all(
            q.get(n) is None or (isinstance(q[n], int) and not isinstance(q[n], bool)) for n in ("required", "approvals"))):
        raise MalformedReceipt("quorum must be an object of integers required and approvals")
    if c.get("step_up") not in (None, "", "passkey"):
        raise MalformedReceipt(f"step_up {c['step_up']!r} is not passkey")
    sigs = c.get("signatures")
    if sigs is not None:
        fields = ("statement", "credential_id", "authenticator_data", "client_data_json", "signature")
        if not isinstance(sigs, list) or not all(
                a is None or (isinstance(a, dict) and all(a.get(f) is None or isinstance(a[f], str) for f in fields))
                for a in sigs):
            raise MalformedReceipt("signatures must be a list of passkey assertions")
        if sigs and c["basis"] != "approval":
            raise MalformedReceipt(f"signatures on a {c['basis']} receipt: only humans' approvals are signed")


APPROVERS_TYPE = "countersign-approvers+jwt"
"""The typ header of the approvers document: refused as a receipt, as a receipt is refused as it."""


@dataclass(frozen=True)
class ApproverKey:
    """One person's passkey in the approvers document."""

    person: str
    credential_id: str
    public_key: Mapping[str, Any]
    """A JWK: EC P-256 (ES256) or OKP Ed25519 (EdDSA)."""
    created_at: str
    revoked_at: str | None = None
    """Set when the passkey was revoked: its signatures no longer count."""


@dataclass(frozen=True)
class Approvers:
    """The approvers document (``/.well-known/countersign-approvers``): every enrolled passkey, revoked ones
    included, and the relying party they are bound to, signed with a receipt key. A document parsed once
    (:func:`parse_approvers`) is its own ApproverSource: a pinned copy."""

    issuer: str
    issued_at: int
    expires_at: int
    rp_id: str
    origins: tuple[str, ...]
    keys: tuple[ApproverKey, ...]

    def approvers(self) -> Approvers:
        return self

    def key(self, credential_id: str) -> ApproverKey | None:
        """The passkey with ``credential_id``, if the document lists it (revoked ones too)."""
        found = None
        for k in self.keys:
            if hmac.compare_digest(k.credential_id.encode(), credential_id.encode()) and found is None:
                found = k
        return found


class ApproverSource(Protocol):
    def approvers(self) -> Approvers:
        """Return the approvers document to check signatures against, or raise ReceiptError."""
        ...


def parse_approvers(token: str | bytes, keys: KeySource, *, issuer: str = DEFAULT_ISSUER,
                    now: float | None = None) -> Approvers:
    """Check an approvers document's signature with ``keys`` (the receipt keys), its type, its issuer and that
    it is current at ``now``, and return it. Raises MalformedReceipt, UnknownKey, BadSignature, WrongIssuer or
    ExpiredReceipt."""
    if isinstance(token, bytes):
        try:
            token = token.decode("utf-8")
        except UnicodeDecodeError:
            raise MalformedReceipt("approvers document: not a compact JWS") from None
    parts = token.strip().split(".")
    if len(parts) != 3:
        raise MalformedReceipt("approvers document: not a compact JWS")
    header = _part(parts[0], "approvers header")
    kid = header.get("kid")
    if header.get("alg") != ALGORITHM or header.get("typ") != APPROVERS_TYPE or not isinstance(kid, str) or not kid \
            or header.get("crit"):
        raise MalformedReceipt(f"approvers document: header alg {header.get('alg')!r} typ {header.get('typ')!r}, "
                               f"want {ALGORITHM} {APPROVERS_TYPE} with a kid")
    public = keys.key(kid)
    try:
        sig = _b64decode(parts[2])
    except ValueError:
        sig = b""
    if len(sig) != 64 or not _ed25519.verify(public, (parts[0] + "." + parts[1]).encode("ascii"), sig):
        raise BadSignature(f"the approvers document's signature does not verify with key {kid!r}")
    d = _approvers_of(_part(parts[1], "approvers payload"))
    if not hmac.compare_digest(d.issuer.encode(), issuer.encode()):
        raise WrongIssuer(f"approvers document of issuer {d.issuer!r}, want {issuer!r}")
    if (time.time() if now is None else now) >= d.expires_at:
        raise ExpiredReceipt(f"the approvers document expired at {d.expires_at}")
    if not d.rp_id or not d.origins:
        raise MalformedReceipt("approvers document: rp_id and origins are required")
    return d


_RFC3339 = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})")


def _approvers_of(p: dict[str, Any]) -> Approvers:
    def bad(what: str) -> MalformedReceipt:
        return MalformedReceipt(f"approvers document: {what}")

    def text(v: Any) -> str:
        if v is None:
            return ""
        if not isinstance(v, str):
            raise bad("a string field holds another type")
        return v

    def integer(v: Any) -> int:
        if v is None:
            return 0
        if not isinstance(v, int) or isinstance(v, bool):
            raise bad("iat and exp must be integers")
        return v

    origins, entries = p.get("origins") or [], p.get("approvers") or []
    if not isinstance(origins, list) or not all(isinstance(o, str) for o in origins):
        raise bad("origins must be a list of strings")
    if not isinstance(entries, list):
        raise bad("approvers must be a list")
    keys: list[ApproverKey] = []
    for e in entries:
        if not isinstance(e, dict):
            raise bad("approvers must be a list of objects")
        pk = e.get("public_key") or {}
        if not isinstance(pk, dict) or not all(pk.get(f) is None or isinstance(pk[f], str) for f in ("kty", "crv", "alg", "x", "y")):
            raise bad("an approver's public_key is not a JWK")
        created, revoked = text(e.get("created_at")), e.get("revoked_at")
        if (created and not _RFC3339.fullmatch(created)) or (revoked is not None and not _RFC3339.fullmatch(text(revoked))):
            raise bad("created_at and revoked_at must be RFC 3339 times")
        keys.append(ApproverKey(person=text(e.get("person")), credential_id=text(e.get("credential_id")),
                                public_key=pk, created_at=created, revoked_at=revoked))
    return Approvers(issuer=text(p.get("iss")), issued_at=integer(p.get("iat")), expires_at=integer(p.get("exp")),
                     rp_id=text(p.get("rp_id")), origins=tuple(origins), keys=tuple(keys))


class ApproversFetcher:
    """An ApproverSource that fetches the approvers document over HTTP, verifies it (:func:`parse_approvers`)
    with the receipt ``keys`` and caches it for ``ttl`` seconds (default 60: a revoked passkey stops passing
    at most that long after its revocation). It fails closed: a document that cannot be fetched
    (``receipt_unavailable``) or does not verify is an error, and a cached copy is not used past its TTL or
    its exp."""

    def __init__(self, url: str, *, keys: KeySource, issuer: str = DEFAULT_ISSUER, ttl: float = 60,
                 timeout: float = 10, clock: Any = time.time) -> None:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"ApproversFetcher: url {url!r} is not an http(s) URL")
        self._url, self._keys, self._issuer, self._ttl, self._timeout, self._clock = url, keys, issuer, ttl, timeout, clock
        self._lock = threading.Lock()
        self._doc: Approvers | None = None
        self._fetched = 0.0

    def approvers(self) -> Approvers:
        with self._lock:
            now = self._clock()
            if self._doc is not None and now - self._fetched < self._ttl and now < self._doc.expires_at:
                return self._doc
            req = urllib.request.Request(self._url, headers={"Accept": "application/jwt"})
            try:
                with urllib.request.urlopen(req, timeout=self._timeout) as resp:  # noqa: S310 (the configured URL)
                    status, data = resp.status, resp.read(4 << 20)
            except (OSError, ValueError) as e:  # urllib.error.HTTPError is an OSError
                raise ReceiptError(f"fetch approvers {self._url}: {e}") from e
            if status != 200:
                raise ReceiptError(f"fetch approvers {self._url}: HTTP {status}")
            self._doc, self._fetched = parse_approvers(data, self._keys, issuer=self._issuer, now=now), now
            return self._doc


@dataclass(frozen=True)
class Humans:
    """What ``verify_receipt(..., humans=...)`` requires: at least ``min`` distinct people (and at least the
    quorum the receipt says the rule required) each signed, with a passkey listed and not revoked in
    ``approvers``, the approval statement of exactly this call: this event and tool, the arguments about to
    run, the decision approve or edit. A receipt without them (a policy or grant receipt, or one the server's
    key signed alone) raises SignaturesMissing, and one with any signature that does not hold raises
    SignatureInvalid.

    ``approvers`` is an :class:`ApproversFetcher`, or a document parsed once with :func:`parse_approvers` and
    pinned (against a compromised server, which could publish a key of its own). ``people``, when set, are
    the only person ids whose signatures count. ``max_age`` bounds how long before the receipt was issued a
    statement may have been signed, in seconds (default 24 hours)."""

    min: int
    approvers: ApproverSource
    people: Collection[str] = field(default=())
    max_age: float = 24 * 3600


def _check_humans(c: dict[str, Any], h: Humans, leeway: float) -> None:
    need = max(1, h.min)
    q = c.get("quorum")
    if isinstance(q, dict):
        need = max(need, q.get("required") or 0)
    sigs = c.get("signatures") or []
    if c["basis"] != "approval" or c.get("step_up") != "passkey" or not sigs:
        raise SignaturesMissing(f"the tool requires {need} approver signature(s) and the receipt (basis {c['basis']}) "
                                "carries none")
    doc = h.approvers.approvers()
    max_age = h.max_age or 24 * 3600
    people: list[str] = []
    for i, a in enumerate(sigs):
        try:
            person = _check_signature(a or {}, c, doc, h, max_age, leeway)
        except _webauthn.InvalidAssertion as e:
            raise SignatureInvalid(f"signature {i}: {e}") from e
        if person not in people:
            people.append(person)
    if len(people) < need:
        raise SignaturesMissing(f"{len(people)} distinct approver(s) signed ({', '.join(people)}); the tool requires {need}")


def _check_signature(a: Mapping[str, Any], c: dict[str, Any], doc: Approvers, h: Humans, max_age: float,
                     leeway: float) -> str:
    """Check one assertion of c against doc and return whose it is (InvalidAssertion otherwise)."""
    fail = _webauthn.InvalidAssertion
    k = doc.key(a.get("credential_id") or "")
    if k is None:
        raise fail("by a passkey the approvers document does not list")
    if k.revoked_at is not None:
        raise fail(f"by {k.person}'s passkey revoked at {k.revoked_at}")
    if h.people and k.person not in h.people:
        raise fail(f"by {k.person}, whom this tool does not accept")
    st = _webauthn.verify_assertion(a, k.public_key, doc.rp_id, doc.origins)
    if st["approver"] != k.person:
        raise fail(f"the statement names {st['approver']}, the passkey is {k.person}'s")
    if st["event_id"] != (c.get("event_id") or "") or st["tool"] != c["tool"]:
        raise fail(f"the statement is for {st['tool']} on {st['event_id']}, the receipt for {c['tool']} on "
                   f"{c.get('event_id') or ''}")
    if st["decision"] not in ("approve", "edit"):
        raise fail(f"the statement's decision is {st['decision']}")
    if _webauthn.effective_sha256(st) != c["args_sha256"]:
        raise fail(f"the statement approves arguments {_webauthn.effective_sha256(st)}, the receipt allows "
                   f"{c['args_sha256']}")
    t = _webauthn.statement_time(st)
    if t > c["iat"] + _webauthn.CLOCK_SKEW + leeway:
        raise fail(f"the statement ({st['at']}) is dated after the receipt was issued")
    if c["iat"] - t > max_age + leeway:
        raise fail(f"the statement ({st['at']}) is more than {max_age:g} s older than the receipt")
    return k.person
