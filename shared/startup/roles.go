package startup

import (
	"context"

	"mediator/shared/config"
	"mediator/shared/dbcreds"
	"mediator/shared/store"
)

// AppRole is the application role the migrate function grants to after every migration, and
// creates or sets the password of from its secret (DB_APP_USER, DB_APP_SECRET_ARN). It is read
// at each migration rather than at start: a secret changed since is the one the role gets.
func AppRole(ctx context.Context, cfg config.Config, a *AWS) (store.AppRole, error) {
	return dbcreds.AppRole(ctx, cfg.Database, a.Config)
}
