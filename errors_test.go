package writefence_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/fakestore"
	"github.com/writefence/writefence/internal/keys"
)

// hostileStore holds records whose bytes an attacker chose and answers
// with version tokens it chose too.
type hostileStore struct {
	data    map[string][]byte
	version string
}

func (s *hostileStore) Get(_ context.Context, key string) ([]byte, string, error) {
	d, ok := s.data[key]
	if !ok {
		return nil, "", writefence.ErrNotFound
	}
	return d, s.version, nil
}

func (s *hostileStore) PutIfVersion(_ context.Context, key string, data []byte, _ string) (string, error) {
	s.data[key] = data
	return s.version, nil
}

// TestStoredBytesAreEscaped: a writer name, an identity, a version token or
// a brand holding newlines and terminal escapes surfaces escaped in every
// error that prints it, so it cannot forge a log line or recolour a
// terminal.
func TestStoredBytesAreEscaped(t *testing.T) {
	const hostile = "evil\nwritefence: push landed\x1b[2K\x1b[31m\r\x00\u202e"
	ctx := t.Context()
	mem := &writefence.MemStore{}
	require.NoError(t, (&writefence.Fence{Store: mem}).Push(ctx, "wal", "0", hostile, 5, []byte("x")))
	require.NoError(t, (&writefence.Fence{Store: mem, Identity: hostile}).Push(ctx, "wal", "1", "w", 5, []byte("x")))
	_, err := mem.PutIfVersion(ctx, keys.Brand(""), []byte(hostile), "")
	require.NoError(t, err)
	corrupt := &hostileStore{data: map[string][]byte{mustKey(t, "wal", "0"): []byte("WFR\x00garbage")}, version: hostile}

	cases := []struct {
		name string
		err  error
		as   any
	}{
		{"stale epoch names the recorded writer", (&writefence.Fence{Store: mem}).Push(ctx, "wal", "0", "w", 5, []byte("y")), new(*writefence.StaleEpochError)},
		{"wire error names the found identity", (&writefence.Fence{Store: mem}).Push(ctx, "wal", "1", "w", 6, []byte("y")), new(*writefence.WireError)},
		{"brand names the found value", (&writefence.Fence{Store: mem}).VerifyBrand(ctx), new(*writefence.WireError)},
		{"corrupt names the version", (&writefence.Fence{Store: corrupt}).Push(ctx, "wal", "0", "w", 6, []byte("y")), new(*writefence.CorruptError)},
		{"probe names the version", writefence.Probe(ctx, &hostileStore{data: map[string][]byte{}, version: hostile}, "p"), new(*writefence.ProbeError)},
		{"key with hostile bytes", writefence.Probe(ctx, &hostileStore{data: map[string][]byte{}, version: "1"}, hostile), new(*writefence.ProbeError)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			require.Error(t, tc.err)
			require.ErrorAs(t, tc.err, tc.as)
			for _, s := range []string{tc.err.Error(), fmt.Sprintf("%+v", tc.err)} {
				for _, b := range []string{"\n", "\r", "\x1b", "\x00", "\u202e"} {
					assert.NotContains(t, s, b, "unescaped %q in %q", b, s)
				}
				assert.Contains(t, s, `evil\nwritefence: push landed\x1b[2K\x1b[31m\r\x00\u202e`, "the value is shown, escaped")
			}
			t.Log(tc.err)
		})
	}
	assert.True(t, errors.Is(cases[0].err, writefence.ErrStaleEpoch))
}

func TestEpochRegressedErrorMessage(t *testing.T) {
	for _, tt := range []struct {
		err  writefence.EpochRegressedError
		want string
	}{
		{writefence.EpochRegressedError{Op: "push", Key: "k", Epoch: 9, Seen: 7, SeenWriter: "a", Found: 5, FoundWriter: "b"},
			"writefence: epoch regressed: push at epoch 9 to k refused: saw epoch 7 by a, found epoch 5 by b"},
		{writefence.EpochRegressedError{Op: "seal", Key: "k", Epoch: 9, Seen: 7, SeenWriter: "a", Absent: true},
			"writefence: epoch regressed: seal at epoch 9 to k refused: saw epoch 7 by a, found no record"},
		{writefence.EpochRegressedError{Op: "push", Key: "k", Epoch: 9, Seen: 7, SeenWriter: "a", Floor: true, Absent: true},
			"writefence: epoch regressed: push at epoch 9 to k refused: the shard's floor holds epoch 7 by a, found no record"},
		{writefence.EpochRegressedError{Op: "collect", Key: "k", Seen: 7, SeenWriter: "a", Found: 5, FoundWriter: "b"},
			"writefence: epoch regressed: collect of k refused: saw epoch 7 by a, found epoch 5 by b"},
		{writefence.EpochRegressedError{Op: "lease acquire", Key: "k", Seen: 3, SeenWriter: "h", Found: 1, FoundWriter: "h\n2"},
			`writefence: epoch regressed: lease acquire of k refused: saw term 3 by h, found term 1 by h\n2`},
		{writefence.EpochRegressedError{Op: "settle", Key: "k", Epoch: 6, Seen: 7, SeenWriter: "a"},
			"writefence: epoch regressed: settle at epoch 6 to k refused: saw epoch 7 by a, found a record whose epoch cannot be read"},
	} {
		assert.Equal(t, tt.want, tt.err.Error())
		assert.ErrorIs(t, &tt.err, writefence.ErrEpochRegressed)
	}
}

// TestStoreErrorPrefixedOnce: a store's error that ends a call reads
// "writefence: " once, at its start, whatever wraps it on its way (a
// push's or a lease's attempts, an inspect, a blob, a collection's
// listing or its clock), and still matches the store's error.
func TestStoreErrorPrefixedOnce(t *testing.T) {
	ctx := context.Background()
	failure := &writefence.StoreError{Op: "s3 get", Key: "k", Err: errors.New("The specified bucket does not exist")}
	for _, op := range []fakestore.Op{fakestore.Get, fakestore.CreateBlob, fakestore.ListBlobsConsistent, fakestore.ListBlobs} {
		s := fakestore.New(&writefence.MemStore{}, fakestore.Options{Before: func(_ context.Context, c fakestore.Call) error {
			if c.Op == op {
				return failure
			}
			return nil
		}})
		f := &writefence.Fence{Store: s, MaxAttempts: 2}
		if op != fakestore.Get {
			require.NoError(t, f.Push(ctx, "wal", "0", "a", 1, []byte("manifest")))
		}
		calls := map[string]func() error{
			"push": func() error { return f.Push(ctx, "wal", "0", "a", 2, []byte("next")) },
			"latest": func() error {
				_, _, _, err := f.Latest(ctx, "wal", "0")
				return err
			},
			"blob": func() error {
				_, err := f.PutBlob(ctx, "wal", "0", "a", 2, strings.NewReader("segment"))
				return err
			},
			"collect": func() error {
				_, err := f.Collect(ctx, "wal", "0", writefence.GCOptions{})
				return err
			},
			"lease": func() error {
				_, err := (&writefence.Lease{Fence: f, Name: "l", Holder: "h", TTL: time.Minute}).Acquire(ctx)
				return err
			},
		}
		for name, call := range calls {
			err := call()
			if !errors.Is(err, failure) {
				continue // the call does not reach op
			}
			assert.Equal(t, 1, strings.Count(err.Error(), "writefence: "), "%s failing on %s: %v", name, op, err)
			assert.True(t, strings.HasPrefix(err.Error(), "writefence: "), "%s failing on %s: %v", name, op, err)
		}
	}
}
