"""The ``gate`` command line: :mod:`gate.cli.app` holds the root group, and one module per command
group adds its commands to it here."""

from gate.cli import channel, consume, consumer, run, sandbox, snapshot, source, verify
from gate.cli.app import main

for _command in (sandbox.sandbox, channel.channel, consumer.consumer, source.check_source, run.run, run.status,
                 snapshot.snapshot, verify.verify, consume.tail, consume.spark_load, consume.spark_materialise):
    main.add_command(_command)

__all__ = ["main"]
