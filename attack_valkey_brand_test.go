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

// Breaks promise 4's error classification (final refusals are final, and
// a write refused in its own atomic step is not reported as one whose
// outcome is unknown) on Valkey, where the brand is checked inside the
// write.
//
// Under BrandVerifyAlways every write goes through PutIfBranded, which on
// Valkey reads the brand key in the write's own step and refuses, writing
// nothing, when the brand key is not an intact value of the store (damaged
// in place, as by a SETRANGE). That refusal is returned as a plain
// *StoreError, neither ErrWire nor ErrCorrupt, so the engine takes it for
// a write whose outcome is hidden: it retries it MaxAttempts times with
// back-offs and then reports ErrOutcomeUnknown ("may or may not have
// landed") for a write the store refused in its atomic step. On every other
// store the same damaged brand is a final refusal after one attempt (the
// directory store: ErrCorrupt; S3: ErrWire), so one Fence configuration
// classifies one situation three ways.
//
// Sequence (both Valkey write paths): claim the brand; push epoch 1 under
// BrandVerifyAlways; flip one byte of the brand key's data with SETRANGE;
// push epoch 2. Want: one write attempt, a refusal (not ErrOutcomeUnknown),
// the record unchanged. Got: MaxAttempts attempts and ErrOutcomeUnknown.
func TestAttackValkeyDamagedBrandIsUnknownOutcome(t *testing.T) {
	eachValkeyStore(t, func(t *testing.T, c *redis.Client, store *writefence.ValkeyConditionalStore, prefix string) {
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
		require.Error(t, err)
		t.Logf("push over a damaged brand: %v", err)
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
