"""The traffic switch (grps's online/offline): whether load balancers should send this server requests.

One process keeps it in memory (`LocalTraffic`). Worker processes sharing ports keep one switch for
all of them (`grps_py/workers`), so a switch sent to any worker holds for every one of them.
"""

from __future__ import annotations

from typing import Protocol


class Traffic(Protocol):
    @property
    def online(self) -> bool:
        """Whether the server takes traffic (readiness answers ready, once models are loaded)."""

    def set(self, online: bool) -> None:
        """Switch it (an admin's online/offline)."""

    def start(self, online: bool) -> None:
        """The models are loaded: `start_online` applies (once for the whole server)."""


class LocalTraffic:
    """The switch of a server that is one process."""

    def __init__(self) -> None:
        self._online = False

    @property
    def online(self) -> bool:
        return self._online

    def set(self, online: bool) -> None:
        self._online = online

    def start(self, online: bool) -> None:
        self._online = online
