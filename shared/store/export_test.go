package store

import (
	"context"
	"time"

	"mediator/shared/match"
	"mediator/shared/plan"
	"mediator/shared/wire"

	"github.com/jackc/pgx/v5"
)

// Translate exposes the one pgx-error translation to the external tests, which break each
// constraint with raw SQL and check what the store makes of it.
func Translate(err error) error { return translate(err) }

// ReapLease carries out the reaper's decision about one lease — read earlier — so a test can
// interleave a renewal between the read and the write.
func (s *Store) ReapLease(ctx context.Context, nodeID string, epoch int64) (bool, error) {
	o, err := s.reapLease(ctx, leaseRef{NodeID: nodeID, Epoch: epoch})
	return o.lost, err
}

// ReportHolding applies a report and, before committing it, calls then() while the run's lock
// is still held: a test can queue another writer behind the report.
func (s *Store) ReportHolding(ctx context.Context, p wire.Report, then func()) error {
	_, err := inTx(ctx, s, func(tx pgx.Tx) (struct{}, error) {
		lr, err := lockRun(ctx, tx, lockTarget{RunID: p.RunID, NodeID: p.NodeID})
		if err != nil {
			return struct{}{}, err
		}
		var res ReportResult
		b := &pgx.Batch{}
		if err := planReport(lr, p, b, &res, s.set.LeaseTTL.Seconds()); err != nil {
			return struct{}{}, err
		}
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return struct{}{}, err
		}
		then()
		return struct{}{}, nil
	})
	return err
}

// LockHolding takes a run's lock as a report of nodeID (or, with nodeID "", a cancel by owner;
// "" for an admin) would, calls then() while holding whatever it got, and returns why it got
// nothing: a test can wake the queue while a writer holds, or does not hold, a queued run.
func (s *Store) LockHolding(ctx context.Context, runID, nodeID, owner string, then func()) error {
	_, err := inTx(ctx, s, func(tx pgx.Tx) (struct{}, error) {
		_, err := lockRun(ctx, tx, lockTarget{RunID: runID, NodeID: nodeID, Owner: owner})
		then()
		return struct{}{}, err
	})
	return err
}

// SubmitThen submits run, calling then between the submit's read of the fleet and the queue
// and its insert: a test can free or take a node in that window.
func (s *Store) SubmitThen(ctx context.Context, run wire.NewRun, then func()) (SubmitResult, error) {
	return s.submit(ctx, run, then)
}

// ReapMargin is how much of its deadline a reap leaves unused.
const ReapMargin = reapMargin

// SpreadSeed is where a run's walk along free_nodes starts.
func SpreadSeed(runID string) float64 { return spreadSeed(runID) }

// WalkFree is how far that walk goes each way.
const WalkFree = walkFree

// StartNodes and PerNeed bound what a sweep reads of a large set of free nodes;
// MaxWakeSweeps how many sweeps one wake makes.
const (
	StartNodes    = startNodes
	PerNeed       = perNeed
	MaxWakeSweeps = maxSweepsPerWake
)

// InsertPlaced stores run RUNNING on the nodes assigned, as Submit does after a match that
// found them free and nothing queued: a test can queue another run in between.
func (s *Store) InsertPlaced(ctx context.Context, run wire.NewRun, assigned map[string]string) (string, error) {
	stored, err := s.insertRun(ctx, run, wire.Running, "", assigned)
	return stored.state, err
}

// ReportAfter applies a report decided from the run as read before sql ran in the same
// transaction: as if the lock had not kept what the report was decided from.
func (s *Store) ReportAfter(ctx context.Context, p wire.Report, sql string) (ReportResult, error) {
	return pipelinedTx(ctx, s, func() pipelined[ReportResult] {
		var lr lockedRun
		var res ReportResult
		return pipelined[ReportResult]{
			read: func(b *pgx.Batch) {
				queueLockRun(b, lockTarget{RunID: p.RunID, NodeID: p.NodeID}, &lr)
				b.Queue(sql)
			},
			write:  func(b *pgx.Batch) error { return planReport(lr, p, b, &res, s.set.LeaseTTL.Seconds()) },
			result: func() ReportResult { return res },
		}
	})
}

// RuleSQL expands a statement written for a test with the store's fragments and constants.
func RuleSQL(text string) string { return dynamic("test", text).sql }

// QueueBefore is the wake's Go order of two heads, neither protected unless said.
func QueueBefore(aID string, aAt time.Time, aRank int, aProtected bool, bID string, bAt time.Time, bRank int, bProtected bool) bool {
	return plan.Head{RunID: aID, CreatedAt: aAt, QueueRank: aRank, Protected: aProtected}.Before(
		plan.Head{RunID: bID, CreatedAt: bAt, QueueRank: bRank, Protected: bProtected})
}

// NeedKey is a role's needs as one string.
func NeedKey(needs []string) string { return needKey(needs) }

// RoleSlotOrder is the order the wake pairs planned nodes with a run's roles in.
func RoleSlotOrder(roles []match.Role) []string {
	var out []string
	for _, sl := range roleSlots(roles, nil) {
		out = append(out, sl.role)
	}
	return out
}

// PromoteSQL is the promotion statement, expanded.
func PromoteSQL() string { return stmt("wake_promote").sql }

// TestStep is a step as the report path decides from it.
type TestStep struct {
	ID, State string
	After     []string
}

// RunnableInGo is the report path's runnable rule for step i.
func RunnableInGo(steps []TestStep, i int, cancelling bool) bool {
	rs := make([]reportStep, len(steps))
	for j, s := range steps {
		rs[j] = reportStep{ID: s.ID, Role: "main", State: s.State, After: s.After}
	}
	return rs[i].State == wire.Pending && !cancelling && runnable(rs, rs[i])
}

// WakeStartSQL is the wake's first statement as s sends it.
func WakeStartSQL(s *Store) string { return s.bound.wakeStart.sql }

// Named is the store's named arguments, for a test to send its own statement with them.
type Named = named

// TakeNodes takes nodes as a promotion and a submit take them (keyed_nodes, then
// take_free_nodes), in tx, and says which it holds.
func TakeNodes(ctx context.Context, tx pgx.Tx, nodes []string) ([]string, error) {
	st := dynamic("test: take nodes", `/* test: take nodes */
WITH {{keyed_nodes}}, slot AS (
    SELECT n.node_id FROM unnest(@nodes::text[]) AS a(node_id) {{take_free_nodes a}}
)
SELECT coalesce(array_agg(node_id), '{}') FROM slot`)
	var had []string
	err := st.queryRow(ctx, tx, named{"nodes": nodes, "check_run": ""}).Scan(&had)
	return had, err
}

// ScramVerifier exposes the stored form of a password, so a test can log in against it as
// PostgreSQL does, with RFC 7677's exchange.
func ScramVerifier(password string, salt []byte) (string, error) {
	return scramVerifier(password, salt)
}
