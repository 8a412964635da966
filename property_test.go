package writefence_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/keys"
)

// lostMode is what happens to the answer of a push's first write that gets
// past the injected conflicts.
type lostMode int

const (
	lostNone   lostMode = iota
	lostBefore          // the write never reaches the store; an error comes back
	lostAfter           // the write is performed; an error replaces its answer
)

// readFault is when the reads of a push fail.
type readFault int

const (
	readsOK            readFault = iota
	readsFail                    // every read fails
	readsFailAfterLoss           // reads fail once a write's answer was lost
)

// propFaults are the faults armed for one push.
type propFaults struct {
	conflicts int // the first writes answer ErrConflict without writing
	lost      lostMode
	reads     readFault
}

// propStore is the property test's store: a MemStore behind the faults of
// propFaults. The test reads and corrupts the MemStore directly.
type propStore struct {
	m *writefence.MemStore

	mu     sync.Mutex // guards faults and lostAt
	faults propFaults
	lostAt bool // a write's answer was lost since the faults were armed
}

func (s *propStore) arm(f propFaults) {
	s.mu.Lock()
	s.faults, s.lostAt = f, false
	s.mu.Unlock()
}

func (s *propStore) Get(ctx context.Context, key string) ([]byte, string, error) {
	s.mu.Lock()
	fail := s.faults.reads == readsFail || s.faults.reads == readsFailAfterLoss && s.lostAt
	s.mu.Unlock()
	if fail {
		return nil, "", errLostReply
	}
	return s.m.Get(ctx, key)
}

func (s *propStore) PutIfVersion(ctx context.Context, key string, data []byte, expect string) (string, error) {
	s.mu.Lock()
	if s.faults.conflicts > 0 {
		s.faults.conflicts--
		s.mu.Unlock()
		return "", writefence.ErrConflict
	}
	lost := s.faults.lost
	s.faults.lost = lostNone
	if lost != lostNone {
		s.lostAt = true
	}
	s.mu.Unlock()
	switch lost {
	case lostBefore:
		return "", errLostReply
	case lostAfter:
		_, _ = s.m.PutIfVersion(ctx, key, data, expect)
		return "", errLostReply // whatever the answer was, it is lost
	}
	return s.m.PutIfVersion(ctx, key, data, expect)
}

// propCounts tallies what the property test saw, over all its runs.
type propCounts struct {
	pushes, landed, replays, stale, unknown, corruptRefused, conflicts, failed int
	corruptions, settles, latests                                              int
}

// propHarness is one run of the property test: the store, three writers
// each with a Fence of its own (so each has its own version cache), and the
// model.
type propHarness struct {
	mem    *writefence.MemStore
	store  *propStore
	fences []*writefence.Fence
	reader *writefence.Fence // reads the MemStore directly
	key    string
	counts *propCounts

	// The model.
	rec            fenceState // the last record that landed; epoch 0 is none
	corrupt        bool       // the store holds garbage at corruptVersion
	corruptVersion string
	lastEpoch      uint64 // the epoch of the last record that landed
	last           *fenceInput
}

const propPlugin, propShard = "wal", "prop"

func newPropHarness(t *rapid.T, counts *propCounts) *propHarness {
	mem := &writefence.MemStore{}
	h := &propHarness{mem: mem, store: &propStore{m: mem}, reader: &writefence.Fence{Store: mem}, counts: counts}
	for range 3 {
		h.fences = append(h.fences, &writefence.Fence{Store: h.store, MaxAttempts: 3, RetryDelay: time.Microsecond})
	}
	key, err := keys.Shard("", propPlugin, propShard)
	require.NoError(t, err)
	h.key = key
	return h
}

// version returns the MemStore's current version of the record, "" if none.
func (h *propHarness) version(t *rapid.T) string {
	_, v, err := h.mem.Get(context.Background(), h.key)
	if errors.Is(err, writefence.ErrNotFound) {
		return ""
	}
	require.NoError(t, err)
	return v
}

// land records in the model a record that landed.
func (h *propHarness) land(t *rapid.T, rec fenceState) {
	require.Greater(t, rec.epoch, h.lastEpoch, "landed epochs must strictly increase")
	h.rec, h.lastEpoch = rec, rec.epoch
	h.counts.landed++
}

// stored reads the record from the MemStore and checks it is exactly rec.
func (h *propHarness) requireStored(t *rapid.T, rec fenceState, msg string) {
	e, w, p, err := h.reader.Latest(context.Background(), propPlugin, propShard)
	require.NoError(t, err, msg)
	require.Equal(t, rec, fenceState{e, w, string(p)}, msg)
}

func (h *propHarness) drawFaults(t *rapid.T) propFaults {
	return propFaults{
		conflicts: rapid.IntRange(0, 4).Draw(t, "conflicts"),
		lost:      rapid.SampledFrom([]lostMode{lostNone, lostNone, lostBefore, lostAfter}).Draw(t, "lost"),
		reads:     rapid.SampledFrom([]readFault{readsOK, readsOK, readsFail, readsFailAfterLoss}).Draw(t, "reads"),
	}
}

func (h *propHarness) push(t *rapid.T) {
	w := rapid.IntRange(0, len(h.fences)-1).Draw(t, "writer")
	lo := h.rec.epoch - min(h.rec.epoch, 2)
	in := fenceInput{
		epoch:   rapid.Uint64Range(max(1, lo), h.rec.epoch+3).Draw(t, "epoch"),
		writer:  fmt.Sprintf("w%d", w),
		payload: string(rapid.SliceOfN(rapid.Byte(), 0, 8).Draw(t, "payload")),
	}
	h.doPush(t, w, in, h.drawFaults(t))
}

// repeat pushes the last push's arguments again.
func (h *propHarness) repeat(t *rapid.T) {
	if h.last == nil {
		t.Skip("nothing to repeat")
	}
	in := *h.last
	h.doPush(t, int(in.writer[1]-'0'), in, h.drawFaults(t))
}

func (h *propHarness) doPush(t *rapid.T, w int, in fenceInput, faults propFaults) {
	ctx := context.Background()
	h.counts.pushes++
	h.last = &in
	mine := fenceState{in.epoch, in.writer, in.payload}
	before := h.version(t)
	h.store.arm(faults)
	err := h.fences[w].Push(ctx, propPlugin, propShard, in.writer, in.epoch, []byte(in.payload))
	h.store.arm(propFaults{})
	changed := h.version(t) != before

	if changed {
		require.False(t, h.corrupt, "a corrupt record was overwritten by a push (%v)", err)
		h.requireStored(t, mine, "a changed record must be this push's")
		require.True(t, err == nil || errors.Is(err, writefence.ErrOutcomeUnknown),
			"a push that landed returned %v", err)
		h.land(t, mine)
	}
	if h.corrupt && faults.lost == lostNone && faults.reads == readsOK {
		require.ErrorIs(t, err, writefence.ErrCorrupt, "a push over a corrupt record")
	}

	var se *writefence.StaleEpochError
	switch {
	case err == nil:
		require.False(t, h.corrupt)
		require.Equal(t, mine, h.rec, "push returned nil but the store holds another record")
		if !changed {
			h.counts.replays++
		}
	case errors.As(err, &se):
		h.counts.stale++
		require.False(t, changed)
		require.False(t, h.corrupt)
		require.NotEqual(t, mine, h.rec, "a landed push of the writer's own was reported stale")
		require.LessOrEqual(t, in.epoch, h.rec.epoch)
		require.Equal(t, h.rec.epoch, se.RecordedEpoch)
		require.Equal(t, h.rec.writer, se.RecordedWriter)
	case errors.Is(err, writefence.ErrOutcomeUnknown):
		h.counts.unknown++
		h.settleUnknown(t, w, in)
	case errors.Is(err, writefence.ErrCorrupt):
		h.counts.corruptRefused++
		require.True(t, h.corrupt, "ErrCorrupt from a sound record: %v", err)
	case errors.Is(err, writefence.ErrConflict):
		h.counts.conflicts++
	default:
		h.counts.failed++
	}
}

// settleUnknown repeats a push whose outcome was unknown, without faults:
// the answer must be definite and agree with the store.
func (h *propHarness) settleUnknown(t *rapid.T, w int, in fenceInput) {
	mine := fenceState{in.epoch, in.writer, in.payload}
	before := h.version(t)
	err := h.fences[w].Push(context.Background(), propPlugin, propShard, in.writer, in.epoch, []byte(in.payload))
	changed := h.version(t) != before
	switch {
	case h.corrupt:
		require.ErrorIs(t, err, writefence.ErrCorrupt)
		require.False(t, changed, "a corrupt record was overwritten by a push")
	case h.rec == mine: // the unknown push had landed
		require.NoError(t, err, "the repeat of a push that landed")
		require.False(t, changed)
	case in.epoch > h.rec.epoch: // it had not, and can now
		require.NoError(t, err)
		require.True(t, changed)
		h.requireStored(t, mine, "settled")
		h.land(t, mine)
	default:
		require.ErrorIs(t, err, writefence.ErrStaleEpoch)
		require.False(t, changed)
	}
}

// damage overwrites the record directly with bytes that fail to decode:
// random garbage, or the record with one bit flipped.
func (h *propHarness) damage(t *rapid.T) {
	ctx := context.Background()
	data, version, err := h.mem.Get(ctx, h.key)
	if errors.Is(err, writefence.ErrNotFound) {
		version, err = "", nil
	}
	require.NoError(t, err)
	// A second flip could undo the first: flip only a sound record.
	if len(data) > 0 && !h.corrupt && rapid.Bool().Draw(t, "flip") {
		bit := rapid.IntRange(0, len(data)*8-1).Draw(t, "bit")
		data[bit/8] ^= 1 << (bit % 8)
	} else {
		data = rapid.SliceOfN(rapid.Byte(), 0, 96).Draw(t, "garbage")
	}
	v, err := h.mem.PutIfVersion(ctx, h.key, data, version)
	require.NoError(t, err)
	_, _, _, err = h.reader.Latest(ctx, propPlugin, propShard)
	require.ErrorIs(t, err, writefence.ErrCorrupt, "the damaged record must not decode")
	h.corrupt, h.corruptVersion = true, v
	h.counts.corruptions++
}

// settle replaces a corrupt record as an operator would: a conditional
// overwrite of exactly the version the CorruptError names, which succeeds
// only if nothing overwrote the corrupt record in the meantime.
func (h *propHarness) settle(t *rapid.T) {
	if !h.corrupt {
		t.Skip("nothing to settle")
	}
	ctx := context.Background()
	var ce *writefence.CorruptError
	_, _, _, err := h.reader.Latest(ctx, propPlugin, propShard)
	require.ErrorAs(t, err, &ce)
	require.Equal(t, h.corruptVersion, ce.Version)

	rec := fenceState{h.lastEpoch + 1, "operator", "settled"}
	scratch := &writefence.MemStore{}
	require.NoError(t, (&writefence.Fence{Store: scratch}).Push(ctx, propPlugin, propShard, rec.writer, rec.epoch, []byte(rec.payload)))
	data, _, err := scratch.Get(ctx, h.key)
	require.NoError(t, err)
	_, err = h.mem.PutIfVersion(ctx, h.key, data, ce.Version)
	require.NoError(t, err, "the corrupt record was overwritten")
	h.corrupt = false
	h.land(t, rec)
	h.counts.settles++
}

func (h *propHarness) latest(t *rapid.T) {
	f := h.fences[rapid.IntRange(0, len(h.fences)-1).Draw(t, "reader")]
	e, w, p, err := f.Latest(context.Background(), propPlugin, propShard)
	h.counts.latests++
	switch {
	case h.corrupt:
		require.ErrorIs(t, err, writefence.ErrCorrupt)
	case h.rec.epoch == 0:
		require.ErrorIs(t, err, writefence.ErrNotFound)
	default:
		require.NoError(t, err)
		require.Equal(t, h.rec, fenceState{e, w, string(p)})
	}
}

// check is the invariant after every action: the store holds what the
// model says, byte for byte in the corrupt case.
func (h *propHarness) check(t *rapid.T) {
	switch {
	case h.corrupt:
		require.Equal(t, h.corruptVersion, h.version(t), "the corrupt record was overwritten")
	case h.rec.epoch == 0:
		require.Empty(t, h.version(t))
	default:
		h.requireStored(t, h.rec, "the store and the model disagree")
	}
}

// TestFenceProperties runs the fence against its model under random
// interleavings of pushes by three writers at random epochs, repeated
// pushes, corruptions of the record, operator settlements of a corrupt
// record, reads, and per push injected conflicts, lost replies (the write
// performed or not) and failing reads. After every push it checks: landed
// epochs strictly increase; a corrupt record is never overwritten by a push
// and every push and read over it reports ErrCorrupt; a push returns nil
// only if the store holds exactly it; a stale refusal changes nothing, is
// never given to a push the store holds, and names the recorded epoch; an
// outcome-unknown push, repeated without faults, gets a definite answer
// that agrees with the store.
func TestFenceProperties(t *testing.T) {
	var counts propCounts
	rapid.Check(t, func(rt *rapid.T) {
		h := newPropHarness(rt, &counts)
		rt.Repeat(map[string]func(*rapid.T){
			"push":   h.push,
			"repeat": h.repeat,
			"damage": h.damage,
			"settle": h.settle,
			"latest": h.latest,
			"":       h.check,
		})
	})
	t.Logf("%+v", counts)
}
