/* unservable: fleet print */
SELECT (SELECT coalesce(md5(string_agg(node_id || ':' || array_to_string(labels, ','), ';' ORDER BY node_id)), '') FROM nodes)
