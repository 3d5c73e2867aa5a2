/* runs: resolve */
SELECT run_id, owner FROM runs WHERE name = @name::text AND (@owner::text = '' OR owner = @owner::text)
UNION ALL
SELECT run_id, owner FROM runs WHERE run_id = @name::text AND @owner::text = ''
    AND NOT EXISTS (SELECT 1 FROM runs WHERE name = @name::text)
LIMIT 10
