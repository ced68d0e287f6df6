"""When the boundary sweeper's runs start (hydra.sweeper.schedule): the searches of
analysis/boundary.py decide which points to probe; this module decides when each run of them
launches, and records each result into its search (boundary.record).

    rounds  `search_all`: every seed of every next point as one batch a round; each round
            waits for its slowest run
    async   `Scheduler` + `run_scheduled`: runs start as slots free up, seed 0 of a point
            first (see Scheduler for which failures of seed 0 decide a point)

Both probe the same points for the same outcomes. The sweeper that uses them is
hydra_plugins/normexp_boundary_sweeper; this module is pure Python, tested with stand-in launchers.
"""

from __future__ import annotations

import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

from ..analysis.boundary import Search, record
from ..runs import outcomes
from ..runs.schema import Status


def search_all(searches: list[Search], seeds: list, first_points: list, launch, after_round=None) -> int:
    """Run every search to its end in rounds (hydra.sweeper.schedule=rounds). Each round asks
    `launch` for one batch: [(search index, x, seed)] -> [summary dict or None] in the same
    order (the sweeper's launcher; a stand-in in the tests), and waits for all of it. Round 0
    probes `first_points` with every seed, later rounds each unfinished search's next points,
    or, for a search that is done, its budget check: jobs (i, x, seed, N), run at N× the steps.
    `after_round(k)` is called after each round. Returns the number of rounds."""
    k = 0
    while True:
        batch = []
        for i, s in enumerate(searches):
            if k > 0 and s.error is not None:  # a search that stopped on an error launches nothing more
                continue
            points = first_points if k == 0 else s.next_points()
            batch += ([(i, x, seed) for x in points for seed in seeds] if points else
                      [(i, x, seed, s.budget_check) for x, seed in s.budget_jobs(seeds)])
        if not batch:
            return k
        for job, summary in zip(batch, launch(batch)):
            record(searches[job[0]], job[1], job[2], summary, *job[3:])
        k += 1
        if after_round:
            after_round(k)


class Scheduler:
    """Which runs may start now, without a round-wide barrier (hydra.sweeper.schedule=async).

    Each search probes its points independently of the others: its initial points at once,
    then, when none of its points is still running, its next points. A point runs its first
    seed alone; the rest start when that one is in, unless it has decided the point already:
      - seed 0 collapsed or diverged: the point is unstable whatever the other seeds do
        (stable = every seed learned; unstable = some seed collapsed or diverged), so they
        are skipped;
      - seed 0 never learned at a point below a point known to learn: the point bounds the
        lower edge whatever the others do, and "too slow" is never called a stability limit,
        so they are skipped;
      - seed 0 never learned anywhere else: the others run, since one of them collapsing
        would make the point an unstable one (the upper edge's "why", or the empty-window
        search's direction depends on it). While another point of the search still waits
        for its seed 0 (it may turn out to learn above this one) the decision waits too.
    When a search is done (no next points, none running), its budget check starts: every seed
    at each edge's failing point (Search.budget_jobs), as jobs (i, x, seed, N) run at N× the
    steps. `ready()` orders runs by `cost` (× N for a check; largest first), so long runs start
    early and do not straggle at the end."""

    def __init__(self, searches: list[Search], seeds: list, first_points: list, cost=None):
        self.searches, self.seeds, self.cost = searches, list(seeds), cost or (lambda i, x: 0)
        self.queue: list = []        # (i, x, seed) ready to start
        self.running: set = set()    # (i, x, seed) launched, not yet in
        self.open: dict = {}         # i -> {x: seeds still to come back}
        self.deferred: dict = {}     # i -> {x: seed 0 never learned, the decision waits for the other seed 0s}
        self.checking: set = set()   # searches whose budget check has been queued
        for i, s in enumerate(searches):
            for x in first_points:
                self._probe(i, x)

    def _probe(self, i, x) -> None:
        self.open.setdefault(i, {})[x] = {self.seeds[0]}
        self.queue.append((i, x, self.seeds[0]))

    def ready(self) -> list:
        """The runs that may start now, largest cost first (the caller takes as many as it has slots)."""
        self.queue.sort(key=lambda job: -self.cost(job[0], job[1]) * (job[3] if len(job) > 3 else 1))
        return list(self.queue)

    def start(self, job) -> None:
        self.queue.remove(job)
        self.running.add(job)

    def finish(self, job, summary) -> None:
        """A run came back: record it, then start the point's other seeds, the search's next
        points, or, when it is done, its budget check."""
        i, x, seed, *factor = job
        self.running.discard(job)
        s = self.searches[i]
        record(s, x, seed, summary, *factor)
        if s.error is not None:  # a failed job stops its search: nothing more of it starts
            self.queue = [j for j in self.queue if j[0] != i]
            self.open[i], self.deferred[i] = {}, set()
            return
        if factor:  # a budget-check run: nothing follows it
            return
        waiting = self.open[i][x]
        waiting.discard(seed)
        if seed == self.seeds[0] and len(self.seeds) > 1:
            self.deferred.setdefault(i, set()).add(x)
        self._decide(i)
        for done in [p for p, w in self.open[i].items() if not w and p not in self.deferred.get(i, ())]:
            del self.open[i][done]
        if not self.open[i]:
            points = s.next_points()
            for nxt in points:
                self._probe(i, nxt)
            if not points and i not in self.checking:
                self.checking.add(i)
                self.queue += [(i, bx, bseed, s.budget_check) for bx, bseed in s.budget_jobs(self.seeds)]

    def _decide(self, i) -> None:
        """Each point of search i whose seed 0 is in: skip its other seeds where seed 0 decided
        it, start them where it did not (a never-learned seed 0 waits while another point's
        seed 0 is still out: that one may learn above it)."""
        s, first = self.searches[i], self.seeds[0]
        first_out = any(first in seeds and first not in s.outcomes.get(x, {}) for x, seeds in self.open[i].items())
        for x in sorted(self.deferred.get(i, ())):
            if self._decided_by_first(s, x, first):
                s.skipped += len(self.seeds) - 1
            elif first_out and s.outcomes[x][first] in outcomes.TOO_SLOW:
                continue
            else:
                for other in self.seeds[1:]:
                    self.open[i][x].add(other)
                    self.queue.append((i, x, other))
            self.deferred[i].discard(x)

    @staticmethod
    def _decided_by_first(s: Search, x, seed) -> bool:
        outcome = s.outcomes[x][seed]
        if outcomes.is_unstable(outcome):
            return True
        start = s.window_start()
        return outcome in outcomes.TOO_SLOW and start is not None and x < start

    def done(self) -> bool:
        return not self.queue and not self.running


def run_scheduled(scheduler: Scheduler, launch_one, slots: int, after_run=None, clock=None,
                  stop_after: float | None = None, interrupted=lambda: 0) -> dict:
    """Keep `slots` runs going until the scheduler is done: `launch_one((i, x, seed))` -> a
    summary dict or None (blocking; called from `slots` threads at once, or inline when
    slots = 1). `after_run()` is called after each run is recorded. `stop_after` (seconds):
    no run starts after that much wall time; the runs going finish, and the schedule ends
    unfinished ("stopped": True), to be continued from the search's record. Returns the
    schedule's numbers: wall seconds, busy seconds (the runs' own wall times summed), slots,
    runs, and busy_fraction = busy / (slots × wall). `interrupted()` (slots > 1): the signal
    that stops the search (0: none); once it is set no run starts, the runs going return (their
    workers got the same Ctrl-C and save checkpoints), their outcomes are not judged, and
    "interrupted" holds the signal."""
    clock = clock or time.monotonic
    t0, busy, runs = clock(), 0.0, 0

    def may_start() -> bool:
        return stop_after is None or clock() - t0 < stop_after

    def timed(job):
        t = clock()
        try:
            return launch_one(job)
        finally:
            nonlocal busy
            busy += clock() - t

    if slots <= 1:  # inline: a launcher that runs in this process keeps the main thread (signals)
        while not scheduler.done() and may_start():
            job = scheduler.ready()[0]
            scheduler.start(job)
            scheduler.finish(job, timed(job))
            runs += 1
            if after_run:
                after_run()
    else:
        with ThreadPoolExecutor(max_workers=slots) as pool:
            futures: dict = {}
            while not scheduler.done() and not interrupted():
                starting = may_start()
                for job in scheduler.ready()[:slots - len(futures)] if starting else []:
                    scheduler.start(job)
                    futures[pool.submit(timed, job)] = job
                if not futures:  # nothing going and nothing may start: the time is up
                    break
                finished, _ = wait(futures, return_when=FIRST_COMPLETED)
                if interrupted():  # the slots going stop too: wait for them, judge nothing
                    wait(futures)
                    break
                for f in finished:
                    job = futures.pop(f)
                    try:
                        summary = f.result()
                    except Exception as e:  # the launcher itself failed: no outcome, the search stops
                        summary = {"status": Status.FAILED, "error": f"{type(e).__name__}: {e}"}
                    scheduler.finish(job, summary)
                    runs += 1
                    if after_run:
                        after_run()
    wall = clock() - t0
    return {"wall_seconds": round(wall, 2), "busy_seconds": round(busy, 2), "slots": slots, "runs": runs,
            "busy_fraction": round(busy / (slots * wall), 3) if wall > 0 else None, "stopped": not scheduler.done(),
            "interrupted": interrupted()}
