"""`python -m normexp.bench.startup_child STAMP train ARGS...`: `normexp train ARGS` exactly as
the user runs it (`launch.hydra_job.run_train`), with the loop's `on_start` hook writing to STAMP the wall
clock and the CPU seconds used when set-up is done (step 0 next). CPU seconds do not depend
on what else the machine is doing. Run by suite.bench_startup in a fresh process."""

import json
import resource
import sys
import time


def main(argv: list[str]) -> None:
    stamp_path, command, *args = argv
    if command != "train":
        raise SystemExit(f"usage: python -m normexp.bench.startup_child STAMP train ARGS... (got {command!r})")
    from ..launch.hydra_job import run_train
    from ..train.loop import Hooks

    def stamp():
        use = resource.getrusage(resource.RUSAGE_SELF)
        with open(stamp_path, "w") as f:
            json.dump({"wall": time.time(), "cpu": use.ru_utime + use.ru_stime}, f)

    run_train(args, hooks=Hooks(on_start=stamp))


if __name__ == "__main__":
    main(sys.argv[1:])
