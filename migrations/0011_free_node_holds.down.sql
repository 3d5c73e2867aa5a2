ALTER TABLE free_nodes DROP COLUMN IF EXISTS held_until;
