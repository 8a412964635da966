package sim

import (
	"math/rand/v2"
	"slices"

	"github.com/writefence/writefence/internal/promise"
)

// besideSettleStream salts the operator's draws of watchBesideSettle.
const besideSettleStream = 0x62736474

// watchBesideSettle, now and then (a draw of draws, apart from the
// operator's others), makes the operator hold a Deposed context of the
// shard on the Fence it settles with, as a pipeline of the operator's
// process would, while it settles: no Settle ends it, refused or not
// (promise 18). stop ends it, and notes each Settle refused while it ran.
func (p *proc) watchBesideSettle(draws *rand.Rand) (stop func()) {
	if draws.IntN(3) != 0 {
		return func() {}
	}
	w := p.w
	ctx, cancel := p.fence.Deposed(p.ctx, plugin, shard)
	p.track(tracked{kind: "deposed", key: w.key, ctx: ctx})
	w.mu.Lock()
	id, from := p.tracked[0].id, len(w.hist.Entries)
	w.note("Deposed context held beside a settle")
	w.mu.Unlock()
	return func() {
		w.mu.Lock()
		for _, e := range w.hist.Entries[from:] {
			if c := e.End; c != nil && c.Proc == p.name && c.Op == promise.Settle && c.Err != nil && slices.ContainsFunc(c.Before, func(x promise.Context) bool {
				return x.ID == id && !x.Done
			}) {
				w.note("settle refused beside a Deposed context")
			}
		}
		w.mu.Unlock()
		cancel()
		p.track()
	}
}
