/* migrate: pid */
SELECT pg_backend_pid()
