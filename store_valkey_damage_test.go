package writefence_test

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/keys"
)

// Damage in place: a value edited by hand keeps the token a fence may
// remember, so the store checks every value it reads or overwrites.

// valkeyDamages edit a value in place the ways an operator could.
var valkeyDamages = []struct {
	name string
	edit func(ctx context.Context, c *redis.Client, key string) error
}{
	{"setrange inside the data", func(ctx context.Context, c *redis.Client, key string) error {
		return c.SetRange(ctx, key, 72+3, "X").Err()
	}},
	{"setrange in the token", func(ctx context.Context, c *redis.Client, key string) error {
		b, err := c.GetRange(ctx, key, 45, 45).Result()
		if err != nil {
			return err
		}
		// Another hex digit: the token keeps its form, the digest breaks.
		return c.SetRange(ctx, key, 45, map[bool]string{true: "1", false: "0"}[b == "0"]).Err()
	}},
	{"append", func(ctx context.Context, c *redis.Client, key string) error {
		return c.Append(ctx, key, "tail").Err()
	}},
	{"truncation", func(ctx context.Context, c *redis.Client, key string) error {
		raw, err := c.Get(ctx, key).Result()
		if err != nil {
			return err
		}
		return c.Set(ctx, key, raw[:len(raw)-2], 0).Err()
	}},
	{"set of garbage", func(ctx context.Context, c *redis.Client, key string) error {
		return c.Set(ctx, key, "garbage set by hand", 0).Err()
	}},
}

// requireCorrupt asserts err is a *CorruptError for key and returns it.
func requireCorrupt(t *testing.T, err error, key string, msgAndArgs ...any) *writefence.CorruptError {
	t.Helper()
	var ce *writefence.CorruptError
	require.ErrorAs(t, err, &ce, msgAndArgs...)
	require.ErrorIs(t, err, writefence.ErrCorrupt, msgAndArgs...)
	assert.NotErrorIs(t, err, writefence.ErrConflict, msgAndArgs...)
	assert.NotErrorIs(t, err, writefence.ErrNotFound, msgAndArgs...)
	assert.Equal(t, key, ce.Key, msgAndArgs...)
	assert.NotEmpty(t, ce.Check, msgAndArgs...)
	require.NotEmpty(t, ce.Version, msgAndArgs...)
	return ce
}

func TestValkeyDamageInPlace(t *testing.T) {
	ctx := context.Background()
	for _, path := range valkeyPaths {
		t.Run(path.name, func(t *testing.T) {
			c := newValkeyClient(t)
			store := writefence.NewValkeyConditionalStore(c)
			store.Script = path.script
			prefix := valkeyPrefix(t, c)
			raw := func(key string) string {
				t.Helper()
				v, err := c.Get(ctx, key).Result()
				require.NoError(t, err)
				return v
			}
			for _, d := range valkeyDamages {
				t.Run(d.name, func(t *testing.T) {
					key := prefix + d.name
					v1, err := store.PutIfVersion(ctx, key, []byte("payload 0123456789"), "")
					require.NoError(t, err)
					require.NoError(t, d.edit(ctx, c, key))
					damaged := raw(key)

					_, _, err = store.Get(ctx, key)
					ce := requireCorrupt(t, err, key, "get")
					dv := ce.Version
					assert.NotEqual(t, v1, dv, "the damaged bytes have a version of their own")
					t.Logf("%s: %v", d.name, err)
					_, _, err = store.Get(ctx, key)
					assert.Equal(t, dv, requireCorrupt(t, err, key).Version, "the same bytes, the same version")
					_, _, _, err = store.GetPrefix(ctx, key, 4)
					pce := requireCorrupt(t, err, key, "a prefix read sees the damage too")
					assert.Equal(t, *ce, *pce, "GetPrefix gives Get's verdict")

					for _, expect := range []string{v1, ""} {
						_, err = store.PutIfVersion(ctx, key, []byte("new"), expect)
						assert.Equal(t, dv, requireCorrupt(t, err, key, "put expecting %q", expect).Version)
						assert.Equal(t, damaged, raw(key), "nothing was written")
					}

					// A second edit: the version read before no longer names
					// the bytes, so it replaces nothing.
					require.NoError(t, c.SetRange(ctx, key, 0, "Z").Err())
					twice := raw(key)
					require.NotEqual(t, damaged, twice)
					_, _, err = store.Get(ctx, key)
					dv2 := requireCorrupt(t, err, key).Version
					assert.NotEqual(t, dv, dv2)
					_, err = store.PutIfVersion(ctx, key, []byte("new"), dv)
					assert.Equal(t, dv2, requireCorrupt(t, err, key, "the first damaged version").Version)
					assert.Equal(t, twice, raw(key), "nothing was written")

					nv, err := store.PutIfVersion(ctx, key, []byte("new"), dv2)
					require.NoError(t, err, "the damaged version replaces exactly those bytes")
					data, v, err := store.Get(ctx, key)
					require.NoError(t, err)
					assert.Equal(t, "new", string(data))
					assert.Equal(t, nv, v)
					_, err = store.PutIfVersion(ctx, key, []byte("again"), dv2)
					require.ErrorIs(t, err, writefence.ErrConflict, "a damaged version over intact bytes")
				})
			}
		})
	}
}

// TestValkeyDamagedVersionIsAtomic: on the WATCH path, bytes edited again
// between the check and EXEC abort the replacement.
func TestValkeyDamagedVersionIsAtomic(t *testing.T) {
	ctx := context.Background()
	c, tap := newTappedValkeyClient(t)
	other := newValkeyClient(t)
	store := writefence.NewValkeyConditionalStore(c)
	key := valkeyPrefix(t, c) + "k"
	_, err := store.PutIfVersion(ctx, key, []byte("payload"), "")
	require.NoError(t, err)
	require.NoError(t, c.SetRange(ctx, key, 72, "P").Err())
	_, _, err = store.Get(ctx, key)
	dv := requireCorrupt(t, err, key).Version

	tap.setBefore(func(ctx context.Context, cmds []redis.Cmder) error {
		if cmds[0].Name() == "multi" {
			tap.setBefore(nil)
			assert.NoError(t, other.SetRange(ctx, key, 72, "Q").Err())
		}
		return nil
	})
	_, err = store.PutIfVersion(ctx, key, []byte("settled"), dv)
	require.ErrorIs(t, err, writefence.ErrConflict)
	require.ErrorIs(t, err, redis.TxFailedErr, "the check passed and EXEC aborted")
	got, err := c.GetRange(ctx, key, 72, -1).Result()
	require.NoError(t, err)
	assert.Equal(t, "Qayload", got, "the second edit stands")
}

// TestValkeyDamageUnderCachedVersion: a fence that remembers the version it
// wrote conditions its next push on it without reading; the store sees the
// damage in that very write and refuses, and an operator settles it.
func TestValkeyDamageUnderCachedVersion(t *testing.T) {
	ctx := context.Background()
	for _, path := range valkeyPaths {
		t.Run(path.name, func(t *testing.T) {
			c, tap := newTappedValkeyClient(t)
			store := writefence.NewValkeyConditionalStore(c)
			store.Script = path.script
			prefix := valkeyPrefix(t, c)
			key, err := keys.Shard(prefix, "wal", "0")
			require.NoError(t, err)
			f := &writefence.Fence{Store: store, Prefix: prefix}
			require.NoError(t, f.Push(ctx, "wal", "0", "a", 1, []byte("segment one")))

			// One byte of the payload, as valkey-cli SETRANGE would.
			n, err := c.StrLen(ctx, key).Result()
			require.NoError(t, err)
			require.NoError(t, c.SetRange(ctx, key, n-1, "!").Err())
			damaged, err := c.Get(ctx, key).Result()
			require.NoError(t, err)

			tap.take()
			err = f.Push(ctx, "wal", "0", "a", 2, []byte("segment two"))
			trips := tap.take()
			ce := requireCorrupt(t, err, key, "push over damaged bytes")
			assert.NotErrorIs(t, err, writefence.ErrOutcomeUnknown, "a refusal, not an unknown outcome")
			require.NotEmpty(t, trips)
			first := map[bool]string{false: "watch", true: "evalsha"}[path.script]
			assert.Equal(t, first, trips[0][0], "the push wrote on its remembered version without reading: %s", formatValkeyTrips(trips))
			got, err := c.Get(ctx, key).Result()
			require.NoError(t, err)
			assert.Equal(t, damaged, got, "nothing was overwritten")

			_, _, _, err = f.Latest(ctx, "wal", "0")
			assert.Equal(t, ce.Version, requireCorrupt(t, err, key, "latest").Version)

			require.NoError(t, f.Settle(ctx, "wal", "0", ce.Version, "operator", 3, []byte("restored")))
			epoch, writer, payload, err := f.Latest(ctx, "wal", "0")
			require.NoError(t, err)
			assert.Equal(t, uint64(3), epoch)
			assert.Equal(t, "operator", writer)
			assert.Equal(t, "restored", string(payload))
		})
	}
}
