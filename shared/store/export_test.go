package store

// Translate exposes the one pgx-error translation to the external tests, which break each
// constraint with raw SQL and check what the store makes of it.
func Translate(err error) error { return translate(err) }
