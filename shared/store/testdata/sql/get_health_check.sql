/* health checks: get */
SELECT c.name, c.needs, c.steps, c.every_seconds FROM health_checks c WHERE c.name = $1
