"""Who may reach the console: the Host names it answers, the origins it trusts, the token, and
the throttle on wrong guesses (docs/security.md)."""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import math
import secrets
import threading
import time
from collections.abc import Callable, Iterable
from urllib.parse import quote, urlsplit

from fastapi import Request

COOKIE = "station_session"  # the login cookie's name; cookie_name() adds the port
MIN_TOKEN = 16  # characters; a shorter token can be guessed, even slowly
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
WILDCARDS = ("", "0.0.0.0", "::")  # bind addresses that are no name a browser could use
SAFE_METHODS = ("GET", "HEAD", "OPTIONS")
SECURITY_HEADERS = {  # no outside images, scripts or frames, even if some agent text got through as HTML
    "content-security-policy": "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; "
    "script-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'",
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    "referrer-policy": "same-origin",
}


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_token(token: str | None, source: str = "--token") -> None:
    """Refuse a given token that is empty or short (None: no token given, which is fine on loopback)."""
    if token is not None and len(token) < MIN_TOKEN:
        what = "empty" if not token else f"only {len(token)} characters"
        raise ValueError(
            f"the operator token from {source} is {what}; give one of at least {MIN_TOKEN} characters "
            "(for instance: python -c 'import secrets; print(secrets.token_urlsafe(24))')"
        )


def host_name(header: str) -> str:
    """The name in a Host header or --allow-host value, lower case, without port or brackets."""
    header = header.strip().lower()
    if header.startswith("["):  # [::1]:8470
        return header[1 : header.find("]")] if "]" in header else ""
    if header.count(":") > 1:  # a bare IPv6 address (as --host or --allow-host may give it)
        return header
    return header.partition(":")[0].rstrip(".")


def allowed_hosts(host: str, extra: Iterable[str] = ()) -> set[str]:
    """The Host names this server answers to: loopback names, the address it is bound to, and `extra`."""
    names = set(LOOPBACK_NAMES)
    if host_name(host) not in WILDCARDS:
        names.add(host_name(host))
    for given in extra:
        name = host_name(given)
        if not name or any(c in name for c in "*/ "):
            raise ValueError(f"--allow-host {given!r}: give one host name or address (no wildcards)")
        names.add(name)
    return names


def in_process(request: Request) -> bool:
    """Starlette's TestClient (`station export`, the tests) calls the app with no socket: its client is
    'testclient' and its server address is a name, where a real server gives the socket's IP. No browser
    is involved, so the Host check does not apply (its Host is the made-up 'testserver')."""
    server = request.scope.get("server") or ("",)
    try:
        ipaddress.ip_address(server[0])
        return False
    except ValueError:
        return tuple(request.scope.get("client") or ()) == ("testclient", 50000)


def foreign_origin(request: Request) -> bool:
    """A state-changing request from a page of another site: its Origin (or, without one, its
    Referer) does not name the Host it was sent to. Neither sent: not a browser form, so not foreign."""
    source = request.headers.get("origin") or request.headers.get("referer")
    if source is None:
        return False
    parts = urlsplit(source)  # "Origin: null" (a sandboxed or file page) has no netloc: foreign
    return parts.scheme not in ("http", "https") or parts.netloc.lower() != request.headers.get("host", "").lower()


def same_secret(given: str, secret: str) -> bool:
    return bool(given) and hmac.compare_digest(given.encode(), secret.encode())


def cookie_name(request: Request) -> str:
    """The login cookie's name, with the port of the address the browser used: browsers keep cookies
    per host, not per port, so two consoles on one machine must not overwrite each other's login."""
    _, colon, port = request.headers.get("host", "").rpartition(":")
    return f"{COOKIE}_{port}" if colon and port.isdigit() else COOKIE


def local_path(target: str) -> str:
    """Where a login may send the browser on: `target` if it is a path of this server, else the overview,
    so a login address can never lead to another site (`//evil.example`, `/\\evil.example`, `https://...`;
    browsers drop tabs and newlines from addresses and read a backslash as a slash, hence those too)."""
    if (
        not target.startswith("/")
        or target.startswith("//")
        or "\\" in target
        or any(ord(c) < 0x20 or ord(c) == 0x7F for c in target)
        or urlsplit(target).path.startswith("/login")  # cannot raise: a single "/" start has no host part
    ):
        return "/"
    return target


class OneTimeLogin:
    """The token of the login address `station serve` prints. It opens one login: then it is replaced by a
    fresh one, handed to `announce` (the server prints it), so an address kept in a browser's history or a
    log opens nothing. 256 random bits: it cannot be guessed, so it is checked before the throttle (a
    local user's wrong guesses must not lock the operator out of the printed address)."""

    def __init__(self, announce: Callable[[str], None] = lambda address: None) -> None:
        self.announce, self._lock = announce, threading.Lock()
        self._token = secrets.token_urlsafe(32)

    def address(self, then: str = "") -> str:
        """The login address's path (and, with `then`, the page to go to after it)."""
        with self._lock:
            token = self._token
        return f"/login?token={token}" + (f"&next={quote(then, safe='/')}" if then else "")

    def redeem(self, given: str) -> bool:
        """Whether `given` is the current token; if so it is used up and the next address is announced."""
        with self._lock:
            if not same_secret(given, self._token):
                return False
            self._token = secrets.token_urlsafe(32)
        self.announce(self.address())
        return True


class Sessions:
    """The console's logins: each gets a new random value (its cookie), which ends with a logout, after
    `idle_s` without a request, or `max_s` after the login. Kept in this process only: a restarted
    server knows none. Values are kept as SHA-256 digests (looked up by digest: no timing on the value).
    Ended ones are remembered a while, so that their page can say why (bounded, like the live ones)."""

    IDLE_S, MAX_S, KEPT = 12 * 3600.0, 7 * 24 * 3600.0, 1000  # 12 h without a request; a week after login

    def __init__(
        self, idle_s: float | None = None, max_s: float | None = None, clock: Callable[[], float] | None = None
    ) -> None:
        self.idle_s, self.max_s = self.IDLE_S if idle_s is None else idle_s, self.MAX_S if max_s is None else max_s
        if self.idle_s <= 0 or self.max_s <= 0:
            raise ValueError(f"session limits must be positive seconds, not idle {self.idle_s}, max {self.max_s}")
        self.clock, self._lock = clock or time.monotonic, threading.Lock()
        self._live: dict[bytes, tuple[float, float]] = {}  # digest -> (logged in at, last used at)
        self._ended: dict[bytes, str] = {}  # digest -> why it ended

    def start(self) -> str:
        """A new session's value (256 random bits)."""
        value = secrets.token_urlsafe(32)
        with self._lock:
            now = self.clock()
            self._sweep(now)
            if len(self._live) >= self.KEPT:  # bounded: the least recently used login ends first
                oldest = min(self._live, key=lambda d: self._live[d][1])
                self._end(oldest, "ended (too many logins at once: the least recently used ended first)")
            self._live[_digest(value)] = (now, now)
        return value

    def use(self, value: str) -> bool:
        """Whether `value` is a live session; if so, its idle time starts again."""
        if not value:
            return False
        with self._lock:
            now, digest = self.clock(), _digest(value)
            self._sweep(now)
            if digest not in self._live:
                return False
            self._live[digest] = (self._live[digest][0], now)
            return True

    def end(self, value: str) -> None:
        """A logout: the value opens nothing from now on."""
        with self._lock:
            if _digest(value) in self._live:
                self._end(_digest(value), "ended by a logout")

    def why_not(self, value: str) -> str:
        """Why `value` opens nothing, in a sentence for the login page."""
        with self._lock:
            self._sweep(self.clock())
            why = self._ended.get(_digest(value), "is not known to this server (from an earlier one?)")
        return f"This login session {why}: log in again."

    def _sweep(self, now: float) -> None:
        for digest, (began, last) in list(self._live.items()):
            if now - began > self.max_s:
                self._end(digest, f"expired ({_hours(self.max_s)} after its login)")
            elif now - last > self.idle_s:
                self._end(digest, f"expired ({_hours(self.idle_s)} without use)")

    def _end(self, digest: bytes, why: str) -> None:
        self._live.pop(digest, None)
        if len(self._ended) >= self.KEPT:
            self._ended.pop(next(iter(self._ended)))  # the oldest reason goes first
        self._ended[digest] = why


def _digest(value: str) -> bytes:
    return hashlib.sha256(value.encode()).digest()


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:g} h" if seconds >= 3600 else f"{seconds:g} s"


class TooManyTries(Exception):
    def __init__(self, wait_s: float) -> None:
        super().__init__(f"too many wrong tokens from this address: try again in {math.ceil(wait_s)} s")
        self.wait_s = wait_s


class Throttle:
    """Wrong tokens per client address: FREE tries, then each further try waits, the wait doubling
    with every failure (1 min, 2, 4, ... at most an hour). A right token clears the count."""

    FREE, FIRST_WAIT_S, LONGEST_WAIT_S, KEPT = 5, 60.0, 3600.0, 10_000

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock, self._lock = clock, threading.Lock()
        self._failed: dict[str, tuple[int, float, float]] = {}  # address -> (failures, blocked until, last)

    def wait(self, address: str) -> float:
        """Seconds this address must still wait before its next try (0: it may try now)."""
        with self._lock:
            _, until, _ = self._failed.get(address, (0, 0.0, 0.0))
            return max(0.0, until - self.clock())

    def failed(self, address: str) -> None:
        with self._lock:
            now = self.clock()
            count, _, last = self._failed.get(address, (0, 0.0, 0.0))
            count = 1 if now - last > self.LONGEST_WAIT_S else count + 1  # an old count is forgotten
            until = (
                now + min(self.FIRST_WAIT_S * 2 ** (count - self.FREE), self.LONGEST_WAIT_S)
                if count >= self.FREE
                else 0.0
            )
            if len(self._failed) >= self.KEPT:  # bounded memory: forget addresses that are not waiting
                self._failed = {a: v for a, v in self._failed.items() if v[1] > now}
            self._failed[address] = (count, until, now)

    def succeeded(self, address: str) -> None:
        with self._lock:
            self._failed.pop(address, None)


def client_address(request: Request) -> str:
    return request.client.host if request.client else "?"
