package modeltest

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/fakestore"
	"github.com/writefence/writefence/internal/keys"
	"github.com/writefence/writefence/internal/promise"
)

// TestOrderedConflictThatLanded: a write refused as a conflict may have
// landed all the same, when a client retries it on its own after a lost
// reply (go-redis does) and the retry meets the version the first attempt
// made. A version that holds its bytes, made by no reply, says it
// landed; the Fence, which reads its own record back, returns nil, and
// the history must keep the write.
func TestOrderedConflictThatLanded(t *testing.T) {
	ctx := context.Background()
	key := walKey(t)
	inner := fakestore.New(&writefence.MemStore{}, fakestore.Options{Hide: fakestore.All,
		Faults: []fakestore.Fault{{Op: fakestore.Put, Key: key, Times: 1, Lost: true, Err: writefence.ErrConflict}}})
	rec, store := concurrent(inner)
	f := &writefence.Fence{Store: store, Observer: rec.Observe}

	c := &promise.Call{Op: promise.Push, Plugin: "wal", Shard: "0", Key: key, Writer: "w", Epoch: 1, Payload: []byte("x")}
	rec.Begin(c)
	err := f.Push(WithCall(ctx, c), "wal", "0", "w", 1, []byte("x"))
	rec.End(c, err)
	require.NoError(t, err, "the Fence reads its own record back")

	requireOrderedClean(t, rec)
}

// TestOrderedWriteLandsAfterAReadOfWhatItReplaced: a write is sent
// before it lands, and a read between the two sees the version the write
// replaces. Here a push whose reply was lost (its call ends unknown) is
// pushed again; the second call reads the first call's record, which
// holds its write, and returns nil, while another writer's write over
// that record is on its way. The history must place that write after
// the reads of what it replaced: placed when it was sent, it took the
// record from the second call before the call began, and the checker
// read a push that returned nil whose write the record never held during
// the call (promise 4).
func TestOrderedWriteLandsAfterAReadOfWhatItReplaced(t *testing.T) {
	key := walKey(t)
	var (
		phase   atomic.Int32 // 1: the first push, its reply lost; 2: another writer's write held
		sent    = make(chan struct{})
		release = make(chan struct{})
	)
	inner := fakestore.New(&writefence.MemStore{}, fakestore.Options{Hide: fakestore.All,
		Before: func(ctx context.Context, c fakestore.Call) error {
			if phase.Load() == 2 && c.Op == fakestore.Put {
				close(sent)
				<-release
			}
			return nil
		},
		After: func(ctx context.Context, c fakestore.Call, err error) error {
			if phase.Load() == 1 && err == nil && c.Op == fakestore.Put {
				phase.Store(-1) // the reply is lost, and so is each read after it
			}
			if phase.Load() == -1 {
				return fakestore.ErrLostReply
			}
			return err
		}})
	rec, store := concurrent(inner)
	fa := &writefence.Fence{Store: store, Observer: rec.Observe, MaxAttempts: 2, RetryDelay: time.Microsecond}
	fb := &writefence.Fence{Store: store, Observer: rec.Observe}
	push := pusher(rec, key)

	phase.Store(1)
	require.ErrorIs(t, push(fa, "a", 2, "x"), writefence.ErrOutcomeUnknown)
	phase.Store(2)
	done := make(chan error, 1)
	go func() { done <- push(fb, "b", 3, "y") }()
	<-sent
	phase.Store(0)
	require.NoError(t, push(fa, "a", 2, "x"), "the record holds the first push's write")
	close(release)
	require.NoError(t, <-done)

	requireOrderedClean(t, rec)
}

// TestOrderedRetriedBytesLandLater: a push sent again after its first
// attempt was refused sends the same bytes; when neither reply came,
// both attempts match the version that holds them, and the first, sent
// before a rival's write that landed, could be read as the one that
// landed, leaving the rival's write out of the history although a call
// read it. A version the test read is one the key held: the history must
// pass through it.
func TestOrderedRetriedBytesLandLater(t *testing.T) {
	key := walKey(t)
	var (
		phase   atomic.Int32
		sent    = make(chan struct{})
		release = make(chan struct{})
	)
	mine := func(c fakestore.Call) bool { return bytes.Contains(c.Data(), []byte("from-a")) }
	inner := fakestore.New(&writefence.MemStore{}, fakestore.Options{Hide: fakestore.All,
		Before: func(ctx context.Context, c fakestore.Call) error {
			if phase.Load() == 1 && c.Op == fakestore.Put && mine(c) {
				close(sent)
				<-release
			}
			return nil
		},
		After: func(ctx context.Context, c fakestore.Call, err error) error {
			switch {
			case c.Op == fakestore.Put && mine(c):
				return fakestore.ErrLostReply // landed or refused, no reply says which
			case phase.Load() == 2 && c.Op == fakestore.Put && err == nil:
				phase.Store(-2) // the reply is lost, and so is each read after it
				return fakestore.ErrLostReply
			case phase.Load() == -2:
				return fakestore.ErrLostReply
			}
			return err
		}})
	rec, store := concurrent(inner)
	push := pusher(rec, key)
	fa := &writefence.Fence{Store: store, Observer: rec.Observe, RetryDelay: time.Microsecond}
	fb := &writefence.Fence{Store: store, Observer: rec.Observe, MaxAttempts: 2, RetryDelay: time.Microsecond}
	fz := &writefence.Fence{Store: store, Observer: rec.Observe}
	require.NoError(t, push(fz, "z", 1, "first"))

	phase.Store(1)
	done := make(chan error, 1)
	go func() { done <- push(fa, "a", 13, "from-a") }()
	<-sent
	phase.Store(2)
	require.ErrorIs(t, push(fb, "b", 12, "from-b"), writefence.ErrOutcomeUnknown)
	phase.Store(3)
	require.NoError(t, push(fb, "b", 12, "from-b"), "the record holds b's first push")
	close(release)
	require.NoError(t, <-done, "a's second attempt lands over b's record, and a reads it back")

	requireOrderedClean(t, rec)
}

// TestOrderedRetriedWritesAfterAWrongTurn: a push whose first write
// never reached the store, its connection broken, reads the version it
// expected still there and sends the same write again; when neither reply
// came, both match the version that holds their bytes, and the search may
// take either. Here the history starts as TestOrderedRetriedBytesLandLater
// does, where the search first takes a write that leaves out a version a
// call read and must go back, and goes on with many such pushes: the
// search must not try each of the two writes of every push after the
// wrong turn, which would take it 2^n tries.
func TestOrderedRetriedWritesAfterAWrongTurn(t *testing.T) {
	const pushes = 40
	ctx := context.Background()
	key := walKey(t)
	var (
		phase      atomic.Int32
		drop, lose atomic.Bool // drop the next write before it reaches the store, then lose the reply of the write after it
		sent       = make(chan struct{})
		release    = make(chan struct{})
	)
	mine := func(c fakestore.Call) bool { return bytes.Contains(c.Data(), []byte("from-a")) }
	inner := fakestore.New(&writefence.MemStore{}, fakestore.Options{Hide: fakestore.All,
		Before: func(ctx context.Context, c fakestore.Call) error {
			if c.Op != fakestore.Put {
				return nil
			}
			if phase.Load() == 1 && mine(c) {
				close(sent)
				<-release
			}
			if drop.CompareAndSwap(true, false) {
				lose.Store(true)
				return fakestore.ErrLostReply // the connection broke before the write went out
			}
			return nil
		},
		After: func(ctx context.Context, c fakestore.Call, err error) error {
			switch {
			case c.Op == fakestore.Put && mine(c):
				return fakestore.ErrLostReply // landed or refused, no reply says which
			case c.Op == fakestore.Put && err == nil && lose.CompareAndSwap(true, false):
				return fakestore.ErrLostReply
			case phase.Load() == 2 && c.Op == fakestore.Put && err == nil:
				phase.Store(-2) // the reply is lost, and so is each read after it
				return fakestore.ErrLostReply
			case phase.Load() == -2:
				return fakestore.ErrLostReply
			}
			return err
		}})
	rec, store := concurrent(inner)
	push := pusher(rec, key)
	fa := &writefence.Fence{Store: store, Observer: rec.Observe, RetryDelay: time.Microsecond}
	fb := &writefence.Fence{Store: store, Observer: rec.Observe, MaxAttempts: 2, RetryDelay: time.Microsecond}
	fz := &writefence.Fence{Store: store, Observer: rec.Observe, RetryDelay: time.Microsecond}
	require.NoError(t, push(fz, "z", 1, "first"))

	phase.Store(1)
	done := make(chan error, 1)
	go func() { done <- push(fa, "a", 13, "from-a") }()
	<-sent
	phase.Store(2)
	require.ErrorIs(t, push(fb, "b", 12, "from-b"), writefence.ErrOutcomeUnknown)
	phase.Store(3)
	require.NoError(t, push(fb, "b", 12, "from-b"), "the record holds b's first push")
	close(release)
	require.NoError(t, <-done, "a's second attempt lands over b's record, and a reads it back")
	phase.Store(0)
	for i := range pushes {
		drop.Store(true)
		require.NoError(t, push(fz, "z", uint64(14+i), fmt.Sprint("next-", i)), "the second write lands, and z reads it back")
	}

	type result struct {
		h   *promise.History
		err error
	}
	ordered := make(chan result, 1)
	go func() {
		h, err := rec.Ordered(ctx)
		ordered <- result{h, err}
	}()
	select {
	case r := <-ordered:
		require.NoError(t, r.err)
		require.Empty(t, promise.NewChecker(promise.Options{}).Check(r.h))
	case <-time.After(30 * time.Second):
		t.Fatalf("Ordered still searches after 30s, over %d pushes", pushes)
	}
}

// TestOrderedRetriedBytesNotDelivered: a push's first attempt that never
// reached the store, its connection broken, sends the bytes its retry
// sends later. When neither reply came, both match the version that
// holds them; the first, whose reply (an error) came before another call
// began and read the version both replace, cannot be the one that
// replaced it.
func TestOrderedRetriedBytesNotDelivered(t *testing.T) {
	key := walKey(t)
	var phase atomic.Int32
	inner := fakestore.New(&writefence.MemStore{}, fakestore.Options{Hide: fakestore.All,
		Before: func(ctx context.Context, c fakestore.Call) error {
			if phase.Load() == phaseUndelivered && c.Op == fakestore.Put {
				phase.Store(phaseLostAll)
				return fakestore.ErrLostReply // the connection broke before the write went out
			}
			return nil
		},
		After: loseReplies(&phase)})
	rec, store := concurrent(inner)
	push := pusher(rec, key)
	fence := func() *writefence.Fence {
		return &writefence.Fence{Store: store, Observer: rec.Observe, MaxAttempts: 2, RetryDelay: time.Microsecond}
	}
	fa, fb := fence(), fence()
	require.NoError(t, push(fence(), "z", 1, "first"))

	phase.Store(phaseLostAfter)
	require.ErrorIs(t, push(fb, "b", 12, "from-b"), writefence.ErrOutcomeUnknown, "b's write lands, its reply lost")
	phase.Store(phaseUndelivered)
	require.ErrorIs(t, push(fa, "a", 13, "from-a"), writefence.ErrOutcomeUnknown, "a's write never reaches the store")
	phase.Store(phaseNormal)
	require.NoError(t, push(fb, "b", 12, "from-b"), "the record holds b's first push")
	phase.Store(phaseLostReply)
	require.NoError(t, push(fa, "a", 13, "from-a"), "a's write lands, its reply lost, and a reads it back")

	requireOrderedClean(t, rec)
}

// TestOrderedReadOfNoCall: a read whose context names no call, made
// while calls run at once, is no call's: the call begun last may have
// begun after the version it returned was replaced. Here a read holds the
// create's version until a push has replaced it and ended, and returns
// while another call, begun since, is in progress; read as that call's,
// it says the push's write, whose reply came before that call began,
// cannot have replaced the version, and Ordered finds no chain.
func TestOrderedReadOfNoCall(t *testing.T) {
	ctx := context.Background()
	key := walKey(t)
	var (
		hold    atomic.Bool
		read    = make(chan struct{})
		release = make(chan struct{})
	)
	inner := fakestore.New(&writefence.MemStore{}, fakestore.Options{Hide: fakestore.All,
		After: func(ctx context.Context, c fakestore.Call, err error) error {
			if c.Op == fakestore.Get && hold.CompareAndSwap(true, false) {
				close(read)
				<-release
			}
			return err
		}})
	rec, store := concurrent(inner)
	push := pusher(rec, key)
	f := func() *writefence.Fence { return &writefence.Fence{Store: store, Observer: rec.Observe} }
	require.NoError(t, push(f(), "z", 1, "first"))

	hold.Store(true)
	done := make(chan error, 1)
	go func() {
		_, _, err := store.Get(ctx, key) // a read of no call
		done <- err
	}()
	<-read
	require.NoError(t, push(f(), "a", 2, "x"), "a's write replaces the version the read holds")
	m := &promise.Call{Op: promise.Push, Proc: "m", Plugin: "wal", Shard: "0", Key: key, Writer: "m", Epoch: 3, Payload: []byte("y")}
	rec.Begin(m)
	close(release)
	require.NoError(t, <-done)
	err := f().Push(WithCall(ctx, m), "wal", "0", "m", 3, []byte("y"))
	rec.End(m, err)
	require.NoError(t, err)

	requireOrderedClean(t, rec)
}

// TestOrderedReadBegunRightAfterAReply: a call that begins right after
// a write's reply, nothing recorded between them, began after that reply.
// Here a push's first write never reaches the store, and while the push
// waits to send it again, another call begins, reads the version both
// attempts expect, and returns nil: it is a push sent again after its
// reply was lost, whose write that version holds. The second attempt
// then lands, its reply lost too. The first attempt, whose reply came
// before that call began, cannot be the write that replaced the version:
// placed where it was sent, it took the record from that call before the
// call began (promise 4).
func TestOrderedReadBegunRightAfterAReply(t *testing.T) {
	key := walKey(t)
	var (
		phase  atomic.Int32
		paused = make(chan fakestore.Op)
		resume = make(chan struct{})
	)
	inner := fakestore.New(&writefence.MemStore{}, fakestore.Options{Hide: fakestore.All,
		Before: func(ctx context.Context, c fakestore.Call) error {
			switch p := phase.Load(); {
			case p == phaseUndelivered && c.Op == fakestore.Put:
				phase.Store(phasePause)
				return fakestore.ErrLostReply // the connection broke before the write went out
			case p == phasePause:
				phase.Store(phaseLostReply)
				paused <- c.Op
				<-resume
			}
			return nil
		},
		After: loseReplies(&phase)})
	rec, store := concurrent(inner)
	push := pusher(rec, key)
	fence := func() *writefence.Fence {
		return &writefence.Fence{Store: store, Observer: rec.Observe, MaxAttempts: 2, RetryDelay: time.Microsecond}
	}
	require.NoError(t, push(fence(), "z", 1, "first"))

	phase.Store(phaseLostAfter)
	require.ErrorIs(t, push(fence(), "b", 12, "from-b"), writefence.ErrOutcomeUnknown, "b's write lands, its reply lost")
	phase.Store(phaseUndelivered)
	done := make(chan error, 1)
	go func() {
		fa := fence()
		fa.MaxAttempts = 3
		done <- push(fa, "a", 13, "from-a")
	}()
	op := <-paused
	require.Equal(t, fakestore.Get, op, "a reads the record before it sends its write again")
	// b's retry must see the record as it is: a's next write still waits.
	phase.Store(phaseNormal)
	require.NoError(t, push(fence(), "b", 12, "from-b"), "the record holds b's first push")
	phase.Store(phaseLostReply)
	close(resume)
	require.NoError(t, <-done, "a's second write lands, its reply lost, and a reads it back")

	requireOrderedClean(t, rec)
}

// TestOrderedLostWriteReadByPrefix: on a store that reads prefixes, a
// Fence reads a record's head, not the record: a version whose write's
// reply was lost, which no call read whole and which the key no longer
// holds at the end, is known only by its head and size. Here a push's
// write lands, its reply and every read after it lost, and another push
// reads the head of its version and writes over it: that version is the
// lost write's, and the chain passes through it.
func TestOrderedLostWriteReadByPrefix(t *testing.T) {
	key := walKey(t)
	var lost atomic.Bool // the next write lands, its reply lost, and so is every call after it
	var lostAll atomic.Bool
	mem := &writefence.MemStore{}
	inner := fakestore.New(mem, fakestore.Options{Hide: fakestore.All, GetPrefix: fakestore.GetPrefixOf(mem),
		After: func(ctx context.Context, c fakestore.Call, err error) error {
			if c.Op == fakestore.Put && err == nil && lost.CompareAndSwap(true, false) {
				lostAll.Store(true)
			}
			if lostAll.Load() {
				return fakestore.ErrLostReply
			}
			return err
		}})
	rec, store := concurrent(inner)
	push := pusher(rec, key)
	fence := func() *writefence.Fence {
		return &writefence.Fence{Store: store, Observer: rec.Observe, MaxAttempts: 2, RetryDelay: time.Microsecond}
	}
	payload := strings.Repeat("p", 20000) // beyond the head a Fence reads
	require.NoError(t, push(fence(), "z", 1, payload))
	lost.Store(true)
	require.ErrorIs(t, push(fence(), "a", 2, payload), writefence.ErrOutcomeUnknown)
	lostAll.Store(false)
	require.NoError(t, push(fence(), "b", 3, payload), "b reads the head of a's record and writes over it")

	requireOrderedClean(t, rec)
}

// TestOrderedWriteThatLandsAfterItsCallReturned: a call that returns nil
// before its write lands breaks promise 4, and the history must show it
// when a call read the version the write replaced after the first call
// returned. Here a push's write is held on its way to the store while
// its call is recorded as returning nil; another call then reads the
// record the write replaces, and the write lands after it.
func TestOrderedWriteThatLandsAfterItsCallReturned(t *testing.T) {
	ctx := context.Background()
	key := walKey(t)
	var (
		hold    atomic.Bool
		sent    = make(chan struct{})
		release = make(chan struct{})
	)
	inner := fakestore.New(&writefence.MemStore{}, fakestore.Options{Hide: fakestore.All,
		Before: func(ctx context.Context, c fakestore.Call) error {
			if c.Op == fakestore.Put && hold.CompareAndSwap(true, false) {
				close(sent)
				<-release
			}
			return nil
		}})
	rec, store := concurrent(inner)
	push := pusher(rec, key)
	f := func() *writefence.Fence { return &writefence.Fence{Store: store, Observer: rec.Observe} }
	require.NoError(t, push(f(), "z", 1, "first"))

	a := &promise.Call{Op: promise.Push, Proc: "a", Plugin: "wal", Shard: "0", Key: key, Writer: "a", Epoch: 2, Payload: []byte("x")}
	rec.Begin(a)
	hold.Store(true)
	done := make(chan error, 1)
	go func() { done <- f().Push(WithCall(ctx, a), "wal", "0", "a", 2, []byte("x")) }()
	<-sent
	rec.End(a, nil) // the call returns nil with its write still on its way

	r := &promise.Call{Op: promise.Latest, Proc: "r", Plugin: "wal", Shard: "0", Key: key}
	rec.Begin(r)
	_, _, err := store.Get(WithCall(ctx, r), key)
	require.NoError(t, err)
	close(release)
	require.NoError(t, <-done)
	rec.End(r, nil)

	h, err := rec.Ordered(ctx)
	require.NoError(t, err)
	var promises []int
	for _, v := range promise.NewChecker(promise.Options{}).Check(h) {
		promises = append(promises, v.Promise)
	}
	require.Contains(t, promises, 4, "a returned nil before the record held its write")
}

// TestOrderedPlacesEvents: the Observer's events are placed in the
// history as recorded; the history Ordered returns leaves out the writes
// that did not land, and places each event among what it keeps. Here a
// push's first write is refused as a conflict and left out, and the
// Observer sees the push end after its second write, before its call's
// end (promise 27).
func TestOrderedPlacesEvents(t *testing.T) {
	ctx := context.Background()
	key := walKey(t)
	inner := fakestore.New(&writefence.MemStore{}, fakestore.Options{Hide: fakestore.All,
		Faults: []fakestore.Fault{{Op: fakestore.Put, Key: key, Times: 1, Err: writefence.ErrConflict}}})
	rec, store := concurrent(inner)
	f := &writefence.Fence{Store: store, Observer: rec.Observe, RetryDelay: time.Microsecond}

	c := &promise.Call{Op: promise.Push, Plugin: "wal", Shard: "0", Key: key, Writer: "w", Epoch: 1, Payload: []byte("x")}
	rec.Begin(c)
	err := f.Push(WithCall(ctx, c), "wal", "0", "w", 1, []byte("x"))
	rec.End(c, err)
	require.NoError(t, err)

	h, err := rec.Ordered(ctx)
	require.NoError(t, err)
	require.Len(t, h.Entries, 3, "the Begin, the write that landed, the End")
	end := h.Entries[2].End
	require.NotNil(t, end)
	require.Len(t, end.Events, 2, "the race lost, retried, and the end")
	require.Equal(t, 1, end.Events[0].Place, "the retry, after the Begin")
	require.Equal(t, 2, end.Events[1].Place, "the end, after the write")
	require.Empty(t, promise.NewChecker(promise.Options{}).Check(h))
}

// pusher returns a push through a Fence over rec's store, recorded by
// rec as a call of its own, of the shard "wal"/"0" whose record is key.
func pusher(rec *Recorder, key string) func(f *writefence.Fence, writer string, epoch uint64, payload string) error {
	return func(f *writefence.Fence, writer string, epoch uint64, payload string) error {
		c := &promise.Call{Op: promise.Push, Proc: writer, Plugin: "wal", Shard: "0", Key: key, Writer: writer, Epoch: epoch, Payload: []byte(payload)}
		rec.Begin(c)
		err := f.Push(WithCall(context.Background(), c), "wal", "0", writer, epoch, []byte(payload))
		rec.End(c, err)
		return err
	}
}

// walKey is the record's key of the shard "wal"/"0" in the default prefix.
func walKey(t *testing.T) string {
	key, err := keys.Shard("", "wal", "0")
	require.NoError(t, err)
	return key
}

// concurrent returns a Recorder of inner readied for calls that run at
// once, and the store its Fences use.
func concurrent(inner writefence.ConditionalStore) (*Recorder, writefence.ConditionalStore) {
	rec, store := NewRecorder(inner, time.Now, promise.Options{})
	rec.Concurrent()
	return rec, store
}

// requireOrderedClean checks the history in the store's order, as
// Ordered gives it, against every promise, and finds nothing.
func requireOrderedClean(t *testing.T, rec *Recorder) {
	t.Helper()
	h, err := rec.Ordered(context.Background())
	require.NoError(t, err)
	require.Empty(t, promise.NewChecker(promise.Options{}).Check(h))
}

// The phases of a scenario's fake store: what its next calls meet.
const (
	phaseNormal      = iota
	phaseLostAll     // every call's reply is lost
	phaseLostAfter   // the next write's reply is lost, and every call's after it
	phaseLostReply   // the next write's reply is lost
	phaseUndelivered // the next write does not reach the store (the scenario says what follows)
	phasePause       // the next call waits (the scenario says for what)
)

// loseReplies is a fake store's After that loses replies as phase says
// (phaseLostAll, phaseLostAfter, phaseLostReply) and passes them otherwise.
func loseReplies(phase *atomic.Int32) func(ctx context.Context, c fakestore.Call, err error) error {
	return func(ctx context.Context, c fakestore.Call, err error) error {
		switch p := phase.Load(); {
		case p == phaseLostAll:
			return fakestore.ErrLostReply
		case c.Op == fakestore.Put && err == nil && (p == phaseLostAfter || p == phaseLostReply):
			next := int32(phaseNormal)
			if p == phaseLostAfter {
				next = phaseLostAll
			}
			phase.Store(next)
			return fakestore.ErrLostReply
		}
		return err
	}
}
