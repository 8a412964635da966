package writefence_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/fakestore"
	"github.com/writefence/writefence/writefencetest"
)

// termFunc is a term function the test steers: it returns term, or err
// when set, and counts its calls.
type termFunc struct {
	mu    sync.Mutex // guards the fields below
	term  uint64
	err   error
	calls int
}

func (tf *termFunc) set(term uint64, err error) {
	tf.mu.Lock()
	defer tf.mu.Unlock()
	tf.term, tf.err = term, err
}

func (tf *termFunc) fn(context.Context) (uint64, error) {
	tf.mu.Lock()
	defer tf.mu.Unlock()
	tf.calls++
	return tf.term, tf.err
}

func epochOf(term, n uint64) uint64 { return term<<32 | n }

func newTermSource(f *writefence.Fence, writer string, tf *termFunc) *writefence.TermSource {
	return &writefence.TermSource{Fence: f, Writer: writer, Term: tf.fn}
}

func TestTermSourceEpochsRise(t *testing.T) {
	ctx := t.Context()
	f := &writefence.Fence{Store: &writefence.MemStore{}}
	tf := &termFunc{term: 7}
	src := newTermSource(f, "node-a", tf)
	for i := uint64(1); i <= 1000; i++ {
		shard := fmt.Sprint(i % 3)
		epoch, err := f.PushFrom(ctx, src, "wal", shard, "node-a", []byte("segment"))
		require.NoError(t, err)
		require.Equal(t, epochOf(7, i), epoch, "draw %d", i)
	}
	assert.Equal(t, 1000, tf.calls, "the term function is asked on every epoch")
}

// A process restarted in its term reads the shard's record and continues
// above what it pushed before, instead of starting at term<<32 | 1, which
// the store refuses.
func TestTermSourceRestartInSameTerm(t *testing.T) {
	ctx := t.Context()
	mem := &writefence.MemStore{}
	f := &writefence.Fence{Store: mem}
	tf := &termFunc{term: 7}
	before := newTermSource(f, "node-a", tf)
	for range 3 {
		_, err := f.PushFrom(ctx, before, "wal", "0", "node-a", []byte("segment"))
		require.NoError(t, err)
	}
	require.ErrorIs(t, f.Push(ctx, "wal", "0", "node-a", epochOf(7, 1), []byte("again")), writefence.ErrStaleEpoch,
		"counting afresh after a restart would be refused")

	restarted := &writefence.Fence{Store: mem}
	after := newTermSource(restarted, "node-a", tf)
	epoch, err := restarted.PushFrom(ctx, after, "wal", "0", "node-a", []byte("segment 4"))
	require.NoError(t, err)
	assert.Equal(t, epochOf(7, 4), epoch, "continues above the recorded epoch of its term")
	epoch, err = after.Epoch(ctx, "wal", "1")
	require.NoError(t, err)
	assert.Equal(t, epochOf(7, 5), epoch, "a shard never written continues from the source's own count")

	// Records of earlier terms are passed, not continued.
	require.NoError(t, f.Seal(ctx, "wal", "2", "node-z", epochOf(6, 900)))
	epoch, err = after.Epoch(ctx, "wal", "2")
	require.NoError(t, err)
	assert.Equal(t, epochOf(7, 6), epoch)

	// A shard that a restart finds further ahead raises the count for
	// every shard: epochs never fall.
	require.NoError(t, f.Seal(ctx, "wal", "3", "node-a", epochOf(7, 40)))
	epoch, err = after.Epoch(ctx, "wal", "3")
	require.NoError(t, err)
	assert.Equal(t, epochOf(7, 41), epoch)
	epoch, err = after.Epoch(ctx, "wal", "0")
	require.NoError(t, err)
	assert.Equal(t, epochOf(7, 42), epoch)
}

// Once the term function reports another term, newer or older, the source
// hands out nothing more, even if the old term comes back.
func TestTermSourceTermChangeMidStream(t *testing.T) {
	for _, next := range []uint64{8, 6} {
		t.Run(fmt.Sprint("to term ", next), func(t *testing.T) {
			ctx := t.Context()
			f := &writefence.Fence{Store: &writefence.MemStore{}}
			tf := &termFunc{term: 7}
			src := newTermSource(f, "node-a", tf)
			for range 2 {
				_, err := f.PushFrom(ctx, src, "wal", "0", "node-a", []byte("segment"))
				require.NoError(t, err)
			}
			tf.set(next, nil)
			epoch, err := src.Epoch(ctx, "wal", "0")
			require.ErrorIs(t, err, writefence.ErrTermEnded)
			require.Zero(t, epoch)
			assert.Contains(t, err.Error(), fmt.Sprintf("at term 7: the term function reports term %d", next))

			tf.set(7, nil)
			calls := tf.calls
			epoch, err = src.Epoch(ctx, "wal", "1")
			require.ErrorIs(t, err, writefence.ErrTermEnded, "final, whatever the term function says next")
			require.Zero(t, epoch)
			assert.Equal(t, calls, tf.calls, "an ended source does not ask again")
		})
	}
}

// A term function error ends the source: no epoch, now or later, even
// when the term function reports the same term again; the error names the
// term function's. A call whose own ctx ended returns ctx.Err() and ends
// nothing.
func TestTermSourceTermFunctionError(t *testing.T) {
	ctx := t.Context()
	f := &writefence.Fence{Store: &writefence.MemStore{}}
	errAPI := errors.New("the API server is unreachable")
	tf := &termFunc{term: 7}
	src := newTermSource(f, "node-a", tf)
	first, err := src.Epoch(ctx, "wal", "0")
	require.NoError(t, err)

	cctx, cancel := context.WithCancel(ctx)
	cancel()
	tf.set(7, cctx.Err())
	_, err = src.Epoch(cctx, "wal", "0")
	require.Equal(t, context.Canceled, err, "a cancelled ctx is returned as is")
	tf.set(7, nil)
	epoch, err := src.Epoch(ctx, "wal", "0")
	require.NoError(t, err, "a cancelled call ends nothing")
	assert.Equal(t, first+1, epoch)

	tf.set(7, errAPI)
	epoch, err = src.Epoch(ctx, "wal", "0")
	require.ErrorIs(t, err, errAPI)
	require.ErrorIs(t, err, writefence.ErrTermEnded)
	require.Zero(t, epoch)
	tf.set(7, nil)
	_, err = f.PushFrom(ctx, src, "wal", "0", "node-a", []byte("segment"))
	require.ErrorIs(t, err, writefence.ErrTermEnded, "the same term again does not revive it")
	require.ErrorIs(t, err, errAPI)
	_, _, _, err = f.Latest(ctx, "wal", "0")
	require.ErrorIs(t, err, writefence.ErrNotFound, "PushFrom wrote nothing")
}

func TestTermSourceTermLimit(t *testing.T) {
	ctx := t.Context()
	f := &writefence.Fence{Store: &writefence.MemStore{}}
	const maxTerm = 1<<32 - 1
	epoch, err := newTermSource(f, "node-a", &termFunc{term: maxTerm}).Epoch(ctx, "wal", "0")
	require.NoError(t, err)
	assert.Equal(t, uint64(maxTerm)<<32|1, epoch)

	epoch, err = newTermSource(f, "node-a", &termFunc{term: maxTerm + 1}).Epoch(ctx, "wal", "0")
	require.ErrorIs(t, err, writefence.ErrTermEnded)
	assert.Contains(t, err.Error(), "term 4294967296 is above 2^32-1")
	require.Zero(t, epoch)

	epoch, err = newTermSource(f, "node-a", &termFunc{term: 0}).Epoch(ctx, "wal", "1")
	require.NoError(t, err)
	assert.Equal(t, uint64(1), epoch, "term 0 is a term: its epochs are 1, 2, ...")
}

// What a shard's record shows can end the source: a newer term (another
// leader), this term by another writer (two writers in one term), or this
// term's last epoch.
func TestTermSourceEndedByTheRecord(t *testing.T) {
	for _, tc := range []struct {
		name   string
		epoch  uint64
		writer string
		want   string
	}{
		{"newer term", epochOf(8, 1), "node-b", "records epoch 34359738369 of term 8 by node-b"},
		{"another writer in this term", epochOf(7, 3), "node-b", "of this term by node-b: two writers in one term"},
		{"epochs used up", epochOf(7, 1<<32-1), "node-a", "its 4294967295 epochs are used up"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			f := &writefence.Fence{Store: &writefence.MemStore{}}
			require.NoError(t, f.Seal(ctx, "wal", "0", tc.writer, tc.epoch))
			src := newTermSource(f, "node-a", &termFunc{term: 7})
			epoch, err := src.Epoch(ctx, "wal", "0")
			require.ErrorIs(t, err, writefence.ErrTermEnded)
			assert.Contains(t, err.Error(), tc.want)
			require.Zero(t, epoch)
			_, err = src.Epoch(ctx, "wal", "1")
			require.ErrorIs(t, err, writefence.ErrTermEnded, "ended for every shard")
		})
	}
}

// A record damaged after its header still tells its epoch; one whose
// header does not decode has no epoch to continue above, and a failed read
// tells nothing: both return an error and no epoch, and the next call reads
// again.
func TestTermSourceUnreadableRecord(t *testing.T) {
	ctx := t.Context()
	mem := &writefence.MemStore{}
	lost := counted(mem)
	f := &writefence.Fence{Store: lost}
	require.NoError(t, f.Push(ctx, "wal", "0", "node-a", epochOf(7, 5), []byte("segment")))
	key := mustKey(t, "wal", "0")
	data, version, err := mem.Get(ctx, key)
	require.NoError(t, err)
	data[len(data)-1] ^= 0xff // the payload's checksum fails, the header decodes
	_, err = mem.PutIfVersion(ctx, key, data, version)
	require.NoError(t, err)
	_, err = mem.PutIfVersion(ctx, mustKey(t, "wal", "1"), []byte("garbage"), "")
	require.NoError(t, err)

	src := newTermSource(&writefence.Fence{Store: lost}, "node-a", &termFunc{term: 7})
	lost.Inject(readsFail)
	epoch, err := src.Epoch(ctx, "wal", "0")
	require.ErrorIs(t, err, fakestore.ErrLostReply)
	require.Zero(t, epoch)
	lost.Clear(fakestore.Get)

	epoch, err = src.Epoch(ctx, "wal", "0")
	require.NoError(t, err)
	assert.Equal(t, epochOf(7, 6), epoch, "above the damaged record's epoch")

	epoch, err = src.Epoch(ctx, "wal", "1")
	require.ErrorIs(t, err, writefence.ErrCorrupt)
	require.NotErrorIs(t, err, writefence.ErrTermEnded)
	require.Zero(t, epoch)
}

func TestTermSourceInvalid(t *testing.T) {
	ctx := t.Context()
	f := &writefence.Fence{Store: &writefence.MemStore{}}
	tf := &termFunc{term: 1}
	for _, src := range []*writefence.TermSource{
		{Writer: "a", Term: tf.fn},
		{Fence: f, Writer: "a"},
		{Fence: f, Term: tf.fn},
	} {
		_, err := src.Epoch(ctx, "wal", "0")
		require.ErrorIs(t, err, writefence.ErrInvalidArgument)
	}
	_, err := newTermSource(f, "a", tf).Epoch(ctx, "", "0")
	require.ErrorIs(t, err, writefence.ErrInvalidArgument)
	assert.Zero(t, tf.calls, "nothing is asked before the arguments pass")

	// A nil *TermSource is an EpochSource that is not nil.
	_, err = f.PushFrom(ctx, (*writefence.TermSource)(nil), "wal", "0", "a", nil)
	require.ErrorIs(t, err, writefence.ErrInvalidArgument)
	_, _, _, err = f.Latest(ctx, "wal", "0")
	require.ErrorIs(t, err, writefence.ErrNotFound, "nothing written")
}

// Concurrent callers get distinct epochs, each caller's rising, and every
// one pushes: run with -race.
func TestTermSourceConcurrentCallers(t *testing.T) {
	ctx := t.Context()
	mem := &writefence.MemStore{}
	f := &writefence.Fence{Store: mem}
	require.NoError(t, f.Seal(ctx, "wal", "0", "node-a", epochOf(7, 100)))
	src := newTermSource(f, "node-a", &termFunc{term: 7})
	const callers, draws = 8, 50
	got := make([][]uint64, callers)
	errs := together(callers, func(i int) error {
		for range draws {
			epoch, err := src.Epoch(ctx, "wal", fmt.Sprint(i%4))
			if err != nil {
				return err
			}
			got[i] = append(got[i], epoch)
		}
		return nil
	})
	seen := make(map[uint64]bool)
	for i := range callers {
		require.NoError(t, errs[i])
		require.Len(t, got[i], draws)
		for j, epoch := range got[i] {
			require.False(t, seen[epoch], "epoch %d handed out twice", epoch)
			seen[epoch] = true
			require.Equal(t, uint64(7), epoch>>32)
			if i%4 == 0 {
				require.Greater(t, epoch, epochOf(7, 100), "above the shard's record, read before its first epoch")
			}
			if j > 0 {
				require.Greater(t, epoch, got[i][j-1])
			}
		}
	}
	require.Len(t, seen, callers*draws)
}

// TestTermSourceKit runs the epoch-source kit over TermSources of one
// control plane: each leader is a TermSource of its own writer, and a
// leader is deposed by the term function reporting the next term, which
// the next leader's TermSource then holds. A TermSource has no
// resignation.
func TestTermSourceKit(t *testing.T) {
	writefencetest.TestEpochSource(t, func(*testing.T) writefencetest.Election {
		f := &writefence.Fence{Store: &writefence.MemStore{}}
		plane := &termFunc{term: 1}
		leaders := 0
		return writefencetest.Election{
			Lead: func(*testing.T) writefence.EpochSource {
				leaders++
				return newTermSource(f, fmt.Sprint("node-", leaders), plane)
			},
			Depose: func(*testing.T) {
				plane.mu.Lock()
				defer plane.mu.Unlock()
				plane.term++
			},
			Deposed: writefence.ErrTermEnded,
		}
	}, nil)
}

// TestTermSourceRecordLost: a TermSource whose Fence saw the shard at an
// epoch of its term hands out no epoch from a record deleted since, and
// ends nothing: after Forget it starts over.
func TestTermSourceRecordLost(t *testing.T) {
	eachLossStore(t, func(t *testing.T, s lossStore) {
		ctx := t.Context()
		f := &writefence.Fence{Store: s}
		term := func(context.Context) (uint64, error) { return 7, nil }
		src := &writefence.TermSource{Fence: f, Writer: "w", Term: term}
		for range 3 {
			_, err := f.PushFrom(ctx, src, "wal", "0", "w", []byte("x"))
			require.NoError(t, err)
		}
		require.NoError(t, s.Delete(ctx, mustKey(t, "wal", "0")))

		again := &writefence.TermSource{Fence: f, Writer: "w", Term: term}
		_, err := again.Epoch(ctx, "wal", "0")
		requireRegressed(t, err, writefence.EpochRegressedError{Op: "term source", Key: mustKey(t, "wal", "0"), Seen: 7<<32 | 3, SeenWriter: "w", Absent: true})
		assert.NotErrorIs(t, err, writefence.ErrTermEnded)
		require.NoError(t, f.Forget("wal", "0"))
		e, err := again.Epoch(ctx, "wal", "0")
		require.NoError(t, err)
		assert.Equal(t, uint64(7<<32|1), e)
	})
}

// TestTermSourceCancelledCallEndsNothing: a call whose own ctx ended ends
// nothing, whatever shape the term function gives the failure that ending
// caused. A control plane's client often reports a cancelled request as
// an error of its own that does not match context.Canceled (a gRPC
// status, a message formatted with %v); the source must still hold its
// term for the next call, whose ctx is live.
func TestTermSourceCancelledCallEndsNothing(t *testing.T) {
	ctx := t.Context()
	f := &writefence.Fence{Store: &writefence.MemStore{}}
	term := func(ctx context.Context) (uint64, error) {
		if err := ctx.Err(); err != nil {
			return 0, fmt.Errorf("rpc error: code = Canceled desc = %v", err)
		}
		return 7, nil
	}
	src := &writefence.TermSource{Fence: f, Writer: "node-a", Term: term}
	first, err := src.Epoch(ctx, "wal", "0")
	require.NoError(t, err)

	cctx, cancel := context.WithCancel(ctx)
	cancel()
	epoch, err := src.Epoch(cctx, "wal", "0")
	require.Error(t, err)
	require.Zero(t, epoch)
	require.NotErrorIs(t, err, writefence.ErrTermEnded, "the call's own ctx ended: it ends nothing")

	epoch, err = src.Epoch(ctx, "wal", "0")
	require.NoError(t, err, "the source still holds term 7")
	assert.Equal(t, first+1, epoch)
}

// TestTermSourceReadRetried: the read of the record a TermSource makes
// before a shard's first epoch is retried after a transient failure, as
// every read of the package is (promise 6), and a failure that persists
// ends nothing.
func TestTermSourceReadRetried(t *testing.T) {
	ctx := t.Context()
	s := countedByKey(&writefence.MemStore{})
	f := &writefence.Fence{Store: s, MaxAttempts: 3, RetryDelay: time.Microsecond}
	require.NoError(t, f.Push(ctx, "wal", "0", "w", 7<<32|4, []byte("x")))
	key := mustKey(t, "wal", "0")

	errReset := errors.New("connection reset")
	s.Inject(fakestore.Fault{Op: fakestore.Get, Key: key, Times: 1, Err: errReset})
	e, err := newTermSource(f, "w", &termFunc{term: 7}).Epoch(ctx, "wal", "0")
	require.NoError(t, err, "one failed read is retried")
	assert.Equal(t, uint64(7<<32|5), e, "it continues above the record it read")

	s.Inject(fakestore.Fault{Op: fakestore.Get, Key: key, Err: errReset})
	gets0, _, _ := callsOf(s, key)
	src := newTermSource(f, "w", &termFunc{term: 7})
	_, err = src.Epoch(ctx, "wal", "0")
	require.ErrorIs(t, err, errReset)
	assert.NotErrorIs(t, err, writefence.ErrTermEnded)
	gets, _, _ := callsOf(s, key)
	assert.Equal(t, 3, gets-gets0, "MaxAttempts reads")
	s.Clear(fakestore.Get)
	e, err = src.Epoch(ctx, "wal", "0")
	require.NoError(t, err, "the failure ended nothing")
	assert.Equal(t, uint64(7<<32|5), e)
}
