"""`normexp bench`: how fast is a training step here, and what do the instruments cost?

All measurements run in one process so that they are comparable (see suite.py for the
order): the fp32 matmul peak of this machine (the denominator of MFU); normexp's real
training loop (`normexp.train.alone.train`) timed step by step on the shapes of shapes.py; the
same network written by hand (minimal_gpt.py), interleaved with normexp so that load from
other processes hits both alike; the instruments' cost; and, optionally, torch.compile,
parallel sweep jobs, start-up time and the depth-profile images.

The modules, one job each:

    shapes.py        the shapes (A, B, C, deep, --shape NAME=LxD,SEQ,BATCH) and their FLOPs
    minimal_gpt.py   the reference model: a Pre-LN GPT as a user writes it by hand
    loops.py         the timed runs: normexp's loop and the hand-written one, model build
    timing.py        step durations, best-of-rounds pools, memory, CPU share, matmul peak,
                     TensorBoard bytes per step
    suite.py         the bench itself: options, their checks, the rounds, the summary
    table.py         the printed table
    startup_child.py the child process that times `normexp train` from launch to step 0

The command is declared in normexp/cli.py like the others.
"""


class BenchError(Exception):
    """Bad bench arguments; str(e) is one line naming the problem and the fix."""
