// Package sim simulates whole deployments of writefence on virtual time:
// writers that hold a Lease and ship a stream under it, checking they
// still hold the shard before they act, restarted under the same holder,
// paused past their TTL and killed; readers that follow the manifest;
// collectors in two processes; an operator who settles what is damaged,
// lost or set back, and late in some runs retires the shard (retire.go);
// and the faults between them (lost replies, throttled
// reads, a write the store holds up while its writer is paused, damage in
// place, a record rewritten by a program of another format, a record
// deleted, a record set back to an earlier version as a restore from
// backup would, the lease's record deleted or set back to a lower term
// under the Lease values that saw it, which the operator then settles).
// Some deployments keep the shard's floor apart from its record
// (Config.KeepFloor); in some the writers' lease clocks disagree with the
// world's (Config.Skew). Every store call of
// every process waits for the scheduler, which grants one at a time in an
// order drawn from a seed, and the goroutines that would run at one
// instant (woken by the clock, or by one event) take turns in an order
// drawn from it too (World.turn), so a seed gives one history, which is
// checked against the package's numbered promises (internal/promise). It runs
// inside a testing/synctest bubble: time only moves when every process
// waits. It is not part of the public API.
package sim

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing/synctest"
	"time"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/keys"
	"github.com/writefence/writefence/internal/promise"
	"github.com/writefence/writefence/internal/record"
)

// Config is the shape of the deployments a World simulates.
type Config struct {
	Writers       int           // writer processes at the start, each its own holder name
	Collectors    int           // processes that run Collect
	Readers       int           // processes that follow the manifest
	TTL           time.Duration // the lease's
	Grace         time.Duration // Collect's
	Steps         int           // scheduler steps
	Dir           string        // when set, the records and blobs live in a directory store there; else in memory
	KeepFloor     bool          // every Fence keeps the shard's floor apart from its record (Fence.KeepFloor)
	Branded       bool          // the store is branded before the start, and every Fence reads the brand before each write (BrandVerifyAlways)
	Claims        bool          // the store starts unbranded, and every Fence claims the brand before its first write (BrandClaim)
	SerialDeletes bool          // every Fence's blob store declares no BlobBatchDeleter: Collect deletes blob by blob
	ListBudget    int           // when above zero, the budget of a commit's listings (max(1000, 2 × the new blobs) by default): a small one reaches the check of a long epoch
	Probe         bool          // every Fence probes the store before its first write (Fence.Probe)
	Skew          time.Duration // when above zero, each writer's lease clock (Lease.Clock) runs ahead of the world's or behind it by up to Skew, its own offset
	Prefix        string        // every Fence's key prefix (Fence.Prefix); "" the default
}

// DefaultConfig is the deployment CI simulates.
var DefaultConfig = Config{Writers: 2, Collectors: 2, Readers: 1, TTL: 10 * time.Second, Grace: 8 * time.Second, Steps: 400}

// The shard every process works on.
const (
	plugin, shard = "wal", "0"
	leaseName     = "wal/0"
)

// World is one simulated deployment. Run it inside synctest.Test.
type World struct {
	cfg      Config
	rng      *rand.Rand // the scheduler's draws
	order    *rand.Rand // the draws of the order of turns (turns)
	foreign  *rand.Rand // the draws of which damage is a rewrite in another format instead (damage), apart from the scheduler's
	unlease  *rand.Rand // the draws of when and how the lease's record is deleted or set back (unsetLease), apart from the scheduler's
	retire   *rand.Rand // the draws of whether and when the shard is retired (drawRetirement), apart from the scheduler's
	retireAt int        // the scheduler step at which the shard is retired; 0: never
	seed     uint64
	base     baseStore
	store    *simStore
	key      string // the shard's record key
	floorKey string // the shard's floor key (KeepFloor)
	leaseKey string // the writers' lease record's key

	ctx    context.Context // every process's ancestor; cancelled to shut down
	cancel context.CancelFunc

	// wakeup tells the scheduler, wherever it waits, that a goroutine of
	// a process waits for its turn (turn).
	wakeup chan struct{}

	mu       sync.Mutex      // guards everything below
	hist     promise.History // what happened
	steps    []int           // the scheduler step of each history entry
	step     int             // the scheduler's step now
	pending  []*request      // store calls waiting for the scheduler
	last     *request        // the store call the scheduler ran or withdrew last
	stalled  []*request      // granted calls the store holds up, by key, until their process runs again
	calls    map[int]*promise.Call
	nextCall int
	procs    []*proc
	names    map[string]int // holder name -> restarts, for labels
	maxEpoch uint64         // the highest epoch a settle tried
	maxTerm  uint64         // the highest term a lease record took: its epochs are below (maxTerm+1)<<32
	tally    map[string]int // what happened, for the log
	trace    []string       // the scheduler's view at each step (Trace)
	reads    map[int]int    // the reads of the record each call made
	contexts int            // the contexts processes tracked so far, for their IDs
	waiting  []*waiter      // the goroutines of processes that wait for their turn
	over     bool           // the run is over: every goroutine runs without a turn

	past      [][]byte // every content the record took, in order: what a rollback restores
	regressed bool     // a call was refused because the record was lost or set back: the operator settles it

	leasePast      [][]byte // every content the lease record took by a write of the package, in order: what unsetLease restores
	leaseRegressed bool     // a Lease reported its record lost or set back: the operator settles the lease

	blobTimes map[string]time.Time // each blob's creation time by the world's clock
}

// New returns a world simulating cfg from seed. Call it inside the
// synctest bubble that will run it.
func New(seed uint64, cfg Config) (*World, error) {
	base, err := newBase(cfg.Dir)
	if err != nil {
		return nil, err
	}
	w := &World{cfg: cfg, seed: seed, rng: rand.New(rand.NewPCG(seed, 0x5157)), order: rand.New(rand.NewPCG(seed, 0x7475726e)),
		foreign: rand.New(rand.NewPCG(seed, 0x666f726e)), unlease: rand.New(rand.NewPCG(seed, 0x756e6c73)),
		base: base, wakeup: make(chan struct{}, 1),
		calls: map[int]*promise.Call{}, names: map[string]int{}, tally: map[string]int{}, reads: map[int]int{}}
	w.store = &simStore{w: w, base: base}
	w.retire = rand.New(rand.NewPCG(seed, retireStream))
	w.drawRetirement()
	w.ctx, w.cancel = context.WithCancel(context.Background())
	if w.key, err = keys.Shard(cfg.Prefix, plugin, shard); err != nil {
		return nil, err
	}
	if w.floorKey, err = keys.Floor(cfg.Prefix, plugin, shard); err != nil {
		return nil, err
	}
	if w.leaseKey, err = keys.Lease(cfg.Prefix, leaseName); err != nil {
		return nil, err
	}
	if cfg.Branded {
		// On the base store, before the history begins: the brand is
		// the deployment's, not a call of it.
		if _, err := (&writefence.Fence{Store: base, Prefix: cfg.Prefix}).ClaimBrand(context.Background()); err != nil {
			return nil, err
		}
		// The history opens with it, as a change made outside, so that
		// the checker knows what the brand holds (promises 10 and 33).
		bk := keys.Brand(cfg.Prefix)
		data, version, err := base.Get(context.Background(), bk)
		if err != nil {
			return nil, err
		}
		w.record(promise.Change{Kind: "put", Key: bk, Data: data, Version: version, At: time.Now()})
	}
	for i := range cfg.Writers {
		w.startWriter(fmt.Sprintf("w%d", i+1))
	}
	for i := range cfg.Collectors {
		w.start(&proc{name: fmt.Sprintf("gc%d", i+1), kind: "collector"})
	}
	for i := range cfg.Readers {
		w.start(&proc{name: fmt.Sprintf("reader%d", i+1), kind: "reader"})
	}
	w.start(&proc{name: "operator", kind: "operator"})
	return w, nil
}

// Run runs the scheduler for the configured steps, then shuts every
// process down, and returns the history.
func (w *World) Run() *promise.History {
	for step := 0; step < w.cfg.Steps; step++ {
		w.turns()
		w.mu.Lock()
		w.step = step
		w.mu.Unlock()
		w.act()
	}
	w.shutdown()
	return &w.hist
}

// Step returns the scheduler step at which history entry i happened.
func (w *World) Step(i int) int {
	if i < 0 || i >= len(w.steps) {
		return -1
	}
	return w.steps[i]
}

// Trace returns what the scheduler saw and drew at each step (the calls
// it could grant, and its roll) and the turns it handed out between
// steps. Two runs of one seed give one trace.
func (w *World) Trace() []string { return w.trace }

// Tally returns what the run did, by kind.
func (w *World) Tally() map[string]int { return w.tally }

// note counts one thing that happened. The caller holds mu.
func (w *World) note(what string) { w.tally[what]++ }

// Reads returns how many reads of the shard's record the call made.
func (w *World) Reads(call int) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.reads[call]
}

// act takes one scheduler step: grant a waiting store call (perhaps with a
// fault), let time pass, or inject chaos.
func (w *World) act() {
	now := time.Now()
	w.mu.Lock()
	ready := w.ready(now)
	w.mu.Unlock()
	if w.retireAt > 0 && w.step == w.retireAt {
		w.retireShard()
	}
	if w.unlease.IntN(1000) < 2 {
		w.unsetLease()
	}
	roll := w.rng.IntN(1000)
	w.traceStep(now, ready, roll)
	switch {
	case roll < 15:
		w.pauseOne(now)
	case roll < 20:
		w.restartOne(false)
	case roll < 22:
		w.restartOne(true)
	case roll < 30:
		w.damage()
	case roll < 32:
		w.deleteRecord()
	case roll < 34:
		w.rollback()
	case roll < 36:
		w.damageBlob()
	case len(ready) > 0 && roll < 870:
		w.grant(ready[w.rng.IntN(len(ready))], now)
	default:
		w.advance()
	}
}

// traceStep records what the scheduler saw and drew at this step.
func (w *World) traceStep(now time.Time, ready []*request, roll int) {
	var b strings.Builder
	fmt.Fprintf(&b, "%d at %d:", w.step, now.UnixNano())
	for _, r := range ready {
		fmt.Fprintf(&b, " %s#%d %s %s;", r.proc.name, r.call, r.kind, r.key)
	}
	fmt.Fprintf(&b, " roll %d", roll)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.trace = append(w.trace, b.String())
}

// advance lets virtual time pass: a little, or up to a lease's TTL.
func (w *World) advance() {
	var d time.Duration
	switch w.rng.IntN(4) {
	case 0:
		d = time.Duration(1 + w.rng.Int64N(int64(50*time.Millisecond)))
	case 1, 2:
		d = time.Duration(1 + w.rng.Int64N(int64(time.Second)))
	default:
		d = time.Duration(1 + w.rng.Int64N(int64(w.cfg.TTL)))
	}
	w.sleep(d)
}

// sleep lets d of virtual time pass in the scheduler's goroutine, and
// hands out the turns that processes wait for at each instant on the way.
func (w *World) sleep(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			return
		case <-w.wakeup:
			w.turns()
		}
	}
}

// A waiter is a goroutine of a process that waits for its turn.
type waiter struct {
	label string        // who it is and what it resumes: the order of turns
	turn  chan struct{} // closed when its turn comes
	quit  *request      // or a store call whose ctx ended, which its turn withdraws
}

// signal tells the scheduler, wherever it waits, that a goroutine waits
// for its turn, or that a store call's ctx ended.
func (w *World) signal() {
	select {
	case w.wakeup <- struct{}{}:
	default: // the scheduler is told already
	}
}

// turn waits until the world hands the calling goroutine of a process its
// turn. The goroutines that run at one instant (woken by the clock, or by
// one event) would otherwise run at once, in an order the runtime picks:
// the calls they begin, the random bytes the package draws for them and
// the Lease's slot they take would come in that order. They wait for
// their turns instead, and run one at a time, each until it waits again,
// in an order drawn from the seed (turns). label names the goroutine and
// what it resumes; two goroutines that wait at once have two labels.
func (w *World) turn(label string) {
	t := &waiter{label: label, turn: make(chan struct{})}
	w.mu.Lock()
	if w.over {
		w.mu.Unlock()
		return
	}
	w.waiting = append(w.waiting, t)
	w.mu.Unlock()
	w.signal()
	<-t.turn
}

// turns hands out the turns that processes wait for, one at a time, each
// once every other goroutine of the bubble waits, in an order drawn from
// the seed among their labels, until none waits. A store call whose ctx
// ended before the scheduler ran it waits so too: its turn withdraws it.
// It runs in the scheduler's goroutine, the one that calls synctest.Wait.
func (w *World) turns() {
	for {
		synctest.Wait()
		w.mu.Lock()
		for _, r := range w.pending {
			if !r.taken && !r.sent && !r.quitting && r.ctx.Err() != nil {
				r.quitting = true
				w.waiting = append(w.waiting, &waiter{label: r.label() + " gives up", quit: r})
			}
		}
		if len(w.waiting) == 0 {
			w.mu.Unlock()
			return
		}
		slices.SortStableFunc(w.waiting, func(a, b *waiter) int { return strings.Compare(a.label, b.label) })
		i := 0
		if len(w.waiting) > 1 {
			for j := 1; j < len(w.waiting); j++ {
				if w.waiting[j].label == w.waiting[j-1].label {
					w.note("two turns of one label: " + w.waiting[j].label)
				}
			}
			i = w.order.IntN(len(w.waiting))
		}
		t := w.waiting[i]
		w.trace = append(w.trace, fmt.Sprintf("  turn of %s, of %d", t.label, len(w.waiting)))
		w.waiting = slices.Delete(w.waiting, i, i+1)
		if r := t.quit; r != nil {
			w.pending = slices.DeleteFunc(w.pending, func(x *request) bool { return x == r })
			w.last = r
			w.mu.Unlock()
			r.finish(r.ctx.Err())
			continue
		}
		w.mu.Unlock()
		close(t.turn)
	}
}

// ready returns the waiting calls the scheduler may grant now, in a stable
// order: of processes that run, on keys no held-up write locks, and the
// held-up writes whose process runs again. The caller holds mu.
func (w *World) ready(now time.Time) []*request {
	locked := map[string]bool{}
	var out []*request
	for _, r := range w.stalled {
		locked[r.key] = true
		if !r.proc.paused(now) {
			out = append(out, r)
		}
	}
	for _, r := range w.pending {
		if !r.proc.paused(now) && !locked[r.key] && !r.quitting {
			out = append(out, r)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].less(out[j]) })
	return out
}

// A fault the scheduler injects into one store call.
type fault int

const (
	noFault   fault = iota
	transient       // the call fails and changes nothing
	lostAfter       // a write lands, and its reply is lost
	stall           // a write the store holds up, its process paused with it
	denied          // a write the store refuses (fs.ErrPermission): the floor's, after its seal or settle landed
)

// grant lets r run, with a fault drawn for it.
func (w *World) grant(r *request, now time.Time) {
	w.mu.Lock()
	if i := slices.Index(w.stalled, r); i >= 0 {
		// A held-up write whose process runs again: it completes.
		w.stalled = slices.Delete(w.stalled, i, i+1)
		w.note("held-up write completed")
		w.last = r
		w.mu.Unlock()
		r.finish(r.run(noFault))
		return
	}
	w.pending = slices.DeleteFunc(w.pending, func(x *request) bool { return x == r })
	r.taken = true
	f := w.drawFault(r)
	if f == stall {
		// The store holds the key while the writer's upload is in flight
		// and the writer is paused: reads and writes of the key wait.
		d := w.pauseFor()
		r.proc.pausedUntil = now.Add(d)
		w.markSent(r.proc)
		w.stalled = append(w.stalled, r)
		w.note("write held up, its writer paused")
		w.mu.Unlock()
		return
	}
	w.last = r
	w.mu.Unlock()
	r.finish(r.run(f))
}

// drawFault draws the fault of request r. The caller holds mu.
func (w *World) drawFault(r *request) fault {
	c := w.calls[r.call]
	if c == nil || c.Op == promise.Claim {
		return noFault
	}
	roll := w.rng.IntN(1000)
	if c.Op == promise.PutBlob {
		// PutBlob retries no failure of its create (promise 6): one in
		// thirty fails, and the writer abandons its segment; one in
		// sixty lands and its reply is lost, which PutBlob cannot learn
		// (promise 5).
		if r.kind == "create blob" && roll < 33 {
			return transient
		}
		if r.kind == "create blob" && roll < 50 {
			return lostAfter
		}
		// Its read of the brand (Branded) is retried as a read is.
		if r.kind == "get" && roll < 90 {
			return transient
		}
		return noFault
	}
	switch {
	case r.kind == "put" && roll < 20 && r.key == w.key && r.proc.kind == "writer":
		return stall
	case r.kind == "put" && roll >= 960 && r.key == w.floorKey:
		return denied
	case r.kind == "put" && roll < 50:
		return lostAfter
	case roll < 90:
		// Collect's listing and deletes of the shard's blobs are not
		// retried (promise 6): a failure ends the pass, and the next
		// pass collects what it left.
		return transient
	}
	return noFault
}

// pauseFor draws how long a process stays paused: up to four TTLs, which
// is longer than the lease and the grace.
func (w *World) pauseFor() time.Duration {
	return time.Duration(int64(w.cfg.TTL)/4 + w.rng.Int64N(4*int64(w.cfg.TTL)))
}

// pauseOne pauses a writer (mostly one with a write of the record waiting,
// the moment that matters) or another process.
func (w *World) pauseOne(now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var writing, any []*proc
	for _, p := range w.procs {
		if p.ctx.Err() != nil {
			continue
		}
		any = append(any, p)
		for _, r := range w.pending {
			if r.proc == p && (r.kind == "put" || r.kind == "stat blob" || r.kind == "check blobs") {
				writing = append(writing, p)
				break
			}
		}
	}
	pool := any
	if len(writing) > 0 && w.rng.IntN(3) > 0 {
		pool = writing
	}
	if len(pool) == 0 {
		return
	}
	p := pool[w.rng.IntN(len(pool))]
	p.pausedUntil = now.Add(w.pauseFor())
	w.markSent(p)
	w.note("pause")
}

// markSent marks p's waiting calls as sent: a paused process's calls are
// on the wire and land when it runs again, whatever its contexts do
// meanwhile. The caller holds mu.
func (w *World) markSent(p *proc) {
	for _, r := range w.pending {
		if r.proc == p {
			r.sent = true
		}
	}
}

// restartOne restarts a writer under the same holder name: the old
// process is killed, or (zombie) left running beside the new one.
func (w *World) restartOne(zombie bool) {
	w.mu.Lock()
	var writers []*proc
	for _, p := range w.procs {
		if p.kind == "writer" && p.ctx.Err() == nil {
			writers = append(writers, p)
		}
	}
	if len(writers) == 0 {
		w.mu.Unlock()
		return
	}
	old := writers[w.rng.IntN(len(writers))]
	if zombie {
		w.note("second process of a holder started")
	} else {
		w.note("restart")
	}
	w.mu.Unlock()
	if !zombie {
		old.cancel()
	}
	w.startWriter(old.holder)
}

// damage flips one byte of the record, from outside the package, mostly
// in its payload (its header and references then still decode).
func (w *World) damage() {
	data, version, err := w.base.Get(context.Background(), w.key)
	if err != nil || len(data) == 0 {
		return
	}
	data = slices.Clone(data)
	at := w.rng.IntN(len(data))
	if w.rng.IntN(3) > 0 {
		at = len(data) - 1 - w.rng.IntN(min(len(data), 3))
	}
	bit := w.rng.IntN(8)
	if h, b, check := record.Decode(data); check == "" && w.foreign.IntN(6) == 0 {
		// Now and then a program of another format rewrites the record
		// instead, its references kept: no Fence writes over it, and
		// no collection deletes under it (promises 10 and 25), until
		// it is set back or deleted.
		w.putOutside(bytes.Join(record.Encode("other-format/v9", h.Writer, h.Epoch, b, record.CRC32C(b.Payload)), nil), version, "record rewritten in another format")
		return
	}
	data[at] ^= 1 << bit
	w.putOutside(data, version, "damage")
}

// damageBlob flips one bit of a blob of the shard, from outside the
// package, as bit rot or a rewrite from outside would: its key, size and
// creation time stay, its bytes no longer match the reference (promise
// 23).
func (w *World) damageBlob() {
	ctx := context.Background()
	space, err := keys.Blobs(w.cfg.Prefix, plugin, shard)
	if err != nil {
		panic(err)
	}
	var blobs []string
	if err := w.base.ListBlobs(ctx, space, func(b writefence.BlobInfo) error {
		blobs = append(blobs, b.Key)
		return nil
	}); err != nil || len(blobs) == 0 {
		return
	}
	slices.Sort(blobs) // the base store lists in no set order
	key := blobs[w.rng.IntN(len(blobs))]
	rc, _, err := w.base.OpenBlob(ctx, key)
	if err != nil {
		return
	}
	data, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || len(data) == 0 {
		return
	}
	data[w.rng.IntN(len(data))] ^= 1 << w.rng.IntN(8)
	if err := w.base.DeleteBlob(ctx, key); err != nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.record(promise.Change{Kind: "delete blob", Key: key, At: time.Now()})
	if _, err := w.base.CreateBlob(ctx, key, bytes.NewReader(data)); err != nil {
		return
	}
	// The listing gives the blob the world's creation time (withCreated),
	// which stays.
	w.record(promise.Change{Kind: "create blob", Key: key, Data: data, Modified: w.blobTimes[key], At: time.Now()})
	w.note("blob damaged")
}

// putOutside writes data over the record at version from outside the
// package, and records the change, with note, when it lands.
func (w *World) putOutside(data []byte, version, note string) {
	v, err := w.base.PutIfVersion(context.Background(), w.key, data, version)
	if err != nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.record(promise.Change{Kind: "put", Key: w.key, Data: data, Version: v, At: time.Now()})
	w.past = append(w.past, data)
	w.note(note)
}

// rollback sets the record back to one of its earlier contents, from
// outside the package, as a restore from backup or a failover to a stale
// replica would: mostly a recent one.
func (w *World) rollback() {
	w.mu.Lock()
	past := w.past
	w.mu.Unlock()
	if len(past) < 2 {
		return
	}
	back := 1 + w.rng.IntN(min(len(past)-1, 8))
	if w.rng.IntN(4) == 0 {
		back = 1 + w.rng.IntN(len(past)-1)
	}
	data := past[len(past)-1-back]
	_, version, err := w.base.Get(context.Background(), w.key)
	switch {
	case errors.Is(err, writefence.ErrNotFound):
		version = ""
	case err != nil:
		return
	}
	w.putOutside(data, version, "record set back")
}

// deleteRecord deletes the record from outside the package.
func (w *World) deleteRecord() {
	if _, _, err := w.base.Get(context.Background(), w.key); err != nil {
		return
	}
	if err := w.base.Delete(context.Background(), w.key); err != nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.record(promise.Change{Kind: "delete", Key: w.key, At: time.Now()})
	w.note("record deleted")
}

// unsetLease deletes the writers' lease record from outside the package,
// or sets it back to an earlier content of a lower term, as a restore
// from backup would, while the Lease values that held or read it go on:
// none takes or writes it again until it is back at or above what that
// value saw (promise 30), and a renewal that meets it reports the lease
// lost and regressed. Drawn apart from the scheduler's draws.
func (w *World) unsetLease() {
	ctx := context.Background()
	data, version, err := w.base.Get(ctx, w.leaseKey)
	if err != nil {
		return
	}
	if cur, check := record.DecodeLease(data); check == "" && w.unlease.IntN(2) == 0 {
		w.mu.Lock()
		var lower [][]byte
		for _, d := range w.leasePast {
			if l, check := record.DecodeLease(d); check == "" && l.Term < cur.Term {
				lower = append(lower, d)
			}
		}
		w.mu.Unlock()
		if len(lower) > 0 {
			back := lower[len(lower)-1-w.unlease.IntN(min(len(lower), 4))]
			v, err := w.base.PutIfVersion(ctx, w.leaseKey, back, version)
			if err != nil {
				return
			}
			w.mu.Lock()
			defer w.mu.Unlock()
			w.record(promise.Change{Kind: "put", Key: w.leaseKey, Data: back, Version: v, At: time.Now()})
			w.note("lease record set back")
			return
		}
	}
	if err := w.base.Delete(ctx, w.leaseKey); err != nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.record(promise.Change{Kind: "delete", Key: w.leaseKey, At: time.Now()})
	w.note("lease record deleted")
}

// shutdown ends every process, one after the other so that the history
// stays the seed's, and lets its calls in flight finish.
func (w *World) shutdown() {
	// What the last step freed runs first, then every process runs
	// again, and the writes the store holds up land.
	w.turns()
	w.mu.Lock()
	procs := slices.Clone(w.procs)
	for _, p := range procs {
		p.pausedUntil = time.Time{}
	}
	stalled := w.stalled
	w.stalled = nil
	w.mu.Unlock()
	for _, r := range stalled {
		w.turns()
		w.mu.Lock()
		w.last = r
		w.mu.Unlock()
		r.finish(r.run(noFault))
	}
	for _, p := range procs {
		p.cancel()
		w.mu.Lock()
		p.pausedUntil = time.Time{}
		w.mu.Unlock()
		for spins := 0; ; spins++ {
			if spins > 100000 {
				panic(fmt.Sprintf("sim: seed %d: process %s does not end", w.seed, p.name))
			}
			w.turns()
			w.mu.Lock()
			var mine []*request
			for _, r := range w.ready(time.Now()) {
				if r.proc == p {
					mine = append(mine, r)
				}
			}
			w.mu.Unlock()
			if len(mine) == 0 && p.exited() {
				break
			}
			if len(mine) == 0 {
				w.sleep(time.Second)
				continue
			}
			r := mine[0]
			w.mu.Lock()
			if i := slices.Index(w.stalled, r); i >= 0 {
				w.stalled = slices.Delete(w.stalled, i, i+1)
			} else {
				w.pending = slices.DeleteFunc(w.pending, func(x *request) bool { return x == r })
				r.taken = true
			}
			w.last = r
			w.mu.Unlock()
			r.finish(r.run(noFault))
		}
	}
	w.turns()
	w.mu.Lock()
	w.over = true
	w.mu.Unlock()
	w.cancel()
}

// record appends a store change to the history. The caller holds mu.
func (w *World) record(ch promise.Change) {
	w.hist.Change(ch)
	w.steps = append(w.steps, w.step)
}

// begin records that p starts call c, and returns the context the call
// runs with: it names the call, so the store attributes its changes.
func (w *World) begin(ctx context.Context, p *proc, c *promise.Call) context.Context {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.nextCall++
	c.ID, c.Proc, c.Start = w.nextCall, p.name, time.Now()
	if c.Key == "" { // a call on the shard, not on a key of its own
		c.Key = w.key
		c.Plugin, c.Shard = plugin, shard
	}
	c.KeepFloor, c.Prefix = w.cfg.KeepFloor, w.cfg.Prefix
	c.Before = p.contexts()
	w.calls[c.ID] = c
	w.hist.Begin(c)
	w.steps = append(w.steps, w.step)
	return context.WithValue(ctx, callKey{}, c.ID)
}

// end records that call c of p ended with err.
func (w *World) end(p *proc, c *promise.Call, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	c.End, c.Err, c.Is = time.Now(), err, Classify(err)
	c.Stale = StaleNamed(err)
	c.Regress = RegressedSeen(err)
	c.After = p.contexts()
	switch {
	case LeaseRegressed(err):
		w.leaseRegressed = true // the lease's alert: the operator settles the lease
	case c.Is.Has("regressed"):
		w.regressed = true // the alert the operator acts on
	}
	w.hist.Finish(c)
	w.steps = append(w.steps, w.step)
}

// observe is every Fence's Observer: the event joins the call it happened
// in, while that call runs, placed where the history stands.
func (w *World) observe(ctx context.Context, e writefence.WriteEvent) {
	id, _ := ctx.Value(callKey{}).(int)
	w.mu.Lock()
	defer w.mu.Unlock()
	if c := w.calls[id]; c != nil && c.End.IsZero() {
		c.Events = append(c.Events, promise.Event{Op: e.Op, Key: e.Key, Retrying: e.Retrying, Err: e.Err, Is: Classify(e.Err), Place: len(w.hist.Entries)})
	}
}

type callKey struct{}

// Classify names the sentinels err matches, as promise.Matches does.
func Classify(err error) promise.Matches {
	if err == nil {
		return nil
	}
	var m promise.Matches
	for _, s := range []struct {
		name   string
		target error
	}{
		{"stale", writefence.ErrStaleEpoch}, {"conflict", writefence.ErrConflict}, {"unknown", writefence.ErrOutcomeUnknown},
		{"wire", writefence.ErrWire}, {"corrupt", writefence.ErrCorrupt}, {"invalid", writefence.ErrInvalidArgument},
		{"not found", writefence.ErrNotFound}, {"too large", writefence.ErrTooLarge}, {"untrusted", writefence.ErrUntrustedStore},
		{"lease held", writefence.ErrLeaseHeld}, {"lease lost", writefence.ErrLeaseLost}, {"lease expired", writefence.ErrLeaseExpired},
		{"takeover timeout", writefence.ErrTakeoverTimeout}, {"term ended", writefence.ErrTermEnded}, {"regressed", writefence.ErrEpochRegressed},
		{"permission", fs.ErrPermission}, {"unsupported", errors.ErrUnsupported},
		{"canceled", context.Canceled}, {"deadline", context.DeadlineExceeded},
	} {
		if errors.Is(err, s.target) {
			m = append(m, s.name)
		}
	}
	var unknown *writefence.OutcomeUnknownError
	if errors.As(err, &unknown) && unknown.Err != nil {
		m = append(m, "cause")
	}
	return m
}

// LeaseRegressed reports whether err says a Lease found its record absent
// or below a term it held or read: an acquisition refused so, or the
// lease lost so.
func LeaseRegressed(err error) bool {
	var r *writefence.EpochRegressedError
	if errors.As(err, &r) {
		return strings.HasPrefix(r.Op, "lease")
	}
	var lost *writefence.LeaseLostError
	return errors.As(err, &lost) && errors.Is(err, writefence.ErrEpochRegressed)
}

// StaleNamed is the recorded epoch and writer err's *StaleEpochError
// names; nil when err is none.
func StaleNamed(err error) *record.Header {
	var stale *writefence.StaleEpochError
	if !errors.As(err, &stale) {
		return nil
	}
	return &record.Header{Epoch: stale.RecordedEpoch, Writer: stale.RecordedWriter}
}

// RegressedSeen is what the *writefence.EpochRegressedError err wraps
// names as its Fence's memory of a shard's record: none for a floor's
// refusal or a lease's.
func RegressedSeen(err error) *record.Header {
	var r *writefence.EpochRegressedError
	if !errors.As(err, &r) || r.Floor || strings.HasPrefix(r.Op, "lease") {
		return nil
	}
	return &record.Header{Epoch: r.Seen, Writer: r.SeenWriter}
}

// Describe renders the history's entries from first to last, one line
// each, for a failure's log.
func Describe(h *promise.History, w *World, first, last int) string {
	var b strings.Builder
	for i := max(first, 0); i <= last && i < len(h.Entries); i++ {
		e := h.Entries[i]
		fmt.Fprintf(&b, "%5d step %4d  ", i, w.Step(i))
		switch {
		case e.Begin != nil:
			c := e.Begin
			fmt.Fprintf(&b, "%s begin #%d %s %s writer=%s epoch=%d lease=%s\n", c.Start.Format("15:04:05.000"), c.ID, c.Proc, c.Op, c.Writer, c.Epoch, c.Lease)
		case e.End != nil:
			c := e.End
			fmt.Fprintf(&b, "%s end   #%d %s %s got=%d err=%v\n", c.End.Format("15:04:05.000"), c.ID, c.Proc, c.Op, c.Got, c.Err)
		default:
			ch := e.Change
			fmt.Fprintf(&b, "%s change call=%d %s %s %s %d bytes\n", ch.At.Format("15:04:05.000"), ch.Call, ch.Kind, ch.Key, ch.Fault, len(ch.Data))
		}
	}
	return b.String()
}
