-- As 0006 left them: nullable, no default (0006's own down makes registered_at NOT NULL again).
ALTER TABLE runs ADD COLUMN IF NOT EXISTS queued_at timestamptz;
ALTER TABLE nodes ADD COLUMN IF NOT EXISTS registered_at timestamptz;
