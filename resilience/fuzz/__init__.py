"""Property-based testing of checkpoint implementations: Hypothesis strategies, the lifecycle state
machine, and the fuzzing run behind `resilience fuzz`. The public names are re-exported by
resilience.strategies."""
