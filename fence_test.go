package writefence_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/defaults"
	"github.com/writefence/writefence/internal/fakestore"
	"github.com/writefence/writefence/internal/keys"
	"github.com/writefence/writefence/internal/modeltest"
	"github.com/writefence/writefence/internal/record"
	"github.com/writefence/writefence/internal/testserver"
)

// TestMain fails the package's tests if any goroutine outlives them: a
// store or a fence that leaked one per call would exhaust a long-running
// writer. It also sets rapid's flags for the model tests on the servers,
// once, before any of them runs in parallel (modeltest.Main).
func TestMain(m *testing.M) { modeltest.Main(m) }

func mustKey(t testing.TB, plugin, shard string) string {
	t.Helper()
	key, err := keys.Shard("", plugin, shard)
	require.NoError(t, err)
	return key
}

// requireLatest checks that shard wal/0, read through f (whose Prefix
// applies), holds payload by writer at epoch.
func requireLatest(t testing.TB, f *writefence.Fence, epoch uint64, writer, payload string) {
	t.Helper()
	e, w, p, err := f.Latest(context.Background(), "wal", "0")
	require.NoError(t, err)
	assert.Equal(t, epoch, e)
	assert.Equal(t, writer, w)
	assert.Equal(t, payload, string(p))
}

func TestPushAndLatest(t *testing.T) {
	ctx := context.Background()
	f := &writefence.Fence{Store: &writefence.MemStore{}}

	_, _, _, err := f.Latest(ctx, "wal", "0")
	require.ErrorIs(t, err, writefence.ErrNotFound)

	require.NoError(t, f.Push(ctx, "wal", "0", "a", 1, []byte("one")))
	requireLatest(t, f, 1, "a", "one")
	require.NoError(t, f.Push(ctx, "wal", "0", "b", 5, []byte("five")))
	requireLatest(t, f, 5, "b", "five")
	require.NoError(t, f.Push(ctx, "wal", "0", "b", 6, nil))
	requireLatest(t, f, 6, "b", "")
}

// TestStaleRefusedWithoutWrite: an equal or lower epoch is refused from the
// read alone; not one PutIfVersion reaches the store.
func TestStaleRefusedWithoutWrite(t *testing.T) {
	ctx := context.Background()
	mem := &writefence.MemStore{}
	require.NoError(t, (&writefence.Fence{Store: mem}).Push(ctx, "wal", "0", "leader", 7, []byte("x")))

	for _, epoch := range []uint64{1, 6, 7} {
		counting := counted(mem)
		f := &writefence.Fence{Store: counting}
		err := f.Push(ctx, "wal", "0", "zombie", epoch, []byte("y"))
		require.ErrorIs(t, err, writefence.ErrStaleEpoch)
		var stale *writefence.StaleEpochError
		require.ErrorAs(t, err, &stale)
		assert.Equal(t, writefence.StaleEpochError{Op: "push", Key: mustKey(t, "wal", "0"), Epoch: epoch, RecordedEpoch: 7, RecordedWriter: "leader"}, *stale)
		assert.Equal(t, int64(0), counting.Calls(fakestore.Put), "epoch %d: a stale push must not write", epoch)
		assert.Equal(t, int64(1), counting.Calls(fakestore.Get))
		assert.Equal(t,
			`writefence: stale epoch: push at epoch `+strconv.FormatUint(epoch, 10)+` to writefence/s/wal/0 refused: recorded epoch 7 by leader`,
			err.Error())
	}
	requireLatest(t, &writefence.Fence{Store: mem}, 7, "leader", "x")
}

func TestInvalidArguments(t *testing.T) {
	ctx := context.Background()
	counting := counted(&writefence.MemStore{})
	f := &writefence.Fence{Store: counting, MaxPayloadSize: 16}
	cases := []struct {
		name                  string
		fence                 *writefence.Fence
		plugin, shard, writer string
		epoch                 uint64
		payload               []byte
		arg                   string
	}{
		{"nil store", &writefence.Fence{}, "p", "s", "w", 1, nil, "store"},
		{"empty plugin", f, "", "s", "w", 1, nil, "plugin"},
		{"empty shard", f, "p", "", "w", 1, nil, "shard"},
		{"long plugin", f, strings.Repeat("p", 257), "s", "w", 1, nil, "plugin"},
		{"empty writer", f, "p", "s", "", 1, nil, "writer"},
		{"long writer", f, "p", "s", strings.Repeat("w", 1025), 1, nil, "writer"},
		{"epoch 0", f, "p", "s", "w", 0, nil, "epoch"},
		{"payload over limit", f, "p", "s", "w", 1, make([]byte, 17), "payload"},
		{"identity too long", &writefence.Fence{Store: counting, Identity: strings.Repeat("i", 256)}, "p", "s", "w", 1, nil, "identity"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.fence.Push(ctx, tc.plugin, tc.shard, tc.writer, tc.epoch, tc.payload)
			require.ErrorIs(t, err, writefence.ErrInvalidArgument)
			var ia *writefence.InvalidArgumentError
			require.ErrorAs(t, err, &ia)
			assert.Equal(t, tc.arg, ia.Arg)
			assert.True(t, strings.HasPrefix(err.Error(), "writefence: invalid argument: "+tc.arg+": "), err.Error())
		})
	}
	assert.Equal(t, int64(0), roundTrips(counting), "invalid arguments must be refused before any I/O")

	// The maximum epoch is valid, and nothing can follow it.
	require.NoError(t, f.Push(ctx, "p", "s", "w", ^uint64(0), nil))
	require.ErrorIs(t, f.Push(ctx, "p", "s", "w2", ^uint64(0), nil), writefence.ErrStaleEpoch)
}

// corruptions are records no valid writer produces; each must refuse.
func corruptions(t *testing.T) map[string][]byte {
	ctx := context.Background()
	m := &writefence.MemStore{}
	f := &writefence.Fence{Store: m}
	require.NoError(t, f.Push(ctx, "wal", "0", "a", 3, []byte("a healthy payload")))
	good, _, err := m.Get(ctx, mustKey(t, "wal", "0"))
	require.NoError(t, err)
	flip := func(i int) []byte {
		b := append([]byte(nil), good...)
		b[i] ^= 0x40
		return b
	}
	return map[string][]byte{
		"truncated header":       good[:10],
		"truncated payload":      good[:len(good)-3],
		"flipped checksum byte":  flip(len(good) - len("a healthy payload") - 1),
		"unknown format version": flip(4),
		"trailing bytes":         append(append([]byte(nil), good...), '!'),
		"random garbage":         []byte("\x8f\x13garbage that no version of the format ever wrote\x00\x01"),
		"empty object":           {},
		"flipped payload byte":   flip(len(good) - 1),
	}
}

// TestCorruptFailsClosed: Push and Latest refuse a corrupt record with
// ErrCorrupt naming the check and the version, and nothing is written.
func TestCorruptFailsClosed(t *testing.T) {
	ctx := context.Background()
	for name, rec := range corruptions(t) {
		t.Run(name, func(t *testing.T) {
			mem := &writefence.MemStore{}
			key := mustKey(t, "wal", "0")
			version, err := mem.PutIfVersion(ctx, key, rec, "")
			require.NoError(t, err)
			counting := counted(mem)
			f := &writefence.Fence{Store: counting}

			err = f.Push(ctx, "wal", "0", "b", 1000, []byte("new"))
			require.ErrorIs(t, err, writefence.ErrCorrupt)
			var ce *writefence.CorruptError
			require.ErrorAs(t, err, &ce)
			assert.Equal(t, key, ce.Key)
			assert.Equal(t, version, ce.Version)
			assert.NotEmpty(t, ce.Check)
			assert.Contains(t, err.Error(), ce.Check)

			_, _, _, err = f.Latest(ctx, "wal", "0")
			require.ErrorIs(t, err, writefence.ErrCorrupt)

			assert.Equal(t, int64(0), counting.Calls(fakestore.Put), "a corrupt record must never be overwritten")
			data, v, err := mem.Get(ctx, key)
			require.NoError(t, err)
			assert.Equal(t, version, v)
			assert.Equal(t, rec, data)
		})
	}
}

func TestOtherIdentityRefused(t *testing.T) {
	ctx := context.Background()
	mem := &writefence.MemStore{}
	require.NoError(t, (&writefence.Fence{Store: mem, Identity: "other-format/v9\n"}).Push(ctx, "wal", "0", "a", 1, []byte("x")))

	counting := counted(mem)
	f := &writefence.Fence{Store: counting}
	err := f.Push(ctx, "wal", "0", "b", 2, []byte("y"))
	require.ErrorIs(t, err, writefence.ErrWire)
	var we *writefence.WireError
	require.ErrorAs(t, err, &we)
	assert.Equal(t, writefence.WireError{Key: mustKey(t, "wal", "0"), Expected: defaults.Identity, Found: "other-format/v9\n"}, *we)
	assert.Equal(t, `writefence: wire: expected writefence/v1 found other-format/v9\n`, err.Error())
	assert.Equal(t, int64(0), counting.Calls(fakestore.Put))

	_, _, _, err = f.Latest(ctx, "wal", "0")
	require.ErrorIs(t, err, writefence.ErrWire)
}

// TestReplayIsSuccess: a push whose reply was lost lands; calling Push again
// with the same arguments reports success, not ErrStaleEpoch.
func TestReplayIsSuccess(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	mem := &writefence.MemStore{}
	lost := counted(mem)
	f := &writefence.Fence{Store: lost}
	require.NoError(t, f.Push(ctx, "wal", "0", "a", 1, []byte("one")))

	// The write lands, its reply is lost, and the store stays unreachable:
	// the outcome cannot be learned.
	lost.Inject(lostReplies(1))
	lost.Inject(readsFail)
	err := f.Push(ctx, "wal", "0", "a", 2, []byte("two"))
	require.ErrorIs(t, err, writefence.ErrOutcomeUnknown)
	require.ErrorIs(t, err, fakestore.ErrLostReply)
	require.NotErrorIs(t, err, writefence.ErrStaleEpoch)
	requireLatest(t, &writefence.Fence{Store: mem}, 2, "a", "two")

	// The store is back: the same call settles it as landed.
	lost.Clear(fakestore.Get)
	require.NoError(t, f.Push(ctx, "wal", "0", "a", 2, []byte("two")))

	// Same epoch and writer but another payload is not a replay.
	require.ErrorIs(t, f.Push(ctx, "wal", "0", "a", 2, []byte("TWO")), writefence.ErrStaleEpoch)
	// Nor is another writer with the same payload.
	require.ErrorIs(t, f.Push(ctx, "wal", "0", "b", 2, []byte("two")), writefence.ErrStaleEpoch)
}

// TestLostReplyResolvedByRead: when the reply is lost but the store can be
// read, Push learns that its write landed and returns nil at once.
func TestLostReplyResolvedByRead(t *testing.T) {
	ctx := context.Background()
	mem := &writefence.MemStore{}
	counting := counted(mem, lostReplies(1))
	f := &writefence.Fence{Store: counting}
	require.NoError(t, f.Push(ctx, "wal", "0", "a", 1, []byte("one")))
	assert.Equal(t, int64(1), counting.Calls(fakestore.Put), "the landed write must not be repeated")
	assert.Equal(t, int64(2), counting.Calls(fakestore.Get), "one read to admit, one to resolve")
	requireLatest(t, f, 1, "a", "one")
}

// TestLostReplyOfANonIdempotentWrite: an update and a commit whose next
// is not idempotent (each call appends), and whose reply was lost, learn
// from the next read that the record is byte for byte what they wrote,
// and return nil without writing again: not ErrStaleEpoch, as next would
// have it if asked again.
func TestLostReplyOfANonIdempotentWrite(t *testing.T) {
	ctx := t.Context()
	mem := &writefence.MemStore{}
	f := &writefence.Fence{Store: counted(mem, lostReplies(1))}
	require.NoError(t, f.Update(ctx, "wal", "0", "a", 1, func(cur []byte) ([]byte, error) { return append(cur, '+'), nil }))
	requireLatest(t, f, 1, "a", "+")

	f = &writefence.Fence{Store: counted(mem, lostReplies(1))}
	require.NoError(t, f.Commit(ctx, "wal", "0", "a", 2, func(m writefence.Manifest) (writefence.Manifest, error) {
		m.Payload = append(m.Payload, '+')
		return m, nil
	}))
	requireLatest(t, f, 2, "a", "++")
}

func TestCancelledContextStopsRetries(t *testing.T) {
	counting := counted(&writefence.MemStore{}, conflicts(0))
	f := &writefence.Fence{Store: counting, MaxAttempts: 1000, RetryDelay: 1 << 40}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Push(ctx, "wal", "0", "a", 1, []byte("x")) }()
	require.Eventually(t, func() bool { return counting.Calls(fakestore.Put) == 1 }, timeout, tick)
	cancel()
	err := <-done
	require.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, int64(1), counting.Calls(fakestore.Put), "no write after the cancel")

	// A context cancelled before the call reaches no write either.
	err = f.Push(ctx, "wal", "0", "a", 1, []byte("x"))
	require.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, int64(1), counting.Calls(fakestore.Put))
}

// TestSteadyStateOneRoundTrip: a writer pushing consecutive epochs makes one
// store round trip per push, the conditional write, once it knows the
// version; a foreign write in between costs one conflict and one read.
func TestSteadyStateOneRoundTrip(t *testing.T) {
	ctx := context.Background()
	mem, counting, f := countedFence()
	require.NoError(t, f.Push(ctx, "wal", "0", "a", 1, []byte("x")))
	before := roundTrips(counting)
	for e := uint64(2); e <= 101; e++ {
		require.NoError(t, f.Push(ctx, "wal", "0", "a", e, []byte("x")))
	}
	assert.Equal(t, int64(100), roundTrips(counting)-before, "one round trip per push")

	// Another fence (a new leader) writes epoch 200.
	require.NoError(t, (&writefence.Fence{Store: mem}).Push(ctx, "wal", "0", "b", 200, []byte("y")))
	before = roundTrips(counting)
	err := f.Push(ctx, "wal", "0", "a", 102, []byte("x"))
	require.ErrorIs(t, err, writefence.ErrStaleEpoch, "the cache never admits a push the store refuses")
	assert.Equal(t, int64(2), roundTrips(counting)-before, "one conflicting write, one fresh read")
	requireLatest(t, f, 200, "b", "y")
}

const (
	timeout = 10 * time.Second
	tick    = time.Millisecond
)

// TestPushOverDamagedPayload: a record whose payload was damaged past its
// intact header, on each class of store (see the package documentation,
// "Damage"):
//
//   - a store that keeps its version beside its bytes (the directory
//     store), damaged in place: the store's own check finds it on the
//     push's head read, which returns no more than the header's bytes, and
//     the push refuses with ErrCorrupt;
//   - a store without a PrefixReader (MemStore): the push reads the record
//     whole and refuses it;
//   - a store whose versions name its bytes, as S3's ETags do, rewritten
//     whole from outside (a new version): the push decides on the sound
//     head and replaces it; Latest and Update, which read the payload,
//     refuse it.
func TestPushOverDamagedPayload(t *testing.T) {
	ctx := context.Background()
	payload := bytes.Repeat([]byte("x"), 3*defaults.MaxHeaderSize)
	key := mustKey(t, "wal", "0")

	t.Run("in place, dir", func(t *testing.T) {
		dir := t.TempDir()
		store := fakestore.New(newDirStore(t, dir), fakestore.Options{})
		require.NoError(t, (&writefence.Fence{Store: store}).Push(ctx, "wal", "0", "a", 1, payload))
		require.NoError(t, testserver.DamageDir(dir)(ctx, key, testserver.Fault{Flip: -1}))
		read := store.BytesRead()
		err := (&writefence.Fence{Store: store}).Push(ctx, "wal", "0", "b", 2, []byte("over it"))
		require.ErrorIs(t, err, writefence.ErrCorrupt, "a Push overwrote damage in place")
		assert.LessOrEqual(t, store.BytesRead()-read, int64(defaults.MaxHeaderSize))
	})

	// rewrite damages the record's last byte by a write from outside.
	rewrite := func(t *testing.T, store writefence.ConditionalStore) {
		data, v, err := store.Get(ctx, key)
		require.NoError(t, err)
		data[len(data)-1] ^= 1
		_, err = store.PutIfVersion(ctx, key, data, v)
		require.NoError(t, err)
		_, _, _, err = (&writefence.Fence{Store: store}).Latest(ctx, "wal", "0")
		require.ErrorIs(t, err, writefence.ErrCorrupt, "the record is corrupt")
	}

	t.Run("rewritten, no prefix reader", func(t *testing.T) {
		store := &writefence.MemStore{}
		require.NoError(t, (&writefence.Fence{Store: store}).Push(ctx, "wal", "0", "a", 1, payload))
		rewrite(t, store)
		err := (&writefence.Fence{Store: store}).Push(ctx, "wal", "0", "b", 2, []byte("over it"))
		require.ErrorIs(t, err, writefence.ErrCorrupt, "a Push that reads the record whole overwrote it")
	})

	t.Run("rewritten, prefix reader", func(t *testing.T) {
		store := newPrefixStore()
		require.NoError(t, (&writefence.Fence{Store: store}).Push(ctx, "wal", "0", "a", 1, payload))
		rewrite(t, store)
		err := (&writefence.Fence{Store: store}).Update(ctx, "wal", "0", "b", 2, func(p []byte) ([]byte, error) { return p, nil })
		require.ErrorIs(t, err, writefence.ErrCorrupt, "Update reads the payload")
		require.NoError(t, (&writefence.Fence{Store: store}).Push(ctx, "wal", "0", "b", 2, []byte("over it")))
		requireLatest(t, &writefence.Fence{Store: store}, 2, "b", "over it")
	})
}

// TestWriteOverDamageItsWriteDoesNotSee: an update, a commit or a seal
// over a record its Fence wrote last never replaces damage in place that
// the store's read finds and its write does not (promise 7): a store may
// check a record's first 1343 bytes alone when it writes (see
// ConditionalStore; Valkey checks its value's first 3900 bytes and its
// last 100), so a write that decided on what its Fence remembers of a
// longer record, without reading, would replace such damage unseen. Here
// the store checks every byte on a read and, on a write, none past the
// first 1343, past which the record was edited by hand; the remembered
// payload is short, the header long (a long writer name). The write reads
// the record, finds the damage, and writes nothing.
func TestWriteOverDamageItsWriteDoesNotSee(t *testing.T) {
	ctx := context.Background()
	writer := strings.Repeat("w", record.MaxWriterLen)
	payload := bytes.Repeat([]byte("p"), 400)
	for _, tc := range []struct {
		op    string
		write func(f *writefence.Fence) error
	}{
		{"update", func(f *writefence.Fence) error {
			return f.Update(ctx, "wal", "0", writer, 2, func(p []byte) ([]byte, error) { return append(p, '!'), nil })
		}},
		{"commit", func(f *writefence.Fence) error {
			return f.Commit(ctx, "wal", "0", writer, 2, func(m writefence.Manifest) (writefence.Manifest, error) { return m, nil })
		}},
		{"seal", func(f *writefence.Fence) error { return f.Seal(ctx, "wal", "0", writer, 2) }},
	} {
		t.Run(tc.op, func(t *testing.T) {
			mem := &writefence.MemStore{}
			key := mustKey(t, "wal", "0")
			var edited atomic.Bool
			store := fakestore.New(mem, fakestore.Options{Get: func(ctx context.Context, k string) ([]byte, string, error) {
				if k == key && edited.Load() {
					return nil, "", &writefence.CorruptError{Key: key, Version: "damaged-1", Check: "a byte past the first 1343 edited"}
				}
				return mem.Get(ctx, k)
			}})
			f := &writefence.Fence{Store: store}
			require.NoError(t, f.Push(ctx, "wal", "0", writer, 1, payload))
			data, version, err := mem.Get(ctx, key)
			require.NoError(t, err)
			require.Greater(t, len(data), 1343, "the record runs past what a write must check")
			edited.Store(true)

			err = tc.write(f)
			require.ErrorIs(t, err, writefence.ErrCorrupt, "a write over the remembered version replaced damage its write did not see")
			_, now, err := mem.Get(ctx, key)
			require.NoError(t, err)
			assert.Equal(t, version, now, "nothing was written")
		})
	}
}

// snapshot is every key of a MemStore with its bytes and version.
func snapshot(t *testing.T, m *writefence.MemStore) map[string]string {
	t.Helper()
	s := make(map[string]string)
	for _, k := range testserver.Keys(t, m) {
		data, v, err := m.Get(t.Context(), k)
		require.NoError(t, err)
		s[k] = v + "\x00" + string(data)
	}
	return s
}

// recordClaiming returns a valid record whose header then claims payloadLen
// bytes of payload, with the header checksum recomputed so that only the
// length disagrees with the bytes present. It relies on the layout
// documented in internal/record/record.go.
func recordClaiming(t *testing.T, writer string, epoch, payloadLen uint64) []byte {
	t.Helper()
	m := &writefence.MemStore{}
	require.NoError(t, (&writefence.Fence{Store: m}).Push(t.Context(), "p", "s", writer, epoch, []byte("tiny")))
	rec, _, err := m.Get(t.Context(), mustKey(t, "p", "s"))
	require.NoError(t, err)
	binary.BigEndian.PutUint64(rec[16:], payloadLen)
	end := 28 + len(defaults.Identity) + len(writer)
	binary.BigEndian.PutUint32(rec[end:], crc32.Checksum(rec[:end], crc32.MakeTable(crc32.Castagnoli)))
	return rec
}

// TestBadInputFence: hostile and out-of-range input: every case must be
// refused with a clear, typed error and must write nothing.
func TestBadInputFence(t *testing.T) {
	mem := &writefence.MemStore{}
	seed := &writefence.Fence{Store: mem}
	require.NoError(t, seed.Push(t.Context(), "wal", "0", "leader", 7, []byte("seven")))
	require.NoError(t, seed.Push(t.Context(), "wal", "max", "leader", math.MaxUint64, []byte("last")))
	hugeKey := mustKey(t, "wal", "huge")
	hugeVersion, err := mem.PutIfVersion(t.Context(), hugeKey, recordClaiming(t, "leader", 3, 4<<30), "")
	require.NoError(t, err)

	counting := counted(mem)
	f := &writefence.Fence{Store: counting, MaxPayloadSize: 16}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel2()
	ctx := context.Background()
	push := func(f *writefence.Fence, ctx context.Context, plugin, shard, writer string, epoch uint64, payload []byte) func() error {
		return func() error { return f.Push(ctx, plugin, shard, writer, epoch, payload) }
	}
	latest := func(f *writefence.Fence, ctx context.Context, plugin, shard string) func() error {
		return func() error { _, _, _, err := f.Latest(ctx, plugin, shard); return err }
	}
	pushFrom := func(src writefence.EpochSource) func() error {
		return func() error { _, err := f.PushFrom(ctx, src, "wal", "0", "w", nil); return err }
	}
	errSource := errors.New("no lease held")

	// arg names the *InvalidArgumentError expected; stale, corrupt and wire
	// the other typed errors; is the sentinel every case must match.
	cases := []struct {
		name    string
		call    func() error
		is      error
		arg     string
		stale   *writefence.StaleEpochError
		corrupt *writefence.CorruptError
		wire    *writefence.WireError
	}{
		{name: "push nil store", call: push(&writefence.Fence{}, ctx, "p", "s", "w", 1, nil), is: writefence.ErrInvalidArgument, arg: "store"},
		{name: "push empty plugin", call: push(f, ctx, "", "s", "w", 1, nil), is: writefence.ErrInvalidArgument, arg: "plugin"},
		{name: "push empty shard", call: push(f, ctx, "p", "", "w", 1, nil), is: writefence.ErrInvalidArgument, arg: "shard"},
		{name: "push plugin over MaxNameLen", call: push(f, ctx, strings.Repeat("p", keys.MaxNameLen+1), "s", "w", 1, nil), is: writefence.ErrInvalidArgument, arg: "plugin"},
		{name: "push hostile names escaping past MaxKeyLen", call: push(f, ctx, strings.Repeat("\x00", 256), strings.Repeat("../", 85), "w", 1, nil), is: writefence.ErrInvalidArgument, arg: "key"},
		{name: "push empty writer", call: push(f, ctx, "p", "s", "", 1, nil), is: writefence.ErrInvalidArgument, arg: "writer"},
		{name: "push writer over MaxWriterLen", call: push(f, ctx, "p", "s", strings.Repeat("w", 1025), 1, nil), is: writefence.ErrInvalidArgument, arg: "writer"},
		{name: "push epoch 0", call: push(f, ctx, "wal", "0", "w", 0, nil), is: writefence.ErrInvalidArgument, arg: "epoch"},
		{name: "push payload over the limit", call: push(f, ctx, "wal", "0", "w", 8, make([]byte, 17)), is: writefence.ErrInvalidArgument, arg: "payload"},
		{name: "push identity over MaxIdentityLen", call: push(&writefence.Fence{Store: counting, Identity: strings.Repeat("i", 256)}, ctx, "p", "s", "w", 1, nil), is: writefence.ErrInvalidArgument, arg: "identity"},
		{name: "push max epoch over max epoch", call: push(f, ctx, "wal", "max", "rival", math.MaxUint64, nil), is: writefence.ErrStaleEpoch,
			stale: &writefence.StaleEpochError{Op: "push", Key: mustKey(t, "wal", "max"), Epoch: math.MaxUint64, RecordedEpoch: math.MaxUint64, RecordedWriter: "leader"}},
		{name: "push equal epoch", call: push(f, ctx, "wal", "0", "rival", 7, nil), is: writefence.ErrStaleEpoch,
			stale: &writefence.StaleEpochError{Op: "push", Key: mustKey(t, "wal", "0"), Epoch: 7, RecordedEpoch: 7, RecordedWriter: "leader"}},
		{name: "push over a header claiming 4 GiB", call: push(f, ctx, "wal", "huge", "w", 9, nil), is: writefence.ErrCorrupt,
			corrupt: &writefence.CorruptError{Key: hugeKey, Version: hugeVersion, Check: "truncated payload"}},
		{name: "push cancelled ctx", call: push(f, cancelled, "wal", "0", "w", 8, nil), is: context.Canceled},
		{name: "push expired ctx", call: push(f, expired, "wal", "0", "w", 8, nil), is: context.DeadlineExceeded},
		{name: "push cancelled ctx with probe", call: push(&writefence.Fence{Store: counting, Probe: true}, cancelled, "wal", "0", "w", 8, nil), is: context.Canceled},
		{name: "latest nil store", call: latest(&writefence.Fence{}, ctx, "p", "s"), is: writefence.ErrInvalidArgument, arg: "store"},
		{name: "latest empty shard", call: latest(f, ctx, "wal", ""), is: writefence.ErrInvalidArgument, arg: "shard"},
		{name: "latest shard over MaxNameLen", call: latest(f, ctx, "wal", strings.Repeat("s", keys.MaxNameLen+1)), is: writefence.ErrInvalidArgument, arg: "shard"},
		{name: "latest never pushed", call: latest(f, ctx, "wal", "never"), is: writefence.ErrNotFound},
		{name: "latest header claiming 4 GiB", call: latest(f, ctx, "wal", "huge"), is: writefence.ErrCorrupt,
			corrupt: &writefence.CorruptError{Key: hugeKey, Version: hugeVersion, Check: "truncated payload"}},
		{name: "latest cancelled ctx", call: latest(f, cancelled, "wal", "0"), is: context.Canceled},
		{name: "push-from nil source", call: pushFrom(nil), is: writefence.ErrInvalidArgument, arg: "source"},
		{name: "push-from epoch 0", call: pushFrom(writefence.StaticEpochSource(0)), is: writefence.ErrInvalidArgument, arg: "epoch"},
		{name: "push-from failing source", call: pushFrom(epochFunc(func(context.Context, string, string) (uint64, error) { return 0, errSource })), is: errSource},
		{name: "brand nil store", call: func() error { return (&writefence.Fence{}).VerifyBrand(ctx) }, is: writefence.ErrInvalidArgument, arg: "store"},
		{name: "brand identity over MaxIdentityLen", call: func() error {
			return claimBrand(ctx, &writefence.Fence{Store: counting, Identity: strings.Repeat("i", 256)})
		}, is: writefence.ErrInvalidArgument, arg: "identity"},
		{name: "brand key over MaxKeyLen", call: func() error {
			_, err := (&writefence.Fence{Store: counting, Prefix: strings.Repeat("k", keys.MaxKeyLen+1)}).ClaimBrand(ctx)
			return err
		}, is: writefence.ErrInvalidArgument, arg: "prefix"},
		{name: "brand unbranded store", call: func() error { return (&writefence.Fence{Store: counting}).VerifyBrand(ctx) }, is: writefence.ErrWire,
			wire: &writefence.WireError{Key: keys.Brand(""), Expected: defaults.Identity, Absent: true}},
		{name: "brand claim cancelled ctx", call: func() error { return claimBrand(cancelled, &writefence.Fence{Store: counting}) }, is: context.Canceled},
		{name: "probe nil store", call: func() error { return writefence.Probe(ctx, nil, "k") }, is: writefence.ErrInvalidArgument, arg: "store"},
		{name: "probe empty key", call: func() error { return writefence.Probe(ctx, counting, "") }, is: writefence.ErrInvalidArgument, arg: "key"},
		{name: "memstore malformed version", call: func() error {
			_, err := counting.PutIfVersion(ctx, mustKey(t, "wal", "0"), []byte("x"), "not-a-version\n")
			return err
		}, is: writefence.ErrConflict},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := snapshot(t, mem)
			puts := counting.Calls(fakestore.Put)
			err := tc.call()
			require.ErrorIs(t, err, tc.is)
			assert.True(t, strings.HasPrefix(err.Error(), "writefence: ") || tc.is == context.Canceled || tc.is == context.DeadlineExceeded,
				"message %q lacks the package prefix", err)
			if tc.arg != "" {
				var ia *writefence.InvalidArgumentError
				require.ErrorAs(t, err, &ia)
				assert.Equal(t, tc.arg, ia.Arg)
			}
			if tc.stale != nil {
				var se *writefence.StaleEpochError
				require.ErrorAs(t, err, &se)
				assert.Equal(t, *tc.stale, *se)
			}
			if tc.corrupt != nil {
				var ce *writefence.CorruptError
				require.ErrorAs(t, err, &ce)
				assert.Equal(t, *tc.corrupt, *ce)
			}
			if tc.wire != nil {
				var we *writefence.WireError
				require.ErrorAs(t, err, &we)
				assert.Equal(t, *tc.wire, *we)
			}
			if tc.name != "memstore malformed version" {
				assert.Equal(t, puts, counting.Calls(fakestore.Put), "no write may be attempted")
			}
			assert.Equal(t, before, snapshot(t, mem), "the store must be unchanged")
		})
	}
}

// forgeCRC returns a copy of p, of the same length, whose last four bytes
// are changed so that its CRC-32C equals want. CRC-32C is linear over
// GF(2), so the effect of each of the last 32 bits on the checksum is a
// fixed vector, and a set of bits to flip is found by elimination.
func forgeCRC(t *testing.T, p []byte, want uint32) []byte {
	t.Helper()
	require.GreaterOrEqual(t, len(p), 4)
	out := append([]byte(nil), p...)
	zero := record.CRC32C(make([]byte, len(p)))
	type row struct{ effect, bits uint32 }
	var rows []row
	for bit := range 32 {
		e := make([]byte, len(p))
		e[len(p)-4+bit/8] = 1 << (bit % 8)
		rows = append(rows, row{record.CRC32C(e) ^ zero, 1 << bit})
	}
	// Reduce to one row per leading bit of effect.
	var basis [32]row
	for _, r := range rows {
		for i := 31; i >= 0 && r.effect != 0; i-- {
			if r.effect&(1<<i) == 0 {
				continue
			}
			if basis[i].effect == 0 {
				basis[i] = r
				break
			}
			r.effect ^= basis[i].effect
			r.bits ^= basis[i].bits
		}
	}
	need, flip := record.CRC32C(p)^want, uint32(0)
	for i := 31; i >= 0; i-- {
		if need&(1<<i) != 0 {
			require.NotZero(t, basis[i].effect, "no basis vector for bit %d", i)
			need ^= basis[i].effect
			flip ^= basis[i].bits
		}
	}
	for bit := range 32 {
		if flip&(1<<bit) != 0 {
			out[len(p)-4+bit/8] ^= 1 << (bit % 8)
		}
	}
	require.Equal(t, want, record.CRC32C(out))
	return out
}

// TestReplayIsDecidedByThePayload: a record of the same epoch, writer,
// length and payload checksum as a push is that push only if its payload
// is the same bytes; the checksum alone never decides.
func TestReplayIsDecidedByThePayload(t *testing.T) {
	ctx := t.Context()
	mem := &writefence.MemStore{}
	mine := []byte("segment 0007: the bytes this writer pushed")
	other := forgeCRC(t, []byte("segment 0007: other bytes, same length!!!!"), record.CRC32C(mine))
	require.Len(t, other, len(mine))
	require.NotEqual(t, mine, other)

	require.NoError(t, (&writefence.Fence{Store: mem}).Push(ctx, "wal", "0", "a", 7, mine))
	require.NoError(t, (&writefence.Fence{Store: mem}).Push(ctx, "wal", "0", "a", 7, mine), "the same push again is its replay")
	err := (&writefence.Fence{Store: mem}).Push(ctx, "wal", "0", "a", 7, other)
	require.ErrorIs(t, err, writefence.ErrStaleEpoch, "other bytes with the same checksum are not this push")
}

// BenchmarkPush measures a writer pushing consecutive epochs to one shard of
// the in-memory store, reporting store round trips per push beside time
// and allocations. "steady" lets the fence condition each write on the
// version it last wrote; "read-first" gives every push a fresh Fence, so
// each one reads the record before writing, as a fence without a version
// cache would.
func BenchmarkPush(b *testing.B) {
	for _, size := range []int{1 << 10, 1 << 20} {
		payload := make([]byte, size)
		for _, mode := range []string{"steady", "read-first"} {
			b.Run(fmt.Sprintf("%s/%dKiB", mode, size>>10), func(b *testing.B) {
				ctx := context.Background()
				store := counted(&writefence.MemStore{})
				f := &writefence.Fence{Store: store}
				epoch := uint64(1)
				if err := f.Push(ctx, "wal", "0", "w", epoch, payload); err != nil {
					b.Fatal(err)
				}
				start := roundTrips(store)
				b.SetBytes(int64(size))
				b.ReportAllocs()
				for b.Loop() {
					epoch++
					if mode == "read-first" {
						f = &writefence.Fence{Store: store}
					}
					if err := f.Push(ctx, "wal", "0", "w", epoch, payload); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(roundTrips(store)-start)/float64(b.N), "roundtrips/op")
			})
		}
	}
}

// The test doubles below are fakestore Stores over a writefence.MemStore,
// the in-memory model, or broken stores of their own.

// counted returns a fake store over inner, with faults, that offers Get
// and PutIfVersion alone, as a wrapper that embeds a ConditionalStore
// does; its Calls count the calls that reach the store.
func counted(inner writefence.ConditionalStore, faults ...fakestore.Fault) fakestore.Store {
	return fakestore.New(inner, fakestore.Options{Hide: fakestore.All, Faults: faults})
}

// countedFence returns a Fence over a counted MemStore.
func countedFence() (*writefence.MemStore, fakestore.Store, *writefence.Fence) {
	mem := &writefence.MemStore{}
	counting := counted(mem)
	return mem, counting, &writefence.Fence{Store: counting}
}

// roundTrips returns the reads and writes made of s.
func roundTrips(s fakestore.Store) int64 { return s.Calls(fakestore.Get) + s.Calls(fakestore.Put) }

// conflicts answers ErrConflict to the next n writes (every write when n
// is 0) without performing them, as if another writer won each race.
func conflicts(n int) fakestore.Fault {
	return fakestore.Fault{Op: fakestore.Put, Times: n, Err: writefence.ErrConflict}
}

// lostReplies performs the next n writes that land and reports
// fakestore.ErrLostReply instead of their result.
func lostReplies(n int) fakestore.Fault {
	return fakestore.Fault{Op: fakestore.Put, Times: n, Err: fakestore.ErrLostReply, Lost: true}
}

// readsFail fails every read, so the outcome of a write cannot be learned.
var readsFail = fakestore.Fault{Op: fakestore.Get, Err: fakestore.ErrLostReply}

// clientCompare returns a broken store over mem: it checks the
// precondition itself with a Get and then writes unconditionally, leaving
// a window in which another writer's write is overwritten.
func clientCompare(mem *writefence.MemStore) fakestore.Store {
	return fakestore.New(mem, fakestore.Options{Hide: fakestore.All, Put: func(ctx context.Context, key string, data []byte, expect string) (string, error) {
		_, current, err := mem.Get(ctx, key)
		if errors.Is(err, writefence.ErrNotFound) {
			current = ""
		} else if err != nil {
			return "", err
		}
		if current != expect {
			return "", writefence.ErrConflict
		}
		time.Sleep(50 * time.Microsecond) // the window a real network round trip leaves
		return unconditionalPut(ctx, mem, key, data)
	}})
}

// ignoring returns a broken store over mem that accepts every write
// whatever the precondition, as some "S3-compatible" services do with
// If-Match.
func ignoring(mem *writefence.MemStore) fakestore.Store {
	return fakestore.New(mem, fakestore.Options{Hide: fakestore.All, Put: func(ctx context.Context, key string, data []byte, _ string) (string, error) {
		time.Sleep(50 * time.Microsecond) // the request's trip to the server
		return unconditionalPut(ctx, mem, key, data)
	}})
}

// unconditionalPut overwrites key on m whatever it holds.
func unconditionalPut(ctx context.Context, m *writefence.MemStore, key string, data []byte) (string, error) {
	for {
		_, v, err := m.Get(ctx, key) // v is "" when absent
		if err != nil && !errors.Is(err, writefence.ErrNotFound) {
			return "", err
		}
		if nv, err := m.PutIfVersion(ctx, key, data, v); !errors.Is(err, writefence.ErrConflict) {
			return nv, err
		}
	}
}

// together runs fn(0), ..., fn(n-1) on n goroutines released at once and
// returns their errors, in order.
func together(n int, fn func(i int) error) []error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			errs[i] = fn(i)
		})
	}
	close(start)
	wg.Wait()
	return errs
}

// epochFunc adapts a function to an EpochSource.
type epochFunc func(ctx context.Context, plugin, shard string) (uint64, error)

func (fn epochFunc) Epoch(ctx context.Context, plugin, shard string) (uint64, error) {
	return fn(ctx, plugin, shard)
}

// TestRaceSameEpoch: many writers push the same epoch at once; exactly one
// lands per round and every other is refused as stale.
func TestRaceSameEpoch(t *testing.T) {
	const writers, rounds = 64, 200
	ctx := context.Background()
	f := &writefence.Fence{Store: &writefence.MemStore{}}
	var stale, landed int
	for round := 1; round <= rounds; round++ {
		errs := together(writers, func(w int) error {
			return f.Push(ctx, "wal", "0", fmt.Sprintf("w%d", w), uint64(round), []byte(fmt.Sprintf("r%d w%d", round, w)))
		})
		winner := oneWinner(t, round, errs, writefence.ErrStaleEpoch)
		landed, stale = landed+1, stale+len(errs)-1
		requireLatestIn(t, f, "wal", "0", uint64(round), fmt.Sprintf("w%d", winner), fmt.Sprintf("r%d w%d", round, winner))
	}
	assert.Equal(t, rounds, landed)
	assert.Equal(t, rounds*(writers-1), stale)
	t.Logf("%d rounds of %d writers: %d landed (one per round), %d refused as stale", rounds, writers, landed, stale)
}

// oneWinner returns the index of the one nil error of a round of racers,
// failing t unless exactly one is nil and every other matches want.
func oneWinner(t *testing.T, round int, errs []error, want error) int {
	t.Helper()
	winner := -1
	for w, err := range errs {
		if err == nil {
			require.Equal(t, -1, winner, "round %d: writers %d and %d both landed", round, winner, w)
			winner = w
			continue
		}
		require.ErrorIs(t, err, want, "round %d writer %d", round, w)
	}
	require.NotEqual(t, -1, winner, "round %d: nobody landed", round)
	return winner
}

func requireLatestIn(t testing.TB, f *writefence.Fence, plugin, shard string, epoch uint64, writer, payload string) {
	t.Helper()
	e, w, p, err := f.Latest(context.Background(), plugin, shard)
	require.NoError(t, err)
	require.Equal(t, epoch, e)
	require.Equal(t, writer, w)
	require.Equal(t, payload, string(p))
}

// TestRaceEpochLadder: writers push epochs in random order; every epoch that
// lands (as the store saw it) is greater than the one before, and the final
// record holds the maximum.
func TestRaceEpochLadder(t *testing.T) {
	const writers, epochsPerWriter, rounds = 16, 8, 20
	ctx := context.Background()
	var landed, stale, lost int
	for round := range rounds {
		// Every record that lands is recorded, under the store's own
		// ordering, so that the test checks the sequence the store saw.
		mem := &writefence.MemStore{}
		reader := &writefence.Fence{Store: mem} // decodes what landed
		var order sync.Mutex                    // held across each write, and guards epochs
		var epochs []uint64
		obs := fakestore.New(mem, fakestore.Options{Hide: fakestore.Declared, Put: func(ctx context.Context, key string, data []byte, expect string) (string, error) {
			order.Lock()
			defer order.Unlock()
			v, err := mem.PutIfVersion(ctx, key, data, expect)
			if err == nil {
				e, _, _, lerr := reader.Latest(ctx, "wal", "0")
				if lerr != nil {
					return "", lerr
				}
				epochs = append(epochs, e)
			}
			return v, err
		}})
		// Each conflict means another writer landed, so with 16 writers the
		// default bound could end the highest epoch's push; raise it.
		f := &writefence.Fence{Store: obs, RetryDelay: 100 * time.Microsecond, MaxAttempts: 256}
		rng := rand.New(rand.NewPCG(uint64(round), 7))
		all := rng.Perm(writers * epochsPerWriter)
		var mu sync.Mutex
		var wg sync.WaitGroup
		for w := range writers {
			mine := all[w*epochsPerWriter : (w+1)*epochsPerWriter]
			wg.Go(func() {
				for _, e := range mine {
					err := f.Push(ctx, "wal", "0", fmt.Sprintf("w%d", w), uint64(e+1), []byte("x"))
					mu.Lock()
					switch {
					case err == nil:
						landed++
					case isStale(err):
						stale++
					default:
						lost++
						t.Errorf("epoch %d: %v", e+1, err)
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		for i := 1; i < len(epochs); i++ {
			require.Greater(t, epochs[i], epochs[i-1], "round %d: landed epochs %v", round, epochs)
		}
		e, _, _, err := f.Latest(ctx, "wal", "0")
		require.NoError(t, err)
		require.Equal(t, uint64(writers*epochsPerWriter), e, "the highest epoch always lands")
	}
	t.Logf("%d rounds, %d writers x %d random epochs: %d landed, %d stale, %d other", rounds, writers, epochsPerWriter, landed, stale, lost)
}

func isStale(err error) bool {
	var s *writefence.StaleEpochError
	return errors.As(err, &s)
}

// TestRaceCatchesBrokenStores shows the same-epoch race has teeth: over a
// store that compares on the client side, or one that ignores
// preconditions, several writers of one epoch land in the same round.
func TestRaceCatchesBrokenStores(t *testing.T) {
	const writers, rounds = 32, 20
	ctx := context.Background()
	stores := map[string]writefence.ConditionalStore{
		"client-side compare":  clientCompare(&writefence.MemStore{}),
		"ignores precondition": ignoring(&writefence.MemStore{}),
	}
	for name, store := range stores {
		f := &writefence.Fence{Store: store}
		worst := 0
		for round := 1; round <= rounds; round++ {
			landed := 0
			for _, err := range together(writers, func(w int) error {
				return f.Push(ctx, "wal", "0", fmt.Sprintf("w%d", w), uint64(round), []byte("x"))
			}) {
				if err == nil {
					landed++
				}
			}
			worst = max(worst, landed)
		}
		assert.Greater(t, worst, 1, "%s: the race never caught a double landing", name)
		t.Logf("%s: up to %d writers landed the same epoch in one round", name, worst)
	}
}

// TestPromise5_PushUnderAnEndedContext: a push whose ctx ended before it
// wrote returns ctx's error, with nothing written: its outcome is known,
// even from a Fence that remembers the record's version and would write
// without reading (promise 5; Push: "a cancelled ctx, an error matching
// ctx.Err()").
func TestPromise5_PushUnderAnEndedContext(t *testing.T) {
	ctx := t.Context()
	obs := &outcomeCounter{}
	f := &writefence.Fence{Store: &writefence.MemStore{}, Observer: obs.observe}
	require.NoError(t, f.Push(ctx, "wal", "0", "a", 1, []byte("segment 1")))
	ended, cancel := context.WithCancel(ctx)
	cancel()

	err := f.Push(ended, "wal", "0", "a", 2, []byte("segment 2"))
	require.ErrorIs(t, err, context.Canceled)
	assert.NotErrorIs(t, err, writefence.ErrOutcomeUnknown, "nothing was sent")
	assert.Equal(t, "failed", eventOutcome(obs.last()), "the Observer sees a failure, not an unknown outcome")
	requireLatest(t, f, 1, "a", "segment 1")
}
