-- Schema version 2: consumer names are exact (version 1 compared them with utf8mb4_general_ci, which
-- ignores case, accents and trailing spaces, so one name could take over another's cursor). Names that
-- version 1 kept apart stay apart under the binary collation.
ALTER TABLE gate_consumer MODIFY name VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin NOT NULL;
