package writefence_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
)

// TestRegressedOwnRecord (promise 29): a record set back to exactly a
// write the caller repeats (a retry of a push, an update or a seal whose
// reply was lost) under a Fence that saw the record higher since. The
// write is not reported landed: the record went back below what the Fence
// saw, and the call is refused as regressed, writing nothing.
func TestRegressedOwnRecord(t *testing.T) {
	for name, s := range lossStores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			f := &writefence.Fence{Store: s}
			key := mustKey(t, "wal", "0")
			same := func(cur []byte) ([]byte, error) { return cur, nil }

			require.NoError(t, f.Seal(ctx, "wal", "0", "a", 1<<32|1))
			sealed := bytesAt(t, s, key)
			require.NoError(t, f.Push(ctx, "wal", "0", "a", 1<<32|2, []byte("two")))
			pushed := bytesAt(t, s, key)
			// The takeover, which this Fence sees.
			require.NoError(t, f.Seal(ctx, "wal", "0", "b", 2<<32|1))

			for _, tt := range []struct {
				name  string
				bytes []byte
				call  func() error
				want  writefence.EpochRegressedError
			}{
				{"push", pushed, func() error { return f.Push(ctx, "wal", "0", "a", 1<<32|2, []byte("two")) },
					writefence.EpochRegressedError{Op: "push", Key: key, Epoch: 1<<32 | 2, Seen: 2<<32 | 1, SeenWriter: "b", Found: 1<<32 | 2, FoundWriter: "a"}},
				{"update", pushed, func() error { return f.Update(ctx, "wal", "0", "a", 1<<32|2, same) },
					writefence.EpochRegressedError{Op: "update", Key: key, Epoch: 1<<32 | 2, Seen: 2<<32 | 1, SeenWriter: "b", Found: 1<<32 | 2, FoundWriter: "a"}},
				{"seal", sealed, func() error { return f.Seal(ctx, "wal", "0", "a", 1<<32|1) },
					writefence.EpochRegressedError{Op: "seal", Key: key, Epoch: 1<<32 | 1, Seen: 2<<32 | 1, SeenWriter: "b", Found: 1<<32 | 1, FoundWriter: "a"}},
			} {
				t.Run(tt.name, func(t *testing.T) {
					v := setBack(t, s, key, tt.bytes)
					requireRegressed(t, tt.call(), tt.want)
					_, got, err := s.Get(ctx, key)
					require.NoError(t, err)
					assert.Equal(t, v, got, "nothing written")
				})
			}
		})
	}
}

// TestSettleRegressedOwnRecord (promise 29): a settle run again over a
// record set back to exactly that settle, under a Fence that saw the
// record higher since, is refused as regressed, as every settle below
// what the Fence saw is, rather than reported landed.
func TestSettleRegressedOwnRecord(t *testing.T) {
	for name, s := range lossStores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			f := &writefence.Fence{Store: s}
			key := mustKey(t, "wal", "0")
			require.NoError(t, f.Seal(ctx, "wal", "0", "a", 1))
			require.NoError(t, s.Delete(ctx, key))
			settle := writefence.Settlement{Lost: true, Writer: "op", Floor: 1, Epoch: 2, Payload: []byte("s")}
			require.NoError(t, f.Settle(ctx, "wal", "0", settle))
			settled := bytesAt(t, s, key)
			require.NoError(t, f.Seal(ctx, "wal", "0", "b", 3))

			v := setBack(t, s, key, settled)
			requireRegressed(t, f.Settle(ctx, "wal", "0", settle),
				writefence.EpochRegressedError{Op: "settle", Key: key, Epoch: 2, Seen: 3, SeenWriter: "b", Found: 2, FoundWriter: "op"})
			_, got, err := s.Get(ctx, key)
			require.NoError(t, err)
			assert.Equal(t, v, got, "nothing written")
		})
	}
}
