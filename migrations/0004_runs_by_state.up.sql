-- GET /v1/runs?state=...: newest first within one state, per owner and for admins. Without the
-- state in the index a page of a rare state reads every newer run of the others first — for an
-- owner with no run in that state, its whole history.
--
-- Built in the migration's one transaction (golang-migrate sends the file as one query), so
-- writes to runs wait for the build.
CREATE INDEX runs_state_recent ON runs (state, created_at DESC, run_id DESC);
CREATE INDEX runs_owner_state_recent ON runs (owner, state, created_at DESC, run_id DESC);
