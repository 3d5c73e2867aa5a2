/* events: publishing */
UPDATE event_publishing SET enabled = $1 WHERE only_row AND enabled <> $1
