-- A submit asks, per role, for the nodes whose labels contain the role's needs
-- (labels @> needs): a GIN index answers that without reading the whole fleet.
CREATE INDEX nodes_labels ON nodes USING gin (labels);
