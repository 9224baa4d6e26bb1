"""A file system that forgets what was not synced, for crash tests (after LazyFS).

Usage: python lazyfs.py BACKING MOUNT

Mounts MOUNT (FUSE, through fusepy and Debian's libfuse2) as a view of the directory
BACKING. Data written to a file is held in this process's memory, as an operating
system's page cache holds it, and reaches BACKING only when the file is fsynced (or
fdatasynced), or when more than PENDING_MAX bytes of a file wait (as a kernel writes
dirty pages back on its own). Reads see the pending data. Metadata (creating, renaming,
removing and truncating files, directories) goes to BACKING at once, as on a journaling
file system that orders metadata.

The line `clear` on its standard input drops every pending write, as a power loss does
to a page cache, and it answers `cleared <bytes> <files>` on stdout; the process whose
files they were must be dead by then (kill it first), or it would go on from a view
that no longer exists. `mounted` on stdout says the mount is ready. Unmount with
`umount MOUNT` (the process then exits).

The kernel's caches are off (direct_io, no attribute or entry caching), so every read
and every size comes from here and a cleared write is gone for every reader at once.
Files opened O_APPEND get their writes at the end of what this process holds, whatever
offset the kernel passes (FUSE leaves O_APPEND to the file system without writeback
caching).
"""

from __future__ import annotations

import errno
import os
import sys
import threading

from fuse import FUSE, FuseOSError, Operations

# A file's pending bytes past which they are written back without a sync.
PENDING_MAX = 64 << 20


class LazyFS(Operations):
    def __init__(self, backing: str):
        self.backing = os.path.realpath(backing)
        self.mutex = threading.Lock()
        # path -> [(offset, bytes)] in write order, not yet in BACKING; and per path the
        # bytes held and the end of the furthest write (kept, not recounted per call).
        self.pending: dict[str, list[tuple[int, bytes]]] = {}
        self.held: dict[str, tuple[int, int]] = {}
        # fh -> (backing file descriptor, path, opened with O_APPEND)
        self.files: dict[int, tuple[int, str, bool]] = {}
        self.next_fh = 1

    # -- helpers ------------------------------------------------------------------

    def _real(self, path: str) -> str:
        return os.path.join(self.backing, path.lstrip("/"))

    def _pending_end(self, path: str) -> int:
        return self.held.get(path, (0, 0))[1]

    def _drop(self, path: str) -> list[tuple[int, bytes]]:
        self.held.pop(path, None)
        return self.pending.pop(path, [])

    def _size(self, path: str) -> int:
        return max(os.stat(self._real(path)).st_size, self._pending_end(path))

    def _write_back(self, path: str) -> None:
        """Pending writes of `path` into BACKING, in order; with the lock held."""
        writes = self._drop(path)
        if not writes:
            return
        fd = os.open(self._real(path), os.O_WRONLY)
        try:
            for offset, data in writes:
                os.pwrite(fd, data, offset)
        finally:
            os.close(fd)

    def clear(self) -> tuple[int, int]:
        with self.mutex:
            dropped = sum(len(d) for w in self.pending.values() for _, d in w)
            files = len(self.pending)
            self.pending.clear()
            self.held.clear()
        return dropped, files

    def init(self, path):
        print("mounted", flush=True)

    # -- metadata: straight to BACKING ----------------------------------------------

    def getattr(self, path, fh=None):
        with self.mutex:
            try:
                st = os.lstat(self._real(path))
            except OSError as e:
                raise FuseOSError(e.errno)
            attrs = {k: getattr(st, k) for k in ("st_atime", "st_ctime", "st_gid", "st_mode",
                                                 "st_mtime", "st_nlink", "st_uid")}
            attrs["st_size"] = max(st.st_size, self._pending_end(path))
            return attrs

    def readdir(self, path, fh):
        return [".", ".."] + os.listdir(self._real(path))

    def access(self, path, amode):
        if not os.access(self._real(path), amode):
            raise FuseOSError(errno.EACCES)

    def mkdir(self, path, mode):
        os.mkdir(self._real(path), mode)

    def rmdir(self, path):
        os.rmdir(self._real(path))

    def chmod(self, path, mode):
        os.chmod(self._real(path), mode)

    def chown(self, path, uid, gid):
        os.chown(self._real(path), uid, gid)

    def utimens(self, path, times=None):
        os.utime(self._real(path), times)

    def statfs(self, path):
        st = os.statvfs(self._real(path))
        return {k: getattr(st, k) for k in ("f_bavail", "f_bfree", "f_blocks", "f_bsize",
                                            "f_favail", "f_ffree", "f_files", "f_flag",
                                            "f_frsize", "f_namemax")}

    def unlink(self, path):
        with self.mutex:
            os.unlink(self._real(path))
            self._drop(path)

    def rename(self, old, new):
        with self.mutex:
            os.rename(self._real(old), self._real(new))
            self._drop(new)
            held = self.held.pop(old, None)
            moved = self.pending.pop(old, None)
            if moved:
                self.pending[new], self.held[new] = moved, held

    def truncate(self, path, length, fh=None):
        with self.mutex:
            os.truncate(self._real(path), length)
            kept = [(offset, data[:length - offset])
                    for offset, data in self._drop(path) if offset < length]
            if kept:
                self.pending[path] = kept
                self.held[path] = (sum(len(d) for _, d in kept),
                                   max(o + len(d) for o, d in kept))

    # -- files ----------------------------------------------------------------------

    def _open(self, path: str, flags: int, mode: int | None) -> int:
        real = self._real(path)
        create = flags & (os.O_CREAT | os.O_EXCL)
        fd = os.open(real, os.O_RDWR | create, mode) if mode is not None \
            else os.open(real, os.O_RDWR | create)
        with self.mutex:
            if flags & os.O_TRUNC:
                os.ftruncate(fd, 0)
                self._drop(path)
            fh = self.next_fh
            self.next_fh += 1
            self.files[fh] = (fd, path, bool(flags & os.O_APPEND))
        return fh

    def create(self, path, mode, fi=None):
        return self._open(path, os.O_CREAT | os.O_TRUNC, mode)

    def open(self, path, flags):
        return self._open(path, flags, None)

    def read(self, path, size, offset, fh):
        with self.mutex:
            fd, path, _ = self.files[fh]
            end = min(offset + size, self._size(path))
            if end <= offset:
                return b""
            out = bytearray(end - offset)
            data = os.pread(fd, end - offset, offset)
            out[:len(data)] = data
            for at, written in self.pending.get(path, ()):
                lo, hi = max(at, offset), min(at + len(written), end)
                if lo < hi:
                    out[lo - offset:hi - offset] = written[lo - at:hi - at]
            return bytes(out)

    def write(self, path, data, offset, fh):
        with self.mutex:
            _, path, append = self.files[fh]
            if append:
                offset = self._size(path)
            self.pending.setdefault(path, []).append((offset, bytes(data)))
            held, end = self.held.get(path, (0, 0))
            self.held[path] = (held + len(data), max(end, offset + len(data)))
            if held + len(data) > PENDING_MAX:
                self._write_back(path)
            return len(data)

    def fsync(self, path, datasync, fh):
        with self.mutex:
            fd, path, _ = self.files[fh]
            self._write_back(path)
            os.fsync(fd)

    def fsyncdir(self, path, datasync, fh):
        return 0

    def flush(self, path, fh):
        return 0

    def release(self, path, fh):
        with self.mutex:
            fd, _, _ = self.files.pop(fh)
        os.close(fd)


def main() -> None:
    backing, mount = sys.argv[1], sys.argv[2]
    fs = LazyFS(backing)

    def control() -> None:
        # Commands on stdin, one a line; a thread, since the main one stays in FUSE's
        # loop (in C) and would never run a Python signal handler.
        for line in sys.stdin:
            if line.strip() == "clear":
                dropped, files = fs.clear()
                print(f"cleared {dropped} {files}", flush=True)

    threading.Thread(target=control, daemon=True).start()
    FUSE(fs, mount, foreground=True, nothreads=False, direct_io=True, allow_other=True,
         attr_timeout=0,
         entry_timeout=0, negative_timeout=0)


if __name__ == "__main__":
    main()
