"""kspec's measured figures: each bench_*.py prints its own; `make bench` runs them all."""
