-- gate's own state, kept in the channel's database. App users are never granted these tables.
CREATE TABLE IF NOT EXISTS gate_meta (
  name  VARCHAR(64) NOT NULL PRIMARY KEY,
  value TEXT        NOT NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

-- Channel settings, one row per setting; value is JSON.
CREATE TABLE IF NOT EXISTS gate_settings (
  name  VARCHAR(64) NOT NULL PRIMARY KEY,
  value TEXT        NOT NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

-- Where to resume reading: always a transaction boundary, written in the same DC transaction
-- that moves transfer_checkpoint. Exactly one row.
CREATE TABLE IF NOT EXISTS gate_resume (
  singleton     TINYINT UNSIGNED NOT NULL PRIMARY KEY DEFAULT 1,
  id            BIGINT UNSIGNED  NOT NULL COMMENT 'equals transfer_checkpoint.id',
  tid           BIGINT UNSIGNED  NOT NULL COMMENT 'equals transfer_checkpoint.tid',
  log_file      VARCHAR(255)     NULL     COMMENT 'binlog file to resume from; NULL = not positioned yet',
  log_pos       BIGINT UNSIGNED  NULL,
  gtid_pos      TEXT             NULL     COMMENT 'GTID position at the boundary (MariaDB gtid list)',
  instance_name VARCHAR(64)      NULL     COMMENT 'server the position belongs to',
  event_time    BIGINT UNSIGNED  NULL     COMMENT 'source unix time of the last checkpointed transaction',
  updated_at    TIMESTAMP(3)     NOT NULL DEFAULT CURRENT_TIMESTAMP(3) ON UPDATE CURRENT_TIMESTAMP(3)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

-- Samples of the standby's clock and binlog position, for timestamp-based failover.
CREATE TABLE IF NOT EXISTS gate_standby_sample (
  sampled_at BIGINT UNSIGNED NOT NULL PRIMARY KEY COMMENT 'standby UNIX_TIMESTAMP() at sampling',
  log_file   VARCHAR(255)    NOT NULL,
  log_pos    BIGINT UNSIGNED NOT NULL,
  gtid_pos   TEXT            NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

-- Every switch from one server to another.
CREATE TABLE IF NOT EXISTS gate_switch (
  switched_at   TIMESTAMP(3)    NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  from_instance VARCHAR(64)     NOT NULL,
  to_instance   VARCHAR(64)     NOT NULL,
  reason        TEXT            NOT NULL,
  at_id         BIGINT UNSIGNED NOT NULL,
  PRIMARY KEY (switched_at, to_instance)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

-- Cursors of named consumers (gate.client). Names are exact: a binary collation without padding, so
-- case, accents and trailing spaces make different names.
CREATE TABLE IF NOT EXISTS gate_consumer (
  name       VARCHAR(64)     CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin NOT NULL PRIMARY KEY,
  id         BIGINT UNSIGNED NOT NULL,
  tid        BIGINT UNSIGNED NOT NULL,
  updated_at TIMESTAMP(3)    NOT NULL DEFAULT CURRENT_TIMESTAMP(3) ON UPDATE CURRENT_TIMESTAMP(3)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

-- Changes of XA transactions that are prepared on the source and not yet committed or rolled back.
-- They get ids only when the XA COMMIT is read; the rows of an outcome are deleted in the DC
-- transaction that moves the checkpoint past it.
CREATE TABLE IF NOT EXISTS gate_xa_pending (
  xid       VARCHAR(300)    NOT NULL COMMENT 'as the binlog writes it: X''gtrid'',X''bqual'',formatID',
  seq       BIGINT UNSIGNED NOT NULL COMMENT 'order of the change in the prepared transaction, from 1',
  dbname    VARCHAR(64)     NOT NULL,
  tablename VARCHAR(64)     NOT NULL,
  optype    VARCHAR(64)     NOT NULL,
  data      LONGTEXT        NULL,
  created   BIGINT UNSIGNED NOT NULL COMMENT 'source unix time of the row event',
  PRIMARY KEY (xid, seq)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- Initial snapshots of tables: one row per request (gate snapshot, channel create/filter --snapshot).
-- The columns up to message are shared with the admin commands; the snap_* columns are the engine's
-- progress, moved in the DC transaction that moves the checkpoint past the rows they describe.
CREATE TABLE IF NOT EXISTS gate_snapshot (
  id            BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY COMMENT 'snapshot id, in SNAPSHOTSTART/END',
  dbname        VARCHAR(64)     NOT NULL,
  tablename     VARCHAR(64)     NOT NULL,
  reason        VARCHAR(255)    NOT NULL COMMENT 'who asked: gate snapshot, channel create, channel filter',
  state         VARCHAR(16)     NOT NULL DEFAULT 'requested' COMMENT 'requested | running | done | cancelled',
  cancel        TINYINT         NOT NULL DEFAULT 0 COMMENT '1: gate snapshot --cancel asked; the run ends it as cancelled',
  requested_at  TIMESTAMP(3)    NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  started_at    TIMESTAMP(3)    NULL,
  finished_at   TIMESTAMP(3)    NULL,
  rows_done     BIGINT UNSIGNED NOT NULL DEFAULT 0 COMMENT 'SNAPSHOT rows at or below the checkpoint',
  chunks_done   BIGINT UNSIGNED NOT NULL DEFAULT 0,
  rows_estimate BIGINT UNSIGNED NULL COMMENT 'information_schema TABLE_ROWS when started, for progress',
  message       TEXT            NULL COMMENT 'last notice: why restarted or cancelled',
  snap_started  TINYINT         NOT NULL DEFAULT 0 COMMENT '1: its SNAPSHOTSTART is at or below the checkpoint',
  snap_key      TEXT            NULL COMMENT 'JSON list of the key columns the snapshot pages on',
  snap_bound    TEXT            NULL COMMENT 'JSON: the largest key in the first chunk''s read view',
  snap_last     TEXT            NULL COMMENT 'JSON: the last key at or below the checkpoint; NULL: none yet',
  KEY (state)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- Verifications of tables (gate verify): one row per table verification, read by gate run's snapshot engine
-- like gate_snapshot (the same columns up to snap_last), written to transfer_data as VERIFY rows. A
-- narrowing (with_rows = 1) re-reads one differing chunk's key range (after snap_last, up to snap_bound).
CREATE TABLE IF NOT EXISTS gate_verify (
  id            BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY COMMENT 'verification id, in VERIFY rows',
  dbname        VARCHAR(64)     NOT NULL,
  tablename     VARCHAR(64)     NOT NULL,
  reason        VARCHAR(255)    NOT NULL COMMENT 'who asked: gate verify, or the verification it narrows',
  state         VARCHAR(16)     NOT NULL DEFAULT 'requested' COMMENT 'requested | running | done | cancelled',
  cancel        TINYINT         NOT NULL DEFAULT 0 COMMENT '1: gate verify --cancel asked; the run ends it as cancelled',
  requested_at  TIMESTAMP(3)    NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  started_at    TIMESTAMP(3)    NULL,
  finished_at   TIMESTAMP(3)    NULL,
  rows_done     BIGINT UNSIGNED NOT NULL DEFAULT 0 COMMENT 'source rows checksummed at or below the checkpoint',
  chunks_done   BIGINT UNSIGNED NOT NULL DEFAULT 0 COMMENT 'VERIFY rows at or below the checkpoint',
  rows_estimate BIGINT UNSIGNED NULL COMMENT 'information_schema TABLE_ROWS when started, for progress',
  message       TEXT            NULL COMMENT 'why cancelled',
  snap_started  TINYINT         NOT NULL DEFAULT 0 COMMENT '1: a VERIFY row is at or below the checkpoint',
  snap_key      TEXT            NULL COMMENT 'JSON list of the key columns the verification pages on',
  snap_bound    TEXT            NULL COMMENT 'JSON: a narrowing''s last key; NULL: to the table''s end',
  snap_last     TEXT            NULL COMMENT 'JSON: the last key at or below the checkpoint (a narrowing: from it)',
  snap_after    TEXT            NULL COMMENT 'JSON: snap_last as the DC renders it',
  snap_upto     TEXT            NULL COMMENT 'JSON: snap_bound as the DC renders it',
  max_rate      INT UNSIGNED    NULL COMMENT 'source rows per second at most; NULL: no cap but the snapshots''',
  with_rows     TINYINT         NOT NULL DEFAULT 0 COMMENT '1: a narrowing: its VERIFY rows carry the source rows',
  parent        BIGINT UNSIGNED NULL COMMENT 'a narrowing: the verification whose differing chunk it reads again',
  compared_at   TIMESTAMP(3)    NULL COMMENT 'when gate verify compared it with the DC''s fold',
  chunks_differ INT UNSIGNED    NULL COMMENT 'its chunks that differ from the DC''s fold',
  keys_differ   INT UNSIGNED    NULL COMMENT 'keys that differ, found by narrowing those chunks',
  KEY (state),
  KEY (parent)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- The gate process that holds the channel, for fencing (docs/dba/several-hosts.md). epoch grows by one at
-- every start or takeover; every write of a running gate reads it LOCK IN SHARE MODE in its own DC
-- transaction and stops (Deposed) when it is no longer its own. Exactly one row once a gate has run.
CREATE TABLE IF NOT EXISTS gate_holder (
  singleton  TINYINT UNSIGNED NOT NULL PRIMARY KEY DEFAULT 1,
  epoch      BIGINT UNSIGNED  NOT NULL,
  host       VARCHAR(255)     NOT NULL,
  pid        INT UNSIGNED     NOT NULL,
  connection BIGINT UNSIGNED  NOT NULL COMMENT 'the DC connection holding the channel lock',
  since      DATETIME(6)      NOT NULL COMMENT 'UTC, the DC clock'
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

-- Every gate process of the channel: the one running it (active) and those standing by, each with the
-- DC clock (UTC) at its last heartbeat.
CREATE TABLE IF NOT EXISTS gate_process (
  host  VARCHAR(255) NOT NULL,
  pid   INT UNSIGNED NOT NULL,
  role  VARCHAR(16)  NOT NULL COMMENT 'active | standby | stopped (a clean stop, until the next holder)',
  since DATETIME(6)  NOT NULL,
  seen  DATETIME(6)  NOT NULL,
  PRIMARY KEY (host, pid)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

-- Every start of the channel by a gate process (each a new epoch): who, when, from whom and why.
CREATE TABLE IF NOT EXISTS gate_takeover (
  epoch     BIGINT UNSIGNED NOT NULL PRIMARY KEY,
  at        DATETIME(6)     NOT NULL COMMENT 'UTC, the DC clock',
  host      VARCHAR(255)    NOT NULL,
  pid       INT UNSIGNED    NOT NULL,
  standby   TINYINT         NOT NULL COMMENT '1: a standby took the channel over',
  from_host VARCHAR(255)    NULL,
  from_pid  INT UNSIGNED    NULL,
  reason    TEXT            NOT NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;
