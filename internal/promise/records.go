package promise

import (
	"bytes"

	"github.com/writefence/writefence/internal/keys"
	"github.com/writefence/writefence/internal/record"
)

// recordState is what the promises on one record key remember besides its
// content.
type recordState struct {
	// byEpoch is, per epoch, the first content a call landed at it since
	// the last outside delete, or outside put of a record below it
	// (promise 2).
	byEpoch map[uint64]*value
	// acked is the content a write that returned nil left (promise 4),
	// until a write at a higher epoch or something outside replaces it.
	acked *ack
	// settles are the epochs settles landed (promise 8).
	settles []settleMark
	// highest is the highest epoch the record ever held, a header that
	// decodes of any content, outside changes included (promise 32).
	highest uint64
	// firstCall is, per epoch in byEpoch, the call that landed it; a call
	// whose write the store lost to an outside change (a rollback) may
	// land it again (promise 2).
	firstCall map[uint64]int
}

type ack struct {
	epoch  uint64
	writer string
	call   *Call
}

type settleMark struct {
	epoch uint64
	at    int
	call  *Call
}

func (c *Checker) recordState(key string) *recordState {
	rs := c.records[key]
	if rs == nil {
		rs = &recordState{}
		c.records[key] = rs
	}
	return rs
}

// collectRewrite reports whether nv is prev with only its collection
// horizon raised, as Collect writes it: a stream's record, with the same
// identity, writer, epoch, payload, references and tenure floor (a plain
// record carries no horizon: making it a stream's changes its format).
func collectRewrite(prev, nv *value) bool {
	if !prev.sound() || !nv.sound() {
		return false
	}
	p, n := prev.rec, nv.rec
	return p.h.Stream() && p.h.Identity == n.h.Identity && p.h.Writer == n.h.Writer && p.h.Epoch == n.h.Epoch &&
		bytes.Equal(p.body.Payload, n.body.Payload) && refsEqual(p.body.Refs, n.body.Refs) &&
		record.TenureFloor(p.h) == record.TenureFloor(n.h) && n.h.Stream() && n.h.Horizon > p.h.Horizon
}

// sameContent reports whether two sound records hold the same write: the
// writer, payload and references (promise 2).
func sameContent(a, b *decoded) bool {
	return a.h.Writer == b.h.Writer && bytes.Equal(a.body.Payload, b.body.Payload) && refsEqual(a.body.Refs, b.body.Refs)
}

// putRecord judges a put of a shard's record made for call over prev:
// promises 1, 2, 4, 7 to 10, 20 to 22, 24 and 25.
func (c *Checker) putRecord(idx int, call *Call, fl *flight, k shardKey, prev, nv *value) {
	n := nv.record()
	if n.check != "" {
		c.report(idx, 1, "%s wrote %s, which does not decode (%s): the recorded epoch is lost", who(call), quote(string(nv.data)), n.check)
		return
	}
	rs := c.recordState(k.key)
	rewrite := call.Op == Collect && collectRewrite(prev, nv)

	// 7: damage is overwritten only by a Settle of exactly its version:
	// the Version of the change that damaged it (unknown when empty);
	// or, on a store whose Pushes decide on a record's head, by a Push
	// over a record rewritten whole from outside whose head is sound.
	headPush := c.opts.HeadPush && call.Op == Push && prev.damaged() && prev.call == 0 && !prev.inPlace && record.DecidedOnHead(prev.data)
	if prev.damaged() && !headPush && !(call.Op == Settle && (prev.version == "" || call.Version == prev.version)) {
		c.report(idx, 7, "%s overwrote the damaged record at version %s (%s) with epoch %d; only a settle of that version may (settle version %s)",
			who(call), quote(prev.version), prev.rec.check, n.h.Epoch, quote(call.Version))
	}

	// 1: the epoch only rises, and Collect's write of the horizon
	// changes nothing else.
	if call.Op == Collect && !rewrite {
		c.report(idx, 1, "%s wrote the record over %s with epoch %d by %s: it writes only a higher collection horizon, nothing else changed",
			who(call), describe(prev), n.h.Epoch, quote(n.h.Writer))
	} else if h, ok := prev.header(); ok && !rewrite && n.h.Epoch <= h.Epoch {
		c.report(idx, 1, "%s landed epoch %d by %s over epoch %d by %s", who(call), n.h.Epoch, quote(n.h.Writer), h.Epoch, quote(h.Writer))
	}

	// 2: one content per epoch. A call whose write an outside change took
	// from the store (a rollback) and that wrote again at its epoch, as
	// its retries decide afresh, made one write.
	if first := rs.byEpoch[n.h.Epoch]; first != nil && rs.firstCall[n.h.Epoch] == call.ID && c.st.changedOutsideSince(k.key, first.at) {
		rs.byEpoch[n.h.Epoch] = nv
	} else if first != nil && !sameContent(first.rec, n) {
		c.report(idx, 2, "%s landed a second write at epoch %d: writer %s payload %s, after writer %s payload %s",
			who(call), n.h.Epoch, quote(n.h.Writer), quote(string(n.body.Payload)), quote(first.rec.h.Writer), quote(string(first.rec.body.Payload)))
	} else if first == nil {
		if rs.byEpoch == nil {
			rs.byEpoch, rs.firstCall = map[uint64]*value{}, map[uint64]int{}
		}
		rs.byEpoch[n.h.Epoch] = nv
		rs.firstCall[n.h.Epoch] = call.ID
	}

	// 4: an acknowledged write stays until a higher epoch replaces it.
	if a := rs.acked; a != nil && prev.sound() && prev.rec.h.Epoch == a.epoch && prev.rec.h.Writer == a.writer && !rewrite && n.h.Epoch <= a.epoch {
		c.report(idx, 4, "%s replaced the write of %s, which returned nil, at epoch %d with epoch %d", who(call), who(a.call), a.epoch, n.h.Epoch)
	}
	if rs.acked != nil && n.h.Epoch > rs.acked.epoch {
		rs.acked = nil
	}

	if call.Op == Settle {
		c.checkSettleEpoch(idx, call, k, nv)
	}
	if call.Op == Settle && prev.damaged() {
		c.checkSettle(idx, call, fl, k, prev, nv)
	}
	if call.Op == Settle {
		rs.settles = append(rs.settles, settleMark{epoch: n.h.Epoch, at: idx, call: call})
	}

	// 10: no write over a record of another identity.
	if prev.sound() && prev.rec.h.Identity != n.h.Identity {
		c.report(idx, 10, "%s wrote identity %s over a record of identity %s", who(call), quote(n.h.Identity), quote(prev.rec.h.Identity))
	}

	c.checkTenure(idx, call, prev, nv)
	c.checkKeepsRefs(idx, call, prev, nv)
	// 24: a write that creates the record, decided before something
	// outside deleted it, may land after: absence is no version. It
	// checked its blobs when it decided, so a blob deleted since it began
	// is excused (see gone); KeepFloor closes it (31).
	lostSince := -1
	if prev == nil && !call.KeepFloor && c.st.changedOutsideSince(k.key, fl.begin) {
		lostSince = fl.begin
	}
	if call.Op == Commit {
		c.checkCommit(idx, call, k, prev, nv, lostSince)
	}
	c.checkNewRefs(idx, call, k, prev, nv, lostSince)
}

// checkSettleEpoch judges promise 8 on every settle's put, over damage
// or over a record lost or set back (Settlement.Lost): above the floor
// its operator states, and above every earlier settle of the shard.
func (c *Checker) checkSettleEpoch(idx int, call *Call, k shardKey, nv *value) {
	n := nv.record()
	if n.h.Epoch <= call.Floor {
		c.report(idx, 8, "%s landed epoch %d, not above its floor %d", who(call), n.h.Epoch, call.Floor)
	}
	logKey, err := keys.SettleLog(k.prefix, k.plugin, k.shard)
	// The settle log holds the entry each settle makes right before its
	// record: one at or above this epoch made by another call is an
	// earlier settle, whose record may not have landed. Run again with
	// the same arguments (its reply lost), it is refused (promise 5);
	// at another epoch, it lands above it (8).
	if lv := c.st.values[logKey]; err == nil && lv != nil && lv.call != 0 && lv.call != call.ID {
		if h, ok := lv.header(); ok && n.h.Epoch <= h.Epoch {
			promise := 8
			if h.Epoch == n.h.Epoch && h.Writer == n.h.Writer && lv.sound() && string(lv.rec.body.Payload) == call.Version {
				promise = 5
			}
			c.report(idx, promise, "%s landed epoch %d, not above the settle log's entry at epoch %d by %s", who(call), n.h.Epoch, h.Epoch, who(c.calls[lv.call]))
		}
	}
	for _, s := range c.recordState(k.key).settles {
		// An operator who removes the settle log loses only that
		// protection.
		if err == nil && c.st.changedOutsideSince(logKey, s.at) {
			continue
		}
		// A settle whose record something outside took from the store
		// (a delete after a lost reply) lands it again: one settle.
		if s.call.ID == call.ID {
			continue
		}
		if n.h.Epoch <= s.epoch {
			c.report(idx, 8, "%s landed epoch %d, not above the earlier settle of %s at epoch %d", who(call), n.h.Epoch, who(s.call), s.epoch)
		}
	}
}

// checkSettle judges a settle's put over damaged bytes: promises 8, 9 and
// 10.
func (c *Checker) checkSettle(idx int, call *Call, fl *flight, k shardKey, prev, nv *value) {
	n := nv.record()
	h, headOK := prev.header()
	if headOK && n.h.Epoch <= h.Epoch {
		c.report(idx, 8, "%s landed epoch %d over damage whose header holds epoch %d", who(call), n.h.Epoch, h.Epoch)
	}

	if headOK && h.Identity != n.h.Identity {
		c.report(idx, 10, "%s settled identity %s over damage whose header holds identity %s", who(call), quote(n.h.Identity), quote(h.Identity))
	}

	if call.DropBlobs {
		return
	}
	refs, ok := record.SalvageRefs(prev.data)
	switch {
	case ok && !refsEqual(refs, n.body.Refs):
		c.report(idx, 9, "%s settled with %d references over damage whose %d references decode", who(call), len(n.body.Refs), len(refs))
	case !ok && headOK && h.Stream():
		c.report(idx, 9, "%s settled without DropBlobs over a stream's record whose references do not decode", who(call))
	case !ok && !headOK && fl != nil && !call.NoBlobStore:
		for _, b := range fl.blobsAtBegin {
			if blob := c.st.blobs[b]; blob != nil && blob.exists {
				c.report(idx, 9, "%s settled without DropBlobs over damage whose header does not decode while the shard has blob %s", who(call), quote(b))
				break
			}
		}
	}
}

// checkTenure judges promise 21 on a put of a record.
func (c *Checker) checkTenure(idx int, call *Call, prev, nv *value) {
	n := nv.record()
	floor := record.TenureFloor(n.h)
	if h, ok := prev.header(); ok {
		if was := record.TenureFloor(h); floor < was {
			c.report(idx, 21, "%s lowered the tenure floor from %d to %d", who(call), was, floor)
		}
		if n.h.Stream() && h.Writer != n.h.Writer && floor <= h.Epoch {
			c.report(idx, 21, "%s, a new writer over %s at epoch %d, kept the tenure floor at %d", who(call), quote(h.Writer), h.Epoch, floor)
		}
	}
	if (call.Op == Seal || call.Op == Hold || call.Op == Settle) && n.h.Stream() && n.h.Since != n.h.Epoch {
		c.report(idx, 21, "%s began no tenure at its epoch: since %d", who(call), n.h.Since)
	}
	prevRefs, _ := refsOf(prev)
	for _, r := range added(prevRefs, n.body.Refs) {
		if e, _, _, ok := keys.ParseBlobName(r.Name); ok && e < floor {
			c.report(idx, 21, "%s newly references blob %s of epoch %d, below the tenure floor %d", who(call), quote(r.Name), e, floor)
		}
	}
}

// checkKeepsRefs judges promise 22: Push, Update and Seal (Hold's seals
// among them) keep the references and the kind of record they replace,
// and with Commit its collection horizon; a Seal keeps the payload, and
// seals a shard never pushed with an empty one.
func (c *Checker) checkKeepsRefs(idx int, call *Call, prev, nv *value) {
	n := nv.record()
	if call.Op == Commit && prev.sound() && n.h.Horizon != prev.rec.h.Horizon {
		c.report(idx, 22, "%s changed the collection horizon from %d to %d", who(call), prev.rec.h.Horizon, n.h.Horizon)
	}
	switch call.Op {
	case Push, Update, Seal, Hold:
	default:
		return
	}
	sealing := call.Op == Seal || call.Op == Hold
	h, ok := prev.header()
	switch {
	case sealing && prev == nil && len(n.body.Payload) > 0:
		c.report(idx, 22, "%s sealed a shard never pushed with payload %s", who(call), quote(string(n.body.Payload)))
	case sealing && prev.sound() && !bytes.Equal(prev.rec.body.Payload, n.body.Payload):
		c.report(idx, 22, "%s changed the payload from %s to %s", who(call), quote(string(prev.rec.body.Payload)), quote(string(n.body.Payload)))
	case ok && n.h.Horizon != h.Horizon:
		c.report(idx, 22, "%s changed the collection horizon from %d to %d", who(call), h.Horizon, n.h.Horizon)
	}
	// Of a record rewritten whole from outside with a sound head, which a
	// Push may replace (promise 7), what its head holds.
	refs, refsOK := refsOf(prev)
	switch {
	case prev == nil && (n.body.Stream || len(n.body.Refs) > 0):
		c.report(idx, 22, "%s created a stream's record with %d references", who(call), len(n.body.Refs))
	case prev != nil && refsOK && !refsEqual(refs, n.body.Refs):
		c.report(idx, 22, "%s changed the references from %d to %d", who(call), len(refs), len(n.body.Refs))
	case prev.sound() && prev.rec.body.Stream != n.body.Stream:
		c.report(idx, 22, "%s turned a record with stream %t into one with stream %t", who(call), prev.rec.body.Stream, n.body.Stream)
	}
}

// checkDeleteAcked judges promise 4 on a call's delete of a record.
func (c *Checker) checkDeleteAcked(idx int, call *Call, key string) {
	rs := c.records[key]
	if rs == nil {
		return
	}
	if a, prev := rs.acked, c.st.values[key]; a != nil && prev.sound() && prev.rec.h.Epoch == a.epoch && prev.rec.h.Writer == a.writer {
		c.report(idx, 4, "%s deleted the write of %s, which returned nil, at epoch %d", who(call), who(a.call), a.epoch)
	}
	rs.acked = nil
}
