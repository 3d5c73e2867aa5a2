UPDATE nodes SET registered_at = coalesce(registered_at, last_seen_at);
ALTER TABLE nodes ALTER COLUMN registered_at SET DEFAULT now(), ALTER COLUMN registered_at SET NOT NULL;
