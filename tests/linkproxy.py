"""A TCP proxy between gate and a server, for the faults of a link between datacenters: a black hole
(nothing passes, in either direction, until :meth:`LinkProxy.heal`; what was sent waits, as TCP's
retransmissions would carry it over a partition), a reset of every connection, a bandwidth limit, and latency
(``delay`` seconds added to each direction, so a round trip gains twice that; the order of the bytes kept)."""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections import deque


class LinkProxy:
    """Listens on 127.0.0.1:``port`` and forwards each connection to 127.0.0.1:``target``."""

    def __init__(self, target: int) -> None:
        self.target = target
        self.bytes_per_second = 0.0  # 0: no limit
        self.delay = 0.0  # seconds added to each direction (a round trip gains 2 * delay)
        self._open = threading.Event()
        self._open.set()
        self._closed = False
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def black_hole(self) -> None:
        self._open.clear()

    def heal(self) -> None:
        self._open.set()

    def reset(self) -> None:
        """Close every connection now with a TCP reset; new ones are made as before."""
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for sock in sockets:
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            except OSError:
                pass
            sock.close()

    def close(self) -> None:
        self._closed = True
        self._listener.close()
        self.heal()
        self.reset()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            self._open.wait()
            try:
                server = socket.create_connection(("127.0.0.1", self.target))
            except OSError:
                client.close()
                continue
            for sock in (client, server):  # each piece goes when due: Nagle's wait for an ACK (up to the peer's
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # 40 ms delayed ACK) is no part of a link
            with self._lock:
                self._sockets += [client, server]
            left = [4]  # the connection's threads still running: the last one to end closes its sockets
            for pair in ((client, server), (server, client)):
                line = _Line()
                threading.Thread(target=self._pump, args=(pair[0], line, (client, server), left), daemon=True).start()
                threading.Thread(target=self._deliver, args=(line, *pair, left), daemon=True).start()

    def _ended(self, pair: tuple[socket.socket, socket.socket], left: list[int]) -> None:
        """One of a connection's four threads has ended; after the last, its sockets are closed and forgotten
        (a long run through the proxy, with many connections, would gather their descriptors)."""
        with self._lock:
            left[0] -= 1
            if left[0]:
                return
            self._sockets = [sock for sock in self._sockets if sock not in pair]
        for sock in pair:
            sock.close()

    def _pump(self, source: socket.socket, line: _Line, pair: tuple[socket.socket, socket.socket],
              left: list[int]) -> None:
        """Read what ``source`` sends onto ``line``, each piece due ``delay`` seconds later."""
        try:
            while True:
                self._open.wait()
                data = source.recv(65536 if not self.bytes_per_second else 4096)
                if not data:
                    break
                if self.bytes_per_second:
                    time.sleep(len(data) / self.bytes_per_second)
                line.put(time.monotonic() + self.delay, data)
        except OSError:
            pass
        line.put(0.0, b"")  # the end: after what is on the line
        self._ended(pair, left)

    def _deliver(self, line: _Line, source: socket.socket, sink: socket.socket, left: list[int]) -> None:
        """Send what is on ``line`` to ``sink`` in order, each piece when it is due; at its end close both ways."""
        try:
            while True:
                due, data = line.get()
                if not data:
                    break
                wait = due - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                self._open.wait()  # a black hole holds back what arrived meanwhile
                sink.sendall(data + line.due(time.monotonic()))
        except OSError:
            pass
        for sock in (source, sink):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._ended((source, sink), left)


class _Line:
    """One direction of a connection: pieces of data in order, each with the time it is due at the far end."""

    def __init__(self) -> None:
        self._pieces: deque[tuple[float, bytes]] = deque()
        self._ready = threading.Condition()

    def put(self, due: float, data: bytes) -> None:
        with self._ready:
            self._pieces.append((due, data))
            self._ready.notify()

    def get(self) -> tuple[float, bytes]:
        with self._ready:
            while not self._pieces:
                self._ready.wait()
            return self._pieces.popleft()

    def due(self, now: float) -> bytes:
        """The pieces after the one taken that are due by ``now``, joined (up to the end, which stays): sent
        with it, a burst costs the proxy one send and one wake-up, not one for each piece."""
        with self._ready:
            taken = []
            while self._pieces and self._pieces[0][1] and self._pieces[0][0] <= now:
                taken.append(self._pieces.popleft()[1])
        return b"".join(taken)
