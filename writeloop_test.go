package writefence_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/defaults"
)

// writePath is one way a Fence writes a record, with its set-up.
type writePath struct {
	name  string
	setup func(t *testing.T, s writefence.ConditionalStore) (version string)
	call  func(ctx context.Context, f *writefence.Fence, version string) error
}

// writeOps are the three ways a Fence writes a record. Each runs against
// shard ("wal", "0"), whose record the set-up left at version v (a corrupt
// record for settle, which may only replace one).
var writeOps = []writePath{
	{"push", pushedRecord, func(ctx context.Context, f *writefence.Fence, _ string) error {
		return f.Push(ctx, "wal", "0", "new", 9, []byte("new payload"))
	}},
	{"seal", pushedRecord, func(ctx context.Context, f *writefence.Fence, _ string) error {
		return f.Seal(ctx, "wal", "0", "new", 9)
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
				s := &ignoringStore{}
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
				assert.Equal(t, writefence.WriteEvent{Op: op.name, Key: mustKey(t, "wal", "0"), Writer: e.Writer, Epoch: 9,
					Attempt: 1}, e)
			})
		})
	}
}

// TestWritePathsShareRetries: conflicts are retried and observed, and a
// lost reply is settled by reading, on every write path.
func TestWritePathsShareRetries(t *testing.T) {
	for _, op := range writeOps {
		t.Run(op.name, func(t *testing.T) {
			mem := &writefence.MemStore{}
			v := op.setup(t, mem)
			conflicts := &conflictStore{ConditionalStore: mem, remaining: 2}
			lost := &lostReplyStore{ConditionalStore: conflicts, remaining: 1}
			obs := &outcomeCounter{}
			f := &writefence.Fence{Store: lost, Observer: obs.observe}
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

// TestSettleNeverLowersAReadableEpoch: a record whose payload is damaged
// under an intact header still names its epoch; settling below it would
// let a deposed writer at the old epoch land afterwards.
func TestSettleNeverLowersAReadableEpoch(t *testing.T) {
	ctx := t.Context()
	mem, counting, f := countedFence()
	require.NoError(t, f.Push(ctx, "wal", "0", "leader", 11, []byte("segment 11")))
	bad := damagePayload(t, mem)

	info, err := f.Inspect(ctx, "wal", "0")
	require.ErrorIs(t, err, writefence.ErrCorrupt)
	assert.Equal(t, uint64(11), info.Epoch, "Inspect shows the header's epoch")
	assert.Equal(t, "leader", info.Writer)
	assert.Equal(t, bad, info.Version)

	puts := counting.puts.Load()
	for _, epoch := range []uint64{6, 11} {
		err := f.Settle(ctx, "wal", "0", writefence.Settlement{Version: bad, Writer: "op", Epoch: epoch, Payload: []byte("restored")})
		var se *writefence.StaleEpochError
		require.ErrorAs(t, err, &se, "settle at %d", epoch)
		assert.Equal(t, uint64(11), se.RecordedEpoch)
		assert.Equal(t, "leader", se.RecordedWriter)
	}
	assert.Equal(t, puts, counting.puts.Load(), "a refused settle writes nothing")

	require.NoError(t, f.Settle(ctx, "wal", "0", writefence.Settlement{Version: bad, Writer: "op", Epoch: 12, Payload: []byte("restored")}))
	require.ErrorIs(t, f.Push(ctx, "wal", "0", "leader", 11, []byte("late")), writefence.ErrStaleEpoch,
		"the deposed writer at the old epoch stays fenced")
	requireLatest(t, f, 12, "op", "restored")
}

// writeRefuser answers every write with err, having written nothing, as
// a Valkey store does when the brand inside its transaction is foreign.
type writeRefuser struct {
	writefence.MemStore
	err  error
	puts int
}

func (s *writeRefuser) PutIfVersion(context.Context, string, []byte, string) (string, error) {
	s.puts++
	return "", s.err
}

// TestRefusedWritesAreFinal: a store that refuses a write (another wire
// identity, damage) is not retried and not reported as an unknown outcome.
func TestRefusedWritesAreFinal(t *testing.T) {
	for _, refusal := range []error{
		&writefence.WireError{Key: "brand", Expected: defaults.Identity, Found: "other/v1"},
		&writefence.CorruptError{Key: "k", Version: "v", Check: "checksum"},
	} {
		t.Run(fmt.Sprintf("%T", refusal), func(t *testing.T) {
			s := &writeRefuser{err: fmt.Errorf("store: %w", refusal)}
			err := (&writefence.Fence{Store: s}).Push(t.Context(), "wal", "0", "a", 1, []byte("x"))
			require.True(t, errors.Is(err, refusal), "%v", err)
			require.NotErrorIs(t, err, writefence.ErrOutcomeUnknown)
			assert.Equal(t, 1, s.puts)
		})
	}
}
