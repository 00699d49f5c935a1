"""A relay between a client and the real server that sees each request line
before forwarding it: a test waits for the request it needs (the signal that
the client is where the test wants it, e.g. in a long poll), and may act
just before a request is forwarded. Bytes pass through unchanged (the
clients send one request per connection)."""

from __future__ import annotations

import socket
import threading
import unittest
from typing import Callable, List, Optional, Tuple
from urllib.parse import urlsplit


class Relay:
    def __init__(self, tc: unittest.TestCase, target_url: str) -> None:
        u = urlsplit(target_url)
        self._target: Tuple[str, int] = (u.hostname or "127.0.0.1", u.port or 80)
        self._lsock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._lsock.getsockname()[1]}"
        self.lines: List[str] = []
        """The request lines seen, e.g. ``POST /v1/reviews?wait=60000ms HTTP/1.1``."""
        self.before: Optional[Callable[[str], None]] = None
        """Called with a request line before the request is forwarded."""
        self._cond = threading.Condition()
        self._socks: List[socket.socket] = []
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()
        tc.addCleanup(self.close)

    def wait_for(self, pred: Callable[[str], bool], timeout: float = 60) -> str:
        """The first request line matching pred, waiting for it to be sent."""
        with self._cond:
            found: List[str] = []

            def seen() -> bool:
                found[:] = [line for line in self.lines if pred(line)]
                return bool(found)

            if not self._cond.wait_for(seen, timeout):
                raise AssertionError(f"no such request within {timeout} s; seen: {self.lines}")
            return found[0]

    def count(self, pred: Callable[[str], bool]) -> int:
        with self._cond:
            return sum(1 for line in self.lines if pred(line))

    def close(self) -> None:
        self._closed = True
        self._lsock.close()
        with self._cond:
            socks, self._socks = self._socks, []
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                c, _ = self._lsock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _serve(self, c: socket.socket) -> None:
        with self._cond:
            self._socks.append(c)
        head = b""
        while b"\r\n" not in head:
            chunk = c.recv(65536)
            if not chunk:
                c.close()
                return
            head += chunk
        line = head.split(b"\r\n", 1)[0].decode("latin-1")
        with self._cond:
            self.lines.append(line)
            self._cond.notify_all()
        if self.before is not None:
            self.before(line)
        try:
            up = socket.create_connection(self._target)
        except OSError:  # the server is down: the client sees its connection close, as without the relay
            c.close()
            return
        with self._cond:
            self._socks.append(up)
        up.sendall(head)
        threading.Thread(target=_pump, args=(up, c), daemon=True).start()
        _pump(c, up)


def _pump(src: socket.socket, dst: socket.socket) -> None:
    """Copies src to dst until either side closes, then closes both."""
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    for s in (src, dst):
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
