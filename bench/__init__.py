"""The benchmark suite: ours against the anchors, measured in one run; ``python -m bench`` writes BENCHMARKS.md."""
