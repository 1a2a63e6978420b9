"""Bytes over a pair of file descriptors (stdin/stdout by default), and keeping stdout clean.

This module owns two things:

- :class:`StdioTransport`: a ``Transport`` over a readable and a writable file
  descriptor (pipes, ttys, sockets). It puts them in non-blocking mode, calls
  ``os.read`` / ``os.write`` directly and, when the kernel says "would block",
  waits with ``anyio.wait_readable`` / ``anyio.wait_writable``. That needs no
  worker threads and works on asyncio and trio alike. It is POSIX-only: on
  Windows those waits do not support pipes. Every read fills one buffer kept for
  the transport's life. :func:`open_stdio` picks it for the running loop: on
  asyncio and uvloop, reads wait on a reader kept registered with the loop.
- :func:`reserve_stdout`: moves the protocol's stdout out of reach of everything
  else in the process (``print``, logging, C libraries, child processes), so
  that nothing but protocol frames is ever written to the real stdout.

It deliberately knows nothing of frames, JSON-RPC or ACP: it moves bytes.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import stat
import sys
from types import TracebackType
from typing import IO, Any, Final

import anyio
import anyio.abc
import anyio.lowlevel

from .._loop import KeptReader, running_asyncio_loop

__all__ = ["StdioTransport", "StdoutReservation", "open_stdio", "reserve_stdout"]


PIPE_BYTES: Final = 1 << 20  # what a pipe is asked to hold (Linux's default is 64 KiB)


def _grow_pipe(fd: int) -> None:
    """Ask for a larger buffer if ``fd`` is a pipe (Linux): fewer reads, writes and
    wake-ups per large message. Anything else, or a refusal, leaves it as it is."""
    setpipe = getattr(fcntl, "F_SETPIPE_SZ", None)
    if setpipe is None:
        return
    with contextlib.suppress(OSError):
        if stat.S_ISFIFO(os.fstat(fd).st_mode):
            fcntl.fcntl(fd, setpipe, PIPE_BYTES)


class StdioTransport(anyio.abc.AsyncResource):
    """A ``Transport`` reading ``read_fd`` and writing ``write_fd``.

    The descriptors are switched to non-blocking mode when first used and set
    back to their previous mode by :meth:`aclose`. (The mode belongs to the open
    file description, which a terminal's stdin shares with the shell: always
    close the transport.) The descriptors are closed by :meth:`aclose` only when
    ``closefd`` is true; the default leaves them open, as stdin and stdout, or a
    descriptor owned by a :class:`StdoutReservation`, must be.

    ``receive`` returns up to ``chunk_size`` bytes. ``send`` writes every byte,
    looping on partial writes; sends are serialised by a lock. If a send is
    cancelled (or the transport closed) after part of its data went out, the
    byte stream is torn mid-frame, so every later send raises
    ``anyio.BrokenResourceError``; a caller that must not lose a frame shields
    the send. A write to a pipe whose reader is gone (``EPIPE``) raises
    ``anyio.BrokenResourceError``; end of input raises ``anyio.EndOfStream``.
    """

    def __init__(
        self,
        read_fd: int = 0,
        write_fd: int = 1,
        *,
        chunk_size: int = 256 * 1024,
        closefd: bool = False,
    ) -> None:
        if chunk_size < 1:
            raise ValueError(f"chunk_size must be positive, not {chunk_size}")
        self._read_fd = read_fd
        self._write_fd = write_fd
        self._chunk_size = chunk_size
        self._closefd = closefd
        self._send_lock = anyio.Lock(fast_acquire=True)  # no yield when it is free
        self._saved_blocking: dict[int, bool] = {}
        self._receiving = False
        self._closed = False
        self._torn = False
        self._buffer = memoryview(bytearray(chunk_size))  # what every read fills
        self._drained = False  # the last read was short: wait before the next one
        self._pollable = False  # a read found nothing once (a file never does)

    def _read_some(self, fd: int) -> bytes:
        """One ``read`` into a buffer kept for the transport's life, copied out.

        ``os.read(fd, chunk_size)`` would allocate ``chunk_size`` bytes per call; above
        the C allocator's threshold (128 KiB with glibc) that is a fresh ``mmap`` and
        ``munmap`` for every small frame.
        """
        count = os.readv(fd, (self._buffer,))
        return self._buffer[:count].tobytes()

    @property
    def read_fd(self) -> int:
        return self._read_fd

    @property
    def write_fd(self) -> int:
        return self._write_fd

    def _make_nonblocking(self, fd: int) -> None:
        if fd not in self._saved_blocking:
            self._saved_blocking[fd] = os.get_blocking(fd)
            os.set_blocking(fd, False)
            _grow_pipe(fd)

    async def receive(self) -> bytes:
        """Up to ``chunk_size`` bytes, waiting until some arrive."""
        if self._receiving:
            raise anyio.BusyResourceError("receiving from")
        self._receiving = True
        try:
            await anyio.lowlevel.checkpoint_if_cancelled()
            data = await self._read()
        finally:
            self._receiving = False
        if not data:
            raise anyio.EndOfStream
        return data

    async def _read(self) -> bytes:
        fd = self._read_fd
        waited = False
        if self._drained:  # one read when the input comes, not one more that finds none
            await self._wait_readable(fd)
            waited = True
        while True:
            if self._closed:
                raise anyio.ClosedResourceError
            self._make_nonblocking(fd)
            try:
                data: bytes | None = self._read_some(fd)
            except BlockingIOError:
                data = None
            except OSError as exc:
                raise anyio.BrokenResourceError(f"reading fd {fd} failed: {exc}") from exc
            if data is None:
                self._pollable = True
                await self._wait_readable(fd)
                waited = True
                continue
            self._drained = self._pollable and len(data) < self._chunk_size
            if not waited:
                # The read did not wait: still let other tasks run.
                await anyio.lowlevel.cancel_shielded_checkpoint()
            return data

    async def _wait_readable(self, fd: int) -> None:
        """Wait until ``fd`` can be read: a registration with the loop per wait."""
        await anyio.wait_readable(fd)

    async def send(self, data: bytes) -> None:
        """Write all of ``data``, waiting while the descriptor is full."""
        async with self._send_lock:
            if self._closed:
                raise anyio.ClosedResourceError
            if self._torn:
                raise anyio.BrokenResourceError(
                    "an earlier send stopped part-way through; the byte stream is torn"
                )
            fd = self._write_fd
            self._make_nonblocking(fd)
            with memoryview(data) as view:
                await self._write_all(fd, view)

    async def _write_all(self, fd: int, view: memoryview) -> None:
        written = 0
        total = len(view)
        while written < total:
            try:
                written += os.write(fd, view[written:])
                continue
            except BlockingIOError:
                pass
            except OSError as exc:
                # BrokenPipeError (EPIPE), ConnectionResetError, EBADF, EIO, ...
                if written:
                    self._torn = True
                raise anyio.BrokenResourceError(f"writing fd {fd} failed: {exc}") from exc
            try:
                await anyio.wait_writable(fd)
            except BaseException:  # cancelled, or closed under us
                if written:
                    self._torn = True
                raise

    async def aclose(self) -> None:
        """Wake any task waiting on the descriptors, restore their blocking mode and,
        with ``closefd``, close them."""
        if not self._closed:
            self._closed = True
            fds = dict.fromkeys((self._read_fd, self._write_fd))
            for fd in fds:
                anyio.notify_closing(fd)
            for fd, blocking in self._saved_blocking.items():
                with contextlib.suppress(OSError):  # already closed by its owner
                    os.set_blocking(fd, blocking)
            self._saved_blocking.clear()
            if self._closefd:
                for fd in fds:
                    os.close(fd)
        await anyio.lowlevel.cancel_shielded_checkpoint()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<StdioTransport read_fd={self._read_fd} write_fd={self._write_fd} {state}>"


class _AsyncioStdioTransport(StdioTransport):
    """:class:`StdioTransport` whose reads wait on a :class:`~acp_agent._loop.KeptReader`
    (asyncio and uvloop)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._reader = KeptReader(self._read_fd)

    async def _wait_readable(self, fd: int) -> None:
        await self._reader.wait()

    async def aclose(self) -> None:
        self._reader.close(anyio.ClosedResourceError())
        await super().aclose()


def open_stdio(read_fd: int = 0, write_fd: int = 1, **kwargs: Any) -> StdioTransport:
    """The stdio transport for the running event loop (the one place they differ): on
    asyncio and uvloop a reader kept registered, on trio a ``wait_readable`` per wait.
    Takes :class:`StdioTransport`'s arguments."""
    cls = StdioTransport if running_asyncio_loop() is None else _AsyncioStdioTransport
    return cls(read_fd, write_fd, **kwargs)


def _flush(stream: IO[Any] | None) -> None:
    if stream is not None:
        with contextlib.suppress(OSError, ValueError):  # closed or broken: nothing to flush
            stream.flush()


class StdoutReservation:
    """Keeps the process's original stdout for protocol frames only.

    Made by :func:`reserve_stdout`. While it holds:

    - :attr:`fd` is a new, non-inheritable descriptor on the original stdout:
      give it to ``StdioTransport(write_fd=...)``. The reservation owns it and
      closes it in :meth:`restore`.
    - descriptor 1 is a copy of descriptor 2, so anything that writes to fd 1
      (C libraries, ``os.write(1, ...)``, child processes inheriting stdout, a
      ``sys.stdout`` object someone kept) lands on stderr;
    - ``sys.stdout`` is ``sys.stderr``, so ``print`` goes to stderr too;
    - every ``logging.StreamHandler`` (root's and named loggers') that wrote to
      the old ``sys.stdout`` or ``sys.__stdout__`` writes to ``sys.stderr``.
      ``warnings.showwarning`` and ``logging.lastResort`` already write to
      ``sys.stderr`` and are left alone.

    :meth:`restore` (also run when a ``with`` block ends) undoes all of it,
    leaving alone whatever someone else has since replaced.
    """

    def __init__(
        self,
        fd: int,
        saved_fd: int,
        old_stdout: IO[str] | None,
        retargeted: list[tuple[logging.StreamHandler[Any], IO[str]]],
    ) -> None:
        self._fd = fd
        self._saved_fd = saved_fd
        self._old_stdout = old_stdout
        self._retargeted = retargeted
        self._restored = False

    @property
    def fd(self) -> int:
        """The descriptor on the original stdout, for protocol frames."""
        return self._fd

    def restore(self) -> None:
        """Put fd 1, ``sys.stdout`` and the logging handlers back; close :attr:`fd`.

        Calling it again does nothing.
        """
        if self._restored:
            return
        self._restored = True
        _flush(sys.stdout)
        for handler, stream in self._retargeted:
            if handler.stream is sys.stderr:
                handler.setStream(stream)
        if sys.stdout is sys.stderr:
            sys.stdout = self._old_stdout
        os.dup2(self._saved_fd, 1)
        os.close(self._saved_fd)
        os.close(self._fd)

    def __enter__(self) -> int:
        return self._fd

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.restore()

    def __repr__(self) -> str:
        state = "restored" if self._restored else "active"
        return f"<StdoutReservation fd={self._fd} {state}>"


def _stream_handlers() -> list[logging.StreamHandler[Any]]:
    loggers: list[logging.Logger] = [logging.getLogger()]
    loggers.extend(
        logger
        for logger in list(logging.Logger.manager.loggerDict.values())
        if isinstance(logger, logging.Logger)
    )
    return [
        handler
        for logger in loggers
        for handler in logger.handlers
        if isinstance(handler, logging.StreamHandler)
    ]


def reserve_stdout() -> StdoutReservation:
    """Reserve the real stdout for protocol frames; send every other writer to stderr.

    Use as ``with reserve_stdout() as fd: ...`` (``fd`` is the protocol
    descriptor) or keep the returned :class:`StdoutReservation` and call its
    ``restore()``. Call it once, early, before starting threads that print.
    """
    old_stdout = sys.stdout
    _flush(old_stdout)
    _flush(sys.__stdout__)
    saved_fd = os.dup(1)
    try:
        fd = os.dup(1)
        try:
            os.dup2(2, 1)
        except BaseException:
            os.close(fd)
            raise
    except BaseException:
        os.close(saved_fd)
        raise
    sys.stdout = sys.stderr
    targets = {id(old_stdout), id(sys.__stdout__)}
    retargeted: list[tuple[logging.StreamHandler[Any], IO[str]]] = []
    for handler in _stream_handlers():
        stream = handler.stream
        if stream is not None and id(stream) in targets:
            handler.setStream(sys.stderr)
            retargeted.append((handler, stream))
    return StdoutReservation(fd, saved_fd, old_stdout, retargeted)
