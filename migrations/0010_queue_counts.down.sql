DROP TRIGGER IF EXISTS runs_count_queue ON runs;
DROP FUNCTION IF EXISTS runs_count_queue();
DROP TABLE IF EXISTS queue_counts;
DROP FUNCTION IF EXISTS queue_bucket(timestamptz, integer);
