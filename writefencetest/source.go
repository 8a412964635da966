package writefencetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"testing/synctest"

	"github.com/writefence/writefence"
)

// Election is one election of an EpochSource under test, as the
// constructor given to TestEpochSource makes it for a subtest: a way to
// make its leaders one after another, and to end their leadership as the
// source's control plane does.
type Election struct {
	// Lead makes the election's next leader and returns its EpochSource
	// once it leads: a candidate whose campaign was won, a Lease that
	// acquired its lease, a TermSource of a term newer than every earlier
	// leader's. The kit calls it first, and then only after Depose or
	// Resign ended the leadership of the leader it made before, so at most
	// one of its leaders is in office at a time. Required.
	Lead func(t *testing.T) writefence.EpochSource

	// Depose ends the leadership of the leader Lead made last from
	// outside it, as a control plane does to a leader that is gone (its
	// session revoked or expired, its lease taken over once it expired,
	// the term function reporting a newer term), and returns once that
	// leader's Epoch refuses. Required.
	Depose func(t *testing.T)

	// Deposed is the error a deposed leader's Epoch matches (errors.Is):
	// the sentinel the source documents for it. Required.
	Deposed error

	// Resign, when set, has the leader Lead made last give its leadership
	// up itself (Resign, Release), and returns once it did. Nil skips
	// Leaders/Resigned.
	Resign func(t *testing.T)

	// Resigned is the error a leader's Epoch matches once it resigned;
	// nil means Deposed.
	Resigned error
}

// SourceOptions are the settings of TestEpochSource. A nil *SourceOptions
// is the zero value.
type SourceOptions struct {
	// Bubble runs each subtest, the constructor and every call of its
	// Election included, in a bubble of testing/synctest: time passes only
	// when every goroutine of the subtest waits, so a leadership that runs
	// out by the clock (a Lease's TTL) is ended by a Depose that sleeps
	// past it, at once and in the same order on every run. A source that
	// waits on a server over the network cannot run in one.
	Bubble bool
}

// TestEpochSource checks an implementation of writefence.EpochSource that
// hands out a new epoch on every call while its caller leads (an
// election, a lease, a term): StaticEpochSource, which hands one token
// out again, is not one. newElection is called once per subtest, with
// that subtest's t, and returns a fresh election; opts may be nil.
//
// One named subtest per clause:
//
//   - Epochs/Rising: every epoch a leader draws is at least 1 and greater
//     than the last it drew for the same shard, over draws that alternate
//     between three shards.
//   - Epochs/Concurrent: 4 goroutines of one leader draw 25 epochs each,
//     released together: no epoch is handed out twice, and each
//     goroutine's rise.
//   - Epochs/Canceled: a draw under a cancelled context returns an error
//     matching context.Canceled, or an epoch above the last; either way
//     the leader keeps its leadership and draws above it afterwards.
//   - Leaders/Later: three leaders in turn, each deposed (Election.Depose)
//     before the next leads: every epoch a leader draws is greater than
//     every epoch an earlier leader drew.
//   - Leaders/Deposed: once deposed, a leader's Epoch returns 0 and an
//     error matching Election.Deposed (and not a context's error), for
//     every shard, before and after the next leader drew.
//   - Leaders/Resigned (with Election.Resign): the same once a leader
//     resigned, matching Election.Resigned; the next leader's epochs are
//     above the resigned one's.
//   - Leaders/Fenced: through a writefence.Fence on a MemStore, a leader
//     seals a shard, pushes with Fence.PushFrom and draws one more epoch;
//     it is deposed and the next leader seals the shard: the deposed
//     leader's push at the epoch it drew in time is refused with
//     writefence.ErrStaleEpoch naming the new leader's seal, its PushFrom
//     fails with Election.Deposed and writes nothing, and the new
//     leader's PushFrom lands.
//
// Every error the kit gets from Epoch must come with the epoch 0. Run it
// with go test -race: a data race inside the source shows only there, and
// Epochs/Concurrent can miss two draws that collide only rarely.
func TestEpochSource(t *testing.T, newElection func(t *testing.T) Election, opts *SourceOptions) {
	if opts == nil {
		opts = &SourceOptions{}
	}
	groups := []struct {
		name   string
		checks []sourceCheck
	}{
		{"Epochs", []sourceCheck{
			{"Rising", testSourceRising},
			{"Concurrent", testSourceConcurrent},
			{"Canceled", testSourceCanceled},
		}},
		{"Leaders", []sourceCheck{
			{"Later", testSourceLater},
			{"Deposed", testSourceDeposed},
			{"Resigned", testSourceResigned},
			{"Fenced", testSourceFenced},
		}},
	}
	for _, g := range groups {
		t.Run(g.name, func(t *testing.T) {
			for _, c := range g.checks {
				t.Run(c.name, func(t *testing.T) {
					if !opts.Bubble {
						c.run(t, newSourceScope(t, newElection))
						return
					}
					synctest.Test(t, func(t *testing.T) {
						c.run(t, newSourceScope(t, newElection))
					})
				})
			}
		})
	}
}

// sourceCheck is one clause of the contract of an EpochSource.
type sourceCheck struct {
	name string
	run  func(t *testing.T, sc *sourceScope)
}

// sourceScope is one subtest's election and every epoch its leaders drew.
type sourceScope struct {
	e      Election
	leader writefence.EpochSource // the leader Lead made last
	n      int                    // leaders made
	drawn  []uint64               // every epoch drawn by an earlier leader
}

func newSourceScope(t *testing.T, newElection func(t *testing.T) Election) *sourceScope {
	t.Helper()
	e := newElection(t)
	switch {
	case e.Lead == nil:
		t.Fatal("the Election has no Lead")
	case e.Depose == nil:
		t.Fatal("the Election has no Depose")
	case e.Deposed == nil:
		t.Fatal("the Election has no Deposed error")
	}
	return &sourceScope{e: e}
}

// lead makes the next leader.
func (sc *sourceScope) lead(t *testing.T) writefence.EpochSource {
	t.Helper()
	sc.leader = sc.e.Lead(t)
	if sc.leader == nil {
		t.Fatal("Election.Lead returned a nil EpochSource")
	}
	sc.n++
	return sc.leader
}

// draw returns an epoch of src for shard, failing the test unless it is
// at least 1 and above every epoch an earlier leader drew.
func (sc *sourceScope) draw(t *testing.T, src writefence.EpochSource, shard string) uint64 {
	t.Helper()
	epoch, err := src.Epoch(t.Context(), "writefencetest", shard)
	if err != nil {
		t.Fatalf("Epoch(%q) of leader %d: %v", shard, sc.n, err)
	}
	if epoch < 1 {
		t.Fatalf("Epoch(%q) of leader %d returned %d; epochs start at 1", shard, sc.n, epoch)
	}
	if len(sc.drawn) > 0 {
		if top := slices.Max(sc.drawn); epoch <= top {
			t.Errorf("Epoch(%q) of leader %d returned %d, not above %d, which an earlier leader drew: its pushes would not fence the earlier leader's", shard, sc.n, epoch, top)
		}
	}
	return epoch
}

// wantNoEpoch fails the test unless Epoch of src refuses with an error
// matching want, which the message calls what, and the epoch 0.
func wantNoEpoch(t *testing.T, src writefence.EpochSource, shard, what string, want error) {
	t.Helper()
	epoch, err := src.Epoch(t.Context(), "writefencetest", shard)
	call := fmt.Sprintf("Epoch(%q) of a leader that %s", shard, what)
	switch {
	case err == nil:
		t.Errorf("%s returned epoch %d; want no epoch and an error matching %v", call, epoch, want)
	case !errors.Is(err, want):
		t.Errorf("%s: %v (%T); want an error matching %v", call, err, err, want)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		t.Errorf("%s: %v matches a context's error; its context was not done", call, err)
	}
	if err != nil && epoch != 0 {
		t.Errorf("%s returned epoch %d with its error %v; an error comes with no epoch", call, epoch, err)
	}
}

// retire ends the leadership of the leader in office with end and
// remembers its epochs as an earlier leader's.
func (sc *sourceScope) retire(t *testing.T, end func(t *testing.T), epochs ...uint64) {
	t.Helper()
	end(t)
	sc.drawn = append(sc.drawn, epochs...)
}

// testSourceRising draws epochs for three shards in turn: each is at
// least 1 and above the last of its shard.
func testSourceRising(t *testing.T, sc *sourceScope) {
	src := sc.lead(t)
	last := map[string]uint64{}
	for i := range 60 {
		shard := fmt.Sprint(i % 3)
		epoch := sc.draw(t, src, shard)
		if prev, ok := last[shard]; ok && epoch <= prev {
			t.Fatalf("draw %d: Epoch(%q) returned %d after %d: epochs must rise strictly, for the Fence admits one push per epoch", i, shard, epoch, prev)
		}
		last[shard] = epoch
	}
}

// sourceDrawers and sourceDraws size Epochs/Concurrent.
const sourceDrawers, sourceDraws = 4, 25

// testSourceConcurrent has goroutines of one leader draw at once: no
// epoch twice, each goroutine's rising.
func testSourceConcurrent(t *testing.T, sc *sourceScope) {
	src := sc.lead(t)
	got := make([][]uint64, sourceDrawers)
	errs := make([]error, sourceDrawers)
	together(sourceDrawers, nil, nil, func(i int) {
		for range sourceDraws {
			epoch, err := src.Epoch(t.Context(), "writefencetest", "0")
			if err != nil {
				errs[i] = err
				return
			}
			got[i] = append(got[i], epoch)
		}
	})
	owner := map[uint64]int{}
	for i := range sourceDrawers {
		if errs[i] != nil {
			t.Errorf("goroutine %d: Epoch: %v", i, errs[i])
		}
		for j, epoch := range got[i] {
			if epoch < 1 {
				t.Errorf("goroutine %d drew %d; epochs start at 1", i, epoch)
			}
			if o, dup := owner[epoch]; dup {
				t.Errorf("epoch %d was handed to goroutine %d and to goroutine %d: two pushes at one epoch, and one is refused", epoch, o, i)
			}
			owner[epoch] = i
			if j > 0 && epoch <= got[i][j-1] {
				t.Errorf("goroutine %d drew %d after %d: epochs must rise", i, epoch, got[i][j-1])
			}
		}
	}
	t.Logf("%d goroutines drew %d distinct epochs", sourceDrawers, len(owner))
}

// testSourceCanceled draws under a cancelled context: an error matching
// context.Canceled or an epoch above the last, and the leader draws on.
func testSourceCanceled(t *testing.T, sc *sourceScope) {
	src := sc.lead(t)
	last := sc.draw(t, src, "0")
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	epoch, err := src.Epoch(ctx, "writefencetest", "0")
	switch {
	case err == nil && epoch <= last:
		t.Errorf("Epoch under a cancelled context returned %d after %d: epochs must rise", epoch, last)
	case err == nil:
		t.Logf("Epoch under a cancelled context returned an epoch: nothing it waited on heeded the context")
		last = epoch
	case !errors.Is(err, context.Canceled):
		t.Errorf("Epoch under a cancelled context: %v (%T); want an error matching context.Canceled, or an epoch", err, err)
	case errors.Is(err, sc.e.Deposed):
		t.Errorf("Epoch under a cancelled context: %v matches %v: the caller's cancellation is not a deposition", err, sc.e.Deposed)
	case epoch != 0:
		t.Errorf("Epoch under a cancelled context returned epoch %d with its error %v; an error comes with no epoch", epoch, err)
	}
	next, err := src.Epoch(t.Context(), "writefencetest", "0")
	if err != nil {
		t.Fatalf("Epoch after a draw under a cancelled context: %v; the cancellation was the caller's, and must not end the leadership", err)
	}
	if next <= last {
		t.Errorf("Epoch after a draw under a cancelled context returned %d after %d: epochs must rise", next, last)
	}
}

// testSourceLater has three leaders in turn draw epochs: each above every
// earlier leader's.
func testSourceLater(t *testing.T, sc *sourceScope) {
	for range 3 {
		src := sc.lead(t)
		var mine []uint64
		for i := range 5 {
			mine = append(mine, sc.draw(t, src, fmt.Sprint(i%2)))
		}
		sc.retire(t, sc.e.Depose, mine...)
	}
	t.Logf("epochs of 3 leaders in turn: %v", sc.drawn)
}

// testSourceDeposed checks that a deposed leader draws nothing, before
// and after the next leader drew.
func testSourceDeposed(t *testing.T, sc *sourceScope) {
	old := sc.lead(t)
	sc.retire(t, sc.e.Depose, sc.draw(t, old, "0"))
	for _, shard := range []string{"0", "1"} {
		wantNoEpoch(t, old, shard, "was deposed", sc.e.Deposed)
	}
	sc.draw(t, sc.lead(t), "0")
	for _, shard := range []string{"0", "1"} {
		wantNoEpoch(t, old, shard, "was deposed, after its successor drew", sc.e.Deposed)
	}
}

// testSourceResigned checks that a leader that resigned draws nothing, and
// that the next leader draws above it.
func testSourceResigned(t *testing.T, sc *sourceScope) {
	if sc.e.Resign == nil {
		t.Skip("Election.Resign is not set: the source has no resignation, or the kit was not given it")
	}
	want := sc.e.Resigned
	if want == nil {
		want = sc.e.Deposed
	}
	old := sc.lead(t)
	sc.retire(t, sc.e.Resign, sc.draw(t, old, "0"))
	wantNoEpoch(t, old, "0", "resigned", want)
	sc.draw(t, sc.lead(t), "0")
	wantNoEpoch(t, old, "1", "resigned, after its successor drew", want)
}

// testSourceFenced runs a deposed leader's pushes against its successor's
// seal, on a MemStore.
func testSourceFenced(t *testing.T, sc *sourceScope) {
	ctx := t.Context()
	const plugin, shard = "writefencetest", "fenced"
	f := &writefence.Fence{Store: new(writefence.MemStore)}
	old := sc.lead(t)
	seal := sc.draw(t, old, shard)
	if err := f.Seal(ctx, plugin, shard, "old", seal); err != nil {
		t.Fatalf("Seal at the first leader's epoch %d: %v", seal, err)
	}
	pushed, err := f.PushFrom(ctx, old, plugin, shard, "old", []byte("the first leader's push"))
	if err != nil {
		t.Fatalf("PushFrom of the first leader: %v", err)
	}
	late := sc.draw(t, old, shard)
	sc.retire(t, sc.e.Depose, seal, pushed, late)

	next := sc.lead(t)
	sealNext := sc.draw(t, next, shard)
	if err := f.Seal(ctx, plugin, shard, "next", sealNext); err != nil {
		t.Fatalf("Seal at the next leader's epoch %d: %v", sealNext, err)
	}

	err = f.Push(ctx, plugin, shard, "old", late, []byte("the deposed leader's push"))
	var stale *writefence.StaleEpochError
	switch {
	case !errors.As(err, &stale):
		t.Errorf("Push at epoch %d, which the deposed leader drew in time, after its successor sealed at %d: %v; want a *writefence.StaleEpochError", late, sealNext, err)
	case stale.RecordedEpoch != sealNext || stale.RecordedWriter != "next":
		t.Errorf("Push of the deposed leader: %v; want it refused by the successor's seal at %d", err, sealNext)
	}

	used, err := f.PushFrom(ctx, old, plugin, shard, "old", []byte("the deposed leader's push"))
	switch {
	case err == nil:
		t.Errorf("PushFrom of the deposed leader landed at epoch %d", used)
	case !errors.Is(err, sc.e.Deposed):
		t.Errorf("PushFrom of the deposed leader: %v; want an error matching %v", err, sc.e.Deposed)
	}

	used, err = f.PushFrom(ctx, next, plugin, shard, "next", []byte("the next leader's push"))
	if err != nil {
		t.Fatalf("PushFrom of the next leader: %v", err)
	}
	epoch, writer, payload, err := f.Latest(ctx, plugin, shard)
	if err != nil {
		t.Fatalf("Latest: %v", err)
	}
	if epoch != used || writer != "next" || string(payload) != "the next leader's push" {
		t.Errorf("Latest returned epoch %d by %q, %q; want epoch %d by %q, the next leader's push", epoch, writer, payload, used, "next")
	}
}
