package promise

import (
	"bytes"
	"fmt"
	"slices"
	"strings"

	"github.com/writefence/writefence/internal/keys"
	"github.com/writefence/writefence/internal/record"
)

// leaseValue is what the promises remember of one Lease value.
type leaseValue struct {
	key    string          // its lease record's key, once one of its calls wrote it
	inc    [16]byte        // its incarnation, learned from that write
	hasInc bool            // key and inc are known
	terms  map[uint64]bool // the terms of the records its calls wrote
	expiry int64           // of the last record it wrote that was not a release; 0 for none
	held   bool            // it wrote a record since it last learned a loss or released
	holds  bool            // a Hold of it ever began

	// gated are the shard keys whose Deposed contexts it ends on a loss:
	// those its Holds sealed and its Epoch calls named, since it last
	// held nothing.
	gated map[string]bool

	gots     map[uint64]bool // the epochs its Epoch calls handed out
	maxEnded uint64          // the highest of those, of calls that ended

	// stoppedAt is the index of the End of its last call that left it
	// holding nothing (a loss reported, a Release); -1 for none. After
	// it, Epoch hands out nothing until an acquisition. uncertain: an
	// acquisition was in flight then, and may have landed after.
	stoppedAt    int
	uncertain    bool
	acquiredAt   int // the index of the Begin of its last Acquire or Hold; -1 for none
	acquisitions int // its Acquire and Hold calls in flight
	releasing    int // its Release calls in flight
	releasedAt   int // the index of the End of its last Release; -1 for none
	acqEndedAt   int // the index of the End of its last Acquire or Hold; -1 for none

	// seenTerm is the highest term it held, known from a call that
	// returned nil, and readTerm the highest it read, known from a call
	// refused as held (promise 30).
	seenTerm, readTerm mark

	// since is what its record held since its last acquisition that
	// returned nil (promise 30's renewal): while ok, only its own records
	// of that term, none, or records of lower terms, so that a loss it
	// reports is one of the record gone or set back (fell: it was).
	since leaseSince
	// lossSeen are the Hold contexts of it judged ended by a loss, by ID.
	lossSeen map[int]bool
}

// leaseSince is what one Lease value's record held since its last
// acquisition, at term, from the entry at index at on.
type leaseSince struct {
	term     uint64
	at       int
	ok, fell bool
}

// leasePut is one put of a lease record by a call of a Lease value: its
// key and term, and whether its reply was lost, so that the value may not
// know it landed.
type leasePut struct {
	key  string
	term uint64
	lost bool
}

// incarnation is what the records bearing one incarnation at one lease
// key showed, whoever the history says wrote them: a Hold's background
// renewals may be recorded as no call's, and only the Lease value of that
// incarnation writes its records.
type incarnation struct {
	terms  map[uint64]bool
	expiry int64 // the latest expiry of a record that was not a release
}

func (c *Checker) incarnation(key string, inc [16]byte) *incarnation {
	byInc := c.incs[key]
	if byInc == nil {
		byInc = map[[16]byte]*incarnation{}
		c.incs[key] = byInc
	}
	in := byInc[inc]
	if in == nil {
		in = &incarnation{terms: map[uint64]bool{}}
		byInc[inc] = in
	}
	return in
}

// learnLease notes a lease record that landed at key.
func (c *Checker) learnLease(key string, l record.Lease) {
	in := c.incarnation(key, l.Incarnation)
	in.terms[l.Term] = true
	if l.Expiry != 0 {
		in.expiry = max(in.expiry, l.Expiry)
	}
}

// wrote reports whether lv wrote term, and the latest expiry it wrote.
func (c *Checker) wrote(lv *leaseValue, term uint64) (bool, int64) {
	ok, expiry := lv.terms[term], lv.expiry
	if lv.hasInc {
		in := c.incarnation(lv.key, lv.inc)
		ok, expiry = ok || in.terms[term], max(expiry, in.expiry)
	}
	return ok, expiry
}

func (c *Checker) lease(name string) *leaseValue {
	lv := c.leases[name]
	if lv == nil {
		lv = &leaseValue{terms: map[uint64]bool{}, gated: map[string]bool{}, gots: map[uint64]bool{}, stoppedAt: -1, acquiredAt: -1, releasedAt: -1, acqEndedAt: -1,
			lossSeen: map[int]bool{}}
		c.leases[name] = lv
	}
	return lv
}

// termSource is what promise 17 remembers of one TermSource.
type termSource struct {
	keys     map[string]bool // the shard keys it handed out an epoch of (promise 30)
	gots     map[uint64]bool
	maxEnded uint64
	term     uint64
	hasTerm  bool
	endedAt  int // the index of the End of its first call that reported its term ended; -1 for none
}

func (c *Checker) source(name string) *termSource {
	ts := c.sources[name]
	if ts == nil {
		ts = &termSource{keys: map[string]bool{}, gots: map[uint64]bool{}, endedAt: -1}
		c.sources[name] = ts
	}
	return ts
}

func (c *Checker) beginLease(idx int, fl *flight) {
	call := fl.call
	if call.Lease != "" && call.TermSource == "" {
		c.watchLease(fl)
	}
	if call.Lease != "" && (call.Op == Acquire || call.Op == Hold || call.Op == Release) {
		// What it holds next is what this call does.
		c.lease(call.Lease).since.ok = false
	}
	switch {
	case call.Op == Epoch && call.TermSource != "":
		fl.maxEnded = c.source(call.TermSource).maxEnded
	case call.Lease == "":
	case call.Op == Epoch:
		fl.maxEnded = c.lease(call.Lease).maxEnded
	case call.Op == Acquire, call.Op == Hold:
		lv := c.lease(call.Lease)
		lv.acquiredAt = idx
		lv.acquisitions++
		lv.holds = lv.holds || call.Op == Hold
	case call.Op == Release:
		// Giving the lease up deposes nobody.
		lv := c.lease(call.Lease)
		lv.held = false
		lv.gated = map[string]bool{}
		lv.releasing++
	}
}

// putLease judges a put of a lease record made for call over prev
// (promises 12 and 13) and learns what the Lease value wrote.
func (c *Checker) putLease(idx int, call *Call, fl *flight, ch *Change, prev, nv *value) {
	l, check := record.DecodeLease(nv.data)
	if check != "" {
		return
	}
	var p record.Lease
	pok := false
	if prev != nil {
		p, check = record.DecodeLease(prev.data)
		pok = check == ""
		// 7: only Lease.Settle, an operator's, replaces a damaged
		// lease record; no Lease value does.
		if !pok && call.Lease != "" {
			c.report(idx, 7, "%s overwrote the lease record at %s, which does not decode (%s)", who(call), quote(ch.Key), check)
		}
	}
	if pok && l.Term < p.Term {
		c.report(idx, 12, "%s wrote term %d over term %d at %s", who(call), l.Term, p.Term, quote(ch.Key))
	}
	// A term is taken once: a write that holds the lease over a record of
	// its term is the renewal of that term's holder, never a release's or
	// another's (an operator's settle takes no term).
	if pok && call.Op != Settled && l.Expiry != 0 && l.Term == p.Term && (l.Incarnation != p.Incarnation || p.Expiry == 0) {
		c.report(idx, 12, "%s took term %d again at %s, over a record of it %s", who(call), l.Term, quote(ch.Key), takenHow(l, p))
	}
	terms := c.terms[ch.Key]
	if terms == nil {
		terms = map[uint64][16]byte{}
		c.terms[ch.Key] = terms
	}
	switch inc, ok := terms[l.Term]; {
	case call.Op == Settled:
	case ok && inc != l.Incarnation:
		c.report(idx, 12, "%s wrote term %d as incarnation %x of %s; incarnation %x wrote it first", who(call), l.Term, l.Incarnation, quote(l.Holder), inc)
	case !ok:
		terms[l.Term] = l.Incarnation
	}
	// An operator's settle takes no lease: it writes one released.
	// The acquirer judges the expiry by its own clock, read before its
	// write landed.
	if at, ok := byClock(ch.At, call.Skew); ok && pok && call.Op != Settled && l.Incarnation != p.Incarnation && p.Expiry != 0 && p.Expiry > at {
		c.report(idx, 13, "%s took term %d over %s's term %d, which expires at %d, after this write at %d by its clock", who(call), l.Term, quote(p.Holder), p.Term, p.Expiry, at)
	}

	c.learnLease(ch.Key, l)

	if call.Lease == "" {
		return
	}
	lv := c.lease(call.Lease)
	if !lv.terms[l.Term] && (call.Op == Acquire || call.Op == Hold) {
		// A new acquisition: the value gated nothing since it last held.
		lv.gated = map[string]bool{}
	}
	lv.terms[l.Term] = true
	lv.key, lv.inc, lv.hasInc = ch.Key, l.Incarnation, true
	if l.Expiry != 0 {
		lv.expiry = l.Expiry
		lv.held = true
		if call.Op == Hold {
			for _, k := range call.HoldsShards {
				lv.gated[k] = true
			}
		}
	}
	if fl != nil {
		fl.leaseTerms = append(fl.leaseTerms, l.Term)
		fl.leasePuts = append(fl.leasePuts, leasePut{key: ch.Key, term: l.Term})
		fl.released = fl.released || l.Expiry == 0
	}
}

// holdsRecord reports whether the lease record lv wrote holds lv's
// incarnation, not released, at term (any term when 0): an acquisition
// that finds there what it would write, an earlier write of its own at
// the same expiry, writes nothing.
func (c *Checker) holdsRecord(lv *leaseValue, term uint64) bool {
	if !lv.hasInc {
		return false
	}
	l, check := decodeLease(c.st.values[lv.key])
	return check == "" && l.Incarnation == lv.inc && l.Expiry != 0 && (term == 0 || l.Term == term)
}

// takenHow says how the record p of a term l took again was left.
func takenHow(l, p record.Lease) string {
	if l.Incarnation == p.Incarnation {
		return "its own value released"
	}
	return fmt.Sprintf("by %s, incarnation %x", quote(p.Holder), p.Incarnation)
}

// putBrand judges a put of the brand key made for call (promise 11): a
// brand is created once and never overwritten.
func (c *Checker) putBrand(idx int, call *Call, fl *flight, ch *Change, prev *value) {
	if prev != nil {
		c.report(idx, 11, "%s overwrote the brand %s with %s", who(call), quote(string(prev.data)), quote(string(ch.Data)))
		return
	}
	c.claims[ch.Key]++
	if n := c.claims[ch.Key]; n > 1 {
		c.report(idx, 11, "%s created the brand %s, the %d-th create since it was last deleted", who(call), quote(string(ch.Data)), n)
	}
	if fl != nil {
		fl.claimed = true
	}
}

// checkBrandAlways judges promise 10's second half: no put of a Fence
// whose Brand is BrandVerifyAlways lands while the brand holds another
// identity. On a store that is no BrandedPutter the brand is read right
// before the write, so only a brand that held another identity since
// before the call began counts.
func (c *Checker) checkBrandAlways(idx int, call *Call, fl *flight, ch *Change) {
	if !call.BrandAlways || fl == nil {
		return
	}
	bk := keys.Brand(call.Prefix)
	// The probe's scratch keys are judged as every other write: the
	// Fence reads the brand before its probe writes them.
	if ch.Key == bk || c.st.changedSince(bk, fl.begin) {
		return
	}
	id := identityOf(call)
	switch b := c.st.values[bk]; {
	case b == nil:
		c.report(idx, 10, "%s wrote %s while the brand is absent", who(call), quote(ch.Key))
	case !bytes.Equal(b.data, []byte(id)):
		c.report(idx, 10, "%s wrote %s while the brand holds %s", who(call), quote(ch.Key), quote(string(b.data)))
	}
}

// checkProbeBrand judges promise 3 on a probe's scratch writes: a Fence
// that reads the brand reads it before its probe writes, and refuses a
// brand of another identity, so no probe of a call of its (but a Claim,
// which writes the brand itself) writes while the brand has held another
// identity since before the call began. A brand absent is the mode's to
// claim or refuse after the probe.
func (c *Checker) checkProbeBrand(idx int, call *Call, fl *flight, ch *Change) {
	if !call.BrandReads || call.Op == Claim || fl == nil || !strings.HasPrefix(ch.Key, keys.Probe(call.Prefix)) {
		return
	}
	bk := keys.Brand(call.Prefix)
	if c.st.changedSince(bk, fl.begin) {
		return
	}
	if b := c.st.values[bk]; b != nil && !bytes.Equal(b.data, []byte(identityOf(call))) {
		c.report(idx, 3, "%s probed the store, writing %s, while the brand held %s: it is refused as of another identity, and writes nothing", who(call), quote(ch.Key), quote(string(b.data)))
	}
}

// checkClaim judges promise 11 at a Claim's end: every claimer learns
// the winner's identity. One that ended nil: a claim that says it wrote
// the brand did, and the brand holds its identity. One refused as of
// another identity (ErrWire): the brand held another value during the
// call, the one the refusal names (Found) when the history records it.
func (c *Checker) checkClaim(idx int, fl *flight) {
	call := fl.call
	if call.Op != Claim {
		return
	}
	if call.Is.Has("wire") {
		other, named := false, call.Found == nil
		for _, v := range fl.seen {
			other = other || v != nil && !bytes.Equal(v.data, []byte(identityOf(call)))
			named = named || v != nil && call.Found != nil && string(v.data) == *call.Found
		}
		switch {
		case !other:
			c.report(idx, 11, "%s was refused (%v), but the brand never held another identity during the call", who(call), call.Err)
		case !named:
			c.report(idx, 11, "%s was refused naming %s, which the brand never held during the call", who(call), quote(*call.Found))
		}
	}
	if call.Err != nil {
		return
	}
	if call.Claimed && !fl.claimed {
		c.report(idx, 11, "%s reports it claimed the brand, but no create of it landed", who(call))
	}
	bk := keys.Brand(call.Prefix)
	if c.st.changedOutsideSince(bk, fl.begin) {
		return
	}
	if b := c.st.values[bk]; b == nil || !bytes.Equal(b.data, []byte(identityOf(call))) {
		got := "absent"
		if b != nil {
			got = quote(string(b.data))
		}
		c.report(idx, 11, "%s returned nil while the brand is %s", who(call), got)
	}
}

// checkOperatorRead judges promise 33 at the end of a VerifyBrand or an
// InspectLease (Call.Key the key it reads): what it returned, the key held
// at some moment of the call.
func (c *Checker) checkOperatorRead(idx int, fl *flight) {
	call := fl.call
	switch {
	case call.Op == Verify:
		// named: the brand held what the refusal names (Found), which is
		// not the identity.
		held, named := false, false
		for _, v := range fl.seen {
			switch {
			case v != nil && bytes.Equal(v.data, []byte(identityOf(call))):
				held = true
			case v == nil && call.Found == nil, v != nil && call.Found != nil && string(v.data) == *call.Found:
				named = true
			}
		}
		switch {
		case call.Err == nil && !held:
			c.report(idx, 33, "%s returned nil, but the brand never held %s during the call", who(call), quote(identityOf(call)))
		case call.Is.Has("wire") && !named:
			c.report(idx, 33, "%s was refused (%v), but the brand never held what the refusal names during the call", who(call), call.Err)
		}
	case call.Op != Inspect:
	case call.Err == nil:
		found := false
		for _, v := range fl.seen {
			l, check := decodeLease(v)
			l.Incarnation = [record.LeaseIncSize]byte{} // InspectLease does not tell it
			if check == "" && call.Leased != nil && l == *call.Leased {
				found = true
			}
		}
		if !found {
			c.report(idx, 33, "%s returned a lease record %+v the key never held during the call", who(call), call.Leased)
		}
	case call.Is.Has("not found") && !slices.Contains(fl.seen, nil):
		c.report(idx, 33, "%s found no lease record, but the key held one throughout the call", who(call))
	}
}

// decodeLease decodes a lease record's value; a check failed for none.
func decodeLease(v *value) (record.Lease, string) {
	if v == nil {
		return record.Lease{}, "absent"
	}
	return record.DecodeLease(v.data)
}

// endLease judges the end of a lease's or a term source's call: promises
// 14 to 17.
func (c *Checker) endLease(idx int, fl *flight) {
	call := fl.call
	if call.Op == Epoch && call.TermSource != "" {
		c.endTermSource(idx, fl)
		return
	}
	if call.Lease == "" {
		return
	}
	lv := c.lease(call.Lease)
	if _, began := c.flights[call.ID]; began && (call.Op == Acquire || call.Op == Hold) {
		lv.acquisitions--
		lv.acqEndedAt = idx
	}
	if call.Op == Hold {
		c.checkHoldDeposed(idx, fl)
	}
	if _, began := c.flights[call.ID]; began && (call.Op == Acquire || call.Op == Hold) && call.Err == nil && len(fl.leaseTerms) == 0 && !c.holdsRecord(lv, call.Term) {
		c.report(idx, 13, "%s returned nil, but no write of its lease record landed during the call, nor does the record hold it: it holds the lease beside the holder the record names", who(call))
	}
	if call.Op == Epoch && call.Err == nil {
		c.checkLeaseEpoch(idx, fl, lv)
	}
	c.checkLeaseRefusal(idx, fl, lv)
	c.leaseSeen(idx, fl, lv)
	if call.Op == Hold {
		c.checkHold(idx, fl)
	}
	lost, expired := call.Is.Has("lease lost"), call.Is.Has("lease expired")
	if lost || expired {
		c.checkLossEnds(idx, fl, lv, expired)
	}
	if lost || call.Op == Release {
		lv.stoppedAt, lv.uncertain = idx, lv.acquisitions > 0
	}
	if _, began := c.flights[call.ID]; began && call.Op == Release {
		lv.releasing--
		lv.releasedAt = idx
	}
	if call.Is.Has("corrupt") {
		// A Lease that finds its record damaged drops the lease and
		// what it gates, telling no later call.
		lv.held = false
		lv.gated = map[string]bool{}
	}
}

// checkLeaseEpoch judges promise 14 on an Epoch of a Lease that returned
// nil.
func (c *Checker) checkLeaseEpoch(idx int, fl *flight, lv *leaseValue) {
	call := fl.call
	switch {
	case lv.gots[call.Got]:
		c.report(idx, 14, "%s handed out epoch %d twice", who(call), call.Got)
	case call.Got <= fl.maxEnded:
		c.report(idx, 14, "%s handed out epoch %d, not above %d, handed out before it began", who(call), call.Got, fl.maxEnded)
	}
	wrote, expiry := c.wrote(lv, call.Got>>32)
	if !wrote {
		c.report(idx, 14, "%s handed out epoch %d of term %d, which this Lease value never wrote", who(call), call.Got, call.Got>>32)
	}
	// The Lease's clock is read after the call began: a call that began at
	// or after the expiry of every record the value wrote, by that clock,
	// must refuse.
	if start, ok := byClock(call.Start, call.Skew); ok && expiry != 0 && start >= expiry {
		c.report(idx, 14, "%s handed out epoch %d at %d by its clock, at or after the expiry %d", who(call), call.Got, start, expiry)
	}
	if lv.stoppedAt >= 0 && fl.begin > lv.stoppedAt && !lv.uncertain && lv.acquiredAt < lv.stoppedAt {
		c.report(idx, 14, "%s handed out epoch %d after the Lease value lost or released the lease, with no acquisition since", who(call), call.Got)
	}
	// A loss its Hold's renewer learned: the Hold's context, seen running
	// at last, was done at Begin, the lease lost (not expired, which a
	// renewal may overcome), with no Release that may have ended it and no
	// acquisition in flight or ended since.
	for _, h := range call.Before {
		last, seen := c.running[call.Proc][h.ID]
		if h.ID == 0 || h.Kind != "hold" || h.Lease != call.Lease || !h.Done || !h.Is.Has("lease lost") || h.Is.Has("lease expired") || !seen {
			continue
		}
		if lv.releasing == 0 && lv.releasedAt < last && lv.acquisitions == 0 && lv.acqEndedAt <= last {
			c.report(idx, 14, "%s handed out epoch %d after its Hold's renewer learned the lease lost (%v), with no acquisition since", who(call), call.Got, h.Cause)
		}
	}
	lv.gots[call.Got] = true
	lv.maxEnded = max(lv.maxEnded, call.Got)
	if call.Key != "" {
		lv.gated[call.Key] = true
	}
}

// giveUpRefusals are the errors on which a Hold may release the lease it
// took: a refusal no retry changes, or the lease lost or expired; and
// a cancellation or a deadline once the ctx it was given ended, not a
// seal's attempt timing out.
var giveUpRefusals = []string{"stale", "regressed", "corrupt", "wire", "invalid", "too large", "untrusted", "permission", "unsupported",
	"lease lost", "lease expired"}

// checkHold judges promise 15 on the end of a Hold.
func (c *Checker) checkHold(idx int, fl *flight) {
	call := fl.call
	if call.Err != nil {
		explained := hasAny(call.Is, giveUpRefusals...) || call.CtxEnded && hasAny(call.Is, "canceled", "deadline")
		switch {
		case fl.released && !explained:
			c.report(idx, 15, "%s released the lease and returned %v, which no refusal explains", who(call), call.Err)
		case !fl.released && len(fl.leaseTerms) > 0 && !explained && !hasAny(call.Is, "unknown", "takeover timeout", "lease held"):
			// It took the lease: it returns only once its seals land,
			// or on a refusal, a loss or its ctx ended. (An acquisition
			// whose reply was lost may learn nothing, or find the lease
			// since taken by another.)
			c.report(idx, 15, "%s took the lease and returned %v without sealing, which no refusal explains", who(call), call.Err)
		}
		return
	}
	terms := map[uint64]bool{}
	for _, t := range fl.leaseTerms {
		terms[t] = true
	}
	if call.Term != 0 {
		terms[call.Term] = true
	}
	atTerm := func(v *value) bool {
		return v.sound() && v.rec.h.Writer == call.Holder && (len(terms) == 0 || terms[v.rec.h.Epoch>>32])
	}
	for _, k := range call.HoldsShards {
		// Its own seal, or the shard sealed at its term by its holder
		// during its flight (a term its Lease held before, taken again):
		// a seal that finds that needs no write.
		held := []*value{c.st.values[k]}
		if k == call.Key {
			held = fl.seen
		}
		sealed := len(terms) > 0 && slices.ContainsFunc(held, atTerm)
		for _, w := range fl.writes {
			if w.ch.Key == k && atTerm(w.v) {
				sealed = true
			}
		}
		if !sealed {
			c.report(idx, 15, "%s returned nil without sealing %s at its term as %s", who(call), quote(k), quote(call.Holder))
		}
	}
}

// checkLossEnds judges promise 16 on a call of a Lease value that
// reported the lease lost or expired: the value's Hold context and the
// Deposed contexts of the shards it gates are done by then.
func (c *Checker) checkLossEnds(idx int, fl *flight, lv *leaseValue, expired bool) {
	call := fl.call
	pending := false // a Hold context of the value was in force at Begin
	for _, p := range pairContexts(call.Before, call.After) {
		if p.a.Kind != "hold" || p.a.Lease != call.Lease || p.b.Done {
			continue
		}
		pending = true
		if !p.a.Done {
			c.report(idx, 16, "%s reported the lease %s, but its Hold's context is not done", who(call), lossWord(expired))
		}
	}
	// The call that learns a loss ends the Deposed contexts; a later call
	// that only repeats it ends none. A Hold's context still in force at
	// Begin says the loss was not learned before, as does a value that
	// never held and so has no renewer to learn it. Every expiry a call
	// reports ends them afresh.
	if expired || pending || !lv.holds && lv.held {
		for _, p := range pairContexts(call.Before, call.After) {
			if p.a.Kind == "deposed" && lv.gated[p.a.Key] && !p.b.Done && !p.a.Done {
				c.report(idx, 16, "%s reported the lease %s, but the Deposed context of %s it gates is not done", who(call), lossWord(expired), quote(p.a.Key))
			}
		}
	}
	if !expired {
		lv.held = false
		lv.gated = map[string]bool{}
	}
}

// contextsSeen judges promise 16 on the contexts a process shows at a
// call's Begin or End: a Hold's context
// ended by a loss or an expiry that no call learned (its renewer did) left
// no Deposed context of a shard its Lease gates running, of those seen
// running beside it, as the Lease ends those first. A Hold's context a
// Release may have ended, ending none, is not judged. It needs the
// contexts' IDs.
func (c *Checker) contextsSeen(idx int, call *Call, snap []Context) {
	beside := c.beside[call.Proc]
	if beside == nil {
		beside = map[int]int{}
		c.beside[call.Proc] = beside
	}
	c.deposedSeen(idx, call, snap)
	c.checkHoldLoss(idx, call, snap)
	holds := map[int]Context{}
	for _, h := range snap {
		if h.ID != 0 && h.Kind == "hold" {
			holds[h.ID] = h
		}
	}
	for _, d := range snap {
		if d.ID == 0 || d.Kind != "deposed" || d.Done {
			continue
		}
		for id, h := range holds {
			if !h.Done {
				beside[d.ID] = id
			}
		}
		h, ok := holds[beside[d.ID]]
		if !ok || !h.Done || h.Lease == "" {
			continue
		}
		lv := c.lease(h.Lease)
		released := lv.releasing > 0 || lv.releasedAt > lv.acquiredAt
		if lv.gated[d.Key] && (h.Is.Has("lease expired") || h.Is.Has("lease lost") && lv.held && !released) {
			c.report(idx, 16, "%s shows the Hold's context of %s ended (%v), but the Deposed context of %s it gates, seen running beside it, not done", who(call), quote(h.Lease), h.Cause, quote(d.Key))
		}
	}
}

// deposedSeen notes the contexts a process shows running, and judges
// promise 18 on a Deposed context first seen ended as stale: a refusal of
// a write of that Fence (the process's) ended it, so a call of the process
// that may depose its shard was in flight since it was last seen running.
func (c *Checker) deposedSeen(idx int, call *Call, snap []Context) {
	running := c.running[call.Proc]
	if running == nil {
		running = map[int]int{}
		c.running[call.Proc] = running
	}
	fl := c.flights[call.ID]
	atBegin := fl != nil && fl.begin == idx
	for _, d := range snap {
		if d.ID == 0 {
			continue
		}
		if !d.Done {
			running[d.ID] = idx
			continue
		}
		last, seen := running[d.ID]
		if d.Kind != "deposed" || !seen || !d.Is.Has("stale") || hasAny(d.Is, endings...) {
			continue
		}
		delete(running, d.ID) // judged once
		self := 0
		if atBegin && slices.Contains(deposerKeys(call), d.Key) {
			self = 1
		}
		if w := c.writers[deposerKey(call.Proc, d.Key)]; w == nil || w.inFlight <= self && w.lastEnd <= last {
			c.report(idx, 18, "%s shows the Deposed context of %s ended as stale (%v), but no write of its Fence of that shard ran since it was seen running", who(call), quote(d.Key), d.Cause)
		}
	}
}

// checkHoldDeposed judges promise 18 on a Hold refused as stale: its
// seal's refusal cancelled the Deposed contexts of the shard it names,
// with the refusal as the cause. Of a Hold naming several shards, the
// refusal is of one, which one the history does not tell.
func (c *Checker) checkHoldDeposed(idx int, fl *flight) {
	call := fl.call
	if !call.Is.Has("stale") || call.Is.Has("unknown") || len(call.HoldsShards) == 0 {
		return
	}
	ended, running := false, []string{}
	for _, p := range pairContexts(call.Before, call.After) {
		if p.a.Kind != "deposed" || !slices.Contains(call.HoldsShards, p.a.Key) || p.b.Done {
			continue
		}
		switch {
		case !p.a.Done:
			running = append(running, p.a.Key)
		case p.a.Is.Has("stale") || hasAny(p.a.Is, endings...):
			ended = true
		default:
			c.report(idx, 18, "%s was refused as stale, but the Deposed context of %s ended with %v", who(call), quote(p.a.Key), p.a.Cause)
		}
	}
	if len(running) > 0 && (len(call.HoldsShards) == 1 || !ended) {
		c.report(idx, 18, "%s was refused as stale, but the Deposed context of %s is not done", who(call), quote(running[0]))
	}
}

func lossWord(expired bool) string {
	if expired {
		return "expired"
	}
	return "lost"
}

// endTermSource judges promise 17 on an Epoch of a TermSource.
func (c *Checker) endTermSource(idx int, fl *flight) {
	call := fl.call
	ts := c.source(call.TermSource)
	if call.Term != 0 {
		// Its term function reported a term during the call: the first
		// it reports is the source's, and another ends it.
		switch {
		case !ts.hasTerm:
			ts.term, ts.hasTerm = call.Term, true
		case call.Term != ts.term && call.Err == nil:
			c.report(idx, 17, "%s handed out epoch %d after its term function reported term %d; the source holds term %d", who(call), call.Got, call.Term, ts.term)
		}
		if call.Term != ts.term && ts.endedAt < 0 {
			ts.endedAt = idx
		}
	}
	if call.Err != nil {
		if call.Is.Has("term ended") && ts.endedAt < 0 {
			ts.endedAt = idx
		}
		return
	}
	switch {
	case ts.gots[call.Got]:
		c.report(idx, 17, "%s handed out epoch %d twice", who(call), call.Got)
	case call.Got <= fl.maxEnded:
		c.report(idx, 17, "%s handed out epoch %d, not above %d, handed out before it began", who(call), call.Got, fl.maxEnded)
	}
	if term := call.Got >> 32; ts.hasTerm && term != ts.term {
		c.report(idx, 17, "%s handed out epoch %d of term %d; the source holds term %d", who(call), call.Got, term, ts.term)
	} else if !ts.hasTerm {
		ts.term, ts.hasTerm = term, true
	}
	if ts.endedAt >= 0 && fl.begin > ts.endedAt {
		c.report(idx, 17, "%s handed out epoch %d after the source reported its term ended", who(call), call.Got)
	}
	ts.gots[call.Got] = true
	ts.maxEnded = max(ts.maxEnded, call.Got)
}

func hasAny(m Matches, names ...string) bool {
	for _, n := range names {
		if m.Has(n) {
			return true
		}
	}
	return false
}
