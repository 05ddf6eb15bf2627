"""uvicorn's h11 protocol with a deadline on request headers (imported only by ``wattgpu serve``).

uvicorn arms no timer until a connection's first response, and any byte received cancels its keep-alive
timer, so a client that sends a header line every few seconds holds a connection for ever. Here a
connection must deliver a request's complete headers within ``HEADER_TIMEOUT_S`` of opening (or of the
previous response): the deadline is armed once per request and never extended by partial data. A client
that misses it gets 408 and the connection is closed.
"""
from __future__ import annotations

import asyncio
import json

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

HEADER_TIMEOUT_S = 10.0


def _timeout_response(seconds: float) -> bytes:
    body = json.dumps({"error": {"field": "<headers>", "kind": "timeout",
                                 "message": f"the request headers did not arrive within {seconds:g} s"}},
                      separators=(",", ":")).encode()
    return (b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\nconnection: close\r\n"
            b"content-length: %d\r\n\r\n%s" % (len(body), body))


class HeaderDeadlineProtocol(H11Protocol):
    """:class:`H11Protocol` that closes a connection whose request headers are late (408)."""

    header_timeout_s: float = HEADER_TIMEOUT_S
    _deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE:  # the headers are in: the body has its own timeout
            self._disarm()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing() and self.conn.their_state is h11.IDLE:
            self._arm()  # the next request on this connection gets the same deadline

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(self.header_timeout_s, self._late)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _late(self) -> None:
        self._deadline = None
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            self.transport.write(_timeout_response(self.header_timeout_s))
            self.transport.close()


def protocol_class(header_timeout_s: float = HEADER_TIMEOUT_S) -> type[HeaderDeadlineProtocol]:
    """The protocol class with its deadline set (uvicorn takes a class, not an instance)."""
    return type("HeaderDeadlineProtocol", (HeaderDeadlineProtocol,), {"header_timeout_s": header_timeout_s})
