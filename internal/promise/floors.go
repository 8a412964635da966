package promise

import (
	"math"
	"slices"
	"strings"

	"github.com/writefence/writefence/internal/keys"
	"github.com/writefence/writefence/internal/record"
)

// What promises 29 to 32 remember: the floor survives the record.

// mark is an epoch (or a term) known from the history, and the index of
// the entry that made it known: a call that began after that entry is held
// to it.
type mark struct {
	epoch uint64
	at    int
}

// seenKey names what one process (one Fence) saw of one record key.
func seenKey(proc, key string) string { return proc + "\x00" + key }

// learnSeen raises what proc saw of key to epoch, known from the entry at
// idx.
func (c *Checker) learnSeen(idx int, proc, key string, epoch uint64) {
	if epoch == 0 || key == "" {
		return
	}
	k := seenKey(proc, key)
	if m, ok := c.seenBy[k]; !ok || epoch > m.epoch {
		c.seenBy[k] = mark{epoch: epoch, at: idx}
	}
}

// seenBefore is the highest epoch call's process saw of key, known before
// call began (fl.begin); false when none.
func (c *Checker) seenBefore(fl *flight, key string) (mark, bool) {
	m, ok := c.seenBy[seenKey(fl.call.Proc, key)]
	return m, ok && m.at < fl.begin
}

// endSeen learns, at the End of a call that returned nil, what its
// Fence saw of the record (a lower bound: what the call returned or
// wrote), and forgets it on a Forget; and judges promise 32 on a Check
// and 30 on a TermSource's epoch.
func (c *Checker) endSeen(idx int, fl *flight) {
	call := fl.call
	if call.Op == Forget {
		if call.Err == nil {
			delete(c.seenBy, seenKey(call.Proc, call.Key))
			delete(c.heldBy, seenKey(call.Proc, call.Key))
		}
		return
	}
	c.checkRegressSeen(idx, fl)
	c.checkRefusedRegressed(idx, fl)
	switch {
	case call.Op == Check:
		c.checkCheck(idx, fl)
	case call.Op == Epoch && call.TermSource != "":
		c.checkTermSourceRead(idx, fl)
	}
	if call.Err != nil {
		return
	}
	c.checkFloorKept(idx, fl)
	switch call.Op {
	case Push, Update, Commit, Seal, Settle, Check:
		c.learnSeen(idx, call.Proc, call.Key, call.Epoch)
	case Latest:
		if call.Read != nil {
			c.learnSeen(idx, call.Proc, call.Key, call.Read.Epoch)
		}
	case Open, Collect:
		// They read the record (Inspect) but return no epoch: their
		// Fence saw at least the lowest the record held during the call.
		if e, ok := lowestSound(fl.seen); ok {
			c.learnSeen(idx, call.Proc, call.Key, e)
		}
	case Hold:
		for _, w := range fl.writes {
			if w.v.sound() && w.v.rec.h.Writer == call.Holder {
				c.learnSeen(idx, call.Proc, w.ch.Key, w.v.rec.h.Epoch)
			}
		}
	}
}

// checkRegression judges promises 29 and 31 on a put of a record made for
// call over prev.
func (c *Checker) checkRegression(idx int, call *Call, fl *flight, key string, prev, nv *value) {
	if fl == nil {
		return
	}
	n := nv.record()
	h, found := prev.header()
	found = found || prev.sound()
	below := func(epoch uint64) bool { return prev == nil || found && h.Epoch < epoch }
	if m, ok := c.seenBefore(fl, key); ok {
		switch {
		case call.Op == Settle && n.h.Epoch <= m.epoch:
			c.report(idx, 29, "%s settled at epoch %d, not above epoch %d its Fence saw", who(call), n.h.Epoch, m.epoch)
		case call.Op != Settle && below(m.epoch):
			c.report(idx, 29, "%s landed epoch %d over %s, below epoch %d its Fence saw", who(call), n.h.Epoch, describe(prev), m.epoch)
		}
	}
	if !call.KeepFloor {
		return
	}
	if m, ok := c.floors[key]; ok && m.at < fl.begin {
		switch {
		case call.Op == Settle && n.h.Epoch <= m.epoch:
			c.report(idx, 31, "%s settled at epoch %d under KeepFloor, not above the floor %d", who(call), n.h.Epoch, m.epoch)
		case call.Op != Settle && below(m.epoch):
			c.report(idx, 31, "%s landed epoch %d under KeepFloor over %s, below the floor %d", who(call), n.h.Epoch, describe(prev), m.epoch)
		}
	}
	if prev == nil && (call.Op == Push || call.Op == Update || call.Op == Commit) {
		c.report(idx, 31, "%s created the record under KeepFloor, which only a seal or a settle does", who(call))
	}
}

// describe names a record's content in a message.
func describe(v *value) string {
	switch h, ok := v.header(); {
	case v == nil:
		return "no record"
	case ok:
		return "epoch " + uitoa(h.Epoch)
	}
	return "a record whose header does not decode"
}

func uitoa(n uint64) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + n%10)
		if n /= 10; n == 0 {
			return string(b[i:])
		}
	}
}

// putFloor learns a floor a call entered (promise 31): the record key it
// is the floor of, and its epoch.
func (c *Checker) putFloor(idx int, p string, ch *Change) {
	h, check := record.DecodeHeader(ch.Data)
	if check != "" {
		return
	}
	key := keys.Shards(p) + strings.TrimPrefix(ch.Key, keys.Floors(p))
	if m, ok := c.floors[key]; !ok || h.Epoch > m.epoch {
		c.floors[key] = mark{epoch: h.Epoch, at: idx}
	}
}

// outsideFloor forgets a floor something outside the package changed.
func (c *Checker) outsideFloor(p string, floorKey string) {
	delete(c.floors, keys.Shards(p)+strings.TrimPrefix(floorKey, keys.Floors(p)))
}

// checkCollectRegression judges promise 29 on a Collect's delete of a
// blob of its shard: none while the record was absent or below what the
// Collect's Fence saw of it, throughout the collection so far.
func (c *Checker) checkCollectRegression(idx int, call *Call, fl *flight, blobKey string) {
	k, ok := c.collectedShard(call, fl, blobKey)
	if !ok {
		return
	}
	m, ok := c.seenBefore(fl, k.key)
	if !ok || !belowThroughout(fl, m.epoch) {
		return
	}
	c.report(idx, 29, "%s deleted blob %s while the record was absent or below epoch %d its Fence saw, throughout", who(call), quote(blobKey), m.epoch)
}

// checkCollectFloor judges promise 31 on a Collect's delete of a blob of
// its shard: under KeepFloor, or with RecordGone (which reads the floor
// whatever KeepFloor), none while the record was absent or below the
// floor kept before the call began, throughout the collection so far.
func (c *Checker) checkCollectFloor(idx int, call *Call, fl *flight, blobKey string) {
	if !call.KeepFloor && !call.RecordGone {
		return
	}
	k, ok := c.collectedShard(call, fl, blobKey)
	if !ok {
		return
	}
	m, ok := c.floors[k.key]
	if !ok || m.at >= fl.begin || !belowThroughout(fl, m.epoch) {
		return
	}
	c.report(idx, 31, "%s deleted blob %s while the record was absent or below the floor %d, throughout", who(call), quote(blobKey), m.epoch)
}

// collectedShard is the shard of a Collect call whose flight deleted
// blobKey, when blobKey is of that shard's blob space.
func (c *Checker) collectedShard(call *Call, fl *flight, blobKey string) (shardKey, bool) {
	if fl == nil {
		return shardKey{}, false
	}
	k, ok := c.callShard(call)
	if !ok {
		return k, false
	}
	space, ok := c.spaceOf(call)
	return k, ok && strings.HasPrefix(blobKey, space)
}

// belowThroughout reports whether the record was absent or below epoch
// all through fl: no content it took is one the call may have judged by.
func belowThroughout(fl *flight, epoch uint64) bool {
	for _, v := range fl.seen {
		if h, found := v.header(); v != nil && (!found || h.Epoch >= epoch) {
			return false
		}
	}
	return true
}

// leaseSeen learns, at the End of a call of a Lease value that returned
// nil, the highest term it wrote or was handed out of (promise 30).
func (c *Checker) leaseSeen(idx int, fl *flight, lv *leaseValue) {
	call := fl.call
	if call.Err != nil {
		return
	}
	term := call.Term
	for _, t := range fl.leaseTerms {
		term = max(term, t)
	}
	if call.Op == Epoch {
		term = max(term, call.Got>>32)
	}
	if term > lv.seenTerm.epoch {
		lv.seenTerm = mark{epoch: term, at: idx}
	}
}

// leaseFloor is the highest term lv held or read, known before fl began
// (at any time for a change of a call that ended), and which it was.
func (c *Checker) leaseFloor(lv *leaseValue, fl *flight) (uint64, string) {
	var term uint64
	how := ""
	for _, m := range [...]struct {
		mark
		how string
	}{{lv.seenTerm, "held"}, {lv.readTerm, "read"}} {
		if m.epoch > term && (fl == nil || m.at < fl.begin) {
			term, how = m.epoch, m.how
		}
	}
	return term, how
}

// checkLeaseRegression judges promise 30 on a put at key of a lease
// record made for a call of a Lease value over prev: none over a record
// absent or below the highest term the value held or read, known before
// the call began, or written by the call before with a reply it got (a
// Hold's renewals after its acquisition); of a call that ended (its
// Hold's renewer), the highest known at all.
func (c *Checker) checkLeaseRegression(idx int, call *Call, fl *flight, key string, prev *value) {
	if call.Lease == "" {
		return
	}
	floor, how := c.leaseFloor(c.lease(call.Lease), fl)
	if fl != nil {
		for _, p := range fl.leasePuts {
			if !p.lost && p.key == key && p.term > floor {
				floor, how = p.term, "wrote in this call"
			}
		}
	}
	if floor == 0 {
		return
	}
	if prev == nil {
		c.report(idx, 30, "%s wrote its lease record over no record, after it %s term %d", who(call), how, floor)
		return
	}
	if p, check := record.DecodeLease(prev.data); check == "" && p.Term < floor {
		c.report(idx, 30, "%s wrote its lease record over term %d, after it %s term %d", who(call), p.Term, how, floor)
	}
}

// leaseKeyOf is the key of the lease record call's Lease value keeps:
// by its LeaseName, else the key it wrote; "" when neither is known.
func (c *Checker) leaseKeyOf(call *Call) string {
	if call.LeaseName != "" {
		if k, err := keys.Lease(call.Prefix, call.LeaseName); err == nil {
			return k
		}
	}
	if lv := c.lease(call.Lease); lv.hasInc {
		return lv.key
	}
	return ""
}

// watchLease has fl, of a Lease value's call, follow its lease record's
// contents (fl.leaseSeen) until it ends.
func (c *Checker) watchLease(fl *flight) {
	key := c.leaseKeyOf(fl.call)
	if key == "" {
		return
	}
	fl.leaseSeen = []*value{c.st.values[key]}
	c.leaseAt[key] = append(c.leaseAt[key], fl)
}

// unwatchLease undoes watchLease at fl's end.
func (c *Checker) unwatchLease(fl *flight) {
	for key, fls := range c.leaseAt {
		if slices.Contains(fls, fl) {
			if c.leaseAt[key] = without(fls, fl); len(c.leaseAt[key]) == 0 {
				delete(c.leaseAt, key)
			}
		}
	}
}

// leaseRecordSet follows, for promise 30's renewal, what the lease record
// at key now holds, v, for each Lease value it is the record of: its
// own record of the term it took, none or a lower term (fell), or
// anything else, after which the value's loss may be another's doing.
func (c *Checker) leaseRecordSet(key string, v *value) {
	for _, lv := range c.leases {
		s := &lv.since
		if !s.ok || lv.key != key {
			continue
		}
		l, check := decodeLease(v)
		switch {
		case v == nil, check == "" && l.Term < s.term:
			s.fell = true
		case check == "" && l.Term == s.term && l.Incarnation == lv.inc:
		default:
			s.ok = false
		}
	}
}

// checkLeaseRefusal judges promise 30 at the end of a call of Lease value
// lv: an acquisition refused as held while its record was absent or
// below a term the value held or read, throughout, is refused so and
// not as regressed; a Renew or an Epoch that reports the lease lost,
// the record having only gone or gone back since the value took it,
// reports it regressed. It learns the term a refusal as held read, and
// what the value took.
func (c *Checker) checkLeaseRefusal(idx int, fl *flight, lv *leaseValue) {
	call := fl.call
	held := call.Is.Has("lease held") && len(fl.leaseSeen) > 0
	if held && (call.Op == Acquire || call.Op == Hold) && !call.Is.Has("regressed") {
		if floor, how := c.leaseFloor(lv, fl); floor > 0 && leaseBelowThroughout(fl.leaseSeen, floor) {
			c.report(idx, 30, "%s was refused as held (%v) while its lease record was absent or below term %d it %s, throughout: not as regressed", who(call), call.Err, floor, how)
		}
	}
	if t, ok := lowestTerm(fl.leaseSeen); held && ok && t > lv.readTerm.epoch {
		lv.readTerm = mark{epoch: t, at: idx}
	}
	if s := lv.since; s.ok && s.fell && (call.Op == Renew || call.Op == Epoch) && call.Is.Has("lease lost") && !call.Is.Has("regressed") {
		c.report(idx, 30, "%s reported the lease lost (%v), not regressed, though since it took term %d its record only went absent or below it", who(call), call.Err, s.term)
	}
	_, began := c.flights[call.ID]
	if !began || call.Err != nil || call.Op != Acquire && call.Op != Hold || lv.acquisitions > 0 || lv.releasing > 0 || lv.releasedAt > fl.begin {
		return
	}
	term := call.Term
	for _, t := range fl.leaseTerms {
		term = max(term, t)
	}
	if term > 0 && c.holdsRecord(lv, term) {
		lv.since = leaseSince{term: term, at: idx, ok: true}
	}
}

// checkHoldLoss judges promise 30 on the Hold contexts a process shows:
// one of a Lease value whose record only went absent or below its term
// since it took it (see leaseSince), seen running since, ended by a loss,
// ended as regressed.
func (c *Checker) checkHoldLoss(idx int, call *Call, snap []Context) {
	for _, h := range snap {
		if h.ID == 0 || h.Kind != "hold" || h.Lease == "" || !h.Done || !h.Is.Has("lease lost") || h.Is.Has("regressed") {
			continue
		}
		lv := c.leases[h.Lease]
		if lv == nil || !lv.since.ok || !lv.since.fell || lv.lossSeen[h.ID] {
			continue
		}
		if last, seen := c.running[call.Proc][h.ID]; !seen || last <= lv.since.at {
			continue
		}
		lv.lossSeen[h.ID] = true
		c.report(idx, 30, "%s shows the Hold's context of %s ended by a loss (%v), not regressed, though since it took term %d its record only went absent or below it", who(call), quote(h.Lease), h.Cause, lv.since.term)
	}
}

// leaseBelowThroughout reports whether every content seen is absent or a
// lease record below term.
func leaseBelowThroughout(seen []*value, term uint64) bool {
	for _, v := range seen {
		if l, check := decodeLease(v); v != nil && (check != "" || l.Term >= term) {
			return false
		}
	}
	return true
}

// lowestTerm is the lowest term of the lease records seen, when every
// content seen is one.
func lowestTerm(seen []*value) (uint64, bool) {
	var low uint64
	for i, v := range seen {
		l, check := decodeLease(v)
		if check != "" {
			return 0, false
		}
		if i == 0 || l.Term < low {
			low = l.Term
		}
	}
	return low, len(seen) > 0
}

// checkTermSourceRead judges promise 30 on the first Epoch of a TermSource
// for a shard: it hands out no epoch when the record was absent or below
// what its Fence saw, throughout the call.
func (c *Checker) checkTermSourceRead(idx int, fl *flight) {
	call := fl.call
	if call.Key == "" {
		return
	}
	ts := c.source(call.TermSource)
	first := !ts.keys[call.Key]
	if call.Err == nil {
		ts.keys[call.Key] = true
	}
	if call.Err == nil && first {
		c.checkTermSourceContinues(idx, fl)
		c.checkTermSourceAlone(idx, fl)
		c.checkTermSourceDamage(idx, fl)
	}
	m, ok := c.seenBefore(fl, call.Key)
	if call.Err != nil || !first || !ok || !belowThroughout(fl, m.epoch) {
		return
	}
	c.report(idx, 30, "%s handed out epoch %d from a record absent or below epoch %d its Fence saw", who(call), call.Got, m.epoch)
}

// checkTermSourceDamage judges promise 7 on the first epoch a TermSource
// hands out of a shard: none from a record whose header did not decode
// all through the call, which tells no epoch to continue above; handing
// one out reads it as absent.
func (c *Checker) checkTermSourceDamage(idx int, fl *flight) {
	for _, v := range fl.seen {
		if _, ok := v.header(); ok || v == nil {
			return
		}
	}
	if len(fl.seen) > 0 {
		c.report(idx, 7, "%s handed out epoch %d while the record, damaged, told no epoch throughout", who(fl.call), fl.call.Got)
	}
}

// checkTermSourceContinues judges promise 17 on the first epoch a
// TermSource hands out of a shard: above the recorded epoch when, all
// through the call, the record held the source's writer at the epoch's
// term, as after a restart of that writer within its term.
func (c *Checker) checkTermSourceContinues(idx int, fl *flight) {
	call := fl.call
	low := uint64(math.MaxUint64)
	for _, v := range fl.seen {
		h, ok := v.header()
		if !ok || h.Writer != call.Writer || h.Epoch>>32 != call.Got>>32 {
			return
		}
		low = min(low, h.Epoch)
	}
	if len(fl.seen) > 0 && call.Got <= low {
		c.report(idx, 17, "%s handed out epoch %d, not above epoch %d of its term by its writer that the record held", who(call), call.Got, low)
	}
}

// checkTermSourceAlone judges promise 17 on the first epoch a TermSource
// hands out of a shard: none when, all through the call, the record showed
// another writer of the epoch's term or a later term, which ends the
// source.
func (c *Checker) checkTermSourceAlone(idx int, fl *flight) {
	call := fl.call
	term := call.Got >> 32
	for _, v := range fl.seen {
		h, ok := v.header()
		if !ok || h.Epoch>>32 < term || h.Epoch>>32 == term && h.Writer == call.Writer {
			return
		}
	}
	if len(fl.seen) == 0 {
		return
	}
	if h, ok := fl.seen[len(fl.seen)-1].header(); ok {
		c.report(idx, 17, "%s handed out epoch %d of term %d over a record of %s at epoch %d (term %d)", who(call), call.Got, term, quote(h.Writer), h.Epoch, h.Epoch>>32)
	}
}

// checkCheck judges promise 32 on the end of a Check: nil only if the
// record held the writer at the epoch (or in the stream's tenure that
// reached it) at some moment of the call, a stale refusal only if it held
// another writer or a later tenure, a regressed one only if it was absent
// or below the epoch, or held the writer below what the Fence can have
// seen (a record of another writer at or above the epoch is refused as
// stale, as a write is, however it was set back). The other
// half of 32, Collect's read before each batch of deletes, is judged on
// each delete (checkCollectHeld) in a history that records its reads.
func (c *Checker) checkCheck(idx int, fl *flight) {
	call := fl.call
	held, later, lower := false, false, false
	// What the Fence can have seen, or the floor hold, is no more than the
	// highest epoch the record ever held.
	highest := c.recordState(call.Key).highest
	for _, v := range fl.seen {
		h, ok := v.header()
		switch {
		case v == nil:
			lower = true
			continue
		case !ok || !v.sound() || h.Identity != identityOf(call):
			continue
		}
		switch {
		case h.Epoch < call.Epoch:
			lower = true
		case h.Writer == call.Writer && record.TenureFloor(h) <= call.Epoch:
			held = true
			lower = lower || h.Epoch < highest
		default:
			later = true
		}
	}
	if call.Is.Has("corrupt") && !c.damageSeen(fl) {
		c.report(idx, 32, "%s was refused as corrupt (%v), but the record was never damaged during the call", who(call), call.Err)
	}
	if n := call.Stale; call.Is.Has("stale") && n != nil && !heldAs(call, fl.seen, n.Epoch, n.Writer) {
		c.report(idx, 32, "%s was refused as stale naming epoch %d by %s, which the record did not hold during the call", who(call), n.Epoch, quote(n.Writer))
	}
	m, saw := c.seenBefore(fl, call.Key)
	switch {
	case call.Err == nil && !held:
		c.report(idx, 32, "%s returned nil, but the record never held writer %s at epoch %d during the call", who(call), quote(call.Writer), call.Epoch)
	case call.Err == nil && saw && belowThroughout(fl, m.epoch):
		c.report(idx, 32, "%s returned nil, but the record was below epoch %d its Fence saw, throughout", who(call), m.epoch)
	case call.Is.Has("stale") && !later:
		c.report(idx, 32, "%s was refused as stale (%v), but no other writer or later tenure held the record during the call", who(call), call.Err)
	case call.Is.Has("regressed") && !lower:
		c.report(idx, 32, "%s was refused as regressed (%v), but the record was neither absent nor below during the call", who(call), call.Err)
	}
}

// heldAs reports whether any sound content of vs, of call's identity, is
// at epoch by writer: what a refusal as stale names as recorded, read
// during the call.
func heldAs(call *Call, vs []*value, epoch uint64, writer string) bool {
	for _, v := range vs {
		if v.sound() && v.rec.h.Identity == identityOf(call) && v.rec.h.Epoch == epoch && v.rec.h.Writer == writer {
			return true
		}
	}
	return false
}

// damageSeen reports whether a refusal as corrupt of fl's call may be
// of damage: the record held some during the call, or the call read what
// the checker cannot judge here (the floor, under KeepFloor, or a brand
// something outside the package wrote).
func (c *Checker) damageSeen(fl *flight) bool {
	call := fl.call
	if call.KeepFloor || c.st.changedOutsideSince(keys.Brand(prefixOf(call)), -1) {
		return true
	}
	for _, v := range fl.seen {
		if v.damaged() {
			return true
		}
	}
	return false
}

// lowestSound is the lowest epoch of vs, when every content of vs is a
// sound record.
func lowestSound(vs []*value) (uint64, bool) {
	low := uint64(math.MaxUint64)
	for _, v := range vs {
		if !v.sound() {
			return 0, false
		}
		low = min(low, v.rec.h.Epoch)
	}
	return low, len(vs) > 0
}

// checkFloorKept judges promise 31 on the end of a Seal, a Settle or a
// Hold that returned nil under KeepFloor: every record it landed began a
// tenure, whose epoch the shard's floor now keeps, and so did a Seal's
// found landed (unless something outside the package changed the floor
// during the call).
func (c *Checker) checkFloorKept(idx int, fl *flight) {
	call := fl.call
	if !call.KeepFloor || call.Op != Seal && call.Op != Settle && call.Op != Hold {
		return
	}
	type tenure struct {
		key   string
		epoch uint64
	}
	var began []tenure
	if call.Op == Seal {
		began = append(began, tenure{call.Key, call.Epoch})
	}
	for _, w := range fl.writes {
		if class, _ := c.classify(w.ch.Key); class == classRecord && w.v.sound() {
			began = append(began, tenure{w.ch.Key, w.v.rec.h.Epoch})
		}
	}
	for _, t := range began {
		_, p := c.classify(t.key)
		floorKey := keys.Floors(p) + strings.TrimPrefix(t.key, keys.Shards(p))
		if c.st.changedOutsideSince(floorKey, fl.begin) {
			continue
		}
		if m, ok := c.floors[t.key]; !ok || m.epoch < t.epoch {
			c.report(idx, 31, "%s returned nil under KeepFloor, but the floor of %s does not keep epoch %d it sealed or settled at", who(call), quote(t.key), t.epoch)
		}
	}
}

// checkRegressSeen judges promise 29's memory on a call refused as
// regressed by what its Fence saw: the epoch the refusal names as seen is
// one the record held during a call of the process since it last forgot
// the shard (Forget drops the memory). Under KeepFloor the Fence also
// remembers the floor it read, which this does not follow.
func (c *Checker) checkRegressSeen(idx int, fl *flight) {
	call, k := fl.call, seenKey(fl.call.Proc, fl.call.Key)
	for _, v := range fl.seen {
		if h, ok := v.header(); ok {
			c.heldBy[k] = max(c.heldBy[k], h.Epoch)
		}
	}
	// A Check below the epoch it was asked about names that epoch and
	// writer as seen: what its caller wrote, not what its Fence saw.
	asked := call.Op == Check && call.Regress != nil && call.Regress.Epoch == call.Epoch && call.Regress.Writer == call.Writer
	if r := call.Regress; r != nil && !asked && !call.KeepFloor && call.Is.Has("regressed") && r.Epoch > c.heldBy[k] {
		c.report(idx, 29, "%s was refused as regressed naming epoch %d as seen, above any the record held during its process's calls since it last forgot the shard (%d)", who(call), r.Epoch, c.heldBy[k])
	}
}

// checkRefusedRegressed judges promise 29 on a write of a record refused
// while the record was absent or below what its Fence saw before the
// call, throughout: refused as regressed, not as not found, nor as stale
// but over a record at or above the write's epoch (a write there is
// stale, however the record was set back: see decide).
func (c *Checker) checkRefusedRegressed(idx int, fl *flight) {
	call := fl.call
	if !deposingOp(call.Op) || call.Is.Has("regressed") || !call.Is.Has("not found") && !(call.Is.Has("stale") && belowThroughout(fl, call.Epoch)) {
		return
	}
	if m, ok := c.seenBefore(fl, call.Key); ok && belowThroughout(fl, m.epoch) {
		c.report(idx, 29, "%s was refused (%v) while the record was absent or below epoch %d its Fence saw, throughout: not as regressed", who(call), call.Err, m.epoch)
	}
}
