"""normexp's grid sweeper (hydra/sweeper=grid): see grid_sweeper."""
