package writefence_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
)

// TestValkeyNoWatchLeftArmed makes the WATCH path fail in every way it can
// and proves, after each, that no WATCH is left on the pooled connection.
// The client has one connection, so the store's transactions and the probe
// share it whenever it survives the failure. The client logs in as a user
// that may only read the keys under "ro-", so a write refused while queued
// (an EXECABORT) is one of the failures; its password must never show.
func TestValkeyNoWatchLeftArmed(t *testing.T) {
	ctx := context.Background()
	other := newValkeyClient(t)
	prefix := valkeyPrefix(t, other)
	user, password := strings.TrimSuffix(prefix, "/"), "pw-"+uniqueName(t)
	require.NoError(t, other.Do(ctx, "acl", "setuser", user, "on", ">"+password, "+@all",
		"~"+prefix+"rw-*", "%R~"+prefix+"ro-*").Err())
	t.Cleanup(func() { assert.NoError(t, other.Do(context.Background(), "acl", "deluser", user).Err()) })

	c, tap := newTappedValkeyClient(t, func(o *redis.Options) {
		o.PoolSize = 1
		o.Username = user
		o.Password = password
	})
	store := writefence.NewValkeyConditionalStore(c)
	otherStore := writefence.NewValkeyConditionalStore(other)

	// armed reports whether a WATCH on key is armed on c's pooled
	// connection: key is changed from another connection, then c runs a
	// transaction, which aborts if and only if a WATCH covers key. The
	// transaction goes through Watch (with no keys) because that takes the
	// connection from the client's main pool, the one the store's
	// transactions use; c.TxPipelined would take one from the separate
	// pipeline pool.
	armed := func(t *testing.T, key string) bool {
		t.Helper()
		require.NoError(t, other.Set(ctx, key, "changed by another client", 0).Err())
		err := c.Watch(ctx, func(tx *redis.Tx) error {
			_, err := tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
				p.Incr(ctx, prefix+"rw-probe")
				return nil
			})
			return err
		})
		if errors.Is(err, redis.TxFailedErr) {
			return true
		}
		require.NoError(t, err)
		return false
	}

	t.Run("detector", func(t *testing.T) {
		key := prefix + "rw-detector"
		require.NoError(t, c.Do(ctx, "watch", key).Err())
		assert.True(t, armed(t, key), "a WATCH left on the pooled connection is detected")
		assert.False(t, armed(t, key), "and released by the EXEC that detected it")
	})

	// onMulti runs f once, just before the MULTI/EXEC round trip.
	onMulti := func(f func(ctx context.Context)) {
		tap.setBefore(func(ctx context.Context, cmds []redis.Cmder) error {
			if cmds[0].Name() == "multi" {
				tap.setBefore(nil)
				f(ctx)
			}
			return nil
		})
	}
	create := func(t *testing.T, key string) string {
		t.Helper()
		v, err := otherStore.PutIfVersion(ctx, key, []byte("first"), "")
		require.NoError(t, err)
		return v
	}
	conflict := func(t *testing.T, err error) { assert.ErrorIs(t, err, writefence.ErrConflict) }
	cancelled := func(t *testing.T, err error) { assert.ErrorIs(t, err, context.Canceled) }
	otherFailure := func(t *testing.T, err error) {
		require.Error(t, err)
		assert.NotErrorIs(t, err, writefence.ErrConflict)
		assert.NotErrorIs(t, err, writefence.ErrNotFound)
	}

	cases := []struct {
		name string
		key  string // under prefix
		want func(*testing.T, error)
		run  func(t *testing.T, ctx context.Context, cancel context.CancelFunc, key string) error
	}{
		{"stale version", "rw-stale", conflict, func(t *testing.T, ctx context.Context, _ context.CancelFunc, key string) error {
			v := create(t, key)
			_, err := otherStore.PutIfVersion(ctx, key, []byte("second"), v)
			require.NoError(t, err)
			_, err = store.PutIfVersion(ctx, key, []byte("x"), v)
			return err
		}},
		{"create on existing", "rw-exists", conflict, func(t *testing.T, ctx context.Context, _ context.CancelFunc, key string) error {
			create(t, key)
			_, err := store.PutIfVersion(ctx, key, []byte("x"), "")
			return err
		}},
		{"update of absent key", "rw-absent", conflict, func(t *testing.T, ctx context.Context, _ context.CancelFunc, key string) error {
			_, err := store.PutIfVersion(ctx, key, []byte("x"), strings.Repeat("a", 32))
			return err
		}},
		{"EXEC aborted", "rw-aborted", func(t *testing.T, err error) {
			assert.ErrorIs(t, err, writefence.ErrConflict)
			assert.ErrorIs(t, err, redis.TxFailedErr)
		}, func(t *testing.T, ctx context.Context, _ context.CancelFunc, key string) error {
			v := create(t, key)
			onMulti(func(context.Context) {
				assert.NoError(t, other.Set(ctx, key, "sneaked in", 0).Err())
			})
			_, err := store.PutIfVersion(ctx, key, []byte("x"), v)
			return err
		}},
		{"WRONGTYPE in the read", "rw-list", otherFailure, func(t *testing.T, ctx context.Context, _ context.CancelFunc, key string) error {
			require.NoError(t, other.RPush(ctx, key, "a").Err())
			_, err := store.PutIfVersion(ctx, key, []byte("x"), "")
			return err
		}},
		{"NOPERM while queued", "ro-key", otherFailure, func(t *testing.T, ctx context.Context, _ context.CancelFunc, key string) error {
			v := create(t, key)
			_, err := store.PutIfVersion(ctx, key, []byte("x"), v)
			assert.True(t, redis.IsExecAbortError(err), "%v", err)
			return err
		}},
		{"ctx cancelled after the read", "rw-cancel-exec", cancelled, func(t *testing.T, ctx context.Context, cancel context.CancelFunc, key string) error {
			v := create(t, key)
			tap.setAfter(func(cmds []redis.Cmder) {
				if cmds[0].Name() == "watch" {
					tap.setAfter(nil)
					cancel()
				}
			})
			_, err := store.PutIfVersion(ctx, key, []byte("x"), v)
			data, _, gerr := otherStore.Get(context.Background(), key)
			require.NoError(t, gerr)
			assert.Equal(t, "first", string(data), "a cancelled call wrote nothing")
			return err
		}},
		{"ctx cancelled as the read is sent", "rw-cancel-read", cancelled, func(t *testing.T, ctx context.Context, cancel context.CancelFunc, key string) error {
			v := create(t, key)
			tap.setBefore(func(_ context.Context, cmds []redis.Cmder) error {
				if cmds[0].Name() == "watch" {
					tap.setBefore(nil)
					cancel()
				}
				return nil
			})
			_, err := store.PutIfVersion(ctx, key, []byte("x"), v)
			return err
		}},
		{"connection killed after the read", "rw-killed", otherFailure, func(t *testing.T, ctx context.Context, _ context.CancelFunc, key string) error {
			v := create(t, key)
			id, err := c.ClientID(ctx).Result()
			require.NoError(t, err)
			onMulti(func(context.Context) {
				assert.NoError(t, other.ClientKillByFilter(ctx, "ID", fmt.Sprint(id)).Err())
			})
			_, err = store.PutIfVersion(ctx, key, []byte("x"), v)
			return err
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			defer tap.setBefore(nil)
			defer tap.setAfter(nil)
			key := prefix + tc.key
			before, err := c.ClientID(ctx).Result()
			require.NoError(t, err)
			opCtx, cancel := context.WithCancel(ctx)
			defer cancel()
			err = tc.run(t, opCtx, cancel, key)
			tc.want(t, err)
			if err != nil {
				assert.NotContains(t, err.Error(), password)
				t.Logf("error: %v", err)
			}

			assert.False(t, armed(t, key), "a WATCH was left armed on the pooled connection")
			assert.LessOrEqual(t, c.PoolStats().TotalConns, uint32(1))
			after, err := c.ClientID(ctx).Result()
			require.NoError(t, err)
			t.Logf("connection kept: %v", before == after)
		})
	}
}

// TestValkeyGuard exercises the guard step of the WATCH path: a guard key is
// watched and read with the data key, its check can refuse the write, and a
// change to it before EXEC aborts the write.
func TestValkeyGuard(t *testing.T) {
	ctx := context.Background()
	c, tap := newTappedValkeyClient(t)
	store := writefence.NewValkeyConditionalStore(c)
	prefix := valkeyPrefix(t, c)
	guard, key := prefix+"guard", prefix+"data"
	errRefused := errors.New("guard refused")
	want := func(value []byte, exists bool) error {
		if !exists || string(value) != "brand-A" {
			return fmt.Errorf("%w: exists %v value %q", errRefused, exists, value)
		}
		return nil
	}

	_, err := writefence.ValkeyPutGuarded(ctx, store, key, []byte("x"), "", guard, want)
	require.ErrorIs(t, err, errRefused, "an absent guard refuses")
	assert.Contains(t, err.Error(), "exists false")
	_, _, err = store.Get(ctx, key)
	require.ErrorIs(t, err, writefence.ErrNotFound, "nothing was written")

	gv, err := store.PutIfVersion(ctx, guard, []byte("brand-A"), "")
	require.NoError(t, err)
	tap.take()
	v, err := writefence.ValkeyPutGuarded(ctx, store, key, []byte("x"), "", guard, want)
	require.NoError(t, err, "the guard holds the wanted value")
	assert.Len(t, tap.take(), 2, "a guard costs no round trip")

	tap.setBefore(func(ctx context.Context, cmds []redis.Cmder) error {
		if cmds[0].Name() == "multi" {
			tap.setBefore(nil)
			_, err := store.PutIfVersion(ctx, guard, []byte("brand-B"), gv)
			assert.NoError(t, err)
		}
		return nil
	})
	_, err = writefence.ValkeyPutGuarded(ctx, store, key, []byte("y"), v, guard, want)
	require.ErrorIs(t, err, writefence.ErrConflict, "a guard changed before EXEC aborts the write")
	data, _, err := store.Get(ctx, key)
	require.NoError(t, err)
	assert.Equal(t, "x", string(data))

	_, err = writefence.ValkeyPutGuarded(ctx, store, key, []byte("y"), v, guard, want)
	require.ErrorIs(t, err, errRefused, "and the next read sees the new value")
	assert.Contains(t, err.Error(), `"brand-B"`)
}
