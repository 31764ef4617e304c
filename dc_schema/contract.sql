-- The DC contract (public interface): the two tables applications read.
-- Change only by adding, and document every addition in docs/reference/dc-format.md (its tables are generated from this file).
CREATE TABLE IF NOT EXISTS transfer_data (
  id            BIGINT UNSIGNED NOT NULL COMMENT 'one per changed row or DDL statement, from 1, gap-free, binlog order',
  tid           BIGINT UNSIGNED NOT NULL COMMENT 'one per source transaction, from 1, gap-free',
  dbname        VARCHAR(64)     NOT NULL COMMENT 'database of the change (RENAME: the old name, CREATETABLE: the new)',
  tablename     VARCHAR(64)     NOT NULL COMMENT 'table of the change',
  create_time   TIMESTAMP       NOT NULL DEFAULT CURRENT_TIMESTAMP COMMENT 'when the event was executed on the source',
  instance_name VARCHAR(64)     NOT NULL COMMENT 'host:port of the server the event was read from',
  optype        VARCHAR(64)     NOT NULL COMMENT 'INSERT UPDATE DELETE TRUNCATE ALTERTABLE RENAME CREATETABLE DROPTABLE SNAPSHOTSTART SNAPSHOT SNAPSHOTEND SKIPPED VERIFY',
  data          LONGTEXT        NULL     COMMENT 'JSON: NEW/OLD row images or the DDL payload',
  PRIMARY KEY (id, tid),
  KEY idx_dbname_tablename (dbname, tablename),
  KEY idx_create_time (create_time)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE IF NOT EXISTS transfer_checkpoint (
  id  BIGINT UNSIGNED NOT NULL COMMENT 'every row with id <= this is present and complete',
  tid BIGINT UNSIGNED NOT NULL COMMENT 'tid of the last complete transaction at the checkpoint'
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;
