"""Runner: a scenario (YAML) -> plan of jobs -> rank processes under faults -> history -> evidence -> verdicts."""
