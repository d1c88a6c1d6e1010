"""Triton's system shared-memory extension: regions of POSIX shared-memory objects that clients on this
host register, and that requests then name for an input's data or an output's destination.

A region is `byte_size` bytes from `offset` of the object `key`, the name a client gave `shm_open`
(tritonclient.utils.shared_memory's `shm_key`, e.g. "/input0"): on Linux the file /dev/shm/<key
without its leading slashes>. It is opened like glibc's shm_open opens it (no other slash in the name,
no symbolic link), and must be a regular file holding the whole range.

Data moves with `pread` / `pwrite` on the object's descriptor rather than through a mapping: a client
that shrinks its object after registering it then gets a 400 instead of taking the server down with a
SIGBUS, and a region can be unregistered while a request's tensor read from it is still in use (the
tensor is a copy). Every access is bounds-checked against the registered range first, so no request
reads or writes outside it. Registering and unregistering happen on the event loop, as every read and
write does: no lock is needed.

At most `MAX_REGIONS` regions are registered at once; each holds one descriptor, closed when it is
unregistered, when `close()` is called (the server stops), or when the registry is collected.
"""

from __future__ import annotations

import logging
import os
import stat
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grps_py.core.errors import InvalidInput, NotFound, Unsupported
from grps_py.core.oip import MAX_REGION_NAME, SharedMemoryRef
from grps_py.core.untrusted import shown

log = logging.getLogger("grps_py.shared_memory")
SHM_DIR = Path("/dev/shm")
MAX_REGIONS = 256
_NAME_MAX = 255  # bytes of a file name (NAME_MAX), as shm_open allows
_IO_CHUNK = 1 << 30  # bytes per pread/pwrite call (Linux moves at most ~2 GiB in one)


@dataclass
class Region:
    """One registered region; `fd` is its object's descriptor, -1 once unregistered."""

    name: str
    key: str
    offset: int
    byte_size: int
    fd: int = field(repr=False)

    def status(self) -> dict[str, Any]:
        return {"name": self.name, "key": self.key, "offset": self.offset, "byte_size": self.byte_size}


@dataclass(frozen=True)
class RegionSlice:
    """`size` bytes from `start` of a region, already checked to lie inside it."""

    region: Region
    start: int
    size: int
    label: str  # the tensor, for messages

    def read(self) -> bytearray:
        """The bytes, copied out of the object."""
        region = self._open()
        data = bytearray(self.size)
        view, done, base = memoryview(data), 0, region.offset + self.start
        while done < self.size:
            got = os.preadv(region.fd, [view[done : done + _IO_CHUNK]], base + done)
            if got == 0:
                raise self._shrunk(region)
            done += got
        return data

    def write(self, data: bytes | bytearray | memoryview) -> None:
        """Write `data` (at most `size` bytes, the caller checked) at the start of the slice."""
        region = self._open()
        view = memoryview(data).cast("B")
        base = region.offset + self.start
        if os.fstat(region.fd).st_size < base + len(view):
            raise self._shrunk(region)  # pwrite would grow the object: it is not what was registered
        done = 0
        while done < len(view):
            done += os.pwrite(region.fd, view[done : done + _IO_CHUNK], base + done)

    def _open(self) -> Region:
        if self.region.fd < 0:
            raise InvalidInput(
                f"{self.label}: shared memory region '{shown(self.region.name)}' was unregistered "
                "while the request ran"
            )
        return self.region

    def _shrunk(self, region: Region) -> InvalidInput:
        return InvalidInput(
            f"{self.label}: shared memory region '{shown(region.name)}': its object "
            f"'{shown(region.key)}' is now smaller than the registered range"
        )


class SharedMemoryRegions:
    """The registered system shared-memory regions of one server, by name."""

    def __init__(self, root: Path = SHM_DIR, max_regions: int = MAX_REGIONS) -> None:
        self._root = root
        self._max = max_regions
        self._regions: dict[str, Region] = {}
        self._finalizer = weakref.finalize(self, _close_all, self._regions)

    def register(self, name: str, key: str, offset: int, byte_size: int) -> None:
        """Open `key` and register `byte_size` bytes from `offset` of it as `name` (as Triton checks:
        a new name, an object that exists and holds the whole range, at least one byte)."""
        if not name or len(name) > MAX_REGION_NAME:
            raise InvalidInput(f"a region's name has 1 to {MAX_REGION_NAME} characters")
        failed = f"failed to register shared memory region '{shown(name)}'"
        if name in self._regions:
            raise InvalidInput(f"shared memory region '{shown(name)}' already in manager")
        if len(self._regions) >= self._max:
            raise InvalidInput(f"{failed}: {self._max} regions are registered, the most this server holds")
        if byte_size < 1:
            raise InvalidInput(f"{failed}: byte_size must be at least 1")
        fd = self._open(key, failed)
        try:
            size = os.fstat(fd).st_size
            if offset + byte_size > size:
                raise InvalidInput(
                    f"{failed}: invalid args: offset {offset} + byte_size {byte_size} is past the end of "
                    f"'{shown(key)}' ({size} bytes)"
                )
        except BaseException:
            os.close(fd)
            raise
        self._regions[name] = Region(name, key, offset, byte_size, fd)
        log.info(
            "system shared memory region '%s' registered: %d bytes from offset %d of '%s'",
            shown(name),
            byte_size,
            offset,
            shown(key),
        )

    def unregister(self, name: str = "") -> None:
        """Unregister `name`, or every region when it is "" (an unknown name is no error, as in Triton)."""
        names = [name] if name else list(self._regions)
        for each in names:
            region = self._regions.pop(each, None)
            if region is not None:
                _close(region)
                log.info("system shared memory region '%s' unregistered", shown(each))

    def status(self, name: str = "") -> list[dict[str, Any]]:
        """The status of `name` (NotFound when it is not registered), or of every region."""
        if not name:
            return [region.status() for region in self._regions.values()]
        region = self._regions.get(name)
        if region is None:
            raise NotFound(f"Unable to find system shared memory region: '{shown(name)}'")
        return [region.status()]

    def slice(self, ref: SharedMemoryRef, label: str) -> RegionSlice:
        """The part of a registered region a tensor names, checked to lie inside it."""
        region = self._regions.get(ref.region)
        if region is None:
            raise InvalidInput(f"{label}: Unable to find shared memory region: '{shown(ref.region)}'")
        if ref.offset >= region.byte_size:
            raise InvalidInput(
                f"{label}: Invalid offset for shared memory region: '{shown(ref.region)}' "
                f"(offset {ref.offset}, the region has {region.byte_size} bytes)"
            )
        if ref.offset + ref.byte_size > region.byte_size:
            raise InvalidInput(
                f"{label}: Invalid offset + byte size for shared memory region: '{shown(ref.region)}' "
                f"({ref.offset} + {ref.byte_size} bytes, the region has {region.byte_size})"
            )
        return RegionSlice(region, ref.offset, ref.byte_size, label)

    def close(self) -> None:
        """Unregister every region (the server stops)."""
        self.unregister()

    def __len__(self) -> int:
        return len(self._regions)

    def _open(self, key: str, failed: str) -> int:
        """The object's descriptor, opened read-write as shm_open opens it."""
        if not self._root.is_dir():
            raise Unsupported("system shared memory needs POSIX shared memory in /dev/shm (Linux)")
        name = key.lstrip("/")
        if not name or "/" in name or "\0" in name or name in (".", "..") or len(name.encode()) > _NAME_MAX:
            raise InvalidInput(
                f"{failed}: '{shown(key)}' is not a shared memory key (a name, after any leading '/', "
                f"at most {_NAME_MAX} bytes)"
            )
        flags = os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK  # a FIFO must not block us
        try:
            fd = os.open(self._root / name, flags)
        except FileNotFoundError:
            raise InvalidInput(f"{failed}: Unable to open shared memory region: '{shown(key)}'") from None
        except OSError as exc:
            why = exc.strerror or type(exc).__name__
            raise InvalidInput(f"{failed}: '{shown(key)}' cannot be opened ({why})") from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise InvalidInput(f"{failed}: '{shown(key)}' is not a shared memory object")
        return fd


def _close(region: Region) -> None:
    fd, region.fd = region.fd, -1
    if fd >= 0:
        os.close(fd)


def _close_all(regions: dict[str, Region]) -> None:
    for region in regions.values():
        _close(region)
    regions.clear()
