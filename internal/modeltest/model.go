// Package modeltest is the model test of the package writefence: random
// sequences of every write the package makes, with damage and faults, run
// on a store and checked after every step against a reference model and
// the promise checker (see Run). The root package runs it on its stores,
// and each store module on its own store.
package modeltest

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"pgregory.net/rapid"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/defaults"
	"github.com/writefence/writefence/internal/fakeclock"
	"github.com/writefence/writefence/internal/hook"
	"github.com/writefence/writefence/internal/keys"
	"github.com/writefence/writefence/internal/promise"
	"github.com/writefence/writefence/internal/record"
	"github.com/writefence/writefence/internal/testserver"
)

// The model test: random sequences of every write the package makes (Push,
// Update, Seal, Settle, Lease acquire, renew and release, brand claims),
// deletes, damage from outside the store (a flipped byte, a value emptied,
// the same damage twice), lost replies, injected conflicts, failing reads,
// re-brands and writers behind a wrapper that embeds the store, run against
// a reference model on every store, and checked after every step:
//
//   - the recorded epoch never goes down, settles included (between
//     deletes, which are outside the fence's promise);
//   - at most one write lands per epoch;
//   - no acknowledged write is lost: a write that returned nil is what the
//     store holds, until a higher epoch supersedes it;
//   - a corrupt record is overwritten only by a settle of exactly that
//     damage;
//   - a refusal writes nothing, and a write under BrandVerifyAlways lands
//     only under the Fence's brand;
//   - a lease's term never goes down, no two acquisitions get one term, and
//     a damaged lease record is never overwritten;
//   - a wrapper is never bypassed: every write and read of a wrapped
//     writer goes through the wrapper's own Get and PutIfVersion;
//
// and after every step the promise checker (internal/promise) reads the
// run's history, every call and every change the store took, recorded
// beneath the Fences (recorder.go), and checks every numbered
// promise of the package on it.
//
// The unit tier runs it on MemStore and the directory store, the
// integration tier on MinIO, fake-gcs-server and Valkey (both write paths,
// and with a replica and WaitReplicas), and each store module on its own
// store's server (Azurite, PostgreSQL, etcd, dynalite), in parallel. CI
// runs fixed seeds
// (modelSeed, and ChecksUnit or ChecksLocal checks);
// WRITEFENCE_LONG=1 runs more checks from a random seed, or pass
// -rapid.seed and -rapid.checks.

// ErrLostReply stands for a reply lost on the network: what a write whose
// reply the model loses returns.
var ErrLostReply = errors.New("connection reset by peer")

// The model's fixed names.
const (
	modelPlugin, modelShard = "wal", "model"
	modelOperator           = "operator"
	foreignIdentity         = "other-format/v9"
)

// lostMode is what happens to the reply of a step's first write that gets
// past its injected conflicts.
type lostMode int

const (
	lostNone   lostMode = iota
	lostBefore          // the write never reaches the store; an error comes back
	lostAfter           // the write lands; an error replaces its reply
)

// faultSet is the faults armed for one step: the first conflicts writes
// answer ErrConflict without writing, then one reply may be lost, and the
// reads may fail, always or once a reply was lost.
type faultSet struct {
	conflicts       int
	lost            lostMode
	readsFail       bool
	readsAfterLoss  bool
	denied          bool // every write is refused as fs.ErrPermission, writing nothing
	cancelAfterLoss bool // the call's ctx is cancelled in the back-off after a lost reply
}

func (f faultSet) quiet() bool { return f == faultSet{} }

// faultPlan injects the armed faults, for the engine's hooks and the
// wrappers alike.
type faultPlan struct {
	mu        sync.Mutex // guards the fields
	f         faultSet
	cancel    context.CancelFunc // cancels the call's ctx
	lostAt    bool               // a reply was lost since the plan was armed
	writes    int                // writes that reached the plan
	before    func()             // runs once, before the first write reaches the store
	failed    bool               // a store call failed and no back-off followed yet
	violation string             // how the engine broke the retry policy, if it did
	rec       *Recorder          // told of every fault, for the checker
}

func (p *faultPlan) arm(f faultSet, cancel context.CancelFunc) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.f, p.cancel, p.lostAt, p.writes, p.failed, p.violation, p.before = f, cancel, false, 0, false, "", nil
}

// call notes a store call: one right after a failure, with no back-off in
// between, is a retry at once, which the engine never makes. The caller
// holds mu.
func (p *faultPlan) call(what string) {
	if p.failed && p.violation == "" {
		p.violation = "a " + what + " was retried right after a failure, without a back-off"
	}
}

// wait is the engine's back-off: it ends the failure, and may cancel the
// call's ctx.
func (p *faultPlan) wait(ctx context.Context) error {
	p.mu.Lock()
	p.failed = false
	cancel := p.f.cancelAfterLoss && p.lostAt
	p.mu.Unlock()
	if cancel && p.cancel != nil {
		p.cancel()
	}
	return ctx.Err()
}

// aside runs run with no fault armed and the plan's state of the call in
// progress set aside, then restores it: a step nested inside another's
// write is not that write's retry.
func (p *faultPlan) aside(run func()) {
	p.mu.Lock()
	f, cancel, lostAt, writes, failed, violation := p.f, p.cancel, p.lostAt, p.writes, p.failed, p.violation
	p.f, p.cancel, p.failed = faultSet{}, nil, false
	p.mu.Unlock()
	run()
	p.mu.Lock()
	p.f, p.cancel, p.lostAt, p.writes, p.failed, p.violation = f, cancel, lostAt, writes, failed, violation
	p.mu.Unlock()
}

func (p *faultPlan) broke() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.violation
}

func (p *faultPlan) written() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.writes
}

func (p *faultPlan) read() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.call("read")
	if p.f.readsFail || p.f.readsAfterLoss && p.lostAt {
		p.failed = true
		if p.rec != nil {
			p.rec.fault("transient")
		}
		return ErrLostReply
	}
	return nil
}

func (p *faultPlan) write(key string, do func() (string, error)) (string, error) {
	p.mu.Lock()
	p.call("write")
	p.writes++
	if p.f.denied {
		p.failed = true
		if p.rec != nil {
			p.rec.writeFault("denied", key)
		}
		p.mu.Unlock()
		return "", &writefence.StoreError{Op: "model put", Err: fmt.Errorf("%w: access denied", fs.ErrPermission)}
	}
	if p.f.conflicts > 0 {
		p.f.conflicts--
		p.failed = true
		if p.rec != nil {
			p.rec.writeFault("conflict", key)
		}
		p.mu.Unlock()
		return "", writefence.ErrConflict
	}
	lost := p.f.lost
	p.f.lost = lostNone
	if lost != lostNone {
		p.lostAt, p.failed = true, true
	}
	before := p.before
	p.before = nil
	p.mu.Unlock()
	if before != nil {
		before()
	}
	switch lost {
	case lostBefore:
		if p.rec != nil {
			p.rec.writeFault("transient", key)
		}
		return "", ErrLostReply
	case lostAfter:
		_, err := do()
		if p.rec != nil && err == nil {
			p.rec.writeFault("lost", key)
		}
		return "", ErrLostReply
	}
	return do()
}

// promoting stands for a type that embeds an adapter and overrides Get and
// PutIfVersion: it injects the plan's faults there and counts every call.
// The adapter's other methods are promoted to it, as embedding would do:
// its Capabilities names the adapter, and its capability methods go
// straight to the adapter, past the overrides. A Fence must never call
// them; bypassed counts it if it does.
type promoting struct {
	inner    writefence.ConditionalStore
	plan     *faultPlan
	gets     atomic.Int64
	puts     atomic.Int64
	bypassed atomic.Int64
}

func (p *promoting) Get(ctx context.Context, key string) ([]byte, string, error) {
	p.gets.Add(1)
	if err := p.plan.read(); err != nil {
		return nil, "", err
	}
	return p.inner.Get(ctx, key)
}

func (p *promoting) PutIfVersion(ctx context.Context, key string, data []byte, expect string) (string, error) {
	p.puts.Add(1)
	return p.plan.write(key, func() (string, error) { return p.inner.PutIfVersion(ctx, key, data, expect) })
}

func (p *promoting) Capabilities() writefence.ConditionalStore {
	if c, ok := p.inner.(writefence.Capable); ok {
		return c.Capabilities()
	}
	return nil
}

func (p *promoting) GetPrefix(ctx context.Context, key string, n int64) ([]byte, int64, string, error) {
	p.bypassed.Add(1)
	return writefence.GetPrefix(ctx, p.inner, key, n)
}

func (p *promoting) PutPartsIfVersion(ctx context.Context, key string, parts [][]byte, expect string) (string, error) {
	p.bypassed.Add(1)
	return writefence.PutParts(ctx, p.inner, key, parts, expect)
}

func (p *promoting) PutIfBranded(ctx context.Context, brandKey, identity, key string, parts [][]byte, expect string) (string, error) {
	p.bypassed.Add(1)
	return writefence.PutIfBranded(ctx, p.inner, brandKey, identity, key, parts, expect)
}

func (p *promoting) Delete(ctx context.Context, key string) error {
	return p.inner.(writefence.Deleter).Delete(ctx, key)
}

// modelRecord is a sound record as the model knows it; epoch 0 is none.
type modelRecord struct {
	epoch   uint64
	writer  string
	payload string
	foreign bool   // of another wire identity (foreignIdentity)
	blobs   string // the names of the blobs it references, in order, joined by ","
	since   uint64 // its tenure floor
	stream  bool   // a stream's record (format version 3), as the shard's stay once one is
}

func (r modelRecord) String() string {
	if r.epoch == 0 {
		return "no record"
	}
	if r.foreign {
		return fmt.Sprintf("epoch %d by %s %q, of %s", r.epoch, r.writer, shortPayload(r.payload), foreignIdentity)
	}
	return fmt.Sprintf("epoch %d by %s %q, blobs [%s], since %d", r.epoch, r.writer, shortPayload(r.payload), r.blobs, r.since)
}

// shortPayload names a large payload by its size and its drawn end.
func shortPayload(p string) string {
	if len(p) < modelLargePayload {
		return p
	}
	return fmt.Sprintf("(%d bytes)…%s", len(p), p[modelLargePayload:])
}

// modelWriter is one writer: a Fence of its own over the store, raw (its
// faults injected by the engine's hooks) or behind a promoting wrapper.
type modelWriter struct {
	name    string
	fence   *writefence.Fence
	wrapper *promoting // nil when raw
	always  bool       // Brand is BrandVerifyAlways
	lease   *writefence.Lease
	old     *writefence.Lease // the Lease value a restart replaced, still running; nil when none
}

// Target is a store the model runs on.
type Target struct {
	Name   string
	Store  writefence.ConditionalStore
	Damage testserver.Damager
	Prefix string // the runs' keys live under it; empty: a fresh name

	// ClockStep is the resolution of the times the store gives blobs
	// (S3: a second); 0 when finer than the model can tell.
	ClockStep time.Duration

	// Rewrites says the store's versions name its bytes (S3, GCS, Azure,
	// etcd, MemStore): damage is a new version, written whole from
	// outside. Otherwise the store keeps its version beside its bytes
	// and damage is in place, for the store's own check to find.
	Rewrites bool
}

// headPush reports whether a Push decides on a record's head over the
// target: a store that declares a PrefixReader and whose versions name
// its bytes, so that a payload rewritten from outside under a sound head
// is replaced by a Push (promise 7).
func (m Target) headPush() bool {
	return m.Rewrites && declares[writefence.PrefixReader](m.Store)
}

// modelRun is one run of the model on a target: the system and the model.
type modelRun struct {
	ctx     context.Context
	target  Target
	prefix  string
	key     string // the shard record's
	logKey  string // its settle log's
	brand   string // the brand key
	lease   string // the lease record's key
	reader  *writefence.Fence
	admin   *writefence.Fence
	writers []*modelWriter
	plan    *faultPlan
	clock   *fakeclock.Clock
	counts  *modelCounts
	hist    *Recorder // the history, for the promise checker
	aliens  int       // the foreign pushes so far

	// The model.
	rec        modelRecord                  // the last sound record that landed
	damaged    string                       // the version of the damage the store holds; "" when sound
	damagedAt  uint64                       // the epoch the damaged record's header still shows; 0 when none
	headSound  bool                         // the damage leaves the record's head sound, and a Push decides on it (headPush)
	maxEpoch   uint64                       // the highest epoch landed since the last delete
	landed     map[uint64]bool              // the epochs landed since the last delete
	brandValue string                       // what the brand key holds; "" when absent
	leaseTerm  uint64                       // the highest lease term recorded
	terms      map[uint64]int               // the writer each term was acquired by
	termLease  map[uint64]string            // the Lease value (its incarnation) each term was acquired by
	acquiredBy map[uint64]*writefence.Lease // the Lease value whose Acquire returned each term
	leaseBad   string                       // the damaged lease record's version; "" when sound
	lastPush   *modelPush
	blobsOK    bool                  // the store holds blobs
	blobs      map[string]*modelBlob // every blob put, by name
	blobNames  []string              // in the order they were put
	lastSettle *writefence.Settlement
	lastFault  *testserver.Fault
	horizon    time.Time // the record's collection horizon, as read after the last step
}

// modelBlob is a blob the model put.
type modelBlob struct {
	ref     writefence.BlobRef
	writer  string
	epoch   uint64
	data    string
	gone    bool      // collected
	at      time.Time // by the local clock, once its upload returned
	created time.Time // by the store's clock, as it reports the blob's creation
}

// modelPush is a push, to run again.
type modelPush struct {
	w       *modelWriter
	epoch   uint64
	payload string
}

// modelRuns numbers the runs, for their key prefixes.
var modelRuns atomic.Int64

// modelCounts tallies what the runs did, for the log.
type modelCounts struct {
	mu    sync.Mutex
	steps map[string]int
}

func (c *modelCounts) add(what string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.steps == nil {
		c.steps = map[string]int{}
	}
	c.steps[what]++
}

func newModelRun(t *rapid.T, target Target, counts *modelCounts) *modelRun {
	// Each run works under a prefix of its own, never drawn by rapid: runs
	// that shrink to the same draws must not see each other's keys.
	prefix := fmt.Sprintf("%smodel-%d/", target.Prefix, modelRuns.Add(1))
	key, err := keys.Shard(prefix, modelPlugin, modelShard)
	require.NoError(t, err)
	logKey, err := keys.SettleLog(prefix, modelPlugin, modelShard)
	require.NoError(t, err)
	leaseKey, err := keys.Lease(prefix, "model")
	require.NoError(t, err)
	clock := &fakeclock.Clock{}
	rec, recorded := NewRecorder(target.Store, clock.Now, promise.Options{HeadPush: declares[writefence.PrefixReader](target.Store)})
	target.Store = recorded
	r := &modelRun{
		target: target, prefix: prefix, key: key, logKey: logKey, brand: keys.Brand(prefix), lease: leaseKey,
		reader: &writefence.Fence{Store: target.Store, Prefix: prefix, Observer: rec.Observe},
		admin:  &writefence.Fence{Store: target.Store, Prefix: prefix, Observer: rec.Observe},
		plan:   &faultPlan{rec: rec}, clock: clock, counts: counts, hist: rec,
		landed: map[uint64]bool{}, terms: map[uint64]int{}, termLease: map[uint64]string{}, acquiredBy: map[uint64]*writefence.Lease{}, blobs: map[string]*modelBlob{},
	}
	_, r.blobsOK = target.Store.(writefence.BlobStore)
	// No writer sleeps between retries (the model is sequential); the
	// plan sees every back-off.
	r.ctx = hook.With(context.Background(), &hook.Hooks{Wait: r.wait})
	for i := range 3 {
		w := &modelWriter{name: fmt.Sprintf("w%d", i)}
		store := target.Store
		if rapid.Bool().Draw(t, w.name+" wrapped") {
			w.wrapper = &promoting{inner: target.Store, plan: r.plan}
			store = w.wrapper
		}
		w.fence = &writefence.Fence{Store: store, Prefix: prefix, MaxAttempts: 4, Observer: rec.Observe}
		if rapid.Bool().Draw(t, w.name+" brand always") {
			w.always, w.fence.Brand = true, writefence.BrandVerifyAlways
		}
		w.lease = &writefence.Lease{Fence: w.fence, Name: "model", Holder: w.name, TTL: 10 * time.Second, Clock: r.clock.Now}
		r.writers = append(r.writers, w)
	}
	if rapid.IntRange(0, 3).Draw(t, "starts with a record of another identity") == 0 {
		r.foreignPush(t)
	}
	return r
}

// ctxFor returns the context w's calls run with: the engine's hooks inject
// the plan's faults into a raw writer; a wrapped one gets them from its
// wrapper.
func (r *modelRun) ctxFor(w *modelWriter) context.Context {
	if w.wrapper != nil {
		return r.ctx
	}
	return hook.With(r.ctx, &hook.Hooks{
		Read: func(context.Context, string) error { return r.plan.read() },
		Write: func(_ context.Context, key string, write func() (string, error)) (string, error) {
			return r.plan.write(key, write)
		},
		Wait: r.wait,
	})
}

func (r *modelRun) wait(ctx context.Context, _ int, _ time.Duration) error { return r.plan.wait(ctx) }

// callOf completes c, a call by w (nil: by no writer of the run), with
// what the history records of every call of the run.
func (r *modelRun) callOf(w *modelWriter, c promise.Call) *promise.Call {
	c.Prefix, c.Plugin, c.Shard, c.Key = r.prefix, modelPlugin, modelShard, r.key
	if w != nil {
		c.Proc, c.BrandAlways, c.MaxAttempts = w.name, w.always, w.fence.MaxAttempts
		c.BrandReads = w.fence.Brand != 0
	}
	if c.Proc == "" {
		c.Proc = "admin"
	}
	return &c
}

// leaseLabel names a Lease value of w in the history.
func leaseLabel(w *modelWriter, l *writefence.Lease) string { return fmt.Sprintf("%s/%p", w.name, l) }

// recordDamage records, for the checker, the damage f did to key from
// outside the package, data being what the key held before it.
func (r *modelRun) recordDamage(t *rapid.T, key string, data []byte, f testserver.Fault, version string) {
	r.hist.outside(promise.Change{Kind: "put", Key: key, Data: f.Apply(data), Version: version, InPlace: !r.target.Rewrites})
}

func (r *modelRun) drawWriter(t *rapid.T) *modelWriter {
	return r.writers[rapid.IntRange(0, len(r.writers)-1).Draw(t, "writer")]
}

func drawFaults(t *rapid.T) faultSet {
	if rapid.IntRange(0, 2).Draw(t, "faulty") > 0 {
		return faultSet{}
	}
	if rapid.IntRange(0, 9).Draw(t, "denied") == 0 {
		return faultSet{denied: true}
	}
	reads := rapid.IntRange(0, 3).Draw(t, "reads")
	return faultSet{
		conflicts:       rapid.IntRange(0, 4).Draw(t, "conflicts"),
		lost:            rapid.SampledFrom([]lostMode{lostNone, lostBefore, lostAfter}).Draw(t, "lost"),
		readsFail:       reads == 1,
		readsAfterLoss:  reads == 2,
		cancelAfterLoss: rapid.IntRange(0, 4).Draw(t, "cancel") == 0,
	}
}

func (r *modelRun) drawEpoch(t *rapid.T) uint64 {
	top := max(r.maxEpoch, r.rec.epoch)
	return rapid.Uint64Range(max(1, top-min(top, 2)), top+3).Draw(t, "epoch")
}

// stored is what the store holds at the record's key, read directly.
type stored struct {
	found   bool
	version string
	corrupt bool
	epoch   uint64 // the header's, of a corrupt record too when it decodes
	foreign bool   // the header names foreignIdentity
	rec     modelRecord

	// Of a corrupt record whose header decodes: stream says its
	// references decode too (Inspect shows them as salvaged, in
	// salvaged), as they do in a plain record, which holds none.
	stream   bool
	salvaged string
}

func (r *modelRun) read(t *rapid.T) stored {
	info, err := r.reader.Inspect(context.Background(), modelPlugin, modelShard)
	switch {
	case errors.Is(err, writefence.ErrNotFound):
		return stored{}
	case errors.Is(err, writefence.ErrCorrupt):
		return stored{found: true, version: info.Version, corrupt: true, epoch: info.Epoch, foreign: info.Identity == foreignIdentity,
			stream: info.Stream, salvaged: recordOf(info, false).blobs}
	case errors.Is(err, writefence.ErrWire):
		require.Equal(t, foreignIdentity, info.Identity, "a record of an identity no writer writes")
		return stored{found: true, version: info.Version, epoch: info.Epoch, foreign: true, rec: recordOf(info, true)}
	}
	require.NoError(t, err, "a direct read of the record")
	return stored{found: true, version: info.Version, epoch: info.Epoch, rec: recordOf(info, false)}
}

func recordOf(info writefence.RecordInfo, foreign bool) modelRecord {
	names := make([]string, len(info.Blobs))
	for i, b := range info.Blobs {
		names[i] = b.Name
	}
	return modelRecord{epoch: info.Epoch, writer: info.Writer, payload: string(info.Payload), foreign: foreign,
		blobs: strings.Join(names, ","), since: info.Since, stream: info.Stream}
}

// successor is the record writer writes at epoch over the model's record:
// a shard of blobs keeps a tenure floor, which a seal (newTenure) sets to
// its own epoch and a change of writer raises above the recorded epoch;
// commit makes any shard one of blobs.
func (r *modelRun) successor(writer string, epoch uint64, payload, blobs string, commit, newTenure bool) modelRecord {
	m := modelRecord{epoch: epoch, writer: writer, payload: payload, blobs: blobs}
	if r.rec.stream || commit {
		m.stream = true
		// A plain record carries no floor: Commit takes its epoch as one.
		floor := r.rec.since
		if !r.rec.stream {
			floor = r.rec.epoch
		}
		m.since = floor
		switch {
		case newTenure:
			m.since = epoch
		case r.rec.epoch != 0 && r.rec.writer != writer:
			m.since = r.rec.epoch + 1
		}
	}
	return m
}

// refusal reports whether err refuses a write, which must then have
// written nothing.
func refusal(err error) bool {
	if errors.Is(err, writefence.ErrOutcomeUnknown) {
		return false
	}
	for _, target := range []error{writefence.ErrStaleEpoch, writefence.ErrWire, writefence.ErrCorrupt, writefence.ErrConflict,
		writefence.ErrInvalidArgument, writefence.ErrNotFound, fs.ErrPermission, writefence.ErrLeaseHeld, writefence.ErrLeaseLost} {
		if errors.Is(err, target) {
			return true
		}
	}
	return false
}

// landedWrite records in the model a record that landed, after checking
// the invariants a landing must keep.
func (r *modelRun) landedWrite(t *rapid.T, op string, w *modelWriter, want modelRecord, got stored, err error) {
	require.False(t, got.corrupt, "%s: the record is corrupt after a write landed", op)
	require.Equal(t, want, got.rec, "%s: a record that changed must be this write's", op)
	require.Greater(t, want.epoch, r.maxEpoch, "%s: epoch %d landed after epoch %d had: the recorded epoch went down, or two writes landed at one epoch", op, want.epoch, r.maxEpoch)
	require.False(t, r.landed[want.epoch], "%s: a second write landed at epoch %d", op, want.epoch)
	require.True(t, err == nil || errors.Is(err, writefence.ErrOutcomeUnknown), "%s landed but returned %v", op, err)
	if w != nil && w.always {
		require.Equal(t, defaults.Identity, r.brandValue, "%s landed by %s under BrandVerifyAlways while the brand held %q", op, w.name, r.brandValue)
	}
	r.rec, r.maxEpoch, r.landed[want.epoch], r.damaged = want, want.epoch, true, ""
}

// oneOf reports whether err matches alt, or one of the errors alt joins.
func oneOf(err, alt error) bool {
	if j, ok := alt.(interface{ Unwrap() []error }); ok {
		for _, a := range j.Unwrap() {
			if errors.Is(err, a) {
				return true
			}
		}
		return false
	}
	return alt != nil && errors.Is(err, alt)
}

// write runs one write of the record by w under faults and checks it
// against the model; call makes the call, given the promise.Call that
// records it, and returns the record it means to write and its error.
// Without faults, answer is the error the model expects (alt, when set,
// is also accepted). An unknown outcome is resolved by running call
// again without faults.
func (r *modelRun) write(t *rapid.T, op string, w *modelWriter, faults faultSet, answer, alt error, c promise.Call, call func(ctx context.Context, c *promise.Call) (modelRecord, error)) error {
	r.counts.add(op)
	err := r.writeOnce(t, op, w, faults, c, call)
	if modelAnswers && faults.quiet() && !oneOf(err, alt) {
		if answer == nil {
			require.NoError(t, err, op)
		} else {
			require.ErrorIs(t, err, answer, op)
		}
	}
	if errors.Is(err, writefence.ErrOutcomeUnknown) {
		r.counts.add(op + ": unknown outcome resolved")
		again := r.writeOnce(t, op, w, faultSet{}, c, call)
		require.NotErrorIs(t, again, writefence.ErrOutcomeUnknown, "%s repeated without faults", op)
	}
	return err
}

func (r *modelRun) writeOnce(t *rapid.T, op string, w *modelWriter, faults faultSet, c promise.Call, call func(ctx context.Context, c *promise.Call) (modelRecord, error)) error {
	before := r.read(t)
	ctx := r.ctx
	if w != nil {
		ctx = r.ctxFor(w)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r.plan.arm(faults, cancel)
	var putsBefore int64
	if w != nil && w.wrapper != nil {
		putsBefore = w.wrapper.puts.Load()
	}
	rc := r.callOf(w, c)
	r.hist.Begin(rc)
	want, err := call(ctx, rc)
	r.hist.End(rc, err)
	writes, broke, cancelled := r.plan.written(), r.plan.broke(), ctx.Err() != nil
	r.plan.arm(faultSet{}, nil)
	require.Empty(t, broke, op)
	if faults.denied && writes > 0 {
		require.ErrorIs(t, err, fs.ErrPermission, "%s: a permission refusal is reported as one", op)
		require.NotErrorIs(t, err, writefence.ErrOutcomeUnknown, op)
		require.Equal(t, 1, writes, "%s: a permission refusal is final", op)
	}
	if cancelled {
		require.ErrorIs(t, err, context.Canceled, "%s cancelled after a lost reply: the error matches ctx.Err()", op)
	}
	after := r.read(t)
	changed := before.found != after.found || before.version != after.version

	if w != nil && w.wrapper != nil {
		require.Zero(t, w.wrapper.bypassed.Load(), "%s by %s went past its wrapper's Get and PutIfVersion", op, w.name)
		require.Equal(t, int64(writes), w.wrapper.puts.Load()-putsBefore, "%s by %s: every write goes through the wrapper", op, w.name)
	}
	if r.damaged != "" && op != "settle" && !(r.headSound && (op == "push" && w.wrapper == nil || op == "foreign push")) {
		require.False(t, changed, "%s overwrote the damaged record (%v)", op, err)
	}
	if changed {
		r.landedWrite(t, op, w, want, after, err)
		r.counts.add(op + ": landed")
	}
	switch {
	case err == nil:
		require.False(t, after.corrupt, "%s returned nil over a corrupt record", op)
		require.Equal(t, want, after.rec, "%s returned nil but the store holds %v", op, after.rec)
	case refusal(err):
		require.False(t, changed, "%s was refused (%v) but wrote", op, err)
	}
	var se *writefence.StaleEpochError
	if op != "settle" && refusal(err) && errors.As(err, &se) {
		// (an update whose next is not idempotent is stale over its own
		// landed record, as documented: "update, appending" is exempt)
		require.Equal(t, r.rec.epoch, se.RecordedEpoch, "%s: the stale refusal names the recorded epoch", op)
		if op != opAppend {
			require.NotEqual(t, want, r.rec, "%s: the writer's own landed write was reported stale", op)
		}
	}
	if refusal(err) && errors.Is(err, writefence.ErrCorrupt) {
		require.NotEmpty(t, r.damaged, "%s: ErrCorrupt from a sound record: %v", op, err)
	}
	return err
}

// answer is what a write of want gets from the model's state without
// faults: nil when it lands or already landed, else its refusal. alt is a
// second answer the Fence may give instead: a writer under
// BrandVerifyAlways over a foreign brand is refused with ErrWire whenever
// it writes, which a write on a remembered version does before it learns
// that it is stale.
func (r *modelRun) answer(w *modelWriter, want modelRecord) (answer, alt error) {
	foreign := w.always && r.brandValue != defaults.Identity
	if foreign {
		alt = writefence.ErrWire
	}
	switch {
	case r.damaged != "":
		return writefence.ErrCorrupt, alt
	case r.rec.epoch != 0 && r.rec.foreign != want.foreign:
		return writefence.ErrWire, nil
	case r.rec.epoch != 0 && r.rec == want:
		return nil, nil
	case r.rec.epoch != 0 && want.epoch <= r.rec.epoch:
		return writefence.ErrStaleEpoch, alt
	case foreign:
		return writefence.ErrWire, nil
	}
	return nil, nil
}

// headerRefusal adds to alt the answer a push or a seal may give over a
// damaged record whose header still decodes: the refusal that header
// alone decides (another identity, or an epoch not below want's).
// Replacing the record needs it whole; refusing it, only its header.
func (r *modelRun) headerRefusal(want modelRecord, alt error) error {
	if r.damaged == "" || r.damagedAt == 0 {
		return alt
	}
	var refusal error
	switch {
	case r.rec.foreign != want.foreign:
		refusal = writefence.ErrWire
	case want.epoch <= r.damagedAt:
		refusal = writefence.ErrStaleEpoch
	default:
		return alt
	}
	if alt == nil {
		return refusal
	}
	return errors.Join(alt, refusal)
}

// modelLargePayload is the size of a large payload's filler: past one
// header read (defaults.MaxHeaderSize).
const modelLargePayload = defaults.MaxHeaderSize + 100

func (r *modelRun) push(t *rapid.T) {
	payload := string(rapid.SliceOfN(rapid.Byte(), 0, 12).Draw(t, "payload"))
	if rapid.IntRange(0, 5).Draw(t, "past one header read") == 0 {
		// A record larger than one header read, so that damage to its
		// payload leaves a header that a prefix read decodes.
		payload = strings.Repeat("l", modelLargePayload) + payload
	}
	p := &modelPush{w: r.drawWriter(t), epoch: r.drawEpoch(t), payload: payload}
	r.doPush(t, p, drawFaults(t))
}

// repeatPush runs the last push again, with the same arguments: a push that
// landed is reported landed, never stale.
func (r *modelRun) repeatPush(t *rapid.T) {
	if r.lastPush == nil {
		t.Skip("no push to repeat")
	}
	r.doPush(t, r.lastPush, drawFaults(t))
}

func (r *modelRun) doPush(t *rapid.T, p *modelPush, faults faultSet) {
	r.lastPush = p
	// A push replaces the payload alone: the references stay.
	want := r.successor(p.w.name, p.epoch, p.payload, r.rec.blobs, false, false)
	answer, alt := r.answer(p.w, want)
	alt = r.headerRefusal(want, alt)
	answer, alt = r.overHead(p.w, want, answer, alt)
	r.write(t, "push", p.w, faults, answer, alt, promise.Call{Op: promise.Push, Writer: p.w.name, Epoch: p.epoch, Payload: []byte(p.payload)}, func(ctx context.Context, _ *promise.Call) (modelRecord, error) {
		return want, p.w.fence.Push(ctx, modelPlugin, modelShard, p.w.name, p.epoch, []byte(p.payload))
	})
}

// opAppend names an update whose next appends: not idempotent, so a retry
// over its own landed record is stale, as Update documents.
const opAppend = "update, appending"

// errNextRefused is the error of an update function that refuses.
var errNextRefused = errors.New("next refuses")

func (r *modelRun) update(t *rapid.T) {
	w := r.drawWriter(t)
	epoch := r.drawEpoch(t)
	kind := rapid.IntRange(0, 2).Draw(t, "update kind")
	b := rapid.Byte().Draw(t, "byte")
	next := func(current []byte) ([]byte, error) {
		switch kind {
		case 0:
			return append(current, b), nil // not idempotent
		case 1:
			return []byte{b}, nil // idempotent
		}
		return nil, errNextRefused
	}
	result, nerr := next([]byte(r.rec.payload))
	want := r.successor(w.name, epoch, string(result), r.rec.blobs, false, false)
	if nerr != nil {
		want.payload = "(nothing: next refuses)" // no record can be this update
	}
	answer, alt := r.answer(w, want)
	if nerr != nil && (answer == nil || answer == writefence.ErrWire && !r.rec.foreign) {
		answer, alt = errNextRefused, nil // decided before the write checks the brand
	}
	op := "update"
	if kind == 0 {
		op = opAppend
	}
	r.write(t, op, w, drawFaults(t), answer, alt, promise.Call{Op: promise.Update, Writer: w.name, Epoch: epoch}, func(ctx context.Context, _ *promise.Call) (modelRecord, error) {
		return want, w.fence.Update(ctx, modelPlugin, modelShard, w.name, epoch, next)
	})
}

func (r *modelRun) seal(t *rapid.T) {
	w := r.drawWriter(t)
	epoch := r.drawEpoch(t)
	want := r.successor(w.name, epoch, r.rec.payload, r.rec.blobs, false, true)
	answer, alt := r.answer(w, want)
	alt = r.headerRefusal(want, alt)
	r.write(t, "seal", w, drawFaults(t), answer, alt, promise.Call{Op: promise.Seal, Writer: w.name, Epoch: epoch}, func(ctx context.Context, _ *promise.Call) (modelRecord, error) {
		return want, w.fence.Seal(ctx, modelPlugin, modelShard, w.name, epoch)
	})
}

// damage damages the record from outside the store: a flipped byte, the
// value emptied, or the last damage again.
func (r *modelRun) damage(t *rapid.T) {
	before := r.read(t)
	if !before.found {
		t.Skip("no record to damage")
	}
	f := testserver.Fault{Flip: rapid.IntRange(0, 1<<10).Draw(t, "flip"), Empty: rapid.Bool().Draw(t, "empty")}
	if data, _, err := r.target.Store.Get(context.Background(), r.key); err == nil && len(data) > 0 && rapid.Bool().Draw(t, "in the payload") {
		// A byte near the end, past the header, which then still decodes.
		f.Flip = len(data) - 1 - rapid.IntRange(0, min(len(data)-1, 3)).Draw(t, "from the end")
	}
	if r.lastFault != nil && rapid.Bool().Draw(t, "the same damage again") {
		f = *r.lastFault
	}
	if r.damaged != "" && !f.Empty {
		t.Skip("a second flip could undo the first")
	}
	r.counts.add("damage")
	raw, _, _ := r.target.Store.Get(context.Background(), r.key)
	require.NoError(t, r.target.Damage(context.Background(), r.key, f))
	r.lastFault = &f
	after := r.read(t)
	r.recordDamage(t, r.key, raw, f, after.version)
	require.True(t, after.corrupt, "the damaged record must not decode")
	if after.epoch != 0 {
		require.Equal(t, r.rec.epoch, after.epoch, "the header of a damaged record shows its epoch or none")
	}
	r.damaged, r.damagedAt = after.version, after.epoch
	r.headSound = r.target.headPush() && record.DecidedOnHead(f.Apply(raw))
}

// overHead returns the answer of a Push of want over a record damaged
// under a sound head (headSound): one above the damaged header's epoch
// is decided on that head as if the record were sound, and replaces it.
// A writer behind a wrapper reads through the wrapper's Get alone, whole.
func (r *modelRun) overHead(w *modelWriter, want modelRecord, answer, alt error) (error, error) {
	if r.damaged == "" || !r.headSound || want.epoch <= r.damagedAt || w.wrapper != nil {
		return answer, alt
	}
	damaged := r.damaged
	r.damaged = ""
	defer func() { r.damaged = damaged }()
	return r.answer(w, want)
}

// settle replaces the damaged record as an operator would, with an epoch
// above what can be read or stated (and sometimes not), a floor when no
// header decodes (and sometimes none), at the damage's version (and
// sometimes another).
func (r *modelRun) settle(t *rapid.T) {
	if r.damaged == "" {
		t.Skip("nothing to settle")
	}
	cur := r.read(t)
	s := &writefence.Settlement{Version: cur.version, Writer: modelOperator, Payload: []byte("settled")}
	top := max(r.maxEpoch, cur.epoch)
	s.Epoch = top + uint64(rapid.IntRange(1, 3).Draw(t, "above"))
	if rapid.IntRange(0, 4).Draw(t, "too low") == 0 {
		s.Epoch = max(1, top-min(top, uint64(rapid.IntRange(0, 1).Draw(t, "below"))))
	}
	if cur.epoch == 0 && rapid.IntRange(0, 4).Draw(t, "no floor") > 0 {
		s.Floor = r.maxEpoch // honest: the highest epoch ever granted
	}
	if rapid.IntRange(0, 5).Draw(t, "another version") == 0 {
		s.Version = "not-the-damage"
	}
	s.DropBlobs = rapid.IntRange(0, 3).Draw(t, "drop blobs") == 0
	r.doSettle(t, s)
}

// repeatSettle runs the last settle again: after new damage with the same
// bytes it must be refused, whatever the damage's version. Only a settle
// entered in the settle log is repeated: one refused before it, run again
// later, asserts a floor that may have gone stale, which an operator who
// states the highest epoch ever granted would not.
func (r *modelRun) repeatSettle(t *rapid.T) {
	if r.lastSettle == nil || r.settleLogEpoch(t) < r.lastSettle.Epoch {
		t.Skip("no settle entered in the log to repeat")
	}
	r.doSettle(t, r.lastSettle)
}

func (r *modelRun) doSettle(t *rapid.T, s *writefence.Settlement) {
	r.lastSettle = s
	cur := r.read(t)
	want := modelRecord{epoch: s.Epoch, writer: s.Writer, payload: string(s.Payload)}
	// A settle starts a tenure at its epoch; it keeps the references of a
	// stream's record when they decode, unless told to drop them; with
	// them dropped over a shard of blobs, the record stays a stream's.
	refsLost := cur.corrupt && cur.epoch != 0 && r.rec.stream && !cur.stream
	w := r.writers[0] // the operator's Fence is a writer's: its faults, its brand, its blob store
	fenceBlobs := r.blobsOK && w.wrapper == nil
	switch {
	case s.DropBlobs && (cur.epoch != 0 && r.rec.stream || fenceBlobs):
		want.stream, want.since = true, s.Epoch
	case cur.epoch != 0 && r.rec.stream && cur.stream:
		want.stream, want.since, want.blobs = true, s.Epoch, cur.salvaged
	}
	if !cur.corrupt && cur.rec.epoch == s.Epoch && cur.rec.writer == s.Writer && cur.rec.payload == string(s.Payload) {
		want = cur.rec // this settle, landed: found so, with what it kept
	}
	var answer error
	switch {
	case !cur.found:
		answer = writefence.ErrNotFound
	case !cur.corrupt && cur.rec == want:
	case !cur.corrupt:
		answer = writefence.ErrInvalidArgument
	case cur.version != s.Version:
		answer = writefence.ErrConflict
	case cur.epoch != 0 && cur.foreign:
		r.counts.add("settle over a damaged record of another identity")
		answer = writefence.ErrWire
	case cur.epoch != 0 && s.Epoch <= cur.epoch:
		answer = writefence.ErrStaleEpoch
	case cur.epoch == 0 && s.Floor == 0, s.Epoch <= s.Floor:
		answer = writefence.ErrInvalidArgument
	case !s.DropBlobs && (refsLost || cur.epoch == 0 && fenceBlobs && r.hasBlobs(t)):
		r.counts.add("settle refused: references that cannot be read")
		answer = writefence.ErrInvalidArgument
	case s.Epoch <= r.settleLogEpoch(t):
		answer = writefence.ErrStaleEpoch
	}
	var alt error
	if w.always && r.brandValue != defaults.Identity {
		alt = writefence.ErrWire
	}
	r.write(t, "settle", w, drawFaults(t), answer, alt, promise.Call{Op: promise.Settle, Writer: s.Writer, Epoch: s.Epoch, Payload: s.Payload,
		Version: s.Version, Floor: s.Floor, DropBlobs: s.DropBlobs, NoBlobStore: !fenceBlobs}, func(ctx context.Context, _ *promise.Call) (modelRecord, error) {
		return want, w.fence.Settle(ctx, modelPlugin, modelShard, *s)
	})
}

// hasBlobs reports whether the shard's blob space holds any blob.
func (r *modelRun) hasBlobs(t *rapid.T) bool {
	bs, ok := r.target.Store.(writefence.BlobStore)
	if !ok {
		return false
	}
	found := errors.New("found")
	err := bs.ListBlobs(context.Background(), r.blobSpace(t), func(writefence.BlobInfo) error { return found })
	if errors.Is(err, found) {
		return true
	}
	require.NoError(t, err)
	return false
}

// settleLogEpoch returns the epoch of the settle log's entry, read from
// its record header (format version 2: the epoch at offset 8), or 0.
func (r *modelRun) settleLogEpoch(t *rapid.T) uint64 {
	data, _, err := r.target.Store.Get(context.Background(), r.logKey)
	if errors.Is(err, writefence.ErrNotFound) {
		return 0
	}
	require.NoError(t, err, "the settle log")
	require.GreaterOrEqual(t, len(data), 16, "the settle log holds a record")
	return binary.BigEndian.Uint64(data[8:16])
}

// remove deletes the record from outside the fence: its promises start
// again from nothing, once the operator has told every Fence that saw the
// record to forget it (Fence.Forget), as the way out of ErrEpochRegressed
// says (promise 29; TestRecordLost checks the refusal itself).
func (r *modelRun) remove(t *rapid.T) {
	d, ok := r.target.Store.(writefence.Deleter)
	if !ok {
		t.Skip("the store cannot delete")
	}
	r.counts.add("delete")
	require.NoError(t, d.Delete(context.Background(), r.key))
	r.rec, r.damaged, r.maxEpoch, r.landed = modelRecord{}, "", 0, map[uint64]bool{}
	forget := func(w *modelWriter, f *writefence.Fence) {
		c := r.callOf(w, promise.Call{Op: promise.Forget})
		r.hist.Begin(c)
		r.hist.End(c, f.Forget(modelPlugin, modelShard))
	}
	forget(nil, r.reader)
	forget(nil, r.admin)
	for _, w := range r.writers {
		forget(w, w.fence)
	}
}

func (r *modelRun) latest(t *rapid.T) {
	w := r.drawWriter(t)
	c := r.callOf(w, promise.Call{Op: promise.Latest})
	r.hist.Begin(c)
	e, wr, p, err := w.fence.Latest(r.ctx, modelPlugin, modelShard)
	if err == nil {
		c.Read, c.ReadBody = &record.Header{Epoch: e, Writer: wr}, record.Body{Payload: p}
	}
	r.hist.End(c, err)
	switch {
	case w.always && r.brandValue != defaults.Identity:
		require.ErrorIs(t, err, writefence.ErrWire)
	case r.damaged != "":
		require.ErrorIs(t, err, writefence.ErrCorrupt)
	case r.rec.foreign:
		require.ErrorIs(t, err, writefence.ErrWire)
	case false:
		require.ErrorIs(t, err, writefence.ErrCorrupt)
	case r.rec.epoch == 0:
		require.ErrorIs(t, err, writefence.ErrNotFound)
	default:
		require.NoError(t, err)
		require.Equal(t, r.rec, modelRecord{epoch: e, writer: wr, payload: string(p), blobs: r.rec.blobs, since: r.rec.since, stream: r.rec.stream})
	}
}

// foreignPush pushes as a program of another wire identity would: over a
// record of ours it is refused, and over its own record ours are.
func (r *modelRun) foreignPush(t *rapid.T) {
	f := &writefence.Fence{Store: r.target.Store, Prefix: r.prefix, Identity: foreignIdentity, Observer: r.hist.Observe}
	want := r.successor("alien", r.drawEpoch(t), "another format", "", false, false)
	want.foreign = true
	var answer error
	// Over damage under a sound head, a push above its epoch is decided
	// on that head, as over the record it was.
	overHead := r.damaged != "" && r.headSound && want.epoch > r.damagedAt
	switch {
	case r.damaged != "" && !overHead:
		answer = writefence.ErrCorrupt
	case r.rec.epoch != 0 && !r.rec.foreign:
		answer = writefence.ErrWire
	case r.rec.epoch != 0 && r.rec == want:
	case r.rec.epoch != 0 && want.epoch <= r.rec.epoch:
		answer = writefence.ErrStaleEpoch
	}
	// A Fence of its own each time, and a process of its own in the
	// history: it saw nothing before.
	r.aliens++
	r.write(t, "foreign push", nil, faultSet{}, answer, r.headerRefusal(want, nil), promise.Call{Op: promise.Push, Proc: fmt.Sprintf("alien#%d", r.aliens), Identity: foreignIdentity,
		Writer: want.writer, Epoch: want.epoch, Payload: []byte(want.payload)}, func(ctx context.Context, _ *promise.Call) (modelRecord, error) {
		return want, f.Push(ctx, modelPlugin, modelShard, want.writer, want.epoch, []byte(want.payload))
	})
}

// claim brands the store, with the Fence's identity or another.
func (r *modelRun) claim(t *rapid.T) {
	identity := rapid.SampledFrom([]string{defaults.Identity, foreignIdentity}).Draw(t, "identity")
	r.counts.add("brand claim")
	f := &writefence.Fence{Store: r.target.Store, Prefix: r.prefix, Identity: identity, Observer: r.hist.Observe}
	c := r.callOf(nil, promise.Call{Op: promise.Claim, Identity: identity})
	r.hist.Begin(c)
	claimed, err := f.ClaimBrand(r.ctx)
	c.Claimed = claimed
	if we := (*writefence.WireError)(nil); errors.As(err, &we) && !we.Absent {
		c.Found = &we.Found
	}
	r.hist.End(c, err)
	switch r.brandValue {
	case "":
		require.NoError(t, err)
		require.True(t, claimed)
		r.brandValue = identity
	case identity:
		require.NoError(t, err)
		require.False(t, claimed)
	default:
		require.ErrorIs(t, err, writefence.ErrWire)
	}
	r.checkBrand(t)
}

// rebrand changes the brand from outside the Fence, as a migration would,
// or removes it.
func (r *modelRun) rebrand(t *rapid.T) {
	value := rapid.SampledFrom([]string{"", defaults.Identity, foreignIdentity}).Draw(t, "brand")
	r.counts.add("rebrand")
	ctx := context.Background()
	_, v, err := r.target.Store.Get(ctx, r.brand)
	if errors.Is(err, writefence.ErrNotFound) {
		v, err = "", nil
	}
	require.NoError(t, err)
	switch {
	case value == "":
		d, ok := r.target.Store.(writefence.Deleter)
		if !ok {
			t.Skip("the store cannot delete")
		}
		require.NoError(t, d.Delete(ctx, r.brand))
	default:
		_, err = r.target.Store.PutIfVersion(ctx, r.brand, []byte(value), v)
		require.NoError(t, err)
	}
	r.brandValue = value
	r.checkBrand(t)
}

func (r *modelRun) checkBrand(t *rapid.T) {
	data, _, err := r.target.Store.Get(context.Background(), r.brand)
	if r.brandValue == "" {
		require.ErrorIs(t, err, writefence.ErrNotFound, "the brand key")
		return
	}
	require.NoError(t, err, "the brand key")
	require.Equal(t, r.brandValue, string(data), "the brand key")
}

// storedLease is the lease record as the store holds it, decoded from its
// documented layout; ok is false when it is absent or does not decode.
type storedLease struct {
	found, ok   bool
	version     string
	holder      string
	term        uint64
	incarnation string // the Lease value's, in format version 2; "" in 1
}

func (r *modelRun) readLease(t *rapid.T) storedLease {
	data, v, err := r.target.Store.Get(context.Background(), r.lease)
	var ce *writefence.CorruptError
	switch {
	case errors.Is(err, writefence.ErrNotFound):
		return storedLease{}
	case errors.As(err, &ce):
		return storedLease{found: true, version: ce.Version}
	}
	require.NoError(t, err, "the lease record")
	l := storedLease{found: true, version: v}
	// The lease record's format, read here independently of the package:
	// version 1 has the holder at 23, version 2 a 16-byte incarnation
	// there and the holder at 39.
	if len(data) >= 27 && string(data[:4]) == "WFL\x00" && (data[4] == 1 || data[4] == 2) {
		at := 23
		if data[4] == 2 {
			at = 39
		}
		h := int(binary.BigEndian.Uint16(data[5:]))
		end := at + h
		if len(data) == end+4 && binary.BigEndian.Uint32(data[end:]) == crc32.Checksum(data[:end], crc32.MakeTable(crc32.Castagnoli)) {
			l.term, l.holder, l.incarnation = binary.BigEndian.Uint64(data[7:]), string(data[at:end]), string(data[23:at])
			l.ok = h > 0 && l.term > 0 && int64(binary.BigEndian.Uint64(data[15:])) >= 0
		}
	}
	return l
}

// leaseStep runs one call of a writer's Lease and checks the record.
func (r *modelRun) leaseStep(t *rapid.T, op string, w *modelWriter, c promise.Call, call func(ctx context.Context) (uint64, error)) {
	r.leaseStepAmid(t, op, w, nil, c, call)
}

// leaseStepAmid is leaseStep with amid, when set, run between the call's
// decision and its first write.
func (r *modelRun) leaseStepAmid(t *rapid.T, op string, w *modelWriter, amid func(), c promise.Call, call func(ctx context.Context) (uint64, error)) {
	r.counts.add(op)
	before := r.readLease(t)
	faults := drawFaults(t)
	ctx, cancel := context.WithCancel(r.ctxFor(w))
	defer cancel()
	r.plan.arm(faults, cancel)
	if amid != nil {
		// What the nested step wrote is checked as a step of its own and
		// is the baseline of this one: a refusal must not write over it.
		r.plan.before = func() {
			amid()
			between := r.readLease(t)
			if r.leaseBad == "" {
				r.noteLease(t, op+", amid", w, before, between)
			}
			before = between
		}
	}
	rc := r.callOf(w, c)
	rc.LeaseName, rc.Holder = "model", w.name
	r.hist.Begin(rc)
	term, err := call(ctx)
	rc.Term = term
	r.hist.End(rc, err)
	broke := r.plan.broke()
	r.plan.arm(faultSet{}, nil)
	require.Empty(t, broke, op)
	after := r.readLease(t)
	if w.wrapper != nil {
		require.Zero(t, w.wrapper.bypassed.Load(), "%s by %s went past its wrapper", op, w.name)
	}
	if r.leaseBad != "" {
		require.Equal(t, r.leaseBad, after.version, "%s overwrote the damaged lease record (%v)", op, err)
		if faults.quiet() {
			// Refused before it reads (not held, a clock out of range, a
			// foreign brand on a remembered version), or for the damage.
			require.True(t, refusal(err), "%s over the damaged lease record: %v", op, err)
		}
		return
	}
	r.noteLease(t, op, w, before, after)
	if err == nil && strings.HasPrefix(op, "lease acquire") {
		require.Equal(t, storedLease{found: true, ok: true, version: after.version, holder: w.name, term: term, incarnation: after.incarnation}, after, "%s returned term %d", op, term)
	}
	if refusal(err) {
		require.Equal(t, before.version, after.version, "%s was refused (%v) but wrote", op, err)
	}
}

// noteLease checks the lease record after a step by w that found before,
// and records its term and the Lease value that wrote it.
func (r *modelRun) noteLease(t *rapid.T, op string, w *modelWriter, before, after storedLease) {
	if !after.found {
		return
	}
	require.True(t, after.ok, "%s left a lease record that does not decode", op)
	if inc, seen := r.termLease[after.term]; seen {
		require.Equal(t, inc, after.incarnation, "%s: term %d is written by two Lease values", op, after.term)
	}
	r.termLease[after.term] = after.incarnation
	require.GreaterOrEqual(t, after.term, r.leaseTerm, "%s: the lease's term went down", op)
	if after.term > r.leaseTerm || (after.term == r.leaseTerm && before.version != after.version && after.holder != before.holder) {
		holder, seen := r.terms[after.term]
		require.True(t, !seen || r.writers[holder] == w, "%s: term %d acquired by %s and by %s", op, after.term, r.writers[holder].name, w.name)
		r.terms[after.term] = r.indexOf(w)
	}
	r.leaseTerm = after.term
}

func (r *modelRun) indexOf(w *modelWriter) int {
	for i, x := range r.writers {
		if x == w {
			return i
		}
	}
	panic("not a writer")
}

func (r *modelRun) acquire(t *rapid.T) {
	w := r.drawWriter(t)
	l := w.lease
	var amid func()
	if old := w.old; old != nil && rapid.Bool().Draw(t, "the replaced value acquires meanwhile") {
		// The two Lease values of one Holder race: the replaced one
		// acquires whole between the new one's decision and its write.
		amid = func() {
			r.counts.add("lease acquire by the replaced value, amid")
			r.plan.aside(func() {
				c := r.callOf(w, promise.Call{Op: promise.Acquire, Lease: leaseLabel(w, old), LeaseName: "model", Holder: w.name})
				r.hist.Begin(c)
				term, err := old.Acquire(r.ctx)
				c.Term = term
				r.hist.End(c, err)
				if err == nil {
					r.acquired(t, old, term)
				}
			})
		}
	}
	r.leaseStepAmid(t, "lease acquire", w, amid, promise.Call{Op: promise.Acquire, Lease: leaseLabel(w, l)}, func(ctx context.Context) (uint64, error) {
		term, err := l.Acquire(ctx)
		if err == nil {
			r.acquired(t, l, term)
		}
		return term, err
	})
}

// acquired records that the Lease value l acquired term, which no other
// Lease value may have acquired.
func (r *modelRun) acquired(t *rapid.T, l *writefence.Lease, term uint64) {
	if other, ok := r.acquiredBy[term]; ok {
		require.Same(t, other, l, "term %d acquired by two Lease values", term)
	}
	r.acquiredBy[term] = l
}

func (r *modelRun) renew(t *rapid.T) {
	w := r.drawWriter(t)
	r.leaseStep(t, "lease renew", w, promise.Call{Op: promise.Renew, Lease: leaseLabel(w, w.lease)}, func(ctx context.Context) (uint64, error) { return 0, w.lease.Renew(ctx) })
}

func (r *modelRun) release(t *rapid.T) {
	w := r.drawWriter(t)
	r.leaseStep(t, "lease release", w, promise.Call{Op: promise.Release, Lease: leaseLabel(w, w.lease)}, func(ctx context.Context) (uint64, error) { return 0, w.lease.Release(ctx) })
}

// restartLease replaces a writer's Lease value with a fresh one of the same
// Holder, as a restarted process would make, and keeps the old one
// running, as a process that did not die would.
func (r *modelRun) restartLease(t *rapid.T) {
	w := r.drawWriter(t)
	r.counts.add("lease restart")
	w.old = w.lease
	w.lease = &writefence.Lease{Fence: w.fence, Name: "model", Holder: w.name, TTL: 10 * time.Second, Clock: r.clock.Now}
}

// oldLease runs the replaced Lease value of a writer: an acquisition or a
// renewal by the incarnation a restart left running.
func (r *modelRun) oldLease(t *rapid.T) {
	w := r.drawWriter(t)
	if w.old == nil {
		t.Skip("no replaced Lease value")
	}
	old := w.old
	if rapid.Bool().Draw(t, "acquire") {
		r.leaseStep(t, "lease acquire by the replaced value", w, promise.Call{Op: promise.Acquire, Lease: leaseLabel(w, old)}, func(ctx context.Context) (uint64, error) {
			term, err := old.Acquire(ctx)
			if err == nil {
				r.acquired(t, old, term)
			}
			return term, err
		})
		return
	}
	r.leaseStep(t, "lease renew by the replaced value", w, promise.Call{Op: promise.Renew, Lease: leaseLabel(w, old)}, func(ctx context.Context) (uint64, error) { return 0, old.Renew(ctx) })
}

func (r *modelRun) advance(t *rapid.T) {
	r.clock.Advance(time.Duration(rapid.IntRange(1, 15).Draw(t, "seconds")) * time.Second)
}

// badClock runs an Acquire with the clock before 1970 or after 2262, which a
// lease record cannot carry: it must be refused before anything is
// written.
func (r *modelRun) badClock(t *rapid.T) {
	w := r.drawWriter(t)
	saved := r.clock.Now()
	bad := time.Date(1969, 12, 31, 23, 59, 0, 0, time.UTC)
	if rapid.Bool().Draw(t, "after 2262") {
		bad = time.Date(2262, 4, 12, 0, 0, 0, 0, time.UTC)
	}
	r.clock.Set(bad)
	defer r.clock.Set(saved)
	r.leaseStep(t, "lease acquire with a clock out of range", w, promise.Call{Op: promise.Acquire, Lease: leaseLabel(w, w.lease)}, w.lease.Acquire)
}

// leasePush pushes at an epoch the writer's Lease hands out, when it does.
func (r *modelRun) leasePush(t *rapid.T) {
	w := r.drawWriter(t)
	c := r.callOf(w, promise.Call{Op: promise.Epoch, Lease: leaseLabel(w, w.lease), LeaseName: "model", Holder: w.name})
	r.hist.Begin(c)
	epoch, err := w.lease.Epoch(r.ctx, modelPlugin, modelShard)
	c.Got = epoch
	r.hist.End(c, err)
	if err != nil {
		t.Skip("the lease hands out no epoch")
	}
	r.doPush(t, &modelPush{w: w, epoch: epoch, payload: "under the lease"}, drawFaults(t))
}

// damageLease damages the lease record: no Lease may overwrite it.
func (r *modelRun) damageLease(t *rapid.T) {
	if !r.readLease(t).found || r.leaseBad != "" {
		t.Skip("no sound lease record")
	}
	r.counts.add("lease damage")
	raw, _, _ := r.target.Store.Get(context.Background(), r.lease)
	f := testserver.Fault{Flip: rapid.IntRange(0, 64).Draw(t, "flip")}
	require.NoError(t, r.target.Damage(context.Background(), r.lease, f))
	l := r.readLease(t)
	r.recordDamage(t, r.lease, raw, f, l.version)
	require.False(t, l.ok, "the damaged lease record must not decode")
	r.leaseBad = l.version
}

// check is the invariant after every step: the store holds what the model
// says, byte for byte in the damaged case.
func (r *modelRun) check(t *rapid.T) {
	got := r.read(t)
	switch {
	case r.damaged != "":
		require.True(t, got.corrupt, "the damage is gone without a settle")
		require.Equal(t, r.damaged, got.version, "the damaged record was overwritten")
	case r.rec.epoch == 0:
		require.False(t, got.found, "a record appeared from nowhere: %v", got.rec)
	default:
		require.False(t, got.corrupt)
		require.Equal(t, r.rec, got.rec, "the store and the model disagree")
		r.checkReferenced(t)
	}
	r.horizon = time.Time{}
	if info, err := r.reader.Inspect(context.Background(), modelPlugin, modelShard); err == nil {
		r.horizon = info.Horizon
	}
	if found := r.hist.check(); len(found) > 0 {
		t.Fatalf("the promise checker: %v", found)
	}
}

// checkReferenced checks that no blob the recorded manifest references is
// missing.
func (r *modelRun) checkReferenced(t *rapid.T) {
	if r.rec.blobs == "" || r.rec.foreign {
		return
	}
	bs := r.target.Store.(writefence.BlobStore)
	space := r.blobSpace(t)
	for _, name := range strings.Split(r.rec.blobs, ",") {
		info, err := bs.StatBlob(context.Background(), space+name)
		require.NoError(t, err, "the manifest references blob %s: it must exist", name)
		require.Equal(t, r.blobs[name].ref.Size, info.Size, "blob %s", name)
		require.False(t, r.blobs[name].gone, "a referenced blob was collected")
	}
}

func (r *modelRun) blobSpace(t *rapid.T) string {
	space, err := keys.Blobs(r.prefix, modelPlugin, modelShard)
	require.NoError(t, err)
	return space
}

// referenced reports whether the model's manifest references name.
func (r *modelRun) referenced(name string) bool {
	return !r.rec.foreign && r.rec.blobs != "" && slices.Contains(strings.Split(r.rec.blobs, ","), name)
}

// putBlob puts a blob as a writer, at an epoch near the record's.
func (r *modelRun) putBlob(t *rapid.T) {
	if !r.blobsOK {
		t.Skip("the store holds no blobs")
	}
	w := r.drawWriter(t)
	epoch := r.drawEpoch(t)
	if rapid.Bool().Draw(t, "above the record") {
		epoch = max(r.maxEpoch, r.rec.epoch) + uint64(rapid.IntRange(1, 2).Draw(t, "ahead"))
	}
	data := string(rapid.SliceOfN(rapid.Byte(), 0, 64).Draw(t, "blob"))
	r.counts.add("blob")
	c := r.callOf(w, promise.Call{Op: promise.PutBlob, Writer: w.name, Epoch: epoch, Payload: []byte(data)})
	r.hist.Begin(c)
	ref, err := w.fence.PutBlob(r.ctx, modelPlugin, modelShard, w.name, epoch, strings.NewReader(data))
	c.Ref = ref
	r.hist.End(c, err)
	if w.wrapper != nil {
		require.ErrorIs(t, err, errors.ErrUnsupported, "a wrapper declares no BlobStore")
		return
	}
	if w.always && r.brandValue != defaults.Identity {
		require.ErrorIs(t, err, writefence.ErrWire, "a blob is written only under the Fence's brand")
		return
	}
	require.NoError(t, err)
	require.Equal(t, int64(len(data)), ref.Size)
	b := &modelBlob{ref: ref, writer: w.name, epoch: epoch, data: data, at: time.Now()}
	info, err := r.target.Store.(writefence.BlobStore).StatBlob(context.Background(), r.blobSpace(t)+ref.Name)
	require.NoError(t, err)
	b.created = info.Modified
	r.blobs[ref.Name] = b
	r.blobNames = append(r.blobNames, ref.Name)
}

// commit commits a manifest that adds some of a writer's blobs (now and
// then another writer's, or a collected one) and may drop one, with a
// collection running in the middle of the commit now and then: between its
// decision and its write.
func (r *modelRun) commit(t *rapid.T) {
	if !r.blobsOK || len(r.blobNames) == 0 {
		t.Skip("no blobs")
	}
	var current []string
	if r.rec.blobs != "" && !r.rec.foreign {
		current = strings.Split(r.rec.blobs, ",")
	}
	w := r.drawWriter(t)
	var owners []*modelWriter
	for _, x := range r.writers {
		for _, b := range r.blobs {
			if b.writer == x.name && !b.gone && !slices.Contains(current, b.ref.Name) {
				owners = append(owners, x)
				break
			}
		}
	}
	if len(owners) > 0 && rapid.IntRange(0, 3).Draw(t, "an owner commits") > 0 {
		w = rapid.SampledFrom(owners).Draw(t, "owner")
	}
	epoch := r.drawEpoch(t)
	// Mostly the writer's own blobs that are not referenced yet; now and
	// then any blob at all.
	var own []string
	for _, name := range r.blobNames {
		if b := r.blobs[name]; b.writer == w.name && !b.gone && !slices.Contains(current, name) {
			own = append(own, name)
		}
	}
	var added []*modelBlob
	// Two or more of one epoch are checked by a listing where the store
	// declares ConsistentBlobLister, one by StatBlob.
	for range rapid.IntRange(1, 4).Draw(t, "blobs added") {
		pool := own
		if len(pool) == 0 || rapid.IntRange(0, 3).Draw(t, "any blob") == 0 {
			pool = r.blobNames
		}
		b := r.blobs[rapid.SampledFrom(pool).Draw(t, "blob")]
		if !slices.Contains(current, b.ref.Name) && !slices.ContainsFunc(added, func(x *modelBlob) bool { return x == b }) {
			added = append(added, b)
		}
	}
	if rapid.Bool().Draw(t, "above the blobs") {
		for _, b := range added {
			epoch = max(epoch, b.epoch)
		}
	}
	keep := current
	if len(current) > 0 && rapid.Bool().Draw(t, "drop one") {
		keep = current[1:]
	}
	names := slices.Clone(keep)
	for _, b := range added {
		names = append(names, b.ref.Name)
	}
	want := r.successor(w.name, epoch, r.rec.payload, strings.Join(names, ","), true, false)
	answer, alt := r.answer(w, want)
	if answer == nil || answer == writefence.ErrWire && !r.rec.foreign {
		// Decided before the write checks the brand.
		if refused := r.refusedBlob(w, epoch, want.since, added); refused != nil {
			answer, alt = refused, nil
		}
	}
	next := func(m writefence.Manifest) (writefence.Manifest, error) {
		var refs []writefence.BlobRef
		for _, ref := range m.Blobs {
			if slices.Contains(keep, ref.Name) {
				refs = append(refs, ref)
			}
		}
		for _, b := range added {
			refs = append(refs, b.ref)
		}
		return writefence.Manifest{Payload: m.Payload, Blobs: refs}, nil
	}
	faults := drawFaults(t)
	if w.wrapper == nil && rapid.IntRange(0, 2).Draw(t, "a collection meanwhile") == 0 {
		r.plan.before = func() {
			// Between the commit's decision and its write: only the
			// clock-free rule may delete, and never a blob the commit adds.
			r.collectAndCheck(t, 24*time.Hour, true)
		}
	}
	listings := r.hist.listings.Load()
	r.write(t, "commit", w, faults, answer, alt, promise.Call{Op: promise.Commit, Writer: w.name, Epoch: epoch}, func(ctx context.Context, c *promise.Call) (modelRecord, error) {
		return want, w.fence.Commit(ctx, modelPlugin, modelShard, w.name, epoch, func(m writefence.Manifest) (writefence.Manifest, error) {
			// The history records what the manifest referenced and what
			// it then references, as the Fence last decided.
			out, err := next(m)
			c.Current, c.Blobs = slices.Clone(m.Blobs), slices.Clone(out.Blobs)
			return out, err
		})
	})
	if r.hist.listings.Load() != listings {
		r.counts.add("commit: blobs checked by a listing")
	}
}

// refusedBlob is the error a commit by w at epoch whose tenure begins at
// since gets for the blobs it adds, or nil.
func (r *modelRun) refusedBlob(w *modelWriter, epoch, since uint64, added []*modelBlob) error {
	for _, b := range added {
		if b.writer != w.name || b.epoch > epoch || b.epoch < since {
			return writefence.ErrInvalidArgument
		}
	}
	for _, b := range added {
		switch {
		case w.wrapper != nil:
			return errors.ErrUnsupported
		case b.gone:
			return writefence.ErrNotFound
		case !r.horizon.IsZero() && r.createdAt(b).Before(r.horizon):
			return writefence.ErrNotFound // garbage behind the collection horizon
		}
	}
	return nil
}

// createdAt is when the store said blob b was created.
func (r *modelRun) createdAt(b *modelBlob) time.Time { return b.created }

// collect runs a collection with a grace long enough that only blobs that
// can never be committed go, or with none.
func (r *modelRun) collect(t *rapid.T) {
	if !r.blobsOK {
		t.Skip("the store holds no blobs")
	}
	grace := rapid.SampledFrom([]time.Duration{24 * time.Hour, time.Nanosecond}).Draw(t, "grace")
	r.collectAndCheck(t, grace, false)
}

// collectAndCheck collects and checks that exactly the blobs the rule
// names were deleted: with a long grace, those no manifest can reference;
// with none, every unreferenced one. amid says the collection runs inside
// another step, between its decision and its write.
func (r *modelRun) collectAndCheck(t *rapid.T, grace time.Duration, amid bool) {
	r.counts.add("collect")
	// The creation times of the blobs the collection may delete, taken
	// before it does.
	created := map[string]time.Time{}
	if !r.horizon.IsZero() {
		for _, name := range r.blobNames {
			if b := r.blobs[name]; !b.gone && !r.referenced(name) {
				created[name] = r.createdAt(b)
			}
		}
	}
	c := r.callOf(nil, promise.Call{Op: promise.Collect})
	r.hist.Begin(c)
	report, err := r.admin.Collect(context.Background(), modelPlugin, modelShard, writefence.GCOptions{Grace: grace})
	for _, b := range report.Deleted {
		c.Deleted = append(c.Deleted, b.Key)
	}
	r.hist.End(c, err)
	// Whatever the collection returned, what it deleted is gone once this
	// step is checked.
	defer func() {
		for _, d := range report.Deleted {
			if b := r.blobs[strings.TrimPrefix(d.Key, r.blobSpace(t))]; b != nil {
				b.gone = true
			}
		}
	}()
	switch {
	case r.damaged != "" && !amid:
		require.ErrorIs(t, err, writefence.ErrCorrupt, "a collection over a damaged manifest fails closed")
		return
	case r.rec.foreign && !amid:
		require.ErrorIs(t, err, writefence.ErrWire)
		return
	case r.rec.epoch == 0 && !amid:
		require.ErrorIs(t, err, writefence.ErrNotFound, "a collection of a shard with no record deletes nothing")
		require.Empty(t, report.Deleted)
		return
	case err != nil && amid:
		return // a damaged or foreign record refuses the commit anyway
	}
	require.NoError(t, err)
	// With no grace, an unreferenced blob goes once the store's clock shows
	// it older than zero: where the store's times have a resolution of
	// seconds (S3), a blob uploaded within two of them may not be yet, so
	// it may go or stay.
	var want, maybe, got []string
	for _, name := range r.blobNames {
		b := r.blobs[name]
		floor := r.rec.since
		if !r.rec.stream {
			floor = r.rec.epoch // a plain record's, as Commit takes it
		}
		committable := r.rec.epoch == 0 || !(b.epoch < floor || b.writer != r.rec.writer && b.epoch <= r.rec.epoch)
		switch {
		case b.gone || r.referenced(name):
		case !committable, !r.horizon.IsZero() && created[name].Before(r.horizon):
			want = append(want, name)
		case !r.rec.stream:
			// A plain record carries no horizon: a blob its writer may yet
			// commit is kept whatever its age.
		case grace < time.Second && time.Since(b.at) < 2*r.target.ClockStep:
			maybe = append(maybe, name)
		case grace < time.Second:
			want = append(want, name)
		}
	}
	if info, err := r.reader.Inspect(context.Background(), modelPlugin, modelShard); err == nil && !r.rec.stream {
		require.False(t, info.Stream, "Collect wrote a horizon over a plain record, making it a stream's")
	}
	space := r.blobSpace(t)
	for _, d := range report.Deleted {
		name := strings.TrimPrefix(d.Key, space)
		r.blobs[name].gone = true
		if !slices.Contains(maybe, name) {
			got = append(got, name)
		}
	}
	require.ElementsMatch(t, want, got, "the blobs a collection deletes (%d young ones may go or stay)", len(maybe))
}

// openBlob reads a blob through the record, as a reader would.
func (r *modelRun) openBlob(t *rapid.T) {
	if !r.blobsOK || len(r.blobNames) == 0 {
		t.Skip("no blobs")
	}
	name := rapid.SampledFrom(r.blobNames).Draw(t, "blob")
	r.counts.add("open blob")
	c := r.callOf(nil, promise.Call{Op: promise.Open, Name: name})
	r.hist.Begin(c)
	rc, _, err := r.reader.OpenBlob(context.Background(), modelPlugin, modelShard, name)
	if err == nil {
		data, rerr := io.ReadAll(rc)
		rc.Close()
		if rerr != nil {
			err = rerr
		}
		c.Bytes = data
		rc = io.NopCloser(bytes.NewReader(data))
	}
	r.hist.End(c, err)
	switch {
	case r.damaged != "":
		require.ErrorIs(t, err, writefence.ErrCorrupt)
	case r.rec.foreign:
		require.ErrorIs(t, err, writefence.ErrWire)
	case !r.referenced(name):
		require.ErrorIs(t, err, writefence.ErrNotFound, "a blob no admitted commit references is never read")
	default:
		require.NoError(t, err)
		defer rc.Close()
		data, err := io.ReadAll(rc)
		require.NoError(t, err)
		require.Equal(t, r.blobs[name].data, string(data), "the bytes read are the blob's")
	}
}

// actions are the steps a run draws from, uniformly by name: the writes
// of a record and the damage they must survive have more names, so that
// sequences such as push, damage, settle, push, the same damage, the same
// settle come up.
func (r *modelRun) actions() map[string]func(*rapid.T) {
	return map[string]func(*rapid.T){
		"push": r.push, "push ": r.push, "push  ": r.push, "repeatPush": r.repeatPush,
		"update": r.update, "update ": r.update, "seal": r.seal,
		"damage": r.damage, "damage ": r.damage, "settle": r.settle, "settle ": r.settle, "repeatSettle": r.repeatSettle,
		"delete": r.remove, "latest": r.latest, "claim": r.claim, "rebrand": r.rebrand,
		"acquire": r.acquire, "acquire ": r.acquire, "renew": r.renew, "release": r.release, "advance": r.advance,
		"restartLease": r.restartLease, "oldLease": r.oldLease, "oldLease ": r.oldLease,
		"leasePush": r.leasePush, "leasePush ": r.leasePush, "damageLease": r.damageLease, "badClock": r.badClock,
		"foreignPush": r.foreignPush,
		"putBlob":     r.putBlob, "putBlob ": r.putBlob, "putBlob  ": r.putBlob,
		"commit": r.commit, "commit ": r.commit, "commit  ": r.commit, "commit   ": r.commit,
		"collect": r.collect, "openBlob": r.openBlob,
		"": r.check,
	}
}

// modelAnswers says whether the model also checks each write's answer
// against the one it predicts, besides the invariants;
// WRITEFENCE_MODEL_ANSWERS=0 checks the invariants alone, to see which
// break when a fix is taken out.
var modelAnswers = os.Getenv("WRITEFENCE_MODEL_ANSWERS") != "0"

// Fixed seeds for CI: from modelSeed, ChecksUnit checks on each
// store of the unit tier (TestModel) and ChecksLocal on each server.
const (
	modelSeed   = 20261201
	ChecksUnit  = 150
	ChecksLocal = 40
	modelSteps  = 60
)

// Run runs the model on the target open returns, with rapid's seed,
// checks and steps as SetFlags left them. It reads those flags and
// never sets them, so the model runs on the servers in parallel.
func Run(t *testing.T, open func(t *testing.T) Target) {
	target := open(t)
	if target.Prefix == "" {
		target.Prefix = testserver.UniqueName(t) + "/"
	}
	t.Logf("rapid: seed %s, %s checks of %s steps", flag.Lookup("rapid.seed").Value, flag.Lookup("rapid.checks").Value, flag.Lookup("rapid.steps").Value)
	var counts modelCounts
	rapid.Check(t, func(rt *rapid.T) {
		r := newModelRun(rt, target, &counts)
		rt.Repeat(r.actions())
	})
	t.Logf("%s: %v", target.Name, counts.steps)
}

// commandLineFlags are the flags the command line set, read once before
// any test sets a flag itself.
var commandLineFlags = sync.OnceValue(func() map[string]bool {
	m := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { m[f.Name] = true })
	return m
})

// SetFlags sets rapid's seed, checks and steps for the fixed CI run
// (checks as given), or, when WRITEFENCE_LONG is set, for a long run from
// a random seed; a flag the command line set is left alone. It returns
// what restores them. The flags are the process's: TestMain sets them
// before any test runs, and only a test that is never parallel sets them
// again.
func SetFlags(checks int) (restore func(), err error) {
	explicit := commandLineFlags()
	values := map[string]string{"rapid.seed": strconv.Itoa(modelSeed), "rapid.checks": strconv.Itoa(checks), "rapid.steps": strconv.Itoa(modelSteps)}
	if os.Getenv("WRITEFENCE_LONG") != "" {
		values = map[string]string{"rapid.checks": strconv.Itoa(20 * checks), "rapid.steps": strconv.Itoa(2 * modelSteps)}
	}
	old := map[string]string{}
	for name, v := range values {
		if explicit[name] {
			continue
		}
		old[name] = flag.Lookup(name).Value.String()
		if err := flag.Set(name, v); err != nil {
			return nil, err
		}
	}
	return func() {
		for name, v := range old {
			_ = flag.Set(name, v)
		}
	}, nil
}

// Main is the TestMain of a package that runs the model on its store: it
// sets rapid's flags for ChecksLocal checks once, before any test runs in
// parallel, runs the tests, and fails them if a goroutine outlives them.
func Main(m *testing.M) {
	flag.Parse()
	if _, err := SetFlags(ChecksLocal); err != nil {
		fmt.Fprintln(os.Stderr, "rapid's flags:", err)
		os.Exit(2)
	}
	goleak.VerifyTestMain(m, testserver.LeakOptions()...)
}
