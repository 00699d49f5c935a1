"""A real `countersign serve` for the tests: built once per test process from
this repository, started on a fresh data directory with an OS-chosen port,
killed with SIGKILL and restarted on the same data directory and port."""

from __future__ import annotations

import atexit
import os
import queue
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import unittest
from typing import Dict, List, Optional

import countersign

HERE = os.path.dirname(os.path.abspath(__file__))
PYROOT = os.path.dirname(HERE)


def repo_root() -> str:
    d = HERE
    while not os.path.exists(os.path.join(d, "go.mod")):
        parent = os.path.dirname(d)
        if parent == d:
            raise RuntimeError("tests: no go.mod above " + HERE)
        d = parent
    return d


_build_lock = threading.RLock()
_binary: Optional[str] = None
_tokens: Optional[Dict[str, str]] = None
_workdir = tempfile.mkdtemp(prefix="countersign-py-")


def binary() -> str:
    """The countersign binary, built once (COUNTERSIGN_BIN uses a built one)."""
    global _binary
    with _build_lock:
        if _binary is None:
            given = os.environ.get("COUNTERSIGN_BIN")
            if given:
                _binary = given
            else:
                out = os.path.join(_workdir, "countersign")
                subprocess.run(["go", "build", "-o", out, "./services/countersign"], cwd=repo_root(), check=True)
                _binary = out
        return _binary


def approver_tokens() -> Dict[str, str]:
    """A token per test approver (alice, bob, carol) and for another agent (other-agent), made by
    `countersign token new`."""
    global _tokens
    with _build_lock:
        if _tokens is None:
            toks: Dict[str, str] = {}
            users = []
            for who, role in (("alice", "approver"), ("bob", "approver"), ("carol", "approver"),
                              ("other-agent", "agent")):
                out = subprocess.run([binary(), "token", "new", "--subject", who, "--roles", role],
                                     check=True, capture_output=True, text=True).stdout
                token = re.search(r"^\s+(cs_\S+)\s*$", out, re.M)
                sha = re.search(r"sha256: ([0-9a-f]{64})", out)
                assert token and sha, out
                toks[who] = token.group(1)
                users.append(f"  - id: {who}\n    tokens:\n      - name: {who}\n        sha256: {sha.group(1)}\n"
                             f"        roles: [{role}]\n")
            with open(os.path.join(_workdir, "directory.yaml"), "w") as f:
                f.write("users:\n" + "".join(users))
            _tokens = toks
        return _tokens


POLICY = """\
version: "py-tests-1"
default: require_approval
rules:
  - name: read-only
    tools: ["search_*"]
    action: allow
  - name: no-shell
    tools: ["shell_*"]
    action: deny
    reason: "Agents may not run shell commands. Ask a human operator instead."
  - name: payments
    tools: ["send_payment", "payments.*"]
    action: require_approval
    approvers: [alice, bob]
    allowed_decisions: [approve, reject, edit, respond]
    timeout: 1h
    channels: [%(channels)s]
  - name: deploys
    tools: ["deploy_*"]
    action: require_approval
    approvers: [alice]
    claim_within: 1s
    channels: [%(channels)s]
"""

AGENT_SUBJECT = "agent-svc"
"""The subject of the development token: serve names it after $USER, which the tests set."""


class Server:
    """One `countersign serve` process (SIGKILL-able, restartable on the same data and port)."""

    def __init__(self, tc: unittest.TestCase, *, webhooks: Optional[List[Dict[str, str]]] = None,
                 policy: Optional[str] = None) -> None:
        approver_tokens()
        self.data = tempfile.mkdtemp(prefix="data-", dir=_workdir)
        self.policy = policy or self.data + "-policy.yaml"
        if policy is None:
            with open(self.policy, "w") as f:
                f.write(POLICY % {"channels": "webhook" if webhooks else "inbox"})
        self.config: Optional[str] = None
        self._env: Dict[str, str] = dict(os.environ, USER=AGENT_SUBJECT)
        if webhooks:
            self.config = self.data + "-config.yaml"
            lines = ["notify:\n  webhooks:\n"]
            for i, w in enumerate(webhooks):
                var = f"PY_TEST_WEBHOOK_SECRET_{i}"
                self._env[var] = w["secret"]
                lines.append(f"    - {{name: {w['name']}, url: \"{w['url']}\", secrets: [env:{var}]}}\n")
            with open(self.config, "w") as f:
                f.write("".join(lines))
        self.port = 0
        self.url = ""
        self.proc: Optional[subprocess.Popen[str]] = None
        self._log = open(self.data + "-stderr.log", "w+")
        tc.addCleanup(self.close)
        self.start()
        with open(os.path.join(self.data, "dev-token")) as f:
            self.token = f.read().strip()

    def start(self) -> None:
        """Starts serve (on the port of the previous start, if any) and waits for its API line."""
        args = [binary(), "serve", "--data", self.data, "--addr", f"127.0.0.1:{self.port}", "--nats-listen", "off",
                "--policy", self.policy, "--directory", os.path.join(_workdir, "directory.yaml"),
                "--log-level", "warn"]
        if self.config:
            args += ["--config", self.config]
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=self._log, text=True, env=self._env)
        lines: "queue.Queue[Optional[str]]" = queue.Queue()
        proc = self.proc

        def read() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                lines.put(line)
            lines.put(None)

        self._reader = threading.Thread(target=read, daemon=True)
        self._reader.start()
        while True:
            try:
                line = lines.get(timeout=60)
            except queue.Empty:
                raise RuntimeError("serve printed no API line within 60 s:\n" + self.stderr()) from None
            if line is None:
                raise RuntimeError("serve exited before it printed its API line:\n" + self.stderr())
            m = re.search(r"API:\s+(http://127\.0\.0\.1:(\d+))/v1", line)
            if m:
                self.url, self.port = m.group(1), int(m.group(2))
                return

    def kill(self) -> None:
        """SIGKILL: no clean shutdown."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self._reap()

    def _reap(self) -> None:
        if self.proc:
            self.proc.wait()
            self._reader.join()
            if self.proc.stdout:
                self.proc.stdout.close()

    def restart(self) -> None:
        self.kill()
        self.start()

    def stderr(self) -> str:
        self._log.flush()
        self._log.seek(0)
        return self._log.read()[-4000:]

    def close(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.send_signal(signal.SIGKILL)
        self._reap()
        self._log.close()


atexit.register(shutil.rmtree, _workdir, True)


def client_for(server: Server, who: Optional[str] = None, **kw: float) -> "countersign.Client":
    """The agent's client (the dev token), or an approver's."""
    token = server.token if who is None else approver_tokens()[who]
    return countersign.Client(server.url, token, **kw)


def async_client_for(server: Server, who: Optional[str] = None, **kw: float) -> "countersign.AsyncClient":
    token = server.token if who is None else approver_tokens()[who]
    return countersign.AsyncClient(server.url, token, **kw)


def decided(server: Server, event_id: str) -> countersign.Record:
    """The approval's record once it is decided (long polls, no sleeping)."""
    rec, _ = client_for(server).approval(event_id, wait=60)
    assert rec["status"] != "pending", rec
    return rec


def visible(server: Server, run: countersign.Run, tc: countersign.ToolCall) -> str:
    """Reviews tc (as the agent would, re-attaching) and returns its event id
    once its record exists: the signal that an approver can decide."""
    (res,) = client_for(server).review(run, [tc])
    assert res.verdict == "pending", res
    return res.event_id
