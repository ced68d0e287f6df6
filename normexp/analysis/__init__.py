"""Reading finished runs: study statistics, the boundary search, the depth law, the
initialisation probe, and the report."""
