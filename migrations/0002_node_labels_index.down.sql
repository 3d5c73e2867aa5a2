DROP INDEX IF EXISTS nodes_labels;
