package pgstore_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/testserver/kit"
	"github.com/writefence/writefence/pgstore"
)

// The unit tests run the store over a fake pgstore.DB that records every
// statement and answers from a script.

// statement is one statement the store sent.
type statement struct {
	sql  string
	args []any
}

// fakeDB answers the n-th statement (from 0) with rows[n]: the values of
// one row, or an error (pgx.ErrNoRows for none).
type fakeDB struct {
	sent    []statement
	answers []answer
}

type answer struct {
	values []any
	err    error
}

func (f *fakeDB) next(sql string, args []any) answer {
	f.sent = append(f.sent, statement{sql, args})
	if len(f.sent) > len(f.answers) {
		return answer{err: errors.New("fakeDB: no answer scripted")}
	}
	return f.answers[len(f.sent)-1]
}

func (f *fakeDB) Exec(_ context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	return pgconn.CommandTag{}, f.next(sql, args).err
}

func (f *fakeDB) Query(context.Context, string, ...any) (pgx.Rows, error) {
	return nil, errors.New("fakeDB: Query is not scripted")
}

func (f *fakeDB) QueryRow(_ context.Context, sql string, args ...any) pgx.Row {
	return fakeRow(f.next(sql, args))
}

type fakeRow answer

func (r fakeRow) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	if len(dest) != len(r.values) {
		return fmt.Errorf("fakeRow: %d destinations for %d values", len(dest), len(r.values))
	}
	for i, d := range dest {
		switch d := d.(type) {
		case *int64:
			*d = r.values[i].(int64)
		case *[]byte:
			v, _ := r.values[i].([]byte)
			*d = v
		default:
			return fmt.Errorf("fakeRow: cannot scan into %T", d)
		}
	}
	return nil
}

func newFake(t *testing.T, answers ...answer) (*pgstore.Store, *fakeDB) {
	t.Helper()
	db := &fakeDB{answers: answers}
	s, err := pgstore.New(db, "mirrors")
	require.NoError(t, err)
	return s, db
}

func digest(b string) []byte {
	s := sha256.Sum256([]byte(b))
	return s[:]
}

// oneLine collapses a statement's white space, to compare it.
func oneLine(sql string) string { return strings.Join(strings.Fields(sql), " ") }

// TestTableNames: a table is a name or schema.name of letters, digits and
// underscores; anything else is refused before any I/O, and names are
// quoted in every statement.
func TestTableNames(t *testing.T) {
	for _, bad := range []string{"", ".", "a.", ".a", "a.b.c", "1abc", "a-b", `a"b`, "a b", "a;drop", "t\x00", strings.Repeat("x", 56), "ü"} {
		_, err := pgstore.New(&fakeDB{}, bad)
		require.ErrorIs(t, err, writefence.ErrInvalidArgument, "%q", bad)
	}
	for name, quoted := range map[string]string{
		"writefence":  `"writefence"`,
		"Mirrors":     `"Mirrors"`,
		"ops.mirrors": `"ops"."mirrors"`,
		"_x9":         `"_x9"`,
	} {
		db := &fakeDB{answers: []answer{{values: []any{int64(7)}}}}
		s, err := pgstore.New(db, name)
		require.NoError(t, err, name)
		_, err = s.PutIfVersion(t.Context(), "k", []byte("x"), "")
		require.NoError(t, err)
		assert.Contains(t, db.sent[0].sql, "INSERT INTO "+quoted+" ", name)
		seq := strings.TrimSuffix(quoted, `"`) + `_version"`
		assert.Contains(t, db.sent[0].sql, "nextval('"+seq+"')", name)
	}
}

// TestConditionalWriteIsOneStatement: a create-only write and an update
// are each one statement whose own WHERE clause (or ON CONFLICT) decides,
// with the version drawn from the sequence; no row is a conflict.
func TestConditionalWriteIsOneStatement(t *testing.T) {
	s, db := newFake(t, answer{values: []any{int64(41)}}, answer{values: []any{int64(42)}})
	v, err := s.PutIfVersion(t.Context(), "k", []byte("one"), "")
	require.NoError(t, err)
	assert.Equal(t, "41", v)
	v, err = s.PutIfVersion(t.Context(), "k", []byte("two"), v)
	require.NoError(t, err)
	assert.Equal(t, "42", v)
	require.Len(t, db.sent, 2)
	assert.Equal(t, `INSERT INTO "mirrors" (key, version, digest, data) VALUES ($1, nextval('"mirrors_version"'), $2, $3) ON CONFLICT (key) DO NOTHING RETURNING version`,
		oneLine(db.sent[0].sql))
	assert.Equal(t, []any{"k", digest("one"), []byte("one")}, db.sent[0].args)
	assert.Equal(t, `UPDATE "mirrors" SET version = nextval('"mirrors_version"'), digest = $3, data = $4 WHERE key = $1 AND version = $2 AND digest = sha256(data) RETURNING version`,
		oneLine(db.sent[1].sql))
	assert.Equal(t, []any{"k", int64(41), digest("two"), []byte("two")}, db.sent[1].args)
}

// TestMalformedTokens: a version of no form the store issues cannot equal
// the current one: a conflict, and nothing is sent.
func TestMalformedTokens(t *testing.T) {
	h := hex.EncodeToString(digest("x"))
	for _, tok := range []string{"0", "-1", "01", "+1", "1.5", " 1", "1 ", "abc", "9223372036854775808",
		"damaged-", "damaged-1", "damaged-1-", "damaged-0-" + h, "damaged-01-" + h, "damaged-1-" + strings.ToUpper(h), "damaged-1-" + h[2:], "damaged-1-" + h + "-"} {
		s, db := newFake(t)
		_, err := s.PutIfVersion(t.Context(), "k", []byte("x"), tok)
		require.ErrorIs(t, err, writefence.ErrConflict, "%q", tok)
		assert.Empty(t, db.sent, "%q", tok)
	}
}

// TestRefused: when a write matches no row the store reads the row once
// to tell damage from a conflict.
func TestRefused(t *testing.T) {
	head := strings.Repeat("h", 5000)
	for _, c := range []struct {
		name    string
		found   answer
		corrupt bool
	}{
		{"intact", answer{values: []any{int64(9), digest(head), digest(head), []byte(head[:4096])}}, false},
		{"gone", answer{err: pgx.ErrNoRows}, false},
		{"damaged", answer{values: []any{int64(9), digest("other"), digest(head), []byte(head[:4096])}}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, db := newFake(t, answer{err: pgx.ErrNoRows}, c.found)
			_, err := s.PutIfVersion(t.Context(), "k", []byte("x"), "8")
			require.Len(t, db.sent, 2)
			assert.True(t, strings.HasPrefix(oneLine(db.sent[1].sql), "SELECT version, digest, sha256(data), substring(data FROM 1 FOR $2::integer) FROM"))
			var ce *writefence.CorruptError
			if !c.corrupt {
				require.ErrorIs(t, err, writefence.ErrConflict)
				assert.False(t, errors.As(err, &ce))
				return
			}
			require.ErrorAs(t, err, &ce)
			assert.NotErrorIs(t, err, writefence.ErrConflict)
			assert.Equal(t, "damaged-9-"+hex.EncodeToString(digest(head)), ce.Version)
			assert.Equal(t, head[:4096], string(ce.Head))
			assert.Equal(t, "k", ce.Key)
		})
	}
}

// TestSettleStatement: a write conditioned on a damaged version replaces
// the row only while it holds exactly those damaged bytes.
func TestSettleStatement(t *testing.T) {
	h := digest("damaged bytes")
	s, db := newFake(t, answer{values: []any{int64(12)}})
	v, err := s.PutIfVersion(t.Context(), "k", []byte("new"), "damaged-11-"+hex.EncodeToString(h))
	require.NoError(t, err)
	assert.Equal(t, "12", v)
	assert.Contains(t, oneLine(db.sent[0].sql), "WHERE key = $1 AND version = $2 AND sha256(data) = $3 AND digest <> $3 RETURNING version")
	assert.Equal(t, []any{"k", int64(11), h, digest("new"), []byte("new")}, db.sent[0].args)
}

// TestGet: one statement; an intact row's bytes and version, a damaged
// row's *writefence.CorruptError, a row over the limit refused before its
// data is sent (the server leaves it NULL).
func TestGet(t *testing.T) {
	s, db := newFake(t,
		answer{values: []any{int64(5), digest("abc"), int64(3), digest("abc"), []byte("abc")}},
		answer{values: []any{int64(6), digest("abc"), int64(3), digest("abd"), []byte("abd")}},
		answer{values: []any{int64(7), digest("big"), int64(101), nil, nil}},
		answer{err: pgx.ErrNoRows},
	)
	s.MaxObjectSize = 100
	data, v, err := s.Get(t.Context(), "k")
	require.NoError(t, err)
	assert.Equal(t, "abc", string(data))
	assert.Equal(t, "5", v)
	assert.Equal(t, []any{"k", int64(100)}, db.sent[0].args)

	_, _, err = s.Get(t.Context(), "k")
	var ce *writefence.CorruptError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, "damaged-6-"+hex.EncodeToString(digest("abd")), ce.Version)
	assert.Equal(t, "abd", string(ce.Head))

	_, _, err = s.Get(t.Context(), "k")
	require.ErrorIs(t, err, writefence.ErrTooLarge)

	_, _, err = s.Get(t.Context(), "k")
	require.ErrorIs(t, err, writefence.ErrNotFound)
	var se *writefence.StoreError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, "postgres get", se.Op)
	assert.Equal(t, "k", se.Key)
	assert.Len(t, db.sent, 4, "one statement per read")
}

// TestClassification: each SQLSTATE maps to one sentinel, or none, with
// the server's error reachable.
func TestClassification(t *testing.T) {
	for _, c := range []struct {
		op, code string
		want     error
	}{
		{"update", "40001", writefence.ErrConflict},
		{"get", "40001", nil},
		{"update", "42501", fs.ErrPermission},
		{"get", "42501", fs.ErrPermission},
		{"delete", "42501", fs.ErrPermission},
		{"get", "28P01", fs.ErrPermission},
		{"update", "28000", fs.ErrPermission},
		{"update", "57P01", nil}, // admin shutdown: the outcome is unknown
		{"update", "40P01", nil},
		{"get", "42P01", nil},
		{"update", "23505", nil},
	} {
		t.Run(c.op+"/"+c.code, func(t *testing.T) {
			pe := &pgconn.PgError{Code: c.code, Message: "scripted"}
			s, _ := newFake(t, answer{err: pe})
			err := kit.Call(t.Context(), s, c.op, "3")
			require.Error(t, err)
			kit.Sentinels(t, err, c.want, err.Error())
			var got *pgconn.PgError
			require.ErrorAs(t, err, &got)
			assert.Same(t, pe, got)
		})
	}
}

// TestCanceled: a done ctx is returned as it is.
func TestCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	s, _ := newFake(t, answer{err: errors.New("conn closed")})
	_, err := s.PutIfVersion(ctx, "k", []byte("x"), "3")
	assert.Equal(t, context.Canceled, err)
}
