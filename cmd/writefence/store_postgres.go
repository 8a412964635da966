//go:build !writefence_nopostgres && !writefence_nosdk

package main

import (
	"context"
	"errors"
	"net"
	"net/url"
	"strconv"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/writefence/writefence/internal/escape"
	"github.com/writefence/writefence/internal/keys"
	"github.com/writefence/writefence/pgstore"
)

func init() {
	for _, scheme := range []string{"postgres", "postgresql"} {
		openers[scheme] = openPostgres
		readOpeners[scheme] = openPostgresRead
		userInAddress[scheme] = true
	}
	advisers = append(advisers, advisePostgres)
}

// openPostgres opens postgres://[user@]host[:port]/db[?table=T&create=true&...],
// a table (default pgstore.DefaultTable) on a PostgreSQL server. Every other
// parameter is pgx's (sslmode, connect_timeout, pool_max_conns...), and so
// is the environment: PGPASSWORD, PGPASSFILE (~/.pgpass), PGUSER, PGHOST,
// PGSSLMODE and the others libpq reads. A password in the address is
// refused, as every store's credentials are. With create=true a command
// that writes first creates the table and its sequence if they do not
// exist; nothing else creates them.
func openPostgres(ctx context.Context, u *url.URL) (*opened, error) {
	return openPostgresMode(ctx, u, false)
}

// openPostgresRead opens the table for a command that only reads: it never
// creates it, create=true or not.
func openPostgresRead(ctx context.Context, u *url.URL) (*opened, error) {
	return openPostgresMode(ctx, u, true)
}

func openPostgresMode(ctx context.Context, u *url.URL, readOnly bool) (*opened, error) {
	q := u.Query()
	if q.Has("password") {
		return nil, usagef("writefence: store address: credentials are not accepted in the address; set PGPASSWORD or use ~/.pgpass (writefence help stores)")
	}
	table := q.Get("table")
	if table == "" {
		table = pgstore.DefaultTable
	}
	create, err := boolParam(q, "create", false)
	if err != nil {
		return nil, err
	}
	q.Del("table")
	q.Del("create")
	c := *u
	c.RawQuery = q.Encode()
	cfg, err := pgxpool.ParseConfig(c.String())
	if err != nil {
		// pgx's message names the parameter; it cannot hold a password,
		// which was refused above.
		return nil, usagef("writefence: store address: %s", escape.String(err.Error()))
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, errors.New("writefence: postgres pool: " + err.Error())
	}
	s, err := pgstore.New(pool, table)
	if err != nil {
		pool.Close()
		return nil, usagef("writefence: store address: %s", err.Error())
	}
	if create && !readOnly {
		if err := s.CreateTable(ctx); err != nil {
			pool.Close()
			return nil, err
		}
	}
	addr := u.String()
	hostport := net.JoinHostPort(cfg.ConnConfig.Host, strconv.Itoa(int(cfg.ConnConfig.Port)))
	return &opened{
		store: s,
		close: func() error { pool.Close(); return nil },
		audit: postgresAuditor(pool),
		ready: func(ctx context.Context) error {
			// One read of a key tells whether the server answers, the login
			// is accepted and the table exists, as every command's first
			// request would, but with nothing retried.
			_, _, err := s.Get(ctx, keys.Brand(""))
			var pe *pgconn.PgError
			switch {
			case ctx.Err() != nil:
				return ctx.Err()
			case errors.As(err, &pe) && pe.Code == "42P01":
				return &missingError{addr: addr, what: "table", name: table}
			case errors.Is(err, syscall.ECONNREFUSED):
				return &unreachableError{addr: addr, hostport: hostport, err: err}
			}
			return nil
		},
		create: s.CreateTable,
	}, nil
}

// advisePostgres says what to do about a refused login, a missing
// privilege or a missing table.
func advisePostgres(err error, _ *invocation) error {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return nil
	}
	switch pe.Code {
	case "28P01", "28000":
		return &advisedError{err, "PostgreSQL refused the login; the command read " +
			envList("PGUSER", "PGPASSWORD", "PGPASSFILE") + " and ~/.pgpass: export the role's password, or name the role in the address (postgres://role@host/db)"}
	case "42501":
		return &advisedError{err, "the role lacks a privilege: grant it SELECT, INSERT, UPDATE and DELETE on the table and USAGE on its sequence <table>_version (and CREATE on the schema, for create=true)"}
	case "42P01":
		return &advisedError{err, "the table does not exist: create it once with writefence init -store ADDRESS (or -create on a command that writes)"}
	}
	return nil
}
