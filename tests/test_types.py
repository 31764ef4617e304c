"""The Spark type of every column type and the conversion of the DC's text, over edge values (pure)."""

from __future__ import annotations

from datetime import date, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from gate.common.errors import TableSchemaChanged
from spark_readers.image_types import exact_cast, for_delta
from spark_readers.table_schema import apply, same
from spark_readers.typed_rows import RowBuilder, TypedTable, Typing
from spark_readers.types import Unrepresentable, column_type, inet6_text

UTC = timezone.utc


@pytest.mark.parametrize("data_type,spark", [
    ("tinyint(4)", "tinyint"), ("tinyint(3) unsigned", "smallint"), ("tinyint(1)", "tinyint"), ("bool", "tinyint"),
    ("smallint(6)", "smallint"), ("smallint unsigned", "int"), ("mediumint(9)", "int"), ("mediumint unsigned", "int"),
    ("int(11)", "int"), ("integer", "int"), ("int(10) unsigned", "bigint"), ("bigint(20)", "bigint"),
    ("bigint(20) unsigned", "decimal(20,0)"), ("serial", "decimal(20,0)"), ("int unsigned zerofill", "bigint"),
    ("decimal(10,2)", "decimal(10,2)"), ("decimal", "decimal(10,0)"), ("numeric(5)", "decimal(5,0)"),
    ("decimal(38,10) unsigned", "decimal(38,10)"), ("decimal(39,0)", "string"), ("decimal(65,30)", "string"),
    ("float", "float"), ("float(7,3)", "float"), ("float(30)", "double"), ("double", "double"),
    ("double precision", "double"), ("real", "double"),
    ("date", "date"), ("datetime", "timestamp_ntz"), ("datetime(6)", "timestamp_ntz"), ("timestamp(3)", "timestamp"),
    ("time(6)", "interval day to second"), ("year(4)", "smallint"), ("year", "smallint"),
    ("char(10)", "string"), ("varchar(300)", "string"), ("character varying(5)", "string"), ("longtext", "string"),
    ("enum('a','b')", "string"), ("set('zz','y')", "array<string>"), ("json", "string"),
    ("binary(4)", "binary"), ("varbinary(300)", "binary"), ("longblob", "binary"), ("geometry", "binary"),
    ("point", "binary"), ("multipolygon", "binary"),
    ("bit(1)", "boolean"), ("bit", "boolean"), ("bit(9)", "bigint"), ("bit(63)", "bigint"), ("bit(64)", "decimal(20,0)"),
    ("uuid", "string"), ("inet6", "string"), ("inet4", "string"), ("vector(3)", "string"),
])
def test_every_type_has_its_spark_type(data_type: str, spark: str) -> None:
    assert column_type(data_type).spark.simpleString() == spark


def convert(data_type: str, text: str, **settings: Any) -> Any:
    return column_type(data_type, **settings).convert(text)


@pytest.mark.parametrize("data_type,text,value", [
    ("tinyint", "-128", -128), ("tinyint unsigned", "255", 255), ("smallint unsigned", "65535", 65535),
    ("mediumint", "-8388608", -8388608), ("int unsigned", "4294967295", 4294967295),
    ("bigint", "-9223372036854775808", -9223372036854775808),
    ("bigint unsigned", "18446744073709551615", Decimal(18446744073709551615)),
    ("decimal(10,2)", "-99999999.99", Decimal("-99999999.99")), ("decimal(5,5)", "0.00001", Decimal("0.00001")),
    ("decimal(38,0)", "9" * 38, Decimal("9" * 38)),
    ("decimal(38,10)", "-" + "9" * 28 + ".5", Decimal("-" + "9" * 28 + ".5")),
    ("decimal(65,30)", "-0.000000000000000000000000000001", "-0.000000000000000000000000000001"),
    ("double", "-0", -0.0), ("double", "1.7976931348623157e308", 1.7976931348623157e308), ("float", "1e-7", 1e-7),
    ("date", "1000-01-01", date(1000, 1, 1)), ("date", "9999-12-31", date(9999, 12, 31)),
    ("datetime(6)", "9999-12-31 23:59:59.999999", datetime(9999, 12, 31, 23, 59, 59, 999999)),
    ("datetime(2)", "2024-02-29 12:34:56.78", datetime(2024, 2, 29, 12, 34, 56, 780000)),
    ("timestamp", "1970-01-01 00:00:01", datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC)),
    ("time(6)", "-838:59:59.999999", -timedelta(hours=838, minutes=59, seconds=59, microseconds=999999)),
    ("time(6)", "-00:00:00.000001", timedelta(microseconds=-1)), ("time", "838:59:59", timedelta(hours=838, seconds=3599)),
    ("year", "0000", 0), ("year", "2155", 2155),
    ("set('zz','y','x')", "", []), ("set('zz','y','x')", "x,y,zz", ["x", "y", "zz"]), ("enum('a','b')", "", ""),
    ("bit(1)", "1", True), ("bit(64)", "18446744073709551615", Decimal(2**64 - 1)), ("bit(9)", "257", 257),
    ("blob", "AP8A", b"\x00\xff\x00"), ("binary(4)", "", b""),
    ("uuid", "EjRWeJq83vASNFZ4mrze8A==", "12345678-9abc-def0-1234-56789abcdef0"),
    ("inet6", "AAAAAAAAAAAAAP//AQIDBA==", "::ffff:1.2.3.4"),
])
def test_values_convert_exactly(data_type: str, text: str, value: Any) -> None:
    got = convert(data_type, text)
    assert got == value and type(got) is type(value)


def test_hex_binary_and_timestamps_in_the_channels_time_zone() -> None:
    assert convert("varbinary(3)", "00ff80", binary_format="hex") == b"\x00\xff\x80"
    assert convert("uuid", "00" * 15 + "01", binary_format="hex") == "00000000-0000-0000-0000-000000000001"
    berlin = ZoneInfo("Europe/Berlin")
    assert convert("timestamp(6)", "2024-03-10 06:59:59.999999", tz=berlin) == datetime(2024, 3, 10, 5, 59, 59, 999999,
                                                                                          tzinfo=UTC)
    assert convert("timestamp", "2024-07-01 12:00:00", tz=berlin) == datetime(2024, 7, 1, 10, 0, tzinfo=UTC)


@pytest.mark.parametrize("data_type,text", [
    ("date", "0000-00-00"), ("date", "2024-00-15"), ("date", "2024-02-30"),
    ("datetime", "0000-00-00 00:00:00"), ("datetime(3)", "0000-00-00 00:00:00.000"),
    ("timestamp(6)", "0000-00-00 00:00:00.000000"),
    ("int", "***"), ("int", "2147483648"), ("tinyint unsigned", "-1"), ("bigint unsigned", "18446744073709551616"),
    ("decimal(5,2)", "1.234"), ("decimal(5,2)", "1000"), ("decimal(5,2)", "x"), ("double", "abc"),
    ("blob", "***"), ("varbinary(3)", "zz"), ("uuid", "AAE="), ("bit(1)", "2"), ("time", "12:00"),
])
def test_values_spark_cannot_hold_are_refused(data_type: str, text: str) -> None:
    with pytest.raises(Unrepresentable):
        convert(data_type, text)


def test_a_wall_time_the_zone_shows_twice_names_no_instant() -> None:
    with pytest.raises(Unrepresentable):  # 02:30 happened twice in Berlin on 2024-10-27
        convert("timestamp", "2024-10-27 02:30:00", tz=ZoneInfo("Europe/Berlin"))


def test_inet6_text_is_mariadbs() -> None:
    assert [inet6_text(raw) for raw in (bytes(16), bytes(15) + b"\x01", b"\xff" * 16, b"\x20\x01\x0d\xb8" + bytes(12))] == [
        "::", "::1", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "2001:db8::"]


def test_ddl_changes_the_columns_and_their_types() -> None:
    columns = apply(None, "CREATETABLE", {"NEW": [{"field_name": "id", "data_type": "int(11)"},
                                                   {"field_name": "v", "data_type": "varchar(5)"},
                                                   {"field_name": "w", "data_type": "blob"}]})
    columns = apply(columns, "ALTERTABLE", {"CHANGECOLUMN": [{"origin_field_name": "V", "field_name": "v2",
                                                              "data_type": "text"}],
                                            "DROPCOLUMN": ["w"], "ADDCOLUMN": [{"field_name": "x", "data_type": "date"}]})
    assert columns == (("id", "int(11)"), ("v2", "text"), ("x", "date"))
    assert apply(columns, "TRUNCATE", {}) == columns and apply(columns, "DROPTABLE", {}) is None


def test_types_that_convert_alike_are_the_same_schema() -> None:
    create = (("id", "int(11)"), ("j", "json"), ("b", "bigint(20) unsigned"), ("t", "tinyint(4)"))
    snapshot = (("ID", "int"), ("j", "longtext"), ("b", "bigint unsigned"), ("t", "tinyint"))
    assert same(create, snapshot)
    assert not same(create, (("id", "int unsigned"), *snapshot[1:]))  # both long, other bounds
    assert not same(create, (("id", "int(11)"), ("j2", "json"), *create[2:]))


TABLE = TypedTable("shop.t", (("id", "int"), ("d", "date"), ("b", "blob")))


def test_typed_rows_of_every_optype() -> None:
    rows = [
        (1, 1, 1_700_000_000, "INSERT", '{"NEW": [{"id": "1"}, {"d": "0000-00-00"}, {"b": "AP8="}]}'),
        (2, 2, 1_700_000_001, "UPDATE", '{"NEW": [{"id": "1"}, {"d": "2024-02-29"}, {"b": null}], '
                                        '"OLD": [{"id": "1"}, {"d": "0000-00-00"}, {"b": "AP8="}]}'),
        (3, 3, 1_700_000_002, "DELETE", '{"OLD": [{"id": "1"}, {"d": "2024-02-29"}, {"b": null}]}'),
        (4, 4, 1_700_000_003, "ALTERTABLE", '{"OTHERS": ["ENGINE=InnoDB"]}'),
        (5, 5, 1_700_000_004, "TRUNCATE", "{}"),
        (6, 6, 1_700_000_005, "SNAPSHOT", '{"NEW": [{"id": "7"}, {"d": "1000-01-01"}, {"b": ""}]}'),
    ]
    got = RowBuilder(TABLE).batch(rows).to_pylist()
    day = date(2024, 2, 29)
    assert [(r["_op"], r["_id"], r["id"], r["d"], r["b"]) for r in got] == [
        ("c", 1, 1, None, b"\x00\xff"), ("u", 2, 1, day, None), ("d", 3, 1, day, None), ("t", 5, None, None, None),
        ("r", 6, 7, date(1000, 1, 1), b"")]
    assert [r["_invalid"] for r in got] == [[("d", "0000-00-00")], [("_before.d", "0000-00-00")], None, None, None]
    assert got[1]["_before"] == {"id": 1, "d": None, "b": b"\x00\xff"}
    assert got[2]["_before"] == {"id": 1, "d": day, "b": None}
    assert got[0]["_before"] is None and got[0]["_ts"] == datetime(2023, 11, 14, 22, 13, 20, tzinfo=UTC)


def test_a_row_image_with_other_columns_stops_the_read() -> None:
    with pytest.raises(TableSchemaChanged, match=r"Row 9 of shop.t has the columns \['id', 'x'\], the stream's schema "
                                                 r"has \['id', 'd', 'b'\]"):
        RowBuilder(TABLE).batch([(9, 9, 0, "INSERT", '{"NEW": [{"id": "1"}, {"x": "2"}]}')])


@pytest.mark.parametrize("old,new,exact", [
    ("int", "bigint(20)", True), ("tinyint", "smallint", True), ("bigint", "int", False),
    ("int unsigned", "bigint unsigned", True), ("bigint", "bigint unsigned", True), ("bigint unsigned", "bigint", False),
    ("decimal(10,2)", "decimal(12,3)", True), ("decimal(10,2)", "decimal(10,3)", False),
    ("decimal(10,2)", "decimal(12,1)", False), ("int", "decimal(10,0)", True), ("int", "decimal(9,0)", False),
    ("int", "varchar(10)", True), ("decimal(5,2)", "text", True), ("varchar(10)", "int", False),
    ("datetime", "date", False), ("float", "double", False), ("date", "varchar(10)", False),
    ("varchar(10)", "varchar(20)", True), ("datetime", "datetime(6)", True),
])
def test_a_type_change_keeps_stored_values_only_when_it_widens_them_exactly(old: str, new: str, exact: bool) -> None:
    assert exact_cast(column_type(old).spark, column_type(new).spark) is exact


def test_typing_types_the_columns_of_column_rules_and_times_in_images_as_text() -> None:
    typing = Typing("Europe/Berlin", "hex", ("shop.users.e*",))
    table = typing.table("shop.users", (("id", "int"), ("email", "int"), ("at", "time(3)")))
    assert [f.dataType.simpleString() for f in table.image_schema().fields] == ["int", "string",
                                                                                "interval day to second"]
    assert [f.dataType.simpleString() for f in for_delta(table).image_schema().fields] == ["int", "string", "string"]
    assert (table.timezone, table.binary_format) == ("Europe/Berlin", "hex")
