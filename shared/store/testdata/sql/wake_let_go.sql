/* wake: let go */
UPDATE free_nodes SET held_until = NULL
WHERE node_id = ANY (@held::text[]) AND held_until IS NOT NULL
