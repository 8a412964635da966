package promise

import (
	"cmp"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/writefence/writefence/internal/keys"
	"github.com/writefence/writefence/internal/record"
)

// defaultIdentity is the wire identity of a Fence whose Identity is empty.
const defaultIdentity = "writefence/v1"

// defaultMaxAttempts is a Fence's MaxAttempts when it states none.
const defaultMaxAttempts = 10

// Options configure a Checker. The zero value is the defaults.
type Options struct {
	// Prefixes are key prefixes whose keys the Checker recognizes before
	// any call names them: an outside change to a key under a prefix no
	// call has named yet is otherwise kept as an opaque value until one
	// does. Every call's Prefix is added when it begins, and the default
	// prefix always counts.
	Prefixes []string

	// MaxAttempts is the attempts a call whose MaxAttempts is 0 makes
	// before a transient failure ends it (promise 6); 0 means 10, the
	// package's default.
	MaxAttempts int

	// HeadPush says the Fences decide a Push on a record's head: the
	// store declares a PrefixReader. A record rewritten whole from
	// outside through the store's writes (a change not InPlace) whose
	// head is sound, its payload damaged, may then be replaced by a Push
	// (promise 7).
	HeadPush bool
}

// Violation is one breach of a promise that a history shows.
type Violation struct {
	Promise int    // the promise's number in the package documentation
	Msg     string // what was seen, naming the call
	Entry   int    // the index in the history of the entry that revealed it
}

// String returns "promise N: " and the message.
func (v Violation) String() string { return fmt.Sprintf("promise %d: %s", v.Promise, v.Msg) }

// Checker checks the promises on a history, one entry at a time. It keeps
// a replica of the store, built from the history's changes, and the calls
// in flight; each entry is judged against what came before it, so a
// Checker can follow a history as it is recorded. A Checker is not safe
// for concurrent use: histories are ordered, and so are their entries.
type Checker struct {
	opts Options
	next int // the index of the next entry

	found []Violation // what the entry being added revealed

	prefixes map[string]prefixKeys // every prefix seen, by its normal form
	calls    map[int]*Call         // every call that began, by ID
	flights  map[int]*flight       // the calls in flight, by ID
	watch    map[string][]*flight  // the calls in flight that follow a key's contents
	leaseAt  map[string][]*flight  // the calls of Lease values in flight, by their lease record's key (promise 30)
	blobSeen map[string][]*flight  // the Open calls in flight, by their blob's key

	st      replica
	records map[string]*recordState              // per record key
	terms   map[string]map[uint64][16]byte       // per lease key: the incarnation that first wrote each term, since the last outside change
	incs    map[string]map[[16]byte]*incarnation // per lease key and incarnation: what its records showed, never reset
	leases  map[string]*leaseValue               // per Lease value (Call.Lease)
	sources map[string]*termSource               // per TermSource (Call.TermSource)
	claims  map[string]int                       // per brand key: creates by calls since the last outside delete
	writers map[string]*deposers                 // per process and shard key: the calls that may depose
	beside  map[string]map[int]int               // per process: the ID of each Deposed context seen running beside a Hold's context, to that one's ID
	running map[string]map[int]int               // per process: the index at which each context was last seen running, by its ID (promises 14 and 18)
	seenBy  map[string]mark                      // per process and record key: the highest epoch its Fence saw (promise 29)
	heldBy  map[string]uint64                    // per process and record key: the highest epoch the record held during its calls since it last forgot it, the most its Fence can have seen (29)
	floors  map[string]mark                      // per record key: the floor its shard keeps (promise 31)
}

// NewChecker returns a Checker with opts.
func NewChecker(opts Options) *Checker {
	c := &Checker{
		opts:     opts,
		prefixes: map[string]prefixKeys{},
		calls:    map[int]*Call{},
		flights:  map[int]*flight{},
		watch:    map[string][]*flight{},
		leaseAt:  map[string][]*flight{},
		blobSeen: map[string][]*flight{},
		st:       newReplica(),
		records:  map[string]*recordState{},
		terms:    map[string]map[uint64][16]byte{},
		incs:     map[string]map[[16]byte]*incarnation{},
		leases:   map[string]*leaseValue{},
		sources:  map[string]*termSource{},
		claims:   map[string]int{},
		writers:  map[string]*deposers{},
		beside:   map[string]map[int]int{},
		running:  map[string]map[int]int{},
		seenBy:   map[string]mark{},
		heldBy:   map[string]uint64{},
		floors:   map[string]mark{},
	}
	c.learnPrefix("")
	for _, p := range opts.Prefixes {
		c.learnPrefix(p)
	}
	return c
}

// Check adds every entry of h in order and returns every violation.
func (c *Checker) Check(h *History) []Violation {
	var all []Violation
	for _, e := range h.Entries {
		all = append(all, c.Add(e)...)
	}
	return all
}

// Add consumes the next entry of a history and returns the violations it
// revealed.
func (c *Checker) Add(e Entry) []Violation {
	idx := c.next
	c.next++
	c.found = nil
	switch {
	case e.Begin != nil:
		c.begin(idx, e.Begin)
	case e.Change != nil:
		c.change(idx, e.Change)
	case e.End != nil:
		c.end(idx, e.End)
	}
	return c.found
}

func (c *Checker) report(idx, promise int, format string, a ...any) {
	c.found = append(c.found, Violation{Promise: promise, Msg: fmt.Sprintf(format, a...), Entry: idx})
}

// flight is what the Checker gathers about one call between its Begin and
// its End.
type flight struct {
	call  *Call
	begin int // the index of its Begin entry

	writes    []write // the changes made for it, faults aside
	made      []write // every change made for it, faults too, reads aside (promise 27's "when")
	transient int     // its "transient" faults of requests it retries
	lost      bool    // a "lost" fault was made for it
	conflicts int     // its races lost ("conflict" faults), a probe's aside
	// unretried names the first transient fault of a request promise 6
	// says the call does not retry ("" for none): see unretried.
	unretried string

	// seen holds the contents of watched(call) from Begin on: what the key held
	// at Begin, then every content it took (nil when absent).
	seen []*value
	// blobData holds the bytes the blob an Open names held during the
	// call.
	blobData [][]byte

	// Settle and Collect: the blob keys of the shard's blob space at Begin.
	blobsAtBegin []string
	// Collect, in a history that records its reads: the record at each
	// read of it, and whether it listed its blobs, and read the record
	// since.
	reads                 []*value
	listed, readSinceList bool
	// Collect, of a Fence that reads the brand before every write: the
	// brand at its last read, and whether it read the brand since it
	// listed its blobs.
	brand          *value
	brandSinceList bool
	// Epoch: the highest epoch of its Lease or TermSource handed out by a
	// call that ended before this one began.
	maxEnded uint64
	// Claim: its create of the brand landed.
	claimed bool
	// Hold: the terms of its lease records, and whether one was released.
	leaseTerms []uint64
	released   bool
	// A Lease value's call: its puts of the lease record, in order, and
	// the contents of that record from Begin on (nil when absent), once
	// the call names the lease (promise 30).
	leasePuts []leasePut
	leaseSeen []*value
}

// write is one change made for a call and the content it stored.
type write struct {
	ch *Change
	v  *value // of a put; nil otherwise
	at int    // its index in the history (made)
}

func (c *Checker) begin(idx int, call *Call) {
	c.learnPrefix(call.Prefix)
	c.calls[call.ID] = call
	fl := &flight{call: call, begin: idx}
	c.flights[call.ID] = fl
	if key := watched(call); key != "" {
		fl.seen = []*value{c.st.values[key]}
		c.watch[key] = append(c.watch[key], fl)
	}
	switch call.Op {
	case Open:
		if k, ok := c.blobKeyOf(call, call.Name); ok {
			if b := c.st.blobs[k]; b != nil && b.exists {
				fl.blobData = append(fl.blobData, b.data)
			}
			c.blobSeen[k] = append(c.blobSeen[k], fl)
		}
	case Settle, Collect:
		if space, ok := c.spaceOf(call); ok {
			for k := range c.st.spaces[space] {
				fl.blobsAtBegin = append(fl.blobsAtBegin, k)
			}
		}
	}
	c.beginWriter(idx, fl)
	c.contextsSeen(idx, call, call.Before)
	c.beginLease(idx, fl)
}

func (c *Checker) change(idx int, ch *Change) {
	call := c.calls[ch.Call]
	fl := c.flights[ch.Call]
	if ch.Kind == "read" {
		c.collectRead(fl, ch)
		return
	}
	if fl != nil {
		fl.made = append(fl.made, write{ch: ch, at: idx})
	}
	if ch.Kind == "fault" {
		if fl != nil {
			switch {
			case ch.Fault == "transient" && unretried(call, ch):
				if fl.unretried == "" {
					fl.unretried = ch.Request
				}
			case ch.Fault == "transient":
				fl.transient++
			case ch.Fault == "conflict" && !strings.HasPrefix(ch.Key, keys.Probe(call.Prefix)):
				fl.conflicts++
			case ch.Fault == "lost":
				// A reply lost of a request that is not retried ends
				// the call as a failure of it does.
				fl.lost = true
				if n := len(fl.leasePuts); n > 0 && fl.leasePuts[n-1].key == ch.Key {
					fl.leasePuts[n-1].lost = true
				}
				if unretried(call, ch) && fl.unretried == "" {
					fl.unretried = cmp.Or(ch.Request, "request of "+ch.Key)
				}
			}
		}
		return
	}
	if call == nil {
		c.outside(idx, ch)
		return
	}
	switch call.Op {
	case Check:
		c.report(idx, 32, "%s made a %s of %s; a check writes nothing", who(call), ch.Kind, quote(ch.Key))
	case Latest, Open, Forget, Verify, Inspect:
		c.report(idx, 33, "%s made a %s of %s; it writes nothing", who(call), ch.Kind, quote(ch.Key))
	}
	if call.Op == Collect && call.DryRun && !reserved(call, ch.Key) {
		c.report(idx, 25, "%s, a dry run, made a %s of %s; it writes only its clock's blob", who(call), ch.Kind, quote(ch.Key))
	}
	c.checkKeys(idx, call, ch)
	if fl != nil && fl.unretried != "" && again(call, ch) {
		c.report(idx, 6, "%s made a %s of %s after its %s failed: it is not retried", who(call), ch.Kind, quote(ch.Key), fl.unretried)
	}
	var nv *value
	if ch.Kind == "put" {
		nv = newValue(idx, ch)
	}
	if fl != nil {
		fl.writes = append(fl.writes, write{ch: ch, v: nv})
	} else {
		// A change that lands after its call returned: a refused call's
		// late write is judged now.
		c.checkRefusedWrite(idx, call, nil, ch)
	}
	switch ch.Kind {
	case "put":
		c.put(idx, call, fl, ch, nv)
	case "delete":
		c.checkDeleteAcked(idx, call, ch.Key)
		c.store(idx, ch.Key, nil, false)
	case "create blob":
		c.createBlob(idx, call, ch)
	case "delete blob":
		c.deleteBlob(idx, call, fl, ch)
	}
}

// put judges a put made for call, then stores it.
func (c *Checker) put(idx int, call *Call, fl *flight, ch *Change, nv *value) {
	prev := c.st.values[ch.Key]
	c.checkBrandAlways(idx, call, fl, ch)
	c.checkProbeBrand(idx, call, fl, ch)
	switch class, p := c.classify(ch.Key); class {
	case classRecord:
		k, _ := c.shardOf(ch.Key, p)
		c.putRecord(idx, call, fl, k, prev, nv)
		if nv.sound() {
			c.checkRegression(idx, call, fl, ch.Key, prev, nv)
		}
	case classLease:
		c.checkLeaseRegression(idx, call, fl, ch.Key, prev)
		c.putLease(idx, call, fl, ch, prev, nv)
	case classBrand:
		c.putBrand(idx, call, fl, ch, prev)
	case classFloor:
		c.putFloor(idx, p, ch)
	}
	c.store(idx, ch.Key, nv, false)
}

// outside applies a change made outside the package: it may do anything,
// and what depended on the key starts afresh.
func (c *Checker) outside(idx int, ch *Change) {
	switch ch.Kind {
	case "put", "delete":
		var nv *value
		if ch.Kind == "put" {
			nv = newValue(idx, ch)
		}
		if rs := c.records[ch.Key]; rs != nil {
			rs.acked = nil
			switch {
			case nv == nil:
				rs.byEpoch = nil
			case nv.sound():
				// A record set back: the writes above its epoch are
				// no longer kept, and promise 2 speaks of those the
				// store keeps.
				for e := range rs.byEpoch {
					if e > nv.record().h.Epoch {
						delete(rs.byEpoch, e)
						delete(rs.firstCall, e)
					}
				}
			}
		}
		delete(c.terms, ch.Key)
		if class, _ := c.classify(ch.Key); class == classLease && nv != nil {
			if l, check := record.DecodeLease(nv.data); check == "" {
				c.learnLease(ch.Key, l)
			}
		}
		if nv == nil {
			delete(c.claims, ch.Key)
		}
		if class, p := c.classify(ch.Key); class == classFloor {
			c.outsideFloor(p, ch.Key)
		}
		c.store(idx, ch.Key, nv, true)
	case "create blob":
		b := c.st.create(idx, ch, true)
		for _, fl := range c.blobSeen[ch.Key] {
			fl.blobData = append(fl.blobData, b.data)
		}
	case "delete blob":
		if b := c.st.blobs[ch.Key]; b != nil && b.exists {
			b.deletedOutside = true
		}
		c.st.deleteBlob(idx, ch.Key, true)
	}
}

// store sets key's content and tells the calls that follow it.
func (c *Checker) store(idx int, key string, v *value, outside bool) {
	if class, p := c.classify(key); class == classRecord {
		k, _ := c.shardOf(key, p)
		c.indexRefs(k, c.st.values[key], v)
		if h, ok := v.header(); ok {
			rs := c.recordState(key)
			rs.highest = max(rs.highest, h.Epoch)
		}
	}
	c.st.set(idx, key, v, outside)
	for _, fl := range c.watch[key] {
		fl.seen = append(fl.seen, v)
	}
	for _, fl := range c.leaseAt[key] {
		fl.leaseSeen = append(fl.leaseSeen, v)
	}
	if class, _ := c.classify(key); class == classLease {
		c.leaseRecordSet(key, v)
	}
}

// endsFirst and endsThen judge a call's flight at its end, in this order,
// around the checks of the call itself (checkObserved, checkPrefix).
var (
	endsFirst = [...]func(*Checker, int, *flight){
		(*Checker).checkRefusal, (*Checker).checkRefusedCommit, (*Checker).checkUnknown, (*Checker).checkRetried, (*Checker).checkNotRetried, (*Checker).checkAcked, (*Checker).checkDeposed,
	}
	endsThen = [...]func(*Checker, int, *flight){
		(*Checker).checkReader, (*Checker).checkClaim, (*Checker).checkOperatorRead, (*Checker).endLease, (*Checker).checkCollected, (*Checker).endSeen, (*Checker).endWriter,
	}
)

func (c *Checker) end(idx int, call *Call) {
	fl := c.flights[call.ID]
	if fl == nil {
		// An End without its Begin: judged on what it returned alone.
		c.calls[call.ID] = call
		fl = &flight{call: call, begin: idx}
	}
	c.contextsSeen(idx, call, call.After)
	for _, check := range endsFirst {
		check(c, idx, fl)
	}
	c.checkObserved(idx, fl)
	c.checkPrefix(idx, call)
	for _, check := range endsThen {
		check(c, idx, fl)
	}

	delete(c.flights, call.ID)
	c.unwatchLease(fl)
	if key := watched(call); key != "" {
		c.watch[key] = without(c.watch[key], fl)
		if len(c.watch[key]) == 0 {
			delete(c.watch, key)
		}
	}
	if k, ok := c.blobKeyOf(call, call.Name); ok && call.Op == Open {
		c.blobSeen[k] = without(c.blobSeen[k], fl)
		if len(c.blobSeen[k]) == 0 {
			delete(c.blobSeen, k)
		}
	}
}

// watched is the key whose contents a call's flight follows: its Key,
// but a Claim's brand key (promise 11).
func watched(call *Call) string {
	if call.Op == Claim {
		return keys.Brand(call.Prefix)
	}
	return call.Key
}

func without(fls []*flight, fl *flight) []*flight {
	out := fls[:0]
	for _, f := range fls {
		if f != fl {
			out = append(out, f)
		}
	}
	return out
}

// who names a call in a message.
func who(c *Call) string {
	s := fmt.Sprintf("call %d (%s %s", c.ID, quote(c.Proc), c.Op)
	switch {
	case c.Key != "":
		s += " " + quote(c.Key)
	case c.Lease != "":
		s += " of lease value " + quote(c.Lease)
	case c.TermSource != "":
		s += " of term source " + quote(c.TermSource)
	}
	if c.Writer != "" {
		s += " writer " + quote(c.Writer)
	}
	if c.Epoch != 0 {
		s += fmt.Sprintf(" epoch %d", c.Epoch)
	}
	return s + ")"
}

// quote escapes stored bytes for a message, cut short: a hostile value
// can neither forge a line nor flood one.
func quote(s string) string {
	const max = 96
	if len(s) > max {
		return strconv.Quote(s[:max]) + "…"
	}
	return strconv.Quote(s)
}

func identityOf(c *Call) string {
	if c.Identity == "" {
		return defaultIdentity
	}
	return c.Identity
}

func (c *Checker) maxAttempts(call *Call) int {
	switch {
	case call.MaxAttempts > 0:
		return call.MaxAttempts
	case c.opts.MaxAttempts > 0:
		return c.opts.MaxAttempts
	}
	return defaultMaxAttempts
}

// nanos is t in Unix nanoseconds, and false for the zero time, which a
// recorder leaves when it did not know.
func nanos(t time.Time) (int64, bool) {
	if t.IsZero() {
		return 0, false
	}
	return t.UnixNano(), true
}

// byClock is nanos of t read by a clock skew ahead of the history's.
func byClock(t time.Time, skew time.Duration) (int64, bool) {
	n, ok := nanos(t)
	return n + int64(skew), ok
}

// prefixOf is a call's prefix in its normal form.
func prefixOf(c *Call) string {
	if c.Prefix == "" {
		return keys.DefaultPrefix
	}
	return c.Prefix
}
