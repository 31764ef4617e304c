"""Development and demo tools (never used by a running channel): sandbox servers and workloads."""
