"""The HTTP side of a download: sockets shut at the deadline, and what a response's headers and first bytes say.

:func:`mmtoken.datasets.download.download_file` is the one caller; nothing here raises the datasets' errors
(it only reads the wire), so the rules of what is refused and why live in one place, there.
"""

from __future__ import annotations

__all__ = ["Watch", "opener", "content_length", "content_type", "looks_like_html"]

import contextlib
import http.client
import socket
import threading
import urllib.request


class Watch:
    """The sockets of one download; :meth:`expire` shuts them down (from a timer thread).

    A per-read timeout does not bound a server that trickles one byte at a time, headers
    included; shutting the socket down does: the read in progress returns or fails at once.
    """

    def __init__(self):
        self.socks: list = []
        self.expired = False
        self.lock = threading.Lock()

    def add(self, sock) -> None:
        """Register the socket of a new connection (shut at once if the deadline has passed)."""
        with self.lock:
            self.socks.append(sock)
            if self.expired:
                self._shut(sock)

    def expire(self) -> None:
        """Shut every registered socket down: the read in progress ends."""
        with self.lock:
            self.expired = True
            for sock in self.socks:
                self._shut(sock)

    @staticmethod
    def _shut(sock) -> None:
        with contextlib.suppress(OSError):  # already closed
            sock.shutdown(socket.SHUT_RDWR)


def opener(watch: Watch) -> urllib.request.OpenerDirector:
    """An opener whose connections register their sockets with ``watch`` (http and https)."""

    def watched(base):
        class Connection(base):
            def connect(self):
                super().connect()
                watch.add(self.sock)

        return Connection

    class HTTP(urllib.request.HTTPHandler):
        def http_open(self, req):
            return self.do_open(watched(http.client.HTTPConnection), req)

    class HTTPS(urllib.request.HTTPSHandler):
        def https_open(self, req):
            kw = {"context": self._context}
            if hasattr(self, "_check_hostname"):  # Python < 3.12
                kw["check_hostname"] = self._check_hostname
            return self.do_open(watched(http.client.HTTPSConnection), req, **kw)

    return urllib.request.build_opener(HTTP, HTTPS)


def _headers(resp):
    return getattr(resp, "headers", None)  # None: a file: URL, a stand-in


def content_length(resp) -> int | None:
    """The announced body size, or None (absent, malformed, a chunked body, not an HTTP response)."""
    headers = _headers(resp)
    if headers is None or "chunked" in (headers.get("Transfer-Encoding") or "").lower():
        return None
    try:
        n = int(headers.get("Content-Length"))
    except (TypeError, ValueError):  # absent, malformed
        return None
    return n if n >= 0 else None


def content_type(resp) -> str:
    """The media type the response announces, lower case, without parameters (``""`` when none)."""
    headers = _headers(resp)
    value = (headers.get("Content-Type") if headers is not None else None) or ""
    return value.split(";")[0].strip().lower()


def looks_like_html(head: bytes, kind: str = "") -> bool:
    """Whether a body starting with ``head``, announced as media type ``kind``, is a web page.

    A captive portal or a login page answers any address with one; no data file starts like one.
    """
    start = head.lstrip(b"\xef\xbb\xbf \t\r\n").lower()
    return kind in ("text/html", "application/xhtml+xml") or start.startswith((b"<!doctype html", b"<html", b"<head"))
