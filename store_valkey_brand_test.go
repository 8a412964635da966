//go:build !writefence_novalkey && !writefence_nosdk

package writefence_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/hook"
	"github.com/writefence/writefence/internal/keys"
	"github.com/writefence/writefence/internal/testserver"
)

// TestValkeyDamagedBrandIsFinal: under BrandVerifyAlways the Valkey store
// reads the brand key inside the write's own step; a brand key that is not
// an intact value of the store (damaged in place, as by a SETRANGE) is a
// refusal in that step, reported as damage of the brand key (ErrCorrupt,
// final), as every other store reports it: one write attempt, not a write
// whose outcome is unknown, and the record unchanged.
func TestValkeyDamagedBrandIsFinal(t *testing.T) {
	eachValkeyStore(t, func(t *testing.T, c *redis.Client, store *writefence.ValkeyStore, prefix string) {
		ctx := context.Background()
		admin := &writefence.Fence{Store: store, Prefix: prefix}
		_, err := admin.ClaimBrand(ctx)
		require.NoError(t, err)
		f := &writefence.Fence{Store: store, Prefix: prefix, Brand: writefence.BrandVerifyAlways, MaxAttempts: 4}
		require.NoError(t, f.Push(ctx, "wal", "0", "a", 1, []byte("one")))

		require.NoError(t, testserver.DamageValkey(c)(ctx, keys.Brand(prefix), testserver.Fault{Flip: 0}))

		var writes atomic.Int64
		hctx := hook.With(ctx, &hook.Hooks{
			Write: func(_ context.Context, _ string, write func() (string, error)) (string, error) {
				writes.Add(1)
				return write()
			},
			Wait: func(context.Context, int, time.Duration) error { return nil },
		})
		err = (&writefence.Fence{Store: store, Prefix: prefix, Brand: writefence.BrandVerifyAlways, MaxAttempts: 4}).
			Push(hctx, "wal", "0", "a", 2, []byte("two"))
		require.ErrorIs(t, err, writefence.ErrCorrupt)
		var ce *writefence.CorruptError
		require.ErrorAs(t, err, &ce)
		assert.Equal(t, keys.Brand(prefix), ce.Key)
		assert.NotErrorIs(t, err, writefence.ErrOutcomeUnknown, "the store refused the write in its atomic step: nothing landed, and the outcome is known")
		assert.Equal(t, int64(1), writes.Load(), "a refusal in the write's own step is final: one attempt")
		requireLatestPrefixed(t, admin, 1, "a", "one")
	})
}

func requireLatestPrefixed(t *testing.T, f *writefence.Fence, epoch uint64, writer, payload string) {
	t.Helper()
	e, w, p, err := f.Latest(context.Background(), "wal", "0")
	require.NoError(t, err)
	assert.Equal(t, epoch, e)
	assert.Equal(t, writer, w)
	assert.Equal(t, payload, string(p))
}
