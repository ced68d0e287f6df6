from .launch.threads_env import configure

configure()  # before torch loads (see threads_env.py)

from .cli import main

main()
