"""An exclusive per-key lock file (fcntl.flock): the kernel drops it when the holder dies, so no stale holder."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path


class KeyLock:
    """`with KeyLock(path):` blocks until this process holds the lock; `try_acquire()` never blocks.

    A lock file may be unlinked by `gc` while someone waits on it; a waiter that then wins the flock on the
    unlinked inode notices (the path names another inode or none) and locks the file anew, so two holders never
    coexist.
    """

    def __init__(self, path: Path):
        self.path = path
        self._fd: int | None = None

    def acquire(self) -> None:
        self._lock(blocking=True)

    def try_acquire(self) -> bool:
        return self._lock(blocking=False)

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def is_held(self) -> bool:
        """Whether some holder has the lock now. Only looks: creates no lock file and writes nothing (a free lock is
        taken for the instant of the look)."""
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            # closing drops the flock taken above
            os.close(fd)
        return False

    def release_and_unlink(self) -> None:
        """Remove the lock file while still holding it, so nobody locks the old inode unnoticed."""
        self.path.unlink(missing_ok=True)
        self.release()

    def __enter__(self) -> KeyLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def _lock(self, blocking: bool) -> bool:
        assert self._fd is None, "KeyLock is not reentrant"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
            except BlockingIOError:
                os.close(fd)
                return False
            if _names_inode(self.path, os.fstat(fd).st_ino):
                self._fd = fd
                return True
            os.close(fd)


def _names_inode(path: Path, inode: int) -> bool:
    try:
        return os.stat(path).st_ino == inode
    except FileNotFoundError:
        return False
