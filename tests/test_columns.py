"""Column rules: exclude, mask, hash and truncate, from the rule text to the DC's rows, on real servers."""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import time
from collections.abc import Callable
from dataclasses import replace

import pytest
from click.testing import Result

from gate.admin.catalog import check_pattern
from gate.capture.pipeline import FILTER_EVERY, Pipeline
from gate.common.columns import MASK, ColumnRule, chain, matching, parse_rules, rule_keys
from gate.common.config import ChannelDefaults
from gate.common.dc import ChannelSettings, connect, read_settings, write_settings
from gate.common.errors import ColumnRuleRefused, InvalidValue, MissingSecret
from gate.consume.client import Consumer
from gate.devtools.sandbox import Sandbox
from tests.replay import dc_rows, make_channel, running, wait_caught_up

Gate = Callable[..., Result]
KEY = "k3y-only-in-the-environment-5z"


def _hmac(value: str | bytes) -> str:
    data = value if isinstance(value, bytes) else value.encode()
    return hmac.new(KEY.encode(), data, hashlib.sha256).hexdigest()


# --- unit: rules and value transforms ---------------------------------------------------------


def test_parse_rules_keeps_the_order_and_refuses_malformed_ones() -> None:
    rules = parse_rules(exclude=["s.t.a"], mask=["s.*.b"], hash_=["s.t.c?"], hash_key_env="K",
                        truncate=["s.t.d=5"])
    assert rules == [ColumnRule("exclude", "s.t.a"), ColumnRule("mask", "s.*.b"),
                     ColumnRule("hash", "s.t.c?", key_env="K"), ColumnRule("truncate", "s.t.d", length=5)]
    assert [ColumnRule.from_row(rule.as_row()) for rule in rules] == rules
    with pytest.raises(InvalidValue, match=r"Column pattern 's\.t' of --mask is not valid"):
        parse_rules(mask=["s.t"])
    with pytest.raises(InvalidValue, match="--hash needs --hash-key-env VAR"):
        parse_rules(hash_=["s.t.c"])
    with pytest.raises(InvalidValue, match=r"--truncate 's\.t\.d=0' is not valid"):
        parse_rules(truncate=["s.t.d=0"])
    with pytest.raises(InvalidValue, match="'1X' is not an environment variable name"):
        parse_rules(hash_=["s.t.c"], hash_key_env="1X")


def test_parse_rules_refuses_nonsense_lengths_and_a_key_without_hash_rules() -> None:
    for spec in ("shop.orders.email=\u00b2", f"shop.orders.email={10**28}", "shop.orders.email=5\n"):
        with pytest.raises(InvalidValue) as caught:
            parse_rules(truncate=[spec])
        assert str(caught.value) == (
            f"--truncate {spec!r} is not valid. Write db.table.column=N with N a whole number of characters (bytes "
            "for binary columns) from 1 to 4294967295, e.g. shop.docs.body=100.")
    assert parse_rules(truncate=["s.t.d=4294967295"]) == [ColumnRule("truncate", "s.t.d", length=4294967295)]
    with pytest.raises(InvalidValue) as caught:
        parse_rules(mask=["s.t.c"], hash_key_env="GATE_HASH_KEY")
    assert str(caught.value) == ("--hash-key-env is given without --hash: it names the key of --hash rules only. Add "
                                 "--hash PATTERN, or leave --hash-key-env out.")


def test_patterns_take_names_in_any_alphabet() -> None:
    assert parse_rules(mask=["shop.people.pr\u00e9nom", "\u5546\u5e97.*.\u540d\u524d"]) == [
        ColumnRule("mask", "shop.people.pr\u00e9nom"), ColumnRule("mask", "\u5546\u5e97.*.\u540d\u524d")]
    assert check_pattern("caf\u00e9.cr\u00e8me_*") == "caf\u00e9.cr\u00e8me_*"
    for bad in ("shop.people.pr\u00e9nom x", "shop.people.a`b", "shop.people.name\n"):
        with pytest.raises(InvalidValue) as caught:
            parse_rules(mask=[bad])
        assert str(caught.value) == (
            f"Column pattern {bad!r} of --mask is not valid. Write db.table.column with exactly two dots, using "
            "letters (of any alphabet), digits, _ and $, and the wildcards * and ?, e.g. shop.users.password_hash "
            "or *.*.email.")


def test_matching_is_fnmatch_on_db_table_column_and_case_sensitive() -> None:
    rules = [ColumnRule("mask", "shop.*.email"), ColumnRule("exclude", "*.users.pw?"), ColumnRule("mask", "x.y.z")]
    assert matching(rules, "shop", "users", "email") == [rules[0]]
    assert matching(rules, "crm", "users", "pw1") == [rules[1]]
    assert matching(rules, "shop", "users", "Email") == [] and matching(rules, "shop", "users", "pw12") == []


def test_value_transforms_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GATE_TEST_KEY", KEY)
    keys = rule_keys([ColumnRule("hash", "a.b.c", key_env="GATE_TEST_KEY")])
    assert keys == {"GATE_TEST_KEY": KEY.encode()}
    hash_rule = ColumnRule("hash", "a.b.c", key_env="GATE_TEST_KEY")
    cut = ColumnRule("truncate", "a.b.c", length=3)
    assert chain([], keys) is None
    assert chain([ColumnRule("mask", "a.b.c")], keys)("secret") == MASK == "***"  # type: ignore[misc]
    assert chain([cut], keys)("héllo") == "hél"  # type: ignore[misc]
    assert chain([cut], keys)(b"\x00\x01\x02\x03") == b"\x00\x01\x02"  # type: ignore[misc]
    assert chain([hash_rule], keys)("héllo") == _hmac("héllo")  # type: ignore[misc]
    assert chain([hash_rule], keys)(b"\xff\x00") == _hmac(b"\xff\x00")  # type: ignore[misc]
    assert chain([cut, hash_rule], keys)("abcdef") == _hmac("abc")  # type: ignore[misc]
    assert chain([hash_rule, cut], keys)("abcdef") == _hmac("abcdef")[:3]  # type: ignore[misc]


def test_a_key_missing_from_the_environment_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GATE_TEST_NO_KEY", raising=False)
    with pytest.raises(MissingSecret, match="environment variable GATE_TEST_NO_KEY, which is not set"):
        rule_keys([ColumnRule("hash", "a.b.c", key_env="GATE_TEST_NO_KEY")])


# --- real servers -------------------------------------------------------------------------------


def test_rules_on_every_image_kind(sandbox: Sandbox, unique_name: str, gate: Gate,
                                   monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    db = f"src_{unique_name}"
    dc = make_channel(sandbox.dc, sandbox.source, unique_name, allow=(f"{db}.*",))
    monkeypatch.setenv("GATE_TEST_KEY", KEY)
    set_rules = gate("channel", "columns", unique_name, "--exclude", f"{db}.t.pw*", "--mask", f"{db}.t.phone",
                     "--hash", f"{db}.*.email", "--hash-key-env", "GATE_TEST_KEY", "--truncate", f"{db}.t.body=3",
                     "--truncate", f"{db}.t.bin=2")
    assert set_rules.exit_code == 0, set_rules.output
    assert set_rules.output.splitlines() == [
        f"--exclude '{db}.t.pw*'", f"--mask '{db}.t.phone'", f"--hash '{db}.*.email' (key in $GATE_TEST_KEY)",
        f"--truncate '{db}.t.body=3'", f"--truncate '{db}.t.bin=2'"]
    caplog.set_level(logging.DEBUG)
    create = (f"CREATE TABLE {db}.t (id INT PRIMARY KEY, pw VARCHAR(20), email VARCHAR(40), phone VARCHAR(20), "
              "body TEXT, bin VARBINARY(10))")
    alter = f"ALTER TABLE {db}.t ADD COLUMN pw2 INT, ADD COLUMN note INT"
    with sandbox.source.connect() as conn, conn.cursor() as cur, running(dc, unique_name):
        cur.execute(f"CREATE DATABASE {db}")
        cur.execute(create)
        cur.execute(f"INSERT INTO {db}.t VALUES (1, 'hash$pw', 'a@b.c', '555-1234', 'abcdef', 0x00010203), "
                    "(2, NULL, NULL, NULL, NULL, NULL)")
        cur.execute(alter)
        cur.execute(f"UPDATE {db}.t SET email = 'x@y.z', body = 'xy', pw2 = 7, note = 8 WHERE id = 1")
        cur.execute(f"DELETE FROM {db}.t WHERE id = 2")
        wait_caught_up(sandbox.source, sandbox.dc, unique_name)
    rows = [(r[0], r[6], json.loads(r[7])) for r in dc_rows(sandbox.dc, unique_name)]
    old = [{"id": "1"}, {"email": _hmac("a@b.c")}, {"phone": MASK}, {"body": "abc"}, {"bin": "AAE="}]
    new = [{"id": "1"}, {"email": _hmac("x@y.z")}, {"phone": MASK}, {"body": "xy"}, {"bin": "AAE="}, {"note": "8"}]
    nulls = [{"id": "2"}, {"email": None}, {"phone": None}, {"body": None}, {"bin": None}]
    assert rows == [
        (1, "CREATETABLE", {"NEW": [
            {"field_name": "id", "nullable": "No", "primary_key": "Yes", "data_type": "int"},
            {"field_name": "email", "nullable": "Yes", "primary_key": "No", "data_type": "varchar(40)"},
            {"field_name": "phone", "nullable": "Yes", "primary_key": "No", "data_type": "varchar(20)"},
            {"field_name": "body", "nullable": "Yes", "primary_key": "No", "data_type": "text"},
            {"field_name": "bin", "nullable": "Yes", "primary_key": "No", "data_type": "varbinary(10)"}],
            "primary_key": ["id"], "SQL": create}),
        (2, "INSERT", {"NEW": old}),
        (3, "INSERT", {"NEW": nulls}),
        (4, "ALTERTABLE", {"ADDCOLUMN": [{"field_name": "note", "data_type": "int"}], "SQL": alter}),
        (5, "UPDATE", {"NEW": new, "OLD": old + [{"note": None}]}),
        (6, "DELETE", {"OLD": nulls + [{"note": None}]}),
    ]
    with Consumer(dc, unique_name) as consumer:  # the client reads images without the excluded columns
        changes = consumer.poll()
    assert [(c.optype, c.new, c.old) for c in changes if c.optype == "UPDATE"] == [
        ("UPDATE", {k: v for cell in new for k, v in cell.items()},
         {k: v for cell in old + [{"note": None}] for k, v in cell.items()})]
    shown = gate("channel", "show", unique_name)
    assert shown.exit_code == 0 and "GATE_TEST_KEY" in shown.output
    with sandbox.dc.connect(unique_name) as conn, conn.cursor() as cur:
        cur.execute("SELECT CONCAT(name, value) FROM gate_settings UNION ALL SELECT data FROM transfer_data")
        stored = " ".join(r[0] for r in cur.fetchall())
    assert "hash$pw" not in stored and "555-1234" not in stored and "a@b.c" not in stored
    assert KEY not in stored + shown.output + set_rules.output + caplog.text


def test_gate_run_refuses_to_start_without_the_key(sandbox: Sandbox, unique_name: str, gate: Gate,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    make_channel(sandbox.dc, sandbox.source, unique_name)
    monkeypatch.setenv("GATE_TEST_MISSING_KEY", KEY)
    assert gate("channel", "columns", unique_name, "--hash", "a.b.c", "--hash-key-env",
                "GATE_TEST_MISSING_KEY").exit_code == 0
    result = gate("run", unique_name, env={"GATE_TEST_MISSING_KEY": None})
    assert result.exit_code == 1
    assert "from the environment variable GATE_TEST_MISSING_KEY, which is not set" in result.output
    assert "so gate does not start" in result.output
    with sandbox.dc.connect(unique_name) as conn, conn.cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM transfer_data")
        assert cur.fetchone() == (0,)


def test_a_rule_on_a_primary_key_column_is_refused(sandbox: Sandbox, unique_name: str, gate: Gate) -> None:
    db = f"src_{unique_name}"
    dc = make_channel(sandbox.dc, sandbox.source, unique_name, allow=(f"{db}.*",))
    with sandbox.source.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {db}")
        cur.execute(f"CREATE TABLE {db}.a (id INT PRIMARY KEY, v INT)")
    refused = gate("channel", "columns", unique_name, "--mask", f"{db}.a.*")
    assert refused.exit_code == 1
    assert (f"The column rule --mask '{db}.a.*' hits {db}.a.id, a primary-key column on the source"
            in refused.output)
    with connect(dc, "DC") as conn:  # a rule stored before its table had a key is refused by gate run
        settings = read_settings(conn, unique_name)
        write_settings(conn, replace(settings, columns=(ColumnRule("exclude", f"{db}.b.k*"),)))
    with sandbox.source.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE TABLE {db}.a2 (id INT PRIMARY KEY)")
        cur.execute(f"INSERT INTO {db}.a2 VALUES (1)")
        cur.execute("SET SESSION sql_log_bin = 0")  # only the row event's table map shows the key
        cur.execute(f"CREATE TABLE {db}.b (k1 INT PRIMARY KEY, v INT)")
        cur.execute("SET SESSION sql_log_bin = 1")
    # the session's standby replicates the source: it needs the table the binlog does not create
    sandbox.wait_standby_caught_up()
    assert sandbox.standby is not None
    with sandbox.standby.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE TABLE {db}.b (k1 INT PRIMARY KEY, v INT)")
    with sandbox.source.connect() as conn, conn.cursor() as cur:
        cur.execute(f"INSERT INTO {db}.b VALUES (1, 2)")
    with pytest.raises(ColumnRuleRefused) as err:
        Pipeline(dc, unique_name, preflight=False).run()
    assert str(err.value).startswith(f"The column rule --exclude '{db}.b.k*' hits {db}.b.k1, a primary-key column "
                                     "(seen at binlog position ")
    assert not [r for r in dc_rows(sandbox.dc, unique_name) if r[3] == "b"]


def test_changed_rules_apply_from_the_next_transaction(sandbox: Sandbox, unique_name: str, gate: Gate) -> None:
    db = f"src_{unique_name}"
    dc = make_channel(sandbox.dc, sandbox.source, unique_name, allow=(f"{db}.*",))
    with sandbox.source.connect() as conn, conn.cursor() as cur, running(dc, unique_name):
        cur.execute(f"CREATE DATABASE {db}")
        cur.execute(f"CREATE TABLE {db}.t (id INT PRIMARY KEY, v VARCHAR(10))")
        cur.execute(f"INSERT INTO {db}.t VALUES (1, 'plain')")
        wait_caught_up(sandbox.source, sandbox.dc, unique_name)
        assert gate("channel", "columns", unique_name, "--mask", f"{db}.t.v").exit_code == 0
        time.sleep(FILTER_EVERY + 0.5)  # the running gate re-reads its settings at the next transaction
        cur.execute(f"INSERT INTO {db}.t VALUES (2, 'hidden')")
        wait_caught_up(sandbox.source, sandbox.dc, unique_name)
    assert [json.loads(r[7]) for r in dc_rows(sandbox.dc, unique_name)][1:] == [
        {"NEW": [{"id": "1"}, {"v": "plain"}]}, {"NEW": [{"id": "2"}, {"v": MASK}]}]


def test_binary_values_hex_and_renames_across_an_exclude_rule(sandbox: Sandbox, unique_name: str,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    db = f"src_{unique_name}"
    monkeypatch.setenv("GATE_TEST_KEY", KEY)
    rules = (ColumnRule("exclude", f"{db}.t.secret"), ColumnRule("truncate", f"{db}.t.b?", length=2),
             ColumnRule("hash", f"{db}.t.b2", key_env="GATE_TEST_KEY"), ColumnRule("truncate", f"{db}.t.d", length=4))
    dc = make_channel(sandbox.dc, sandbox.source, unique_name, allow=(f"{db}.*",), columns=rules,
                      defaults=ChannelDefaults(binary_format="hex"))
    change_in, change_out = f"ALTER TABLE {db}.t CHANGE secret visible INT", f"ALTER TABLE {db}.t CHANGE n secret INT"
    with sandbox.source.connect() as conn, conn.cursor() as cur, running(dc, unique_name):
        cur.execute(f"CREATE DATABASE {db}")
        cur.execute(f"CREATE TABLE {db}.t (id INT PRIMARY KEY, b1 BINARY(4), b2 BLOB, d DATE, secret INT, n INT)")
        cur.execute(f"INSERT INTO {db}.t VALUES (1, 0x01, 0x0a0b0c, '2024-05-06', 7, 8)")
        cur.execute(change_in)
        cur.execute(change_out)
        cur.execute(f"INSERT INTO {db}.t VALUES (2, NULL, '', '0000-00-00', 9, 10)")
        wait_caught_up(sandbox.source, sandbox.dc, unique_name)
    rows = [(r[6], json.loads(r[7])) for r in dc_rows(sandbox.dc, unique_name)]
    assert [list(data) for _optype, data in rows[2:4]] == [["ADDCOLUMN", "SQL"], ["DROPCOLUMN", "SQL"]]
    assert [field["field_name"] for field in rows[0][1]["NEW"]] == ["id", "b1", "b2", "d", "n"]
    assert rows[1:] == [
        ("INSERT", {"NEW": [{"id": "1"}, {"b1": "0100"}, {"b2": _hmac(b"\x0a\x0b")}, {"d": "2024"}, {"n": "8"}]}),
        ("ALTERTABLE", {"SQL": change_in, "ADDCOLUMN": [{"field_name": "visible", "data_type": "int"}]}),
        ("ALTERTABLE", {"SQL": change_out, "DROPCOLUMN": ["n"]}),
        ("INSERT", {"NEW": [{"id": "2"}, {"b1": None}, {"b2": _hmac(b"")}, {"d": "0000"}, {"visible": "9"}]}),
    ]


def test_channel_check_reports_a_rule_matching_no_column(sandbox: Sandbox, unique_name: str, gate: Gate) -> None:
    db = f"src_{unique_name}"
    make_channel(sandbox.dc, sandbox.source, unique_name, allow=(f"{db}.*",))
    with sandbox.source.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {db}")
        cur.execute(f"CREATE TABLE {db}.t (id INT PRIMARY KEY, email VARCHAR(10))")
    assert gate("channel", "columns", unique_name, "--mask", f"{db}.t.email", "--mask", f"{db}.t.emial").exit_code == 0
    result = gate("channel", "check", unique_name)
    assert result.exit_code == 0, result.output
    assert result.stderr.splitlines() == [
        f"warning: column rule --mask '{db}.t.emial' is matching no column of a captured table on the source; "
        "gate needs a rule that matches a column. Fix: correct the pattern with 'gate channel columns "
        f"{unique_name} --clear' and the rules again (harmless if the column is still to come)"]


def test_a_rule_reaching_a_key_column_by_create_table_stops_gate(sandbox: Sandbox, unique_name: str,
                                                                  gate: Gate) -> None:
    db = f"src_{unique_name}"
    dc = make_channel(sandbox.dc, sandbox.source, unique_name, allow=(f"{db}.*",))
    assert gate("channel", "columns", unique_name, "--truncate", f"{db}.c.code=2").exit_code == 0  # no table yet
    with sandbox.source.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {db}")
        cur.execute(f"CREATE TABLE {db}.c (code VARCHAR(8) PRIMARY KEY)")
    with pytest.raises(ColumnRuleRefused) as err:
        Pipeline(dc, unique_name, preflight=False).run()
    assert str(err.value).startswith(f"The column rule --truncate '{db}.c.code=2' hits {db}.c.code, a primary-key "
                                     "column (seen at binlog position ")
    assert dc_rows(sandbox.dc, unique_name) == []


def test_settings_without_column_rules_read_as_none() -> None:
    """Channels created before column rules existed have no 'columns' setting: no rules."""
    rows = {"source": {"host": "h", "port": 3306, "user": "u", "password": ""}, "allow": [], "deny": []}
    settings = ChannelSettings.from_rows("old", rows)
    assert settings.columns == ()
    ruled = replace(settings, columns=(ColumnRule("truncate", "a.b.c", length=3),))
    assert ruled.as_rows()["columns"] == [{"rule": "truncate", "pattern": "a.b.c", "length": 3}]
    assert ChannelSettings.from_rows("old", ruled.as_rows()).columns == ruled.columns
