package writefence

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/writefence/writefence/internal/hook"
	"github.com/writefence/writefence/internal/keys"
)

// Lease is a named, expiring, exclusive lease kept in a record of a Fence's
// store, and an EpochSource that hands out epochs only while it is held.
//
// Every acquisition, the first and each takeover of an expired or released
// lease, takes the next term in one conditional write (promise 12). Another
// Lease value, even of the same Holder (a restarted process), is refused
// until the record expires or is released (promise 13), then takes a new
// term like any contender. Renew keeps the term. Epoch returns term<<32 | n,
// n rising from 1 (promise 14); when a term's 2^32-1 epochs run out, Epoch
// takes the next term. Terms run out at 2^32-1.
//
// Expiry is judged by local clocks: a contender takes over once its clock
// passes the expiry the record carries, and the holder stops handing out
// epochs once its own clock, counted from just before its write, passes it.
// No promise rests on clocks: an early takeover only makes the old holder's
// writes stale. A clock before 1970 or after 2262 is refused.
//
// Most holders call Hold and ship under its context; a holder that decides
// when the lease's writes happen calls Acquire, Epoch, Fence.Seal and Renew
// itself. Either way, pass the Lease to Fence.PushFrom with Holder as the
// writer, and Release it when done. A Lease is safe for concurrent use; its
// writes are serialized, and Epoch never waits for one. Set the fields
// before the first call, and do not copy a Lease after it.
type Lease struct {
	// Fence holds the lease record, at Prefix + "_lease/" + Name, and
	// writes it through its engine. Required.
	Fence *Fence

	// Name names the lease, 1 to 256 bytes.
	Name string

	// Holder names this contender in the record, 1 to 1024 bytes.
	Holder string

	// TTL is how long an acquisition or a renewal lasts. Required, positive.
	TTL time.Duration

	// Clock returns the current time for expiry; nil means time.Now.
	// Hold's renewals are paced by the runtime's timers.
	Clock func() time.Time

	// ioSem serializes the Lease's writes of its record: a channel of one
	// slot, so that a call waiting for another's write honours its ctx;
	// taken before mu, made under mu on first use (see lockIO).
	ioSem chan struct{}

	// incarnation tells this Lease value's records from those of any
	// other (see the lease record's format); drawn once, under io.
	incarnation [leaseIncSize]byte
	drawn       bool
	mu          sync.Mutex // guards the fields below; never held across I/O

	held    bool
	term    uint64
	version string    // the store's version of the record this Lease wrote
	expiry  time.Time // by Clock: when this Lease stops handing out epochs
	seq     uint64    // the low half of the last epoch handed out

	// seen is the highest term this Lease value wrote or read in its
	// record, by seenHolder: an acquisition that finds the record absent
	// or below it is refused (ErrEpochRegressed).
	seen       uint64
	seenHolder string

	// gone is why the Lease does not hold the lease, once it held it: a
	// *LeaseLostError, the damage that dropped it, or its release. Epoch,
	// Renew and Release return it; nil before the first acquisition.
	gone error

	// gated holds the shard keys this Lease sealed or handed out epochs
	// for while it held the lease: whose Deposed contexts it cancels when
	// the lease is lost or expires.
	gated map[string]struct{}

	// hold is the Hold in force; nil when none is.
	hold *holding

	// releases counts the Releases begun; resumed is what it was when an
	// Acquire or a Hold that began after the last of them landed. While
	// they differ, whatever came of the release, the Lease hands out no
	// epoch.
	releases, resumed uint64

	// taken counts the acquisitions that landed, by Acquire or Hold, a
	// renewal of the lease held included: a Hold that gives up releases
	// the lease only in its own acquisition, never in one that came after
	// it (a Release ended the Hold, then an Acquire took the lease again).
	taken uint64
}

// holding is one Hold: the context it handed out and its renewer.
type holding struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	done   chan struct{} // closed when the renewer has returned
	taken  uint64        // the Lease's taken when the Hold began: its acquisition
}

var _ EpochSource = (*Lease)(nil)

// Hold takes the lease as Acquire does, seals each of shards within the
// term it took, and renews the lease every TTL/3 in the background until
// Release or ctx ends. It returns once every seal landed (promise 15), with
// a context to ship under, done when the lease is lost (context.Cause: a
// *LeaseLostError), expires (ErrLeaseExpired), is released (ErrLeaseLost),
// or ctx ends.
//
// An acquisition that does not land within TTL - TTL/4 returns an error
// matching ErrTakeoverTimeout, holding nothing. A slow seal is sealed again
// (each attempt bounded by TTL) while the lease is held, as the writer it
// fences may be what holds the store up; a lease lost or expired meanwhile
// is returned. A seal refused for good releases the lease and returns the
// refusal: ErrStaleEpoch when the shard records an epoch at or above the
// term's, which this lease cannot seal until its term passes it. ErrCorrupt,
// ErrWire, ErrEpochRegressed and ErrInvalidArgument are final. A second Hold
// while one is in force, or an invalid shard name, fails before any I/O.
func (l *Lease) Hold(ctx context.Context, shards ...Shard) (context.Context, error) {
	key, err := l.check()
	if err != nil {
		return nil, err
	}
	sealed := make([]string, len(shards))
	e := l.Fence.engine()
	for i, s := range shards {
		if sealed[i], err = e.key(s.Plugin, s.Shard); err != nil {
			return nil, err
		}
		// Under KeepFloor the seal writes the floor's key too, which is
		// longer: a shard the seal would refuse is refused before the
		// lease is taken.
		if e.KeepFloor {
			if _, err := e.floorKey(s.Plugin, s.Shard); err != nil {
				return nil, err
			}
		}
	}
	start := time.Now()
	since := l.releasesBegun()
	if err := l.lockIO(ctx); err != nil {
		return nil, err
	}
	l.mu.Lock()
	inForce := l.hold != nil && l.hold.ctx.Err() == nil
	l.mu.Unlock()
	if inForce {
		l.unlockIO()
		return nil, l.errorf("Hold called while a Hold of this Lease is in force")
	}
	actx, cancel := context.WithTimeout(ctx, l.TTL-l.margin())
	term, err := l.acquire(actx, key, since)
	late := ctx.Err() == nil && actx.Err() != nil
	cancel()
	if err != nil {
		l.unlockIO()
		if late {
			return nil, l.errorf("takeover given up: the acquisition did not land within %v of its start, a quarter TTL before its term would expire (%s): %w",
				l.TTL-l.margin(), trim(err), ErrTakeoverTimeout)
		}
		return nil, err
	}

	h := &holding{done: make(chan struct{})}
	h.ctx, h.cancel = context.WithCancelCause(ctx)
	l.mu.Lock()
	h.taken = l.taken
	// A Release begun since this call began ends it: a later one finds it
	// in force, and an earlier one (ended, or waiting for io) stops every
	// epoch this acquisition could hand out, so it is never in force.
	released := l.releases != since
	if !released {
		l.hold = h
		for _, k := range sealed {
			l.gateKey(k)
		}
	}
	l.mu.Unlock()
	l.unlockIO()
	if released {
		err := l.errorf("term %d: released while Hold took it: %w", term, ErrLeaseLost)
		h.cancel(err)
		close(h.done) // no renewer
		return nil, l.giveUp(ctx, h, term, key, err)
	}
	go l.renewer(h, key, start)

	for i, s := range shards {
		if err := l.seal(ctx, h, term, s, sealed[i]); err != nil {
			return nil, err
		}
	}
	return h.ctx, nil
}

// seal seals shard s, at key, within hold h of term: with one epoch of
// the term, drawn once, and again after any failure a retry may overcome
// (a conflict, a lost reply, a store that holds the write past a TTL), for
// as long as the lease is held. A takeover never gives the lease up
// because a seal is slow: the writer it fences may be the one holding the
// store up. A seal refused as stale by an epoch this Lease handed out in
// the term (a push of the shard that drew a later epoch landed first) is
// sent again at a new epoch. It gives up when the lease is lost or
// expires, when ctx ends, or on a refusal no retry changes (the shard
// records an epoch at or above the term's, damage, another identity).
func (l *Lease) seal(ctx context.Context, h *holding, term uint64, s Shard, key string) error {
	epoch, err := l.Epoch(h.ctx, s.Plugin, s.Shard)
	if err != nil {
		return l.giveUp(ctx, h, term, key, err)
	}
	for attempt := 1; ; attempt++ {
		sctx, cancel := context.WithTimeout(h.ctx, l.TTL)
		// Passed by its own holder's push, the seal deposes nobody.
		err = l.Fence.seal(sctx, s.Plugin, s.Shard, l.Holder, epoch, func(stale *StaleEpochError) bool { return l.handedOut(term, stale) })
		cancel()
		switch {
		case err == nil:
			return nil
		case h.ctx.Err() == nil && l.handedOut(term, err):
			if epoch, err = l.Epoch(h.ctx, s.Plugin, s.Shard); err != nil {
				return l.giveUp(ctx, h, term, key, err)
			}
			continue
		case h.ctx.Err() != nil, final(err):
			return l.giveUp(ctx, h, term, key, err)
		}
		if l.Fence.engine().backoff(h.ctx, attempt) != nil {
			return l.giveUp(ctx, h, term, key, err)
		}
	}
}

// handedOut reports whether err refuses a write as stale by an epoch of
// term that this Lease handed out, to its own holder.
func (l *Lease) handedOut(term uint64, err error) bool {
	var stale *StaleEpochError
	if !errors.As(err, &stale) || stale.RecordedWriter != l.Holder {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.held && l.term == term && stale.RecordedEpoch>>leaseSeqBits == term && stale.RecordedEpoch <= term<<leaseSeqBits|l.seq
}

// giveUp ends a takeover whose seal of key failed with err: it ends the
// hold, releases the lease if it still holds it, and returns what
// happened.
func (l *Lease) giveUp(ctx context.Context, h *holding, term uint64, key string, err error) error {
	ended, cause := h.ctx.Err() != nil, context.Cause(h.ctx)
	l.stopHold(h, err)

	// Only the acquisition h took is released: a Release that ended h may
	// have been followed by another.
	released, lost := l.releaseOwn(ctx, h.taken)
	var stale *StaleEpochError
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case ended && released != "lease released":
		return fmt.Errorf("%w (%s)", cause, released)
	case ended:
		return cause // lost, expired or released before the seal failed
	case lost != nil:
		return lost // taken over while it sealed: its seal's refusal is the new holder's doing
	case errors.As(err, &stale):
		return l.errorf("takeover at term %d stopped, %s: the shard %s records epoch %d (term %d) by %s, at or above this term's: the lease's terms are behind the shard's epochs (its record was deleted or rolled back, or another epoch source writes the shard), and no acquisition of this lease can seal it until its term passes %d: %w",
			term, released, esc(key), stale.RecordedEpoch, stale.RecordedEpoch>>leaseSeqBits, esc(stale.RecordedWriter), stale.RecordedEpoch>>leaseSeqBits, err)
	}
	return &prefixed{prefix: fmt.Sprintf("writefence: lease %s: takeover at term %d given up, %s: ", esc(l.Name), term, released), err: err}
}

// releaseOwn releases the lease if the Lease still holds it in
// acquisition taken (see Lease.taken), with a release bounded by the
// term (one that lands after it is refused as lost, which changes
// nothing), and says what came of it: "lease released", or why not and
// when the term lapses; lost when the lease was taken over meanwhile.
func (l *Lease) releaseOwn(ctx context.Context, taken uint64) (released string, lost *LeaseLostError) {
	l.mu.Lock()
	held, expiry := l.held && l.taken == taken, l.expiry
	l.mu.Unlock()
	if !held {
		return "lease released", nil
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), max(expiry.Sub(l.now()), l.margin()))
	defer cancel()
	switch err := l.release(rctx, taken); {
	case errors.As(err, &lost):
	case err != nil:
		return fmt.Sprintf("release failed (%s), the term lapses at %s", trim(err), expiry.UTC().Format(time.RFC3339Nano)), nil
	}
	return "lease released", lost
}

// margin is how long before a term's expiry a takeover must be done.
func (l *Lease) margin() time.Duration { return l.TTL / 4 }

// renewer renews the lease of hold h every TTL/3 from start until h ends,
// and ends it when the lease expires by Clock.
func (l *Lease) renewer(h *holding, key string, last time.Time) {
	defer close(h.done)
	defer func() {
		l.mu.Lock()
		if l.hold == h {
			l.hold = nil
		}
		l.mu.Unlock()
	}()
	var failed error // the last renewal's error, until one lands
	for {
		l.mu.Lock()
		if l.hold != h || !l.held || h.ctx.Err() != nil {
			l.mu.Unlock()
			return
		}
		left := l.expiry.Sub(l.now())
		if left <= 0 {
			l.endLocked(l.expired(failed), false)
			l.mu.Unlock()
			return
		}
		l.mu.Unlock()
		if wait := min(time.Until(last.Add(l.TTL/3)), left); wait > 0 {
			if hook.Sleep(h.ctx, wait) != nil {
				return
			}
			continue // expired, or time to renew
		}
		last = time.Now()
		rctx, cancel := context.WithTimeout(h.ctx, left)
		failed = l.renewFor(rctx, h, key)
		cancel()
	}
}

// renewFor renews the lease for hold h, unless h ended meanwhile.
func (l *Lease) renewFor(ctx context.Context, h *holding, key string) error {
	if err := l.lockIO(ctx); err != nil {
		return err
	}
	defer l.unlockIO()
	l.mu.Lock()
	mine, term := l.hold == h && l.held, l.term
	l.mu.Unlock()
	if !mine || ctx.Err() != nil {
		return nil
	}
	return l.rewrite(ctx, key, opLeaseRenew, term, false)
}

// stopHold ends hold h with cause, if it is still in force, and waits for
// its renewer to return. The caller holds neither io nor mu.
func (l *Lease) stopHold(h *holding, cause error) {
	l.mu.Lock()
	if l.hold == h {
		l.hold = nil
	}
	h.cancel(cause) // under mu, as in endLocked
	l.mu.Unlock()
	<-h.done
}

// Acquire takes the lease and returns its term; a Lease that holds it
// renews instead. An absent record is created at term 1; one expired,
// released, or this Lease value's own (a lost reply) is taken over at its
// term + 1. A record held, unexpired by this Lease's clock, by another
// holder or Lease value returns a *LeaseHeldError; one that fails to decode,
// a *CorruptError, never overwritten (promise 7); one absent or below the
// highest term this Lease value saw, an *EpochRegressedError (see Settle).
func (l *Lease) Acquire(ctx context.Context) (uint64, error) {
	since := l.releasesBegun()
	key, err := l.lockKey(ctx)
	if err != nil {
		return 0, err
	}
	term, err := l.acquire(ctx, key, since)
	l.mu.Lock()
	taken, released := l.taken, err == nil && l.releases != since
	l.mu.Unlock()
	l.unlockIO()
	if !released {
		return term, err
	}
	// A Release begun since this call began stops every epoch of this
	// acquisition: it is given up, as Hold gives up its own.
	how, _ := l.releaseOwn(ctx, taken)
	return 0, l.errorf("term %d: released while Acquire took it, %s: %w", term, how, ErrLeaseLost)
}

// releasesBegun returns how many Releases began before now: an
// acquisition that lands after none more began lets the Lease hand out
// epochs again.
func (l *Lease) releasesBegun() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.releases
}

// landed notes an acquisition that landed, begun after since Releases
// (see releasesBegun). The caller holds mu.
func (l *Lease) landed(since uint64) {
	l.taken++
	if l.releases == since {
		l.resumed = since
	}
}

// acquire is Acquire, begun after since Releases. The caller holds io.
func (l *Lease) acquire(ctx context.Context, key string, since uint64) (uint64, error) {
	if err := l.draw(); err != nil {
		return 0, err
	}
	l.mu.Lock()
	held, heldTerm := l.held, l.term
	l.mu.Unlock()
	if held {
		err := l.rewrite(ctx, key, opLeaseRenew, heldTerm, false)
		if err == nil {
			l.mu.Lock()
			l.landed(since)
			l.mu.Unlock()
			return heldTerm, nil
		}
		if !errors.Is(err, ErrLeaseLost) {
			return 0, err
		}
	}
	var (
		term   uint64
		expiry time.Time
		out    []byte // the record the last attempt wrote
	)
	res, err := l.Fence.engine().run(ctx, &change{op: opLeaseAcquire, key: key, writer: l.Holder, branded: true, decide: func(s *snapshot) ([][]byte, bool, error) {
		if s.found && out != nil && bytes.Equal(s.data, out) {
			// An earlier attempt of this call landed: the bytes bear this
			// Lease value's incarnation, so no other Lease wrote them.
			return nil, true, nil
		}
		term = 1
		if err := l.regressed(key, s); err != nil {
			return nil, false, err
		}
		if s.found {
			rec, err := l.decode(key, s)
			if err != nil {
				return nil, false, err
			}
			// Read the clock after the record, so a release or an expiry
			// the record shows is never judged by an earlier time.
			now, err := l.clock()
			if err != nil {
				return nil, false, err
			}
			if rec.Expiry > now.UnixNano() && (rec.Holder != l.Holder || rec.Incarnation != l.incarnation) {
				return nil, false, &LeaseHeldError{Name: l.Name, Key: key, Holder: rec.Holder, Term: rec.Term, Expiry: time.Unix(0, rec.Expiry)}
			}
			if rec.Term >= maxLeaseTerm {
				return nil, false, l.errorf("term %d is the last", rec.Term)
			}
			term = rec.Term + 1
		}
		var stamp int64
		var err error
		if expiry, stamp, err = l.nextExpiry(); err != nil {
			return nil, false, err
		}
		out = encodeLease(l.Holder, term, stamp, l.incarnation)
		return [][]byte{out}, false, nil
	}})
	if err != nil {
		return 0, l.wrap(opLeaseAcquire, err)
	}
	l.mu.Lock()
	l.keep(term, res.version, expiry)
	l.gone = nil
	l.landed(since)
	l.mu.Unlock()
	return term, nil
}

// Renew extends the lease by TTL from now, keeping its term, with a write
// conditioned on the version this Lease last wrote; it lands after the
// local expiry too, if nobody took the lease over. A record of another
// term, or none, drops the lease: Renew returns a *LeaseLostError. A Lease
// that does not hold the lease returns why (ErrLeaseLost). Any other error
// leaves the lease held until its local expiry, so a retry may land.
func (l *Lease) Renew(ctx context.Context) error {
	key, err := l.lockKey(ctx)
	if err != nil {
		return err
	}
	defer l.unlockIO()
	term, err := l.heldTerm()
	if err != nil {
		return err
	}
	return l.rewrite(ctx, key, opLeaseRenew, term, false)
}

// Release gives the lease up: it ends the Hold in force (its context then
// matches ErrLeaseLost; no Deposed context ends, as releasing deposes
// nobody) and marks the record expired at its term, with a write
// conditioned on the version it last wrote, so that the next
// acquisition takes term + 1 at once. The Lease hands out no epoch after,
// whatever the outcome (the record may then show the lease held until it
// expires), until an Acquire or a Hold begun after it lands (one begun
// before, landing after, returns ErrLeaseLost). A Lease that does not
// hold the lease returns why (ErrLeaseLost).
func (l *Lease) Release(ctx context.Context) error { return l.release(ctx, 0) }

// release is Release; with taken other than 0, it releases the lease only
// while the Lease holds it in that acquisition (see Lease.taken), and
// returns nil, doing nothing, once it does not.
func (l *Lease) release(ctx context.Context, taken uint64) error {
	key, err := l.check()
	if err != nil {
		return err
	}
	l.mu.Lock()
	if taken != 0 && (!l.held || l.taken != taken) {
		l.mu.Unlock()
		return nil
	}
	h, released := l.hold, l.errorf("term %d: released: %w", l.term, ErrLeaseLost)
	if taken == 0 {
		// A Release. A Hold giving up its own acquisition stops no
		// epochs until its release lands: a later acquisition keeps them.
		l.releases++
	}
	l.mu.Unlock()
	if h != nil {
		l.stopHold(h, released)
	}
	if err := l.lockIO(ctx); err != nil {
		return err
	}
	defer l.unlockIO()
	l.mu.Lock()
	other := taken != 0 && (!l.held || l.taken != taken)
	l.mu.Unlock()
	if other {
		return nil // released, or taken again, while this call waited
	}
	term, err := l.heldTerm()
	if err != nil {
		return err
	}
	err = l.rewrite(ctx, key, opLeaseRelease, term, true)
	released = l.errorf("term %d: released: %w", term, ErrLeaseLost)
	// A Hold begun after this call began, whose acquisition landed while
	// it waited for io, is in force now, and ends too; none begins while
	// io is held.
	l.mu.Lock()
	if l.hold != nil {
		l.hold.cancel(released) // under mu, as in endLocked
		l.hold = nil
	}
	if l.held {
		l.drop(released)
	}
	l.mu.Unlock()
	return err
}

// Epoch implements EpochSource: a new epoch of the held term, term<<32 | n,
// above every epoch it returned before, with no I/O but to take the next
// term once per 2^32-1 epochs. The lease gates the shard named, whose
// Deposed contexts end when the lease is lost or expires. A Lease that lost
// the lease returns a *LeaseLostError, one that does not otherwise hold it
// an error matching ErrLeaseLost, and one whose own clock passed the expiry,
// no takeover known, an error matching ErrLeaseExpired, ending the Hold in
// force.
func (l *Lease) Epoch(ctx context.Context, plugin, shard string) (uint64, error) {
	for {
		l.mu.Lock()
		switch {
		case !l.held:
			err := l.notHeld(l.gone)
			l.mu.Unlock()
			return 0, err
		case l.releases != l.resumed:
			err := l.errorf("term %d: released: %w", l.term, ErrLeaseLost)
			l.mu.Unlock()
			return 0, err
		case !l.now().Before(l.expiry):
			err := l.expired(nil)
			l.endLocked(err, false)
			l.mu.Unlock()
			return 0, err
		case l.seq < maxLeaseSeq:
			l.seq++
			epoch := l.term<<leaseSeqBits | l.seq
			if key, err := l.Fence.engine().key(plugin, shard); err == nil {
				l.gateKey(key)
			}
			l.mu.Unlock()
			return epoch, nil
		}
		term := l.term
		l.mu.Unlock()
		if err := l.nextTerm(ctx, term); err != nil {
			return 0, err
		}
	}
}

// nextTerm moves the lease from term, whose epochs ran out, to the next.
func (l *Lease) nextTerm(ctx context.Context, term uint64) error {
	key, err := l.lockKey(ctx)
	if err != nil {
		return err
	}
	defer l.unlockIO()
	l.mu.Lock()
	moved := !l.held || l.term != term || l.seq < maxLeaseSeq
	l.mu.Unlock()
	switch {
	case moved:
		return nil // another call moved it, or the lease ended: Epoch looks again
	case term >= maxLeaseTerm:
		return l.errorf("term %d is the last", term)
	}
	return l.rewrite(ctx, key, opLeaseRenew, term+1, false)
}

// rewrite writes this Lease's record at term (its own term, or the next one
// when its epochs ran out) with a fresh expiry, or released, conditioned on
// the version it last wrote. A record that shows another holder or term,
// none, or damage drops the lease and ends what it gates. The caller holds
// io, and the lease.
func (l *Lease) rewrite(ctx context.Context, key, op string, term uint64, release bool) error {
	l.mu.Lock()
	heldTerm, version := l.term, l.version
	l.mu.Unlock()
	var (
		expiry time.Time
		out    []byte // the record the last attempt wrote
	)
	res, err := l.Fence.engine().run(ctx, &change{op: op, key: key, writer: l.Holder, branded: true, cached: version, decide: func(s *snapshot) ([][]byte, bool, error) {
		if !s.cached {
			if s.found && out != nil && bytes.Equal(s.data, out) {
				return nil, true, nil // an earlier attempt of this call landed
			}
			if !s.found {
				return nil, false, &LeaseLostError{Name: l.Name, Term: heldTerm}
			}
			rec, err := l.decode(key, s)
			if err != nil {
				return nil, false, err
			}
			l.sawTerm(rec.Term, rec.Holder)
			if rec.Holder != l.Holder || rec.Incarnation != l.incarnation || rec.Term != heldTerm && rec.Term != term {
				return nil, false, &LeaseLostError{Name: l.Name, Term: heldTerm, Holder: rec.Holder, NewTerm: rec.Term}
			}
			// This Lease value's own record (its incarnation), of its term
			// or of the term it moves to, at another version: an earlier
			// write of its own whose reply was lost, by this call or an
			// earlier one. This attempt is conditioned on it.
		}
		var stamp int64
		var err error
		if expiry, stamp, err = l.nextExpiry(); err != nil {
			return nil, false, err
		}
		if release {
			stamp = 0
		}
		out = encodeLease(l.Holder, term, stamp, l.incarnation)
		return [][]byte{out}, false, nil
	}})
	l.mu.Lock()
	var lost *LeaseLostError
	switch {
	case err == nil:
		l.keep(term, res.version, expiry)
	case errors.As(err, &lost):
		l.endLocked(lost, true)
	case errors.Is(err, ErrCorrupt):
		l.endLocked(l.errorf("term %d: dropped, the record does not decode (%s): %w", heldTerm, trim(err), ErrLeaseLost), true)
	}
	l.mu.Unlock()
	return l.wrap(op, err)
}

// endLocked ends this Lease's tenure of the lease for cause: it ends the
// Hold in force and cancels, with cause, the Deposed contexts of l.Fence
// for every shard the Lease gates. With drop (a loss, damage) it also
// drops the lease, which only an acquisition takes again; without (an
// expiry) the lease stays held, as a Renew may still land. The caller
// holds mu, so that no call of the Lease sees the Hold gone and its
// context live (a cancellation runs no AfterFunc in the canceller's
// goroutine, and the Deposed contexts take no lock of the Lease).
func (l *Lease) endLocked(cause error, drop bool) {
	h := l.hold
	l.hold = nil
	gated := l.gated
	if drop {
		l.drop(cause)
	}
	// The Deposed contexts first: whoever sees the Hold's context done
	// finds them cancelled too.
	if len(gated) > 0 {
		l.Fence.deposed.depose(cause, func(key string) bool { _, ok := gated[key]; return ok })
	}
	if h != nil {
		h.cancel(cause)
	}
}

// gateKey records that the Lease gates the shard at key. The caller holds
// mu.
func (l *Lease) gateKey(key string) {
	if l.gated == nil {
		l.gated = make(map[string]struct{})
	}
	l.gated[key] = struct{}{}
}

// expired is the error of a lease whose local expiry has passed, with no
// takeover known; failed, when not nil, is the last renewal's error. The
// caller holds mu.
func (l *Lease) expired(failed error) error {
	last := ""
	if failed != nil {
		last = fmt.Sprintf(" (last renewal: %v)", trim(failed))
	}
	return l.errorf("term %d expired at %s by this holder's clock%s; no takeover seen, but one may follow: %w",
		l.term, l.expiry.UTC().Format(time.RFC3339Nano), last, ErrLeaseExpired)
}

// notHeld is the error of a call that needs the lease held: why the Lease
// does not hold it.
func (l *Lease) notHeld(gone error) error {
	if gone != nil {
		return gone
	}
	return l.errorf("not held: %w", ErrLeaseLost)
}

// errorf returns an error of this Lease, which names it by its Name:
// "writefence: lease <Name>: " and the message.
func (l *Lease) errorf(format string, a ...any) error {
	return &prefixed{prefix: "writefence: lease " + esc(l.Name) + ": ", err: fmt.Errorf(format, a...)}
}

// wrap names the lease in the error of one of its writes, op. The Lease's
// own errors, which name it already, and a cancellation pass as they are.
func (l *Lease) wrap(op string, err error) error {
	switch err.(type) {
	case nil, *LeaseLostError, *LeaseHeldError, *prefixed:
		return err
	}
	if err == context.Canceled || err == context.DeadlineExceeded {
		return err
	}
	return &prefixed{prefix: fmt.Sprintf("writefence: lease %s: %s: ", esc(l.Name), strings.TrimPrefix(op, "lease ")), err: err}
}

// decode decodes the lease record s read at key; a damaged one is a
// *CorruptError.
func (l *Lease) decode(key string, s *snapshot) (leaseRecord, error) {
	if s.damage != nil {
		return leaseRecord{}, s.damage
	}
	rec, check := decodeLease(s.data)
	if check != "" {
		return rec, &CorruptError{Key: key, Version: s.version, Check: "lease: " + check}
	}
	return rec, nil
}

// nextExpiry returns when a write made now expires, and how its record
// carries that: Unix nanoseconds. A clock outside what a record can carry
// (before 1970, after 2262) is refused.
func (l *Lease) nextExpiry() (time.Time, int64, error) {
	now, err := l.clock()
	if err != nil {
		return time.Time{}, 0, err
	}
	expiry := now.Add(l.TTL)
	if !inLeaseRange(expiry) {
		return time.Time{}, 0, invalidArg("clock", "the expiry %s is outside what a lease record can carry (Unix nanoseconds, 1970 to 2262)", expiry.UTC().Format(time.RFC3339Nano))
	}
	return expiry, expiry.UnixNano(), nil
}

// clock returns the time by Clock, refusing one a lease record cannot
// compare with.
func (l *Lease) clock() (time.Time, error) {
	now := l.now()
	if !inLeaseRange(now) {
		return time.Time{}, invalidArg("clock", "%s is outside what a lease record can carry (Unix nanoseconds, 1970 to 2262)", now.UTC().Format(time.RFC3339Nano))
	}
	return now, nil
}

// inLeaseRange reports whether t is a positive number of Unix nanoseconds.
func inLeaseRange(t time.Time) bool {
	return t.After(time.Unix(0, 0)) && !t.After(time.Unix(0, math.MaxInt64))
}

// keep records that this Lease holds term at version until expiry; a new
// term starts its epochs afresh. The caller holds mu.
func (l *Lease) keep(term uint64, version string, expiry time.Time) {
	if !l.held || term != l.term {
		l.seq = 0
	}
	l.held, l.term, l.version, l.expiry = true, term, version, expiry
	if term > l.seen {
		l.seen, l.seenHolder = term, l.Holder
	}
}

// sawTerm notes that this Lease read its record at term, held by holder.
func (l *Lease) sawTerm(term uint64, holder string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if term > l.seen {
		l.seen, l.seenHolder = term, holder
	}
}

// regressed refuses an acquisition that finds the record s at key absent,
// or at a term below the highest this Lease value wrote or read in it:
// taking term 1, or the term after the lower one, would hand out epochs
// below those of terms already granted.
func (l *Lease) regressed(key string, s *snapshot) error {
	var rec leaseRecord
	if s.found {
		if s.damage != nil {
			return nil // damage is refused as such
		}
		var check string
		if rec, check = decodeLease(s.data); check != "" {
			return nil
		}
		l.sawTerm(rec.Term, rec.Holder)
	}
	l.mu.Lock()
	seen, by := l.seen, l.seenHolder
	l.mu.Unlock()
	switch {
	case seen == 0, s.found && rec.Term >= seen:
		return nil
	case !s.found:
		return &EpochRegressedError{Op: opLeaseAcquire, Key: key, Seen: seen, SeenWriter: by, Absent: true}
	}
	return &EpochRegressedError{Op: opLeaseAcquire, Key: key, Seen: seen, SeenWriter: by, Found: rec.Term, FoundWriter: rec.Holder}
}

// drop records that this Lease no longer holds the lease, because of
// gone. The caller holds mu.
func (l *Lease) drop(gone error) {
	l.held, l.term, l.version, l.expiry, l.seq = false, 0, "", time.Time{}, 0
	l.gone, l.gated = gone, nil
}

func (l *Lease) now() time.Time {
	if l.Clock != nil {
		return l.Clock()
	}
	return time.Now()
}

// lockIO takes the right to write the Lease's record, waiting for a write
// of another call to end, or for ctx to end; a ctx ended already takes
// nothing.
func (l *Lease) lockIO(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	l.mu.Lock()
	if l.ioSem == nil {
		l.ioSem = make(chan struct{}, 1)
	}
	sem := l.ioSem
	l.mu.Unlock()
	select {
	case sem <- struct{}{}:
		hook.Took(ctx)
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// unlockIO gives back what lockIO took.
func (l *Lease) unlockIO() { <-l.ioSem }

// lockKey checks the Lease's fields and takes io, for a call that writes
// the record, and returns the record's key. Unless it fails, the caller
// gives io back with unlockIO.
func (l *Lease) lockKey(ctx context.Context) (string, error) {
	key, err := l.check()
	if err != nil {
		return "", err
	}
	if err := l.lockIO(ctx); err != nil {
		return "", err
	}
	return key, nil
}

// heldTerm returns the term the Lease holds, or why it holds none. The
// caller holds io.
func (l *Lease) heldTerm() (uint64, error) {
	l.mu.Lock()
	held, term, gone := l.held, l.term, l.gone
	l.mu.Unlock()
	if !held {
		return 0, l.notHeld(gone)
	}
	return term, nil
}

// draw draws this Lease value's incarnation, once. The caller holds io.
func (l *Lease) draw() error {
	if l.drawn {
		return nil
	}
	if _, err := rand.Read(l.incarnation[:]); err != nil {
		return l.errorf("incarnation: %w", err)
	}
	l.drawn = true
	return nil
}

// check validates the Lease's fields and returns its record's key.
func (l *Lease) check() (string, error) {
	if l.Fence == nil {
		return "", invalidArg("fence", "Lease.Fence is nil")
	}
	if err := checkWriter("holder", l.Holder); err != nil {
		return "", err
	}
	if l.TTL <= 0 {
		return "", invalidArg("ttl", "%v, must be positive", l.TTL)
	}
	if err := l.Fence.engine().checkConfig(); err != nil {
		return "", err
	}
	k, err := keys.Lease(l.Fence.Prefix, l.Name)
	return k, keyErr(err)
}

// Settle replaces the lease record at exactly version (empty: none) with a
// released record at term (1 to 2^32-2) under Holder's name, so that the
// next acquisition takes term + 1 at once: an operator's way out of a lease
// no Lease can take. For a damaged record, or one deleted or set back, term
// is the operator's assertion that no higher term was granted (at least the
// term the refusal saw, and the term of the highest epoch a gated shard
// records, RecordInfo.Epoch >> 32); for a holder gone for good, its
// term or above.
//
// It refuses, writing nothing: ErrNotFound when there is no record and
// version is not empty, ErrConflict when the record has another version (or
// exists, when version is empty), an *InvalidArgumentError for a term below
// that of a record that decodes, and an *EpochRegressedError for a term
// below one this Lease value saw. A lost reply's retry returns nil once
// it landed.
func (l *Lease) Settle(ctx context.Context, version string, term uint64) error {
	key, err := l.check()
	switch {
	case err != nil:
		return err
	case term == 0 || term >= maxLeaseTerm:
		return invalidArg("term", "%d, must be 1 to %d", term, maxLeaseTerm-1)
	}
	if err := l.lockIO(ctx); err != nil {
		return err
	}
	defer l.unlockIO()
	var none [leaseIncSize]byte
	settled := encodeLease(l.Holder, term, 0, none)
	_, err = l.Fence.engine().run(ctx, &change{op: opLeaseSettle, key: key, writer: l.Holder, branded: true, decide: func(s *snapshot) ([][]byte, bool, error) {
		l.mu.Lock()
		seen, by := l.seen, l.seenHolder
		l.mu.Unlock()
		switch {
		case !s.found && version != "":
			return nil, false, fmt.Errorf("writefence: lease %s: settle: no record at %s: %w", esc(l.Name), esc(key), ErrNotFound)
		case s.found && s.damage == nil && bytes.Equal(s.data, settled):
			return nil, true, nil
		case s.found && version == "":
			return nil, false, fmt.Errorf("writefence: lease %s: settle: the record exists, at version %s: %w", esc(l.Name), esc(s.version), ErrConflict)
		case s.found && s.version != version:
			return nil, false, fmt.Errorf("writefence: lease %s: settle: the record is at version %s, not %s: %w", esc(l.Name), esc(s.version), esc(version), ErrConflict)
		}
		if s.found && s.damage == nil {
			if rec, check := decodeLease(s.data); check == "" && term < rec.Term {
				return nil, false, invalidArg("term", "%d is below the term %d the lease record at %s holds: a settle never lowers a term", term, rec.Term, esc(key))
			}
		}
		if term < seen {
			e := &EpochRegressedError{Op: opLeaseSettle, Key: key, Epoch: term, Seen: seen, SeenWriter: by, Absent: !s.found}
			if rec, check := decodeLease(s.data); s.found && s.damage == nil && check == "" {
				e.Found, e.FoundWriter = rec.Term, rec.Holder
			}
			return nil, false, e
		}
		return [][]byte{settled}, false, nil
	}})
	if err == nil {
		l.sawTerm(term, l.Holder)
	}
	return l.wrap(opLeaseSettle, err)
}
