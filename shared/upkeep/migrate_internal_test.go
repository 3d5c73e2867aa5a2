package upkeep

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

// Whatever error a FAILED answer comes from, its reason carries no credential and fits
// CloudFormation's answer.
func TestMigrateResourceReasonCarriesNoCredentials(t *testing.T) {
	t.Parallel()
	for _, msg := range []string{
		"cannot parse postgres://mediator:hunter2@db.example:5432/mediator?sslmode=verify-full",
		"connect failed: host=db user=mediator password=hunter2 dbname=mediator",
		`connect failed: password = 'hunter2'`,
		"secret: {\"username\": \"mediator\", \"password\": \"hunter2\"}",
		strings.Repeat("é", 3000) + " postgresql://u:hunter2@h/db",
	} {
		reason := failureReason(errors.New(msg))
		if strings.Contains(reason, "hunter2") || len(reason) > maxReason+len("…") || !utf8.ValidString(reason) {
			t.Errorf("%.80s… answered the reason %.200s… (%d bytes)", msg, reason, len(reason))
		}
	}
}
