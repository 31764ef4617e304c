"""The ``gate`` command line: :mod:`gate.cli.app` holds the root group, and one module per command
group holds its commands, imported when the command is used (:class:`gate.cli.app.GateGroup`)."""

from gate.cli.app import main

main.lazy.update({
    "sandbox": "gate.cli.sandbox:sandbox", "channel": "gate.cli.channel:channel",
    "consumer": "gate.cli.consumer:consumer", "check-source": "gate.cli.source:check_source",
    "run": "gate.cli.run:run", "status": "gate.cli.run:status", "snapshot": "gate.cli.snapshot:snapshot",
    "verify": "gate.cli.verify:verify", "tail": "gate.cli.consume:tail", "spark-load": "gate.cli.consume:spark_load",
    "spark-materialise": "gate.cli.consume:spark_materialise",
})

__all__ = ["main"]
