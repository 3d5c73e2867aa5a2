/* migrate: end session */
SELECT pg_terminate_backend($1, $2) OR NOT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1)
