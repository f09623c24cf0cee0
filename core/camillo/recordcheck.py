"""The segments of a large read decoded and checked in a process of their own, beside the read that decrypts them.

A cold open (or a merge, or a re-open after many new batches) decodes every segment it reads
strictly (the deterministic CBOR profile of the payload and of each batch header, the header's
fields: about 50 µs a batch) and every record (:func:`camillo.records.decode_record`: the id its
batch header lists, the profile, the fields), Python that holds the interpreter lock, and then stages
the records in the local state, about as long again.  :class:`RecordChecker` runs the decoding and the
checks in a child Python process fed through a pipe while the reading process decrypts the next
segments and stages the batches already checked: the two halves run on two cores.  For each segment
the child sends back whether its payload and every batch header decoded (:func:`camillo.segments.decode_payload`),
and then, per batch, its id, its header's fields (:func:`camillo.records.header_parts`) and, when every
one of its records checked, what the local state stores of each record
(:func:`camillo.rowfields.record_fields`, the same code the reader runs).  The reader rebuilds the
batches from a plain decoding of the payload and those fields (:func:`camillo.records.checked_batch`)
and stages a batch from its records' fields without decoding them again.  It decodes again in its own
process a segment the child refused and a batch with a record that did not check, to report the exact
problem, so a problem reads the same with or without the child; and a batch holding a control record,
whose records the roster needs decoded.

The payloads go to the child through an anonymous pipe and nothing of them reaches a disk; the child
is a copy of this same code (the ``camillo`` package directory of the parent, without the package's
``__init__``, under ``python -I``), started when a read has enough records to repay its start (about
0.1 s, 30 MB) and ended with the read: it exits when the pipe closes, so it never outlives its parent.
When no child can be started, or it dies, the reader checks the segments itself, as it did before.

The two halves are kept even: while the child has :data:`BEHIND` frames or more to answer, the
reader decodes the segments it sends next, and their batch headers, strictly itself (as it does
every segment without a child), and the child only checks those segments' records.

Frames (little-endian ``u32``): to the child, a length, then the segment count and per segment a
mode byte (0: decode it whole, 1: the reader decoded it, check its records), a length and its
decrypted payload; from the child, one byte ``R`` once it is ready, then per frame a length and a
``marshal`` of a list with an item per segment: None when its payload or a batch header did not
decode, else a list with per batch (id, header fields, None when a record of it did not check, else
the list of its records' fields); id and header fields are empty for a segment of mode 1.  (``marshal``: the child is this installation's own code
at the other end of an anonymous pipe, as trusted as the reader itself, which takes its verdicts as
they are.)

Confined to the thread that owns the vault; the class's two threads only move bytes through the pipe.
"""

from __future__ import annotations

import contextlib
import marshal
import os
import queue
import struct
import subprocess
import sys
import threading
from collections.abc import Sequence
from typing import IO, BinaryIO

import cbor2

try:
    import fcntl
except ImportError:  # (Windows: pipes keep their size)
    fcntl = None  # type: ignore[assignment]

from .records import H, HeaderParts, decode_record, header_parts
from .rowfields import Fields, record_fields
from .segments import decode_payload

_U32 = struct.Struct("<I")
_MODE = struct.Struct("<BI")  # a segment's mode and length
FRAME_BYTES = 512 << 10  # payload bytes per frame (about 2,000 records): large enough that a frame's overhead is a fraction of its checks
DEPTH = 3  # frames sent and not answered before the reader waits for the oldest
BEHIND = 2  # frames sent and not answered from which the reader decodes segments itself
_WHOLE, _DECODED = 0, 1  # a segment of a frame: decode it whole, or check its records only

# The child: the package's modules without its __init__ (which imports every face of Camillo).
_BOOT = ("import sys, types\n"
         "package = types.ModuleType('camillo')\n"
         "package.__path__ = [sys.argv[1]]\n"
         "sys.modules['camillo'] = package\n"
         "from camillo.recordcheck import serve\n"
         "serve(sys.stdin.buffer, sys.stdout.buffer)\n")


class CheckerGone(Exception):
    """The child process is gone (it could not start, or it died): check in this process."""


Ticket = tuple[int, int]  # (frame, the segment's place in it)
# (id, header fields, records' fields); id and header fields empty for a segment decoded by the reader
BatchAnswer = tuple[bytes, "HeaderParts | None", "list[Fields] | None"]
SegmentAnswer = list[BatchAnswer] | None


class RecordChecker:
    """A child process checking records, frame by frame, in the order they were added."""

    def __init__(self) -> None:
        flags = ["-I"] + (["-B"] if sys.dont_write_bytecode else [])
        package = os.path.dirname(os.path.abspath(__file__))
        no_window = getattr(subprocess, "CREATE_NO_WINDOW", 0)  # (Windows: no console for the child of the app)
        self._proc = subprocess.Popen(  # this interpreter, running this package's own code
            [sys.executable, *flags, "-c", _BOOT, package],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, close_fds=True,
            creationflags=no_window)
        for pipe in (self._proc.stdin, self._proc.stdout):
            _widen(pipe)
        self._outbox: queue.Queue[bytes | None] = queue.Queue()
        self._cond = threading.Condition()
        self._ready = self._gone = False
        self._answers: dict[int, bytes] = {}
        self._read: dict[int, list[SegmentAnswer]] = {}  # the last frame answered, read
        self._sent = 0  # frames handed to the sender
        self._received = 0  # frames answered
        self._parts: list[bytes] = []  # the frame being filled
        self._segments = self._bytes = 0  # in it
        for target in (self._send_loop, self._receive_loop):
            threading.Thread(target=target, name="camillo-recordcheck", daemon=True).start()

    @property
    def ready(self) -> bool:
        """The child has started and is alive: records added now are checked there."""
        return self._ready and not self._gone

    def wait_ready(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the child to be ready (tests; a read never waits)."""
        with self._cond:
            self._cond.wait_for(lambda: self._ready or self._gone, timeout)
            return self.ready

    def add(self, payload: bytes, *, decoded: bool = False) -> Ticket:
        """Queue a decrypted segment payload; what the child read of it by :meth:`verdicts`.
        ``decoded``: the reader decoded it and its batch headers strictly itself (:meth:`behind`), and
        the child checks only its records."""
        self._parts += (_MODE.pack(_DECODED if decoded else _WHOLE, len(payload)), payload)
        ticket = (self._sent, self._segments)
        self._segments += 1
        self._bytes += len(payload)
        if self._bytes >= FRAME_BYTES:
            self._send()
        return ticket

    @property
    def behind(self) -> bool:
        """The child is the slower half of the read: :data:`BEHIND` frames or more wait for its answer.
        The reader then decodes the next segments and their batch headers itself (``add(decoded=True)``),
        which slows it and lets the child catch up: on two cores each half does about as much."""
        with self._cond:
            return self._sent - self._received >= BEHIND

    def due(self, ticket: Ticket) -> bool:
        """Time to take the verdicts of ``ticket`` (the oldest the reader holds): they are here, the
        child is gone, or :data:`DEPTH` frames were sent after it (the reader waits then, so that
        the batches it holds stay few)."""
        with self._cond:
            return ticket[0] in self._answers or self._gone or self._sent - ticket[0] > DEPTH

    def verdicts(self, ticket: Ticket) -> SegmentAnswer:
        """What the child read of the segment of ``ticket`` (None: its payload or a batch header did
        not decode; else per batch its id, header fields and records' fields, None when a record of it
        did not check), waiting for the child if need be.  Raises :class:`CheckerGone` when the child
        is gone before answering."""
        frame, at = ticket
        if frame == self._sent:
            self._send()
        with self._cond:
            while frame not in self._answers and not self._gone:
                self._cond.wait()
            answer = self._answers.get(frame)
            if answer is None:
                raise CheckerGone
            for old in [f for f in self._answers if f < frame]:  # (asked in order: the older ones are done)
                del self._answers[old]
            if frame not in self._read:
                self._read = {frame: _answer(answer)}  # (read once: a frame holds several segments)
            segments = self._read[frame]
        if len(segments) <= at:
            raise CheckerGone  # (not what this frame asked: checked here)
        return segments[at]

    def close(self) -> None:
        """End the child (it exits when its input closes) and wait for it."""
        self._outbox.put(None)
        try:
            self._proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        with self._cond:
            self._gone = True
            self._cond.notify_all()

    def __enter__(self) -> RecordChecker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------------------ the pipe

    def _send(self) -> None:
        if not self._segments:
            return
        body = b"".join([_U32.pack(self._segments), *self._parts])
        self._outbox.put(_U32.pack(len(body)) + body)
        self._sent += 1
        self._parts, self._segments, self._bytes = [], 0, 0

    def _send_loop(self) -> None:
        pipe = self._proc.stdin
        assert pipe is not None
        try:
            while (frame := self._outbox.get()) is not None:
                pipe.write(frame)
                pipe.flush()
        except OSError:  # (the child died: the receiver says so)
            pass
        finally:
            try:
                pipe.close()
            except OSError:
                pass

    def _receive_loop(self) -> None:
        pipe = self._proc.stdout
        assert pipe is not None
        frame = 0
        try:
            if pipe.read(1) != b"R":
                return
            with self._cond:
                self._ready = True
                self._cond.notify_all()
            while len(head := pipe.read(4)) == 4:
                (count,) = _U32.unpack(head)
                answer = pipe.read(count)
                if len(answer) != count:
                    return
                frame += 1
                with self._cond:
                    self._answers[frame - 1] = answer
                    self._received = frame
                    self._cond.notify_all()
        except (OSError, ValueError):
            pass
        finally:
            with self._cond:
                self._gone = True
                self._cond.notify_all()


PIPE_BYTES = 1 << 20


def _widen(pipe: IO[bytes] | None) -> None:
    """Make a pipe hold :data:`PIPE_BYTES` (Linux; elsewhere, or above the system's limit, it stays as
    it is).  The receiving thread reads an answer of several megabytes as the pipe fills, taking the
    interpreter lock from the reading thread for each part: with the default 64 KiB, about eighty
    times an answer, each a wait of up to the switch interval while the child, its output full, waits too."""
    if pipe is None or fcntl is None or not hasattr(fcntl, "F_SETPIPE_SZ"):
        return
    with contextlib.suppress(OSError):
        fcntl.fcntl(pipe.fileno(), fcntl.F_SETPIPE_SZ, PIPE_BYTES)


def check_frame(body: bytes) -> list[SegmentAnswer]:
    """What the child reads of the segments of one frame (:meth:`RecordChecker.verdicts`)."""
    view = memoryview(body)
    (count,), at = _U32.unpack_from(view, 0), 4
    out: list[SegmentAnswer] = []
    for _ in range(count):
        mode, size = _MODE.unpack_from(view, at)
        payload = bytes(view[at + 5:at + 5 + size])
        out.append(check_records(payload) if mode == _DECODED else check_segment(payload))
        at += 5 + size
    return out


def check_records(payload: bytes) -> SegmentAnswer:
    """The records of a payload the reader decoded strictly itself (read plainly here): per batch,
    their fields when every one decodes and checks (None: the payload is not what the reader read)."""
    try:
        items = cbor2.loads(payload)
        return [(b"", None, _fields(cbor2.loads(header)[H.RECORDS], raws)) for header, _sigs, raws in items]
    except Exception:  # (not a payload the reader decoded: it checks the records itself)
        return None


def check_segment(payload: bytes) -> SegmentAnswer:
    """A decrypted segment's payload decoded strictly (None: it or a batch header does not decode),
    and per batch its id, its header's fields and, when every record decodes and checks, their fields."""
    try:
        batches = decode_payload(payload, "")
    except Exception:  # a VaultError, or anything else: the reader's own decoding says what
        return None
    return [(batch.id, header_parts(batch.header), _fields(batch.header.records, batch.records)) for batch in batches]


def _fields(rids: Sequence[bytes], raws: Sequence[bytes | None]) -> list[Fields] | None:
    """The fields of a batch's records (the erased ones left out), or None when one does not check."""
    try:
        return [record_fields(decode_record(raw, expected_id=rid).fields) for rid, raw in zip(rids, raws)
                if raw is not None]
    except Exception:  # a VaultError, or anything else: the reader's own decode says what
        return None


def _answer(data: bytes) -> list[SegmentAnswer]:
    """A frame's answer as :func:`check_frame` gave it (anything else: the child is not answering)."""
    try:
        answer = marshal.loads(data)  # noqa: S302 - this installation's own child (module docstring)
    except (EOFError, ValueError, TypeError):
        raise CheckerGone from None
    if type(answer) is not list:
        raise CheckerGone
    return answer


def serve(inp: BinaryIO, out: BinaryIO) -> None:
    """The child's loop: a verdict frame for each frame read, until the input closes."""
    out.write(b"R")
    out.flush()
    while len(head := inp.read(4)) == 4:
        (size,) = _U32.unpack(head)
        body = inp.read(size)
        if len(body) != size:
            return
        answer = marshal.dumps(check_frame(body))
        out.write(_U32.pack(len(answer)) + answer)
        out.flush()


def start() -> RecordChecker | None:
    """A checker, or None when no child process can be started here (the reader checks itself): in
    an app frozen into one executable, ``sys.executable`` is the app itself, not an interpreter."""
    if getattr(sys, "frozen", False):
        return None
    try:
        return RecordChecker()
    except (OSError, ValueError, subprocess.SubprocessError):
        return None
