package promise

import (
	"bytes"
	"fmt"
	"slices"
	"strings"

	"github.com/writefence/writefence/internal/keys"
	"github.com/writefence/writefence/internal/record"
)

// createBlob judges a blob created for call (promise 19), then stores it.
func (c *Checker) createBlob(idx int, call *Call, ch *Change) {
	if _, ever := c.st.blobs[ch.Key]; ever {
		c.report(idx, 19, "%s created blob %s, a key that existed before", who(call), quote(ch.Key))
	}
	b := c.st.create(idx, ch, false)
	for _, fl := range c.blobSeen[ch.Key] {
		fl.blobData = append(fl.blobData, b.data)
	}
}

// deleteBlob judges a blob deleted for call (promises 24 and 25), then
// removes it.
func (c *Checker) deleteBlob(idx int, call *Call, fl *flight, ch *Change) {
	b := c.st.blobs[ch.Key]
	if b == nil || !b.exists {
		return // deleting what is not there changes nothing
	}
	for rk := range c.st.refs[ch.Key] {
		// A collection judges by the record it read: one that something
		// outside the package set back during the collection (a restore)
		// may reference what it judged garbage.
		if call.Op == Collect && fl != nil && c.st.changedOutsideSince(rk, fl.begin) {
			continue
		}
		c.report(idx, 24, "%s deleted blob %s, which the record at %s references", who(call), quote(ch.Key), quote(rk))
	}
	if call.Op == Collect {
		c.checkCollectHeld(idx, call, fl, ch.Key)
		c.checkCollectBrand(idx, call, fl, ch.Key)
		c.checkCollectDelete(idx, call, fl, ch.Key)
		c.checkCollectRegression(idx, call, fl, ch.Key)
		c.checkCollectFloor(idx, call, fl, ch.Key)
		b.collectedBy = call.ID
	}
	b.deletedOutside = false
	c.st.deleteBlob(idx, ch.Key, false)
}

// checkCollectDelete judges promise 25 on a Collect's delete of a blob of
// its shard: never one the record references or can come to reference,
// and none when the record is damaged, of another identity, or absent
// without RecordGone.
func (c *Checker) checkCollectDelete(idx int, call *Call, fl *flight, key string) {
	space, ok := c.spaceOf(call)
	if !ok || !strings.HasPrefix(key, space) {
		return // its clock's blob, in the reserved space
	}
	k, ok := c.callShard(call)
	if !ok {
		return
	}
	if fl != nil && c.st.changedOutsideSince(k.key, fl.begin) {
		return // the record changed outside under the collection
	}
	name := key[len(space):]
	cur := c.st.values[k.key]
	switch {
	case cur == nil && !call.RecordGone:
		c.report(idx, 25, "%s deleted blob %s while the shard has no record, without RecordGone", who(call), quote(name))
	case cur.damaged():
		c.report(idx, 25, "%s deleted blob %s while the record is damaged (%s)", who(call), quote(name), cur.rec.check)
	case cur.sound() && cur.rec.h.Identity != identityOf(call):
		c.report(idx, 25, "%s deleted blob %s while the record is of identity %s", who(call), quote(name), quote(cur.rec.h.Identity))
	case cur.sound():
		for _, r := range cur.rec.body.Refs {
			if r.Name == name {
				c.report(idx, 25, "%s deleted blob %s, which the record at epoch %d references", who(call), quote(name), cur.rec.h.Epoch)
			}
		}
		if fl != nil && committableThroughout(call, fl.seen, name, c.st.blobs[key]) {
			c.report(idx, 25, "%s deleted blob %s, which the record could come to reference throughout the collection (epoch %d by %s, horizon %d)",
				who(call), quote(name), cur.rec.h.Epoch, quote(cur.rec.h.Writer), cur.rec.h.Horizon)
		}
	}
}

// committableThroughout reports whether a commit could newly reference
// blob b, named name, over every record vs holds, each sound and of the
// call's identity: the recorded writer's blob within its tenure, or one of
// an epoch above the record's, created at or after its horizon (see
// Fence.Collect). A collection judges by its reads: a blob the record
// could not come to reference at some moment of it was garbage then.
func committableThroughout(call *Call, vs []*value, name string, b *blob) bool {
	e, _, w, ok := keys.ParseBlobName(name)
	if !ok || b == nil || len(vs) == 0 {
		return false
	}
	for _, v := range vs {
		if !v.sound() || v.rec.h.Identity != identityOf(call) {
			return false
		}
		h := v.rec.h
		switch {
		case e < record.TenureFloor(h), w != h.Writer && e <= h.Epoch:
			return false
		case h.Horizon != 0 && b.modified.UnixNano() < h.Horizon:
			return false
		}
	}
	return true
}

// checkCommit judges promise 20 on a Commit's put: every blob it newly
// references exists with the size referenced, is the committer's, of an
// epoch within its tenure, and was created at or after the horizon; a
// blob gone since lostSince (see putRecord, gone) is excused.
func (c *Checker) checkCommit(idx int, call *Call, k shardKey, prev, nv *value, lostSince int) {
	n := nv.record()
	prevRefs, _ := refsOf(prev)
	var horizon int64
	if prev.sound() {
		horizon = prev.rec.h.Horizon
	}
	for _, r := range added(prevRefs, n.body.Refs) {
		e, _, w, ok := keys.ParseBlobName(r.Name)
		if !ok {
			c.report(idx, 20, "%s references %s, which is not a blob name", who(call), quote(r.Name))
			continue
		}
		if w != call.Writer {
			c.report(idx, 20, "%s newly references blob %s, written by %s", who(call), quote(r.Name), quote(w))
		}
		if e < n.h.Since || e > n.h.Epoch {
			c.report(idx, 20, "%s newly references blob %s of epoch %d, outside its tenure [%d, %d]", who(call), quote(r.Name), e, n.h.Since, n.h.Epoch)
		}
		bk, ok := k.blob(r.Name)
		if !ok || c.gone(bk, r, lostSince) {
			continue
		}
		b := c.st.blobs[bk]
		if pb := c.putBy(b); pb != nil && (pb.Writer != call.Writer || pb.Epoch < n.h.Since || pb.Epoch > n.h.Epoch) {
			c.report(idx, 20, "%s newly references blob %s, which %s wrote, outside its tenure [%d, %d] by %s",
				who(call), quote(r.Name), who(pb), n.h.Since, n.h.Epoch, quote(call.Writer))
		}
		switch {
		case b == nil || !b.exists && !b.deletedOutside:
			c.report(idx, 20, "%s newly references blob %s, which does not exist", who(call), quote(r.Name))
		case !b.exists && c.deletedBefore(bk, call):
			c.report(idx, 20, "%s newly references blob %s, which something outside deleted before the call began", who(call), quote(r.Name))
		case !b.exists:
			// Deleted outside the package while the commit ran: after
			// it checked, perhaps.
		case int64(len(b.data)) != r.Size:
			c.report(idx, 20, "%s references blob %s with size %d; it holds %d bytes", who(call), quote(r.Name), r.Size, len(b.data))
		case horizon != 0 && b.modified.UnixNano() < horizon:
			c.report(idx, 20, "%s newly references blob %s created at %d, before the collection horizon %d", who(call), quote(r.Name), b.modified.UnixNano(), horizon)
		}
	}
}

// putBy is the PutBlob call that created b, and nil for none (a blob
// created outside, or by another call): the writer and the epoch it wrote
// the blob at, whatever its name says (promises 20 and 21).
func (c *Checker) putBy(b *blob) *Call {
	if b == nil || b.call == 0 {
		return nil
	}
	if pc := c.calls[b.call]; pc != nil && pc.Op == PutBlob {
		return pc
	}
	return nil
}

// deletedBefore reports whether the blob at bk was last changed before
// call began: a blob deleted then did not exist while the call ran.
func (c *Checker) deletedBefore(bk string, call *Call) bool {
	fl := c.flights[call.ID]
	at, ok := c.st.lastChange[bk]
	return fl != nil && ok && at < fl.begin
}

// checkRefusedCommit judges promise 20 on a commit refused as not found:
// a blob it newly references, over the record it decided on, did not
// exist at some moment of the call or was created before a collection
// horizon the record held during the call (another size than the one
// referenced is refused as an invalid argument). Under KeepFloor a commit is also refused as not found when there
// is no record: one that saw none is not judged.
func (c *Checker) checkRefusedCommit(idx int, fl *flight) {
	call := fl.call
	if call.Op != Commit || !call.Is.Has("not found") || call.Is.Has("unknown") || !refused(call) {
		return
	}
	if _, began := c.flights[call.ID]; !began {
		return
	}
	k, ok := c.callShard(call)
	if !ok {
		return
	}
	var horizon int64
	for _, v := range fl.seen {
		h, ok := v.header()
		switch {
		case v == nil && call.KeepFloor, v != nil && !ok:
			return
		case ok:
			horizon = max(horizon, h.Horizon)
		}
	}
	refs := added(call.Current, call.Blobs)
	if len(refs) == 0 {
		return
	}
	names := make([]string, len(refs))
	for i, r := range refs {
		bk, ok := k.blob(r.Name)
		if !ok {
			return
		}
		b, at := c.st.blobs[bk], c.st.lastChange[bk]
		if b == nil || !b.exists || at > fl.begin || b.modified.UnixNano() < horizon {
			return
		}
		names[i] = quote(r.Name)
	}
	c.report(idx, 20, "%s was refused as not found (%v), but every blob it newly references (%s) existed throughout the call, created at or after the collection horizon %d",
		who(call), call.Err, strings.Join(names, ", "), horizon)
}

// gone reports whether the blob at bk, referenced as r by a write that
// created a record deleted outside since lostSince (-1: none), existed
// with r's size and was deleted since: what the write checked when it
// decided, gone before it landed (promise 24).
func (c *Checker) gone(bk string, r record.BlobRef, lostSince int) bool {
	b := c.st.blobs[bk]
	return lostSince >= 0 && b != nil && !b.exists && c.st.changedSince(bk, lostSince) && int64(len(b.data)) == r.Size
}

// checkNewRefs judges promises 24 and 25 on what a put newly references:
// a blob that exists (unless deleted outside, or gone, see gone), and
// never one a Collect deleted.
func (c *Checker) checkNewRefs(idx int, call *Call, k shardKey, prev, nv *value, lostSince int) {
	prevRefs, _ := refsOf(prev)
	for _, r := range added(prevRefs, nv.rec.body.Refs) {
		bk, ok := k.blob(r.Name)
		if !ok || c.gone(bk, r, lostSince) {
			continue
		}
		b := c.st.blobs[bk]
		if pb := c.putBy(b); pb != nil && nv.sound() && pb.Epoch < record.TenureFloor(nv.rec.h) {
			c.report(idx, 21, "%s newly references blob %s, which %s wrote at epoch %d, below the tenure floor %d",
				who(call), quote(r.Name), who(pb), pb.Epoch, record.TenureFloor(nv.rec.h))
		}
		switch {
		case b != nil && b.exists, b != nil && b.deletedOutside:
		case b != nil && b.collectedBy != 0:
			c.report(idx, 25, "%s newly references blob %s, which %s deleted", who(call), quote(r.Name), who(c.calls[b.collectedBy]))
			c.report(idx, 24, "%s references blob %s, which is missing", who(call), quote(r.Name))
		default:
			c.report(idx, 24, "%s references blob %s, which is missing", who(call), quote(r.Name))
		}
	}
}

// checkReader judges what a Latest or an Open returned: promises 7 and 23.
func (c *Checker) checkReader(idx int, fl *flight) {
	call := fl.call
	switch call.Op {
	case Latest:
		if call.Is.Has("not found") && len(fl.seen) > 0 && allDamaged(fl.seen) {
			c.report(idx, 7, "%s found no record while the record was damaged throughout", who(call))
		} else if call.Is.Has("not found") && len(fl.seen) > 0 && !slices.Contains(fl.seen, nil) {
			c.report(idx, 23, "%s found no record while the record was present throughout", who(call))
		}
		if call.Err != nil || call.Read == nil {
			return
		}
		if call.Read.Epoch == 0 {
			c.report(idx, 7, "%s returned epoch 0", who(call))
			return
		}
		for _, v := range fl.seen {
			if v.sound() && readMatches(call, v.rec) {
				return
			}
		}
		c.report(idx, 23, "%s returned epoch %d by %s payload %s, which the key did not hold during the call",
			who(call), call.Read.Epoch, quote(call.Read.Writer), quote(string(call.ReadBody.Payload)))
	case Open:
		if call.Err != nil {
			return
		}
		var ref *record.BlobRef
		for _, v := range fl.seen {
			if !v.sound() || v.rec.h.Identity != identityOf(call) {
				continue
			}
			for i, r := range v.rec.body.Refs {
				if r.Name == call.Name {
					ref = &v.rec.body.Refs[i]
				}
			}
		}
		if ref == nil {
			c.report(idx, 23, "%s opened blob %s, which the record did not reference during the call", who(call), quote(call.Name))
			return
		}
		if call.Bytes == nil {
			return
		}
		if int64(len(call.Bytes)) != ref.Size || record.CRC32C(call.Bytes) != ref.CRC {
			c.report(idx, 23, "%s read %d bytes of blob %s whose size or checksum fails its reference (size %d)", who(call), len(call.Bytes), quote(call.Name), ref.Size)
		}
		for _, d := range fl.blobData {
			if bytes.Equal(d, call.Bytes) {
				return
			}
		}
		c.report(idx, 23, "%s read %s from blob %s, which it did not hold during the call", who(call), quote(string(call.Bytes)), quote(call.Name))
	}
}

func allDamaged(vs []*value) bool {
	for _, v := range vs {
		if !v.damaged() {
			return false
		}
	}
	return true
}

// readMatches reports whether what a Latest returned is the sound record d
// of the call's identity. A recorder of Latest knows the payload alone; the
// references, floor, horizon and kind are compared when it recorded any
// of them (Inspect).
func readMatches(call *Call, d *decoded) bool {
	r, b := call.Read, call.ReadBody
	same := d.h.Identity == identityOf(call) && (r.Identity == "" || r.Identity == d.h.Identity) &&
		r.Epoch == d.h.Epoch && r.Writer == d.h.Writer && bytes.Equal(b.Payload, d.body.Payload)
	if b.Stream || len(b.Refs) > 0 || b.Since != 0 || b.Horizon != 0 {
		same = same && refsEqual(b.Refs, d.body.Refs) && b.Since == d.body.Since && b.Horizon == d.body.Horizon && b.Stream == d.body.Stream
	}
	return same
}

// checkCollected judges promise 26 on a Collect that ended nil: no blob
// that existed throughout, is unreferenced, and can never be committed
// over the record at its Begin, or behind the horizon it raised, is left.
func (c *Checker) checkCollected(idx int, fl *flight) {
	call := fl.call
	if call.Op != Collect || call.Err != nil || call.DryRun || len(fl.seen) == 0 {
		return
	}
	k, ok := c.callShard(call)
	if !ok || c.st.changedOutsideSince(k.key, fl.begin) {
		return
	}
	r0 := fl.seen[0]
	if r0.damaged() || r0.sound() && r0.rec.h.Identity != identityOf(call) || r0 == nil && !call.RecordGone {
		return
	}
	space, _ := c.spaceOf(call)
	for _, bk := range fl.blobsAtBegin {
		b := c.st.blobs[bk]
		if b == nil || !b.exists {
			continue
		}
		name := bk[len(space):]
		e, _, w, ok := keys.ParseBlobName(name)
		if !ok || referencedIn(fl.seen, name) {
			continue
		}
		if r0 == nil {
			c.report(idx, 26, "%s left blob %s of a shard retired with RecordGone", who(call), quote(name))
			continue
		}
		h := r0.rec.h
		// The horizon the pass raised, if it did: no commit can reference
		// a blob behind it from then on.
		for _, w := range fl.writes {
			if w.ch.Key == call.Key && w.v.sound() && w.v.rec.h.Horizon > h.Horizon {
				h.Horizon = w.v.rec.h.Horizon
			}
		}
		switch {
		case e < record.TenureFloor(h):
			c.report(idx, 26, "%s left blob %s of epoch %d, below the tenure floor %d", who(call), quote(name), e, record.TenureFloor(h))
		case w != h.Writer && e <= h.Epoch:
			c.report(idx, 26, "%s left blob %s of writer %s at epoch %d, deposed by %s at epoch %d", who(call), quote(name), quote(w), e, quote(h.Writer), h.Epoch)
		case h.Horizon != 0 && b.modified.UnixNano() < h.Horizon:
			c.report(idx, 26, "%s left blob %s created at %d, behind the collection horizon %d", who(call), quote(name), b.modified.UnixNano(), h.Horizon)
		}
	}
}

// referencedIn reports whether any sound content in vs references name.
func referencedIn(vs []*value, name string) bool {
	for _, v := range vs {
		if !v.sound() {
			continue
		}
		for _, r := range v.rec.body.Refs {
			if r.Name == name {
				return true
			}
		}
	}
	return false
}

// collectRead notes a read made for a Collect: of its record, or a
// listing of its blobs.
func (c *Checker) collectRead(fl *flight, ch *Change) {
	if fl == nil || fl.call.Op != Collect {
		return
	}
	switch ch.Key {
	case fl.call.Key:
		fl.reads = append(fl.reads, c.st.values[ch.Key])
		fl.readSinceList = true
		return
	case keys.Brand(fl.call.Prefix):
		fl.brand, fl.brandSinceList = c.st.values[ch.Key], true
		return
	}
	fl.listed, fl.readSinceList, fl.brandSinceList = true, false, false
}

// checkCollectBrand judges promise 10 on a Collect's delete, of a Fence
// that reads the brand before every write, in a history that records its
// reads: it read the brand after its listing, and that read, its last,
// found the Fence's identity. Deletes are writes; a brand changed during
// a listing stops the deletes that follow it.
func (c *Checker) checkCollectBrand(idx int, call *Call, fl *flight, key string) {
	if !call.BrandAlways || fl == nil || !fl.listed || len(fl.reads) == 0 {
		return
	}
	switch b := fl.brand; {
	case !fl.brandSinceList:
		c.report(idx, 10, "%s deleted blob %s without reading the brand since it listed the blobs", who(call), quote(key))
	case b == nil:
		c.report(idx, 10, "%s deleted blob %s after its last read of the brand found none", who(call), quote(key))
	case !bytes.Equal(b.data, []byte(identityOf(call))):
		c.report(idx, 10, "%s deleted blob %s after its last read of the brand found %s", who(call), quote(key), quote(string(b.data)))
	}
}

// checkCollectHeld judges promise 32 on a Collect's delete of a blob of
// its shard, in a history that records its reads: it read the record
// after its listing, and that read, its last, found the record in the
// tenure the collection judged by (its first read): absent again under
// RecordGone, else sound, of its identity, at no lower epoch, tenure
// floor or collection horizon (the one it raised, if it did).
func (c *Checker) checkCollectHeld(idx int, call *Call, fl *flight, key string) {
	if fl == nil || !fl.listed || len(fl.reads) == 0 {
		return
	}
	if space, ok := c.spaceOf(call); !ok || !strings.HasPrefix(key, space) {
		return
	}
	if !fl.readSinceList {
		c.report(idx, 32, "%s deleted blob %s without reading the record since it listed the blobs", who(call), quote(key))
		return
	}
	r0, v := fl.reads[0], fl.reads[len(fl.reads)-1]
	var why string
	switch {
	case r0 == nil && v != nil:
		why = "a record again, of a shard retired"
	case r0 == nil:
	case !r0.sound():
		why = "what it judged by a record that does not decode"
	case v == nil:
		why = "no record"
	case !v.sound() || v.rec.h.Identity != r0.rec.h.Identity:
		why = "damage or another identity"
	default:
		horizon := r0.rec.h.Horizon
		for _, w := range fl.writes {
			if w.ch.Key == call.Key && w.v.sound() {
				horizon = max(horizon, w.v.rec.h.Horizon)
			}
		}
		h, j := v.rec.h, r0.rec.h
		if h.Epoch < j.Epoch || record.TenureFloor(h) < record.TenureFloor(j) || h.Horizon < horizon {
			why = fmt.Sprintf("epoch %d, tenure floor %d, horizon %d, below epoch %d, tenure floor %d, horizon %d it judged by",
				h.Epoch, record.TenureFloor(h), h.Horizon, j.Epoch, record.TenureFloor(j), horizon)
		}
	}
	if why != "" {
		c.report(idx, 32, "%s deleted blob %s after its last read of the record found %s", who(call), quote(key), why)
	}
}
