// Package fakestore is the tests' one configurable fake store. A Store
// wraps any ConditionalStore, offers exactly the capabilities asked of it,
// counts the calls made of it, and lets a test step into each call: fail
// it before it reaches the wrapped store, lose its reply after, hold it
// at a gate, or replace it. It is not part of the public API.
//
// A Store steps into a store's calls, whoever makes them. A test that
// steps only into a Fence's own reads, writes and back-offs does so
// without a store, through the context hooks of package hook.
//
// # Capabilities
//
// A Store offers what the store it wraps offers, less what Options.Hide
// names, plus what a replacement in Options supplies: Deleter and Lister
// (together, as every store of this repository has both or neither) when
// the wrapped store has them; PrefixReader, BrandedPutter, BlobStore,
// ConsistentBlobLister and BlobBatchDeleter when the wrapped store
// declares them (writefence.Capable). The Store declares what it offers as
// its own, so a Fence over it goes through its methods, never around them.
// Offering a declared capability it also declares PartsPutter (so a
// PutParts replacement needs one), and BlobWriter beside BlobStore: those reach the wrapped store through
// writefence.PutParts and writefence.WriteBlob, so the wrapped store gets
// the calls a Fence over it would make, and a Fence's choices, which
// depend on the other capabilities only, are those it makes over the
// wrapped store.
//
// # Order of a call
//
// A call is counted (Calls); runs Options.Before, whose error ends it;
// meets the faults injected for it (Inject) that fail it or hold it at a
// gate; reaches the replacement of its method in Options, or else the
// wrapped store, where an answer without error counts as OK; meets the
// faults that lose its reply; and runs Options.After, whose error is what
// the caller sees. A call that returns an error returns the zero value of
// its other results with it, except DeleteBlobs, which returns the keys
// the store behind it deleted with that store's error.
//
// A Store that is given no hooks, no faults and no ByKey allocates
// nothing of its own on a call, so a benchmark can count through it.
package fakestore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/writefence/writefence"
)

// Op names a method of a Store, for its counters, faults and hooks.
type Op uint8

// The methods of a Store. Put is PutIfVersion and PutPartsIfVersion;
// CreateBlob is CreateBlob and WriteBlob.
const (
	Get Op = iota
	Put
	GetPrefix
	PutIfBranded
	Delete
	List
	CreateBlob
	OpenBlob
	StatBlob
	ListBlobs
	ListBlobsConsistent
	DeleteBlob
	DeleteBlobs
	numOps
)

var opNames = [numOps]string{"Get", "Put", "GetPrefix", "PutIfBranded", "Delete", "List", "CreateBlob", "OpenBlob", "StatBlob", "ListBlobs", "ListBlobsConsistent", "DeleteBlob", "DeleteBlobs"}

func (op Op) String() string {
	if op < numOps {
		return opNames[op]
	}
	return fmt.Sprintf("Op(%d)", uint8(op))
}

// Caps is a set of optional capabilities of a ConditionalStore.
type Caps uint8

// The optional capabilities a Store can offer or hide. The blob
// capabilities after BlobStore are capabilities of a BlobStore: hiding
// BlobStore hides them too.
const (
	DeleterLister Caps = 1 << iota // Deleter and Lister, together
	PrefixReader
	BrandedPutter
	BlobStore
	ConsistentBlobLister
	BlobBatchDeleter

	// Declared is every capability a store declares (writefence.Capable):
	// hiding it leaves Get, PutIfVersion, Delete and List, as a wrapper
	// that embeds a store and declares nothing has.
	Declared = PrefixReader | BrandedPutter | BlobStore | ConsistentBlobLister | BlobBatchDeleter

	// All is every optional capability: hiding it leaves Get and
	// PutIfVersion, as a wrapper that embeds a ConditionalStore has.
	All = DeleterLister | Declared

	blobs = BlobStore | ConsistentBlobLister | BlobBatchDeleter
)

// Call is one call of a Store, as its hooks see it.
type Call struct {
	Op   Op
	Key  string   // the key, or the prefix of a listing; empty for DeleteBlobs
	Keys []string // the keys of DeleteBlobs

	// Parts are the data of a write (Put, PutIfBranded), whose
	// concatenation is written; Expect is its expected version.
	Parts  [][]byte
	Expect string
}

// Data returns the concatenation of c.Parts.
func (c Call) Data() []byte { return bytes.Join(c.Parts, nil) }

// Options configure a Store. Every field is optional.
type Options struct {
	// Hide names the capabilities of the wrapped store the Store does not
	// offer; a replacement below still offers its own.
	Hide Caps

	// ByKey counts the calls by key too (Calls and OK of keys, Keys): a
	// counter a key, which a benchmark would see in its heap.
	ByKey bool

	// Before, when set, runs before each call; an error ends the call
	// with it, before it reaches the store. It may block, to hold the
	// call.
	Before func(ctx context.Context, c Call) error

	// After, when set, runs after each call that Before let through, with
	// the call's error (nil when it succeeded); what it returns is the
	// error the caller sees.
	After func(ctx context.Context, c Call, err error) error

	// Faults are injected at the start, as by Inject.
	Faults []Fault

	// Replacements of the wrapped store's methods. PutParts replaces the
	// parts path alone (PutPartsIfVersion), which Put, when set, otherwise
	// replaces with PutIfVersion. GetPrefix and PutIfBranded are offered,
	// and declared, when set, whatever the wrapped store has; the blob
	// listings replace those of a Store that offers them.
	Get                 func(ctx context.Context, key string) ([]byte, string, error)
	Put                 func(ctx context.Context, key string, data []byte, expect string) (string, error)
	PutParts            func(ctx context.Context, key string, parts [][]byte, expect string) (string, error)
	GetPrefix           func(ctx context.Context, key string, n int64) ([]byte, int64, string, error)
	PutIfBranded        func(ctx context.Context, brandKey, identity, key string, parts [][]byte, expect string) (string, error)
	ListBlobs           func(ctx context.Context, prefix string, fn func(writefence.BlobInfo) error) error
	ListBlobsConsistent func(ctx context.Context, prefix, after string, fn func(writefence.BlobInfo) error) error
}

// Fault is a failure planned for calls of one Op.
type Fault struct {
	Op  Op
	Key string // the key it applies to; empty for every key

	// Times is how many calls it applies to; zero means every call.
	Times int

	// Err is what a call it applies to returns. Unless Lost is set the
	// call does not reach the store behind.
	Err error

	// Lost makes the call reach the store behind, and replaces the reply
	// of a call that succeeds with Err, as a reply lost on the network
	// after the store took the call; only those calls count in Times.
	Lost bool

	// Gate, when set, holds the call at the gate before it reaches the
	// store behind (see Gate); Err then is nil, or the error it returns
	// once the gate opens.
	Gate *Gate
}

// GetPrefixOf returns a GetPrefix, for Options, served by s's Get: it
// reads the whole object and returns its first n bytes, its size and its
// version, all from that one read.
func GetPrefixOf(s writefence.ConditionalStore) func(ctx context.Context, key string, n int64) ([]byte, int64, string, error) {
	return func(ctx context.Context, key string, n int64) ([]byte, int64, string, error) {
		data, v, err := s.Get(ctx, key)
		if err != nil {
			return nil, 0, "", err
		}
		return data[:min(int64(len(data)), n)], int64(len(data)), v, nil
	}
}

// ErrLostReply is an error a test can give a Fault: a reply lost on the
// network, which says nothing of the call's outcome.
var ErrLostReply = errors.New("connection reset by peer")

// Store is a fake store: the ConditionalStore, with the capabilities its
// Options made it offer, and the test's handles on it.
type Store interface {
	writefence.ConditionalStore

	// Calls returns how many calls of op were made, of any key or, with
	// keys (which needs Options.ByKey), of those keys.
	Calls(op Op, keys ...string) int64

	// OK returns how many calls of op the store behind answered without
	// an error, of any key or, with keys (which needs Options.ByKey), of
	// those keys: of writes, how many landed, whatever reply the caller
	// saw.
	OK(op Op, keys ...string) int64

	// Keys returns the keys that calls of op were made of, sorted; it
	// needs Options.ByKey.
	Keys(op Op) []string

	// BytesRead returns the bytes that Get and GetPrefix returned to their
	// callers, as a ranged GET's body counts them on a network store.
	BytesRead() int64

	// Inject plans f, after the faults planned before it for the same
	// calls.
	Inject(f Fault)

	// Clear removes the faults planned for op.
	Clear(op Op)

	// Unwrap returns the wrapped store.
	Unwrap() writefence.ConditionalStore
}

// New returns a Store over inner.
func New(inner writefence.ConditionalStore, opts Options) Store {
	s := &store{inner: inner, opts: opts, has: offered(inner, opts), faults: slices.Clone(opts.Faults)}
	s.planned.Store(int32(len(s.faults)))
	s.self = views[s.has](s)
	return s.self
}

// declares reports whether s declares the capability C as its own, as
// writefence's helpers decide it.
func declares[C any](s writefence.ConditionalStore) bool {
	c, ok := s.(writefence.Capable)
	if !ok {
		return false
	}
	if _, ok := s.(C); !ok {
		return false
	}
	d := c.Capabilities()
	t := reflect.TypeOf(s)
	return d != nil && t == reflect.TypeOf(d) && t.Comparable() && d == s
}

// offered returns the capabilities a Store over inner with opts offers.
func offered(inner writefence.ConditionalStore, opts Options) Caps {
	var has Caps
	_, deleter := inner.(writefence.Deleter)
	if _, lister := inner.(writefence.Lister); deleter && lister {
		has |= DeleterLister
	}
	for c, ok := range map[Caps]bool{
		PrefixReader:         declares[writefence.PrefixReader](inner),
		BrandedPutter:        declares[writefence.BrandedPutter](inner),
		BlobStore:            declares[writefence.BlobStore](inner),
		ConsistentBlobLister: declares[writefence.ConsistentBlobLister](inner),
		BlobBatchDeleter:     declares[writefence.BlobBatchDeleter](inner),
	} {
		if ok {
			has |= c
		}
	}
	has &^= opts.Hide
	if has&BlobStore == 0 {
		has &^= blobs
	}
	if opts.GetPrefix != nil {
		has |= PrefixReader
	}
	if opts.PutIfBranded != nil {
		has |= BrandedPutter
	}
	if opts.PutParts != nil && has&Declared == 0 {
		panic("fakestore: a PutParts replacement on a store that declares no capability, which would never be called")
	}
	return has
}

// store is the state behind every view of a Store.
type store struct {
	inner writefence.ConditionalStore
	opts  Options
	has   Caps
	self  Store // the view New returned, which declares the capabilities

	calls, oks [numOps]atomic.Int64
	read       atomic.Int64 // bytes Get and GetPrefix returned
	planned    atomic.Int32 // len(faults), read without the lock

	mu     sync.Mutex // guards the fields below
	byKey  map[opKey]*keyCounts
	faults []Fault
}

type opKey struct {
	op  Op
	key string
}

type keyCounts struct{ calls, oks int64 }

func (s *store) Unwrap() writefence.ConditionalStore { return s.inner }

func (s *store) BytesRead() int64 { return s.read.Load() }

func (s *store) Calls(op Op, keys ...string) int64 {
	return s.count(op, keys, &s.calls, func(c *keyCounts) int64 { return c.calls })
}

func (s *store) OK(op Op, keys ...string) int64 {
	return s.count(op, keys, &s.oks, func(c *keyCounts) int64 { return c.oks })
}

func (s *store) count(op Op, keys []string, total *[numOps]atomic.Int64, of func(*keyCounts) int64) int64 {
	if len(keys) == 0 {
		return total[op].Load()
	}
	s.byKeyOnly()
	s.mu.Lock()
	defer s.mu.Unlock()
	var n int64
	for _, k := range keys {
		if c := s.byKey[opKey{op, k}]; c != nil {
			n += of(c)
		}
	}
	return n
}

// byKeyOnly panics unless the calls are counted by key.
func (s *store) byKeyOnly() {
	if !s.opts.ByKey {
		panic("fakestore: the calls of a key are counted with Options.ByKey only")
	}
}

func (s *store) Keys(op Op) []string {
	s.byKeyOnly()
	s.mu.Lock()
	defer s.mu.Unlock()
	var keys []string
	for k := range s.byKey {
		if k.op == op {
			keys = append(keys, k.key)
		}
	}
	slices.Sort(keys)
	return keys
}

func (s *store) Inject(f Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = append(s.faults, f)
	s.planned.Store(int32(len(s.faults)))
}

func (s *store) Clear(op Op) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = slices.DeleteFunc(s.faults, func(f Fault) bool { return f.Op == op })
	s.planned.Store(int32(len(s.faults)))
}

// note counts a call of c's op on key, and whether it succeeded.
func (s *store) note(c *Call, ok bool) {
	counts := &s.calls
	if ok {
		counts = &s.oks
	}
	counts[c.Op].Add(1)
	if !s.opts.ByKey {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byKey == nil {
		s.byKey = map[opKey]*keyCounts{}
	}
	for _, k := range append([]string{c.Key}, c.Keys...) {
		if k == "" && c.Op == DeleteBlobs {
			continue
		}
		kc := s.byKey[opKey{c.Op, k}]
		if kc == nil {
			kc = &keyCounts{}
			s.byKey[opKey{c.Op, k}] = kc
		}
		if ok {
			kc.oks++
		} else {
			kc.calls++
		}
	}
}

// fault returns the first fault planned for c whose Lost is lost, and
// uses one of its Times; ok is false when there is none. A lost fault is
// used only by a call that succeeded, which is when it is asked for.
func (s *store) fault(c *Call, lost bool) (Fault, bool) {
	if s.planned.Load() == 0 {
		return Fault{}, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, f := range s.faults {
		if f.Op != c.Op || f.Lost != lost || (f.Key != "" && f.Key != c.Key && !slices.Contains(c.Keys, f.Key)) {
			continue
		}
		if f.Times > 0 {
			if f.Times == 1 {
				s.faults = slices.Delete(s.faults, i, i+1)
				s.planned.Store(int32(len(s.faults)))
			} else {
				s.faults[i].Times--
			}
		}
		return f, true
	}
	return Fault{}, false
}

// before starts the call c: it counts it, runs Before and the faults that
// fail it or hold it. An error ends the call.
func (s *store) before(ctx context.Context, c *Call) error {
	s.note(c, false)
	if s.opts.Before != nil {
		if err := s.opts.Before(ctx, *c); err != nil {
			return err
		}
	}
	if f, ok := s.fault(c, false); ok {
		if f.Gate != nil {
			if err := f.Gate.hold(ctx); err != nil {
				return err
			}
		}
		return f.Err
	}
	return nil
}

// after ends the call c, whose store answered err: it counts a success,
// runs the faults that lose its reply and After, and returns what the
// caller sees.
func (s *store) after(ctx context.Context, c *Call, err error) error {
	if err == nil {
		s.note(c, true)
		if f, ok := s.fault(c, true); ok {
			err = f.Err
		}
	}
	if s.opts.After != nil {
		err = s.opts.After(ctx, *c, err)
	}
	return err
}

// hooked reports whether a hook may see a call's data, which is then
// built for it.
func (s *store) hooked() bool { return s.opts.Before != nil || s.opts.After != nil }

// Gate holds the calls of the faults it is given to until it opens. Its
// zero value is a closed gate; it is not to be copied once used.
type Gate struct {
	init     sync.Once
	arrived  chan struct{} // closed when the first call arrives
	opened   chan struct{} // closed by Open
	arrive   sync.Once
	openOnce sync.Once
}

func (g *Gate) chans() {
	g.init.Do(func() { g.arrived, g.opened = make(chan struct{}), make(chan struct{}) })
}

// Arrived returns a channel closed once a call is held at g.
func (g *Gate) Arrived() <-chan struct{} {
	g.chans()
	return g.arrived
}

// Open lets the calls held at g, and every later one, go on.
func (g *Gate) Open() {
	g.chans()
	g.openOnce.Do(func() { close(g.opened) })
}

// hold holds a call until g opens or ctx ends.
func (g *Gate) hold(ctx context.Context) error {
	g.chans()
	g.arrive.Do(func() { close(g.arrived) })
	select {
	case <-g.opened:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *store) Get(ctx context.Context, key string) ([]byte, string, error) {
	c := Call{Op: Get, Key: key}
	if err := s.before(ctx, &c); err != nil {
		return nil, "", err
	}
	var data []byte
	var v string
	var err error
	if s.opts.Get != nil {
		data, v, err = s.opts.Get(ctx, key)
	} else {
		data, v, err = s.inner.Get(ctx, key)
	}
	if err := s.after(ctx, &c, err); err != nil {
		return nil, "", err
	}
	s.read.Add(int64(len(data)))
	return data, v, nil
}

func (s *store) PutIfVersion(ctx context.Context, key string, data []byte, expect string) (string, error) {
	c := Call{Op: Put, Key: key, Expect: expect}
	if s.hooked() {
		c.Parts = [][]byte{data}
	}
	if err := s.before(ctx, &c); err != nil {
		return "", err
	}
	var v string
	var err error
	if s.opts.Put != nil {
		v, err = s.opts.Put(ctx, key, data, expect)
	} else {
		v, err = s.inner.PutIfVersion(ctx, key, data, expect)
	}
	if err := s.after(ctx, &c, err); err != nil {
		return "", err
	}
	return v, nil
}

// putParts is the PartsPutter of a Store that declares capabilities.
func (s *store) putParts(ctx context.Context, key string, parts [][]byte, expect string) (string, error) {
	c := Call{Op: Put, Key: key, Parts: parts, Expect: expect}
	if err := s.before(ctx, &c); err != nil {
		return "", err
	}
	var v string
	var err error
	switch {
	case s.opts.PutParts != nil:
		v, err = s.opts.PutParts(ctx, key, parts, expect)
	case s.opts.Put != nil:
		v, err = s.opts.Put(ctx, key, bytes.Join(parts, nil), expect)
	default:
		v, err = writefence.PutParts(ctx, s.inner, key, parts, expect)
	}
	if err := s.after(ctx, &c, err); err != nil {
		return "", err
	}
	return v, nil
}

func (s *store) getPrefix(ctx context.Context, key string, n int64) ([]byte, int64, string, error) {
	c := Call{Op: GetPrefix, Key: key}
	if err := s.before(ctx, &c); err != nil {
		return nil, 0, "", err
	}
	var data []byte
	var size int64
	var v string
	var err error
	if s.opts.GetPrefix != nil {
		data, size, v, err = s.opts.GetPrefix(ctx, key, n)
	} else {
		data, size, v, err = writefence.GetPrefix(ctx, s.inner, key, n)
	}
	if err := s.after(ctx, &c, err); err != nil {
		return nil, 0, "", err
	}
	s.read.Add(int64(len(data)))
	return data, size, v, nil
}

func (s *store) putIfBranded(ctx context.Context, brandKey, identity, key string, parts [][]byte, expect string) (string, error) {
	c := Call{Op: PutIfBranded, Key: key, Parts: parts, Expect: expect}
	if err := s.before(ctx, &c); err != nil {
		return "", err
	}
	var v string
	var err error
	if s.opts.PutIfBranded != nil {
		v, err = s.opts.PutIfBranded(ctx, brandKey, identity, key, parts, expect)
	} else {
		v, err = writefence.PutIfBranded(ctx, s.inner, brandKey, identity, key, parts, expect)
	}
	if err := s.after(ctx, &c, err); err != nil {
		return "", err
	}
	return v, nil
}

// run makes a call whose only result is its error.
func (s *store) run(ctx context.Context, c Call, call func() error) error {
	if err := s.before(ctx, &c); err != nil {
		return err
	}
	return s.after(ctx, &c, call())
}

func (s *store) delete(ctx context.Context, key string) error {
	return s.run(ctx, Call{Op: Delete, Key: key}, func() error {
		return s.inner.(writefence.Deleter).Delete(ctx, key)
	})
}

func (s *store) list(ctx context.Context, prefix string, fn func(string) error) error {
	return s.run(ctx, Call{Op: List, Key: prefix}, func() error {
		return s.inner.(writefence.Lister).List(ctx, prefix, fn)
	})
}

// blobs returns the wrapped store's BlobStore, which a Store offering
// BlobStore has.
func (s *store) blobs() writefence.BlobStore { return s.inner.(writefence.BlobStore) }

func (s *store) createBlob(ctx context.Context, key string, r io.Reader) (writefence.BlobInfo, error) {
	var info writefence.BlobInfo
	err := s.run(ctx, Call{Op: CreateBlob, Key: key}, func() (err error) {
		info, err = s.blobs().CreateBlob(ctx, key, r)
		return err
	})
	if err != nil {
		return writefence.BlobInfo{}, err
	}
	return info, nil
}

func (s *store) writeBlob(ctx context.Context, key string, r io.Reader) (int64, error) {
	var size int64
	err := s.run(ctx, Call{Op: CreateBlob, Key: key}, func() (err error) {
		size, err = writefence.WriteBlob(ctx, s.inner, key, r)
		return err
	})
	if err != nil {
		return 0, err
	}
	return size, nil
}

func (s *store) openBlob(ctx context.Context, key string) (io.ReadCloser, writefence.BlobInfo, error) {
	var rc io.ReadCloser
	var info writefence.BlobInfo
	err := s.run(ctx, Call{Op: OpenBlob, Key: key}, func() (err error) {
		rc, info, err = s.blobs().OpenBlob(ctx, key)
		return err
	})
	if err != nil {
		if rc != nil {
			rc.Close()
		}
		return nil, writefence.BlobInfo{}, err
	}
	return rc, info, nil
}

func (s *store) statBlob(ctx context.Context, key string) (writefence.BlobInfo, error) {
	var info writefence.BlobInfo
	err := s.run(ctx, Call{Op: StatBlob, Key: key}, func() (err error) {
		info, err = s.blobs().StatBlob(ctx, key)
		return err
	})
	if err != nil {
		return writefence.BlobInfo{}, err
	}
	return info, nil
}

func (s *store) listBlobs(ctx context.Context, prefix string, fn func(writefence.BlobInfo) error) error {
	return s.run(ctx, Call{Op: ListBlobs, Key: prefix}, func() error {
		if s.opts.ListBlobs != nil {
			return s.opts.ListBlobs(ctx, prefix, fn)
		}
		return s.blobs().ListBlobs(ctx, prefix, fn)
	})
}

func (s *store) listBlobsConsistent(ctx context.Context, prefix, after string, fn func(writefence.BlobInfo) error) error {
	return s.run(ctx, Call{Op: ListBlobsConsistent, Key: prefix}, func() error {
		if s.opts.ListBlobsConsistent != nil {
			return s.opts.ListBlobsConsistent(ctx, prefix, after, fn)
		}
		return s.inner.(writefence.ConsistentBlobLister).ListBlobsConsistent(ctx, prefix, after, fn)
	})
}

func (s *store) deleteBlob(ctx context.Context, key string) error {
	return s.run(ctx, Call{Op: DeleteBlob, Key: key}, func() error {
		return s.blobs().DeleteBlob(ctx, key)
	})
}

func (s *store) deleteBlobs(ctx context.Context, keys []string) ([]string, error) {
	var deleted []string
	var storeErr error
	err := s.run(ctx, Call{Op: DeleteBlobs, Keys: keys}, func() error {
		deleted, storeErr = writefence.DeleteBlobs(ctx, s.inner, keys)
		return storeErr
	})
	if err != nil && err != storeErr {
		return nil, err
	}
	return deleted, err
}
