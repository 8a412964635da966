// Package pgstore is a writefence.ConditionalStore over one PostgreSQL
// table, reached through pgx. It is a package of its own so that a program
// that does not use it does not link pgx.
//
// # Layout
//
// Each key is one row of the table:
//
//	key     text COLLATE "C" PRIMARY KEY
//	version bigint NOT NULL   -- the version token, in decimal
//	digest  bytea NOT NULL    -- SHA-256 of data
//	data    bytea NOT NULL
//
// Every write takes its version from the sequence <table>_version, so a
// version is never issued twice, not even to a key deleted and written
// again. The sequence is not owned by the table: a table dropped and
// created again goes on with the same sequence. Store.CreateTable creates
// both; the store never creates anything on its own.
//
// The conditional write is one statement, decided by the server:
//
//	INSERT ... VALUES ($1, nextval(...), ...) ON CONFLICT (key) DO NOTHING RETURNING version
//	UPDATE ... SET version = nextval(...), ... WHERE key = $1 AND version = $2 AND digest = sha256(data) RETURNING version
//
// No row returned is a conflict. Under READ COMMITTED a second UPDATE of
// the same row waits for the first to commit and then re-checks its WHERE
// clause against the new row, so of two writers conditioned on one
// version exactly one lands; under REPEATABLE READ or SERIALIZABLE the
// loser gets a serialization failure (SQLSTATE 40001), also a conflict.
//
// # Damage in place
//
// The version lives beside the bytes, so an UPDATE of data by hand, or a
// damaged page, keeps the version a Fence may remember. Every read
// therefore compares the row's digest with the SHA-256 of its data,
// computed by the server, and every write requires them to agree. A row
// that fails is reported by Get and GetPrefix as a *writefence.CorruptError
// whose Version is "damaged-<version>-<sha256 of the data as found>": it
// names exactly those bytes and no intact row. A write conditioned on any
// other version over it refuses with such an error and writes nothing; one
// conditioned on that version replaces the row if and only if it still
// holds exactly those bytes, decided in the same single statement. The
// check costs the server a SHA-256 of the row a write replaces and of
// each row a read returns, a few milliseconds per MiB; nothing of it
// travels over the network.
//
// # Failure model
//
//   - Durability across failover: a write returns once its transaction
//     committed on the server the pool reaches, as synchronous_commit and
//     replication make a commit durable. With asynchronous streaming
//     replication (PostgreSQL's default), a standby promoted after the
//     primary failed may lack the last acknowledged writes: two pushes at
//     one epoch can then both have returned nil, and the promoted
//     standby's sequence can issue again a version the lost writes
//     returned. For the fence's guarantee across failover set
//     synchronous_standby_names on the primary to the standbys a failover
//     may promote (for example 'ANY 1 (s1, s2)', or let Patroni's
//     synchronous_mode set it), keep synchronous_commit at on (the
//     default) or remote_apply for the store's sessions, never off, local
//     or remote_write, and promote only a synchronous standby. A single
//     server without failover needs fsync on and synchronous_commit not
//     off.
//   - Consistency of reads: each Get or GetPrefix is one SELECT, so its
//     bytes and version come from one row version, also under concurrent
//     writes. Give the store a pool of the primary: a hot standby serves
//     stale reads and refuses writes.
//   - Per-object limits: a bytea holds at most 1 GB; the store's read limit
//     (MaxObjectSize, 64 MiB and 4 KiB by default) is the practical bound. A
//     key must be valid UTF-8 without NUL bytes, and short enough for the
//     primary key's index (about 2,700 bytes; writefence's keys are at
//     most 1,024).
//   - What the caller must configure: the table (CreateTable, once), a role
//     that may SELECT, INSERT, UPDATE and DELETE it and use the sequence
//     (USAGE, or UPDATE, on <table>_version), and a pool in autocommit
//     mode (a *pgxpool.Pool, not a transaction). Never reset the sequence
//     (ALTER SEQUENCE ... RESTART, setval to a lower value) or restore the
//     table from a backup older than a version a Fence may hold.
//
// # Errors
//
// Every failure is a *writefence.StoreError whose Op is "postgres get",
// "postgres put", "postgres delete", "postgres list" or "postgres create
// table", and whose Err reaches pgx's error, a *pgconn.PgError for an
// answer of the server, through errors.As. A refused precondition matches
// writefence.ErrConflict, a missing key on Get writefence.ErrNotFound. A
// refused login (SQLSTATE 28P01, 28000) and a missing privilege (42501)
// match fs.ErrPermission: nothing was done, and a Fence does not retry
// them. A connection lost during a write is a plain failure: the write may
// or may not have committed, and the Fence's next read decides. A
// cancelled or expired ctx is returned as it is. No error holds the
// password: pgx's *pgconn.ConnectError, which carries the connection's
// configuration, is replaced by an error that names only the user and the
// database.
package pgstore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/defaults"
	"github.com/writefence/writefence/internal/escape"
	"github.com/writefence/writefence/internal/listing"
)

// DB is the part of pgx the store uses. *pgxpool.Pool implements it, and
// so does *pgx.Conn, which is not safe for concurrent use. Do not pass a
// pgx.Tx: a write inside a transaction is not decided until the caller
// commits it.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// DefaultTable is the table the command uses when its address names none.
const DefaultTable = "writefence"

// damagedPrefix starts the version of a damaged row. No version of an
// intact row, a decimal number, has this form.
const damagedPrefix = "damaged-"

// listPage is how many keys one statement of List returns.
const listPage = 1000

// Store is a writefence.ConditionalStore over one PostgreSQL table. It
// also implements writefence.PrefixReader (declared through
// writefence.Capable), writefence.Deleter and writefence.Lister. A Store
// is safe for concurrent use when its DB is.
type Store struct {
	// MaxObjectSize is the read limit of Get and GetPrefix in bytes; zero
	// (or less) means 64 MiB and 4 KiB, the largest payload a Fence takes
	// by default and room for its header. Set it before first use.
	MaxObjectSize int64

	db    DB
	table string // the table's name as given

	// The statements, with the table's and the sequence's names quoted.
	qGet, qPrefix, qInsert, qUpdate, qSettle, qFound, qDelete, qList string
	qCreate                                                          string
}

var (
	_ writefence.ConditionalStore = (*Store)(nil)
	_ writefence.Capable          = (*Store)(nil)
	_ writefence.PrefixReader     = (*Store)(nil)
	_ writefence.Deleter          = (*Store)(nil)
	_ writefence.Lister           = (*Store)(nil)
)

// New returns a store over table, reached through db. table is a name, or
// a schema and a name joined by a dot; each is 1 to 55 ASCII letters,
// digits or underscores, not starting with a digit (the sequence's name
// adds 8 bytes, within PostgreSQL's 63). Names are quoted, so they are
// case-sensitive. Another name is refused with an error matching
// writefence.ErrInvalidArgument. New does no I/O: the table must exist
// (see CreateTable) before the first read or write.
func New(db DB, table string) (*Store, error) {
	ident, err := parseTable(table)
	if err != nil {
		return nil, err
	}
	seqIdent := append(pgx.Identifier(nil), ident...)
	seqIdent[len(seqIdent)-1] += "_version"
	t, seq := ident.Sanitize(), seqIdent.Sanitize()
	// The sequence's name as a literal for nextval's regclass; quoted
	// identifiers inside it keep their case. Names hold no quote (see
	// parseTable), so the literal needs no escaping.
	next := "nextval('" + seq + "')"
	s := &Store{db: db, table: table}
	s.qGet = `SELECT version, digest, octet_length(data),
		CASE WHEN octet_length(data) <= $2::bigint THEN sha256(data) END,
		CASE WHEN octet_length(data) <= $2::bigint THEN data END
		FROM ` + t + ` WHERE key = $1`
	s.qPrefix = `SELECT version, digest, octet_length(data),
		CASE WHEN octet_length(data) <= $3::bigint THEN sha256(data) END,
		CASE WHEN octet_length(data) <= $3::bigint THEN substring(data FROM 1 FOR $2::integer) END
		FROM ` + t + ` WHERE key = $1`
	s.qInsert = `INSERT INTO ` + t + ` (key, version, digest, data) VALUES ($1, ` + next + `, $2, $3)
		ON CONFLICT (key) DO NOTHING RETURNING version`
	s.qUpdate = `UPDATE ` + t + ` SET version = ` + next + `, digest = $3, data = $4
		WHERE key = $1 AND version = $2 AND digest = sha256(data) RETURNING version`
	s.qSettle = `UPDATE ` + t + ` SET version = ` + next + `, digest = $4, data = $5
		WHERE key = $1 AND version = $2 AND sha256(data) = $3 AND digest <> $3 RETURNING version`
	s.qFound = `SELECT version, digest, sha256(data), substring(data FROM 1 FOR $2::integer)
		FROM ` + t + ` WHERE key = $1`
	s.qDelete = `DELETE FROM ` + t + ` WHERE key = $1`
	s.qList = `SELECT key FROM ` + t + ` WHERE key LIKE $1 ESCAPE E'\\' AND ($2::text IS NULL OR key > $2)
		ORDER BY key LIMIT ` + strconv.Itoa(listPage)
	// One transaction, serialised with any other CreateTable of the same
	// table: concurrent CREATE ... IF NOT EXISTS can otherwise fail.
	s.qCreate = `BEGIN;
		SELECT pg_advisory_xact_lock(hashtext('writefence pgstore ' || '` + t + `'));
		CREATE SEQUENCE IF NOT EXISTS ` + seq + ` AS bigint;
		CREATE TABLE IF NOT EXISTS ` + t + ` (
			key     text COLLATE "C" PRIMARY KEY,
			version bigint NOT NULL,
			digest  bytea NOT NULL,
			data    bytea NOT NULL
		);
		COMMIT;`
	return s, nil
}

// parseTable validates a table name, or schema.name, and splits it.
func parseTable(table string) (pgx.Identifier, error) {
	parts := strings.Split(table, ".")
	if len(parts) > 2 {
		return nil, invalidTable(table)
	}
	for _, p := range parts {
		if len(p) == 0 || len(p) > 55 || (p[0] >= '0' && p[0] <= '9') {
			return nil, invalidTable(table)
		}
		for i := 0; i < len(p); i++ {
			c := p[i]
			if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
				return nil, invalidTable(table)
			}
		}
	}
	return pgx.Identifier(parts), nil
}

func invalidTable(table string) error {
	return &writefence.InvalidArgumentError{Arg: "table",
		Reason: escape.String(table) + ": want a name, or schema.name, each of 1 to 55 ASCII letters, digits or underscores, not starting with a digit"}
}

// CreateTable creates the table and its sequence unless they exist, in
// one transaction. It is safe to call again, and from several processes
// at once. The role needs CREATE on the schema.
func (s *Store) CreateTable(ctx context.Context) error {
	if _, err := s.db.Exec(ctx, s.qCreate); err != nil {
		return s.fail(ctx, "create table", "", err, false)
	}
	return nil
}

// Capabilities implements writefence.Capable: the store's PrefixReader is
// its own.
func (s *Store) Capabilities() writefence.ConditionalStore { return s }

func (s *Store) limit() int64 {
	if s.MaxObjectSize > 0 {
		return s.MaxObjectSize
	}
	return defaults.MaxObjectSize
}

// row is what a read found of a key.
type row struct {
	version int64
	digest  []byte // as stored
	size    int64
	sum     []byte // the SHA-256 of data, by the server; nil when not computed
	data    []byte // all of it, or its start
}

// damaged returns, as a *writefence.StoreError of op, the
// *writefence.CorruptError of a row whose digest does not match its data,
// or nil.
func (r *row) damaged(op, key string) error {
	if bytes.Equal(r.digest, r.sum) {
		return nil
	}
	ce := &writefence.CorruptError{Key: key, Check: "postgres row digest", Version: damagedVersion(r.version, r.sum)}
	if len(r.data) > 0 {
		ce.Head = bytes.Clone(r.data)
	}
	return &writefence.StoreError{Op: "postgres " + op, Key: key, Err: ce}
}

// Get implements writefence.ConditionalStore with one SELECT: the version,
// the digest check and the bytes come from one row version. The server
// compares the data's size with the read limit first and sends no data
// for a row over it.
func (s *Store) Get(ctx context.Context, key string) ([]byte, string, error) {
	if err := checkKey("get", key); err != nil {
		return nil, "", err
	}
	limit := s.limit()
	var r row
	var sum, data []byte
	err := s.db.QueryRow(ctx, s.qGet, key, limit).Scan(&r.version, &r.digest, &r.size, &sum, &data)
	if err != nil {
		return nil, "", s.fail(ctx, "get", key, err, false)
	}
	if r.size > limit {
		return nil, "", tooLarge("get", key, limit)
	}
	r.sum, r.data = sum, data
	if err := r.damaged("get", key); err != nil {
		return nil, "", err
	}
	if data == nil {
		data = []byte{}
	}
	return data, strconv.FormatInt(r.version, 10), nil
}

// GetPrefix implements writefence.PrefixReader with one SELECT that sends
// the first bytes of data (substring) with the version and the size. The
// server hashes the whole data to check it, so damage after the prefix is
// reported as Get reports it; a row over the read limit is refused, as
// Get refuses it, without being hashed or sent.
func (s *Store) GetPrefix(ctx context.Context, key string, n int64) ([]byte, int64, string, error) {
	if n < 1 {
		return nil, 0, "", &writefence.StoreError{Op: "postgres get", Key: key,
			Err: &writefence.InvalidArgumentError{Arg: "n", Reason: fmt.Sprintf("%d, must be at least 1", n)}}
	}
	if err := checkKey("get", key); err != nil {
		return nil, 0, "", err
	}
	limit := s.limit()
	// Enough for the Head of a damaged row too.
	want := min(max(n, defaults.MaxHeaderSize), limit, 1<<30)
	var r row
	err := s.db.QueryRow(ctx, s.qPrefix, key, int32(want), limit).Scan(&r.version, &r.digest, &r.size, &r.sum, &r.data)
	if err != nil {
		return nil, 0, "", s.fail(ctx, "get", key, err, false)
	}
	if r.size > limit {
		return nil, 0, "", tooLarge("get", key, limit)
	}
	if err := r.damaged("get", key); err != nil {
		return nil, 0, "", err
	}
	prefix := r.data[:min(int64(len(r.data)), n)]
	if int64(len(prefix)) != min(n, r.size) {
		return nil, 0, "", &writefence.StoreError{Op: "postgres get", Key: key,
			Err: fmt.Errorf("read %d bytes of the first %d of a %d-byte row", len(prefix), min(n, r.size), r.size)}
	}
	return append([]byte{}, prefix...), r.size, strconv.FormatInt(r.version, 10), nil
}

// PutIfVersion implements writefence.ConditionalStore with one statement:
// INSERT ... ON CONFLICT DO NOTHING when expectVersion is empty, UPDATE
// ... WHERE version = expectVersion otherwise (see the package
// documentation), either returning the new version. No row returned, or a
// serialization failure, is a conflict; a token of a form the store never
// issues is one too, and nothing is sent. When the write is refused the
// store reads the row once more to tell damage from a conflict.
func (s *Store) PutIfVersion(ctx context.Context, key string, data []byte, expectVersion string) (string, error) {
	if err := checkKey("put", key); err != nil {
		return "", err
	}
	if data == nil {
		data = []byte{} // NULL would break the NOT NULL constraint
	}
	sum := sha256.Sum256(data)
	var q string
	var args []any
	switch {
	case expectVersion == "":
		q, args = s.qInsert, []any{key, sum[:], data}
	case strings.HasPrefix(expectVersion, damagedPrefix):
		v, found, ok := parseDamaged(expectVersion)
		if !ok {
			return "", badToken(key, expectVersion)
		}
		q, args = s.qSettle, []any{key, v, found, sum[:], data}
	default:
		v, ok := parseVersion(expectVersion)
		if !ok {
			return "", badToken(key, expectVersion)
		}
		q, args = s.qUpdate, []any{key, v, sum[:], data}
	}
	var version int64
	err := s.db.QueryRow(ctx, q, args...).Scan(&version)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return "", s.refused(ctx, key, expectVersion)
	case err != nil:
		return "", s.fail(ctx, "put", key, err, true)
	}
	return strconv.FormatInt(version, 10), nil
}

// refused tells why a write of key conditioned on expectVersion matched
// no row: damage the write would have replaced unseen, or a conflict.
func (s *Store) refused(ctx context.Context, key, expectVersion string) error {
	conflict := &writefence.StoreError{Op: "postgres put", Key: key, Err: writefence.ErrConflict}
	var r row
	err := s.db.QueryRow(ctx, s.qFound, key, int32(defaults.MaxHeaderSize)).Scan(&r.version, &r.digest, &r.sum, &r.data)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return conflict
	case err != nil:
		// The write was refused; what the row holds now is unknown.
		return &writefence.StoreError{Op: "postgres put", Key: key,
			Err: fmt.Errorf("%w; then, reading the row: %w", writefence.ErrConflict, s.cause(err))}
	}
	ce := r.damaged("put", key)
	var c *writefence.CorruptError
	if errors.As(ce, &c) && c.Version != expectVersion {
		return ce
	}
	// Intact, or the very damage expected, which changed and came back
	// between the two statements: either way a conflict.
	return conflict
}

// Delete implements writefence.Deleter. A key that does not exist is not
// an error.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := checkKey("delete", key); err != nil {
		return err
	}
	if _, err := s.db.Exec(ctx, s.qDelete, key); err != nil {
		return s.fail(ctx, "delete", key, err, false)
	}
	return nil
}

// List implements writefence.Lister with SELECTs of at most 1000 keys
// each, under prefix (LIKE, with %, _ and \ in it escaped), in byte order,
// each page after the last key of the one before. fn is called between
// statements, never while one holds a connection, so it may use the store.
func (s *Store) List(ctx context.Context, prefix string, fn func(key string) error) error {
	if err := checkKey("list", prefix); err != nil {
		return err
	}
	pattern := likeEscaper.Replace(prefix) + "%"
	var after *string
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		rows, err := s.db.Query(ctx, s.qList, pattern, after)
		if err != nil {
			return s.fail(ctx, "list", prefix, err, false)
		}
		keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return s.fail(ctx, "list", prefix, err, false)
		}
		if err := listing.Each(ctx, keys, fn); err != nil {
			return err
		}
		if len(keys) < listPage {
			return ctx.Err()
		}
		after = &keys[len(keys)-1]
	}
}

var likeEscaper = strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`)

// checkKey refuses a key PostgreSQL's text cannot hold: invalid UTF-8, or
// a NUL byte.
func checkKey(op, key string) error {
	if utf8.ValidString(key) && !strings.ContainsRune(key, 0) {
		return nil
	}
	return &writefence.StoreError{Op: "postgres " + op, Key: key,
		Err: &writefence.InvalidArgumentError{Arg: "key", Reason: "postgres text holds only valid UTF-8 without NUL bytes"}}
}

// parseVersion returns the row version a token names; false for a token
// of no form the store issues (the canonical decimal of a positive int64).
func parseVersion(v string) (int64, bool) {
	n, err := strconv.ParseInt(v, 10, 64)
	return n, err == nil && n > 0 && strconv.FormatInt(n, 10) == v
}

// damagedVersion is the version of a damaged row: its version column and
// the SHA-256 of its data as found.
func damagedVersion(version int64, sum []byte) string {
	return damagedPrefix + strconv.FormatInt(version, 10) + "-" + hex.EncodeToString(sum)
}

// parseDamaged splits a damaged version into the row's version and the
// SHA-256 of its data.
func parseDamaged(v string) (int64, []byte, bool) {
	rest, ok := strings.CutPrefix(v, damagedPrefix)
	if !ok {
		return 0, nil, false
	}
	ver, h, ok := strings.Cut(rest, "-")
	n, okv := parseVersion(ver)
	sum, err := hex.DecodeString(h)
	if !ok || !okv || err != nil || len(sum) != sha256.Size || hex.EncodeToString(sum) != h {
		return 0, nil, false
	}
	return n, sum, true
}

func badToken(key, v string) error {
	return &writefence.StoreError{Op: "postgres put", Key: key,
		Err: fmt.Errorf("%w: %s is not a version of this store", writefence.ErrConflict, escape.String(v))}
}

func tooLarge(op, key string, limit int64) error {
	return &writefence.StoreError{Op: "postgres " + op, Key: key,
		Err: fmt.Errorf("%w: more than %d bytes", writefence.ErrTooLarge, limit)}
}

// SQLSTATE codes the store classifies.
const (
	codeSerializationFailure = "40001"
	codeInsufficientPriv     = "42501"
	codeInvalidPassword      = "28P01"
	codeInvalidAuthorization = "28000"
	codeUndefinedTable       = "42P01"
)

// fail wraps an error of pgx in a *writefence.StoreError. A missing row is
// ErrNotFound; for a write (put), a serialization failure is ErrConflict;
// a refused login or privilege is fs.ErrPermission. A done ctx is returned
// as it is.
func (s *Store) fail(ctx context.Context, op, key string, err error, put bool) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return ctxErr
	}
	var sentinel error
	var pe *pgconn.PgError
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		sentinel = writefence.ErrNotFound
	case errors.As(err, &pe):
		switch pe.Code {
		case codeSerializationFailure:
			if put {
				sentinel = writefence.ErrConflict
			}
		case codeInsufficientPriv, codeInvalidPassword, codeInvalidAuthorization:
			sentinel = fs.ErrPermission
		}
	}
	cause := s.cause(err)
	if sentinel == writefence.ErrNotFound {
		cause = sentinel
	} else if sentinel != nil {
		cause = fmt.Errorf("%w: %w", sentinel, cause)
	}
	return &writefence.StoreError{Op: "postgres " + op, Key: key, Err: cause}
}

// cause is err as a StoreError carries it: pgx's *pgconn.ConnectError,
// which holds the connection's configuration and so its password, is
// replaced by what it says and what it wraps, and a missing table names
// CreateTable.
func (s *Store) cause(err error) error {
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		user, db := "", ""
		if ce.Config != nil {
			user, db = ce.Config.User, ce.Config.Database
		}
		err = &connectError{user: user, database: db, err: errors.Unwrap(ce)}
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == codeUndefinedTable {
		err = fmt.Errorf("table %s (Store.CreateTable creates it): %w", escape.String(s.table), err)
	}
	return err
}

// connectError is a failed connection, without the configuration that
// pgconn.ConnectError keeps.
type connectError struct {
	user, database string
	err            error
}

func (e *connectError) Error() string {
	return fmt.Sprintf("failed to connect to user=%s database=%s: %v", escape.String(e.user), escape.String(e.database), e.err)
}

func (e *connectError) Unwrap() error { return e.err }
