from .train.threads import configure

configure()  # before torch loads (see train/threads.py)

from .cli import main

main()
