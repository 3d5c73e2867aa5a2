DROP TABLE IF EXISTS heartbeat_pulse;
