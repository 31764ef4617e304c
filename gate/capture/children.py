"""The forkserver's preload: every module a child of ``gate run`` runs (decoders, writers, snapshot readers),
imported once in the forkserver, so that the children it forks share them (see :mod:`gate.common.process`).
Only the forkserver imports this module."""

from gate.capture import decoder, snapshot_reader, writer  # noqa: F401 (imported for the children)
from gate.common.process import forkserver_ready

forkserver_ready()
