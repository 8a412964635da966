//go:build !writefence_nopostgres && !writefence_nosdk

package main

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/writefence/writefence/internal/escape"
)

// pgSettings is the part of a connection pool doctor reads the server's
// settings through.
type pgSettings interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// postgresAuditor reads, in a session of the store's own pool (so with
// the role's, the database's and the address's settings), fsync,
// synchronous_commit and the standbys that stream from the server.
func postgresAuditor(db pgSettings) auditor {
	return func(ctx context.Context, a *audit) {
		var fsync, syncCommit, standbyNames string
		var inRecovery bool
		err := db.QueryRow(ctx, `SELECT current_setting('fsync'), current_setting('synchronous_commit'),
			current_setting('synchronous_standby_names'), pg_is_in_recovery()`).Scan(&fsync, &syncCommit, &standbyNames, &inRecovery)
		if err != nil {
			for _, check := range []string{"postgres.fsync", "postgres.synchronous_commit", "postgres.replication"} {
				a.unknown(check, err, "check that the role may connect and run SELECT current_setting(...)")
			}
			return
		}
		if fsync == "off" {
			a.add(finding{Check: "postgres.fsync", Level: levelRisk, Found: "fsync is off",
				Consequence: "a crash of the host can lose or corrupt commits the server acknowledged: records roll back or break",
				Fix:         "ALTER SYSTEM SET fsync = on; SELECT pg_reload_conf();"})
		} else {
			a.ok("postgres.fsync", "fsync is on")
		}

		if inRecovery {
			a.add(finding{Check: "postgres.replication", Level: levelWarn, Found: "the server is a standby, in recovery",
				Consequence: "it refuses writes: every push fails", Fix: "point the store address at the primary"})
			pgSyncCommit(a, syncCommit, 0)
			return
		}
		standbys, synchronous, err := pgStandbys(ctx, db)
		switch {
		case err != nil:
			a.unknown("postgres.replication", err, "grant the role pg_read_all_stats (or pg_monitor), so it can see the standbys' state in pg_stat_replication")
		case standbys == 0:
			a.ok("postgres.replication", "no standby streams from this server: no failover can lose a push")
		case synchronous == 0:
			a.add(finding{Check: "postgres.replication", Level: levelRisk,
				Found:       fmt.Sprintf("%s stream from this server and none is synchronous (synchronous_standby_names %s)", plural(standbys, "standby"), pgQuote(standbyNames)),
				Consequence: "the server acknowledges a commit before any standby has it: a failover to a standby that had not received a push loses it, and a deposed writer's epoch can land again",
				Fix:         "name the standbys in synchronous_standby_names, e.g. ALTER SYSTEM SET synchronous_standby_names = 'ANY 1 (standby1, standby2)'; SELECT pg_reload_conf(); and keep synchronous_commit on"})
		default:
			a.ok("postgres.replication", fmt.Sprintf("%s stream from this server, %d synchronous", plural(standbys, "standby"), synchronous))
		}
		pgSyncCommit(a, syncCommit, synchronous)
	}
}

// pgSyncCommit judges synchronous_commit, given how many synchronous
// standbys there are.
func pgSyncCommit(a *audit, value string, synchronous int) {
	const check = "postgres.synchronous_commit"
	fix := "ALTER SYSTEM SET synchronous_commit = on; SELECT pg_reload_conf(); and remove any ALTER ROLE or ALTER DATABASE ... SET synchronous_commit, and any options=-c synchronous_commit=... in the store address"
	switch {
	case value == "off":
		a.add(finding{Check: check, Level: levelRisk, Found: "synchronous_commit is off in the store's sessions",
			Consequence: "the server acknowledges a commit before it is on disk: a crash loses the last acknowledged pushes, and a record rolls back",
			Fix:         fix})
	case value == "local" && synchronous > 0:
		a.add(finding{Check: check, Level: levelRisk, Found: "synchronous_commit is local in the store's sessions, beside synchronous standbys",
			Consequence: "a commit does not wait for the synchronous standby: a failover to it can lose an acknowledged push",
			Fix:         fix})
	default:
		a.ok(check, "synchronous_commit is "+pgQuote(value)+" in the store's sessions")
	}
}

// pgStandbys counts the standbys streaming from the server, and the
// synchronous ones among them. A role without pg_read_all_stats sees the
// rows but not their state: that is an error.
func pgStandbys(ctx context.Context, db pgSettings) (standbys, synchronous int, err error) {
	rows, err := db.Query(ctx, `SELECT sync_state FROM pg_stat_replication`)
	if err != nil {
		return 0, 0, err
	}
	defer rows.Close()
	for rows.Next() {
		var state *string
		if err := rows.Scan(&state); err != nil {
			return 0, 0, err
		}
		if state == nil {
			return 0, 0, fmt.Errorf("writefence: pg_stat_replication hides the standbys' sync_state from this role")
		}
		standbys++
		if *state == "sync" || *state == "quorum" {
			synchronous++
		}
	}
	return standbys, synchronous, rows.Err()
}

func pgQuote(s string) string { return "'" + escape.String(s) + "'" }
