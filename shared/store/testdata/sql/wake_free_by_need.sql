/* wake: free nodes by need */
SELECT DISTINCT c.node_id, c.labels, c.suspect, coalesce(c.check_run_id, '')
FROM unnest(@needs::text[]) AS nd(need)
CROSS JOIN LATERAL (SELECT string_to_array(nd.need, ',') AS labels OFFSET 0) want
CROSS JOIN LATERAL (
    SELECT n.node_id, n.labels, (n.health = 'suspect') AS suspect, n.check_run_id FROM nodes n
    WHERE n.labels @> want.labels AND n.advert_expires_at > now() AND NOT (n.draining OR n.drain_requested_by IS NOT NULL) AND NOT (n.health = 'quarantined')
      AND EXISTS (SELECT 1 FROM free_nodes f WHERE f.node_id = n.node_id AND ((f.held_until IS NULL OR f.held_until <= now()) OR f.node_id = ANY (@held::text[])))
    LIMIT @k) c
