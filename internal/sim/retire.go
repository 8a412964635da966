package sim

import (
	"context"
	"errors"
	"hash/fnv"
	"math/rand/v2"
	"time"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/promise"
)

// The retirement of the shard: in some seeds, late in the run, an operator
// retires the shard for good. Every process of the deployment ends (no
// writer writes the shard again), the operator waits until no call on the
// shard is in flight, deletes the record from outside, and collects the
// shard with GCOptions.RecordGone, a few times: before it deletes the
// record (refused), with the floor still kept (refused: promise 31), from
// a Fence that saw the record (refused: 29), and once it deleted the floor
// and forgot the shard, every blob of the shard goes (25, 26). Its draws
// are apart from every other's (World.retire, and the retirer's own
// process), so that the rest of a seed's deployment draws as it did
// before the step was added.

// retireStream seeds World.retire.
const retireStream = 0x72657469

// drawRetirement draws whether and at which scheduler step the shard is
// retired: in a quarter of the seeds, in the last third of the run, early
// enough for a few passes.
func (w *World) drawRetirement() {
	if w.cfg.Steps < 50 || w.retire.IntN(4) != 0 {
		return
	}
	w.retireAt = w.cfg.Steps*13/20 + w.retire.IntN(w.cfg.Steps*3/20)
}

// retireShard ends every process, which starts no call on the shard
// again, and starts the retirer, the operator who retires the shard.
func (w *World) retireShard() {
	w.mu.Lock()
	procs := append([]*proc(nil), w.procs...)
	w.note("shard retired")
	w.mu.Unlock()
	for _, p := range procs {
		p.cancel()
	}
	w.start(&proc{name: "retirer", kind: "retirer"})
}

// shardIdle reports whether nothing but self acts on the shard: every
// other process has ended, no call on the shard is in flight, and no
// store call of another process waits or is held up but on the lease.
func (w *World) shardIdle(self *proc) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, p := range w.procs {
		if p != self && !p.exited() {
			return false
		}
	}
	for _, c := range w.calls {
		if c.End.IsZero() && c.Key == w.key && c.Proc != self.name {
			return false
		}
	}
	for _, rs := range [][]*request{w.pending, w.stalled} {
		for _, r := range rs {
			if r.proc != self && r.key != w.leaseKey {
				return false
			}
		}
	}
	return true
}

// stream returns draws of p's own, apart from every other of its draws,
// for salt.
func (p *proc) stream(salt uint64) *rand.Rand {
	h := fnv.New64a()
	h.Write([]byte(p.name))
	return rand.New(rand.NewPCG(p.w.seed, h.Sum64()^salt))
}

// retirer retires the shard: it waits until nothing acts on it, deletes
// the record from outside, and collects the shard as retired, with
// RecordGone, a few times, until the last pass.
func (p *proc) retirer() {
	w := p.w
	for !w.shardIdle(p) {
		if p.sleep(p.ctx, p.between(10*time.Millisecond, time.Second), "waits for the shard's calls to end") != nil {
			return
		}
	}
	w.mu.Lock()
	w.note("retired shard idle")
	w.mu.Unlock()
	if p.rng.IntN(3) == 0 {
		// The operator reads the record it retires: its Fence saw it,
		// and refuses to collect the shard as retired until it forgets
		// it (promise 29).
		_, _ = p.latest()
	}
	if p.rng.IntN(4) == 0 {
		// The operator collects before it deletes the record: refused,
		// and nothing deleted (promise 25).
		p.collectRetired(false)
	}
	if !w.deleteOutside(w.key, "retired shard's record deleted") {
		return
	}
	passes := 1 + p.rng.IntN(4)
	unfloor := p.rng.IntN(passes)
	for i := range passes {
		if i > 0 && p.sleep(p.ctx, p.between(time.Millisecond, w.cfg.Grace), "collects the retired shard again") != nil {
			return
		}
		// A restore from outside may have put the record back: the
		// operator deletes it again.
		w.deleteOutside(w.key, "retired shard's record deleted again")
		forget := p.rng.IntN(2) == 0
		if i == unfloor {
			// As RecordGone's refusal says: delete the floor, forget.
			w.deleteOutside(w.floorKey, "retired shard's floor deleted")
			forget = true
		}
		if forget {
			_ = p.call(p.ctx, &promise.Call{Op: promise.Forget}, func(context.Context) error { return p.fence.Forget(plugin, shard) })
		}
		p.collectRetired(p.rng.IntN(8) == 0)
	}
}

// collectRetired collects the shard as retired (GCOptions.RecordGone),
// a dry run when dry, and tallies how it ended.
func (p *proc) collectRetired(dry bool) {
	w := p.w
	floor := w.holds(w.floorKey)
	c := &promise.Call{Op: promise.Collect, RecordGone: true, DryRun: dry}
	err := p.call(p.ctx, c, func(ctx context.Context) error {
		report, err := p.fence.Collect(ctx, plugin, shard, writefence.GCOptions{Grace: w.cfg.Grace, DryRun: dry, RecordGone: true})
		for _, b := range report.Deleted {
			c.Deleted = append(c.Deleted, b.Key)
		}
		return err
	})
	what := "retired shard collected"
	switch {
	case err == nil && len(c.Deleted) > 0 && !dry:
		what = "retired shard collected, blobs deleted"
	case err == nil:
	case errors.Is(err, writefence.ErrInvalidArgument):
		what = "retired shard's collection refused, a record"
	case errors.Is(err, writefence.ErrEpochRegressed) && floor:
		what = "retired shard's collection refused, a floor"
	case errors.Is(err, writefence.ErrEpochRegressed):
		what = "retired shard's collection refused, its Fence saw the record"
	default:
		what = "retired shard's collection failed"
	}
	w.mu.Lock()
	w.note(what)
	w.mu.Unlock()
}

// holds reports whether the base store holds key, as seen from outside.
func (w *World) holds(key string) bool {
	_, _, err := w.base.Get(context.Background(), key)
	return err == nil
}

// deleteOutside deletes key from outside the package when the store holds
// it, records the change, and notes what; it reports whether key is gone.
func (w *World) deleteOutside(key, what string) bool {
	ctx := context.Background()
	if _, _, err := w.base.Get(ctx, key); errors.Is(err, writefence.ErrNotFound) {
		return true
	} else if err != nil {
		return false
	}
	if err := w.base.Delete(ctx, key); err != nil {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.record(promise.Change{Kind: "delete", Key: key, At: time.Now()})
	w.note(what)
	return true
}
