-- The migrator's own session (migrate.go): golang-migrate holds its lock there, and every
-- migration runs there, so the timeouts that bound a migration are that session's alone.

-- name: migrator_session(statement_timeout_ms, lock_timeout_ms)
-- Session settings, so SET: through RDS Proxy the SET pins the session to one database
-- connection, which golang-migrate's session advisory lock needs anyway, and the proxy refuses
-- these as startup parameters. A migration that waits for a lock waits at most
-- lock_timeout_ms; statement_timeout_ms follows the migration's deadline, the server's own
-- bound should the migrate function be gone before it could end the session.
/* migrate: session */
SET statement_timeout = {{statement_timeout_ms}}; SET lock_timeout = {{lock_timeout_ms}}

-- name: migrator_pid
-- The session's backend, asked of the database: through RDS Proxy the key a client gets at
-- connect is the proxy's, not the backend's.
/* migrate: pid */
SELECT pg_backend_pid()

-- name: migrator_lock_wait
-- The lock the migrator's session ($1) is waiting for, if any, and the sessions it waits on:
-- lock_timeout's error names no lock but a row's, so the migrator looks while it waits.
/* migrate: lock wait */
SELECT w.locktype, coalesce(w.relation::regclass::text, ''), w.mode,
       coalesce((SELECT string_agg(format('pid %s (%s)', a.pid, coalesce(nullif(a.application_name, ''), a.usename)), ', ' ORDER BY a.pid)
                 FROM pg_stat_activity a WHERE a.pid = ANY (pg_blocking_pids(w.pid))), '')
FROM pg_locks w
WHERE w.pid = $1 AND NOT w.granted
LIMIT 1

-- name: end_migrator_session
-- Ends the migrator's session ($1), waiting up to $2 ms for it to be gone, and says whether it
-- is: its transaction rolls back, and golang-migrate's advisory lock, a session lock, goes with
-- it. A session already gone (its client closed the connection first) counts as ended.
/* migrate: end session */
SELECT pg_terminate_backend($1, $2) OR NOT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1)
