"""The benchmark's capture-only gate (scripts/bench/gate_runner.py --capture-only): the fingerprint its counting
writers take of the rows they are handed is the one the benchmark takes of transfer_data once the real writers
have stored the same rows, so that "the same rows as written into the DC" is a real check."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.append(str(ROOT / "scripts" / "bench"))

import benchmark  # noqa: E402  (scripts, not packages: found through the path above, after everything else)
import gate_runner  # noqa: E402

from gate.capture.writer import _dc_session, _write  # noqa: E402
from gate.common.dc import ChannelSettings, connect, create_channel  # noqa: E402
from gate.devtools.sandbox import Sandbox  # noqa: E402
from tests.replay import server_config  # noqa: E402

TEXTS = ["", "'", "\\", "\0", "a\0b", "\n\r\t", '"', "é🚀", "x" * 3000]


def test_the_counting_writers_fingerprint_is_the_dc_checksum_of_the_same_rows(sandbox: Sandbox, unique_name: str,
                                                                              tmp_path: Path) -> None:
    dc = server_config(sandbox.dc)
    with connect(dc, "DC") as conn:
        create_channel(conn, ChannelSettings(unique_name, server_config(sandbox.source)))
    rows = [(n + 1, n // 3 + 1, "db", f"t{n % 2}", "2024-05-01 10:00:0" + str(n % 10), "h:1",
             ("INSERT", "UPDATE", "DELETE")[n % 3], json.dumps({"NEW": [{"c": text}]}, ensure_ascii=False))
            for n, text in enumerate(TEXTS * 3)]
    session, _ = _dc_session(dc, unique_name)
    try:
        _write(session, rows)
    finally:
        session.conn.close()
    for n, part in enumerate((rows[:10], rows[10:])):  # two writers, each with its totals
        (tmp_path / f"sink-{n}.json").write_text(json.dumps({"rows": len(part), "crc": gate_runner.fingerprint(part)}))
    assert benchmark.sink_checksum(tmp_path) == benchmark.dc_checksum(sandbox.dc, unique_name)
    assert benchmark.sink_checksum(tmp_path).startswith(f"{len(rows)}:")
