"""kvattn benchmarks (python3 -m bench.run)."""
