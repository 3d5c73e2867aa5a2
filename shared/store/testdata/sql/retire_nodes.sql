/* reap: retire nodes */
DELETE FROM nodes WHERE node_id IN (
    SELECT node_id FROM nodes n
    WHERE n.last_seen_at < now() - @retire::float8 * interval '1 second'
      AND NOT EXISTS (SELECT 1 FROM leases l WHERE l.node_id = n.node_id)
    LIMIT @batch::int FOR UPDATE SKIP LOCKED)
  AND last_seen_at < now() - @retire::float8 * interval '1 second'
