"""Run one gate channel in the foreground, as ``gate run CHANNEL`` would, for the benchmark.

    python scripts/bench/gate_runner.py --dc-port P --channel NAME [--stamp FILE] [--profile-dir DIR]

The benchmark starts this as a separate process so that it can measure the RSS and CPU of gate's
whole process tree (main process + writer processes) with psutil. SIGTERM stops the pipeline
cleanly (it drains the writers and stores the last checkpoint).

``--stamp FILE`` receives the wall-clock time (time.time()) just before ``Pipeline.run()`` is
called: the benchmark measures gate's rows/s from that moment.

``GATE_BENCH_VARIANT`` (e.g. ``write=values,json=direct``) patches prototype fast paths from
scripts/bench/fastpaths.py into gate in this process and in the writers; gate's files are not changed.

``--profile-dir DIR`` runs the main process under cProfile (``DIR/main.prof``) and each writer
process too (``DIR/writer-PID.prof``), without touching gate's code: the writer target is wrapped
here, and spawned writers find the wrapper because spawn re-imports this script as their
``__main__``.
"""

from __future__ import annotations

import argparse
import cProfile
import logging
import os
import sys
import time
from pathlib import Path

import gate.writer
from gate.config import Secret, ServerConfig

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fastpaths  # noqa: E402

_PATCHED = fastpaths.apply()  # GATE_BENCH_VARIANT; runs in the writers too (spawn imports this module)

_ORIGINAL_WRITER_MAIN = gate.writer._writer_main
_PROFILE_ENV = "GATE_BENCH_PROFILE_DIR"


def _profiled_writer_main(*args: object) -> None:
    """The writer process body under cProfile; the profile is written when the writer returns."""
    profile = cProfile.Profile()
    try:
        profile.runcall(_ORIGINAL_WRITER_MAIN, *args)
    finally:
        profile.dump_stats(str(Path(os.environ[_PROFILE_ENV]) / f"writer-{os.getpid()}.prof"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dc-port", type=int, required=True)
    parser.add_argument("--dc-host", default="127.0.0.1")
    parser.add_argument("--channel", required=True)
    parser.add_argument("--stamp", help="file that receives time.time() just before Pipeline.run()")
    parser.add_argument("--profile-dir", help="cProfile the main process and the writers into this folder")
    parser.add_argument("--no-preflight", action="store_true")
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args()
    logging.basicConfig(level=args.log_level, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    from gate.pipeline import Pipeline

    if args.profile_dir:
        Path(args.profile_dir).mkdir(parents=True, exist_ok=True)
        os.environ[_PROFILE_ENV] = str(Path(args.profile_dir).resolve())  # inherited by the writers
        gate.writer._writer_main = _profiled_writer_main  # type: ignore[assignment]

    if _PATCHED:
        logging.getLogger("bench").info("prototype variant: %s", ", ".join(_PATCHED))
    dc = ServerConfig(args.dc_host, args.dc_port, "root", Secret(""))
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
