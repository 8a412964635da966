package modeltest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/fakestore"
	"github.com/writefence/writefence/internal/keys"
	"github.com/writefence/writefence/internal/promise"
)

// TestOrderedConflictThatLanded: a write refused as a conflict may have
// landed all the same, when a client retries it on its own after a lost
// reply (go-redis does) and the retry meets the version the first attempt
// made. A version that holds its bytes, made by no reply, says it
// landed; the Fence, which reads its own record back, returns nil, and
// the history must keep the write.
func TestOrderedConflictThatLanded(t *testing.T) {
	ctx := context.Background()
	key, err := keys.Shard("", "wal", "0")
	require.NoError(t, err)
	inner := fakestore.New(&writefence.MemStore{}, fakestore.Options{Hide: fakestore.All,
		Faults: []fakestore.Fault{{Op: fakestore.Put, Key: key, Times: 1, Lost: true, Err: writefence.ErrConflict}}})
	rec, store := NewRecorder(inner, time.Now, promise.Options{})
	rec.Concurrent()
	f := &writefence.Fence{Store: store, Observer: rec.Observe}

	c := &promise.Call{Op: promise.Push, Plugin: "wal", Shard: "0", Key: key, Writer: "w", Epoch: 1, Payload: []byte("x")}
	rec.Begin(c)
	err = f.Push(WithCall(ctx, c), "wal", "0", "w", 1, []byte("x"))
	rec.End(c, err)
	require.NoError(t, err, "the Fence reads its own record back")

	h, err := rec.Ordered(ctx)
	require.NoError(t, err)
	require.Empty(t, promise.NewChecker(promise.Options{}).Check(h))
}
