package promise

import (
	"bytes"
	"strings"

	"github.com/writefence/writefence/internal/keys"
)

// refusals are the errors that refuse a write, which then wrote nothing
// (promise 3); "not found" refuses a write of a record (a Commit's blob, a
// Settle's record, a record only a seal creates under KeepFloor),
// "conflict" a Settle.
var refusals = []string{"stale", "regressed", "wire", "corrupt", "invalid", "untrusted", "lease held", "permission"}

// refused reports whether call ended refused. A lease lost, even as
// regressed (its record gone or set back, promise 30), refuses no write:
// a renewal that landed may learn it when it reads the record again.
func refused(call *Call) bool {
	is := call.Is
	switch {
	case call.Err == nil || is.Has("unknown") || is.Has("lease lost"):
		return false
	case hasAny(is, refusals...):
		return true
	case is.Has("not found") && recordOp(call.Op):
		return true
	}
	return is.Has("conflict") && call.Op == Settle
}

// classified names every sentinel but "cause": an error that matches none
// is a plain failure (promise 6).
var classified = []string{"stale", "conflict", "unknown", "wire", "corrupt", "invalid", "not found", "too large",
	"untrusted", "lease held", "lease lost", "lease expired", "takeover timeout", "term ended", "regressed",
	"permission", "unsupported", "canceled", "deadline"}

// observedOps are the Ops a WriteEvent names (promise 27).
var observedOps = map[string]bool{"push": true, "update": true, "commit": true, "seal": true, "settle": true,
	"settle log": true, "floor": true, "blob": true, "collect": true, "lease acquire": true, "lease renew": true,
	"lease release": true, "lease settle": true, "brand claim": true}

// recordOps are the calls that write a shard's record in one engine run
// and are observed as their Op.
func recordOp(op Op) bool {
	return op == Push || op == Update || op == Commit || op == Seal || op == Settle
}

// deposingOp reports whether a stale refusal of op deposes the writer.
func deposingOp(op Op) bool { return op == Push || op == Update || op == Commit || op == Seal }

// checkRefusal judges promises 3 and 5 on a call that ended refused: none
// of its changes wrote a record, a lease, the brand or a settle log.
func (c *Checker) checkRefusal(idx int, fl *flight) {
	if !refused(fl.call) {
		return
	}
	for _, w := range fl.writes {
		c.checkRefusedWrite(idx, fl.call, fl, w.ch)
	}
}

// checkRefusedWrite judges one change made for a call that ended refused.
// A call of several steps (a Settle's log then its record, a Collect's
// horizon then its deletes, a Hold's acquisition then its seals) may be
// refused by a later step: a key its Observer saw written (an event with
// no error) is a step that landed, not the refused write.
func (c *Checker) checkRefusedWrite(idx int, call *Call, fl *flight, ch *Change) {
	if !refused(call) || ch.Kind != "put" && ch.Kind != "delete" {
		return
	}
	class, _ := c.classify(ch.Key)
	switch {
	case class == classNone:
		return
	case call.Op == Hold:
		// A Hold is no write: it seals (writes of their own, whose lost
		// replies it retries) and releases on a refusal; promise 15
		// judges it.
		return
	}
	for _, e := range call.Events {
		if e.Key == ch.Key && e.Err == nil && !e.Retrying {
			if class == classRecord && (call.Op == Seal || call.Op == Settle) && !strings.Contains(call.Err.Error(), "the record landed at epoch") {
				c.report(idx, 3, "%s ended refused (%v) after its record landed, and does not say so", who(call), call.Err)
			}
			return
		}
	}
	c.report(idx, 3, "%s ended refused (%v) but its %s of the %s key %s landed", who(call), call.Err, ch.Kind, class, quote(ch.Key))
	if fl != nil && fl.lost {
		c.report(idx, 5, "%s ended refused (%v) after its reply was lost, but its %s of %s landed", who(call), call.Err, ch.Kind, quote(ch.Key))
	}
}

// checkUnknown judges promise 5: an unknown outcome is one error, with
// its cause, never also a conflict, a refusal (refusals) or "not found";
// a PutBlob whose create's reply was lost, which it does not retry
// (promise 6), returns an unknown outcome unless its ctx ended; and a
// call that finds its own write in the store returns nil, not a refusal.
func (c *Checker) checkUnknown(idx int, fl *flight) {
	call := fl.call
	if call.Op == PutBlob && fl.lost && call.Err != nil && !hasAny(call.Is, "unknown", "canceled", "deadline") {
		c.report(idx, 5, "%s returned %v after its create's reply was lost: its blob may exist, and the outcome is unknown", who(call), call.Err)
	}
	if call.Is.Has("unknown") {
		for _, s := range append([]string{"conflict", "not found"}, refusals...) {
			if call.Is.Has(s) {
				c.report(idx, 5, "%s returned an unknown outcome that also matches %s: %v", who(call), s, call.Err)
			}
		}
		if !call.Is.Has("cause") {
			c.report(idx, 5, "%s returned an unknown outcome without its cause: %v", who(call), call.Err)
		}
		return
	}
	stale := call.Is.Has("stale") || call.Op == Settle && call.Is.Has("invalid") && call.Version != ""
	if !stale || len(fl.seen) != 1 || !fl.seen[0].sound() {
		return
	}
	d := fl.seen[0].rec
	mine := d.h.Identity == identityOf(call) && d.h.Writer == call.Writer && d.h.Epoch == call.Epoch
	switch call.Op {
	case Push, Settle:
		mine = mine && bytes.Equal(d.body.Payload, call.Payload)
	case Seal:
		// A seal of a stream's record begins a tenure at its epoch: a
		// record of its writer and epoch that began none is another
		// write's (a commit's), which the seal cannot be.
		mine = mine && (!d.h.Stream() || d.h.Since == call.Epoch)
	default:
		mine = false
	}
	if mine {
		c.report(idx, 5, "%s was refused (%v) while the record was its own write throughout", who(call), call.Err)
	}
}

// checkRetried judges promise 6: a call that ended on a plain failure
// after transient faults made all its attempts (the transient faults and
// the lost races it retried). A plain failure with no transient fault
// recorded is not judged: the history does not show it was one.
func (c *Checker) checkRetried(idx int, fl *flight) {
	call := fl.call
	if call.Err == nil || hasAny(call.Is, classified...) || fl.transient == 0 || fl.unretried != "" {
		return
	}
	attempts := fl.transient
	for _, e := range call.Events {
		if e.Retrying {
			attempts++
		}
	}
	if limit := c.maxAttempts(call); attempts < limit {
		c.report(idx, 6, "%s gave up after %d transient faults and %d attempts in all, fewer than %d: %v", who(call), fl.transient, attempts, limit, call.Err)
	}
}

// unretried reports whether ch, a transient fault of a request made for
// call, failed a request promise 6 says is not retried: PutBlob's create
// of its blob (its reader cannot be read twice), Collect's listing of
// the shard's blobs and its deletes of them, and the one attempt of the
// probe a Fence with Probe set makes before its first write. (Collect's
// clock blob, in the reserved space, is created and deleted as a read is
// retried.)
func unretried(call *Call, ch *Change) bool {
	switch {
	case call == nil:
		return false
	case strings.HasPrefix(ch.Key, keys.Probe(call.Prefix)):
		return true
	case call.Op == PutBlob:
		return ch.Request == "create blob"
	case call.Op == Collect:
		return ch.Request == "list blobs" || (ch.Request == "delete blob" || ch.Request == "delete blobs") && !reserved(call, ch.Key)
	}
	return false
}

// again reports whether ch, a change made for call, is one more of the
// requests unretried names: a blob created by a PutBlob, a blob of the
// shard deleted by a Collect, or a probe's put (its cleanup deletes).
func again(call *Call, ch *Change) bool {
	if strings.HasPrefix(ch.Key, keys.Probe(call.Prefix)) {
		return ch.Kind == "put"
	}
	switch call.Op {
	case PutBlob:
		return ch.Kind == "create blob"
	case Collect:
		return ch.Kind == "delete blob" && !reserved(call, ch.Key)
	}
	return false
}

// reserved reports whether key is in the reserved space of call's
// Fence's prefix.
func reserved(call *Call, key string) bool {
	return strings.HasPrefix(key, prefixOf(call)+"_")
}

// checkNotRetried judges the second half of promise 6 at a call's end: a
// PutBlob, or a Collect, whose request that is not retried failed
// (unretried) returns an error; the changes it made after the failure are
// judged as they come (again).
func (c *Checker) checkNotRetried(idx int, fl *flight) {
	if call := fl.call; fl.unretried != "" && call.Err == nil {
		c.report(idx, 6, "%s returned nil after its %s failed, which it does not retry", who(call), fl.unretried)
	}
}

// checkAcked judges promise 4 on a write of a record that returned nil:
// the record holds it at its End, unless a write at a higher epoch
// replaced it, and from then on until one does.
func (c *Checker) checkAcked(idx int, fl *flight) {
	call := fl.call
	if call.Err != nil || !recordOp(call.Op) || call.Key == "" || c.st.changedOutsideSince(call.Key, fl.begin) {
		return
	}
	mine := func(v *value) bool {
		if !v.sound() || v.rec.h.Writer != call.Writer || v.rec.h.Epoch != call.Epoch {
			return false
		}
		return (call.Op != Push && call.Op != Settle) || bytes.Equal(v.rec.body.Payload, call.Payload)
	}
	landed := false
	for _, v := range fl.seen {
		landed = landed || mine(v)
	}
	cur := c.st.values[call.Key]
	switch {
	case !landed:
		c.report(idx, 4, "%s returned nil, but the record never held its write during the call", who(call))
	case mine(cur):
		c.recordState(call.Key).acked = &ack{epoch: call.Epoch, writer: call.Writer, call: call}
	case !cur.sound() || cur.rec.h.Epoch <= call.Epoch:
		c.report(idx, 4, "%s returned nil, but its write was replaced before it returned, not by a higher epoch", who(call))
	}
}

// deposers tracks the calls of one process on one shard that depose its
// writer when refused as stale.
type deposers struct {
	inFlight int
	lastEnd  int
}

func deposerKey(proc, key string) string { return proc + "\x00" + key }

// deposerKeys are the shard keys a call may depose on.
func deposerKeys(call *Call) []string {
	switch {
	case deposingOp(call.Op) && call.Key != "":
		return []string{call.Key}
	case call.Op == Hold:
		return call.HoldsShards
	}
	return nil
}

func (c *Checker) beginWriter(idx int, fl *flight) {
	for _, k := range deposerKeys(fl.call) {
		d := c.writers[deposerKey(fl.call.Proc, k)]
		if d == nil {
			d = &deposers{lastEnd: -1}
			c.writers[deposerKey(fl.call.Proc, k)] = d
		}
		d.inFlight++
	}
}

func (c *Checker) endWriter(idx int, fl *flight) {
	if _, began := c.flights[fl.call.ID]; !began {
		return
	}
	for _, k := range deposerKeys(fl.call) {
		if d := c.writers[deposerKey(fl.call.Proc, k)]; d != nil {
			d.inFlight--
			d.lastEnd = idx
		}
	}
}

// overlapped reports whether another call of fl's process that may depose
// key was in flight at some moment of fl's call.
func (c *Checker) overlapped(fl *flight, key string) bool {
	d := c.writers[deposerKey(fl.call.Proc, key)]
	if d == nil {
		return false
	}
	self := 0
	for _, k := range deposerKeys(fl.call) {
		if k == key {
			self = 1
		}
	}
	return d.inFlight > self || d.lastEnd > fl.begin
}

// contextPair is one context as a call's Before and After show it.
type contextPair struct{ b, a Context }

// pairContexts pairs the contexts of Before and After: by ID when the
// recorder gives them one, else by position.
func pairContexts(before, after []Context) []contextPair {
	var out []contextPair
	byID := map[int]Context{}
	for _, b := range before {
		if b.ID != 0 {
			byID[b.ID] = b
		}
	}
	for i, a := range after {
		if a.ID != 0 {
			if b, ok := byID[a.ID]; ok {
				out = append(out, contextPair{b, a})
			}
			continue
		}
		if i < len(before) {
			b := before[i]
			if b.ID == 0 && b.Kind == a.Kind && b.Lease == a.Lease && b.Key == a.Key {
				out = append(out, contextPair{b, a})
			}
		}
	}
	return out
}

// endings are the causes with which something other than a stale refusal
// ends a Deposed context: the lease, or the caller.
var endings = []string{"lease lost", "lease expired", "canceled", "deadline"}

// checkDeposed judges promise 18: a stale refusal of a writer's write
// ends the Deposed contexts of its shard on its Fence, with the refusal as
// the cause; nothing else of the package ends them but the lease (a
// Settle, a Collect and a Check, whatever they return, end none).
func (c *Checker) checkDeposed(idx int, fl *flight) {
	call := fl.call
	if call.Key == "" {
		return
	}
	stale := deposingOp(call.Op) && call.Is.Has("stale") && !call.Is.Has("unknown")
	quiet := call.Op == Settle || call.Op == Collect || call.Op == Check || deposingOp(call.Op) && (call.Err == nil || call.Is.Has("unknown"))
	for _, p := range pairContexts(call.Before, call.After) {
		if p.a.Kind != "deposed" || p.a.Key != call.Key || p.b.Done {
			continue
		}
		switch {
		case stale && !p.a.Done:
			c.report(idx, 18, "%s was refused as stale, but the Deposed context of its shard is not done", who(call))
		case stale && !p.a.Is.Has("stale") && !hasAny(p.a.Is, endings...):
			c.report(idx, 18, "%s was refused as stale, but the Deposed context ended with %v", who(call), p.a.Cause)
		case quiet && p.a.Done && !hasAny(p.a.Is, endings...) && !c.overlapped(fl, call.Key):
			c.report(idx, 18, "%s ended with %v and the Deposed context of its shard ended during it with %v", who(call), call.Err, p.a.Cause)
		}
	}
}

// checkObserved judges promise 27: every event names an Op WriteEvent
// names, a write of a record that ended (nil or refused) was seen
// ending, each race lost was seen retried or ending its write, every other write that landed (a blob, a lease's record, the
// brand, a collection's horizon, a floor, a settle's log entry) was seen
// ending under its Op, and none was seen ending twice. A call refused as
// an invalid argument may be refused before it writes, and is not
// required an event. When the events are placed, checkObservedWhen judges
// when they came.
func (c *Checker) checkObserved(idx int, fl *flight) {
	c.checkObservedWhen(idx, fl)
	call := fl.call
	ends := map[string]int{} // per Op and key: the events that end a write
	retried, failed := 0, 0
	for _, e := range call.Events {
		if !observedOps[e.Op] {
			c.report(idx, 27, "%s: the Observer saw Op %s, which WriteEvent does not name", who(call), quote(e.Op))
		}
		switch {
		case e.Retrying:
			retried++
		case e.Err != nil:
			failed++
		}
		if !e.Retrying {
			ends[e.Op+"\x00"+e.Key]++
		}
	}
	// Each race lost is retried, seen so, or ends its write, which then
	// failed.
	if fl.conflicts > retried+failed {
		c.report(idx, 27, "%s lost %d races, and the Observer saw %d retried and %d writes fail", who(call), fl.conflicts, retried, failed)
	}
	if call.Op != Hold && call.Op != Epoch {
		// A Hold seals and renews again and again, a Lease's Epoch may
		// renew: one call, many writes of one key.
		for k, n := range ends {
			if op, key, _ := strings.Cut(k, "\x00"); n > 1 {
				c.report(idx, 27, "%s: the Observer saw its %s of %s end %d times", who(call), op, quote(key), n)
			}
		}
	}
	for _, w := range fl.writes {
		if op, ok := c.observedAs(call, w.ch); ok && !seenEnding(call, op) {
			c.report(idx, 27, "%s made a %s of %s and the Observer saw no final %s event", who(call), w.ch.Kind, quote(w.ch.Key), op)
		}
	}
	// A Collect pass is seen once: its horizon's write, or its end,
	// refusals included (but an invalid argument's).
	if call.Op == Collect && !call.Is.Has("invalid") && !seenEnding(call, "collect") {
		c.report(idx, 27, "%s ended (%v) and the Observer saw no final collect event", who(call), call.Err)
	}
	if !recordOp(call.Op) {
		return
	}
	n := 0
	for _, e := range call.Events {
		if e.Op == string(call.Op) && !e.Retrying {
			n++
		}
	}
	if n == 0 && (call.Err == nil || refused(call) && !call.Is.Has("invalid")) {
		c.report(idx, 27, "%s ended (%v) and the Observer saw no final %s event", who(call), call.Err, call.Op)
	}
}

// observedAs is the Op under which the Observer sees a change made for
// call that landed, and false for a change it does not see (a delete, a
// probe's keys, a collection's clock) or that the call's own end speaks
// of (a Push's record).
func (c *Checker) observedAs(call *Call, ch *Change) (string, bool) {
	if ch.Kind == "create blob" {
		space, ok := c.spaceOf(call)
		return "blob", ok && strings.HasPrefix(ch.Key, space)
	}
	if ch.Kind != "put" {
		return "", false
	}
	switch class, _ := c.classify(ch.Key); class {
	case classRecord:
		// A write of a record by its own call is judged on the call's
		// end (checkObserved).
		switch {
		case call.Op == Collect:
			return "collect", true
		case call.Op == Hold:
			return "seal", true
		}
	case classLease:
		return "lease", true
	case classBrand:
		return "brand claim", true
	case classFloor:
		return "floor", true
	case classSettleLog:
		return "settle log", true
	}
	return "", false
}

// seenEnding reports whether the Observer saw a write of op end during
// call ("lease": of a Lease's record, whatever it did).
func seenEnding(call *Call, op string) bool {
	for _, e := range call.Events {
		if !e.Retrying && (e.Op == op || op == "lease" && strings.HasPrefix(e.Op, "lease ")) {
			return true
		}
	}
	return false
}

// checkKeys judges promise 28 on a change made for call: it stays within
// the call's shard (its record and blobs), the shards a Hold names, its
// prefix's reserved space and Valkey's keys of the default prefix's.
func (c *Checker) checkKeys(idx int, call *Call, ch *Change) {
	key := ch.Key
	switch {
	case key == call.Key && key != "":
		return
	case strings.HasPrefix(key, prefixOf(call)+"_"), key == keys.Wait, strings.HasPrefix(key, keys.Wait+"{"), strings.HasPrefix(key, keys.Staging):
		// Its prefix's reserved space, and Valkey's own keys in the
		// default prefix's.
		return
	}
	for _, k := range call.HoldsShards {
		if key == k {
			return
		}
	}
	if space, ok := c.spaceOf(call); ok && strings.HasPrefix(key, space) {
		return
	}
	c.report(idx, 28, "%s made a %s of %s, outside its keys", who(call), ch.Kind, quote(key))
}

// checkPrefix judges promise 28 on a call's prefix: one that could reach
// into another's keys is refused.
func (c *Checker) checkPrefix(idx int, call *Call) {
	if call.Err == nil && keys.CheckPrefix(call.Prefix) != nil {
		c.report(idx, 28, "%s returned nil under prefix %s, which reaches into another prefix's keys", who(call), quote(call.Prefix))
	}
}
