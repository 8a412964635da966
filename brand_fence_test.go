package writefence_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/defaults"
)

// The Fence's brand check, per mode, on a counting MemStore.

func putBrand(t *testing.T, s *hookStore, value string) {
	t.Helper()
	ctx := context.Background()
	_, v, err := s.ConditionalStore.Get(ctx, brandKey)
	if err != nil {
		require.ErrorIs(t, err, writefence.ErrNotFound)
	}
	_, err = s.ConditionalStore.PutIfVersion(ctx, brandKey, []byte(value), v)
	require.NoError(t, err)
}

func TestFenceBrandVerifyOnce(t *testing.T) {
	ctx := context.Background()
	s := newHookStore()
	f := &writefence.Fence{Store: s, Brand: writefence.BrandVerify}
	rec := mustKey(t, "wal", "0")

	err := f.Push(ctx, "wal", "0", "w", 1, []byte("x"))
	requireWire(t, err, writefence.WireError{Key: brandKey, Expected: defaults.Identity, Absent: true})
	putBrand(t, s, defaults.Identity)
	assert.ErrorIs(t, f.Push(ctx, "wal", "0", "w", 1, []byte("x")), writefence.ErrWire, "a refusal is final for the Fence")
	_, _, _, err = f.Latest(ctx, "wal", "0")
	assert.ErrorIs(t, err, writefence.ErrWire)
	gets, puts, _ := s.calls(brandKey)
	assert.Equal(t, [2]int{1, 0}, [2]int{gets, puts}, "one read, the refusal remembered")
	gets, puts, _ = s.calls(rec)
	assert.Equal(t, [2]int{0, 0}, [2]int{gets, puts}, "the record is never touched")

	f = &writefence.Fence{Store: s, Brand: writefence.BrandVerify}
	for epoch := uint64(1); epoch <= 3; epoch++ {
		require.NoError(t, f.Push(ctx, "wal", "0", "w", epoch, []byte("x")))
	}
	_, _, _, err = f.Latest(ctx, "wal", "0")
	require.NoError(t, err)
	gets, puts, _ = s.calls(brandKey)
	assert.Equal(t, [2]int{2, 0}, [2]int{gets, puts}, "a new Fence verifies once, and never writes the brand")
}

func TestFenceBrandClaimOnce(t *testing.T) {
	ctx := context.Background()
	s := newHookStore()
	f := &writefence.Fence{Store: s, Brand: writefence.BrandClaim}

	_, _, _, err := f.Latest(ctx, "wal", "0")
	require.ErrorIs(t, err, writefence.ErrNotFound, "Latest does not claim, nor refuse an unclaimed store")
	gets, puts, _ := s.calls(brandKey)
	assert.Equal(t, [2]int{0, 0}, [2]int{gets, puts})

	for epoch := uint64(1); epoch <= 3; epoch++ {
		require.NoError(t, f.Push(ctx, "wal", "0", "w", epoch, []byte("x")))
	}
	assert.Equal(t, defaults.Identity, s.value(t, brandKey))
	gets, puts, _ = s.calls(brandKey)
	assert.Equal(t, [2]int{2, 1}, [2]int{gets, puts}, "one claim: read, write, confirming read")

	foreign := newHookStore()
	putBrand(t, foreign, "other/v1")
	f = &writefence.Fence{Store: foreign, Brand: writefence.BrandClaim}
	err = f.Push(ctx, "wal", "0", "w", 1, []byte("x"))
	requireWire(t, err, writefence.WireError{Key: brandKey, Expected: defaults.Identity, Found: "other/v1"})
	_, _, _, err = f.Latest(ctx, "wal", "0")
	require.ErrorIs(t, err, writefence.ErrWire, "Latest returns the claim's refusal")
	require.ErrorIs(t, f.Push(ctx, "wal", "0", "w", 1, []byte("x")), writefence.ErrWire)
	gets, puts, _ = foreign.calls(brandKey)
	assert.Equal(t, [2]int{1, 0}, [2]int{gets, puts}, "refused once, never retried")
	_, puts, _ = foreign.calls(mustKey(t, "wal", "0"))
	assert.Zero(t, puts)
}

func TestFenceBrandVerifyAlways(t *testing.T) {
	ctx := context.Background()
	s := newHookStore()
	putBrand(t, s, defaults.Identity)
	f := &writefence.Fence{Store: s, Brand: writefence.BrandVerifyAlways}

	require.NoError(t, f.Push(ctx, "wal", "0", "w", 1, []byte("x")))
	require.NoError(t, f.Push(ctx, "wal", "0", "w", 2, []byte("x")))
	_, _, _, err := f.Latest(ctx, "wal", "0")
	require.NoError(t, err)
	gets, _, _ := s.calls(brandKey)
	assert.Equal(t, 3, gets, "one read per Push and per Latest")

	putBrand(t, s, "migrated/v2")
	err = f.Push(ctx, "wal", "0", "w", 3, []byte("x"))
	requireWire(t, err, writefence.WireError{Key: brandKey, Expected: defaults.Identity, Found: "migrated/v2"})
	epoch, _, _, err := (&writefence.Fence{Store: s}).Latest(ctx, "wal", "0")
	require.NoError(t, err)
	assert.Equal(t, uint64(2), epoch, "nothing was written under the new brand")

	putBrand(t, s, defaults.Identity)
	require.NoError(t, f.Push(ctx, "wal", "0", "w", 3, []byte("x")), "this mode remembers nothing")
}

// TestFenceBrandTransientNotKept: a failure that is not a refusal is
// returned by that push and checked again by the next.
func TestFenceBrandTransientNotKept(t *testing.T) {
	ctx := context.Background()
	for _, mode := range []writefence.BrandMode{writefence.BrandVerify, writefence.BrandClaim} {
		s := newHookStore()
		putBrand(t, s, defaults.Identity)
		var fail atomic.Bool
		fail.Store(true)
		s.beforeGet = func(key string) error {
			if key == brandKey && fail.Swap(false) {
				return errDenied
			}
			return nil
		}
		f := &writefence.Fence{Store: s, Brand: mode}
		err := f.Push(ctx, "wal", "0", "w", 1, []byte("x"))
		require.ErrorIs(t, err, errDenied)
		assert.NotErrorIs(t, err, writefence.ErrWire)
		require.NoError(t, f.Push(ctx, "wal", "0", "w", 1, []byte("x")))
		require.NoError(t, f.Push(ctx, "wal", "0", "w", 2, []byte("x")))
		gets, _, _ := s.calls(brandKey)
		assert.Equal(t, 2, gets, "mode %d: the failure was not kept, the success was", mode)
	}
}

// TestFenceBrandOnceConcurrent: concurrent first pushes share one check;
// a caller waiting for it honours its own ctx.
func TestFenceBrandOnceConcurrent(t *testing.T) {
	s := newHookStore()
	putBrand(t, s, defaults.Identity)
	release := make(chan struct{})
	s.beforeGet = func(key string) error {
		if key == brandKey {
			<-release
		}
		return nil
	}
	f := &writefence.Fence{Store: s, Brand: writefence.BrandVerify}
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			assert.NoError(t, f.Push(context.Background(), "wal", string(rune('a'+i)), "w", 1, []byte("x")))
		})
	}
	require.Eventually(t, func() bool { g, _, _ := s.calls(brandKey); return g == 1 }, 5*time.Second, time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	assert.Equal(t, context.DeadlineExceeded, f.Push(ctx, "wal", "late", "w", 1, []byte("x")), "a waiter gives up with its ctx")
	close(release)
	wg.Wait()
	gets, _, _ := s.calls(brandKey)
	assert.Equal(t, 1, gets, "sixteen first pushes, one brand read")
}

// TestFenceBrandRecordIdentityStillChecked: a matching brand does not stand
// in for the record-level identity, which every push checks.
func TestFenceBrandRecordIdentityStillChecked(t *testing.T) {
	ctx := context.Background()
	s := newHookStore()
	putBrand(t, s, defaults.Identity)
	require.NoError(t, (&writefence.Fence{Store: s, Identity: "other/v1"}).Push(ctx, "wal", "0", "w", 1, []byte("x")))
	for _, mode := range []writefence.BrandMode{writefence.BrandVerify, writefence.BrandClaim, writefence.BrandVerifyAlways} {
		f := &writefence.Fence{Store: s, Brand: mode}
		for range 2 {
			err := f.Push(ctx, "wal", "0", "w", 2, []byte("x"))
			requireWire(t, err, writefence.WireError{Key: mustKey(t, "wal", "0"), Expected: defaults.Identity, Found: "other/v1"})
		}
	}
}

// TestFenceBrandConfig: the brand is configured once, on the Fence: its
// key follows Prefix, its identity is Identity, and an unknown mode is
// refused before any I/O.
func TestFenceBrandConfig(t *testing.T) {
	ctx := context.Background()
	s := newHookStore()
	f := &writefence.Fence{Store: s, Prefix: "tenant/", Identity: "mine/v1", Brand: writefence.BrandClaim}
	require.NoError(t, f.Push(ctx, "wal", "0", "w", 1, []byte("x")))
	assert.Equal(t, "mine/v1", s.value(t, "tenant/_brand"), "the brand lives under the Fence's prefix")
	gets, puts, _ := s.calls(brandKey)
	assert.Equal(t, [2]int{0, 0}, [2]int{gets, puts}, "the default prefix's brand is not touched")
	require.NoError(t, (&writefence.Fence{Store: s, Prefix: "tenant/", Identity: "mine/v1"}).VerifyBrand(ctx))
	requireWire(t, (&writefence.Fence{Store: s, Prefix: "tenant/"}).VerifyBrand(ctx),
		writefence.WireError{Key: "tenant/_brand", Expected: defaults.Identity, Found: "mine/v1"})

	err := (&writefence.Fence{Store: s, Brand: writefence.BrandMode(7)}).Push(ctx, "wal", "0", "w", 2, []byte("x"))
	var ia *writefence.InvalidArgumentError
	require.ErrorAs(t, err, &ia)
	assert.Equal(t, "brand", ia.Arg)
}

// TestFenceBrandInsideTheWrite: with BrandVerifyAlways, a store that checks
// the brand in the write's own step (BrandedPutter) is written through it,
// with no separate brand read; Latest still reads the brand.
func TestFenceBrandInsideTheWrite(t *testing.T) {
	ctx := context.Background()
	s := newHookStore()
	putBrand(t, s, defaults.Identity)
	branded := &brandedStore{hookStore: s}
	f := &writefence.Fence{Store: branded, Brand: writefence.BrandVerifyAlways}
	require.NoError(t, f.Push(ctx, "wal", "0", "w", 1, []byte("x")))
	require.NoError(t, f.Seal(ctx, "wal", "0", "w", 2))
	gets, _, _ := s.calls(brandKey)
	assert.Equal(t, 2, gets, "the brand is read by the write's own check only")
	assert.Equal(t, int64(2), branded.writes.Load())

	putBrand(t, s, "migrated/v2")
	err := f.Push(ctx, "wal", "0", "w", 3, []byte("x"))
	requireWire(t, err, writefence.WireError{Key: brandKey, Expected: defaults.Identity, Found: "migrated/v2"})
	_, _, _, err = f.Latest(ctx, "wal", "0")
	require.ErrorIs(t, err, writefence.ErrWire, "Latest reads the brand itself")

	for _, mode := range []writefence.BrandMode{writefence.BrandVerify, writefence.BrandClaim} {
		before := branded.writes.Load()
		_ = (&writefence.Fence{Store: branded, Brand: mode}).Push(ctx, "wal", "1", "w", 1, nil)
		assert.Equal(t, before, branded.writes.Load(), "mode %d writes with PutIfVersion", mode)
	}
}

// brandedStore is a BrandedPutter over a hookStore: it reads the brand,
// then writes. Not atomic, which the Fence cannot tell; the real adapter's
// atomicity is tested against Valkey.
type brandedStore struct {
	*hookStore
	writes atomic.Int64 // PutIfBranded calls
}

func (s *brandedStore) PutIfBranded(ctx context.Context, brandKey, identity, key string, data []byte, expect string) (string, error) {
	s.writes.Add(1)
	b, _, err := s.Get(ctx, brandKey)
	switch {
	case errors.Is(err, writefence.ErrNotFound):
		return "", &writefence.WireError{Key: brandKey, Expected: identity, Absent: true}
	case err != nil:
		return "", err
	case string(b) != identity:
		return "", &writefence.WireError{Key: brandKey, Expected: identity, Found: string(b)}
	}
	return s.PutIfVersion(ctx, key, data, expect)
}
