"""Receipt verification against the shared fixtures (contracts/testdata/receipts), RFC 8032 and RFC 8785 vectors."""

from __future__ import annotations

import json
import pathlib
import unittest

from countersign import _ed25519
from countersign._jcs import canonicalize
from countersign.receipts import ArgumentsDiffer, KeySet, MemoryReplayStore, ReceiptError, UnknownKey, verify_receipt

FIXTURES = json.loads((pathlib.Path(__file__).parents[2] / "testdata" / "receipts" / "fixtures.json").read_text())


class RFC8032Test(unittest.TestCase):
    def test_vectors_verify_and_altered_ones_do_not(self) -> None:
        for v in FIXTURES["rfc8032"]:
            pub, msg, sig = bytes.fromhex(v["public"]), bytes.fromhex(v["message"]), bytes.fromhex(v["signature"])
            self.assertTrue(_ed25519.verify(pub, msg, sig))
            self.assertFalse(_ed25519.verify(pub, msg + b"x", sig))
            self.assertFalse(_ed25519.verify(pub, msg, sig[:63] + bytes([sig[63] ^ 1])))
            self.assertFalse(_ed25519.verify(pub, msg, sig[:32] + (2**253).to_bytes(32, "little")))  # S >= L

    def test_rfc8037_example_signature(self) -> None:
        r = FIXTURES["rfc8037"]
        import base64
        h, p, s = r["compact"].split(".")
        x = base64.urlsafe_b64decode(r["public_jwk"]["x"] + "=")
        sig = base64.urlsafe_b64decode(s + "==")
        self.assertTrue(_ed25519.verify(x, (h + "." + p).encode(), sig))


class RFC8785Test(unittest.TestCase):
    def test_vectors(self) -> None:
        for v in FIXTURES["rfc8785"]:
            with self.subTest(input=v["input"]):
                self.assertEqual(canonicalize(json.loads(v["input"])), v["canonical"])


class SharedFixturesTest(unittest.TestCase):
    def test_cases(self) -> None:
        keys = KeySet.from_jwks(FIXTURES["jwks"])
        for c in FIXTURES["cases"]:
            with self.subTest(c["name"]):
                store = MemoryReplayStore(clock=lambda: c["now"])
                got: object = None
                code = "ok"
                for _ in range(c["times"]):
                    try:
                        args = c["arguments_text"].encode() if "arguments_text" in c else c["arguments"]
                        got = verify_receipt(c["receipt"], c["tool"], args, keys=keys, replay=store,
                                             issuer=FIXTURES["issuer"], now=c["now"], bases=c.get("bases", ()))
                        code = "ok"
                    except ReceiptError as e:
                        code = e.code
                self.assertEqual(code, c["expect"])
                if c.get("claims"):
                    self.assertEqual(got, c["claims"])

    def test_arguments_as_bytes(self) -> None:
        c = FIXTURES["cases"][0]
        keys = KeySet.from_jwks(FIXTURES["jwks"])
        verify_receipt(c["receipt"], c["tool"], json.dumps(c["arguments"]).encode(), keys=keys,
                       replay=MemoryReplayStore(), now=c["now"])

    def test_parsed_integer_beyond_2_53_is_refused(self) -> None:
        # json.loads keeps the exact integer the tool would run; the receipt hashed its nearest double.
        c = next(c for c in FIXTURES["cases"] if "arguments_text" in c)
        keys = KeySet.from_jwks(FIXTURES["jwks"])
        with self.assertRaises(ArgumentsDiffer) as cm:
            verify_receipt(c["receipt"], c["tool"], json.loads(c["arguments_text"]), keys=keys,
                           replay=MemoryReplayStore(), now=c["now"])
        self.assertIn("/to_account", str(cm.exception))

    def test_removed_key_is_unknown(self) -> None:
        c = FIXTURES["cases"][0]
        with self.assertRaises(UnknownKey):
            verify_receipt(c["receipt"], c["tool"], c["arguments"], keys=KeySet({}), replay=MemoryReplayStore(), now=c["now"])


if __name__ == "__main__":
    unittest.main()
