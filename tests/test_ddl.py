"""Unit tests for gate.capture.ddl: DDL text -> transfer_data payload."""
from __future__ import annotations

import json
import logging
from datetime import timezone
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gate.capture.ddl import DdlChange, dml_tables, parse_ddl, snapshot_tables, statement_kind
from gate.capture.reader import Statement
from gate.capture.translate import TableFilter, Translator
from gate.common.errors import StatementFormatChange


def col(name: str, data_type: str, nullable: str = "Yes", primary_key: str = "No") -> dict[str, str]:
    return {"field_name": name, "nullable": nullable, "primary_key": primary_key, "data_type": data_type}


def ref(db: str, table: str) -> dict[str, str]:
    return {"dbname": db, "tablename": table}


def rename(old: tuple[str, str], new: tuple[str, str]) -> dict[str, dict[str, str]]:
    return {"from": ref(*old), "to": ref(*new)}


def index(name: str, *columns: str) -> dict[str, Any]:
    return {"index_name": name, "column_name": list(columns)}


def change(origin: str, name: str, data_type: str | None) -> dict[str, Any]:
    return {"origin_field_name": origin, "field_name": name, "data_type": data_type}


def describe(db: str, table: str) -> list[dict[str, str]]:
    """Fake ColumnDescriber: one column naming the table it was asked about."""
    return [col(f"{db}.{table}", "int", "No", "Yes")]


# (statement, default_db, expected without the "SQL" key, which must equal the statement)
CORPUS: list[tuple[str, str, tuple[str, str, str, dict[str, Any]]]] = [
    # --- Django ---
    (
        "CREATE TABLE `polls_question` (`id` bigint AUTO_INCREMENT NOT NULL PRIMARY KEY, "
        "`question_text` varchar(200) NOT NULL, `pub_date` datetime(6) NOT NULL)",
        "mysite",
        ("CREATETABLE", "mysite", "polls_question", {"NEW": [
            col("id", "bigint", "No", "Yes"),
            col("question_text", "varchar(200)", "No"),
            col("pub_date", "datetime(6)", "No"),
        ]}),
    ),
    (
        "ALTER TABLE `polls_choice` ADD CONSTRAINT `polls_choice_question_id_c5b4b260_fk_polls_question_id` "
        "FOREIGN KEY (`question_id`) REFERENCES `polls_question` (`id`)",
        "mysite",
        ("ALTERTABLE", "mysite", "polls_choice", {"OTHERS": [
            "ADD CONSTRAINT `polls_choice_question_id_c5b4b260_fk_polls_question_id` "
            "FOREIGN KEY (`question_id`) REFERENCES `polls_question` (`id`)"
        ]}),
    ),
    (
        "CREATE INDEX `polls_choice_question_id_c5b4b260` ON `polls_choice` (`question_id`)",
        "mysite",
        ("ALTERTABLE", "mysite", "polls_choice", {"ADDINDEX": [
            index("polls_choice_question_id_c5b4b260", "question_id")
        ]}),
    ),
    (
        "ALTER TABLE `polls_choice` ADD COLUMN `votes` integer DEFAULT 0 NOT NULL",
        "mysite",
        ("ALTERTABLE", "mysite", "polls_choice", {"ADDCOLUMN": [{"field_name": "votes", "data_type": "integer"}]}),
    ),
    (
        "ALTER TABLE `polls_choice` ALTER COLUMN `votes` DROP DEFAULT",
        "mysite",
        ("ALTERTABLE", "mysite", "polls_choice", {"OTHERS": ["ALTER COLUMN `votes` DROP DEFAULT"]}),
    ),
    (
        "ALTER TABLE `polls_choice` RENAME COLUMN `votes` TO `vote_count`",
        "mysite",
        ("ALTERTABLE", "mysite", "polls_choice", {"CHANGECOLUMN": [change("votes", "vote_count", None)]}),
    ),
    (
        "ALTER TABLE `polls_question` MODIFY `question_text` varchar(300) NOT NULL",
        "mysite",
        ("ALTERTABLE", "mysite", "polls_question", {"CHANGECOLUMN": [
            change("question_text", "question_text", "varchar(300)")
        ]}),
    ),
    # --- Rails ---
    (
        "CREATE TABLE `users` (`id` bigint NOT NULL AUTO_INCREMENT PRIMARY KEY, `email` varchar(255) DEFAULT '' "
        "NOT NULL, `created_at` datetime(6) NOT NULL, `updated_at` datetime(6) NOT NULL,  "
        "UNIQUE INDEX `index_users_on_email` (`email`))",
        "blog_development",
        ("CREATETABLE", "blog_development", "users", {"NEW": [
            col("id", "bigint", "No", "Yes"),
            col("email", "varchar(255)", "No"),
            col("created_at", "datetime(6)", "No"),
            col("updated_at", "datetime(6)", "No"),
        ]}),
    ),
    (
        "CREATE TABLE `ar_internal_metadata` (`key` varchar(255) NOT NULL PRIMARY KEY, `value` varchar(255), "
        "`created_at` datetime(6) NOT NULL, `updated_at` datetime(6) NOT NULL)",
        "blog_development",
        ("CREATETABLE", "blog_development", "ar_internal_metadata", {"NEW": [
            col("key", "varchar(255)", "No", "Yes"),
            col("value", "varchar(255)"),
            col("created_at", "datetime(6)", "No"),
            col("updated_at", "datetime(6)", "No"),
        ]}),
    ),
    (
        "CREATE  INDEX `index_users_on_name`  ON `users` (`name`)",
        "blog_development",
        ("ALTERTABLE", "blog_development", "users", {"ADDINDEX": [index("index_users_on_name", "name")]}),
    ),
    (
        "ALTER TABLE `users` CHANGE `name` `full_name` varchar(255) DEFAULT NULL",
        "blog_development",
        ("ALTERTABLE", "blog_development", "users", {"CHANGECOLUMN": [
            change("name", "full_name", "varchar(255)")
        ]}),
    ),
    # --- Alembic / SQLAlchemy ---
    (
        "\nCREATE TABLE account (\n\tid INTEGER NOT NULL AUTO_INCREMENT, \n\tname VARCHAR(50) NOT NULL, "
        "\n\tdescription VARCHAR(200), \n\tPRIMARY KEY (id)\n)\n\n",
        "bank",
        ("CREATETABLE", "bank", "account", {"NEW": [
            col("id", "integer", "No", "Yes"),
            col("name", "varchar(50)", "No"),
            col("description", "varchar(200)"),
        ]}),
    ),
    (
        "ALTER TABLE account ADD COLUMN last_transaction_date DATETIME",
        "bank",
        ("ALTERTABLE", "bank", "account", {"ADDCOLUMN": [
            {"field_name": "last_transaction_date", "data_type": "datetime"}
        ]}),
    ),
    (
        "ALTER TABLE account DROP COLUMN last_transaction_date",
        "bank",
        ("ALTERTABLE", "bank", "account", {"DROPCOLUMN": ["last_transaction_date"]}),
    ),
    (
        "DROP INDEX ix_account_name ON account",
        "bank",
        ("ALTERTABLE", "bank", "account", {"DROPINDEX": ["ix_account_name"]}),
    ),
    (
        "CREATE TABLE m2m (a_id INT, b_id INT, CONSTRAINT pk_m2m PRIMARY KEY (a_id, B_ID), "
        "CONSTRAINT fk_a FOREIGN KEY(a_id) REFERENCES a (id))",
        "bank",
        ("CREATETABLE", "bank", "m2m", {"NEW": [col("a_id", "int", "No", "Yes"), col("b_id", "int", "No", "Yes")]}),
    ),
    # --- SHOW CREATE TABLE / mysqldump ---
    (
        "CREATE TABLE `orders` (\n"
        "  `id` int(10) unsigned NOT NULL AUTO_INCREMENT,\n"
        "  `customer_id` int(11) NOT NULL COMMENT 'FK: customers.id, NOT NULL',\n"
        "  `name` varchar(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci NOT NULL DEFAULT '',\n"
        "  `price` decimal(10,2) DEFAULT NULL,\n"
        "  `status` enum('active','Inactive','it''s') NOT NULL DEFAULT 'active',\n"
        "  `flags` set('a','b') DEFAULT NULL,\n"
        "  `ratio` double precision,\n"
        "  `note` text,\n"
        "  `created` timestamp NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,\n"
        "  `total` decimal(12,2) GENERATED ALWAYS AS ((`price` * 2)) VIRTUAL,\n"
        "  PRIMARY KEY (`id`),\n"
        "  UNIQUE KEY `uk_name` (`name`),\n"
        "  KEY `idx_status` (`status`,`created`),\n"
        "  CONSTRAINT `fk_customer` FOREIGN KEY (`customer_id`) REFERENCES `customers` (`id`) ON DELETE CASCADE,\n"
        "  CONSTRAINT `chk_price` CHECK (`price` >= 0)\n"
        ") ENGINE=InnoDB AUTO_INCREMENT=5 DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci "
        "COMMENT='orders; all of them'\n/*!50100 PARTITION BY HASH (`id`)\nPARTITIONS 4 */",
        "shop",
        ("CREATETABLE", "shop", "orders", {"NEW": [
            col("id", "int(10) unsigned", "No", "Yes"),
            col("customer_id", "int(11)", "No"),
            col("name", "varchar(64)", "No"),
            col("price", "decimal(10,2)"),
            col("status", "enum('active','Inactive','it''s')", "No"),
            col("flags", "set('a','b')"),
            col("ratio", "double precision"),
            col("note", "text"),
            col("created", "timestamp", "No"),
            col("total", "decimal(12,2)"),
        ]}),
    ),
    (
        "/*!50001 CREATE TABLE `v_orders` (\n  `id` tinyint NOT NULL,\n  `name` tinyint NOT NULL\n) ENGINE=MyISAM */;",
        "shop",
        ("CREATETABLE", "shop", "v_orders", {"NEW": [col("id", "tinyint", "No"), col("name", "tinyint", "No")]}),
    ),
    (
        "/*!40000 ALTER TABLE `orders` DISABLE KEYS */",
        "shop",
        ("ALTERTABLE", "shop", "orders", {"OTHERS": ["DISABLE KEYS"]}),
    ),
    # --- gh-ost / pt-online-schema-change ---
    (
        "create /* gh-ost */ table `shop`.`_orders_ghc` (\n\t\t\tid bigint auto_increment,\n"
        "\t\t\tlast_update timestamp not null DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,\n"
        "\t\t\thint varchar(64) charset ascii not null,\n\t\t\tvalue varchar(4096) charset ascii not null,\n"
        "\t\t\tprimary key(id),\n\t\t\tunique key hint_uidx(hint)\n\t\t) auto_increment=256 comment='gh-ost changelog'",
        "",
        ("CREATETABLE", "shop", "_orders_ghc", {"NEW": [
            col("id", "bigint", "No", "Yes"),
            col("last_update", "timestamp", "No"),
            col("hint", "varchar(64)", "No"),
            col("value", "varchar(4096)", "No"),
        ]}),
    ),
    (
        "create /* gh-ost */ table `shop`.`_orders_gho` like `shop`.`orders`",
        "",
        ("CREATETABLE", "shop", "_orders_gho", {"NEW": describe("shop", "orders"), "LIKE": ref("shop", "orders")}),
    ),
    (
        "alter /* gh-ost */ table `shop`.`_orders_gho` add column `discount` decimal(5, 2) unsigned zerofill "
        "not null default '0.00'",
        "",
        ("ALTERTABLE", "shop", "_orders_gho", {"ADDCOLUMN": [
            {"field_name": "discount", "data_type": "decimal(5,2) unsigned zerofill"}
        ]}),
    ),
    (
        "drop /* gh-ost */ table if exists `shop`.`_orders_ghc`",
        "",
        ("DROPTABLE", "shop", "_orders_ghc", {"DROPTABLE": [ref("shop", "_orders_ghc")]}),
    ),
    # --- what MySQL / MariaDB write into the binlog ---
    (
        "DROP TABLE `t1` /* generated by server */",
        "test",
        ("DROPTABLE", "test", "t1", {"DROPTABLE": [ref("test", "t1")]}),
    ),
    (
        "CREATE TABLE `t2` (\n  `a` int DEFAULT NULL\n) START TRANSACTION",
        "test",
        ("CREATETABLE", "test", "t2", {"NEW": [col("a", "int")]}),
    ),
    (
        "TRUNCATE TABLE `test`.`t1`",
        "other",
        ("TRUNCATE", "test", "t1", {}),
    ),
    (
        "truncate logs",
        "app",
        ("TRUNCATE", "app", "logs", {}),
    ),
    # --- CREATE ... SELECT / LIKE ---
    (
        "CREATE TABLE report AS SELECT id, SUM(x) AS total FROM sales GROUP BY id",
        "app",
        ("CREATETABLE", "app", "report", {"NEW": [], "SELECT": True}),  # statement format: refused by gate
    ),
    (
        "CREATE TABLE t3 (id INT NOT NULL PRIMARY KEY) ENGINE=InnoDB SELECT id, name FROM t1",
        "app",
        ("CREATETABLE", "app", "t3", {"NEW": [col("id", "int", "No", "Yes")], "SELECT": True}),
    ),
    (
        "CREATE TABLE t4 (SELECT 1 AS a)",
        "app",
        ("CREATETABLE", "app", "t4", {"NEW": [], "SELECT": True}),
    ),
    (
        "CREATE TABLE IF NOT EXISTS `archive`.`t_old` (LIKE t)",
        "app",
        ("CREATETABLE", "archive", "t_old", {"NEW": describe("app", "t"), "LIKE": ref("app", "t")}),
    ),
    (  # a system-versioned table: its period columns (MariaDB's implicit ones) in the images, ROW END in its key
        "CREATE OR REPLACE TABLE t (x INT) WITH SYSTEM VERSIONING",
        "app",
        ("CREATETABLE", "app", "t", {"NEW": [col("x", "int"), col("row_start", "timestamp(6)", "No"),
                                             col("row_end", "timestamp(6)", "No")]}),
    ),
    (
        "CREATE TABLE t (id INT PRIMARY KEY, x INT) WITH SYSTEM VERSIONING",
        "app",
        ("CREATETABLE", "app", "t", {"NEW": [col("id", "int", "No", "Yes"), col("x", "int"),
                                             col("row_start", "timestamp(6)", "No"),
                                             col("row_end", "timestamp(6)", "No", "Yes")],
                                     "primary_key": ["id", "row_end"]}),
    ),
    (
        "CREATE TABLE t (id INT, x INT WITH SYSTEM VERSIONING, y INT WITHOUT SYSTEM VERSIONING, PRIMARY KEY (id))",
        "app",
        ("CREATETABLE", "app", "t", {"NEW": [col("id", "int", "No", "Yes"), col("x", "int"), col("y", "int"),
                                             col("row_start", "timestamp(6)", "No"),
                                             col("row_end", "timestamp(6)", "No", "Yes")],
                                     "primary_key": ["id", "row_end"]}),
    ),
    (
        "CREATE TABLE t (id INT, s BIGINT UNSIGNED GENERATED ALWAYS AS ROW START INVISIBLE, "
        "e BIGINT UNSIGNED GENERATED ALWAYS AS ROW END INVISIBLE, PERIOD FOR SYSTEM_TIME(s, e), PRIMARY KEY (id)) "
        "ENGINE=InnoDB WITH SYSTEM VERSIONING",
        "app",
        ("CREATETABLE", "app", "t", {"NEW": [col("id", "int", "No", "Yes"), col("s", "bigint unsigned", "No"),
                                             col("e", "bigint unsigned", "No", "Yes")],
                                     "primary_key": ["id", "e"]}),
    ),
    (
        "CREATE TABLE t (id INT PRIMARY KEY, x INT WITHOUT SYSTEM VERSIONING)",
        "app",
        ("CREATETABLE", "app", "t", {"NEW": [col("id", "int", "No", "Yes"), col("x", "int")],
                                     "primary_key": ["id"]}),
    ),
    # --- odd identifiers, case, comments ---
    (
        "CREATE TABLE `my db`.`we``ird.name` (`sélect` INT, `a.b` TEXT, `order` DATE NOT NULL, `日付` DATETIME(6), "
        "\"dq\" CHAR(1) BINARY, 名前 national varchar(10), code CHAR(3) UNIQUE KEY, k INT KEY, s serial, "
        "bits bit(8) default b'0')",
        "",
        ("CREATETABLE", "my db", "we`ird.name", {"NEW": [
            col("sélect", "int"),
            col("a.b", "text"),
            col("order", "date", "No"),
            col("日付", "datetime(6)"),
            col("dq", "char(1)"),
            col("名前", "national varchar(10)"),
            col("code", "char(3)"),
            col("k", "int", "No", "Yes"),
            col("s", "serial", "No"),
            col("bits", "bit(8)"),
        ]}),
    ),
    (
        "create table if not exists Events (ID bigint unsigned zerofill, Payload JSON, "
        "primary key using btree (id))",
        "App",
        ("CREATETABLE", "App", "Events", {"NEW": [
            col("ID", "bigint unsigned zerofill", "No", "Yes"),
            col("Payload", "json"),
        ]}),
    ),
    (
        "ALTER TABLE café ADD COLUMN prénom VARCHAR(32) CHARACTER SET utf8mb4 NULL",
        "app",
        ("ALTERTABLE", "app", "café", {"ADDCOLUMN": [{"field_name": "prénom", "data_type": "varchar(32)"}]}),
    ),
    (
        "ALTER TABLE t /* rebuild */ ADD COLUMN c INT -- trailing\n, ADD d INT # mysql comment\n"
        "#another\n, ADD `#e` INT/*!80023 INVISIBLE */",
        "app",
        ("ALTERTABLE", "app", "t", {"ADDCOLUMN": [
            {"field_name": "c", "data_type": "int"},
            {"field_name": "d", "data_type": "int"},
            {"field_name": "#e", "data_type": "int"},
        ]}),
    ),
    (
        "ALTER TABLE t /*M!100301 ADD COLUMN v INT, */ DROP status",
        "app",
        ("ALTERTABLE", "app", "t", {"ADDCOLUMN": [{"field_name": "v", "data_type": "int"}], "DROPCOLUMN": ["status"]}),
    ),
    # --- multi-clause ALTERs ---
    (
        "ALTER TABLE `t` ADD COLUMN `c1` INT(11) UNSIGNED NOT NULL DEFAULT '0' AFTER `id`, "
        "ADD COLUMN IF NOT EXISTS c2 varchar(10) CHARACTER SET latin1 FIRST, DROP COLUMN IF EXISTS `old`, "
        "ADD UNIQUE KEY `uk` (`c1`, c2(5)), ADD INDEX (c2 DESC), DROP INDEX `idx_old`, DROP KEY k2, "
        "ALGORITHM=INPLACE, LOCK=NONE",
        "app",
        ("ALTERTABLE", "app", "t", {
            "ADDCOLUMN": [
                {"field_name": "c1", "data_type": "int(11) unsigned"},
                {"field_name": "c2", "data_type": "varchar(10)"},
            ],
            "ADDINDEX": [index("uk", "c1", "c2"), index("c2", "c2")],
            "DROPCOLUMN": ["old"],
            "DROPINDEX": ["idx_old", "k2"],
            "OTHERS": ["ALGORITHM=INPLACE", "LOCK=NONE"],
        }),
    ),
    (
        "ALTER TABLE t ADD COLUMN (c1 INT, c2 VARCHAR(20) NOT NULL), ADD (c3 ENUM('x', 'Y'))",
        "app",
        ("ALTERTABLE", "app", "t", {"ADDCOLUMN": [
            {"field_name": "c1", "data_type": "int"},
            {"field_name": "c2", "data_type": "varchar(20)"},
            {"field_name": "c3", "data_type": "enum('x','Y')"},
        ]}),
    ),
    (
        "ALTER TABLE t DROP PRIMARY KEY, ADD PRIMARY KEY (`id`, `created_at`)",
        "app",
        ("ALTERTABLE", "app", "t", {"ADDINDEX": [index("PRIMARY", "id", "created_at")], "DROPINDEX": ["PRIMARY"]}),
    ),
    (
        "alter table users add constraint uq_email unique (email), add constraint chk_age check (age >= 0)",
        "app",
        ("ALTERTABLE", "app", "users", {
            "ADDINDEX": [index("uq_email", "email")],
            "OTHERS": ["add constraint chk_age check (age >= 0)"],
        }),
    ),
    (
        "ALTER TABLE `orders` DROP FOREIGN KEY `fk_customer`, DROP INDEX `fk_customer`",
        "shop",
        ("ALTERTABLE", "shop", "orders", {
            "DROPINDEX": ["fk_customer"],
            "OTHERS": ["DROP FOREIGN KEY `fk_customer`"],
        }),
    ),
    (
        "ALTER TABLE docs ADD FULLTEXT INDEX ft_body (title, body) WITH PARSER ngram, ADD SPATIAL KEY (geo), "
        "RENAME INDEX a TO b",
        "app",
        ("ALTERTABLE", "app", "docs", {
            "ADDINDEX": [index("ft_body", "title", "body"), index("geo", "geo")],
            "OTHERS": ["RENAME INDEX a TO b"],
        }),
    ),
    (
        "ALTER TABLE t ENGINE=InnoDB",
        "app",
        ("ALTERTABLE", "app", "t", {"OTHERS": ["ENGINE=InnoDB"]}),
    ),
    (
        "ALTER TABLE t CONVERT TO CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci, ORDER BY a, b DESC",
        "app",
        ("ALTERTABLE", "app", "t", {"OTHERS": [
            "CONVERT TO CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci",
            "ORDER BY a, b DESC",
        ]}),
    ),
    (
        "ALTER TABLE t DROP PARTITION p0, p1",
        "app",
        ("ALTERTABLE", "app", "t", {"OTHERS": ["DROP PARTITION p0, p1"], "ROWS_WITHOUT_EVENTS": [
            {"dbname": "app", "tablename": "t", "by": "DROP PARTITION"}]}),
    ),
    (
        "ALTER ONLINE IGNORE TABLE IF EXISTS t WAIT 10 CHANGE COLUMN IF EXISTS a b BIGINT(20) FIRST, "
        "ADD INDEX idx_b USING BTREE (b(10), (lower(c)))",
        "app",
        ("ALTERTABLE", "app", "t", {
            "ADDINDEX": [index("idx_b", "b")],
            "CHANGECOLUMN": [change("a", "b", "bigint(20)")],
        }),
    ),
    (
        "ALTER TABLE t ADD INDEX ((lower(email)))",
        "app",
        ("ALTERTABLE", "app", "t", {"ADDINDEX": [index("functional_index")]}),
    ),
    (
        "ALTER TABLE t ADD status TINYINT(1) NOT NULL DEFAULT 1, ADD `date` DATE, ADD COLUMN, DROP `key`",
        "app",
        ("ALTERTABLE", "app", "t", {
            "ADDCOLUMN": [
                {"field_name": "status", "data_type": "tinyint(1)"},
                {"field_name": "date", "data_type": "date"},
            ],
            "DROPCOLUMN": ["key"],
            "OTHERS": ["ADD COLUMN"],
        }),
    ),
    (
        "ALTER TABLE rates ADD PARTITION PARTITIONS 2",
        "app",
        ("ALTERTABLE", "app", "rates", {"OTHERS": ["ADD PARTITION PARTITIONS 2"]}),
    ),
    (
        "ALTER TABLE t ADD COLUMN ts TIMESTAMP(6) GENERATED ALWAYS AS ROW START, "
        "ADD COLUMN te TIMESTAMP(6) GENERATED ALWAYS AS ROW END, ADD PERIOD FOR SYSTEM_TIME(ts, te), "
        "ADD SYSTEM VERSIONING, DROP CONSTRAINT chk_a",
        "app",
        ("ALTERTABLE", "app", "t", {
            "ADDCOLUMN": [
                {"field_name": "ts", "data_type": "timestamp(6)"},
                {"field_name": "te", "data_type": "timestamp(6)"},
            ],
            "OTHERS": ["ADD PERIOD FOR SYSTEM_TIME(ts, te)", "ADD SYSTEM VERSIONING", "DROP CONSTRAINT chk_a"],
            "ROWS_WITHOUT_EVENTS": [{"dbname": "app", "tablename": "t", "by": "ADD SYSTEM VERSIONING"}],
        }),
    ),
    # --- renames ---
    (
        "ALTER TABLE old_name RENAME TO new_name",
        "app",
        ("RENAME", "app", "old_name", {"RENAME": [rename(("app", "old_name"), ("app", "new_name"))]}),
    ),
    (
        "ALTER TABLE db1.a RENAME AS db2.b",
        "app",
        ("RENAME", "db1", "a", {"RENAME": [rename(("db1", "a"), ("db2", "b"))]}),
    ),
    (
        "ALTER TABLE a RENAME b, ADD COLUMN x INT",
        "app",
        ("ALTERTABLE", "app", "a", {
            "ADDCOLUMN": [{"field_name": "x", "data_type": "int"}],
            "RENAME": [rename(("app", "a"), ("app", "b"))],
        }),
    ),
    (
        "RENAME TABLE db1.t TO t2",
        "cur",
        ("RENAME", "db1", "t", {"RENAME": [rename(("db1", "t"), ("cur", "t2"))]}),
    ),
    # --- more drops / indexes ---
    (
        "DROP INDEX `PRIMARY` ON t",
        "app",
        ("ALTERTABLE", "app", "t", {"DROPINDEX": ["PRIMARY"]}),
    ),
    (
        "CREATE UNIQUE INDEX IF NOT EXISTS uk_sku USING BTREE ON shop.products (sku(16), vendor_id DESC) "
        "ALGORITHM=INPLACE LOCK=NONE",
        "app",
        ("ALTERTABLE", "shop", "products", {"ADDINDEX": [index("uk_sku", "sku", "vendor_id")]}),
    ),
]

NOT_ABOUT_A_TABLE = [
    "",
    "   ",
    "/* only a comment */",
    "BEGIN",
    "COMMIT",
    "XA START 'x'",
    "SAVEPOINT s1",
    "CREATE DATABASE `shop` /*!40100 DEFAULT CHARACTER SET utf8mb4 */",
    "DROP SCHEMA IF EXISTS shop",
    "ALTER DATABASE shop CHARACTER SET utf8mb4",
    "CREATE USER 'bob'@'%' IDENTIFIED BY 'secret'",
    "ALTER USER 'bob'@'%' PASSWORD EXPIRE",
    "DROP USER 'bob'@'%'",
    "RENAME USER 'bob'@'%' TO 'rob'@'%'",
    "GRANT SELECT ON shop.* TO 'bob'@'%'",
    "REVOKE ALL PRIVILEGES ON *.* FROM 'bob'@'%'",
    "FLUSH PRIVILEGES",
    "SET @@session.sql_mode = 'ANSI_QUOTES'",
    "/*!40101 SET @saved_cs_client = @@character_set_client */",
    "CREATE ALGORITHM=UNDEFINED DEFINER=`root`@`localhost` SQL SECURITY DEFINER VIEW `v` AS select 1",
    "CREATE OR REPLACE VIEW v AS SELECT * FROM t",
    "DROP VIEW IF EXISTS v",
    "CREATE DEFINER=`root`@`%` TRIGGER `pt_osc_shop_orders_del` AFTER DELETE ON `shop`.`orders` FOR EACH ROW "
    "DELETE IGNORE FROM `shop`.`_orders_new` WHERE `shop`.`_orders_new`.`id` <=> OLD.`id`",
    "DROP TRIGGER IF EXISTS `shop`.`pt_osc_shop_orders_del`",
    "CREATE DEFINER=`root`@`localhost` PROCEDURE p() BEGIN SELECT 1; END",
    "DROP FUNCTION IF EXISTS f",
    "CREATE EVENT e ON SCHEDULE EVERY 1 DAY DO DELETE FROM t",
    "ANALYZE TABLE t",
    "OPTIMIZE TABLE t",
    "CREATE TEMPORARY TABLE tmp (id INT)",
    "create temporary table if not exists tmp like t",
    "DROP TEMPORARY TABLE IF EXISTS `tmp` /* generated by server */",
    "INSERT INTO t VALUES (1)",
    "LOCK TABLES t WRITE",
]

# statements about a table that cannot be modelled: (statement, default_db, (dbname, tablename))
UNMODELLED = [
    ("CREATE TABLE", "app", ("app", "")),
    ("CREATE TABLE t", "app", ("app", "t")),
    ("CREATE TABLE t (a", "app", ("app", "t")),
    ("CREATE TABLE db.t (a INT, b)", "app", ("db", "t")),
    ("ALTER TABLE", "", ("", "")),
    ("TRUNCATE", "app", ("app", "")),
    ("TRUNCATE TABLE t PARTITION p0", "app", ("app", "t")),
    ("DROP TABLE", "app", ("app", "")),
    ("DROP TABLE a, ", "app", ("app", "a")),
    ("RENAME TABLE a TO", "app", ("app", "a")),
    ("CREATE INDEX i ON t", "app", ("app", "t")),
    ("DROP INDEX i", "app", ("app", "")),
]

OPTYPES = {"CREATETABLE", "ALTERTABLE", "RENAME", "TRUNCATE", "DROPTABLE"}


@pytest.mark.parametrize(("statement", "default_db", "expected"), CORPUS)
def test_corpus(statement: str, default_db: str, expected: tuple[str, str, str, dict[str, Any]]) -> None:
    optype, dbname, tablename, data = expected
    if optype != "TRUNCATE":
        data = data | {"SQL": statement}
    key = [c["field_name"] for c in data.get("NEW", []) if c["primary_key"] == "Yes"]
    if key and "LIKE" not in data:  # not describe()'s; composite keys below
        data = data | {"primary_key": key}
    assert parse_ddl(statement, default_db, describe) == [DdlChange(optype, dbname, tablename, data)]


def test_corpus_size() -> None:
    assert len(CORPUS) >= 42


@pytest.mark.parametrize("statement", NOT_ABOUT_A_TABLE)
def test_not_about_a_table(statement: str) -> None:
    assert parse_ddl(statement, "app", describe) == []


@pytest.mark.parametrize(("statement", "default_db", "table"), UNMODELLED)
def test_unmodelled_falls_back_to_others(statement: str, default_db: str, table: tuple[str, str]) -> None:
    data = {"OTHERS": [statement], "SQL": statement}
    assert parse_ddl(statement, default_db) == [DdlChange("ALTERTABLE", *table, data)]


def test_like_without_describe() -> None:
    statement = "CREATE TABLE t2 LIKE t1"
    data = {"NEW": [], "LIKE": ref("app", "t1"), "SQL": statement}
    assert parse_ddl(statement, "app") == [DdlChange("CREATETABLE", "app", "t2", data)]


def test_select_without_describe() -> None:
    statement = "CREATE TABLE t2 SELECT * FROM t1"
    data = {"NEW": [], "SELECT": True, "SQL": statement}
    assert parse_ddl(statement, "app") == [DdlChange("CREATETABLE", "app", "t2", data)]


def test_describe_called_with_source_table() -> None:
    calls: list[tuple[str, str]] = []

    def recording(db: str, table: str) -> list[dict[str, str]]:
        calls.append((db, table))
        return [col("id", "int", "No", "Yes")]

    parse_ddl("CREATE TABLE x.t2 LIKE `y`.`t1`", "app", recording)
    parse_ddl("CREATE TABLE t3 (a INT) AS SELECT 1 AS a", "app", recording)
    parse_ddl("CREATE TABLE t4 AS SELECT 1 AS a", "app", recording)  # refused by gate: no need for its columns
    assert calls == [("y", "t1")]


def test_only_first_statement_is_read() -> None:
    statement = "DROP TABLE a; DROP TABLE b"
    data = {"DROPTABLE": [ref("app", "a")], "SQL": statement}
    assert parse_ddl(statement, "app") == [DdlChange("DROPTABLE", "app", "a", data)]


def _check(statement: str) -> None:
    """parse_ddl returns well-formed DdlChanges for statement; the original text when there is one."""
    changes = parse_ddl(statement, "db", describe)
    for change in changes:
        assert change.optype in OPTYPES
        assert isinstance(change.dbname, str) and isinstance(change.tablename, str)
        if change.optype == "TRUNCATE":
            assert change.data == {}
        elif len(changes) == 1:
            assert change.data["SQL"] == statement
        else:
            assert change.optype in ("DROPTABLE", "RENAME") and change.data["SQL"] in statement.replace("\n", " ")


@pytest.mark.parametrize(("statement", "default_db", "expected"), CORPUS)
def test_truncated_corpus_never_raises(statement: str, default_db: str, expected: object) -> None:
    for end in range(len(statement) + 1):
        _check(statement[:end])


FRAGMENTS = [
    "CREATE", "ALTER", "DROP", "RENAME", "TRUNCATE", "TABLE", "INDEX", "TEMPORARY", "IF", "NOT", "EXISTS", "ADD",
    "COLUMN", "CHANGE", "MODIFY", "KEY", "PRIMARY", "UNIQUE", "CONSTRAINT", "FOREIGN", "LIKE", "SELECT", "AS", "ON",
    "TO", "FIRST", "AFTER", "NULL", "DEFAULT", "int", "varchar(10)", "enum('a','b')", "t", "db.t", "`a``b`", "`x",
    '"q"', "'s", "'s'", "(", ")", ",", ".", ";", "=", "/*", "*/", "/*!50100", "/*M!", "--", "-- ", "#", "\n",
    "WAIT", "NOWAIT", "USING", "PARTITION", "ORDER BY", "SYSTEM", "VERSIONING", "PERIOD", "FOR", "serial", "ü",
]


@settings(max_examples=500, deadline=None)
@given(st.text())
def test_never_raises_on_any_text(statement: str) -> None:
    _check(statement)


@settings(max_examples=1500, deadline=None)
@given(st.lists(st.sampled_from(FRAGMENTS), max_size=25), st.sampled_from(["", " "]))
def test_never_raises_on_sql_like_text(fragments: list[str], separator: str) -> None:
    _check(separator.join(fragments))


# --- multi-table DROP TABLE / RENAME TABLE: one row per table, each with the statement for it alone ---

MULTI_TABLE = [
    (
        "DROP TABLE IF EXISTS `test`.`t1`,`t2` /* generated by server */",
        "test2",
        [("DROPTABLE", "test", "t1", {"DROPTABLE": [ref("test", "t1")], "SQL": "DROP TABLE IF EXISTS `test`.`t1`"}),
         ("DROPTABLE", "test2", "t2", {"DROPTABLE": [ref("test2", "t2")], "SQL": "DROP TABLE IF EXISTS `t2`"})],
    ),
    (
        "DROP TABLE IF EXISTS a, db2.b CASCADE;",
        "app",
        [("DROPTABLE", "app", "a", {"DROPTABLE": [ref("app", "a")], "SQL": "DROP TABLE IF EXISTS a"}),
         ("DROPTABLE", "db2", "b", {"DROPTABLE": [ref("db2", "b")], "SQL": "DROP TABLE IF EXISTS db2.b CASCADE"})],
    ),
    (
        "RENAME TABLE a TO b, db.c TO db2.d",
        "app",
        [("RENAME", "app", "a", {"RENAME": [rename(("app", "a"), ("app", "b"))], "SQL": "RENAME TABLE a TO b"}),
         ("RENAME", "db", "c", {"RENAME": [rename(("db", "c"), ("db2", "d"))], "SQL": "RENAME TABLE db.c TO db2.d"})],
    ),
    (
        "rename /* gh-ost */ table `shop`.`orders` to `shop`.`_orders_del`, `shop`.`_orders_gho` to `shop`.`orders`",
        "",
        [("RENAME", "shop", "orders", {"RENAME": [rename(("shop", "orders"), ("shop", "_orders_del"))],
                                       "SQL": "rename table `shop`.`orders` to `shop`.`_orders_del`"}),
         ("RENAME", "shop", "_orders_gho", {"RENAME": [rename(("shop", "_orders_gho"), ("shop", "orders"))],
                                            "SQL": "rename table `shop`.`_orders_gho` to `shop`.`orders`"})],
    ),
    (
        "DROP SEQUENCE IF EXISTS s1, s2",
        "app",
        [("DROPTABLE", "app", "s1", {"DROPTABLE": [ref("app", "s1")], "SQL": "DROP SEQUENCE IF EXISTS s1"}),
         ("DROPTABLE", "app", "s2", {"DROPTABLE": [ref("app", "s2")], "SQL": "DROP SEQUENCE IF EXISTS s2"})],
    ),
]


@pytest.mark.parametrize(("statement", "default_db", "expected"), MULTI_TABLE)
def test_multi_table_statements_give_a_row_per_table(statement: str, default_db: str,
                                                     expected: list[tuple[str, str, str, dict[str, Any]]]) -> None:
    assert parse_ddl(statement, default_db) == [DdlChange(*row) for row in expected]


def translate(statement: str, allow: tuple[str, ...] = (), deny: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    translator = Translator(timezone.utc, "base64", TableFilter(allow, deny), position=lambda: "mysql-bin.000007:1234")
    return [(db, table, optype, json.loads(data)["SQL"]) for db, table, optype, data in
            translator.statement(Statement("app", statement, 0))]


def test_multi_table_statements_are_filtered_per_table() -> None:
    """Whichever comes first, a denied table's part is dropped and never named; a rename is captured when
    its old or its new name is."""
    deny = ("app.skip*",)
    assert translate("DROP TABLE skip1, keep1", deny=deny) == [("app", "keep1", "DROPTABLE", "DROP TABLE keep1")]
    assert translate("DROP TABLE keep2, skip2", deny=deny) == [("app", "keep2", "DROPTABLE", "DROP TABLE keep2")]
    assert translate("RENAME TABLE skip3 TO skip5, keep3 TO keep5, keep4 TO skip6, skip7 TO keep7", deny=deny) == [
        ("app", "keep3", "RENAME", "RENAME TABLE keep3 TO keep5"),
        ("app", "keep4", "RENAME", "RENAME TABLE keep4 TO skip6"),
        ("app", "skip7", "RENAME", "RENAME TABLE skip7 TO keep7"),
    ]
    assert translate("DROP TABLE skip1, skip2", deny=deny) == []


# --- the primary key's column order ---

def test_create_table_payload_keeps_the_primary_key_order() -> None:
    statement = "CREATE TABLE t (a INT, b INT, c INT, PRIMARY KEY (B, a))"  # spelt as the columns are
    assert parse_ddl(statement, "app") == [DdlChange("CREATETABLE", "app", "t", {
        "NEW": [col("a", "int", "No", "Yes"), col("b", "int", "No", "Yes"), col("c", "int")],
        "primary_key": ["b", "a"], "SQL": statement})]


def test_create_table_without_primary_key_has_no_key_entry() -> None:
    statement = "CREATE TABLE t (a INT, UNIQUE KEY (a))"
    assert parse_ddl(statement, "app") == [DdlChange("CREATETABLE", "app", "t", {"NEW": [col("a", "int")],
                                                                                  "SQL": statement})]


def test_alter_add_primary_key_lists_its_columns_in_key_order() -> None:
    statement = "ALTER TABLE t ADD PRIMARY KEY (b, a)"
    assert parse_ddl(statement, "app") == [DdlChange("ALTERTABLE", "app", "t", {
        "ADDINDEX": [index("PRIMARY", "b", "a")], "SQL": statement})]


# --- sequences ---

SEQUENCE_NEW = [col("next_not_cached_value", "bigint(21)", "No"), col("minimum_value", "bigint(21)", "No"),
                col("maximum_value", "bigint(21)", "No"), col("start_value", "bigint(21)", "No"),
                col("increment", "bigint(21)", "No"), col("cache_size", "bigint(21) unsigned", "No"),
                col("cycle_option", "tinyint(1) unsigned", "No"), col("cycle_count", "bigint(21)", "No")]


@pytest.mark.parametrize(("statement", "table"), [
    ("CREATE SEQUENCE s", ("app", "s")),
    ("create or replace sequence if not exists `db`.`s` start with 10 increment by 5 nocache", ("db", "s")),
])
def test_create_sequence_is_the_createtable_of_its_table(statement: str, table: tuple[str, str]) -> None:
    assert parse_ddl(statement, "app") == [DdlChange("CREATETABLE", *table, {"NEW": SEQUENCE_NEW, "SQL": statement})]


def test_alter_sequence_is_an_unmodelled_alter_that_changes_its_row_without_events() -> None:
    statement = "ALTER SEQUENCE s RESTART WITH 100"
    unlogged = [{"dbname": "app", "tablename": "s", "by": "ALTER SEQUENCE"}]
    assert parse_ddl(statement, "app") == [DdlChange("ALTERTABLE", "app", "s", {
        "OTHERS": [statement], "ROWS_WITHOUT_EVENTS": unlogged, "SQL": statement})]
    assert snapshot_tables(parse_ddl(statement, "app")[0].data) == []  # a sequence has no key to page on


# --- statements that change rows without row events (what MariaDB 10.11 logs, checked with mariadb-binlog -v) ---

UNLOGGED = [  # (statement, [(db, table, by)] of ROWS_WITHOUT_EVENTS; [] when the key is absent)
    ("ALTER TABLE pt TRUNCATE PARTITION p0, p1", [("app", "pt", "TRUNCATE PARTITION")]),
    ("ALTER TABLE pt TRUNCATE PARTITION ALL, ADD COLUMN c INT", [("app", "pt", "TRUNCATE PARTITION")]),
    ("ALTER TABLE pt DROP PARTITION IF EXISTS p1", [("app", "pt", "DROP PARTITION")]),
    ("ALTER TABLE db.pt EXCHANGE PARTITION p2 WITH TABLE ex WITHOUT VALIDATION",
     [("db", "pt", "EXCHANGE PARTITION"), ("app", "ex", "EXCHANGE PARTITION")]),
    ("ALTER TABLE pt CONVERT PARTITION p4 TO TABLE o.conv", [("app", "pt", "CONVERT PARTITION"),
                                                            ("o", "conv", "CONVERT PARTITION")]),
    ("ALTER TABLE pt CONVERT TABLE conv TO PARTITION p4 VALUES LESS THAN MAXVALUE",
     [("app", "pt", "CONVERT TABLE TO PARTITION")]),
    ("ALTER TABLE x DISCARD TABLESPACE", [("app", "x", "DISCARD TABLESPACE")]),
    ("ALTER TABLE x IMPORT PARTITION p0 TABLESPACE", [("app", "x", "IMPORT TABLESPACE")]),
    ("ALTER IGNORE TABLE u ADD UNIQUE (v)", [("app", "u", "ALTER IGNORE TABLE")]),
    ("ALTER IGNORE TABLE u ADD COLUMN c INT NOT NULL DEFAULT 0 UNIQUE", [("app", "u", "ALTER IGNORE TABLE")]),
    ("ALTER TABLE pt TRUNCATE PARTITION p0, DROP PARTITION p1", [("app", "pt", "TRUNCATE PARTITION")]),
    ("ALTER TABLE pt EXCHANGE PARTITION p2", [("app", "pt", "EXCHANGE PARTITION p2")]),  # unreadable: flagged
    ("ALTER TABLE al ADD SYSTEM VERSIONING", [("app", "al", "ADD SYSTEM VERSIONING")]),
    ("ALTER TABLE al DROP SYSTEM VERSIONING, ADD COLUMN c INT", [("app", "al", "DROP SYSTEM VERSIONING")]),
    # the rows stay: repartitioning, merging and splitting partitions, a unique key without IGNORE, ...
    ("ALTER TABLE pt REORGANIZE PARTITION p3 INTO (PARTITION p3 VALUES LESS THAN (40), PARTITION p4 VALUES "
     "LESS THAN MAXVALUE)", []),
    ("ALTER TABLE pt REMOVE PARTITIONING", []),
    ("ALTER TABLE hp COALESCE PARTITION 2", []),
    ("ALTER TABLE hp ADD PARTITION PARTITIONS 1", []),
    ("ALTER TABLE hp REBUILD PARTITION p0", []),
    ("ALTER TABLE hp OPTIMIZE PARTITION p0", []),
    ("ALTER TABLE pt PARTITION BY HASH (id) PARTITIONS 3", []),
    ("ALTER TABLE t CONVERT TO CHARACTER SET utf8mb4", []),
    ("ALTER TABLE u ADD UNIQUE (v)", []),
    ("ALTER IGNORE TABLE u ADD INDEX (v), DROP PRIMARY KEY", []),
    ("ALTER TABLE t DROP COLUMN c", []),
]


@pytest.mark.parametrize(("statement", "tables"), UNLOGGED)
def test_statements_that_change_rows_without_row_events_name_the_tables(
        statement: str, tables: list[tuple[str, str, str]]) -> None:
    [row] = parse_ddl(statement, "app")
    assert row.optype == "ALTERTABLE"
    unlogged = [{"dbname": db, "tablename": table, "by": by} for db, table, by in tables]
    assert row.data.get("ROWS_WITHOUT_EVENTS", []) == unlogged
    assert list(row.data)[-1] == "SQL"
    assert snapshot_tables(row.data) == [(db, table) for db, table, _ in tables]


def test_a_statement_that_changes_a_captured_table_without_row_events_is_captured() -> None:
    """An EXCHANGE PARTITION of an excluded table with a captured one yields its row (naming the excluded
    table, as the statement does), so that the captured one is flagged."""
    translator = Translator(timezone.utc, "base64", TableFilter(allow=("app.ex",)))
    statement = "ALTER TABLE pt EXCHANGE PARTITION p2 WITH TABLE ex"
    [(db, table, optype, data)] = translator.statement(Statement(sql=statement, schema="app", timestamp=0))
    assert (db, table, optype, json.loads(data)["ROWS_WITHOUT_EVENTS"]) == ("app", "pt", "ALTERTABLE", [
        {"dbname": "app", "tablename": "pt", "by": "EXCHANGE PARTITION"},
        {"dbname": "app", "tablename": "ex", "by": "EXCHANGE PARTITION"}])
    assert translator.statement(Statement(sql="ALTER TABLE pt TRUNCATE PARTITION p0", schema="app",
                                          timestamp=0)) == []


def test_temporary_sequence_is_not_replicated() -> None:
    assert parse_ddl("CREATE TEMPORARY SEQUENCE s", "app") == []


# --- what is logged of a statement, and statement-format DML ---

@pytest.mark.parametrize(("statement", "kind"), [
    ("CREATE USER 'bob'@'%' IDENTIFIED BY 'pw'", "CREATE USER"),
    ("/* x */ alter user bob IDENTIFIED BY 'pw'", "ALTER USER"),
    ("GRANT ALL ON *.* TO bob IDENTIFIED BY 'pw'", "GRANT"),
    ("SET PASSWORD FOR bob = PASSWORD('pw')", "SET PASSWORD"),
    ("CREATE SERVER s FOREIGN DATA WRAPPER mysql OPTIONS (PASSWORD 'pw')", "CREATE SERVER"),
    ("CHANGE MASTER TO MASTER_PASSWORD='pw'", "CHANGE MASTER"),
    ("/*!40101 SET @saved_cs_client = @@character_set_client */", "SET"),
    ("INSERT INTO t VALUES ('pw')", "INSERT"),
    ("'pw'", "unnamed"),
    ("", "unnamed"),
])
def test_statement_kind_is_its_first_keywords(statement: str, kind: str) -> None:
    assert statement_kind(statement) == kind


@pytest.mark.parametrize(("statement", "tables"), [
    ("INSERT INTO t VALUES (1)", [("app", "t")]),
    ("insert low_priority ignore into db.t (a) select a from other.x", [("db", "t")]),
    ("REPLACE t SET a = 1", [("app", "t")]),
    ("INSERT t VALUES (1) ON DUPLICATE KEY UPDATE a = 2", [("app", "t")]),
    ("UPDATE t SET a = 1 WHERE b IN (SELECT b FROM x)", [("app", "t")]),
    ("UPDATE t1 JOIN db2.t2 ON t1.a IN (1, 2) LEFT JOIN (t3, t4) USING (c) SET t1.a = 1",
     [("app", "t1"), ("db2", "t2"), ("app", "t3"), ("app", "t4")]),
    ("UPDATE t, (SELECT 1 AS a) d SET t.a = d.a", [("app", "t")]),
    ("DELETE QUICK IGNORE FROM s.t WHERE a = 1", [("s", "t")]),
    ("DELETE a, b FROM t1 AS a JOIN db.t2 b WHERE a.x = b.y", [("app", "t1"), ("db", "t2")]),
    ("DELETE FROM t1, t2 USING t1 JOIN t3", [("app", "t1"), ("app", "t2"), ("app", "t1"), ("app", "t3")]),
    ("LOAD DATA LOCAL INFILE '/tmp/x' REPLACE INTO TABLE t FIELDS TERMINATED BY ','", [("app", "t")]),
    ("LOAD XML INFILE '/tmp/x' INTO TABLE db.t", [("db", "t")]),
    ("INSERT INTO", []),
    ("SELECT 1", None),
    ("CREATE USER bob", None),
    ("LOAD INDEX INTO CACHE t", None),
])
def test_dml_tables(statement: str, tables: list[tuple[str, str]] | None) -> None:
    assert dml_tables(statement, "app") == tables


def test_statement_dml_on_a_captured_table_is_refused_and_on_others_passes(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="gate.capture.translate")
    assert translate("INSERT INTO skip1 VALUES ('pw')", deny=("app.skip*",)) == []
    assert translate("GRANT SELECT ON app.* TO bob IDENTIFIED BY 'pw'", deny=("app.skip*",)) == []
    assert [r.getMessage() for r in caplog.records] == ["no row for a statement of kind GRANT"]
    with pytest.raises(StatementFormatChange, match=r"^app\.keep1 changed by a statement \(DELETE\) logged as text "
                       r"at binlog position mysql-bin\.000007:1234 \(the end of its event\)"):
        translate("DELETE skip1 FROM skip1 JOIN keep1 USING (id)", deny=("app.skip*",))
    with pytest.raises(StatementFormatChange, match=r"^a table gate cannot name changed by a statement \(INSERT\)"):
        translate("INSERT INTO", deny=("app.skip*",))


def test_create_table_select_logged_as_a_statement_is_refused_on_a_captured_table() -> None:
    """In row format the binlog holds a plain CREATE TABLE and the rows; the text with SELECT means statement
    format, whose rows are not in the binlog."""
    assert translate("CREATE TABLE skip1 (a INT) SELECT 1 AS a", deny=("app.skip*",)) == []
    with pytest.raises(StatementFormatChange, match=r"^app\.keep1 changed by a statement \(CREATE TABLE \.\.\. SELECT\) "
                       r"logged as text at binlog position mysql-bin\.000007:1234"):
        translate("CREATE TABLE keep1 (a INT) SELECT 1 AS a", deny=("app.skip*",))
