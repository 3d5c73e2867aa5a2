package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/golang-migrate/migrate/v4"
	pgxmigrate "github.com/golang-migrate/migrate/v4/database/pgx/v5"
	"github.com/golang-migrate/migrate/v4/source/iofs"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"mediator/migrations"
)

// Migrate applies every migration of migrations.FS that the database does not have yet, then
// grants the application role app what serving needs (grantApp, roles.go), and returns the
// schema version it is at. Already current is success, not an error, and grants all the same.
// The connection is the migrator's: what the migrations create, it owns.
//
// A schema ahead of this build — a rollback to the previous release, whose migrations stop
// short of the database's — is left as it is: migrations never take away what the previous
// release uses, so the previous code runs on the newer schema, and going down would drop what
// the newer code wrote.
func Migrate(ctx context.Context, pool *pgxpool.Pool, app AppRole) (uint, error) {
	v, err := withMigrator(pool, func(m *migrate.Migrate) error {
		if v, dirty, err := m.Version(); err == nil && !dirty && v > migrations.Latest() {
			return nil
		}
		if err := m.Up(); err != nil && !errors.Is(err, migrate.ErrNoChange) {
			return err
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return v, grantApp(ctx, pool, app)
}

// MigrateDown undoes every migration. Only tests call it: the round trip, and those that need an
// empty database to watch a start-up or a deploy migrate it. Nothing deployed goes down (see
// Migrate).
func MigrateDown(ctx context.Context, pool *pgxpool.Pool) (uint, error) {
	return withMigrator(pool, func(m *migrate.Migrate) error {
		if err := m.Down(); err != nil && !errors.Is(err, migrate.ErrNoChange) {
			return err
		}
		return nil
	})
}

func withMigrator(pool *pgxpool.Pool, fn func(*migrate.Migrate) error) (uint, error) {
	src, err := iofs.New(migrations.FS, ".")
	if err != nil {
		return 0, fmt.Errorf("store: read migrations: %w", err)
	}
	// database/sql over the same pool, so the migrator uses the same credentials (IAM tokens
	// included) as everything else.
	db := stdlib.OpenDBFromPool(pool)
	drv, err := pgxmigrate.WithInstance(db, &pgxmigrate.Config{})
	if err != nil {
		db.Close()
		return 0, fmt.Errorf("store: prepare migrations: %w", err)
	}
	m, err := migrate.NewWithInstance("iofs", src, "pgx5", drv)
	if err != nil {
		drv.Close()
		return 0, fmt.Errorf("store: prepare migrations: %w", err)
	}
	defer m.Close()
	if err := fn(m); err != nil {
		return 0, fmt.Errorf("store: migrate: %w", err)
	}
	v, _, err := m.Version()
	if errors.Is(err, migrate.ErrNilVersion) {
		return 0, nil
	}
	return v, err
}

// SchemaVersion is the version the database's schema is at (0 for none) and whether a failed
// migration left it dirty.
func (s *Store) SchemaVersion(ctx context.Context) (version uint, dirty bool, err error) {
	err = schemaVersionStmt.queryRow(ctx, s.pool).Scan(&version, &dirty)
	const undefinedTable = "42P01" // never migrated
	if errors.Is(err, ErrNotFound) || pgCode(err) == undefinedTable {
		return 0, false, nil
	}
	return version, dirty, err
}

var schemaVersionStmt = stmt("schema_version")

// Migrate applies the migrations this build has and the database lacks, and grants app what
// serving needs (the migrate function's work), through the store's own pool.
func (s *Store) Migrate(ctx context.Context, app AppRole) (uint, error) {
	return Migrate(ctx, s.pool, app)
}
