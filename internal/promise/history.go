// Package promise checks the package's numbered promises (see the package
// documentation of writefence, "Promises") on a recorded history: every
// call a test made, what it returned, and every change the store took, in
// the order they happened. The model test, the linearizability test, the
// end-to-end lease test and the simulation record their histories in this
// form and feed them to one Checker, so that one definition of "correct"
// serves them all. It is not part of the public API.
package promise

import (
	"time"

	"github.com/writefence/writefence/internal/record"
)

// Op names a call a history records.
type Op string

// The calls.
const (
	Push    Op = "push"
	Update  Op = "update"
	Commit  Op = "commit"
	Seal    Op = "seal"
	Settle  Op = "settle"
	PutBlob Op = "put blob"
	Latest  Op = "latest"    // Latest or Inspect
	Open    Op = "open blob" // OpenBlob, and the read of its bytes
	Collect Op = "collect"
	Claim   Op = "brand claim"
	Acquire Op = "lease acquire"
	Renew   Op = "lease renew"
	Release Op = "lease release"
	Hold    Op = "lease hold"
	Epoch   Op = "epoch"         // EpochSource.Epoch of a Lease or a TermSource
	Check   Op = "check"         // Fence.Check of one shard
	Forget  Op = "forget"        // Fence.Forget: the Fence drops what it saw of a shard
	Verify  Op = "brand verify"  // Fence.VerifyBrand; Key is the brand key
	Inspect Op = "lease inspect" // Fence.InspectLease; Key is the lease's key
	Settled Op = "lease settle"  // Lease.Settle, an operator's; Key is the lease's key, Term the term settled
)

// Call is one call a process made: its arguments, and, once it ended,
// its result. Fields that do not apply to the call's Op are zero.
type Call struct {
	ID   int    // unique in the history, from 1
	Proc string // the process that made it: one Fence, its Leases and its Deposed contexts
	Op   Op

	// The Fence's configuration.
	Prefix      string // the Fence's Prefix, "" for the default
	Identity    string // the Fence's identity, "" for the default
	BrandAlways bool   // the Fence's Brand is BrandVerifyAlways
	BrandReads  bool   // the Fence's Brand is not zero: it reads the brand before its writes (BrandAlways too)
	MaxAttempts int    // the Fence's MaxAttempts, 0 for the default
	KeepFloor   bool   // the Fence's KeepFloor

	// The shard, for calls on one.
	Plugin, Shard string
	Key           string // the shard's record key

	Writer  string
	Epoch   uint64
	Payload []byte // push: the payload; settle: the settlement's

	// Settle. NoBlobStore: the call's Fence has no blob store, so it sees
	// no blobs (promise 9 then holds for the references it can read).
	// Lost: the settle of a record lost or set back (Settlement.Lost).
	Version     string
	Floor       uint64
	DropBlobs   bool
	NoBlobStore bool
	Lost        bool

	// Collect.
	RecordGone bool
	DryRun     bool

	// Commit: the references its next was given when the Fence last
	// called it (those of the record it decided on), and those of the
	// manifest it returned; the blobs it newly references are those of
	// Blobs not in Current.
	Current, Blobs []record.BlobRef

	// Leases: the Lease value the call is of (unique per value in the
	// history, such as "p1/lease#2"), its Name and Holder, and for Hold the
	// shards it names (their record keys).
	Lease       string
	LeaseName   string
	Holder      string
	HoldsShards []string
	// Skew is how far the clock of the call's Lease value (Lease.Clock)
	// runs ahead of the history's (behind when negative): promises 13 and
	// 14 speak of the time by that clock.
	Skew time.Duration
	// TermSource: the source's label when the call is its Epoch.
	TermSource string

	Start time.Time
	End   time.Time // zero until it ended

	// The result: the error, and the names of the sentinels it matches
	// (see Matches), which is what the checker reasons on.
	Err      error
	Is       Matches
	CtxEnded bool           // the ctx the call was given had ended when it returned (recorded for Hold)
	Claimed  bool           // brand claim
	Term     uint64         // lease acquire; epoch of a TermSource: the term its term function reported during the call, 0 for none
	Got      uint64         // epoch: the epoch handed out
	Ref      record.BlobRef // put blob: the reference returned
	Read     *record.Header // latest: the header of what it returned (nil when it returned an error)
	Leased   *record.Lease  // lease inspect: the record it returned, its Incarnation zero (nil when it returned an error)
	Found    *string        // brand verify and claim: the value its *WireError names (nil when it names the key absent, or for no *WireError)
	ReadBody record.Body    // latest: the body it returned
	Bytes    []byte         // open blob: every byte read
	Name     string         // open blob: the blob's name
	Deleted  []string       // collect: the keys the report says it deleted
	Stale    *record.Header // refused as stale: the epoch and writer its *StaleEpochError names as recorded
	Regress  *record.Header // refused as regressed by what its Fence saw of the record: the epoch and writer its *EpochRegressedError names as seen

	// Events are the Observer's events during the call, in order.
	Events []Event

	// Contexts are the states of the process's contexts when the call
	// started and ended (see Context).
	Before, After []Context
}

// Event is what an Observer saw of one write.
type Event struct {
	Op       string
	Key      string
	Retrying bool
	Err      error
	Is       Matches
	// Place is the event's place in the history: the number of entries
	// recorded before the Observer saw it, so that it came after entry
	// Place-1 and before entry Place. 0 when the recorder did not place
	// it (a call's Begin always comes first): promise 27's "when it ends"
	// is then not judged of it.
	Place int
}

// Context is the state of one context a process ships under: a Hold's, or
// a Deposed context of one shard.
type Context struct {
	// ID tells one context apart in Before and After, which promises 16
	// and 18 compare; 0 when the recorder lists contexts in the order
	// they were made and never drops one, so that a position names one.
	ID    int
	Kind  string // "hold" or "deposed"
	Lease string // the Lease value of a hold context
	Key   string // the shard's record key, of a deposed context
	Done  bool
	Cause error   // context.Cause once done
	Is    Matches // the sentinels Cause matches
}

// Matches names the sentinels an error matches, as the recording test
// classified it with errors.Is: "stale" (ErrStaleEpoch), "conflict",
// "unknown" (ErrOutcomeUnknown), "wire", "corrupt", "invalid"
// (ErrInvalidArgument), "not found", "too large", "untrusted",
// "lease held", "lease lost", "lease expired", "takeover timeout",
// "term ended", "regressed" (ErrEpochRegressed), "permission"
// (fs.ErrPermission), "unsupported"
// (errors.ErrUnsupported), "canceled" (context.Canceled), "deadline"
// (context.DeadlineExceeded), and "cause" when an ErrOutcomeUnknown error
// carries a cause besides the sentinel.
type Matches []string

// Has reports whether m names sentinel.
func (m Matches) Has(sentinel string) bool {
	for _, s := range m {
		if s == sentinel {
			return true
		}
	}
	return false
}

// Change is one change the store took, in the order it took it: a write
// that landed (whatever its caller was told), a delete, a blob created or
// deleted. Attempts that changed nothing are not changes, but a fault the
// test injected into a call is recorded as a change with Fault set.
type Change struct {
	Call     int    // the call it was made for; 0 when made outside the package (damage, a delete, a rebrand)
	Kind     string // "put", "delete", "create blob", "delete blob", "fault", or "read" (see below)
	Key      string
	Data     []byte    // put: the bytes stored; create blob: the blob's bytes
	Version  string    // put: the new version (of the damage, for a damaging put)
	Modified time.Time // create blob: the creation time the store reports
	// InPlace marks an outside put that damages the bytes without a new
	// version (a file edited on disk).
	InPlace bool
	// A "read" changes nothing: a history may record a Collect's reads of
	// its record (Key the record's) and listings of its blobs (Key the
	// blob space), by which promise 32 is judged.
	//
	// Fault, for Kind "fault": "transient" (a read or write failed and
	// changed nothing), "lost" (a reply was lost; a put that landed is a
	// change of its own), "denied" (a write refused, fs.ErrPermission),
	// "conflict" (a conditional put refused: a race lost, promise 27).
	Fault string
	// Request, for Kind "fault", names the request that failed when the
	// recorder knows it: "get", "put", "create blob", "list blobs",
	// "delete blob", "delete blobs" and the like. Promise 6's second half
	// is judged on the faults that name theirs.
	Request string
	At      time.Time
}

// Entry is one entry of a history: a call's start, a change, or a call's
// end.
type Entry struct {
	Begin  *Call
	Change *Change
	End    *Call
}

// History is what happened, in order. Begin and End of one call share the
// *Call, which End completes.
type History struct {
	Entries []Entry
}

// Begin records that c started.
func (h *History) Begin(c *Call) { h.Entries = append(h.Entries, Entry{Begin: c}) }

// Change records a change the store took.
func (h *History) Change(ch Change) { h.Entries = append(h.Entries, Entry{Change: &ch}) }

// Finish records that c ended.
func (h *History) Finish(c *Call) { h.Entries = append(h.Entries, Entry{End: c}) }
