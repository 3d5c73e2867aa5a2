-- Step logs. A step's output lives in S3 (LOG_BUCKET), as numbered chunks under keys only the
-- server builds; the database keeps what a node's terminal report said of the log of one
-- attempt: its size and SHA-256 as stored, and whether every chunk was uploaded. Which chunks
-- exist is S3's to say (the reader lists them), so no row is written per chunk.
--
-- A row belongs to its step: deleting the step deletes it (ON DELETE CASCADE), so the
-- retention sweep's prune, which deletes a run's steps, takes its logs' rows with them.
CREATE TABLE step_logs (
    run_id      text        NOT NULL,
    step_id     text        NOT NULL,
    attempt     integer     NOT NULL,
    -- The step's state as its node reported it in that attempt: a requeue resets the step for
    -- the next attempt, and a reader of an earlier one still learns how the step ended there.
    state       text        NOT NULL,
    bytes       bigint      NOT NULL,
    sha256      text        NOT NULL,
    uploaded    boolean     NOT NULL,
    recorded_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT step_logs_pkey PRIMARY KEY (run_id, step_id, attempt),
    CONSTRAINT step_logs_step_fkey FOREIGN KEY (run_id, step_id) REFERENCES steps (run_id, step_id) ON DELETE CASCADE,
    CONSTRAINT step_logs_attempt_positive CHECK (attempt >= 1),
    CONSTRAINT step_logs_state_final CHECK (state IN ('SUCCEEDED', 'FAILED', 'CANCELLED')),
    CONSTRAINT step_logs_bytes_not_negative CHECK (bytes >= 0),
    CONSTRAINT step_logs_sha256_hex CHECK (sha256 ~ '^[0-9a-f]{64}$')
);
