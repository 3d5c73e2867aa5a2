/* migrate: lock wait */
SELECT w.locktype, coalesce(w.relation::regclass::text, ''), w.mode,
       coalesce((SELECT string_agg(format('pid %s (%s)', a.pid, coalesce(nullif(a.application_name, ''), a.usename)), ', ' ORDER BY a.pid)
                 FROM pg_stat_activity a WHERE a.pid = ANY (pg_blocking_pids(w.pid))), '')
FROM pg_locks w
WHERE w.pid = $1 AND NOT w.granted
LIMIT 1
