r"""Output tee of the 1GC-7RC script tracer.

Copies a traced script's stdout/stderr and reads metrics from it.

``sitecustomize`` starts this module in a separate, tiny interpreter (``python -I -S``) for every
traced script and points the script's fds 1 and 2 at pipes whose read ends this process holds; fds 1
and 2 of this process are the script's ORIGINAL stdout and stderr. Every byte is copied to them
unchanged as soon as it arrives. Separately, complete lines (``\n`` and ``\r`` both end a line,
ANSI escapes stripped) are parsed for step metrics (``step 100 | loss 1.23``, ``Epoch 3/10 - loss:
0.12``, ...), which are appended to the script's spool file as ``{"ev": "metrics", ..., "src":
"stdout"}``, and the last lines are kept in ``<spool>.tail``.

Contract with the traced process (all through the environment, nothing on the command line):

* ``BENCH_TEE_FDS`` = ``out,err,ctl,ack``: read ends of the stdout and stderr pipes (``err`` is -1
  when the script's stdout and stderr were the same file, e.g. ``2>&1``: one pipe then keeps their
  exact order), the read end of a control pipe and the write end of an acknowledgement pipe. At exit
  the script writes a byte to ``ctl``; this process then drains and copies what is in the pipes,
  spools its metrics and answers on ``ack``, so that the script's last output is on its real stdout
  before the script is reported to have ended.
* ``BENCH_SPOOL_FILE``: the spool. A value the script traced there itself (the task helper
  ``log_metrics`` traces, then prints) is not spooled again when its line is read: before it spools
  a printed line, the tee reads the spool's new traced events, and drops each printed value that is
  a copy (at its printed precision) of a value traced or spooled at the same key and step
  (``_bench_once.py``). The helper traces before it prints, so the traced value is always there
  first, however late the tee reads.
* ``BENCH_TEE_UPSTREAM``: the claims file (``<spool>.claims``) of an enclosing traced script whose
  tee reads this script's fds ``BENCH_TEE_UPSTREAM_FDS`` (a sweep script that runs ``train.py``);
  every metric line of those streams is claimed there before it is passed on, and a tee skips the
  lines claimed in its own claims file, so that the enclosing run does not count them again.

Nothing here may break the script: errors in parsing or spooling switch those off and copying goes
on; a broken stdout (EPIPE) is drained and discarded, never pushed back to the script. SIGINT,
SIGHUP and SIGTERM are ignored: the tee ends at EOF, once the script and every child that inherited
its stdout have exited (or at SIGKILL), so that what a script prints while it handles Ctrl-C or the
budget's SIGTERM still gets out. Standard library only; the line parser is ``_bench_logparse.py``
beside this file.
"""

import os
import sys
import time

from _bench_logparse import clean, parse_line  # the hook folder is on sys.path (see sitecustomize)
from _bench_once import Seen, TracedReader

TAIL_LINES = 200
TAIL_EVERY = 2.0  # seconds between tail rewrites (and once more at EOF)
TAIL_WIDTH = 2000  # characters kept of one tail line
MAX_LINE = 1 << 16  # a "line" this long without a line break is cut here
MAX_EVENT = 4000  # bytes of one spool line: appends this small stay atomic next to the script's own
TRANSIENT_EVERY = 1.0  # at most one event per second from \r-refreshed progress bars


class _Stream:
    def __init__(self, fd, dest, prefix, upstream=False):
        self.fd, self.dest, self.prefix = fd, dest, prefix
        self.upstream = upstream  # an enclosing tee reads what this stream's lines are copied to
        self.buf = b""
        self.transient = None  # the last \r-terminated segment since the last \n: a progress bar's current state
        self.open = True
        self.dest_ok = True


class Tee:
    def __init__(self, streams, ctl, ack, spool, upstream):
        self.streams, self.ctl, self.ack = streams, ctl, ack
        self.spool, self.upstream = spool, upstream
        self.parsing = bool(spool) or bool(upstream)
        self.spool_fd = self.upstream_fd = self.claims_fd = None
        self.claims, self.claims_buf = {}, b""
        self.seen = Seen()  # values traced by the script or spooled from its lines, by (key, step)
        self.traced = TracedReader(spool, self.seen) if spool else None
        self.tail = []
        self.tail_dirty, self.tail_at = False, 0.0
        self.last_event, self.transient_at = None, 0.0

    # --- copying -------------------------------------------------------------------------------
    def run(self):
        import select

        self.select = select
        poller = select.poll()
        by_fd = {}
        for s in self.streams:
            os.set_blocking(s.fd, False)
            poller.register(s.fd, select.POLLIN)
            by_fd[s.fd] = s
        if self.ctl >= 0:
            poller.register(self.ctl, select.POLLIN)
        while any(s.open for s in self.streams):
            timeout = None
            if self.tail_dirty:
                timeout = max(0.0, self.tail_at + TAIL_EVERY - time.monotonic()) * 1000
            events = poller.poll(timeout)
            control = False
            for fd, _ in events:
                if fd == self.ctl:
                    control = True
                elif by_fd[fd].open:
                    self.pump(by_fd[fd], once=True)
                    if not by_fd[fd].open:
                        poller.unregister(fd)
            if control:
                self.control(poller)
            if self.tail_dirty and time.monotonic() >= self.tail_at + TAIL_EVERY:
                self.write_tail()
        self.write_tail()

    def control(self, poller):
        """The script is exiting: pass on everything it wrote, then acknowledge."""
        try:
            got = os.read(self.ctl, 64)
        except OSError:
            got = b""
        if not got:
            poller.unregister(self.ctl)
            self.ctl = -1
            return
        for s in self.streams:
            if s.open:
                self.pump(s, once=False)
                if not s.open:
                    poller.unregister(s.fd)
        try:
            os.write(self.ack, b"k")
        except OSError:
            pass

    def pump(self, s, once):
        """Read what the pipe holds, copy it on, then look at its lines.

        It reads one chunk, or until the pipe is empty.
        """
        while True:
            try:
                data = os.read(s.fd, 1 << 16)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if not data:
                s.open = False
                self.lines(s, b"", eof=True)
                return
            if s.upstream and self.upstream:
                self.lines(s, data)  # claim metric lines upstream before the enclosing tee can see them
                self.forward(s, data)
            else:
                self.forward(s, data)  # bytes first: parsing never delays the output
                self.lines(s, data)
            if once:
                return

    def forward(self, s, data):
        view = memoryview(data)
        while s.dest_ok and view:
            try:
                view = view[os.write(s.dest, view) :]
            except BlockingIOError:  # someone made the shared stdout non-blocking: wait as a blocking write would
                self.select.select([], [s.dest], [], 1.0)
            except OSError:  # EPIPE, EBADF, EIO: the reader is gone; keep draining, never push it back
                s.dest_ok = False

    # --- lines ---------------------------------------------------------------------------------
    def lines(self, s, data, eof=False):
        if not (self.parsing or self.spool):
            return
        try:
            self._lines(s, data, eof)
        except Exception:  # a bug here must not stop the copying
            self.parsing = False
            self.spool = ""

    def _lines(self, s, data, eof):
        buf = s.buf + data
        if not eof and b"\n" not in data and b"\r" not in data:
            s.buf = buf
            if len(buf) > MAX_LINE:
                s.buf = b""
                self.segment(s, buf, False)
            return
        hold = b""
        if buf.endswith(b"\r") and not eof:  # maybe the first half of \r\n
            buf, hold = buf[:-1], b"\r"
        parts = buf.replace(b"\r\n", b"\n").split(b"\n")
        rest = parts.pop()
        for part in parts:
            segs = part.split(b"\r")
            for seg in segs[:-1]:
                self.segment(s, seg, True)
            self.segment(s, segs[-1], False)
        if b"\r" in rest:
            segs = rest.split(b"\r")
            for seg in segs[:-1]:
                self.segment(s, seg, True)
            rest = segs[-1]
        s.buf = rest + hold
        if eof:
            if s.buf:
                self.segment(s, s.buf, False)
            elif s.transient is not None:
                self.segment(s, b"", False)
            s.buf = b""

    def segment(self, s, raw, transient):
        if transient:
            if not raw:
                return
            s.transient = raw
        elif not raw and s.transient is not None:  # "...\r\n" or a bar closed by "\n": the bar's last state stays
            raw = s.transient
        if not transient:
            s.transient = None
        text = clean(raw.decode("utf-8", "replace"))
        if not transient:
            self.tail.append(s.prefix + text[:TAIL_WIDTH])
            if len(self.tail) > 2 * TAIL_LINES:
                del self.tail[:-TAIL_LINES]
        self.tail_dirty = bool(self.spool)
        if self.parsing:
            found = parse_line(text)
            if found is not None:
                self.metrics(s, raw, found, transient)

    def metrics(self, s, raw, found, transient):
        if s.upstream and self.upstream:
            self.claim_upstream(raw)
        if self.claimed(raw):
            return  # a traced child of this script printed it: its own run has it
        step, values = found
        key = (step, sorted(values.items()))
        if key == self.last_event:
            return
        if transient:
            now = time.monotonic()
            if now - self.transient_at < TRANSIENT_EVERY:
                return
            self.transient_at = now
        self.last_event = key
        if self.spool:
            self.traced.read()
            values = {k: v for k, v in values.items() if not self.seen.copy_of(k, step, v, False)}
            for k, v in self.emit(step, values).items() if values else ():
                self.seen.add(k, step, v, False)

    def emit(self, step, values):
        """Spool the values (as many as fit in one small atomic line); returns the ones spooled."""
        if self.spool_fd is None:
            try:
                self.spool_fd = os.open(self.spool, os.O_WRONLY | os.O_APPEND)
            except OSError:
                self.spool_fd = -1
        if self.spool_fd < 0:
            return {}
        head = f'{{"ev":"metrics","t":{time.time()!r},"step":{step:d},"metrics":{{'
        body, size, sent = [], len(head) + 20, {}
        for k, v in values.items():
            item = f'"{k}":{v!r}'
            size += len(item) + 1
            if size > MAX_EVENT:
                break
            body.append(item)
            sent[k] = v
        try:
            os.write(self.spool_fd, (head + ",".join(body) + '},"src":"stdout"}\n').encode())
        except OSError:
            return {}
        return sent

    # --- claims: metric lines of traced child scripts ---------------------------------------------
    def claim_upstream(self, raw):
        if self.upstream_fd is None:
            try:
                self.upstream_fd = os.open(self.upstream, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            except OSError:
                self.upstream, self.upstream_fd = "", None
                return
        try:
            os.write(self.upstream_fd, raw + b"\n")
        except OSError:
            pass

    def claimed(self, raw):
        if not self.spool:
            return False
        if self.claims_fd is None:
            try:
                self.claims_fd = os.open(self.spool + ".claims", os.O_RDONLY)
            except OSError:
                return False  # no traced child has claimed anything yet
        while True:
            try:
                data = os.read(self.claims_fd, 1 << 16)
            except OSError:
                data = b""
            if not data:
                break
            lines = (self.claims_buf + data).split(b"\n")
            self.claims_buf = lines.pop()
            for line in lines:
                self.claims[line] = self.claims.get(line, 0) + 1
            if len(self.claims) > 10000:
                self.claims = dict(list(self.claims.items())[-5000:])
        n = self.claims.get(raw, 0)
        if n:
            self.claims[raw] = n - 1
            return True
        return False

    # --- tail ----------------------------------------------------------------------------------
    def write_tail(self):
        self.tail_dirty = False
        self.tail_at = time.monotonic()
        if not self.spool:
            return
        lines = self.tail[-TAIL_LINES:]
        for s in self.streams:  # progress bars still running: their current state ends the tail
            if s.transient is not None:
                lines.append(s.prefix + clean(s.transient.decode("utf-8", "replace"))[:TAIL_WIDTH])
        path = self.spool + ".tail"
        try:
            fd = os.open(path + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                data = "".join(line + "\n" for line in lines[-TAIL_LINES:]).encode("utf-8", "replace")
                while data:
                    data = data[os.write(fd, data) :]
            finally:
                os.close(fd)
            os.replace(path + ".tmp", path)
        except OSError:
            pass


def _close_others(keep):
    """Close inherited descriptors this process does not use (stdin included).

    It must not keep them open.
    """
    try:
        fds = [int(fd) for fd in os.listdir("/proc/self/fd")]
    except (OSError, ValueError):
        fds = range(min(os.sysconf("SC_OPEN_MAX"), 1 << 16))
    for fd in fds:
        if fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass


def _copy_only(pairs, ack):
    """Last resort after an unexpected error: copy bytes until EOF, nothing else."""
    import select

    try:
        os.close(ack)  # the script's exit handshake sees EOF instead of waiting for an answer
    except OSError:
        pass
    live = dict(pairs)
    poller = select.poll()
    for fd in live:
        poller.register(fd, select.POLLIN)
    while live:
        for fd, _ in poller.poll():
            try:
                data = os.read(fd, 1 << 16)
            except BlockingIOError:
                continue
            except OSError:
                data = b""
            if not data:
                del live[fd]
                poller.unregister(fd)
                continue
            while data:
                try:
                    data = data[os.write(live[fd], data) :]
                except BlockingIOError:
                    select.select([], [live[fd]], [], 1.0)
                except OSError:
                    break


def main():
    import _signal

    for sig in (_signal.SIGINT, _signal.SIGHUP, _signal.SIGTERM):
        _signal.signal(sig, _signal.SIG_IGN)
    out, err, ctl, ack = (int(x) for x in os.environ["BENCH_TEE_FDS"].split(","))
    _close_others({1, 2} | {fd for fd in (out, err, ctl, ack) if fd >= 0})
    up = os.environ.get("BENCH_TEE_UPSTREAM_FDS", "").split(",")
    streams = [_Stream(out, 1, "", "1" in up or (err < 0 and "2" in up))]
    if err >= 0:
        streams.append(_Stream(err, 2, "[stderr] ", "2" in up))
    spool = os.environ.get("BENCH_SPOOL_FILE", "")
    tee = Tee(streams, ctl, ack, spool, os.environ.get("BENCH_TEE_UPSTREAM", ""))
    try:
        tee.run()
    except Exception as e:
        try:
            os.write(2, f"[bench tracer] output tee degraded to plain copying: {e!r}\n".encode())
        except OSError:
            pass
        _copy_only([(s.fd, s.dest) for s in streams if s.open], ack)


if __name__ == "__main__":
    sys.exit(main())
