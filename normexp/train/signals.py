"""Stopping a job on SIGINT/SIGTERM: the one mechanism, for loading, training and saving.

* While training (`StopSignals.deferred()`), the first signal asks the loop to stop at the
  next step boundary: `check()` raises `Interrupted`, the loop saves a checkpoint, writes
  status "interrupted" and the job exits 130 (SIGINT) or 143 (SIGTERM).
* Anywhere else (loading data, building the model), the first signal raises `Interrupted`
  at once.
* During start-up (before a StopSignals is in place: torch and hydra are being imported), a
  first signal is remembered (`catch_early_signals`, installed first thing by `normexp
  train`) and acted on at the next safe point: before any folder exists the command exits
  128+signum; once Hydra has made the job's folder, entering StopSignals raises `Interrupted`
  and the run is recorded "interrupted".
* A second signal, or a first one that the job has not acted on within `grace` seconds
  (a step that runs for minutes, a long C call that holds the main thread), ends the process
  right away: `on_hard_stop(signum)` records status "interrupted" (the last checkpoint stays
  as it was) and the process exits with the same code.

Preemption under SLURM (submitit). A SLURM job started by submitit (hydra/launcher=slurm)
gets SIGUSR2 (`SUBMITIT_PREEMPT_SIGNAL`) `signal_delay_s` before its time limit, or when the
scheduler preempts it, and submitit's handler for it checkpoints the submission and requeues the
job. Inside such a job, a StopSignals also defers that signal to the next step boundary, where
`check()` raises `Preempted`: the loop saves a checkpoint and records status "requeued", and
then `forward()` hands the signal to submitit's handler, which requeues the job (see
launch.job.hydra_task); the requeued job resumes from the checkpoint. Outside submitit (no Python
handler for the signal) it is left alone.

Python runs signal handlers only between bytecodes of the main thread, so a main thread
stuck in one long torch op cannot be reached by a handler. The C-level handler does write
every signal to the wakeup fd (`signal.set_wakeup_fd`) at once; a watchdog thread waits on
it and keeps the deadline. Torch ops release the GIL, so the watchdog runs meanwhile.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import threading
from typing import Callable

SIGNALS = (signal.SIGINT, signal.SIGTERM)
GRACE_SECONDS = 5.0


def preemption_signal() -> int | None:
    """The signal submitit's SLURM jobs get before a time limit or a preemption (SIGUSR2 unless
    SUBMITIT_PREEMPT_SIGNAL says otherwise); None where the platform has no such signal."""
    return getattr(signal, "SIG" + os.environ.get("SUBMITIT_PREEMPT_SIGNAL", "USR2"), None)


class Interrupted(BaseException):
    """The job was asked to stop. A BaseException, like KeyboardInterrupt, so that no
    `except Exception` in data or model code swallows it."""

    def __init__(self, signum: int):
        self.signum = signum
        super().__init__(signal.Signals(signum).name)

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


class Preempted(Interrupted):
    """SLURM is about to stop the job (time limit or preemption) and submitit will requeue it."""


def stop_exception(signum: int) -> Interrupted:
    return Interrupted(signum) if signum in SIGNALS else Preempted(signum)


# ------------------------------------------------------------------ start-up

# The first SIGINT/SIGTERM that came before a StopSignals was in place (0 = none).
_early_signum = 0


def catch_early_signals() -> None:
    """Install at the very start of `normexp train`, before the heavy imports (torch, hydra).

    Python's default SIGINT handler raises KeyboardInterrupt wherever the main thread is,
    also halfway through importing numpy or torch (a later import then fails with a bogus
    AttributeError) or inside a library's broad `except`. Until a StopSignals takes over,
    a first signal is only remembered; it is acted on at the next safe point:
    `exit_if_early_signal()` before any folder exists (exit 128+signum, nothing written), or
    StopSignals.__enter__ in the job (status "interrupted"). A second one ends the process at
    once (nothing has been trained yet)."""

    for s in SIGNALS:
        signal.signal(s, _remember)


def _remember(signum, frame):
    global _early_signum
    if _early_signum:
        os._exit(128 + _early_signum)
    _early_signum = signum


def release_early_signals() -> None:
    """For the commands that do not train (report, probe, bench): Python's default handlers
    again, and a signal that came meanwhile acted on now."""
    if signal.getsignal(signal.SIGINT) is _remember:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if signal.getsignal(signal.SIGTERM) is _remember:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    exit_if_early_signal()


def pending_signal() -> int:
    """The signal remembered since start-up and not yet acted on (0: none). A sweep whose jobs
    run in other processes keeps the start-up handlers: it asks this between runs."""
    return _early_signum


def exit_if_early_signal() -> None:
    """Exit 128+signum with one line if a signal came during start-up."""
    if _early_signum:
        sys.stderr.write(f"normexp: interrupted by {signal.Signals(_early_signum).name} during start-up; "
                         "nothing was trained\n")
        raise SystemExit(128 + _early_signum)


class StopSignals:
    """Install with `with StopSignals(on_hard_stop) as stop:`; see the module docstring. `grace`
    may be raised while it is in place (a pack sizes it to its step, train/pack.py): a deadline
    reads it when the signal comes."""

    def __init__(self, on_hard_stop: Callable[[int], None] | None = None, grace: float = GRACE_SECONDS):
        self.on_hard_stop = on_hard_stop
        self.grace = grace
        self.signum = 0            # the first signal received, 0 = none
        self._deferred = False
        self._acted = threading.Event()  # the main thread has begun to stop
        self._hard_stopping = threading.Lock()
        self._old: dict = {}
        self._old_wakeup = -1
        self._pair = None

    # ---- set-up
    def __enter__(self):
        try:
            for s in SIGNALS:
                self._old[s] = signal.signal(s, self._handle)
            preempt = preemption_signal()
            if preempt is not None and callable(signal.getsignal(preempt)):  # submitit's handler is there
                self._old[preempt] = signal.signal(preempt, self._handle)
        except ValueError:  # not the main thread (a launcher's worker thread): leave signals alone
            return self
        self._pair = socket.socketpair()
        self._pair[0].setblocking(False)
        self._old_wakeup = signal.set_wakeup_fd(self._pair[0].fileno(), warn_on_full_buffer=False)
        threading.Thread(target=self._watch, args=(self._pair[1],), daemon=True, name="normexp-stop-watchdog").start()
        if _early_signum:  # came during start-up (catch_early_signals): stop before loading anything
            self.__exit__(None, None, None)  # a `with` does not call __exit__ when __enter__ raises
            raise stop_exception(_early_signum)
        return self

    def __exit__(self, *exc):
        for s, h in self._old.items():
            signal.signal(s, h)
        if self._pair is not None:
            signal.set_wakeup_fd(self._old_wakeup)
            self._pair[0].close()  # the watchdog's recv returns b"" and it ends
            self._pair = None
        return False

    @contextlib.contextmanager
    def deferred(self):
        """While inside, a first signal waits for the next `check()` (a step boundary)."""
        self._deferred = True
        try:
            yield self
        finally:
            self._deferred = False

    def check(self) -> None:
        """At a step boundary: raise Interrupted if a signal came. (Under torchrun the ranks
        agree first, so that all stop at the same step.)"""
        if self.signum:  # acted on from here: mark it before any slow work (the import below loads torch)
            self._acted.set()
        from . import distributed  # why: normexp.cli imports this module at start-up, distributed imports torch

        signum = distributed.agree_max(self.signum)
        if signum:
            self._acted.set()
            raise stop_exception(signum)

    def forward(self, signum: int) -> None:
        """Hand a signal to the handler that was there before (after leaving the context):
        submitit's, for a preemption, which requeues the job and exits."""
        previous = self._old.get(signum)
        if callable(previous):
            if signum not in SIGNALS:
                # the requeue makes SLURM send SIGCONT and SIGTERM to the job while submitit's
                # handler is still logging; its own handlers for them only log (re-entrant
                # logging errors), and the job exits right after, so ignore them
                for s in (signal.SIGTERM, getattr(signal, "SIGCONT", None)):
                    if s is not None:
                        signal.signal(s, signal.SIG_IGN)
            previous(signum, None)

    # ---- the handler (main thread, between bytecodes) and the watchdog (its own thread)
    def _handle(self, signum, frame):
        if self.signum:  # a second signal: the watchdog sees it too and ends the process
            return
        self.signum = signum
        if not self._deferred:
            self._acted.set()
            raise stop_exception(signum)

    def _watch(self, sock) -> None:
        first = None
        while True:
            try:
                data = sock.recv(16)
            except OSError:
                return
            if not data:
                return
            for signum in data:
                if signum not in SIGNALS:
                    continue
                if first is not None:  # a second signal: no more waiting
                    self._hard_stop(first)
                first = signum
                threading.Thread(target=self._deadline, args=(signum,), daemon=True).start()

    def _deadline(self, signum: int) -> None:
        if not self._acted.wait(self.grace):
            self._hard_stop(signum)

    def _hard_stop(self, signum: int) -> None:
        # one recording only: a third signal (or the deadline) while the first records waits for its exit
        with self._hard_stopping:
            try:
                if self.on_hard_stop is not None:
                    self.on_hard_stop(signum)
            finally:
                os._exit(128 + signum)
