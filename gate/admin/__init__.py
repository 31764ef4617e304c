"""Administration of channels: create and change them, preflight checks, live status."""
