DROP TRIGGER IF EXISTS nodes_keep_free_nodes ON nodes;
DROP TRIGGER IF EXISTS leases_keep_free_nodes ON leases;
DROP FUNCTION IF EXISTS free_nodes_follow_nodes();
DROP FUNCTION IF EXISTS free_nodes_follow_leases();
DROP TABLE IF EXISTS free_nodes;
