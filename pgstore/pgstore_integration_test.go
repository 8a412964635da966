package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/fakestore"
	"github.com/writefence/writefence/internal/modeltest"
	"github.com/writefence/writefence/internal/pushbench"
	"github.com/writefence/writefence/internal/sdkserver/postgres"
	"github.com/writefence/writefence/internal/testserver"
	"github.com/writefence/writefence/internal/testserver/kit"
	"github.com/writefence/writefence/pgstore"
	"github.com/writefence/writefence/writefencetest"
)

// The integration tests run against the PostgreSQL server named by
// WRITEFENCE_POSTGRES_URL (as .ci/run starts it), each in a table
// of its own.

// kitReadLimit is the read limit the conformance run sets, so the suite
// checks ErrTooLarge without writing 64 MiB.
const kitReadLimit = 2 << 20

// newStore returns a store over a fresh table of the test's own, created
// by the store, and dropped with its sequence when the test ends.
func newStore(t *testing.T, configure func(*pgxpool.Config)) (*pgstore.Store, *pgxpool.Pool, string) {
	t.Helper()
	pool := postgres.PostgresPool(t, testserver.PostgresURL(t), configure)
	table := postgres.PostgresTable(t, pool)
	store, err := pgstore.New(pool, table)
	require.NoError(t, err)
	require.NoError(t, store.CreateTable(t.Context()))
	return store, pool, table
}

// TestMain sets rapid's flags for the model test and checks for leaked
// goroutines (modeltest.Main).
func TestMain(m *testing.M) { modeltest.Main(m) }

// TestConformance runs the exported conformance suite over one table;
// damage is an UPDATE of the data column alone, which keeps the version
// and the digest: damage in place, which the store's digest check finds.
func TestConformance(t *testing.T) {
	store, pool, table := newStore(t, nil)
	store.MaxObjectSize = kitReadLimit
	kit.Run(t, store, postgres.DamagePostgres(pool, table), kitReadLimit)
}

// TestModel runs the model (internal/modeltest) on PostgreSQL, damaged in
// place by UPDATEs of the data column that keep the version.
func TestModel(t *testing.T) {
	t.Parallel()
	modeltest.Run(t, func(t *testing.T) modeltest.Target {
		store, pool, table := newStore(t, nil)
		return modeltest.Target{Name: "postgres", Store: store, Damage: postgres.DamagePostgres(pool, table)}
	})
}

// TestConformanceSerializable runs the races of the suite on a pool whose
// transactions are SERIALIZABLE: there a losing write is refused with a
// serialization failure (SQLSTATE 40001) rather than by matching no row,
// and must still be a conflict. The suite's other checks make one call at
// a time, or one writer beside readers, where no transaction can fail to
// serialize and each statement does what it does at the default
// isolation (TestConformance): they are not run again here.
func TestConformanceSerializable(t *testing.T) {
	store, pool, table := newStore(t, func(c *pgxpool.Config) {
		c.ConnConfig.RuntimeParams["default_transaction_isolation"] = "serializable"
	})
	store.MaxObjectSize = kitReadLimit
	// Counts the conflicts that were serialization failures.
	var serialization atomic.Int64
	counted := fakestore.New(store, fakestore.Options{After: func(_ context.Context, _ fakestore.Call, err error) error {
		var pe *pgconn.PgError
		if errors.Is(err, writefence.ErrConflict) && errors.As(err, &pe) && pe.Code == "40001" {
			serialization.Add(1)
		}
		return err
	}})
	opts := kit.Options(postgres.DamagePostgres(pool, table), kitReadLimit)
	opts.Only = "^Race/"
	writefencetest.TestConditionalStore(t, func(*testing.T) writefence.ConditionalStore { return counted }, opts)
	t.Logf("serialization failures seen as conflicts: %d", serialization.Load())
}

// TestSerializationFailureIsConflict forces one serialization failure: a
// REPEATABLE READ write waits on a row another transaction updated, which
// then commits. The write is a conflict, reaching the server's 40001.
func TestSerializationFailureIsConflict(t *testing.T) {
	store, pool, table := newStore(t, func(c *pgxpool.Config) {
		c.ConnConfig.RuntimeParams["default_transaction_isolation"] = "repeatable read"
		c.ConnConfig.RuntimeParams["application_name"] = "pgstore-rr"
	})
	ctx := t.Context()
	v, err := store.PutIfVersion(ctx, "k", []byte("one"), "")
	require.NoError(t, err)

	other := postgres.PostgresPool(t, testserver.PostgresURL(t), nil)
	tx, err := other.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(context.Background())
	// A change of the row that keeps its version and digest, so that the
	// write's WHERE clause would still match it afterwards.
	_, err = tx.Exec(ctx, "UPDATE "+pgx.Identifier{table}.Sanitize()+" SET key = key WHERE key = 'k'")
	require.NoError(t, err)

	done := make(chan error, 1)
	go func() {
		_, err := store.PutIfVersion(ctx, "k", []byte("two"), v)
		done <- err
	}()
	// Wait until the write waits for the row's lock: the server's own
	// state, which changes by itself.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		var waiting int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE application_name = 'pgstore-rr' AND wait_event_type = 'Lock'`).Scan(&waiting))
		if waiting > 0 {
			break
		}
		require.False(t, time.Now().After(deadline), "the write never waited for the lock")
	}
	require.NoError(t, tx.Commit(ctx))
	err = <-done
	require.ErrorIs(t, err, writefence.ErrConflict)
	var pe *pgconn.PgError
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, "40001", pe.Code)
	data, _, err := store.Get(ctx, "k")
	require.NoError(t, err)
	assert.Equal(t, "one", string(data), "the refused write wrote nothing")
}

// TestProbe: the probe trusts PostgreSQL, and leaves no row behind.
func TestProbe(t *testing.T) {
	store, _, _ := newStore(t, nil)
	kit.Probe(t, store)
}

// TestCreateTable: New and every read or write create nothing; a missing
// table is an error naming CreateTable, never "not found"; CreateTable is
// idempotent and may run from many clients at once.
func TestCreateTable(t *testing.T) {
	pool := postgres.PostgresPool(t, testserver.PostgresURL(t), nil)
	table := postgres.PostgresTable(t, pool)
	store, err := pgstore.New(pool, table)
	require.NoError(t, err)
	ctx := t.Context()
	_, _, err = store.Get(ctx, "k")
	require.Error(t, err)
	assert.NotErrorIs(t, err, writefence.ErrNotFound)
	assert.Contains(t, err.Error(), "CreateTable")
	var pe *pgconn.PgError
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, "42P01", pe.Code)
	_, err = store.PutIfVersion(ctx, "k", []byte("x"), "")
	require.Error(t, err)
	assert.NotErrorIs(t, err, writefence.ErrConflict)
	var exists bool
	require.NoError(t, pool.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", table).Scan(&exists))
	assert.False(t, exists, "nothing was created")

	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Go(func() { errs[i] = store.CreateTable(ctx) })
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	require.NoError(t, store.CreateTable(ctx), "again")
	_, err = store.PutIfVersion(ctx, "k", []byte("x"), "")
	require.NoError(t, err)
}

// TestVersionsNeverRepeat: versions come from the sequence, so a key
// deleted and written again, and a table dropped and created again, never
// hand out a version twice.
func TestVersionsNeverRepeat(t *testing.T) {
	store, pool, table := newStore(t, nil)
	ctx := t.Context()
	seen := map[string]bool{}
	last := int64(0)
	note := func(v string) {
		t.Helper()
		require.False(t, seen[v], "version %s handed out twice", v)
		seen[v] = true
		n, err := strconv.ParseInt(v, 10, 64)
		require.NoError(t, err)
		require.Greater(t, n, last)
		last = n
	}
	for round := range 3 {
		v, err := store.PutIfVersion(ctx, "k", []byte("a"), "")
		require.NoError(t, err)
		note(v)
		v, err = store.PutIfVersion(ctx, "k", []byte("b"), v)
		require.NoError(t, err)
		note(v)
		require.NoError(t, store.Delete(ctx, "k"))
		if round == 1 {
			_, err = pool.Exec(ctx, "DROP TABLE "+pgx.Identifier{table}.Sanitize())
			require.NoError(t, err)
			require.NoError(t, store.CreateTable(ctx))
		}
	}
}

// TestRoundTrips: a steady push (the Fence conditions its write on the
// version it last wrote) is exactly one statement and no prepare; a push
// by a fresh Fence adds one SELECT of the record's head.
func TestRoundTrips(t *testing.T) {
	tracer := &statementCounter{}
	store, _, _ := newStore(t, func(c *pgxpool.Config) { c.ConnConfig.Tracer = tracer })
	ctx := t.Context()
	f := &writefence.Fence{Store: store}
	// Warm every connection's statement cache, as a long-running writer's is.
	require.NoError(t, f.Push(ctx, "wal", "0", "w", 1, make([]byte, 1024)))
	require.NoError(t, f.Push(ctx, "wal", "0", "w", 2, make([]byte, 1024)))
	const pushes = 50
	queries, prepares := tracer.counts()
	for e := uint64(3); e < 3+pushes; e++ {
		require.NoError(t, f.Push(ctx, "wal", "0", "w", e, make([]byte, 1024)))
	}
	q, p := tracer.counts()
	assert.Equal(t, 1.0, float64(q-queries)/pushes, "statements per steady push")
	assert.Equal(t, 0.0, float64(p-prepares)/pushes, "prepares per steady push")

	queries, _ = tracer.counts()
	require.NoError(t, (&writefence.Fence{Store: store}).Push(ctx, "wal", "0", "w", 100, make([]byte, 1024)))
	q, _ = tracer.counts()
	assert.EqualValues(t, 2, q-queries, "a cold push: one read, one write")
}

// TestColdPushReadsHead: over a 16 MiB record, a push by a fresh Fence
// receives from the server the record's head (at most 4 KiB of it) and
// the replies' framing, never the payload: the bytes the connections
// read are counted beneath pgx.
func TestColdPushReadsHead(t *testing.T) {
	var received atomic.Int64
	store, _, _ := newStore(t, func(c *pgxpool.Config) {
		c.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &countingConn{Conn: conn, n: &received}, nil
		}
	})
	ctx := t.Context()
	big := make([]byte, 16<<20)
	require.NoError(t, (&writefence.Fence{Store: store}).Push(ctx, "wal", "0", "w", 1, big))
	before := received.Load()
	require.NoError(t, (&writefence.Fence{Store: store}).Push(ctx, "wal", "0", "w", 2, big))
	read := received.Load() - before
	t.Logf("a cold push over a 16 MiB record received %d bytes", read)
	// 4 KiB of the record, and under 1 KiB for the row's other columns,
	// the write's reply and the protocol's framing.
	assert.LessOrEqual(t, read, int64(4<<10+1<<10), "bytes a cold push over a 16 MiB record receives")
}

// countingConn counts the bytes read from a connection into n.
type countingConn struct {
	net.Conn
	n *atomic.Int64
}

func (c *countingConn) Read(p []byte) (int, error) {
	k, err := c.Conn.Read(p)
	c.n.Add(int64(k))
	return k, err
}

// statementCounter is a pgx tracer counting the statements sent and the
// statements prepared (each prepare is a round trip of its own).
type statementCounter struct {
	queries, prepares atomic.Int64
}

func (c *statementCounter) counts() (int64, int64) { return c.queries.Load(), c.prepares.Load() }

func (c *statementCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.queries.Add(1)
	return ctx
}

func (c *statementCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (c *statementCounter) TracePrepareStart(ctx context.Context, _ *pgx.Conn, _ pgx.TracePrepareStartData) context.Context {
	c.prepares.Add(1)
	return ctx
}

func (c *statementCounter) TracePrepareEnd(context.Context, *pgx.Conn, pgx.TracePrepareEndData) {}

// roleURL creates a login role of the test's own with password, runs
// grants (SQL with %s for the role's name) as the superuser, drops the
// role when the test ends, and returns a URL that logs in as it.
func roleURL(t *testing.T, admin *pgxpool.Pool, password string, grants ...string) string {
	t.Helper()
	ctx := t.Context()
	role := "wf_role_" + strconv.FormatInt(time.Now().UnixNano(), 36)
	_, err := admin.Exec(ctx, "CREATE ROLE "+role+" LOGIN PASSWORD '"+password+"'")
	require.NoError(t, err)
	for _, g := range grants {
		_, err := admin.Exec(ctx, fmt.Sprintf(g, role))
		require.NoError(t, err)
	}
	t.Cleanup(func() {
		ctx, cancel := testserver.CleanupContext(t)
		defer cancel()
		_, _ = admin.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1", role)
		if _, err := admin.Exec(ctx, "DROP OWNED BY "+role+"; DROP ROLE "+role); err != nil {
			t.Errorf("cleanup: drop role %s: %v", role, err)
		}
	})
	u, err := url.Parse(testserver.PostgresURL(t))
	require.NoError(t, err)
	u.User = url.UserPassword(role, password)
	return u.String()
}

// TestPermission: a role without privileges on the table (42501) and a
// wrong password (28P01) are refused; every operation's error matches
// fs.ErrPermission and reaches the server's *pgconn.PgError; a Fence gives
// up at once; and no error holds the password, nor reaches pgx's
// *pgconn.ConnectError, whose configuration holds it.
func TestPermission(t *testing.T) {
	store, admin, table := newStore(t, nil)
	ctx := t.Context()
	_, err := store.PutIfVersion(ctx, "k", []byte("x"), "")
	require.NoError(t, err)

	const password = "pw-d41d8cd98f00b204"
	unprivileged := roleURL(t, admin, password)
	u, err := url.Parse(roleURL(t, admin, password))
	require.NoError(t, err)
	u.User = url.UserPassword(u.User.Username(), "wrong-"+password)

	for _, c := range []struct {
		name, url, code string
	}{{"no privilege", unprivileged, "42501"}, {"wrong password", u.String(), "28P01"}} {
		t.Run(c.name, func(t *testing.T) {
			tracer := &statementCounter{}
			pool := postgres.PostgresPool(t, c.url, func(cfg *pgxpool.Config) { cfg.ConnConfig.Tracer = tracer })
			s, err := pgstore.New(pool, table)
			require.NoError(t, err)
			check := func(op string, err error) {
				t.Helper()
				kit.Permission(t, err, "postgres "+op)
				var pe *pgconn.PgError
				require.ErrorAs(t, err, &pe, op)
				assert.Equal(t, c.code, pe.Code, op)
				var ce *pgconn.ConnectError
				assert.False(t, errors.As(err, &ce), "%s: the connection's configuration is reachable", op)
				assert.NotContains(t, err.Error(), password, op)
				t.Logf("%s: %v", op, err)
			}
			kit.EachOp(ctx, s, check)
			check("create table", s.CreateTable(ctx))

			before, _ := tracer.counts()
			err = (&writefence.Fence{Store: s}).Push(ctx, "wal", "0", "w", 1, []byte("x"))
			require.ErrorIs(t, err, fs.ErrPermission)
			after, _ := tracer.counts()
			assert.LessOrEqual(t, after-before, int64(1), "refused credentials are final: no retry")
		})
	}
	data, _, err := store.Get(ctx, "k")
	require.NoError(t, err)
	assert.Equal(t, "x", string(data), "nothing was written or deleted")
}

// TestDroppedConnection: the server ends the store's connection while its
// write waits for a row lock. The write fails with a plain error, neither
// a conflict nor "not found": its outcome is unknown to the store. A Fence
// resolves it by reading afresh, and its push lands once.
func TestDroppedConnection(t *testing.T) {
	store, pool, table := newStore(t, func(c *pgxpool.Config) {
		c.ConnConfig.RuntimeParams["application_name"] = "pgstore-dropped"
	})
	ctx := t.Context()
	f := &writefence.Fence{Store: store, RetryDelay: time.Millisecond}
	require.NoError(t, f.Push(ctx, "wal", "0", "w", 1, []byte("one")))
	key := "writefence/s/wal/0"

	other := postgres.PostgresPool(t, testserver.PostgresURL(t), nil)
	lockRow := func() pgx.Tx {
		tx, err := other.Begin(ctx)
		require.NoError(t, err)
		_, err = tx.Exec(ctx, "SELECT 1 FROM "+pgx.Identifier{table}.Sanitize()+" WHERE key = $1 FOR UPDATE", key)
		require.NoError(t, err)
		return tx
	}
	// terminate waits until the store's statement waits for the lock and
	// ends its connection.
	terminate := func() {
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			var n int
			require.NoError(t, pool.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
				WHERE application_name = 'pgstore-dropped' AND wait_event_type = 'Lock'`).Scan(&n))
			if n > 0 {
				return
			}
			require.False(t, time.Now().After(deadline), "the write never waited for the lock")
		}
	}

	_, v, err := store.Get(ctx, key)
	require.NoError(t, err)
	tx := lockRow()
	done := make(chan error, 1)
	go func() {
		_, err := store.PutIfVersion(ctx, key, []byte("not a record"), v)
		done <- err
	}()
	terminate()
	err = <-done
	require.Error(t, err)
	assert.NotErrorIs(t, err, writefence.ErrConflict)
	assert.NotErrorIs(t, err, writefence.ErrNotFound)
	assert.NotErrorIs(t, err, fs.ErrPermission)
	var se *writefence.StoreError
	require.ErrorAs(t, err, &se)
	t.Logf("dropped: %v", err)
	require.NoError(t, tx.Rollback(ctx))

	tx = lockRow()
	pushed := make(chan error, 1)
	go func() { pushed <- f.Push(ctx, "wal", "0", "w", 2, []byte("two")) }()
	terminate()
	require.NoError(t, tx.Rollback(ctx))
	require.NoError(t, <-pushed, "the Fence retried after the unknown outcome")
	epoch, _, payload, err := f.Latest(ctx, "wal", "0")
	require.NoError(t, err)
	assert.EqualValues(t, 2, epoch)
	assert.Equal(t, "two", string(payload))
}

// TestKeys: a key PostgreSQL's text cannot hold is refused before any
// I/O with an invalid-argument error; LIKE's wildcards in a List prefix
// are taken literally.
func TestKeys(t *testing.T) {
	store, _, _ := newStore(t, nil)
	ctx := t.Context()
	for _, key := range []string{"nul\x00key", "bad\xffutf8"} {
		_, err := store.PutIfVersion(ctx, key, []byte("x"), "")
		require.ErrorIs(t, err, writefence.ErrInvalidArgument, "%q", key)
		_, _, err = store.Get(ctx, key)
		require.ErrorIs(t, err, writefence.ErrInvalidArgument, "%q", key)
	}
	for _, k := range []string{"a%b/1", "axb/1", "a_c/1", "abc/1", `a\d/1`, "a\\\\d/1"} {
		_, err := store.PutIfVersion(ctx, k, []byte("x"), "")
		require.NoError(t, err)
	}
	for prefix, want := range map[string][]string{
		"a%":   {"a%b/1"},
		"a_":   {"a_c/1"},
		`a\`:   {"a\\\\d/1", `a\d/1`},
		`a\\`:  {"a\\\\d/1"},
		"ab":   {"abc/1"},
		"":     {"a%b/1", "a\\\\d/1", `a\d/1`, "a_c/1", "abc/1", "axb/1"},
		"zzz/": nil,
	} {
		var got []string
		require.NoError(t, store.List(ctx, prefix, func(k string) error { got = append(got, k); return nil }))
		assert.Equal(t, want, got, "prefix %q: in byte order", prefix)
	}
}

// TestListPages: a listing longer than one page returns every key once,
// in order, and fn may use the store while the listing runs.
func TestListPages(t *testing.T) {
	store, pool, table := newStore(t, nil)
	ctx := t.Context()
	_, err := pool.Exec(ctx, "INSERT INTO "+pgx.Identifier{table}.Sanitize()+
		` (key, version, digest, data) SELECT 'p/' || lpad(i::text, 5, '0'), i, sha256(''), '' FROM generate_series(1, 2500) i`)
	require.NoError(t, err)
	var got []string
	require.NoError(t, store.List(ctx, "p/", func(k string) error {
		got = append(got, k)
		_, _, err := store.Get(ctx, k)
		return err
	}))
	require.Len(t, got, 2500)
	for i, k := range got {
		require.Equal(t, fmt.Sprintf("p/%05d", i+1), k)
	}
}

// BenchmarkPush is pushbench.Run, the raw conditional write beside a
// steady Fence.Push; roundtrips/op counts the statements and prepares sent. Read the
// implementations side by side with benchstat.
func BenchmarkPush(b *testing.B) {
	tracer := &statementCounter{}
	pool := postgres.PostgresPool(b, testserver.PostgresURL(b), func(c *pgxpool.Config) { c.ConnConfig.Tracer = tracer })
	store, err := pgstore.New(pool, postgres.PostgresTable(b, pool))
	require.NoError(b, err)
	require.NoError(b, store.CreateTable(context.Background()))
	pushbench.Run(b, store, func() int64 { q, p := tracer.counts(); return q + p })
}
