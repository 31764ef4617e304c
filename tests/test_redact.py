"""Unit tests for gate.capture.redact: every form of statement text that carries a password, masked."""
from __future__ import annotations

import pytest

from gate.capture.ddl import DdlChange, parse_ddl
from gate.capture.redact import redact_secrets


@pytest.mark.parametrize(("statement", "masked"), [
    # URLs: FEDERATED/FEDERATEDX and CONNECT MYSQL tables, either quote, escaped quotes, '/' and '@' in it
    ("CREATE TABLE f (id INT) ENGINE=FEDERATED CONNECTION='mysql://fed:s3cr@t@127.0.0.1:3306/db/t'",
     "CREATE TABLE f (id INT) ENGINE=FEDERATED CONNECTION='mysql://fed:***@127.0.0.1:3306/db/t'"),
    ('CREATE TABLE f (id INT) ENGINE=CONNECT TABLE_TYPE=MYSQL CONNECTION="mysql://u:pw@h/db/t"',
     'CREATE TABLE f (id INT) ENGINE=CONNECT TABLE_TYPE=MYSQL CONNECTION="mysql://u:***@h/db/t"'),
    ("ALTER TABLE f CONNECTION='mysql://fed:it''s\\'/x@h:3306/db/t'", "ALTER TABLE f CONNECTION='mysql://fed:***@h:3306/db/t'"),
    ("ALTER TABLE f CONNECTION = 'mysql://:pw@h/db/t'", "ALTER TABLE f CONNECTION = 'mysql://:***@h/db/t'"),
    # connection strings and option lists: ODBC, JDBC, CONNECT's OPTION_LIST
    ("CREATE TABLE o (id INT) ENGINE=CONNECT TABLE_TYPE=ODBC CONNECTION='DSN=x;UID=u;PWD=odbc pw;'",
     "CREATE TABLE o (id INT) ENGINE=CONNECT TABLE_TYPE=ODBC CONNECTION='DSN=x;UID=u;PWD=*** pw;'"),
    ("CREATE TABLE j (id INT) ENGINE=CONNECT CONNECTION='jdbc:mysql://h/db?user=u&password=jdbcpw&ssl=1'",
     "CREATE TABLE j (id INT) ENGINE=CONNECT CONNECTION='jdbc:mysql://h/db?user=u&password=***&ssl=1'"),
    ("CREATE TABLE c (id INT) ENGINE=CONNECT OPTION_LIST='user=u,Password = optpw,host=h'",
     "CREATE TABLE c (id INT) ENGINE=CONNECT OPTION_LIST='user=u,Password = ***,host=h'"),
    ("CREATE TABLE c (id INT) OPTION_LIST='passwd=a,pwd=b'", "CREATE TABLE c (id INT) OPTION_LIST='passwd=***,pwd=***'"),
    # Spider's comment
    ("CREATE TABLE s (id INT) ENGINE=SPIDER COMMENT='wrapper \"mysql\", user \"u\", password \"sp, w\"'",
     "CREATE TABLE s (id INT) ENGINE=SPIDER COMMENT='wrapper \"mysql\", user \"u\", password \"***\"'"),
    # server definitions, accounts, replication (no DC row, but never to be logged either)
    ("CREATE SERVER s FOREIGN DATA WRAPPER mysql OPTIONS (HOST 'h', USER 'u', PASSWORD 'srv''pw', PORT 3306)",
     "CREATE SERVER s FOREIGN DATA WRAPPER mysql OPTIONS (HOST 'h', USER 'u', PASSWORD '***', PORT 3306)"),
    ('ALTER SERVER s OPTIONS (password "srvpw2")', 'ALTER SERVER s OPTIONS (password "***")'),
    ("CREATE USER 'u'@'%' IDENTIFIED BY 'userpw'", "CREATE USER 'u'@'%' IDENTIFIED BY '***'"),
    ("ALTER USER u IDENTIFIED BY PASSWORD '*ABC'", "ALTER USER u IDENTIFIED BY PASSWORD '***'"),
    ("CREATE OR REPLACE USER v IDENTIFIED VIA ed25519 USING PASSWORD('edpw')",
     "CREATE OR REPLACE USER v IDENTIFIED VIA ed25519 USING PASSWORD('***')"),
    ("CREATE USER w IDENTIFIED WITH mysql_native_password AS '*HASH'",
     "CREATE USER w IDENTIFIED WITH mysql_native_password AS '***'"),
    ("GRANT ALL ON *.* TO w IDENTIFIED BY 'grantpw'", "GRANT ALL ON *.* TO w IDENTIFIED BY '***'"),
    ("SET PASSWORD FOR 'u'@'h' = PASSWORD('setpw')", "SET PASSWORD FOR 'u'@'h' = PASSWORD('***')"),
    ("SET PASSWORD = '*HASH'", "SET PASSWORD = '***'"),
    ("CHANGE MASTER TO MASTER_HOST='h', MASTER_USER='r', MASTER_PASSWORD='replpw'",
     "CHANGE MASTER TO MASTER_HOST='h', MASTER_USER='r', MASTER_PASSWORD='***'"),
    # comments are part of the payload's SQL: executable ones are code, any one may hold a URL
    ("CREATE TABLE t (a INT) /*!50100 CONNECTION='mysql://u:execpw@h/d/t' */",
     "CREATE TABLE t (a INT) /*!50100 CONNECTION='mysql://u:***@h/d/t' */"),
    ("CREATE TABLE t (a INT) /*M!100100 OPTION_LIST='password=x' */ -- mysql://u:linepw@h\n",
     "CREATE TABLE t (a INT) /*M!100100 OPTION_LIST='password=***' */ -- mysql://u:***@h\n"),
    ("DROP TABLE t # PWD=hashpw\n", "DROP TABLE t # PWD=***\n"),
])
def test_every_form_of_secret_is_masked(statement: str, masked: str) -> None:
    assert redact_secrets(statement) == masked
    assert redact_secrets(masked) == masked


@pytest.mark.parametrize("statement", [
    "CREATE TABLE t (password VARCHAR(8) COMMENT 'the password', p2 INT DEFAULT 1) COMMENT='user password'",
    "ALTER TABLE t ADD COLUMN `password` CHAR(60) NOT NULL DEFAULT '', ADD INDEX password (password)",
    "CREATE TABLE t (a INT) COMMENT 'see http://example.com:8080/x' CONNECTION='mysql://h:3306/d/t'",
    "CREATE TABLE t (a INT, b INT AS (a + 1)) COMMENT 'identified by us'",
    "CREATE TABLE srv (id INT) ENGINE=FEDERATED CONNECTION='my_server/t'",
    "INSERT INTO users VALUES ('pass', 'pwd')",
])
def test_text_without_a_secret_stays_as_it_is(statement: str) -> None:
    assert redact_secrets(statement) == statement


def test_payloads_of_table_statements_hold_no_secret() -> None:
    """parse_ddl masks before it models: SQL, OTHERS and the text of each table alike."""
    create = "CREATE TABLE f (id INT PRIMARY KEY) ENGINE=FEDERATED CONNECTION='mysql://u:pw@h/d/t'"
    assert parse_ddl(create, "app") == [DdlChange("CREATETABLE", "app", "f", {
        "NEW": [{"field_name": "id", "nullable": "No", "primary_key": "Yes", "data_type": "int"}],
        "primary_key": ["id"], "SQL": create.replace(":pw@", ":***@")})]
    alter = "ALTER TABLE f ADD COLUMN b INT, CONNECTION='mysql://u:pw@h/d/t'"
    assert parse_ddl(alter, "app") == [DdlChange("ALTERTABLE", "app", "f", {
        "ADDCOLUMN": [{"field_name": "b", "data_type": "int"}], "OTHERS": ["CONNECTION='mysql://u:***@h/d/t'"],
        "SQL": alter.replace(":pw@", ":***@")})]
