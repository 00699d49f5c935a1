"""Receipts the approvers signed with their passkeys (``verify_receipt(..., humans=...)``): the shared cases the
Go and TypeScript verifiers check too (contracts/testdata/receipts/humans.json), ECDSA P-256, assertions a
software authenticator makes here, and the approvers document's fetcher against a local HTTP server."""

from __future__ import annotations

import base64
import hashlib
import http.server
import json
import pathlib
import threading
import unittest
from typing import Any, Callable

from countersign import _ed25519, _p256
from countersign.receipts import (APPROVERS_TYPE, ApproversFetcher, Humans, KeySet, MemoryReplayStore, ReceiptError,
                                  inspect_receipt, parse_approvers, verify_receipt)

F = json.loads((pathlib.Path(__file__).parents[2] / "testdata" / "receipts" / "humans.json").read_text())
KEYS = KeySet.from_jwks(F["jwks"])
VALID = next(c for c in F["cases"] if c["name"] == "alice (ES256) and bob (EdDSA) signed")
SERVER_ONLY = next(c for c in F["cases"] if c["name"] == "the server's key alone, no step-up")


def b64(b: bytes) -> str:
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


def unb64(s: str) -> bytes:
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))


def code_of(fn: Callable[[], Any]) -> tuple[str, str]:
    try:
        fn()
    except ReceiptError as e:
        return e.code, str(e)
    return "ok", ""


def verify(c: dict[str, Any], humans: Humans, receipt: str | None = None, now: float | None = None) -> tuple[str, str]:
    t = c["now"] if now is None else now
    return code_of(lambda: verify_receipt(receipt or c["receipt"], c["tool"], c["arguments"], keys=KEYS,
                                          issuer=F["issuer"], now=t, replay=MemoryReplayStore(clock=lambda: t),
                                          humans=humans))


class SharedHumansCasesTest(unittest.TestCase):
    def test_cases(self) -> None:
        for c in F["cases"]:
            with self.subTest(c["name"]):
                doc = parse_approvers(F["approvers"], KEYS, issuer=F["issuer"], now=c["now"])
                code, why = verify(c, Humans(min=c["min"], people=c.get("people", ()), approvers=doc))
                self.assertEqual(code, c["expect"], why)

    def test_approvers_document_is_not_a_receipt_nor_a_receipt_the_document(self) -> None:
        now = VALID["now"]
        self.assertEqual(code_of(lambda: inspect_receipt(F["approvers"], keys=KEYS, now=now))[0], "receipt_malformed")
        self.assertEqual(code_of(lambda: parse_approvers(VALID["receipt"], KEYS, now=now))[0], "receipt_malformed")
        doc = parse_approvers(F["approvers"], KEYS, now=now)
        self.assertEqual(doc.rp_id, "inbox.example.com")
        self.assertEqual(code_of(lambda: parse_approvers(F["approvers"], KEYS, now=doc.expires_at))[0], "receipt_expired")
        self.assertEqual(code_of(lambda: parse_approvers(F["approvers"], KEYS, now=now, issuer="another"))[0],
                         "receipt_wrong_issuer")
        self.assertEqual(code_of(lambda: parse_approvers(F["approvers"], KeySet({}), now=now))[0], "receipt_unknown_key")
        h, p, s = F["approvers"].split(".")
        flipped = s[:10] + ("B" if s[10] == "A" else "A") + s[11:]
        self.assertEqual(code_of(lambda: parse_approvers(f"{h}.{p}.{flipped}", KEYS, now=now))[0], "receipt_bad_signature")
        self.assertEqual(json.loads(unb64(h))["typ"], APPROVERS_TYPE)


# A P-256 signature OpenSSL made: `openssl dgst -sha256 -sign` of MESSAGE.
OPENSSL_PUB = bytes.fromhex("04a290980125ae18c4df059d01080bfe71b01c5019c72b79899503b4a651e93c477cc333ab9b67f70cabd5064e379"
                            "7bbb39298a75b1dad56f63ca8f0cc36307fb3")
OPENSSL_SIG = bytes.fromhex("3045022100b844b58d41b1ed212193c9fdc8cf6a7cc4fa3e51d4c79ba8aef5b2d89c866dcb02204c1627969cbe"
                            "846fdbbe73684e6564b9210ed197ade6f2910db025ffb0fe90c2")
MESSAGE = b"countersign p-256 vector"


def der(r: int, s: int) -> bytes:
    def integer(v: int) -> bytes:
        b = v.to_bytes(33, "big").lstrip(b"\0") or b"\0"
        if b[0] & 0x80:
            b = b"\0" + b
        return bytes([0x02, len(b)]) + b

    body = integer(r) + integer(s)
    return bytes([0x30, len(body)]) + body


class P256Test(unittest.TestCase):
    x = int.from_bytes(OPENSSL_PUB[1:33], "big")
    y = int.from_bytes(OPENSSL_PUB[33:], "big")
    digest = hashlib.sha256(MESSAGE).digest()

    def test_openssl_signature_verifies_and_altered_ones_do_not(self) -> None:
        self.assertTrue(_p256.verify(self.x, self.y, self.digest, OPENSSL_SIG))
        self.assertFalse(_p256.verify(self.x, self.y, hashlib.sha256(MESSAGE + b"x").digest(), OPENSSL_SIG))
        r, s = _p256.parse_der_signature(OPENSSL_SIG) or (0, 0)
        self.assertFalse(_p256.verify(self.x, self.y, self.digest, der(r, s ^ 1)))
        self.assertFalse(_p256.verify(self.x, self.y, self.digest, der(r ^ 1, s)))
        # ECDSA does not fix s: n − s verifies as s does (as in Go and Web Crypto).
        self.assertTrue(_p256.verify(self.x, self.y, self.digest, der(r, _p256.N - s)))
        # r or s out of [1, n−1].
        for rr, ss in ((0, s), (r, 0), (r + _p256.N, s), (r, s + _p256.N), (_p256.N, s)):
            self.assertFalse(_p256.verify(self.x, self.y, self.digest, der(rr, ss)))

    def test_public_key_off_the_curve(self) -> None:
        self.assertFalse(_p256.on_curve(self.x, self.y + 1))
        self.assertFalse(_p256.verify(self.x, self.y + 1, self.digest, OPENSSL_SIG))
        self.assertFalse(_p256.on_curve(self.x + _p256.P, self.y))

    def test_only_strict_der(self) -> None:
        sig = OPENSSL_SIG
        for bad in (sig + b"\0",                                   # a trailing byte
                    sig[:1] + bytes([sig[1] + 1]) + sig[2:] + b"\0",  # trailing inside the sequence
                    b"\x30\x81" + bytes([len(sig) - 2]) + sig[2:],  # a long-form length
                    sig[:4] + b"\x02\x22\x00" + sig[6:],            # a malformed integer length
                    b"\x31" + sig[1:],                              # a SET
                    sig[:2] + b"\x03" + sig[3:]):                   # a BIT STRING for r
            self.assertIsNone(_p256.parse_der_signature(bad), bad.hex())
        # s (0x4c16…, high bit clear) with a needless leading zero.
        r_enc, s_bytes = sig[2:2 + 2 + sig[3]], sig[-32:]
        self.assertEqual(sig[-34:-32], b"\x02\x20")
        body = r_enc + b"\x02\x21\x00" + s_bytes
        self.assertIsNone(_p256.parse_der_signature(bytes([0x30, len(body)]) + body))
        self.assertIsNotNone(_p256.parse_der_signature(bytes([0x30, len(body) - 1]) + r_enc + b"\x02\x20" + s_bytes))


# A software authenticator for the fixtures' passkeys, whose keys derive from seeds as
# contracts/passkey/passkeytest makes them, and the fixtures' receipt key.
def sha(b: bytes | str) -> bytes:
    return hashlib.sha256(b.encode() if isinstance(b, str) else b).digest()


def ed25519_sign(seed: bytes, msg: bytes) -> tuple[bytes, bytes]:
    """(public key, signature) of msg by the Ed25519 key of seed (RFC 8032, 5.1.6)."""
    h = hashlib.sha512(seed).digest()
    a = (int.from_bytes(h[:32], "little") & ((1 << 254) - 8)) | (1 << 254)
    pub = _ed25519._encode(_ed25519._mul(a, _ed25519._B))  # type: ignore[arg-type]
    r = int.from_bytes(hashlib.sha512(h[32:] + msg).digest(), "little") % _ed25519._L
    big_r = _ed25519._encode(_ed25519._mul(r, _ed25519._B))  # type: ignore[arg-type]
    k = int.from_bytes(hashlib.sha512(big_r + pub + msg).digest(), "little") % _ed25519._L
    return pub, big_r + ((r + k * a) % _ed25519._L).to_bytes(32, "little")


def p256_sign(d: int, msg: bytes, high_s: bool = False) -> bytes:
    e = int.from_bytes(sha(msg), "big")
    k = int.from_bytes(hashlib.sha256(b"nonce" + d.to_bytes(32, "big") + msg).digest(), "big") % _p256.N
    g = (_p256.GX, _p256.GY, 1)
    x, _, z = _p256._shamir(k, g, 0, g)
    r = x * pow(z * z, -1, _p256.P) % _p256.P % _p256.N
    s = pow(k, -1, _p256.N) * (e + r * d) % _p256.N
    if (s > _p256.N // 2) != high_s:
        s = _p256.N - s
    return der(r, s)


def server_sign(claims: dict[str, Any]) -> str:
    head = b64(json.dumps({"alg": "EdDSA", "typ": "countersign-receipt+jwt", "kid": F["jwks"]["keys"][0]["kid"]}).encode())
    body = b64(json.dumps(claims).encode())
    pub, sig = ed25519_sign(sha("countersign receipt fixture key 2026-01"), f"{head}.{body}".encode())
    assert b64(pub) == F["jwks"]["keys"][0]["x"]
    return f"{head}.{body}.{b64(sig)}"


DOC = json.loads(unb64(F["approvers"].split(".")[1]))
CLAIMS = json.loads(unb64(VALID["receipt"].split(".")[1]))


def key_of(person: str, kty: str) -> dict[str, Any]:
    return next(k for k in DOC["approvers"] if k["person"] == person and k["public_key"]["kty"] == kty)


def statement_for(who: str, **over: str) -> dict[str, str]:
    st = {"approver": who, "arguments_sha256": CLAIMS["args_sha256"], "at": "2025-12-31T23:58:00Z",
          "decision": "approve", "event_id": CLAIMS["event_id"], "spec": "countersign.statement/v1",
          "tool": CLAIMS["tool"]}
    st.update(over)
    return st


def canonical(st: dict[str, str]) -> str:
    return json.dumps(st, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def assertion(who: str, *, statement: dict[str, str] | None = None, statement_text: str | None = None,
              client_data: str | None = None, flags: int = 0x05, rp_id: str | None = None, high_s: bool = False,
              mangle: Callable[[dict[str, str]], None] | None = None) -> dict[str, str]:
    k = key_of(who, "EC" if who == "alice" else "OKP")
    text = statement_text if statement_text is not None else canonical(statement or statement_for(who))
    client = client_data if client_data is not None else json.dumps(
        {"type": "webauthn.get", "challenge": b64(sha(text)), "origin": "https://inbox.example.com", "crossOrigin": False})
    auth = sha(rp_id or DOC["rp_id"]) + bytes([flags, 0, 0, 0, 7])
    signed = auth + sha(client)
    if who == "alice":
        sig = p256_sign(int.from_bytes(sha("es256 alice"), "big"), signed, high_s)
    else:
        pub, sig = ed25519_sign(sha("eddsa bob"), signed)
        assert b64(pub) == k["public_key"]["x"]
    a = {"statement": text, "credential_id": k["credential_id"], "authenticator_data": b64(auth),
         "client_data_json": b64(client.encode()), "signature": b64(sig)}
    if mangle:
        mangle(a)
    return a


def flip(s: str, i: int) -> str:
    b = bytearray(unb64(s))
    b[i] ^= 1
    return b64(bytes(b))


def verify_signed(alice: dict[str, str], bob: dict[str, str], **over: Any) -> tuple[str, str]:
    tok = server_sign({**CLAIMS, "signatures": [alice, bob], **over})
    doc = parse_approvers(F["approvers"], KEYS, now=VALID["now"])
    return verify(VALID, Humans(min=2, approvers=doc), receipt=tok)


class AssertionsMadeHereTest(unittest.TestCase):
    def test_fresh_assertions_pass(self) -> None:
        self.assertEqual(verify_signed(assertion("alice"), assertion("bob"))[0], "ok")
        self.assertEqual(verify_signed(assertion("alice", high_s=True), assertion("bob"))[0], "ok")
        late = assertion("bob", statement=statement_for("bob", at="2026-01-01T00:00:30Z"))
        self.assertEqual(verify_signed(assertion("alice"), late)[0], "ok")

    def test_refused(self) -> None:
        def client(who: str, **cd: Any) -> str:
            base = {"type": "webauthn.get", "challenge": b64(sha(canonical(statement_for(who)))),
                    "origin": "https://inbox.example.com"}
            base.update(cd)
            return json.dumps(base)

        def auth_flip(a: dict[str, str]) -> None:
            a["authenticator_data"] = flip(a["authenticator_data"], 36)

        def sig_flip(a: dict[str, str]) -> None:
            a["signature"] = flip(a["signature"], 10)

        def sig_trailing(a: dict[str, str]) -> None:
            a["signature"] = b64(unb64(a["signature"]) + b"\0")

        twice = client("bob").replace('{"type": "webauthn.get"', '{"type": "webauthn.create", "type": "webauthn.get"')
        cases: list[tuple[str, str, Callable[[], tuple[dict[str, str], dict[str, str]]]]] = [
            ("ES256: authenticator data changed after signing", "signature 0: the signature does not verify",
             lambda: (assertion("alice", mangle=auth_flip), assertion("bob"))),
            ("EdDSA: authenticator data changed after signing", "signature 1: the signature does not verify",
             lambda: (assertion("alice"), assertion("bob", mangle=auth_flip))),
            ("ES256: the signature changed", "signature 0: the signature does not verify",
             lambda: (assertion("alice", mangle=sig_flip), assertion("bob"))),
            ("ES256: DER with a trailing byte", "signature 0: the signature does not verify",
             lambda: (assertion("alice", mangle=sig_trailing), assertion("bob"))),
            ("EdDSA: the signature changed", "signature 1: the signature does not verify",
             lambda: (assertion("alice"), assertion("bob", mangle=sig_flip))),
            ("client data naming a key twice", "duplicate key",
             lambda: (assertion("alice"), assertion("bob", client_data=twice))),
            ("client data of type webauthn.create", "want webauthn.get",
             lambda: (assertion("alice"), assertion("bob", client_data=client("bob", type="webauthn.create")))),
            ("an assertion in a cross-origin frame", "cross-origin",
             lambda: (assertion("alice"), assertion("bob", client_data=client("bob", crossOrigin=True)))),
            ("a statement not in canonical form", "not in canonical form",
             lambda: (assertion("alice"), assertion("bob", statement_text=json.dumps(statement_for("bob"), indent=1)))),
            ("a statement with a field of another name", "unknown field",
             lambda: (assertion("alice"), assertion("bob", statement={**statement_for("bob"), "note": "x"}))),
            ("the user present but not verified", "did not verify the user",
             lambda: (assertion("alice", flags=0x01), assertion("bob"))),
            ("the user verified but not present", "did not verify the user",
             lambda: (assertion("alice", flags=0x04), assertion("bob"))),
            ("an assertion for another relying party", "another relying party",
             lambda: (assertion("alice", rp_id="evil.example"), assertion("bob"))),
            ("a statement dated a minute after the receipt", "dated after the receipt",
             lambda: (assertion("alice"), assertion("bob", statement=statement_for("bob", at="2026-01-01T00:01:00Z")))),
            ("a statement dated on a day that does not exist", "is not YYYY-MM-DDTHH:MM:SSZ",
             lambda: (assertion("alice"), assertion("bob", statement=statement_for("bob", at="2025-11-31T23:58:00Z")))),
        ]
        for name, why, make in cases:
            with self.subTest(name):
                code, msg = verify_signed(*make())
                self.assertEqual(code, "receipt_signature_invalid", msg)
                self.assertIn(why, msg)

    def test_signatures_on_a_policy_receipt_are_malformed(self) -> None:
        tok = server_sign({**CLAIMS, "basis": "policy", "signatures": [assertion("alice")]})
        self.assertEqual(code_of(lambda: inspect_receipt(tok, keys=KEYS, now=VALID["now"]))[0], "receipt_malformed")


class DocumentServer:
    """A local HTTP server of the approvers document that counts its requests."""

    def __init__(self, body: Callable[[], tuple[int, str]]) -> None:
        self.requests = 0
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                outer.requests += 1
                outer.accept = self.headers.get("Accept")
                status, text = body()
                data = text.encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/jwt")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.accept: str | None = None
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/.well-known/countersign-approvers"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


class ApproversFetcherTest(unittest.TestCase):
    def test_fetches_verifies_caches_and_fails_closed_when_the_server_is_down(self) -> None:
        srv = DocumentServer(lambda: (200, F["approvers"]))
        now = [float(VALID["now"])]
        fetcher = ApproversFetcher(srv.url, keys=KEYS, ttl=60, clock=lambda: now[0])
        humans = Humans(min=1, approvers=fetcher)
        try:
            self.assertEqual(verify(VALID, humans, now=now[0])[0], "ok")
            self.assertEqual(verify(SERVER_ONLY, humans, now=now[0])[0], "receipt_signatures_missing")
            self.assertIs(fetcher.approvers(), fetcher.approvers())
            self.assertEqual(srv.requests, 1, "one fetch within the TTL")
            self.assertEqual(srv.accept, "application/jwt")
            now[0] += 61
            self.assertEqual(verify(VALID, humans, now=now[0])[0], "ok")
            self.assertEqual(srv.requests, 2, "fetched again after the TTL")
        finally:
            srv.close()
        now[0] += 61
        code, why = verify(VALID, humans, now=now[0])
        self.assertEqual(code, "receipt_unavailable", "a server that is down past the TTL: no stale copy")
        self.assertIn("fetch approvers", why)

    def test_a_server_that_serves_a_receipt_an_error_or_nothing_is_refused(self) -> None:
        answer = (200, VALID["receipt"])
        srv = DocumentServer(lambda: answer)
        try:
            fetcher = ApproversFetcher(srv.url, keys=KEYS, clock=lambda: VALID["now"])
            self.assertEqual(code_of(fetcher.approvers)[0], "receipt_malformed")
            answer = (200, "")
            self.assertEqual(code_of(fetcher.approvers)[0], "receipt_malformed")
            answer = (404, F["approvers"])
            self.assertEqual(code_of(fetcher.approvers)[0], "receipt_unavailable")
        finally:
            srv.close()
        down = ApproversFetcher(srv.url, keys=KEYS, clock=lambda: VALID["now"], timeout=2)
        self.assertEqual(code_of(down.approvers)[0], "receipt_unavailable")


class ReadmeTest(unittest.TestCase):
    def test_the_example_of_humans_imports_what_the_module_exports(self) -> None:
        import re

        import countersign.receipts as receipts

        readme = (pathlib.Path(__file__).parents[1] / "README.md").read_text()
        block = next(b for b in re.findall(r"```python\n(.*?)```", readme, re.S) if "Humans(" in b)
        self.assertLessEqual(len(block.splitlines()), 10)
        names = re.search(r"from countersign\.receipts import (.*)", block)
        assert names is not None
        for n in names.group(1).split(","):
            self.assertTrue(callable(getattr(receipts, n.strip())), n)


if __name__ == "__main__":
    unittest.main()
