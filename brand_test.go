package writefence_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/defaults"
	"github.com/writefence/writefence/internal/escape"
	"github.com/writefence/writefence/internal/fakestore"
	"github.com/writefence/writefence/internal/keys"
)

// countedByKey returns a fake store over inner, with faults, that counts
// the calls of each key and offers Get and PutIfVersion alone.
func countedByKey(inner writefence.ConditionalStore, faults ...fakestore.Fault) fakestore.Store {
	return fakestore.New(inner, fakestore.Options{Hide: fakestore.All, ByKey: true, Faults: faults})
}

// callsOf returns the reads, write attempts and landed writes of key on s.
func callsOf(s fakestore.Store, key string) (gets, puts, landed int) {
	return int(s.Calls(fakestore.Get, key)), int(s.Calls(fakestore.Put, key)), int(s.OK(fakestore.Put, key))
}

// valueOf returns what the store behind s holds at key.
func valueOf(t *testing.T, s fakestore.Store, key string) string {
	t.Helper()
	data, _, err := s.Unwrap().Get(context.Background(), key)
	require.NoError(t, err)
	return string(data)
}

var brandKey = keys.Brand("")

// errDenied stands for a store's permission error: a refusal that a retry
// cannot change.
var errDenied = fmt.Errorf("access denied: %w", fs.ErrPermission)

func requireWire(t *testing.T, err error, want writefence.WireError) {
	t.Helper()
	require.ErrorIs(t, err, writefence.ErrWire)
	var we *writefence.WireError
	require.ErrorAs(t, err, &we)
	assert.Equal(t, want, *we)
}

func TestBrandClaim(t *testing.T) {
	ctx := context.Background()
	s := countedByKey(&writefence.MemStore{})
	b := &writefence.Fence{Store: s}

	require.NoError(t, claimBrand(ctx, b), "an empty store is claimed")
	gets, puts, landed := callsOf(s, brandKey)
	assert.Equal(t, [3]int{2, 1, 1}, [3]int{gets, puts, landed}, "read, create-only write, confirming read")
	assert.Equal(t, defaults.Identity, valueOf(t, s, brandKey), "the brand key holds the identity's bytes")

	require.NoError(t, claimBrand(ctx, b), "an equal brand is accepted")
	gets, puts, _ = callsOf(s, brandKey)
	assert.Equal(t, [2]int{3, 1}, [2]int{gets, puts}, "with one read and no write")

	other := &writefence.Fence{Store: s, Identity: "other/v2"}
	err := claimBrand(ctx, other)
	requireWire(t, err, writefence.WireError{Key: brandKey, Expected: "other/v2", Found: defaults.Identity})
	assert.Equal(t, "writefence: wire: expected other/v2 found writefence/v1", err.Error())
	gets, puts, _ = callsOf(s, brandKey)
	assert.Equal(t, [2]int{4, 1}, [2]int{gets, puts}, "another brand is refused after one read, never retried, nothing written")
}

func TestBrandVerify(t *testing.T) {
	ctx := context.Background()
	s := countedByKey(&writefence.MemStore{})
	b := &writefence.Fence{Store: s, Identity: "mine/v1", Prefix: "p/"}

	err := b.VerifyBrand(ctx)
	requireWire(t, err, writefence.WireError{Key: "p/_brand", Expected: "mine/v1", Absent: true})
	assert.Equal(t, "writefence: wire: expected mine/v1 but p/_brand is absent", err.Error())
	assert.NotErrorIs(t, err, writefence.ErrNotFound, "absent is a refusal, not a store miss")

	_, err = s.Unwrap().PutIfVersion(ctx, "p/_brand", []byte("theirs/v3"), "")
	require.NoError(t, err)
	err = b.VerifyBrand(ctx)
	requireWire(t, err, writefence.WireError{Key: "p/_brand", Expected: "mine/v1", Found: "theirs/v3"})
	assert.Equal(t, "writefence: wire: expected mine/v1 found theirs/v3", err.Error())

	require.NoError(t, (&writefence.Fence{Store: s, Identity: "theirs/v3", Prefix: "p/"}).VerifyBrand(ctx))

	gets, puts, _ := callsOf(s, "p/_brand")
	assert.Equal(t, 3, gets, "one read per Verify, refusals included")
	assert.Zero(t, puts, "Verify never writes")
}

func TestBrandInstall(t *testing.T) {
	ctx := context.Background()
	s := countedByKey(&writefence.MemStore{})
	b := &writefence.Fence{Store: s, Identity: "mine/v1"}

	installed, err := b.ClaimBrand(ctx)
	require.NoError(t, err)
	assert.True(t, installed)
	assert.Equal(t, "mine/v1", valueOf(t, s, brandKey))

	installed, err = b.ClaimBrand(ctx)
	require.NoError(t, err)
	assert.False(t, installed, "already installed")

	installed, err = (&writefence.Fence{Store: s, Identity: "theirs/v1"}).ClaimBrand(ctx)
	requireWire(t, err, writefence.WireError{Key: brandKey, Expected: "theirs/v1", Found: "mine/v1"})
	assert.False(t, installed)
	assert.Equal(t, "mine/v1", valueOf(t, s, brandKey), "another brand is never overwritten")

	_, puts, landed := callsOf(s, brandKey)
	assert.Equal(t, [2]int{1, 1}, [2]int{puts, landed}, "one write, by the first install only")
}

// TestBrandInstallLosesRace: a brand written by a racer between Install's
// read and its create-only write is read back, never overwritten.
func TestBrandInstallLosesRace(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		racer     string
		wantErr   bool
		wantValue string
	}{
		{racer: "mine/v1", wantValue: "mine/v1"},
		{racer: "theirs/v1", wantErr: true, wantValue: "theirs/v1"},
	} {
		// The racer's brand lands while Install's read is on its way,
		// which answers that the key is absent.
		mem := &writefence.MemStore{}
		_, err := mem.PutIfVersion(ctx, brandKey, []byte(tc.racer), "")
		require.NoError(t, err)
		s := countedByKey(mem, fakestore.Fault{Op: fakestore.Get, Times: 1, Err: writefence.ErrNotFound})
		installed, err := (&writefence.Fence{Store: s, Identity: "mine/v1"}).ClaimBrand(ctx)
		assert.False(t, installed, tc.racer)
		if tc.wantErr {
			requireWire(t, err, writefence.WireError{Key: brandKey, Expected: "mine/v1", Found: tc.racer})
		} else {
			require.NoError(t, err, tc.racer)
		}
		assert.Equal(t, tc.wantValue, valueOf(t, s, brandKey))
		_, puts, landed := callsOf(s, brandKey)
		assert.Equal(t, [2]int{1, 0}, [2]int{puts, landed}, tc.racer)
	}
}

// TestBrandRaceMem races 16 claimers or installers of two identities on an
// empty MemStore; brand_servers_test.go does the same on real servers.
func TestBrandRaceMem(t *testing.T) {
	s := countedByKey(&writefence.MemStore{})
	for round := range 200 {
		stats := raceBrand(t, s, fmt.Sprintf("mem/%d/_brand", round))
		require.Equal(t, 1, stats.landed, "round %d", round)
	}
	installs := 0
	for round := range 50 {
		key := fmt.Sprintf("install/%d/_brand", round)
		var wg sync.WaitGroup
		var mu sync.Mutex
		for i := range 16 {
			wg.Go(func() {
				installed, err := (&writefence.Fence{Store: s, Prefix: strings.TrimSuffix(key, "_brand"), Identity: fmt.Sprint("id", i%2)}).ClaimBrand(t.Context())
				if installed {
					mu.Lock()
					installs++
					mu.Unlock()
				}
				if err != nil {
					assert.ErrorIs(t, err, writefence.ErrWire)
				}
			})
		}
		wg.Wait()
		_, _, landed := callsOf(s, key)
		require.Equal(t, 1, landed)
	}
	assert.Equal(t, 50, installs, "exactly one install per round reports installed")
}

// brandRace is what one round of raceBrand saw.
type brandRace struct {
	winner        string // the identity the brand key holds afterwards
	won, refused  int    // claimers returning nil, refused with ErrWire
	landed, wrote int    // writes that landed, write attempts
}

// raceBrand runs 16 claimers, 8 of identity A and 8 of identity B, against
// key on an empty store, and checks that exactly one identity won: every
// claimer of it returned nil and every other was refused naming it.
func raceBrand(t *testing.T, s fakestore.Store, key string) brandRace {
	t.Helper()
	ids := [2]string{"brand-a/v1", "brand-b/v1"}
	errs := together(16, func(i int) error {
		return claimBrand(t.Context(), &writefence.Fence{Store: s, Identity: ids[i%2], Prefix: strings.TrimSuffix(key, "_brand")})
	})

	var r brandRace
	r.winner = valueOf(t, s, key)
	require.Contains(t, ids, r.winner)
	for i, err := range errs {
		if ids[i%2] == r.winner {
			require.NoError(t, err, "claimer %d shares the winner's identity", i)
			r.won++
			continue
		}
		var we *writefence.WireError
		require.ErrorAs(t, err, &we, "claimer %d", i)
		require.ErrorIs(t, err, writefence.ErrWire)
		require.Equal(t, r.winner, we.Found, "the refusal names the winner")
		r.refused++
	}
	_, r.wrote, r.landed = callsOf(s, key)
	require.Equal(t, [2]int{8, 8}, [2]int{r.won, r.refused})
	return r
}

// TestBrandFoundEscaped: a hostile value at the brand key is refused with a
// message that carries it escaped and bounded, by every way of holding the
// brand; the typed error keeps the raw bytes.
func TestBrandFoundEscaped(t *testing.T) {
	ctx := context.Background()
	cases := map[string]string{
		"newline":      "writefence/v1\nwritefence: forged line",
		"ansi":         "\x1b[2J\x1b[31mred",
		"nul":          "writefence/v1\x00",
		"invalid utf8": "\xff\xfe\xc3",
		"10 KiB":       strings.Repeat("A", 10<<10),
		"prefix":       defaults.Identity + "x",
		"quote":        `"" at writefence/_brand`,
	}
	for name, value := range cases {
		t.Run(name, func(t *testing.T) {
			s := countedByKey(&writefence.MemStore{})
			_, err := s.Unwrap().PutIfVersion(ctx, brandKey, []byte(value), "")
			require.NoError(t, err)
			b := &writefence.Fence{Store: s}
			_, installErr := b.ClaimBrand(ctx)
			for op, err := range map[string]error{"claim": claimBrand(ctx, b), "verify": b.VerifyBrand(ctx), "install": installErr} {
				requireWire(t, err, writefence.WireError{Key: brandKey, Expected: defaults.Identity, Found: value})
				msg := err.Error()
				assert.Equal(t, "writefence: wire: expected writefence/v1 found "+escape.String(value), msg, op)
				assert.Less(t, len(msg), 400, "%s: the message is bounded", op)
				for i := 0; i < len(msg); i++ {
					assert.True(t, msg[i] >= 0x20 && msg[i] < 0x7f, "%s: byte %#x at %d", op, msg[i], i)
				}
			}
			gets, puts, _ := callsOf(s, brandKey)
			assert.Equal(t, [2]int{3, 0}, [2]int{gets, puts}, "one read each, no write")
		})
	}
}

// TestBrandEmptyValue: an empty value is another value, not absent, and its
// message says so unambiguously.
func TestBrandEmptyValue(t *testing.T) {
	ctx := context.Background()
	s := countedByKey(&writefence.MemStore{})
	_, err := s.Unwrap().PutIfVersion(ctx, brandKey, nil, "")
	require.NoError(t, err)
	err = claimBrand(ctx, &writefence.Fence{Store: s})
	requireWire(t, err, writefence.WireError{Key: brandKey, Expected: defaults.Identity})
	assert.Equal(t, `writefence: wire: expected writefence/v1 found ""`, err.Error())
	assert.Equal(t, `\"\"`, escape.String(`""`), "no value prints as the empty value's form")
}

// TestBrandFailuresPassThrough: a failure that is not a refusal is returned
// wrapped, never as a refusal or as absent, a permission error after one
// attempt; a done ctx is returned as is.
func TestBrandFailuresPassThrough(t *testing.T) {
	s := countedByKey(&writefence.MemStore{}, fakestore.Fault{Op: fakestore.Get, Err: errDenied})
	b := &writefence.Fence{Store: s}
	_, installErr := b.ClaimBrand(t.Context())
	for op, err := range map[string]error{"claim": claimBrand(t.Context(), b), "verify": b.VerifyBrand(t.Context()), "install": installErr} {
		require.ErrorIs(t, err, errDenied, op)
		assert.NotErrorIs(t, err, writefence.ErrWire, op)
		assert.NotErrorIs(t, err, writefence.ErrNotFound, op)
		want := "writefence: brand claim writefence/_brand: read: access denied: permission denied"
		if op == "verify" {
			want = "writefence: brand: read writefence/_brand: access denied: permission denied"
		}
		assert.Equal(t, want, err.Error(), op)
	}
	gets, puts, _ := callsOf(s, brandKey)
	assert.Equal(t, [2]int{3, 0}, [2]int{gets, puts}, "one read each: a permission refusal is never retried")

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	b = &writefence.Fence{Store: &writefence.MemStore{}}
	_, installErr = b.ClaimBrand(ctx)
	for op, err := range map[string]error{"claim": claimBrand(ctx, b), "verify": b.VerifyBrand(ctx), "install": installErr} {
		assert.Equal(t, context.Canceled, err, op)
	}
}

// TestBrandClaimSettlesLostReply: the confirming read decides a claim whose
// write reply was lost.
func TestBrandClaimSettlesLostReply(t *testing.T) {
	ctx := context.Background()
	s := countedByKey(&writefence.MemStore{}, lostReplies(0))
	require.NoError(t, claimBrand(ctx, &writefence.Fence{Store: s}), "the write landed and the read shows it")

	s = countedByKey(&writefence.MemStore{}, fakestore.Fault{Op: fakestore.Put, Err: errDenied})
	err := claimBrand(ctx, &writefence.Fence{Store: s})
	require.ErrorIs(t, err, errDenied)
	assert.NotErrorIs(t, err, writefence.ErrWire)
	assert.NotErrorIs(t, err, writefence.ErrNotFound)
	assert.Equal(t, "access denied: permission denied", err.Error())
	gets, puts, _ := callsOf(s, brandKey)
	assert.Equal(t, [2]int{1, 1}, [2]int{gets, puts}, "no retry")
}

func TestBrandInvalid(t *testing.T) {
	ctx := context.Background()
	for name, b := range map[string]*writefence.Fence{
		"store":    {},
		"identity": {Store: &writefence.MemStore{}, Identity: strings.Repeat("x", 256)},
		"prefix":   {Store: &writefence.MemStore{}, Prefix: strings.Repeat("k", keys.MaxKeyLen+1)},
	} {
		_, installErr := b.ClaimBrand(ctx)
		for op, err := range map[string]error{"claim": claimBrand(ctx, b), "verify": b.VerifyBrand(ctx), "install": installErr} {
			var ia *writefence.InvalidArgumentError
			require.ErrorAs(t, err, &ia, "%s %s", name, op)
			assert.Equal(t, name, ia.Arg)
		}
	}
}

// claimBrand claims the brand through f and returns only the error.
func claimBrand(ctx context.Context, f *writefence.Fence) error {
	_, err := f.ClaimBrand(ctx)
	return err
}

// The Fence's brand check, per mode, on a counting MemStore.

func putBrand(t *testing.T, s fakestore.Store, value string) {
	t.Helper()
	ctx := context.Background()
	_, v, err := s.Unwrap().Get(ctx, brandKey)
	if err != nil {
		require.ErrorIs(t, err, writefence.ErrNotFound)
	}
	_, err = s.Unwrap().PutIfVersion(ctx, brandKey, []byte(value), v)
	require.NoError(t, err)
}

func TestFenceBrandVerifyOnce(t *testing.T) {
	ctx := context.Background()
	s := countedByKey(&writefence.MemStore{})
	f := &writefence.Fence{Store: s, Brand: writefence.BrandVerify}
	rec := mustKey(t, "wal", "0")

	err := f.Push(ctx, "wal", "0", "w", 1, []byte("x"))
	requireWire(t, err, writefence.WireError{Key: brandKey, Expected: defaults.Identity, Absent: true})
	putBrand(t, s, defaults.Identity)
	assert.ErrorIs(t, f.Push(ctx, "wal", "0", "w", 1, []byte("x")), writefence.ErrWire, "a refusal is final for the Fence")
	_, _, _, err = f.Latest(ctx, "wal", "0")
	assert.ErrorIs(t, err, writefence.ErrWire)
	gets, puts, _ := callsOf(s, brandKey)
	assert.Equal(t, [2]int{1, 0}, [2]int{gets, puts}, "one read, the refusal remembered")
	gets, puts, _ = callsOf(s, rec)
	assert.Equal(t, [2]int{0, 0}, [2]int{gets, puts}, "the record is never touched")

	f = &writefence.Fence{Store: s, Brand: writefence.BrandVerify}
	for epoch := uint64(1); epoch <= 3; epoch++ {
		require.NoError(t, f.Push(ctx, "wal", "0", "w", epoch, []byte("x")))
	}
	_, _, _, err = f.Latest(ctx, "wal", "0")
	require.NoError(t, err)
	gets, puts, _ = callsOf(s, brandKey)
	assert.Equal(t, [2]int{2, 0}, [2]int{gets, puts}, "a new Fence verifies once, and never writes the brand")
}

func TestFenceBrandClaimOnce(t *testing.T) {
	ctx := context.Background()
	s := countedByKey(&writefence.MemStore{})
	f := &writefence.Fence{Store: s, Brand: writefence.BrandClaim}

	_, _, _, err := f.Latest(ctx, "wal", "0")
	require.ErrorIs(t, err, writefence.ErrNotFound, "Latest does not claim, nor refuse an unclaimed store")
	gets, puts, _ := callsOf(s, brandKey)
	assert.Equal(t, [2]int{0, 0}, [2]int{gets, puts})

	for epoch := uint64(1); epoch <= 3; epoch++ {
		require.NoError(t, f.Push(ctx, "wal", "0", "w", epoch, []byte("x")))
	}
	assert.Equal(t, defaults.Identity, valueOf(t, s, brandKey))
	gets, puts, _ = callsOf(s, brandKey)
	assert.Equal(t, [2]int{2, 1}, [2]int{gets, puts}, "one claim: read, write, confirming read")

	foreign := countedByKey(&writefence.MemStore{})
	putBrand(t, foreign, "other/v1")
	f = &writefence.Fence{Store: foreign, Brand: writefence.BrandClaim}
	err = f.Push(ctx, "wal", "0", "w", 1, []byte("x"))
	requireWire(t, err, writefence.WireError{Key: brandKey, Expected: defaults.Identity, Found: "other/v1"})
	_, _, _, err = f.Latest(ctx, "wal", "0")
	require.ErrorIs(t, err, writefence.ErrWire, "Latest returns the claim's refusal")
	require.ErrorIs(t, f.Push(ctx, "wal", "0", "w", 1, []byte("x")), writefence.ErrWire)
	gets, puts, _ = callsOf(foreign, brandKey)
	assert.Equal(t, [2]int{1, 0}, [2]int{gets, puts}, "refused once, never retried")
	_, puts, _ = callsOf(foreign, mustKey(t, "wal", "0"))
	assert.Zero(t, puts)
}

func TestFenceBrandVerifyAlways(t *testing.T) {
	ctx := context.Background()
	s := countedByKey(&writefence.MemStore{})
	putBrand(t, s, defaults.Identity)
	f := &writefence.Fence{Store: s, Brand: writefence.BrandVerifyAlways}

	require.NoError(t, f.Push(ctx, "wal", "0", "w", 1, []byte("x")))
	require.NoError(t, f.Push(ctx, "wal", "0", "w", 2, []byte("x")))
	_, _, _, err := f.Latest(ctx, "wal", "0")
	require.NoError(t, err)
	gets, _, _ := callsOf(s, brandKey)
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

// TestFenceBrandVerifyAlwaysReadFails: on a store that cannot check the
// brand inside its write, BrandVerifyAlways reads the brand key right
// before each write; a failure of that read is a read's: retried, nothing
// sent, and when it persists the push fails with that failure, never as a
// write whose outcome is unknown, having written nothing.
func TestFenceBrandVerifyAlwaysReadFails(t *testing.T) {
	ctx := context.Background()
	s := countedByKey(&writefence.MemStore{})
	putBrand(t, s, defaults.Identity)
	f := &writefence.Fence{Store: s, Brand: writefence.BrandVerifyAlways, MaxAttempts: 3, RetryDelay: time.Microsecond}
	require.NoError(t, f.Push(ctx, "wal", "0", "w", 1, []byte("one")))
	shard := mustKey(t, "wal", "0")
	_, puts0, _ := callsOf(s, shard)

	errReset := errors.New("connection reset")
	s.Inject(fakestore.Fault{Op: fakestore.Get, Key: brandKey, Times: 1, Err: errReset})
	require.NoError(t, f.Push(ctx, "wal", "0", "w", 2, []byte("two")), "one failed brand read is retried")
	_, puts, _ := callsOf(s, shard)
	assert.Equal(t, 1, puts-puts0, "one write, after the brand read that passed")

	s.Inject(fakestore.Fault{Op: fakestore.Get, Key: brandKey, Err: errReset})
	err := f.Push(ctx, "wal", "0", "w", 3, []byte("three"))
	require.ErrorIs(t, err, errReset)
	assert.NotErrorIs(t, err, writefence.ErrOutcomeUnknown, "nothing was sent")
	_, puts2, _ := callsOf(s, shard)
	assert.Equal(t, puts, puts2, "no write without a brand read that passed")
	requireLatest(t, &writefence.Fence{Store: s}, 2, "w", "two")
}

// TestFenceBrandTransientNotKept: a failure that is not a refusal is
// returned by that push and checked again by the next.
func TestFenceBrandTransientNotKept(t *testing.T) {
	ctx := context.Background()
	for _, mode := range []writefence.BrandMode{writefence.BrandVerify, writefence.BrandClaim} {
		s := countedByKey(&writefence.MemStore{})
		putBrand(t, s, defaults.Identity)
		s.Inject(fakestore.Fault{Op: fakestore.Get, Key: brandKey, Times: 1, Err: errDenied})
		f := &writefence.Fence{Store: s, Brand: mode}
		err := f.Push(ctx, "wal", "0", "w", 1, []byte("x"))
		require.ErrorIs(t, err, errDenied)
		assert.NotErrorIs(t, err, writefence.ErrWire)
		require.NoError(t, f.Push(ctx, "wal", "0", "w", 1, []byte("x")))
		require.NoError(t, f.Push(ctx, "wal", "0", "w", 2, []byte("x")))
		gets, _, _ := callsOf(s, brandKey)
		assert.Equal(t, 2, gets, "mode %d: the failure was not kept, the success was", mode)
	}
}

// TestFenceBrandOnceConcurrent: concurrent first pushes share one check;
// a caller waiting for it honours its own ctx.
func TestFenceBrandOnceConcurrent(t *testing.T) {
	s := countedByKey(&writefence.MemStore{})
	putBrand(t, s, defaults.Identity)
	held := &fakestore.Gate{} // holds the brand's reads
	s.Inject(fakestore.Fault{Op: fakestore.Get, Key: brandKey, Gate: held})
	f := &writefence.Fence{Store: s, Brand: writefence.BrandVerify}
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			assert.NoError(t, f.Push(context.Background(), "wal", string(rune('a'+i)), "w", 1, []byte("x")))
		})
	}
	<-held.Arrived()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	assert.Equal(t, context.DeadlineExceeded, f.Push(ctx, "wal", "late", "w", 1, []byte("x")), "a waiter gives up with its ctx")
	held.Open()
	wg.Wait()
	gets, _, _ := callsOf(s, brandKey)
	assert.Equal(t, 1, gets, "sixteen first pushes, one brand read")
}

// TestFenceBrandRecordIdentityStillChecked: a matching brand does not stand
// in for the record-level identity, which every push checks.
func TestFenceBrandRecordIdentityStillChecked(t *testing.T) {
	ctx := context.Background()
	s := countedByKey(&writefence.MemStore{})
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
	s := countedByKey(&writefence.MemStore{})
	f := &writefence.Fence{Store: s, Prefix: "tenant/", Identity: "mine/v1", Brand: writefence.BrandClaim}
	require.NoError(t, f.Push(ctx, "wal", "0", "w", 1, []byte("x")))
	assert.Equal(t, "mine/v1", valueOf(t, s, "tenant/_brand"), "the brand lives under the Fence's prefix")
	gets, puts, _ := callsOf(s, brandKey)
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
	s := countedByKey(&writefence.MemStore{})
	putBrand(t, s, defaults.Identity)
	// A BrandedPutter over s: it reads the brand, then writes. Not
	// atomic, which the Fence cannot tell; the real adapter's atomicity
	// is tested against Valkey.
	branded := fakestore.New(s, fakestore.Options{PutIfBranded: func(ctx context.Context, brandKey, identity, key string, parts [][]byte, expect string) (string, error) {
		brand := &writefence.Fence{Store: s, Identity: identity, Prefix: strings.TrimSuffix(brandKey, "_brand")}
		if err := brand.VerifyBrand(ctx); err != nil {
			return "", err
		}
		return s.PutIfVersion(ctx, key, bytes.Join(parts, nil), expect)
	}})
	f := &writefence.Fence{Store: branded, Brand: writefence.BrandVerifyAlways}
	require.NoError(t, f.Push(ctx, "wal", "0", "w", 1, []byte("x")))
	require.NoError(t, f.Seal(ctx, "wal", "0", "w", 2))
	gets, _, _ := callsOf(s, brandKey)
	assert.Equal(t, 2, gets, "the brand is read by the write's own check only")
	assert.Equal(t, int64(2), branded.Calls(fakestore.PutIfBranded))

	putBrand(t, s, "migrated/v2")
	err := f.Push(ctx, "wal", "0", "w", 3, []byte("x"))
	requireWire(t, err, writefence.WireError{Key: brandKey, Expected: defaults.Identity, Found: "migrated/v2"})
	_, _, _, err = f.Latest(ctx, "wal", "0")
	require.ErrorIs(t, err, writefence.ErrWire, "Latest reads the brand itself")

	for _, mode := range []writefence.BrandMode{writefence.BrandVerify, writefence.BrandClaim} {
		before := branded.Calls(fakestore.PutIfBranded)
		_ = (&writefence.Fence{Store: branded, Brand: mode}).Push(ctx, "wal", "1", "w", 1, nil)
		assert.Equal(t, before, branded.Calls(fakestore.PutIfBranded), "mode %d writes with PutIfVersion", mode)
	}
}

// TestBrandReadRetried: the brand's read before a Fence's first write
// (BrandVerify) and before a read (Check, Latest, Inspect under
// BrandVerifyAlways) or a Collect's first write is a read's: one transient failure is retried after
// a back-off, not the end of the call (promise 6).
func TestBrandReadRetried(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		mode writefence.BrandMode
		call func(f *writefence.Fence) error
	}{
		{"verify, first push", writefence.BrandVerify, func(f *writefence.Fence) error {
			return f.Push(ctx, "wal", "1", "w", 1, []byte("one"))
		}},
		{"always, check", writefence.BrandVerifyAlways, func(f *writefence.Fence) error {
			return f.Check(ctx, "wal", "0", "w", 1)
		}},
		{"always, latest", writefence.BrandVerifyAlways, func(f *writefence.Fence) error {
			_, _, _, err := f.Latest(ctx, "wal", "0")
			return err
		}},
		{"always, inspect", writefence.BrandVerifyAlways, func(f *writefence.Fence) error {
			_, err := f.Inspect(ctx, "wal", "0")
			return err
		}},
		{"verify brand", 0, func(f *writefence.Fence) error {
			return f.VerifyBrand(ctx)
		}},
		{"always, collect", writefence.BrandVerifyAlways, func(f *writefence.Fence) error {
			f.Blobs = &writefence.MemStore{} // the store counted declares none
			_, err := f.Collect(ctx, "wal", "0", writefence.GCOptions{})
			return err
		}},
		{"always, put blob", writefence.BrandVerifyAlways, func(f *writefence.Fence) error {
			f.Blobs = &writefence.MemStore{} // the store counted declares none
			_, err := f.PutBlob(ctx, "wal", "0", "w", 1, strings.NewReader("blob"))
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := countedByKey(&writefence.MemStore{})
			putBrand(t, s, defaults.Identity)
			require.NoError(t, (&writefence.Fence{Store: s}).Push(ctx, "wal", "0", "w", 1, []byte("zero")))
			reads := s.Calls(fakestore.Get, brandKey)
			s.Inject(fakestore.Fault{Op: fakestore.Get, Key: brandKey, Times: 1, Err: errors.New("connection reset")})
			f := &writefence.Fence{Store: s, Brand: tc.mode, RetryDelay: time.Microsecond}
			require.NoError(t, tc.call(f), "one failed brand read is retried")
			assert.GreaterOrEqual(t, s.Calls(fakestore.Get, brandKey)-reads, int64(2), "the failed read, then its retry")
		})
	}
}

// secondBrandGetFails is a store that fails the second read of the brand
// key, as a throttled read does, and offers Get and PutIfVersion alone.
type secondBrandGetFails struct {
	writefence.ConditionalStore
	mu    sync.Mutex
	reads int
}

func (s *secondBrandGetFails) Get(ctx context.Context, key string) ([]byte, string, error) {
	if key == brandKey {
		s.mu.Lock()
		s.reads++
		n := s.reads
		s.mu.Unlock()
		if n == 2 {
			return nil, "", errors.New("connection reset")
		}
	}
	return s.ConditionalStore.Get(ctx, key)
}

// TestBrandClaimConfirmRetried: under BrandClaim, the first Push claims
// the brand and reads it back; a throttled read back is retried as the
// brand's read a write makes (promise 6), not the end of the Push.
func TestBrandClaimConfirmRetried(t *testing.T) {
	ctx := context.Background()
	s := &secondBrandGetFails{ConditionalStore: &writefence.MemStore{}}
	f := &writefence.Fence{Store: s, Brand: writefence.BrandClaim, RetryDelay: time.Microsecond}
	require.NoError(t, f.Push(ctx, "wal", "0", "w", 1, []byte("zero")), "one failed read of the brand is retried")
	s.mu.Lock()
	defer s.mu.Unlock()
	assert.GreaterOrEqual(t, s.reads, 3, "the claim's read, the failed read back, its retry")
}
