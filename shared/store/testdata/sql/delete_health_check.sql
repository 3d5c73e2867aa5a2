/* health checks: delete */
DELETE FROM health_checks c WHERE c.name = $1 RETURNING c.name, c.needs, c.steps, c.every_seconds
