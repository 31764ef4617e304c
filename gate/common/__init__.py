"""Shared base of every layer: configuration, the DC's tables and settings, errors, child processes."""
