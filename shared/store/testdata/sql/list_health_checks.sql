/* health checks: list */
SELECT c.name, c.needs, c.steps, c.every_seconds FROM health_checks c ORDER BY c.name
