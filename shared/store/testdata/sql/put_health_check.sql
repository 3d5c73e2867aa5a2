/* health checks: put */
INSERT INTO health_checks AS c (name, needs, steps, every_seconds, updated_by)
VALUES (@name::text, @needs::text[], @steps::jsonb, @every_seconds::int, @by::text)
ON CONFLICT ON CONSTRAINT health_checks_pkey DO UPDATE SET needs = excluded.needs, steps = excluded.steps,
    every_seconds = excluded.every_seconds, updated_by = excluded.updated_by, updated_at = now()
RETURNING c.name, c.needs, c.steps, c.every_seconds, (xmax = 0)
