package writefence_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/defaults"
	"github.com/writefence/writefence/internal/fakeclock"
	"github.com/writefence/writefence/internal/fakestore"
	"github.com/writefence/writefence/internal/hook"
	"github.com/writefence/writefence/internal/keys"
)

// writePath is one way a Fence writes a record, with its set-up.
type writePath struct {
	name  string
	setup func(t *testing.T, s writefence.ConditionalStore) (version string)
	call  func(ctx context.Context, f *writefence.Fence, version string) error
}

// writeOps are the ways a Fence writes a record. Each runs against
// shard ("wal", "0"), whose record the set-up left at version v (a corrupt
// record for settle, which may only replace one).
var writeOps = []writePath{
	{"push", pushedRecord, func(ctx context.Context, f *writefence.Fence, _ string) error {
		return f.Push(ctx, "wal", "0", "new", 9, []byte("new payload"))
	}},
	{"seal", pushedRecord, func(ctx context.Context, f *writefence.Fence, _ string) error {
		return f.Seal(ctx, "wal", "0", "new", 9)
	}},
	{"update", pushedRecord, func(ctx context.Context, f *writefence.Fence, _ string) error {
		return f.Update(ctx, "wal", "0", "new", 9, func(current []byte) ([]byte, error) { return append(current, '+'), nil })
	}},
	{"settle", corruptRecord, func(ctx context.Context, f *writefence.Fence, version string) error {
		return f.Settle(ctx, "wal", "0", writefence.Settlement{Version: version, Writer: "op", Epoch: 9, Payload: []byte("restored"), Floor: 3})
	}},
}

// pushedRecord pushes a sound record at epoch 3 and returns its version.
func pushedRecord(t *testing.T, s writefence.ConditionalStore) string {
	t.Helper()
	require.NoError(t, (&writefence.Fence{Store: s}).Push(t.Context(), "wal", "0", "old", 3, []byte("old payload")))
	_, v, err := s.Get(t.Context(), mustKey(t, "wal", "0"))
	require.NoError(t, err)
	return v
}

// corruptRecord writes bytes that are no record and returns their version.
func corruptRecord(t *testing.T, s writefence.ConditionalStore) string {
	t.Helper()
	v, err := s.PutIfVersion(t.Context(), mustKey(t, "wal", "0"), []byte("garbage"), "")
	require.NoError(t, err)
	return v
}

// requireUntouched fails unless the shard's record is still at version.
// requireRefused runs op through f, which must refuse it with want before
// writing, and checks that the Observer saw the refusal as outcome.
func requireRefused(t *testing.T, op writePath, s writefence.ConditionalStore, version string, f *writefence.Fence, want error, outcome string) {
	t.Helper()
	obs := &outcomeCounter{}
	f.Observer = obs.observe
	require.ErrorIs(t, op.call(t.Context(), f, version), want)
	requireUntouched(t, s, version)
	assert.Equal(t, op.name, obs.last().Op)
	assert.Equal(t, outcome, eventOutcome(obs.last()))
}

func requireUntouched(t *testing.T, s writefence.ConditionalStore, version string) {
	t.Helper()
	_, v, err := s.Get(t.Context(), mustKey(t, "wal", "0"))
	require.NoError(t, err)
	require.Equal(t, version, v, "the record was overwritten")
}

// TestEveryWritePathIsGuarded: Seal and Settle refuse exactly where Push
// refuses (a foreign brand, an unbranded store, a store that fails the
// probe), and the Observer sees each of them with its own operation.
func TestEveryWritePathIsGuarded(t *testing.T) {
	for _, op := range writeOps {
		t.Run(op.name, func(t *testing.T) {
			t.Run("foreign brand", func(t *testing.T) {
				mem := &writefence.MemStore{}
				v := op.setup(t, mem)
				_, err := (&writefence.Fence{Store: mem, Identity: "other/v1"}).ClaimBrand(t.Context())
				require.NoError(t, err)
				requireRefused(t, op, mem, v, &writefence.Fence{Store: mem, Brand: writefence.BrandVerify}, writefence.ErrWire, "wire")
			})
			t.Run("unbranded store", func(t *testing.T) {
				mem := &writefence.MemStore{}
				v := op.setup(t, mem)
				f := &writefence.Fence{Store: mem, Brand: writefence.BrandVerifyAlways}
				require.ErrorIs(t, op.call(t.Context(), f, v), writefence.ErrWire)
				requireUntouched(t, mem, v)
			})
			t.Run("untrusted store", func(t *testing.T) {
				s := ignoring(&writefence.MemStore{})
				v := op.setup(t, s)
				requireRefused(t, op, s, v, &writefence.Fence{Store: s, Probe: true}, writefence.ErrUntrustedStore, "failed")
			})
			t.Run("landed", func(t *testing.T) {
				mem := &writefence.MemStore{}
				v := op.setup(t, mem)
				_, err := (&writefence.Fence{Store: mem}).ClaimBrand(t.Context())
				require.NoError(t, err)
				obs := &outcomeCounter{}
				f := &writefence.Fence{Store: mem, Brand: writefence.BrandVerify, Probe: true, Observer: obs.observe}
				require.NoError(t, op.call(t.Context(), f, v))
				e := obs.last()
				assert.False(t, e.Start.IsZero(), "the event carries the write's start")
				assert.Equal(t, writefence.WriteEvent{Op: op.name, Key: mustKey(t, "wal", "0"), Writer: e.Writer, Epoch: 9,
					Attempt: 1, Start: e.Start}, e)
			})
		})
	}
}

// TestWritePathsShareRetries: conflicts are retried and observed, and a
// lost reply is resolved by reading, on every write path.
func TestWritePathsShareRetries(t *testing.T) {
	for _, op := range writeOps {
		t.Run(op.name, func(t *testing.T) {
			mem := &writefence.MemStore{}
			v := op.setup(t, mem)
			obs := &outcomeCounter{}
			f := &writefence.Fence{Store: counted(mem, conflicts(2), lostReplies(1)), Observer: obs.observe}
			require.NoError(t, op.call(t.Context(), f, v))
			assert.Equal(t, 2, obs.counts["conflict-retried"])
			assert.Equal(t, "landed", eventOutcome(obs.last()))
			e, _, _, err := f.Latest(t.Context(), "wal", "0")
			require.NoError(t, err)
			assert.Equal(t, uint64(9), e)
		})
	}
}

// damageable makes a record of MemStore look damaged in place: the version
// stays while the bytes change, as a file edited on disk or a Valkey value
// edited by hand would. It follows ConditionalStore's contract for such
// stores: damaged bytes are reported with a version of their own, and only
// a write conditioned on that version replaces them.
type damageable struct {
	writefence.MemStore
	mu      sync.Mutex        // guards damaged
	damaged map[string][]byte // key -> the damaged bytes
	puts    int
}

func (s *damageable) damage(key string, b []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.damaged == nil {
		s.damaged = make(map[string][]byte)
	}
	s.damaged[key] = b
}

func fakeDamagedVersion(b []byte) string {
	sum := sha256.Sum256(b)
	return "damaged-" + hex.EncodeToString(sum[:8])
}

func (s *damageable) Get(ctx context.Context, key string) ([]byte, string, error) {
	s.mu.Lock()
	b, ok := s.damaged[key]
	s.mu.Unlock()
	if ok {
		return nil, "", &writefence.CorruptError{Key: key, Version: fakeDamagedVersion(b), Check: "store checksum"}
	}
	return s.MemStore.Get(ctx, key)
}

func (s *damageable) PutIfVersion(ctx context.Context, key string, data []byte, expect string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.puts++
	if b, ok := s.damaged[key]; ok {
		if expect != fakeDamagedVersion(b) {
			return "", &writefence.CorruptError{Key: key, Version: fakeDamagedVersion(b), Check: "store checksum"}
		}
		delete(s.damaged, key)
		_, current, err := s.MemStore.Get(ctx, key)
		if err != nil {
			return "", err
		}
		expect = current
	}
	return s.MemStore.PutIfVersion(ctx, key, data, expect)
}

// TestDamageInPlaceIsNeverOverwritten: a fence that remembers the version
// of a record it wrote skips its read; on a store whose version survives
// damage in place, the store's refusal stops the write, it is final (no
// retry, not an unknown outcome), and Settle replaces exactly the damage.
func TestDamageInPlaceIsNeverOverwritten(t *testing.T) {
	ctx := t.Context()
	s := &damageable{}
	obs := &outcomeCounter{}
	f := &writefence.Fence{Store: s, Observer: obs.observe}
	key := mustKey(t, "wal", "0")
	require.NoError(t, f.Push(ctx, "wal", "0", "a", 1, []byte("one")))
	s.damage(key, []byte("one, edited on disk"))
	puts := s.puts

	err := f.Push(ctx, "wal", "0", "a", 2, []byte("two"))
	var ce *writefence.CorruptError
	require.ErrorAs(t, err, &ce)
	require.NotErrorIs(t, err, writefence.ErrOutcomeUnknown)
	assert.Equal(t, puts+1, s.puts, "one write, refused by the store, and no retry")
	assert.Equal(t, "corrupt", eventOutcome(obs.last()))

	// Nothing remembered any more: the next push reads and is refused
	// before it writes.
	require.ErrorIs(t, f.Push(ctx, "wal", "0", "a", 3, []byte("three")), writefence.ErrCorrupt)
	require.ErrorIs(t, f.Seal(ctx, "wal", "0", "b", 3), writefence.ErrCorrupt)
	assert.Equal(t, puts+1, s.puts)

	info, err := f.Inspect(ctx, "wal", "0")
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, fakeDamagedVersion([]byte("one, edited on disk")), info.Version)
	require.NoError(t, f.Settle(ctx, "wal", "0", writefence.Settlement{Version: info.Version, Writer: "op", Epoch: 4, Payload: []byte("restored"), Floor: 1}))
	requireLatest(t, f, 4, "op", "restored")
}

// damagePayload rewrites the record of ("wal", "0") with one payload byte
// flipped under an intact header, and returns the new version.
func damagePayload(t *testing.T, s writefence.ConditionalStore) string {
	t.Helper()
	key := mustKey(t, "wal", "0")
	data, v, err := s.Get(t.Context(), key)
	require.NoError(t, err)
	data[len(data)-1] ^= 0xff
	v, err = s.PutIfVersion(t.Context(), key, data, v)
	require.NoError(t, err)
	return v
}

// TestRefusedWritesAreFinal: a store that refuses a write (another wire
// identity, damage) is not retried and not reported as an unknown outcome.
func TestRefusedWritesAreFinal(t *testing.T) {
	for _, refusal := range []error{
		&writefence.WireError{Key: "brand", Expected: defaults.Identity, Found: "other/v1"},
		&writefence.CorruptError{Key: "k", Version: "v", Check: "checksum"},
		&fs.PathError{Op: "open", Path: "objects/x", Err: fs.ErrPermission},
		errors.ErrUnsupported,
	} {
		t.Run(fmt.Sprintf("%T", refusal), func(t *testing.T) {
			// Every write is refused, having written nothing, as a Valkey
			// store does when the brand inside its transaction is foreign.
			s := counted(&writefence.MemStore{}, fakestore.Fault{Op: fakestore.Put, Err: fmt.Errorf("store: %w", refusal)})
			err := (&writefence.Fence{Store: s}).Push(t.Context(), "wal", "0", "a", 1, []byte("x"))
			require.True(t, errors.Is(err, refusal), "%v", err)
			require.NotErrorIs(t, err, writefence.ErrOutcomeUnknown)
			assert.Equal(t, int64(1), s.Calls(fakestore.Put))
		})
	}
}

// waits returns a context whose engine back-offs are recorded instead of
// slept.
func waits(ctx context.Context) (context.Context, *[]time.Duration) {
	var mu sync.Mutex
	var got []time.Duration
	return hook.With(ctx, &hook.Hooks{Wait: func(_ context.Context, _ int, d time.Duration) error {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, d)
		return nil
	}}), &got
}

// TestEveryRetryBacksOff: a failure that may pass (a network error, a
// throttled request) is retried after a back-off, not at once, up to
// MaxAttempts; its cause stays in the error, and a write it hid makes the
// outcome unknown. The same holds for the lease's writes, which go through
// the same engine: a lease renewal that cannot reach the store is not
// reported as a conflict.
func TestEveryRetryBacksOff(t *testing.T) {
	// Every write fails, having written nothing or not (the error does
	// not say), as on a store that cannot be reached.
	errNet := errors.New("connection refused")
	unreachable := fakestore.Fault{Op: fakestore.Put, Err: errNet}
	s := counted(&writefence.MemStore{}, unreachable)
	ctx, got := waits(t.Context())
	f := &writefence.Fence{Store: s, MaxAttempts: 5}
	err := f.Push(ctx, "wal", "0", "a", 1, []byte("x"))
	require.ErrorIs(t, err, errNet, "the cause is kept")
	require.ErrorIs(t, err, writefence.ErrOutcomeUnknown)
	require.NotErrorIs(t, err, writefence.ErrConflict)
	assert.Equal(t, int64(5), s.Calls(fakestore.Put))
	require.Len(t, *got, 4, "a back-off before every retry")
	for i, d := range *got {
		assert.Positive(t, d, "back-off %d", i)
	}

	mem := &writefence.MemStore{}
	lease := &writefence.Lease{Fence: &writefence.Fence{Store: mem}, Name: "n", Holder: "h", TTL: time.Minute}
	_, err = lease.Acquire(t.Context())
	require.NoError(t, err)
	s = counted(mem, unreachable) // the same record, the same version
	lease.Fence.Store, lease.Fence.MaxAttempts = s, 5
	ctx, got = waits(t.Context())
	err = lease.Renew(ctx)
	require.ErrorIs(t, err, errNet)
	require.NotErrorIs(t, err, writefence.ErrConflict, "an unreachable store is not a conflict")
	assert.Equal(t, int64(5), s.Calls(fakestore.Put))
	assert.Len(t, *got, 4)
}

// TestPermissionRefusalIsFinal: a refusal of the caller's credentials is
// reported as what it is after one attempt: never retried, never an
// unknown outcome.
func TestPermissionRefusalIsFinal(t *testing.T) {
	denied := &writefence.StoreError{Op: "s3 put", Key: "k", Err: fmt.Errorf("%w: access denied", fs.ErrPermission)}
	s := counted(&writefence.MemStore{}, fakestore.Fault{Op: fakestore.Put, Err: denied})
	ctx, got := waits(t.Context())
	err := (&writefence.Fence{Store: s}).Push(ctx, "wal", "0", "a", 1, []byte("x"))
	require.ErrorIs(t, err, fs.ErrPermission)
	require.NotErrorIs(t, err, writefence.ErrOutcomeUnknown)
	assert.Equal(t, int64(1), s.Calls(fakestore.Put))
	assert.Empty(t, *got)
}

// TestCancelAfterUnknownOutcome: a write whose reply was lost, then a
// cancelled ctx: the error matches ctx.Err() and ErrOutcomeUnknown both.
func TestCancelAfterUnknownOutcome(t *testing.T) {
	s := counted(&writefence.MemStore{}, lostReplies(0))
	ctx, cancel := context.WithCancel(t.Context())
	ctx = hook.With(ctx, &hook.Hooks{Wait: func(ctx context.Context, _ int, _ time.Duration) error {
		cancel()
		return ctx.Err()
	}})
	err := (&writefence.Fence{Store: s}).Push(ctx, "wal", "0", "a", 1, []byte("x"))
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorIs(t, err, writefence.ErrOutcomeUnknown)
	assert.Equal(t, int64(1), s.Calls(fakestore.Put))

	// Without a write in flight, the cancellation is ctx.Err() itself.
	ctx, cancel = context.WithCancel(t.Context())
	cancel()
	err = (&writefence.Fence{Store: &writefence.MemStore{}}).Push(ctx, "wal", "0", "a", 1, []byte("x"))
	require.Equal(t, context.Canceled, err)
}

// contentVersioned is a store whose version is a hash of the bytes, as S3's
// ETag is: the same bytes written twice have the same version.
type contentVersioned struct {
	mu   sync.Mutex
	data map[string][]byte
}

func contentVersion(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

func (s *contentVersioned) raw(key string, b []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.data == nil {
		s.data = map[string][]byte{}
	}
	s.data[key] = append([]byte{}, b...)
}

func (s *contentVersioned) Get(ctx context.Context, key string) ([]byte, string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.data[key]
	if !ok {
		return nil, "", writefence.ErrNotFound
	}
	return append([]byte{}, b...), contentVersion(b), nil
}

func (s *contentVersioned) PutIfVersion(ctx context.Context, key string, data []byte, expect string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.data[key]
	if ok != (expect != "") || ok && contentVersion(b) != expect {
		return "", writefence.ErrConflict
	}
	if s.data == nil {
		s.data = map[string][]byte{}
	}
	s.data[key] = append([]byte{}, data...)
	return contentVersion(data), nil
}

// TestUnknownOutcomeIsOneError: a write whose reply was lost and whose
// every retry then conflicts ends with one error, an unknown outcome that
// keeps the cause that hid it, and never also matches ErrConflict: a
// caller that tests ErrConflict first must not conclude nothing was
// written (promise 5).
func TestUnknownOutcomeIsOneError(t *testing.T) {
	// The first write fails with an error that hides its outcome (it
	// writes nothing), and the later writes all lose a race: what a
	// writer sees when its reply was lost and then every retry conflicts.
	key := mustKey(t, "wal", "0")
	s := counted(&writefence.MemStore{},
		fakestore.Fault{Op: fakestore.Put, Times: 1, Err: &writefence.StoreError{Op: "test put", Key: key, Err: errors.New("connection reset by peer")}},
		fakestore.Fault{Op: fakestore.Put, Err: &writefence.StoreError{Op: "test put", Key: key, Err: writefence.ErrConflict}})
	f := &writefence.Fence{Store: s, MaxAttempts: 4, RetryDelay: time.Microsecond}
	err := f.Push(t.Context(), "wal", "0", "a", 1, []byte("x"))
	require.ErrorIs(t, err, writefence.ErrOutcomeUnknown)
	assert.NotErrorIs(t, err, writefence.ErrConflict)
	var unknown *writefence.OutcomeUnknownError
	require.ErrorAs(t, err, &unknown)
	assert.Contains(t, unknown.Err.Error(), "connection reset by peer", "the cause is kept")
	assert.Contains(t, err.Error(), "then 4 attempts, the last: test put")
	assert.Equal(t, int64(4), s.Calls(fakestore.Put))
}

// The engine takes a record that is what the call's last failed write sent
// (byte for byte, or but for a horizon Collect raised) for that write,
// landed. These tests attack that rule: a record set back to those bytes,
// a record read as a head, a seal and a settle whose replies were lost.

// strayScene returns a MemStore on a fake clock and a Fence over it, on
// which writer a committed blob one at epoch 1 and then uploaded, at epoch
// 2, blob two and a stray blob it never commits, both two hours old: a
// Collect with an hour's grace raises the record's horizon over the stray
// and deletes it.
func strayScene(t *testing.T) (mem *writefence.MemStore, other *writefence.Fence, one, two, stray writefence.BlobRef) {
	t.Helper()
	clock := &fakeclock.Clock{}
	mem = &writefence.MemStore{Clock: clock.Now}
	other = &writefence.Fence{Store: mem}
	one = committedBlob(t, other, "a", 1, "one")
	two = putBlob(t, other, "a", 2, "two")
	stray = putBlob(t, other, "a", 2, "stray")
	clock.Advance(2 * time.Hour)
	return mem, other, one, two, stray
}

// Promise 29: a write whose reply was lost, then another writer's write
// that this Fence sees, then the record set back to exactly what the
// call sent (a restore): the retry finds its own bytes, but below what
// the Fence saw since, and does not return nil; it writes nothing again.
// Also when the bytes set back carry a horizon Collect raised.
func TestPromise29_LostReplyThenSetBackToThisCallsBytes(t *testing.T) {
	for _, tc := range []struct {
		name    string
		horizon bool // the record set back is the call's bytes with a horizon Collect raised
		fail    error
		want    error
	}{
		{"lost reply", false, fakestore.ErrLostReply, writefence.ErrOutcomeUnknown},
		{"lost reply, horizon raised", true, fakestore.ErrLostReply, writefence.ErrOutcomeUnknown},
		{"conflict hiding a landing", false, writefence.ErrConflict, writefence.ErrEpochRegressed},
		{"conflict hiding a landing, horizon raised", true, writefence.ErrConflict, writefence.ErrEpochRegressed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			mem, other, _, ref2, _ := strayScene(t)
			key := mustKey(t, "wal", "0")

			var f *writefence.Fence
			store := &betweenStore{ConditionalStore: mem, key: key, fail: tc.fail, between: func() {
				if tc.horizon {
					_, err := other.Collect(ctx, "wal", "0", writefence.GCOptions{Grace: time.Hour})
					require.NoError(t, err)
				}
				landed, _, err := mem.Get(ctx, key)
				require.NoError(t, err)
				// b takes the shard, and this Fence sees it.
				require.NoError(t, other.Seal(ctx, "wal", "0", "b", 3))
				e, _, _, err := f.Latest(ctx, "wal", "0")
				require.NoError(t, err)
				require.Equal(t, uint64(3), e)
				// A restore sets the record back to the call's write.
				_, v, err := mem.Get(ctx, key)
				require.NoError(t, err)
				_, err = mem.PutIfVersion(ctx, key, landed, v)
				require.NoError(t, err)
			}}
			counting := counted(store)
			f = &writefence.Fence{Store: counting, Blobs: mem}

			err := f.Commit(ctx, "wal", "0", "a", 2, func(m writefence.Manifest) (writefence.Manifest, error) {
				m.Blobs = append(m.Blobs, ref2)
				return m, nil
			})
			require.ErrorIs(t, err, tc.want, "the record went back below what the Fence saw: never nil")
			assert.Contains(t, err.Error(), "regressed")
			assert.Equal(t, int64(1), counting.Calls(fakestore.Put), "nothing written again")
		})
	}
}

// A push of a payload larger than a record's head whose reply was lost:
// the retry reads the head, which cannot tell, then the whole record,
// which is byte for byte the push: nil, and no second write.
func TestLostReplyOfAPushLargerThanAHead(t *testing.T) {
	ctx := t.Context()
	mem := &writefence.MemStore{}
	payload := bytes.Repeat([]byte("p"), 256<<10)
	require.NoError(t, (&writefence.Fence{Store: mem}).Push(ctx, "wal", "0", "a", 1, []byte("first")))
	counting := counted(mem, lostReplies(1))
	f := &writefence.Fence{Store: counting}
	dctx, stop := f.Deposed(ctx, "wal", "0")
	defer stop()
	require.NoError(t, f.Push(ctx, "wal", "0", "a", 2, payload))
	require.NoError(t, dctx.Err())
	assert.Equal(t, int64(1), counting.Calls(fakestore.Put), "the landed push is not written again")
	e, w, p, err := f.Latest(ctx, "wal", "0")
	require.NoError(t, err)
	assert.Equal(t, uint64(2), e)
	assert.Equal(t, "a", w)
	assert.True(t, bytes.Equal(payload, p))
}

// A seal whose reply was lost, with a Collect raising the horizon before
// the retry reads: the seal landed (nil), starts its tenure at its epoch
// (promise 21), and under KeepFloor enters the floor (promise 31).
func TestLostReplyOfASealThenCollect(t *testing.T) {
	eachFloorMode(t, func(t *testing.T, keep bool) {
		ctx := t.Context()
		clock := &fakeclock.Clock{}
		mem := &writefence.MemStore{Clock: clock.Now}
		other := &writefence.Fence{Store: mem, KeepFloor: keep}
		require.NoError(t, other.Seal(ctx, "wal", "0", "a", 1))
		ref1 := putBlob(t, other, "a", 1, "one")
		require.NoError(t, other.Commit(ctx, "wal", "0", "a", 2, appendBlob(ref1)))
		putBlob(t, other, "b", 3, "stray") // b's, of the tenure the seal begins
		clock.Advance(2 * time.Hour)

		store := &betweenStore{ConditionalStore: mem, key: mustKey(t, "wal", "0"), fail: fakestore.ErrLostReply, between: func() {
			_, err := other.Collect(ctx, "wal", "0", writefence.GCOptions{Grace: time.Hour})
			require.NoError(t, err)
		}}
		counting := counted(store)
		f := &writefence.Fence{Store: counting, Blobs: mem, KeepFloor: keep}
		dctx, stop := f.Deposed(ctx, "wal", "0")
		defer stop()
		require.NoError(t, f.Seal(ctx, "wal", "0", "b", 3))
		require.NoError(t, dctx.Err())

		info, err := f.Inspect(ctx, "wal", "0")
		require.NoError(t, err)
		assert.Equal(t, uint64(3), info.Epoch)
		assert.Equal(t, "b", info.Writer)
		assert.Equal(t, uint64(3), info.Since, "the seal's tenure begins at its epoch")
		assert.False(t, info.Horizon.IsZero(), "Collect raised the horizon in between")
		assert.Equal(t, []writefence.BlobRef{ref1}, info.Blobs)

		// a's blob of epoch 2 is below the seal's tenure: never newly
		// referenced again, by a or by b.
		late := putBlob(t, other, "a", 2, "late")
		require.Error(t, f.Commit(ctx, "wal", "0", "a", 4, appendBlob(late)))
		if keep {
			// The floor was entered: the record deleted, a push below
			// the seal is refused by a Fence that never saw the shard.
			require.NoError(t, mem.Delete(ctx, mustKey(t, "wal", "0")))
			fresh := &writefence.Fence{Store: mem, KeepFloor: true}
			require.Error(t, fresh.Push(ctx, "wal", "0", "z", 2, []byte("zombie")))
			_, _, err := mem.Get(ctx, mustKey(t, "wal", "0"))
			require.ErrorIs(t, err, writefence.ErrNotFound, "nothing written below the floor")
		}
	})
}

// Every write of a Settle has its reply lost once (the log's entry, the
// record, and under KeepFloor the floor): each is resolved by the next
// read, and the settle returns nil, having written each key once.
func TestLostReplyOfEveryWriteOfASettle(t *testing.T) {
	eachFloorMode(t, func(t *testing.T, keep bool) {
		ctx := t.Context()
		mem := &writefence.MemStore{}
		v := corruptRecord(t, mem)
		counting := counted(mem, lostReplies(3))
		f := &writefence.Fence{Store: counting, KeepFloor: keep}
		require.NoError(t, f.Settle(ctx, "wal", "0", writefence.Settlement{Version: v, Writer: "op", Epoch: 9, Payload: []byte("restored"), Floor: 3}))
		writes := int64(2)
		if keep {
			writes = 3
		}
		assert.Equal(t, writes, counting.Calls(fakestore.Put), "each key written once")
		requireLatest(t, f, 9, "op", "restored")
		// The same settle again: landed, nil, nothing written.
		require.NoError(t, f.Settle(ctx, "wal", "0", writefence.Settlement{Version: v, Writer: "op", Epoch: 9, Payload: []byte("restored"), Floor: 3}))
		assert.Equal(t, writes, counting.Calls(fakestore.Put))
		if keep {
			fresh := &writefence.Fence{Store: mem, KeepFloor: true}
			err := fresh.Seal(ctx, "wal", "0", "z", 9)
			require.ErrorIs(t, err, writefence.ErrStaleEpoch, "the floor is the settle's")
			assert.True(t, strings.Contains(err.Error(), "9"))
		}
	})
}

// A commit that conflicts (a write below it landed first) and is retried,
// with a next that is not idempotent: next runs on the record the retry
// read, and the commit lands once, its blob referenced once.
func TestCommitConflictRetriedWithANonIdempotentNext(t *testing.T) {
	ctx := t.Context()
	mem := &writefence.MemStore{}
	other := &writefence.Fence{Store: mem}
	ref1 := committedBlob(t, other, "a", 1, "one")
	ref2 := putBlob(t, other, "a", 3, "two")
	gate := &fakestore.Gate{} // holds the commit's first write
	f := &writefence.Fence{Store: counted(mem, fakestore.Fault{Op: fakestore.Put, Times: 1, Gate: gate}), Blobs: mem}
	done := make(chan error, 1)
	go func() {
		done <- f.Commit(ctx, "wal", "0", "a", 3, func(m writefence.Manifest) (writefence.Manifest, error) {
			m.Blobs = append(m.Blobs, ref2)
			m.Payload = append(m.Payload, '+')
			return m, nil
		})
	}()
	<-gate.Arrived()
	require.NoError(t, other.Push(ctx, "wal", "0", "a", 2, []byte("rival")))
	gate.Open()
	require.NoError(t, <-done)
	info, err := f.Inspect(ctx, "wal", "0")
	require.NoError(t, err)
	assert.Equal(t, uint64(3), info.Epoch)
	assert.Equal(t, "rival+", string(info.Payload), "next ran on the record the retry read")
	assert.Equal(t, []writefence.BlobRef{ref1, ref2}, info.Blobs)
}

// Promise 11 and a lost reply: a claim whose create landed but whose reply
// was lost finds the identity on its next read, and returns false and nil
// (it cannot tell its own create from another claimer's of the same
// identity, so it never reports a claim twice); a claimer of another
// identity is refused.
func TestClaimBrandLostReply(t *testing.T) {
	ctx := t.Context()
	mem := &writefence.MemStore{}
	lost := counted(mem, lostReplies(1))
	claimed, err := (&writefence.Fence{Store: lost}).ClaimBrand(ctx)
	require.NoError(t, err)
	assert.False(t, claimed)
	require.NoError(t, (&writefence.Fence{Store: mem}).VerifyBrand(ctx), "the brand landed")
	claimed, err = (&writefence.Fence{Store: mem}).ClaimBrand(ctx)
	require.NoError(t, err)
	assert.False(t, claimed)
	_, err = (&writefence.Fence{Store: mem, Identity: "other/v1"}).ClaimBrand(ctx)
	require.ErrorIs(t, err, writefence.ErrWire)
}

// betweenStore performs the first write of key, then runs between (another
// process's call, while the reply is on its way), then answers the write
// with fail instead of its result: a reply lost, or a conflict for a write
// that happened (outside ConditionalStore's contract, which says a
// conflict wrote nothing, but what store_gcs.go says a client that
// retried a landed write would answer, and what the engine's
// snapshot.sent names).
type betweenStore struct {
	writefence.ConditionalStore
	key     string
	fail    error
	between func()
	once    sync.Once
}

func (s *betweenStore) PutIfVersion(ctx context.Context, key string, data []byte, expect string) (string, error) {
	v, err := s.ConditionalStore.PutIfVersion(ctx, key, data, expect)
	if key != s.key || err != nil {
		return v, err
	}
	hit := false
	s.once.Do(func() { hit = true })
	if !hit {
		return v, err
	}
	s.between()
	return "", s.fail
}

// Promise 5 (and 3, 18): a commit or an update whose next is not
// idempotent, whose write landed but whose reply was lost, is resolved by
// the call's next read even when a Collect raised the record's collection
// horizon in between. The horizon write changes nothing else in the
// record (promise 1): the record still holds this call's epoch, writer,
// payload and references, so the call returns nil, deposes nobody, and
// writes nothing again. Before the fix, the record was no longer byte for
// byte what the call sent, and next, asked again, appended again: the call
// ended as if another write had taken the shard (ErrOutcomeUnknown after a
// lost reply; ErrStaleEpoch, deposing the writer, after a conflict that hid
// the landing).
func TestLostReplyThenCollectRaisesTheHorizon(t *testing.T) {
	for _, fail := range []struct {
		name string
		err  error
	}{
		{"lost reply", fakestore.ErrLostReply},
		{"conflict hiding a landing", writefence.ErrConflict},
	} {
		t.Run(fail.name+"/commit", func(t *testing.T) {
			ctx := t.Context()
			mem, other, ref1, ref2, stray := strayScene(t)

			var collected writefence.GCReport
			store := &betweenStore{ConditionalStore: mem, key: mustKey(t, "wal", "0"), fail: fail.err, between: func() {
				var err error
				collected, err = other.Collect(ctx, "wal", "0", writefence.GCOptions{Grace: time.Hour})
				require.NoError(t, err)
			}}
			counting := counted(store)
			f := &writefence.Fence{Store: counting, Blobs: mem}
			dctx, stop := f.Deposed(ctx, "wal", "0")
			defer stop()

			// Not idempotent: each call appends, as the package's stream
			// example does.
			err := f.Commit(ctx, "wal", "0", "a", 2, func(m writefence.Manifest) (writefence.Manifest, error) {
				m.Blobs = append(m.Blobs, ref2)
				return m, nil
			})
			require.Len(t, collected.Deleted, 1, "the Collect in between deleted the stray blob")
			assert.Contains(t, collected.Deleted[0].Key, stray.Name)
			require.NoError(t, err, "the commit landed; the horizon Collect raised since changes nothing else")
			require.NoError(t, dctx.Err(), "a commit that landed deposes nobody")
			assert.Equal(t, int64(1), counting.Calls(fakestore.Put), "the landed commit is not written again")
			info, err := f.Inspect(ctx, "wal", "0")
			require.NoError(t, err)
			assert.Equal(t, uint64(2), info.Epoch)
			assert.Equal(t, []writefence.BlobRef{ref1, ref2}, info.Blobs)
		})
		t.Run(fail.name+"/update", func(t *testing.T) {
			ctx := t.Context()
			clock := &fakeclock.Clock{}
			mem := &writefence.MemStore{Clock: clock.Now}
			other := &writefence.Fence{Store: mem}
			// A stream's record, which a horizon can be raised on.
			require.NoError(t, other.Commit(ctx, "wal", "0", "a", 1, func(writefence.Manifest) (writefence.Manifest, error) {
				return writefence.Manifest{Payload: []byte("x")}, nil
			}))
			putBlob(t, other, "a", 2, "stray") // Collect raises the horizon over it
			clock.Advance(2 * time.Hour)

			store := &betweenStore{ConditionalStore: mem, key: mustKey(t, "wal", "0"), fail: fail.err, between: func() {
				_, err := other.Collect(ctx, "wal", "0", writefence.GCOptions{Grace: time.Hour})
				require.NoError(t, err)
			}}
			counting := counted(store)
			f := &writefence.Fence{Store: counting}
			dctx, stop := f.Deposed(ctx, "wal", "0")
			defer stop()

			err := f.Update(ctx, "wal", "0", "a", 2, func(cur []byte) ([]byte, error) { return append(cur, '+'), nil })
			require.NoError(t, err, "the update landed; the horizon Collect raised since changes nothing else")
			require.NoError(t, dctx.Err(), "an update that landed deposes nobody")
			assert.Equal(t, int64(1), counting.Calls(fakestore.Put), "the landed update is not written again")
			info, err := f.Inspect(ctx, "wal", "0")
			require.NoError(t, err)
			assert.False(t, info.Horizon.IsZero(), "Collect raised the horizon in between")
			requireLatest(t, f, 2, "a", "x+")
		})
	}
}

// faultyRecordStore lands every third write of key and then answers it
// with a lost reply, running between first on every other such fault. (A
// conflict that hid a landing would be outside ConditionalStore's
// contract: a landing superseded before the retry's read is then
// indistinguishable from a refusal.)
type faultyRecordStore struct {
	writefence.ConditionalStore
	key     string
	writes  atomic.Int64
	between func()
}

func (s *faultyRecordStore) PutIfVersion(ctx context.Context, key string, data []byte, expect string) (string, error) {
	v, err := s.ConditionalStore.PutIfVersion(ctx, key, data, expect)
	if key != s.key || err != nil {
		return v, err
	}
	n := s.writes.Add(1)
	if n%3 != 0 {
		return v, err
	}
	if n%2 == 0 {
		s.between()
	}
	return "", fakestore.ErrLostReply
}

// Promises 3, 5 and 24 under concurrency: writers commit blobs with a
// next that appends (not idempotent), at unique rising epochs, while
// replies are lost and Collects raise the horizon and delete stray blobs. A commit that returned nil is recorded;
// one refused (not an unknown outcome) is not; every blob the record
// references exists. Run with -race and -count.
func TestCommitsLostRepliesAndCollectsRace(t *testing.T) {
	const writers, rounds = 4, 12
	ctx := t.Context()
	mem := &writefence.MemStore{}
	key := mustKey(t, "wal", "0")
	collector := &writefence.Fence{Store: mem, RetryDelay: time.Microsecond, MaxAttempts: 1000}
	collect := func() { _, _ = collector.Collect(ctx, "wal", "0", writefence.GCOptions{Grace: time.Millisecond}) }
	store := &faultyRecordStore{ConditionalStore: mem, key: key, between: collect}
	require.NoError(t, (&writefence.Fence{Store: mem}).Seal(ctx, "wal", "0", "w0", 1))

	var epochs atomic.Uint64
	epochs.Store(1)
	type result struct {
		ref writefence.BlobRef
		err error
	}
	var mu sync.Mutex
	var results []result
	stop := make(chan struct{})
	var bg sync.WaitGroup
	bg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			collect()
			time.Sleep(200 * time.Microsecond)
		}
	})
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			writer := fmt.Sprintf("w%d", w)
			f := &writefence.Fence{Store: store, Blobs: mem, RetryDelay: time.Microsecond, MaxAttempts: 1000}
			for r := range rounds {
				epoch := epochs.Add(1)
				ref, err := f.PutBlob(ctx, "wal", "0", writer, epoch, strings.NewReader(fmt.Sprint(writer, r)))
				if err != nil {
					t.Error(err)
					return
				}
				// A stray blob for the Collects to raise the horizon over.
				if _, err := f.PutBlob(ctx, "wal", "0", writer, epoch, strings.NewReader("stray")); err != nil {
					t.Error(err)
					return
				}
				err = f.Commit(ctx, "wal", "0", writer, epoch, func(m writefence.Manifest) (writefence.Manifest, error) {
					m.Blobs = append(m.Blobs, ref)
					m.Payload = append(m.Payload, '+')
					return m, nil
				})
				mu.Lock()
				results = append(results, result{ref, err})
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(stop)
	bg.Wait()

	info, err := (&writefence.Fence{Store: mem}).Inspect(ctx, "wal", "0")
	require.NoError(t, err)
	landed := 0
	for _, r := range results {
		recorded := slices.Contains(info.Blobs, r.ref)
		switch {
		case r.err == nil:
			landed++
			assert.True(t, recorded, "a commit that returned nil is recorded: %s", r.ref.Name)
		case errors.Is(r.err, writefence.ErrOutcomeUnknown):
		default:
			assert.False(t, recorded, "a commit refused (%v) wrote nothing, yet the record references %s", r.err, r.ref.Name)
		}
	}
	assert.Equal(t, len(info.Payload), len(info.Blobs), "each landed commit appended once")
	space, err := keys.Blobs("", "wal", "0")
	require.NoError(t, err)
	for _, b := range info.Blobs {
		_, err := mem.StatBlob(ctx, space+b.Name)
		if errors.Is(err, writefence.ErrNotFound) {
			t.Errorf("referenced blob %s is missing", b.Name)
		}
	}
	assert.Positive(t, landed)
	t.Logf("%d commits, %d landed, %d writes of the record, the horizon at %v", len(results), landed, store.writes.Load(), info.Horizon)
}

// eachFloorMode runs test as a subtest without and with Fence.KeepFloor.
func eachFloorMode(t *testing.T, test func(t *testing.T, keep bool)) {
	for _, keep := range []bool{false, true} {
		name := "plain"
		if keep {
			name = "KeepFloor"
		}
		t.Run(name, func(t *testing.T) { test(t, keep) })
	}
}

func TestConflictsRetried(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, k := range []int{1, 3, 10 - 1} {
		counting := counted(&writefence.MemStore{}, conflicts(k))
		f := &writefence.Fence{Store: counting}
		require.NoError(t, f.Push(ctx, "wal", "0", "a", 1, []byte("x")), "k=%d", k)
		assert.Equal(t, int64(k+1), counting.Calls(fakestore.Put))
		assert.Equal(t, int64(k+1), counting.Calls(fakestore.Get), "every conflict re-reads")
		t.Logf("%d injected conflicts: landed after %d writes", k, counting.Calls(fakestore.Put))
	}
}

func TestEndlessConflicts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	counting := counted(&writefence.MemStore{}, conflicts(0))
	f := &writefence.Fence{Store: counting, MaxAttempts: 4}
	err := f.Push(ctx, "wal", "0", "a", 1, []byte("x"))
	require.ErrorIs(t, err, writefence.ErrConflict)
	require.NotErrorIs(t, err, writefence.ErrOutcomeUnknown)
	assert.Equal(t, int64(4), counting.Calls(fakestore.Put), "exactly MaxAttempts writes")

	before := counting.Calls(fakestore.Put)
	err = (&writefence.Fence{Store: counting}).Push(ctx, "wal", "0", "a", 1, []byte("x"))
	require.ErrorIs(t, err, writefence.ErrConflict)
	assert.Equal(t, int64(10), counting.Calls(fakestore.Put)-before)
}

// TestPromise3_ProbeWritesNothingOnAStoreOfAnotherBrand: a write refused
// as of another identity leaves the store as it was (promise 3), and the
// brand refuses a foreign program "before it touches any record ... so a
// program that does not speak a store's format never writes to it"
// (brand.go). A Fence with Probe set and Brand BrandVerify or BrandClaim
// runs the probe, whose scratch writes land, before it checks the brand:
// over a store branded by another program, the refused push leaves the
// probe's keys behind on a store that cannot delete them. Only
// BrandVerifyAlways reads the brand before the probe.
func TestPromise3_ProbeWritesNothingOnAStoreOfAnotherBrand(t *testing.T) {
	for _, mode := range []writefence.BrandMode{writefence.BrandVerify, writefence.BrandClaim} {
		ctx := context.Background()
		mem := &writefence.MemStore{}
		_, err := mem.PutIfVersion(ctx, brandKey, []byte("theirs/v3"), "")
		require.NoError(t, err)
		// A store of the core interface alone: Get and PutIfVersion.
		s := fakestore.New(mem, fakestore.Options{Hide: fakestore.All})
		f := &writefence.Fence{Store: s, Probe: true, Brand: mode}

		err = f.Push(ctx, "wal", "0", "a", 1, []byte("x"))
		require.ErrorIs(t, err, writefence.ErrWire, "mode %d", mode)

		var held []string
		require.NoError(t, mem.List(ctx, "", func(k string) error { held = append(held, k); return nil }))
		assert.Equal(t, []string{brandKey}, held, "mode %d: the push refused as of another identity wrote %d times", mode, s.OK(fakestore.Put))
	}
}
