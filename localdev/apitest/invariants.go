package apitest

import (
	"context"
	"fmt"
)

// invariantChecks are DESIGN.md's invariants and their consequences, as queries that return the ids that
// break them. The database enforces most of them already; checking again after a concurrency
// test is how a test sees that it did.
var invariantChecks = []struct{ name, sql string }{
	{"a node holds two leases (I1)", `SELECT node_id FROM leases GROUP BY node_id HAVING count(*) > 1`},
	{"a lease points at a run that is not RUNNING (I2)", `SELECT l.node_id FROM leases l JOIN runs r USING (run_id) WHERE r.state <> 'RUNNING'`},
	{"a QUEUED run holds a lease or a node (I3)", `SELECT r.run_id FROM runs r WHERE r.state = 'QUEUED' AND (
		EXISTS (SELECT 1 FROM leases l WHERE l.run_id = r.run_id) OR
		EXISTS (SELECT 1 FROM run_roles ro WHERE ro.run_id = r.run_id AND ro.node_id <> ''))`},
	{"a QUEUED run has a step that is not PENDING", `SELECT DISTINCT s.run_id FROM steps s JOIN runs r USING (run_id)
		WHERE r.state = 'QUEUED' AND s.state <> 'PENDING'`},
	{"finished_at disagrees with the state (I5)", `SELECT run_id FROM runs
		WHERE (finished_at IS NOT NULL) <> (state IN ('SUCCEEDED', 'FAILED', 'CANCELLED'))`},
	{"a terminal run has a step left", `SELECT DISTINCT s.run_id FROM steps s JOIN runs r USING (run_id)
		WHERE r.state IN ('SUCCEEDED', 'FAILED', 'CANCELLED') AND s.state IN ('PENDING', 'RUNNING')`},
	{"a RUNNING run holds no lease", `SELECT r.run_id FROM runs r WHERE r.state = 'RUNNING'
		AND NOT EXISTS (SELECT 1 FROM leases l WHERE l.run_id = r.run_id)`},
	{"a lease is not the node its role was given", `SELECT l.node_id FROM leases l
		LEFT JOIN run_roles ro ON ro.run_id = l.run_id AND ro.role = l.role AND ro.node_id = l.node_id WHERE ro.run_id IS NULL`},
	{"a lease is held under a boot that is not its node's current boot", `SELECT l.node_id FROM leases l
		JOIN nodes n USING (node_id) WHERE l.boot_id <> n.boot_id`},
	{"a run entered RUNNING twice in one attempt", `SELECT run_id FROM run_events WHERE to_state = 'RUNNING'
		AND from_state IS DISTINCT FROM 'RUNNING' GROUP BY run_id, attempt HAVING count(*) > 1`},
	{"free_nodes misses a node no lease holds", `SELECT n.node_id FROM nodes n
		WHERE NOT EXISTS (SELECT 1 FROM leases l WHERE l.node_id = n.node_id)
		  AND NOT EXISTS (SELECT 1 FROM free_nodes f WHERE f.node_id = n.node_id)`},
	{"free_nodes lists a leased or removed node", `SELECT f.node_id FROM free_nodes f
		WHERE EXISTS (SELECT 1 FROM leases l WHERE l.node_id = f.node_id)
		   OR NOT EXISTS (SELECT 1 FROM nodes n WHERE n.node_id = f.node_id)`},
	{"a run's state disagrees with its last event", `SELECT r.run_id FROM runs r JOIN LATERAL (
		SELECT to_state FROM run_events e WHERE e.run_id = r.run_id ORDER BY event_id DESC LIMIT 1) e ON true
		WHERE e.to_state <> r.state`},
	{"queue_counts disagrees with the queued runs", `SELECT coalesce(c.shape, q.shape) || ' rank ' || coalesce(c.queue_rank, q.queue_rank)
		|| ' span ' || coalesce(c.span, q.span) || ' bucket ' || coalesce(c.bucket, q.bucket)
		FROM (SELECT shape, queue_rank, span, bucket, sum(delta) AS n FROM queue_counts GROUP BY 1, 2, 3, 4) c
		FULL JOIN (SELECT shape, queue_rank, g.span, queue_bucket(created_at, g.span) AS bucket, count(*) AS n
		           FROM runs CROSS JOIN (VALUES (1), (60)) g(span) WHERE state = 'QUEUED' GROUP BY 1, 2, 3, 4) q
		USING (shape, queue_rank, span, bucket)
		WHERE coalesce(c.n, 0) <> coalesce(q.n, 0)`},
	// Since it entered its state: a node removed and registered again starts healthy, its history kept.
	{"a node's health disagrees with the last health change of its history", `SELECT n.node_id FROM nodes n
		JOIN LATERAL (SELECT to_state FROM node_history h WHERE h.node_id = n.node_id AND h.kind = 'health'
		              AND h.at >= n.health_since ORDER BY h.event_id DESC LIMIT 1) h ON true
		WHERE h.to_state <> n.health`},
	{"a node is healthy with infrastructure failures counted", `SELECT node_id FROM nodes
		WHERE health = 'healthy' AND infra_failures > 0`},
}

// Invariants returns every broken invariant, with a few of the ids that break it.
func (e *Env) Invariants() []string {
	e.T.Helper()
	var broken []string
	for _, c := range invariantChecks {
		rows, err := e.Store.Pool().Query(context.Background(), c.sql+` LIMIT 5`)
		if err != nil {
			e.T.Fatalf("invariant %q: %v", c.name, err)
		}
		var ids []string
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				e.T.Fatal(err)
			}
			ids = append(ids, id)
		}
		rows.Close()
		if len(ids) > 0 {
			broken = append(broken, fmt.Sprintf("%s: %v", c.name, ids))
		}
	}
	return broken
}

// CheckInvariants fails the test for every broken invariant.
func (e *Env) CheckInvariants() {
	e.T.Helper()
	for _, b := range e.Invariants() {
		e.T.Error(b)
	}
}
