"""Run one gate channel in the foreground, as ``gate run CHANNEL`` would, for the benchmark.

    python scripts/bench/gate_runner.py --dc-port P --channel NAME [--stamp FILE] [--profile-dir DIR]

The benchmark starts this as a separate process so that it can measure the RSS and CPU of gate's
whole process tree (main process, decoder and writer processes) with psutil. SIGTERM stops the pipeline
cleanly (it drains the writers and stores the last checkpoint).

``--stamp FILE`` receives the wall-clock time (time.time()) just before ``Pipeline.run()`` is
called: the benchmark measures gate's rows/s from that moment.

``--capture-only DIR`` runs gate without its writes into transfer_data: the writer processes are started and
handed every chunk of numbered rows (each row's final JSON text, rendered by the decoders, as ``gate run``
hands it to the writers), and count them instead of building INSERTs: each adds up the rows and a CRC32 of
each row's fields (the benchmark's ``dc_checksum`` over transfer_data, computed on the rows themselves) and
writes the totals to ``DIR/sink-PID.json`` when gate stops it. Everything else runs as in ``gate run``: the
reader, the decoders, ordering and numbering, and the checkpoint (one DC transaction every 100 ms, how the
benchmark sees the end of the range).

``--profile-dir DIR`` runs the main process under cProfile (``DIR/main.prof``) and each writer and
decoder process too (``DIR/writer-PID.prof``, ``DIR/decoder-PID.prof``), without touching gate's
code: the process targets are wrapped here, under this module's own name (``gate_runner``, beside the
script on sys.path), which the children import to find the wrappers: gate's children do not import
the main script (see gate.common.process).
"""

from __future__ import annotations

import argparse
import cProfile
import json
import logging
import os
import sys
import time
import zlib
from collections import Counter
from pathlib import Path
from typing import Any

import gate.capture.decoder
import gate.capture.snapshot
import gate.capture.writer
from gate.capture.sequencer import DCRow
from gate.common.config import Secret, ServerConfig
from gate.common.process import start_child
from gate.common.tls import TlsSettings

_ORIGINAL = {"writer": gate.capture.writer._writer_main, "decoder": gate.capture.decoder._decoder_main}
_PROFILE_ENV = "GATE_BENCH_PROFILE_DIR"
_SINK_ENV = "GATE_BENCH_SINK_DIR"


def fingerprint(rows: list[DCRow]) -> int:
    """The sum of CRC32s of the rows' fields as the benchmark's ``dc_checksum`` takes them from transfer_data
    (id, tid, dbname, tablename, create_time, optype, data joined by '|', in utf8mb4)."""
    crc32 = zlib.crc32
    return sum(crc32(f"{r[0]}|{r[1]}|{r[2]}|{r[3]}|{r[4]}|{r[6]}|".encode("utf-8", "surrogateescape")
                     + (r[7] if isinstance(r[7], bytes) else r[7].encode("utf-8", "surrogateescape"))) for r in rows)


def _sink_writer_main(server: ServerConfig, database: str, fence: Any, link: Any, inbox: Any, outbox: Any) -> None:
    """A writer process that counts (--capture-only): each chunk acknowledged as a writer does once it is
    committed, its rows counted and fingerprinted, nothing sent to the DC; the totals written when it stops."""
    start_child("gate-writer")
    rows = crc = 0
    while (job := inbox.get()) is not None:
        seq, chunk, _size = job
        started = time.monotonic()
        rows += len(chunk)
        crc += fingerprint(chunk)
        outbox.put(("done", seq, dict(Counter(r[6] for r in chunk)), time.monotonic() - started))
    target = Path(os.environ[_SINK_ENV]) / f"sink-{os.getpid()}.json"
    target.write_text(json.dumps({"rows": rows, "crc": crc}))


def _profiled(role: str, *args: object) -> None:
    """A child process's body under cProfile; the profile is written when the body returns."""
    profile = cProfile.Profile()
    try:
        profile.runcall(_ORIGINAL[role], *args)
    finally:
        profile.dump_stats(str(Path(os.environ[_PROFILE_ENV]) / f"{role}-{os.getpid()}.prof"))


def _profiled_writer_main(*args: object) -> None:
    _profiled("writer", *args)


def _profiled_decoder_main(*args: object) -> None:
    _profiled("decoder", *args)


def _profiled_reader_main(*args: object) -> None:
    """A snapshot reader's chunks under cProfile, dumped after each (readers are killed, never return)."""
    import gate.capture.snapshot_reader as reader

    profile, read = cProfile.Profile(), reader.Reader.read
    target = str(Path(os.environ[_PROFILE_ENV]) / f"snapshot-{os.getpid()}.prof")

    def profiled_read(self: reader.Reader, task: reader.Task) -> reader.Chunk:
        profile.enable()
        try:
            return read(self, task)
        finally:
            profile.disable()
            profile.dump_stats(target)

    reader.Reader.read = profiled_read  # type: ignore[method-assign]
    reader.reader_main(*args)  # type: ignore[arg-type]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dc-port", type=int, required=True)
    parser.add_argument("--dc-host", default="127.0.0.1")
    parser.add_argument("--channel", required=True)
    parser.add_argument("--stamp", help="file that receives time.time() just before Pipeline.run()")
    parser.add_argument("--profile-dir", help="cProfile the main process, decoders and writers into this folder")
    parser.add_argument("--capture-only", metavar="DIR",
                        help="no writes into transfer_data: the writers count the rows, totals into DIR/sink-PID.json")
    parser.add_argument("--dc-tls-ca", help="connect to the DC over TLS, verifying its certificate and name with this CA")
    parser.add_argument("--no-preflight", action="store_true")
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args()
    logging.basicConfig(level=args.log_level, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    from gate.capture.pipeline import Pipeline

    if args.profile_dir:
        import gate_runner  # this file as a module of its name, which a child can import

        Path(args.profile_dir).mkdir(parents=True, exist_ok=True)
        os.environ[_PROFILE_ENV] = str(Path(args.profile_dir).resolve())  # inherited by the children
        gate.capture.writer._writer_main = gate_runner._profiled_writer_main  # type: ignore[assignment]
        gate.capture.decoder._decoder_main = gate_runner._profiled_decoder_main  # type: ignore[assignment]
        gate.capture.snapshot.reader_main = gate_runner._profiled_reader_main  # type: ignore[assignment]

    if args.capture_only:
        import gate_runner  # the sink, found by the children under this module's name

        Path(args.capture_only).mkdir(parents=True, exist_ok=True)
        os.environ[_SINK_ENV] = str(Path(args.capture_only).resolve())
        gate.capture.writer._writer_main = gate_runner._sink_writer_main  # type: ignore[assignment]
    tls = TlsSettings("verify-identity", args.dc_tls_ca) if args.dc_tls_ca else TlsSettings("disabled")
    dc = ServerConfig(args.dc_host, args.dc_port, "root", Secret(""), tls)
    pipeline = Pipeline(dc, args.channel, preflight=not args.no_preflight)
    if args.stamp:
        Path(args.stamp).write_text(repr(time.time()))
    if args.profile_dir:
        profile = cProfile.Profile()
        try:
            profile.runcall(pipeline.run)
        finally:
            profile.dump_stats(str(Path(args.profile_dir) / "main.prof"))
    else:
        pipeline.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
