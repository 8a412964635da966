package writefence_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/defaults"
	"github.com/writefence/writefence/internal/keys"
)

// The Valkey store's per-write brand check, on the real server.

// requireOtherFailure asserts err is a failure that is neither a refusal
// nor a store outcome the fence acts on.
func requireOtherFailure(t *testing.T, err error, msgAndArgs ...any) {
	t.Helper()
	require.Error(t, err, msgAndArgs...)
	assert.NotErrorIs(t, err, writefence.ErrWire, msgAndArgs...)
	assert.NotErrorIs(t, err, writefence.ErrNotFound, msgAndArgs...)
	assert.NotErrorIs(t, err, writefence.ErrConflict, msgAndArgs...)
}

// valkeyBrandValue is what a brand holding identity looks like in the
// store's layout, with version token n.
func valkeyBrandValue(n int, identity string) string {
	return valkeyRawValue(fmt.Sprintf("%032x", n), identity)
}

func TestValkeyBrandPerWrite(t *testing.T) {
	ctx := context.Background()
	for _, path := range valkeyPaths {
		t.Run(path.name, func(t *testing.T) {
			c := newValkeyClient(t)
			prefix := valkeyPrefix(t, c)
			brand, data := keys.Brand(prefix), prefix+"data"
			store := writefence.NewValkeyConditionalStore(c)
			store.Script, store.BrandKey = path.script, brand
			plain := writefence.NewValkeyConditionalStore(c)
			unwritten := func() {
				t.Helper()
				n, err := c.Exists(ctx, data).Result()
				require.NoError(t, err)
				require.Zero(t, n, "nothing was written")
			}

			_, err := store.PutIfVersion(ctx, data, []byte("x"), "")
			requireWire(t, err, writefence.WireError{Key: brand, Expected: defaults.Identity, Absent: true})
			unwritten()

			installed, err := (&writefence.Fence{Store: store, Prefix: strings.TrimSuffix(brand, "_brand")}).ClaimBrand(ctx)
			require.NoError(t, err, "a write to the brand key itself is not checked")
			require.True(t, installed)
			v1, err := store.PutIfVersion(ctx, data, []byte("x"), "")
			require.NoError(t, err)

			_, bv, err := plain.Get(ctx, brand)
			require.NoError(t, err)
			_, err = plain.PutIfVersion(ctx, brand, []byte("other/v1"), bv)
			require.NoError(t, err)
			_, err = store.PutIfVersion(ctx, data, []byte("y"), v1)
			requireWire(t, err, writefence.WireError{Key: brand, Expected: defaults.Identity, Found: "other/v1"})
			got, _, err := store.Get(ctx, data)
			require.NoError(t, err)
			assert.Equal(t, "x", string(got), "nothing was written")

			hostile := "\x1b[31m\n\x00\xff" + strings.Repeat("A", 10<<10)
			require.NoError(t, c.Set(ctx, brand, valkeyBrandValue(1, hostile), 0).Err())
			_, err = store.PutIfVersion(ctx, data, []byte("y"), v1)
			require.ErrorIs(t, err, writefence.ErrWire)
			msg := err.Error()
			assert.Less(t, len(msg), 400, "bounded")
			assert.True(t, strings.HasPrefix(msg, `writefence: wire: expected writefence/v1 found \x1b[31m\n\x00\xffAAA`), msg)

			require.NoError(t, c.Set(ctx, brand, defaults.Identity, 0).Err())
			_, err = store.PutIfVersion(ctx, data, []byte("y"), v1)
			requireOtherFailure(t, err, "a brand key not in the store's layout")
			assert.Contains(t, err.Error(), "is not an intact value of this store: valkey value shorter than its header")

			damaged := []byte(valkeyBrandValue(3, defaults.Identity))
			damaged[len(damaged)-1] ^= 1
			require.NoError(t, c.Set(ctx, brand, damaged, 0).Err())
			_, err = store.PutIfVersion(ctx, data, []byte("y"), v1)
			requireOtherFailure(t, err, "a brand value damaged in place")
			assert.Contains(t, err.Error(), "is not an intact value of this store: valkey value digest")

			require.NoError(t, c.Del(ctx, brand).Err())
			require.NoError(t, c.RPush(ctx, brand, defaults.Identity).Err())
			_, err = store.PutIfVersion(ctx, data, []byte("y"), v1)
			requireOtherFailure(t, err, "WRONGTYPE")
			assert.True(t, redis.HasErrorPrefix(err, "WRONGTYPE"), "%v", err)
			got, _, err = store.Get(ctx, data)
			require.NoError(t, err)
			assert.Equal(t, "x", string(got), "nothing was written")
		})
	}
}

// TestValkeyBrandNoPerm: a user who may write the data but not read the
// brand key gets the server's NOPERM, and writes nothing.
func TestValkeyBrandNoPerm(t *testing.T) {
	ctx := context.Background()
	admin := newValkeyClient(t)
	prefix := valkeyPrefix(t, admin)
	brand, data := keys.Brand(prefix), prefix+"data"
	_, err := (&writefence.Fence{Store: writefence.NewValkeyConditionalStore(admin), Prefix: strings.TrimSuffix(brand, "_brand")}).ClaimBrand(ctx)
	require.NoError(t, err)
	user, password := strings.TrimSuffix(prefix, "/")+"-noperm", "pw-"+uniqueName(t)
	require.NoError(t, admin.Do(ctx, "acl", "setuser", user, "on", ">"+password, "+@all", "~"+data).Err())
	t.Cleanup(func() { assert.NoError(t, admin.Do(context.Background(), "acl", "deluser", user).Err()) })
	limited := newValkeyClient(t, func(o *redis.Options) { o.Username, o.Password = user, password })

	for _, path := range valkeyPaths {
		store := writefence.NewValkeyConditionalStore(limited)
		store.Script, store.BrandKey = path.script, brand
		_, err := store.PutIfVersion(ctx, data, []byte("x"), "")
		requireOtherFailure(t, err, path.name)
		assert.Contains(t, err.Error(), "NOPERM", path.name)
		assert.NotContains(t, err.Error(), password)
		t.Logf("%s: %v", path.name, err)
		n, err := admin.Exists(ctx, data).Result()
		require.NoError(t, err)
		require.Zero(t, n, "%s: nothing was written", path.name)
	}
}

// TestValkeyBrandChangedBeforeExec: a brand changed by another client after
// the WATCH path read it and before EXEC aborts the write; the fence's retry
// then sees the new brand and refuses.
func TestValkeyBrandChangedBeforeExec(t *testing.T) {
	ctx := context.Background()
	c, tap := newTappedValkeyClient(t)
	prefix := valkeyPrefix(t, c)
	brand := keys.Brand(prefix)
	store := writefence.NewValkeyConditionalStore(c)
	store.BrandKey = brand
	other := writefence.NewValkeyConditionalStore(newValkeyClient(t))
	_, err := (&writefence.Fence{Store: store, Prefix: strings.TrimSuffix(brand, "_brand")}).ClaimBrand(ctx)
	require.NoError(t, err)

	f := &writefence.Fence{Store: store, Prefix: prefix}
	require.NoError(t, f.Push(ctx, "wal", "0", "w", 1, []byte("under the brand")))

	rebrand := func() {
		tap.setBefore(func(ctx context.Context, cmds []redis.Cmder) error {
			if cmds[0].Name() == "multi" {
				tap.setBefore(nil)
				_, v, err := other.Get(ctx, brand)
				assert.NoError(t, err)
				_, err = other.PutIfVersion(ctx, brand, []byte("other/v1"), v)
				assert.NoError(t, err)
			}
			return nil
		})
	}
	key, err := keys.Shard(prefix, "wal", "0")
	require.NoError(t, err)
	_, v, err := store.Get(ctx, key)
	require.NoError(t, err)
	rebrand()
	_, err = store.PutIfVersion(ctx, key, []byte("junk"), v)
	require.ErrorIs(t, err, writefence.ErrConflict, "EXEC aborted")
	assert.ErrorIs(t, err, redis.TxFailedErr)
	requireWire(t, (&writefence.Fence{Store: other, Prefix: strings.TrimSuffix(brand, "_brand")}).VerifyBrand(ctx),
		writefence.WireError{Key: brand, Expected: defaults.Identity, Found: "other/v1"})

	// Back to our brand, and the same through the fence: its first attempt
	// is aborted by the re-brand, its retry refused.
	_, bv, err := other.Get(ctx, brand)
	require.NoError(t, err)
	_, err = other.PutIfVersion(ctx, brand, []byte(defaults.Identity), bv)
	require.NoError(t, err)
	rebrand()
	err = f.Push(ctx, "wal", "0", "w", 2, []byte("under another brand"))
	requireWire(t, err, writefence.WireError{Key: brand, Expected: defaults.Identity, Found: "other/v1"})
	epoch, _, payload, err := (&writefence.Fence{Store: other, Prefix: prefix}).Latest(ctx, "wal", "0")
	require.NoError(t, err)
	assert.Equal(t, uint64(1), epoch)
	assert.Equal(t, "under the brand", string(payload), "nothing landed under the foreign brand")
}

// TestValkeyBrandConcurrentFlips: writers loop on their keys while another
// client flips the brand between ours and a foreign one. Each flip to the
// foreign brand and back is one MULTI/EXEC that also reads every data key,
// so the two snapshots bracket exactly the time the brand was foreign: they
// must be equal. The same loop on a store without BrandKey shows the
// snapshots do catch writes.
func TestValkeyBrandConcurrentFlips(t *testing.T) {
	for _, tc := range []struct {
		name           string
		script, brand  bool
		wantViolations bool
	}{
		{"watch", false, true, false},
		{"script", true, true, false},
		{"unbranded control", false, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			c := newValkeyClient(t, func(o *redis.Options) { o.PoolSize = 16 })
			prefix := valkeyPrefix(t, c)
			brand := keys.Brand(prefix)
			store := writefence.NewValkeyConditionalStore(c)
			store.Script = tc.script
			if tc.brand {
				store.BrandKey = brand
			}
			require.NoError(t, c.Set(ctx, brand, valkeyBrandValue(0, defaults.Identity), 0).Err())
			const writers = 4
			keys := make([]string, writers)
			for i := range keys {
				keys[i] = fmt.Sprintf("%sdata-%d", prefix, i)
				_, err := store.PutIfVersion(ctx, keys[i], []byte("initial"), "")
				require.NoError(t, err)
			}

			var stop atomic.Bool
			var landed, refused, conflicts atomic.Int64
			var wg sync.WaitGroup
			for i, key := range keys {
				wg.Go(func() {
					for n := 0; !stop.Load(); n++ {
						_, v, err := store.Get(ctx, key)
						if !assert.NoError(t, err) {
							return
						}
						_, err = store.PutIfVersion(ctx, key, fmt.Appendf(nil, "w%d-%d", i, n), v)
						switch {
						case err == nil:
							landed.Add(1)
						case errors.Is(err, writefence.ErrWire):
							refused.Add(1)
						case errors.Is(err, writefence.ErrConflict):
							conflicts.Add(1)
						default:
							assert.NoError(t, err)
							return
						}
					}
				})
			}

			// snapshot runs set, then reads every data key, in one MULTI/EXEC
			// (or reads, then sets: the order inside EXEC is the order here).
			snapshot := func(setFirst bool, value string) []string {
				gets := make([]*redis.StringCmd, len(keys))
				_, err := c.TxPipelined(ctx, func(p redis.Pipeliner) error {
					if setFirst {
						p.Set(ctx, brand, value, 0)
					}
					for i, k := range keys {
						gets[i] = p.Get(ctx, k)
					}
					if !setFirst {
						p.Set(ctx, brand, value, 0)
					}
					return nil
				})
				require.NoError(t, err)
				vals := make([]string, len(gets))
				for i, g := range gets {
					vals[i] = g.Val()
				}
				return vals
			}
			const flips = 50
			violations := 0
			for n := range flips {
				time.Sleep(time.Millisecond) // our brand: writes land
				before := snapshot(true, valkeyBrandValue(2*n+1, "other/v1"))
				time.Sleep(2 * time.Millisecond) // the foreign brand
				after := snapshot(false, valkeyBrandValue(2*n+2, defaults.Identity))
				if fmt.Sprint(before) != fmt.Sprint(after) {
					violations++
				}
			}
			stop.Store(true)
			wg.Wait()
			t.Logf("%s: %d flips, %d with a write landed under the foreign brand; writes: %d landed, %d refused with ErrWire, %d conflicts",
				tc.name, flips, violations, landed.Load(), refused.Load(), conflicts.Load())
			require.Positive(t, landed.Load(), "writes landed under our brand")
			if tc.wantViolations {
				require.Positive(t, violations, "the snapshots catch a write under the foreign brand")
				return
			}
			require.Zero(t, violations, "no write landed under the foreign brand")
			require.Positive(t, refused.Load(), "writes were refused under the foreign brand")
		})
	}
}
