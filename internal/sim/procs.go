package sim

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/hook"
	"github.com/writefence/writefence/internal/keys"
	"github.com/writefence/writefence/internal/promise"
	"github.com/writefence/writefence/internal/record"
)

// proc is one process of the deployment: one Fence (its own version
// cache), its Lease when it writes, and the contexts it ships under.
type proc struct {
	w      *World
	name   string // unique in the world, e.g. "w1", "w1#2" after a restart
	kind   string // "writer", "collector", "reader", "operator"
	holder string // a writer's holder name, shared by its restarts

	ctx    context.Context
	cancel context.CancelFunc
	ended  chan struct{}
	rng    *rand.Rand // the process's own draws, in its own order
	// more draws the steps added since, apart from rng, so that a seed's
	// deployment is the same but for them.
	more *rand.Rand
	// setback draws, apart from rng, when a writer's record is set back
	// under its check (setBackUnder), so that the rest of a seed's
	// deployment draws as it did before the step was added.
	setback *rand.Rand

	fence      *writefence.Fence
	lease      *writefence.Lease
	leaseLabel string
	skew       time.Duration // how far the lease's clock runs ahead of the world's

	// A writer's TermSource over its lease's term, when the Hold ships
	// through one rather than the Lease's Epoch, and its label.
	source      *writefence.TermSource
	sourceLabel string
	sources     int // TermSources made so far, for their labels

	// Guarded by w.mu.
	seq         int
	calls       map[string]int // store calls by call, kind and key (request.nth)
	pausedUntil time.Time
	tracked     []tracked

	// The operator's last settle of damage that landed, which it now
	// and then runs again over new damage.
	lastSettle *writefence.Settlement

	// A blob a writer put and held back from its batch's commit, which
	// its next commit adds: it sorts before the blobs that commit
	// referenced, where the listing beside the next commit's read starts.
	held []writefence.BlobRef
}

// tracked is a context the process ships under, whose state each call
// records before and after it.
type tracked struct {
	id               int // unique in the world, given by track
	kind, lease, key string
	ctx              context.Context
}

func (p *proc) paused(now time.Time) bool { return now.Before(p.pausedUntil) }

func (p *proc) exited() bool {
	select {
	case <-p.ended:
		return true
	default:
		return false
	}
}

// contexts is the state of p's tracked contexts. The caller holds w.mu.
func (p *proc) contexts() []promise.Context {
	var out []promise.Context
	for _, t := range p.tracked {
		c := promise.Context{ID: t.id, Kind: t.kind, Lease: t.lease, Key: t.key}
		if t.ctx.Err() != nil {
			c.Done, c.Cause = true, context.Cause(t.ctx)
			c.Is = Classify(c.Cause)
		}
		out = append(out, c)
	}
	return out
}

// track replaces p's tracked contexts with those of a new hold.
func (p *proc) track(ts ...tracked) {
	p.w.mu.Lock()
	defer p.w.mu.Unlock()
	for i := range ts {
		p.w.contexts++
		ts[i].id = p.w.contexts
	}
	p.tracked = ts
}

// startWriter starts a writer process of holder.
func (w *World) startWriter(holder string) {
	w.mu.Lock()
	w.names[holder]++
	n := w.names[holder]
	w.mu.Unlock()
	name := holder
	if n > 1 {
		name = fmt.Sprintf("%s#%d", holder, n)
	}
	w.start(&proc{name: name, kind: "writer", holder: holder})
}

// start starts p's goroutine.
func (w *World) start(p *proc) {
	p.w = w
	h := fnv.New64a()
	h.Write([]byte(p.name))
	p.rng = rand.New(rand.NewPCG(w.seed, h.Sum64()))
	p.more = rand.New(rand.NewPCG(w.seed, h.Sum64()^0x6d6f7265))
	p.setback = rand.New(rand.NewPCG(w.seed, h.Sum64()^0x7365746b))
	base := context.WithValue(w.ctx, procKey{}, p)
	// A back-off without jitter: the same seed, the same waits.
	base = hook.With(base, &hook.Hooks{Wait: func(ctx context.Context, attempt int, _ time.Duration) error {
		// Two goroutines of one call (a Hold's seal and its renewer) may
		// wait at once: each names the store call that failed, the last
		// the scheduler ran or withdrew.
		label := fmt.Sprintf("%s, call %d: retry %d", p.name, callOf(ctx), attempt+1)
		w.mu.Lock()
		if r := w.last; r != nil && r.proc == p && r.call == callOf(ctx) {
			label += " after " + r.label()
		}
		w.mu.Unlock()
		err := hook.Sleep(ctx, min(5*time.Millisecond<<min(attempt-1, 10), 500*time.Millisecond))
		w.turn(label)
		return err
	}, Took: func(ctx context.Context) {
		w.turn(fmt.Sprintf("%s takes its lease's slot for call %d", p.name, callOf(ctx)))
	}, ListBudget: w.cfg.ListBudget})
	p.ctx, p.cancel = context.WithCancel(base)
	p.ended = make(chan struct{})
	p.fence = &writefence.Fence{Store: w.store, Prefix: w.cfg.Prefix, Observer: w.observe, KeepFloor: w.cfg.KeepFloor, Probe: w.cfg.Probe}
	switch {
	case w.cfg.Branded:
		p.fence.Brand = writefence.BrandVerifyAlways
	case w.cfg.Claims:
		p.fence.Brand = writefence.BrandClaim
	}
	if w.cfg.SerialDeletes {
		p.fence.Blobs = serialBlobs{w.store}
	}
	if p.kind == "writer" {
		p.leaseLabel = p.name + "/lease"
		p.lease = &writefence.Lease{Fence: p.fence, Name: leaseName, Holder: p.holder, TTL: w.cfg.TTL}
		if w.cfg.Skew > 0 {
			// Drawn apart from the process's own draws, so that the
			// rest of a seed's deployment is the same with or without.
			d := rand.New(rand.NewPCG(w.seed, h.Sum64()^0x736b6577)).Int64N(2*int64(w.cfg.Skew) + 1)
			p.skew = time.Duration(d) - w.cfg.Skew
			p.lease.Clock = func() time.Time { return time.Now().Add(p.skew) }
		}
	}
	w.mu.Lock()
	w.procs = append(w.procs, p)
	// Each process starts at an instant of its own: processes that run at
	// one instant run at once, in an order the seed does not decide.
	stagger := time.Duration(len(w.procs))*time.Millisecond + time.Duration(p.rng.IntN(1000))
	w.mu.Unlock()
	go func() {
		defer close(p.ended)
		if p.sleep(p.ctx, stagger, "starts") != nil {
			return
		}
		switch p.kind {
		case "writer":
			p.writer()
		case "collector":
			p.collector()
		case "reader":
			p.reader()
		case "operator":
			p.operator()
		case "retirer":
			p.retirer()
		}
	}()
}

// sleep sleeps d under ctx, then waits for its turn (World.turn), what
// naming what p's goroutine resumes; it returns ctx's error if ctx ended
// first.
func (p *proc) sleep(ctx context.Context, d time.Duration, what string) error {
	err := hook.Sleep(ctx, d)
	p.w.turn(p.name + " " + what)
	return err
}

// between draws a duration in [lo, hi).
func (p *proc) between(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(p.rng.Int64N(int64(hi-lo)))
}

// call runs one call of the package as p, recorded in the history.
func (p *proc) call(ctx context.Context, c *promise.Call, run func(ctx context.Context) error) error {
	c.BrandAlways = p.fence.Brand == writefence.BrandVerifyAlways
	c.BrandReads = p.fence.Brand != 0
	if c.Lease != "" && c.Lease == p.leaseLabel {
		c.Skew = p.skew
	}
	p.w.turn(p.name + " begins " + string(c.Op))
	ctx = p.w.begin(ctx, p, c)
	err := run(ctx)
	p.w.turn(fmt.Sprintf("%s ends call %d", p.name, c.ID))
	c.CtxEnded = ctx.Err() != nil
	p.w.end(p, c, err)
	if p.kind == "writer" && c.Op != promise.Forget && c.Key == p.w.key && Classify(err).Has("regressed") && !LeaseRegressed(err) && p.rng.IntN(4) == 0 {
		// Now and then the operator, told the record was set back on
		// purpose, has the writer accept it as it is (promise 29).
		_ = p.call(p.ctx, &promise.Call{Op: promise.Forget}, func(context.Context) error { return p.fence.Forget(plugin, shard) })
		p.w.mu.Lock()
		p.w.note("writer forgot the shard after a regression")
		p.w.mu.Unlock()
	}
	return err
}

// writer holds the lease and ships under it, again and again.
func (p *proc) writer() {
	w := p.w
	for p.ctx.Err() == nil {
		beside := p.releaseBeside()
		// Now and then a Hold names no shard: the writer's first push
		// fences the last one, at an epoch of the new term.
		keys, shards := []string{w.key}, []writefence.Shard{{Plugin: plugin, Shard: shard}}
		if p.rng.IntN(4) == 0 {
			keys, shards = nil, nil
		}
		// Now and then a pipeline of the shard starts watching for
		// deposition under the process's context before the Hold: the
		// Hold's seal refused as stale ends it (promise 18).
		stopEarly := func() {}
		if p.more.IntN(4) == 0 {
			var early context.Context
			early, stopEarly = p.fence.Deposed(p.ctx, plugin, shard)
			p.track(tracked{kind: "deposed", key: w.key, ctx: early})
			w.mu.Lock()
			w.note("Deposed context made before the Hold")
			w.mu.Unlock()
		}
		var held context.Context
		err := p.call(p.ctx, &promise.Call{Op: promise.Hold, Lease: p.leaseLabel, LeaseName: leaseName, Holder: p.holder, Writer: p.holder,
			HoldsShards: keys}, func(ctx context.Context) (err error) {
			held, err = p.lease.Hold(ctx, shards...)
			return err
		})
		<-beside
		stopEarly()
		if err != nil {
			if p.sleep(p.ctx, p.between(w.cfg.TTL/8, w.cfg.TTL), "holds again") != nil {
				return
			}
			continue
		}
		shipping, stop := p.fence.Deposed(held, plugin, shard)
		ts := []tracked{{kind: "hold", lease: p.leaseLabel, ctx: held}, {kind: "deposed", key: w.key, ctx: shipping}}
		if p.rng.IntN(3) == 0 {
			// Now and then a second pipeline of the shard (an uploader)
			// watches for deposition under the process's context, not
			// the Hold's: only the Fence ends it, on a stale refusal
			// (promise 18) or when the lease is lost or expires (16).
			uploading, stopUpload := p.fence.Deposed(p.ctx, plugin, shard)
			stopShipping := stop
			stop = func() { stopUpload(); stopShipping() }
			ts = append(ts, tracked{kind: "deposed", key: w.key, ctx: uploading})
			w.mu.Lock()
			w.note("second Deposed context, of the process's")
			w.mu.Unlock()
		}
		p.track(ts...)
		if p.rng.IntN(3) == 0 {
			p.recoverBlobs(shipping)
		}
		// A third of the holds ship at a TermSource's epochs, its term
		// the lease's (promise 17), as a writer behind a control plane.
		if p.source == nil && p.rng.IntN(3) == 0 {
			p.newSource()
		}
		p.ship(shipping)
		if p.rng.IntN(2) == 0 {
			// Half the time the pipeline keeps its TermSource for the
			// next hold, whose term its term function then reports:
			// the source ends (promise 17), and the writer makes another.
			p.source = nil
		}
		stop()
		if p.ctx.Err() == nil && p.rng.IntN(3) == 0 {
			// Now and then the release's ctx has ended before it begins (a
			// shutdown's), and a pipeline that outlived it asks the Lease
			// for one more epoch, which it must refuse (promise 14).
			rctx := p.ctx
			if p.rng.IntN(4) == 0 {
				var cancel context.CancelFunc
				rctx, cancel = context.WithCancel(p.ctx)
				cancel()
			}
			_ = p.call(rctx, &promise.Call{Op: promise.Release, Lease: p.leaseLabel, LeaseName: leaseName, Holder: p.holder},
				func(ctx context.Context) error { return p.lease.Release(ctx) })
			if p.rng.IntN(2) == 0 {
				_, _ = p.epoch(p.ctx)
			}
		}
	}
}

// releaseBeside, now and then, starts a Release of p's lease a moment
// after the Hold about to begin (a shutdown beside a takeover), its ctx
// ended before it begins half the time: the Hold must then hold nothing,
// or be ended by it (promises 14 and 16). The channel is closed once the
// Release, if any, has ended.
func (p *proc) releaseBeside() <-chan struct{} {
	done := make(chan struct{})
	if p.rng.IntN(8) != 0 {
		close(done)
		return done
	}
	delay, ended := p.between(0, p.w.cfg.TTL/4), p.rng.IntN(2) == 0
	go func() {
		defer close(done)
		if p.sleep(p.ctx, delay, "releases beside its hold") != nil {
			return
		}
		rctx, cancel := context.WithCancel(p.ctx)
		defer cancel()
		if ended {
			cancel()
		}
		_ = p.call(rctx, &promise.Call{Op: promise.Release, Lease: p.leaseLabel, LeaseName: leaseName, Holder: p.holder},
			func(ctx context.Context) error { return p.lease.Release(ctx) })
	}()
	return done
}

// newSource makes p ship at the epochs of a new TermSource whose term is
// the one p's lease holds, and which fails once the lease holds none or
// its expiry passed by the lease's clock.
func (p *proc) newSource() {
	p.sources++
	p.sourceLabel = fmt.Sprintf("%s/term-source#%d", p.name, p.sources)
	p.source = &writefence.TermSource{Fence: p.fence, Writer: p.holder, Term: func(ctx context.Context) (uint64, error) {
		term, expiry, ok := p.lease.Held()
		if !ok || !time.Now().Add(p.skew).Before(expiry) {
			return 0, errors.New("sim: the lease holds no term")
		}
		// The call records the term reported, which its source must
		// not hand out an epoch past once it is another (promise 17).
		p.w.mu.Lock()
		if c := p.w.calls[callOf(ctx)]; c != nil && c.TermSource != "" {
			c.Term = term
		}
		p.w.mu.Unlock()
		return term, nil
	}}
}

// epoch draws an epoch from the lease, or from p's TermSource when it
// ships through one, recorded.
func (p *proc) epoch(ctx context.Context) (uint64, error) {
	c := &promise.Call{Op: promise.Epoch, Lease: p.leaseLabel, LeaseName: leaseName, Holder: p.holder}
	var src writefence.EpochSource = p.lease
	if p.source != nil {
		c.Lease, c.LeaseName, c.Holder, c.TermSource, c.Writer = "", "", "", p.sourceLabel, p.holder
		src = p.source
	}
	var e uint64
	err := p.call(ctx, c, func(ctx context.Context) (err error) {
		e, err = src.Epoch(ctx, plugin, shard)
		c.Got = e
		return err
	})
	if err == nil {
		p.w.mu.Lock()
		p.w.maxEpoch = max(p.w.maxEpoch, e)
		p.w.mu.Unlock()
	}
	return e, err
}

// ship writes the shard under ctx until it ends: segments as blobs and
// the manifest that commits them, now and then a push, an update or a
// seal of its own.
func (p *proc) ship(ctx context.Context) {
	var blobEpoch uint64 // the epoch of the blobs of the last segment
	for n := 0; ctx.Err() == nil; n++ {
		if p.source != nil && p.rng.IntN(8) == 0 {
			// The pipeline restarts in the same term: a new TermSource
			// continues above what the store records (promise 17).
			p.newSource()
		}
		if p.rng.IntN(10) == 0 {
			// Now and then the writer renews the lease itself, as one
			// about to start a long upload would: a Renew that learns
			// the lease lost ends the Hold's context and the Deposed
			// contexts of what it gates before it returns (promise 16).
			_ = p.call(ctx, &promise.Call{Op: promise.Renew, Lease: p.leaseLabel, LeaseName: leaseName, Holder: p.holder},
				func(ctx context.Context) error { return p.lease.Renew(ctx) })
		}
		epoch, err := p.epoch(ctx)
		if err != nil && p.source != nil && Classify(err).Has("term ended") && ctx.Err() == nil {
			// A source kept from an earlier hold ended on the new term:
			// the pipeline starts again in this one with a new source.
			p.w.mu.Lock()
			p.w.note("term source of an earlier term ended")
			p.w.mu.Unlock()
			p.newSource()
			epoch, err = p.epoch(ctx)
		}
		if err != nil {
			return
		}
		switch roll := p.rng.IntN(10); {
		case roll < 6:
			// Half the time the segment's blobs are written at the epoch
			// of the last segment's, as a shipper that puts a term's
			// blobs at one epoch and commits them at rising ones: the
			// record then references many blobs of one epoch.
			if blobEpoch == 0 || p.rng.IntN(2) == 0 {
				blobEpoch = epoch
			}
			p.segment(ctx, blobEpoch, n)
		case roll < 7:
			payload := []byte(fmt.Sprintf("%s push %d", p.name, n))
			_ = p.call(ctx, &promise.Call{Op: promise.Push, Writer: p.holder, Epoch: epoch, Payload: payload},
				func(ctx context.Context) error { return p.fence.Push(ctx, plugin, shard, p.holder, epoch, payload) })
		case roll < 8:
			b := byte(p.rng.IntN(256))
			_ = p.call(ctx, &promise.Call{Op: promise.Update, Writer: p.holder, Epoch: epoch}, func(ctx context.Context) error {
				return p.fence.Update(ctx, plugin, shard, p.holder, epoch, func(cur []byte) ([]byte, error) {
					return append(cur[:min(len(cur), 24):min(len(cur), 24)], b), nil
				})
			})
		default:
			_ = p.call(ctx, &promise.Call{Op: promise.Seal, Writer: p.holder, Epoch: epoch},
				func(ctx context.Context) error { return p.fence.Seal(ctx, plugin, shard, p.holder, epoch) })
		}
		if p.sleep(ctx, p.between(time.Millisecond, 2*time.Second), "ships again") != nil {
			return
		}
	}
}

// segment uploads segments as blobs at epoch, one or a batch of up to
// six (a batch of four or more is checked by a listing, fewer by
// StatBlobs), then commits them, and any blob held back before, at a
// fresh epoch, dropping the oldest references past three.
func (p *proc) segment(ctx context.Context, epoch uint64, n int) {
	var refs []writefence.BlobRef
	for i := range 1 + p.rng.IntN(2)*p.rng.IntN(6) {
		data := []byte(strings.Repeat(fmt.Sprintf("%s segment %d.%d;", p.name, n, i), 1+p.rng.IntN(4)))
		var ref writefence.BlobRef
		c := &promise.Call{Op: promise.PutBlob, Writer: p.holder, Epoch: epoch, Payload: data}
		err := p.call(ctx, c, func(ctx context.Context) (err error) {
			ref, err = p.fence.PutBlob(ctx, plugin, shard, p.holder, epoch, strings.NewReader(string(data)))
			c.Ref = ref
			return err
		})
		if err != nil {
			return
		}
		refs = append(refs, ref)
	}
	// A batch of three holds its first blob back for the next commit,
	// which then adds it.
	var hold []writefence.BlobRef
	if len(refs) == 3 {
		hold, refs = refs[:1], refs[1:]
	}
	refs, p.held = append(p.held, refs...), hold
	if p.rng.IntN(4) == 0 {
		// Now and then the writer pauses between the upload and the
		// commit, as its scheduler or a slow disk would make it.
		if p.sleep(ctx, p.between(time.Millisecond, p.w.cfg.Grace), "commits after a pause") != nil {
			return
		}
	}
	commitEpoch, err := p.epoch(ctx)
	if err != nil {
		return
	}
	if p.rng.IntN(12) == 0 {
		refs = p.confuse(ctx, refs)
	}
	if p.commit(ctx, commitEpoch, refs) == nil && p.rng.IntN(2) == 0 {
		// Before it acknowledges the segment to whoever sent it, the
		// writer checks it still holds the shard at the commit's epoch;
		// now and then after a pause of up to three leases, under its own
		// context, which its shard's end does not cancel: another writer
		// may hold the shard by then (promise 32).
		cctx := ctx
		if p.rng.IntN(4) == 0 {
			if p.sleep(p.ctx, p.between(time.Millisecond, 3*p.w.cfg.TTL), "checks after a pause") != nil {
				return
			}
			p.w.mu.Lock()
			p.w.note("check after a pause")
			p.w.mu.Unlock()
			cctx = p.ctx
		}
		if p.setback.IntN(8) == 0 {
			p.setBackUnder(ctx)
		}
		_ = p.call(cctx, &promise.Call{Op: promise.Check, Writer: p.holder, Epoch: commitEpoch},
			func(ctx context.Context) error { return p.fence.Check(ctx, plugin, shard, p.holder, commitEpoch) })
	}
}

// setBackUnder sets the record back under the check a writer makes at
// its commit's epoch: the writer updates the record at a higher epoch,
// then the record is set back from outside to what it held after the
// commit, as a restore would. The record then holds the writer at the
// commit's epoch, below what its Fence saw: the check is refused as
// regressed (promise 32).
func (p *proc) setBackUnder(ctx context.Context) {
	committed, _, err := p.w.base.Get(context.Background(), p.w.key)
	if err != nil {
		return
	}
	epoch, err := p.epoch(ctx)
	if err != nil {
		return
	}
	err = p.call(ctx, &promise.Call{Op: promise.Update, Writer: p.holder, Epoch: epoch}, func(ctx context.Context) error {
		return p.fence.Update(ctx, plugin, shard, p.holder, epoch, func(cur []byte) ([]byte, error) { return cur, nil })
	})
	if err != nil {
		return
	}
	if _, version, err := p.w.base.Get(context.Background(), p.w.key); err == nil {
		p.w.putOutside(committed, version, "record set back under a check")
	}
}

// commit commits a manifest that adds refs at epoch, keeping at most
// three older references.
func (p *proc) commit(ctx context.Context, epoch uint64, refs []writefence.BlobRef) error {
	c := &promise.Call{Op: promise.Commit, Writer: p.holder, Epoch: epoch}
	return p.call(ctx, c, func(ctx context.Context) error {
		return p.fence.Commit(ctx, plugin, shard, p.holder, epoch, func(m writefence.Manifest) (writefence.Manifest, error) {
			blobs := slices.Clone(m.Blobs)
			// The history records what the manifest referenced and what
			// it then references, as the Fence last decided.
			defer func() { c.Current, c.Blobs = slices.Clone(m.Blobs), slices.Clone(blobs) }()
			for _, r := range refs {
				if !slices.ContainsFunc(blobs, func(b writefence.BlobRef) bool { return b.Name == r.Name }) {
					blobs = append(blobs, r)
				}
			}
			if len(blobs) > 3+len(refs) {
				blobs = blobs[len(blobs)-3-len(refs):]
			}
			return writefence.Manifest{Payload: m.Payload, Blobs: blobs}, nil
		})
	})
}

// confuse makes refs lie, as a confused shipper's would (promise 20): one
// blob's size off by one, or a blob of the shard that another writer put
// (one the listing shows) added. The commit must be refused.
func (p *proc) confuse(ctx context.Context, refs []writefence.BlobRef) []writefence.BlobRef {
	refs = slices.Clone(refs)
	if len(refs) > 0 && p.rng.IntN(2) == 0 {
		refs[len(refs)-1].Size++
		p.w.mu.Lock()
		p.w.note("confused commit: a size off by one")
		p.w.mu.Unlock()
		return refs
	}
	space, err := keys.Blobs(p.w.cfg.Prefix, plugin, shard)
	if err != nil {
		panic(err)
	}
	var other *writefence.BlobRef
	_ = writefence.BlobStore(p.w.store).ListBlobs(ctx, space, func(b writefence.BlobInfo) error {
		name := strings.TrimPrefix(b.Key, space)
		if _, _, writer, ok := keys.ParseBlobName(name); ok && writer != p.holder {
			other = &writefence.BlobRef{Name: name, Size: b.Size}
		}
		return nil
	})
	if other == nil {
		return refs
	}
	p.w.mu.Lock()
	p.w.note("confused commit: another writer's blob")
	p.w.mu.Unlock()
	return append(refs, *other)
}

// recoverBlobs commits the blobs of the shard that bear the writer's name
// and that the manifest does not reference, as a shipper that resumes
// what its previous incarnation uploaded would: the package admits only
// those of the writer's current tenure.
func (p *proc) recoverBlobs(ctx context.Context) {
	bs := writefence.BlobStore(p.w.store)
	space, err := keys.Blobs(p.w.cfg.Prefix, plugin, shard)
	if err != nil {
		panic(err)
	}
	// Recorded: its read is what the Fence then remembers (promise 29).
	info, err := p.inspect(ctx)
	if err != nil {
		return
	}
	var found []writefence.BlobRef
	_ = bs.ListBlobs(ctx, space, func(b writefence.BlobInfo) error {
		name := strings.TrimPrefix(b.Key, space)
		_, _, writer, ok := keys.ParseBlobName(name)
		if !ok || writer != p.holder || slices.ContainsFunc(info.Blobs, func(r writefence.BlobRef) bool { return r.Name == name }) {
			return nil
		}
		found = append(found, writefence.BlobRef{Name: name, Size: b.Size})
		return nil
	})
	for i := range found {
		rc, _, err := bs.OpenBlob(ctx, space+found[i].Name)
		if err != nil {
			return
		}
		data, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			return
		}
		found[i].CRC = crc32.Checksum(data, record.Castagnoli)
	}
	if len(found) == 0 {
		return
	}
	epoch, err := p.epoch(ctx)
	if err != nil {
		return
	}
	p.w.mu.Lock()
	p.w.note("recovery commit")
	p.w.mu.Unlock()
	_ = p.commit(ctx, epoch, found)
}

// collector collects the shard now and then.
func (p *proc) collector() {
	for p.sleep(p.ctx, p.between(time.Millisecond, p.w.cfg.Grace), "collects") == nil {
		dry := p.rng.IntN(10) == 0
		if p.w.cfg.KeepFloor && p.more.IntN(3) == 0 {
			// Under KeepFloor, now and then the collector runs as a tool
			// run afresh, a Fence that never saw the record: what keeps
			// it from deleting under a record set back is the floor alone
			// (promise 31).
			_ = p.call(p.ctx, &promise.Call{Op: promise.Forget}, func(context.Context) error { return p.fence.Forget(plugin, shard) })
			p.w.mu.Lock()
			p.w.note("collector forgot the shard")
			p.w.mu.Unlock()
		}
		c := &promise.Call{Op: promise.Collect, DryRun: dry}
		_ = p.call(p.ctx, c, func(ctx context.Context) error {
			report, err := p.fence.Collect(ctx, plugin, shard, writefence.GCOptions{Grace: p.w.cfg.Grace, DryRun: dry})
			for _, b := range report.Deleted {
				c.Deleted = append(c.Deleted, b.Key)
			}
			return err
		})
	}
}

// reader follows the manifest: the record, then every blob it references.
func (p *proc) reader() {
	for p.sleep(p.ctx, p.between(time.Millisecond, 3*time.Second), "reads") == nil {
		info, err := p.latest()
		if err != nil {
			continue
		}
		for _, ref := range info.Blobs {
			c := &promise.Call{Op: promise.Open, Name: ref.Name}
			_ = p.call(p.ctx, c, func(ctx context.Context) error {
				rc, _, err := p.fence.OpenBlob(ctx, plugin, shard, ref.Name)
				if err != nil {
					return err
				}
				defer rc.Close()
				c.Bytes, err = io.ReadAll(rc)
				return err
			})
		}
	}
}

// latest reads the record as Inspect does, recorded.
func (p *proc) latest() (writefence.RecordInfo, error) { return p.inspect(p.ctx) }

// inspect is latest under ctx.
func (p *proc) inspect(ctx context.Context) (writefence.RecordInfo, error) {
	c := &promise.Call{Op: promise.Latest}
	var info writefence.RecordInfo
	err := p.call(ctx, c, func(ctx context.Context) (err error) {
		info, err = p.fence.Inspect(ctx, plugin, shard)
		if err == nil {
			var horizon int64
			if !info.Horizon.IsZero() {
				horizon = info.Horizon.UnixNano()
			}
			c.Read = &record.Header{Identity: info.Identity, Writer: info.Writer, Epoch: info.Epoch, Since: info.Since, Horizon: horizon}
			c.ReadBody = record.Body{Payload: info.Payload, Refs: info.Blobs, Since: info.Since, Horizon: horizon, Stream: info.Stream}
		}
		return err
	})
	return info, err
}

// operator settles the record whenever it finds it damaged, and whenever
// a process reported it lost or set back (ErrEpochRegressed), as the
// runbook says: above the highest epoch ever granted (settleEpoch).
func (p *proc) operator() {
	beside := p.stream(besideSettleStream)
	for p.sleep(p.ctx, p.between(2*time.Second, 20*time.Second), "looks") == nil {
		p.w.mu.Lock()
		leaseRegressed := p.w.leaseRegressed
		p.w.mu.Unlock()
		if leaseRegressed {
			p.settleLeaseLost()
		}
		if p.rng.IntN(3) == 0 {
			if info, err := p.inspectLease(); err == nil && !info.Released() && p.rng.IntN(4) == 0 {
				p.settleLease(info)
			}
			c := &promise.Call{Op: promise.Verify, Key: keys.Brand(p.w.cfg.Prefix)}
			_ = p.call(p.ctx, c, func(ctx context.Context) error {
				err := p.fence.VerifyBrand(ctx)
				if we := (*writefence.WireError)(nil); errors.As(err, &we) && !we.Absent {
					c.Found = &we.Found
				}
				return err
			})
		}
		if (p.w.cfg.Branded || p.w.cfg.Claims) && p.rng.IntN(6) == 0 {
			p.rebrand()
		}
		p.w.mu.Lock()
		regressed := p.w.regressed
		p.w.mu.Unlock()
		info, err := p.latest()
		if regressed && (err == nil || Classify(err).Has("not found")) {
			p.settleLost(info)
			continue
		}
		if err == nil || !strings.Contains(fmt.Sprint(Classify(err)), "corrupt") || info.Version == "" {
			continue
		}
		s := writefence.Settlement{Version: info.Version, Writer: "operator", Payload: []byte("settled by the operator"),
			DropBlobs: p.rng.IntN(4) == 0, Epoch: p.w.settleEpoch()}
		if info.Epoch == 0 {
			s.Floor = s.Epoch - 1
		}
		stop := p.watchBesideSettle(beside)
		settle := func(s writefence.Settlement) error {
			return p.call(p.ctx, &promise.Call{Op: promise.Settle, Writer: s.Writer, Epoch: s.Epoch, Payload: s.Payload,
				Version: s.Version, Floor: s.Floor, DropBlobs: s.DropBlobs}, func(ctx context.Context) error {
				return p.fence.Settle(ctx, plugin, shard, s)
			})
		}
		if p.rng.IntN(4) == 0 {
			// Now and then the operator first mistypes the epoch: at the
			// damaged header's, or at the floor it states when the header
			// does not decode. Settle refuses it, writing nothing
			// (promises 3 and 8).
			low := s
			low.Epoch = info.Epoch
			if info.Epoch == 0 {
				low.Epoch = low.Floor
			}
			if settle(low) != nil {
				p.w.mu.Lock()
				p.w.note("settle at too low an epoch refused")
				p.w.mu.Unlock()
			}
		}
		if prev := p.lastSettle; prev != nil && p.rng.IntN(4) == 0 {
			// Now and then the operator runs its last settle's command
			// again over the new damage, from a Fence that forgot the
			// shard (a tool run afresh): the settle log refuses it, if
			// nothing else does (promise 8).
			_ = p.call(p.ctx, &promise.Call{Op: promise.Forget}, func(context.Context) error { return p.fence.Forget(plugin, shard) })
			old := *prev
			old.Version = info.Version
			if settle(old) != nil {
				p.w.mu.Lock()
				p.w.note("earlier settle run again over new damage refused")
				p.w.mu.Unlock()
			}
		}
		err = settle(s)
		if errors.Is(err, writefence.ErrInvalidArgument) && strings.Contains(err.Error(), "DropBlobs") {
			// The references cannot be read: the operator decides to
			// settle without them, as the refusal says.
			p.w.mu.Lock()
			p.w.note("settle refused for references it cannot read")
			p.w.mu.Unlock()
			s.DropBlobs = true
			err = settle(s)
		}
		if p.rng.IntN(3) == 0 {
			// Now and then the operator runs the settle again with the
			// same arguments, as after a reply it did not see: nil if the
			// record is this settle, a refusal otherwise (promise 5).
			again := settle(s)
			p.w.mu.Lock()
			p.w.note(fmt.Sprintf("settle run again: %v, then %v", Classify(err), Classify(again)))
			p.w.mu.Unlock()
		}
		p.w.mu.Lock()
		p.w.maxEpoch = max(p.w.maxEpoch, s.Epoch) // tried, so granted
		if err == nil {
			p.w.note("settle")
			p.lastSettle = &s
		}
		p.w.mu.Unlock()
		stop()
	}
}

// rebrand sets the store's brand, from outside the package, to another
// identity or removes it, as a migration would, and a moment later puts
// it back: meanwhile no write of a Fence that reads the brand before each
// write lands, and each is refused writing nothing (promises 3 and 10);
// a Fence that reads it before its first write alone (BrandClaim) and
// writes first meanwhile is refused, and its probe writes nothing
// (promise 3).
func (p *proc) rebrand() {
	bk := keys.Brand(p.w.cfg.Prefix)
	// A context of no call: the changes are recorded as made outside.
	ctx := p.ctx
	data, version, err := p.w.store.Get(ctx, bk)
	if err != nil {
		return
	}
	what := "brand set to another identity"
	if p.rng.IntN(3) == 0 {
		what = "brand removed"
		if p.w.store.Delete(ctx, bk) != nil {
			return
		}
		version = ""
	} else if version, err = p.w.store.PutIfVersion(ctx, bk, []byte("other-format/v9"), version); err != nil {
		return
	}
	p.w.mu.Lock()
	p.w.note(what)
	p.w.mu.Unlock()
	if hook.Sleep(ctx, p.between(time.Second, p.w.cfg.TTL)) != nil {
		return
	}
	_, _ = p.w.store.PutIfVersion(ctx, bk, data, version)
}

// settleLease settles the writers' lease over its holder, as an operator
// who takes a paused holder for gone for good would: at the term above
// the one it found, so that the next acquisition takes the one after.
// The holder learns the lease lost at its next renewal, which ends its
// Hold's context and the Deposed contexts its Lease gates (promise 16).
func (p *proc) settleLease(info writefence.LeaseInfo) {
	key, err := keys.Lease(p.w.cfg.Prefix, leaseName)
	if err != nil {
		panic(err)
	}
	settler := &writefence.Lease{Fence: p.fence, Name: leaseName, Holder: "operator", TTL: p.w.cfg.TTL}
	// Now and then at the holder's own term, which a settle may take: it
	// takes no term, and the next acquisition takes the one after it
	// (promise 12).
	term, what := info.Term+1, "lease settled over its holder"
	if p.more.IntN(3) == 0 {
		term, what = info.Term, "lease settled over its holder at its term"
	}
	c := &promise.Call{Op: promise.Settled, Key: key, LeaseName: leaseName, Holder: "operator", Term: term}
	if p.call(p.ctx, c, func(ctx context.Context) error { return settler.Settle(ctx, info.Version, term) }) == nil {
		p.w.mu.Lock()
		p.w.note(what)
		p.w.mu.Unlock()
	}
}

// settleLeaseLost settles the writers' lease, which a Lease reported
// deleted or set back (ErrEpochRegressed), as Lease.Settle's doc says: at
// the highest term any of its records took, the operator's assertion that
// no higher one was granted, so that the next acquisition takes a term
// above every one a Lease value saw.
func (p *proc) settleLeaseLost() {
	key, err := keys.Lease(p.w.cfg.Prefix, leaseName)
	if err != nil {
		panic(err)
	}
	info, err := p.inspectLease()
	if err != nil && !Classify(err).Has("not found") {
		return
	}
	p.w.mu.Lock()
	term := max(p.w.maxTerm, info.Term)
	p.w.mu.Unlock()
	settler := &writefence.Lease{Fence: p.fence, Name: leaseName, Holder: "operator", TTL: p.w.cfg.TTL}
	c := &promise.Call{Op: promise.Settled, Key: key, LeaseName: leaseName, Holder: "operator", Term: term}
	if p.call(p.ctx, c, func(ctx context.Context) error { return settler.Settle(ctx, info.Version, term) }) == nil {
		p.w.mu.Lock()
		p.w.leaseRegressed = false
		p.w.note("lease settled after its record was deleted or set back")
		p.w.mu.Unlock()
	}
}

// inspectLease reads the writers' lease as an operator does, recorded.
func (p *proc) inspectLease() (info writefence.LeaseInfo, err error) {
	key, err := keys.Lease(p.w.cfg.Prefix, leaseName)
	if err != nil {
		panic(err)
	}
	c := &promise.Call{Op: promise.Inspect, Key: key, LeaseName: leaseName}
	err = p.call(p.ctx, c, func(ctx context.Context) (err error) {
		info, err = p.fence.InspectLease(ctx, leaseName)
		if err == nil {
			c.Leased = &record.Lease{Holder: info.Holder, Term: info.Term}
			if !info.Expiry.IsZero() {
				c.Leased.Expiry = info.Expiry.UnixNano()
			}
		}
		return err
	})
	return info, err
}

// settleEpoch is the epoch the operator settles at: above the highest
// epoch ever granted, as an operator who knows the lease's highest term
// asserts it (every epoch of that term and every settle tried), and one
// no lease ever hands out, the first of the next term (a term's epochs
// start at term<<32 | 1). A settle at an epoch a live lease also hands
// out would be two writes of one epoch, which the store keeps from both
// landing only while it keeps the record.
func (w *World) settleEpoch() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	granted := max(w.maxEpoch, (w.maxTerm+1)<<32-1)
	return (granted>>32 + 1) << 32
}

// settleLost settles a record a process reported lost or set back, at
// the version latest found (none when absent), above the highest epoch
// ever granted, as the runbook says.
func (p *proc) settleLost(info writefence.RecordInfo) {
	epoch := p.w.settleEpoch()
	s := writefence.Settlement{Version: info.Version, Writer: "operator", Payload: []byte("settled by the operator: lost"),
		Lost: true, Floor: epoch - 1, Epoch: epoch, DropBlobs: p.rng.IntN(4) == 0}
	settle := func() error {
		return p.call(p.ctx, &promise.Call{Op: promise.Settle, Writer: s.Writer, Epoch: s.Epoch, Payload: s.Payload,
			Version: s.Version, Floor: s.Floor, DropBlobs: s.DropBlobs, Lost: true}, func(ctx context.Context) error {
			return p.fence.Settle(ctx, plugin, shard, s)
		})
	}
	err := settle()
	if errors.Is(err, writefence.ErrInvalidArgument) && strings.Contains(err.Error(), "DropBlobs") {
		s.DropBlobs = true
		err = settle()
	}
	p.w.mu.Lock()
	defer p.w.mu.Unlock()
	p.w.maxEpoch = max(p.w.maxEpoch, s.Epoch)
	if err == nil {
		p.w.regressed = false
		p.w.note("settle of a record lost or set back")
	}
}
