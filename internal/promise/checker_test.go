package promise

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence/internal/keys"
	"github.com/writefence/writefence/internal/record"
)

// builder records a history as the package's recorders do, with the
// package's own encodings.
type builder struct {
	t   *testing.T
	h   History
	now time.Time
	ids int
	ver int
}

func newBuilder(t *testing.T) *builder {
	return &builder{t: t, now: time.Unix(1_700_000_000, 0)}
}

func (b *builder) tick() time.Time {
	b.now = b.now.Add(time.Millisecond)
	return b.now
}

// begin starts a call: its ID, its Proc ("p1" unless given), its Key
// from its Plugin and Shard, and its Start are filled in.
func (b *builder) begin(c Call) *Call {
	b.ids++
	c.ID = b.ids
	if c.Proc == "" {
		c.Proc = "p1"
	}
	if c.Key == "" && c.Plugin != "" {
		c.Key = shardKeyOf(b.t, c.Prefix, c.Plugin, c.Shard)
	}
	c.Start = b.tick()
	b.h.Begin(&c)
	return &c
}

func (b *builder) version() string {
	b.ver++
	return fmt.Sprintf("v%d", b.ver)
}

// put lands data at key for c (nil: outside the package) and returns
// the new version.
func (b *builder) put(c *Call, key string, data []byte) string {
	v := b.version()
	b.h.Change(Change{Call: callID(c), Kind: "put", Key: key, Data: data, Version: v, At: b.tick()})
	return v
}

// wrote begins c, lands data at key for it and ends it with no error,
// and returns it.
func (b *builder) wrote(c Call, key string, data []byte) *Call {
	p := b.begin(c)
	b.put(p, key, data)
	b.end(p, nil)
	return p
}

func (b *builder) del(c *Call, key string) {
	b.h.Change(Change{Call: callID(c), Kind: "delete", Key: key, At: b.tick()})
}

// createBlob creates the blob at key for c and returns its creation
// time.
func (b *builder) createBlob(c *Call, key string, data []byte) time.Time {
	at := b.tick()
	b.h.Change(Change{Call: callID(c), Kind: "create blob", Key: key, Data: data, Modified: at, At: at})
	return at
}

func (b *builder) deleteBlob(c *Call, key string) {
	b.h.Change(Change{Call: callID(c), Kind: "delete blob", Key: key, At: b.tick()})
}

func (b *builder) fault(c *Call, fault string) {
	b.h.Change(Change{Call: callID(c), Kind: "fault", Key: c.Key, Fault: fault, At: b.tick()})
}

func callID(c *Call) int {
	if c == nil {
		return 0
	}
	return c.ID
}

// eventOps are the Ops under which the Observer sees each call's final
// write.
var eventOps = map[Op]string{Push: "push", Update: "update", Commit: "commit", Seal: "seal", Settle: "settle",
	PutBlob: "blob", Collect: "collect", Claim: "brand claim", Acquire: "lease acquire", Renew: "lease renew",
	Release: "lease release", Hold: "lease acquire"}

// end ends c with err, matching is, and the Observer's final event of it.
func (b *builder) end(c *Call, err error, is ...string) {
	if op, ok := eventOps[c.Op]; ok {
		c.Events = append(c.Events, Event{Op: op, Key: c.Key, Err: err, Is: is})
	}
	b.endBare(c, err, is...)
}

// endBare ends c with err, matching is, adding no event.
func (b *builder) endBare(c *Call, err error, is ...string) {
	c.Err, c.Is, c.End = err, is, b.tick()
	b.h.Finish(c)
}

func (b *builder) check(opts Options) []Violation {
	return NewChecker(opts).Check(&b.h)
}

// promises returns the numbers of the promises the history breaks.
func (b *builder) promises() map[int][]string {
	out := map[int][]string{}
	for _, v := range b.check(Options{}) {
		out[v.Promise] = append(out[v.Promise], v.Msg)
	}
	return out
}

// requireBroken fails unless the history breaks promise n.
func (b *builder) requireBroken(n int) {
	b.t.Helper()
	got := b.promises()
	require.Containsf(b.t, got, n, "promise %d not reported; reported: %v", n, got)
}

// requireKept fails if the history breaks promise n.
func (b *builder) requireKept(n int) {
	b.t.Helper()
	got := b.promises()
	require.NotContainsf(b.t, got, n, "promise %d reported: %v", n, got[n])
}

// story is a history a test builds, by name, and whether it keeps the
// promise the test is of (false: it breaks it).
type story struct {
	name  string
	kept  bool
	build func(b *builder)
}

// judge builds each story's history in a subtest of its name and requires
// that it breaks promise n, or keeps it when the story says so.
func judge(t *testing.T, n int, stories ...story) {
	t.Helper()
	for _, st := range stories {
		t.Run(st.name, func(t *testing.T) {
			b := newBuilder(t)
			st.build(b)
			if st.kept {
				b.requireKept(n)
			} else {
				b.requireBroken(n)
			}
		})
	}
}

func shardKeyOf(t *testing.T, prefix, plugin, shard string) string {
	k, err := keys.Shard(prefix, plugin, shard)
	require.NoError(t, err)
	return k
}

func blobKeyOf(t *testing.T, shard, name string) string {
	k, err := keys.Blob("", "pl", shard, name)
	require.NoError(t, err)
	return k
}

func leaseKeyOf(t *testing.T, name string) string {
	k, err := keys.Lease("", name)
	require.NoError(t, err)
	return k
}

// rec encodes a whole record of the default identity.
func rec(writer string, epoch uint64, body record.Body) []byte {
	return recOf(defaultIdentity, writer, epoch, body)
}

func recOf(identity, writer string, epoch uint64, body record.Body) []byte {
	return bytes.Join(record.Encode(identity, writer, epoch, body, record.CRC32C(body.Payload)), nil)
}

func plain(payload string) record.Body { return record.Body{Payload: []byte(payload)} }

// damage returns data with its last byte flipped: a record whose payload
// fails its checksum while its header and references still decode.
func damage(data []byte) []byte {
	d := bytes.Clone(data)
	d[len(d)-1] ^= 0xff
	return d
}

func blobID(n int) string { return fmt.Sprintf("%032x", n) }

func ref(name string, data []byte) record.BlobRef {
	return record.BlobRef{Name: name, Size: int64(len(data)), CRC: record.CRC32C(data)}
}

var (
	errStale        = errors.New("writefence: stale epoch")
	errInvalid      = errors.New("writefence: invalid argument")
	errUnknown      = errors.New("writefence: outcome unknown")
	errNotFound     = errors.New("writefence: not found")
	errLeaseLost    = errors.New("writefence: lease lost")
	errLeaseExpired = errors.New("writefence: lease expired")
	errTermEnded    = errors.New("writefence: term ended")
	errFailed       = errors.New("writefence: 503 slow down")
	errConflict     = errors.New("writefence: conflict")
	errWire         = errors.New("writefence: wire")
)

const lv1 = "p1/lease#1"

var inc1, inc2 = [16]byte{1}, [16]byte{2}

// TestCorrectHistory feeds a history of every kind of call, as the
// package makes them, and expects no violation.
func TestCorrectHistory(t *testing.T) {
	b := newBuilder(t)
	key, key2 := shardKeyOf(t, "", "pl", "s1"), shardKeyOf(t, "", "pl", "s2")

	cl := b.begin(Call{Op: Claim})
	b.put(cl, keys.Brand(""), []byte(defaultIdentity))
	cl.Claimed = true
	b.end(cl, nil)

	deposed := []Context{{ID: 1, Kind: "deposed", Key: key}}
	b.wrote(Call{Op: Push, Plugin: "pl", Shard: "s1", Writer: "w1", Epoch: 1, Payload: []byte("a"), BrandAlways: true, Before: deposed, After: deposed}, key, rec("w1", 1, plain("a")))

	b.wrote(Call{Op: Update, Plugin: "pl", Shard: "s1", Writer: "w1", Epoch: 2}, key, rec("w1", 2, plain("ab")))

	blobA, blobB, blobC := []byte("blob-a"), []byte("blob-b"), []byte("blob-c")
	nameA, nameB, nameC := keys.BlobName(3, "w1", blobID(1)), keys.BlobName(3, "w1", blobID(2)), keys.BlobName(5, "w2", blobID(3))
	for _, x := range []struct {
		name, writer string
		epoch        uint64
		data         []byte
	}{{nameA, "w1", 3, blobA}, {nameB, "w1", 3, blobB}} {
		pb := b.begin(Call{Op: PutBlob, Plugin: "pl", Shard: "s1", Writer: x.writer, Epoch: x.epoch})
		b.createBlob(pb, blobKeyOf(t, "s1", x.name), x.data)
		pb.Ref = ref(x.name, x.data)
		b.end(pb, nil)
	}

	refs := []record.BlobRef{ref(nameA, blobA)}
	b.wrote(Call{Op: Commit, Plugin: "pl", Shard: "s1", Writer: "w1", Epoch: 3}, key, rec("w1", 3, record.Body{Payload: []byte("m"), Refs: refs, Since: 2, Stream: true}))

	sl := b.begin(Call{Op: Seal, Plugin: "pl", Shard: "s1", Writer: "w2", Epoch: 4})
	sealed := rec("w2", 4, record.Body{Payload: []byte("m"), Refs: refs, Since: 4, Stream: true})
	b.put(sl, key, sealed)
	b.end(sl, nil)

	damagedAt := b.put(nil, key, damage(sealed))

	st := b.begin(Call{Op: Settle, Plugin: "pl", Shard: "s1", Writer: "w2", Epoch: 5, Payload: []byte("fresh"), Version: damagedAt})
	logKey, err := keys.SettleLog("", "pl", "s1")
	require.NoError(t, err)
	b.put(st, logKey, rec("w2", 5, plain(damagedAt)))
	st.Events = append(st.Events, Event{Op: "settle log", Key: logKey})
	settled := record.Body{Payload: []byte("fresh"), Refs: refs, Since: 5, Stream: true}
	b.put(st, key, rec("w2", 5, settled))
	b.end(st, nil)

	pb := b.begin(Call{Op: PutBlob, Plugin: "pl", Shard: "s1", Writer: "w2", Epoch: 5})
	modifiedC := b.createBlob(pb, blobKeyOf(t, "s1", nameC), blobC)
	b.end(pb, nil)

	leaseKey := leaseKeyOf(t, "L")
	ac := b.begin(Call{Op: Acquire, Lease: lv1, LeaseName: "L", Holder: "h1"})
	b.put(ac, leaseKey, record.EncodeLease("h1", 1, b.now.Add(time.Minute).UnixNano(), inc1))
	ac.Term = 1
	b.end(ac, nil)
	b.wrote(Call{Op: Renew, Lease: lv1, LeaseName: "L", Holder: "h1"}, leaseKey, record.EncodeLease("h1", 1, b.now.Add(time.Minute).UnixNano(), inc1))
	hd := b.begin(Call{Op: Hold, Lease: lv1, LeaseName: "L", Holder: "h1", HoldsShards: []string{key2},
		After: []Context{{ID: 2, Kind: "hold", Lease: lv1}}})
	b.put(hd, leaseKey, record.EncodeLease("h1", 1, b.now.Add(time.Minute).UnixNano(), inc1))
	b.put(hd, key2, rec("h1", 1<<32|1, record.Body{}))
	hd.Events = append(hd.Events, Event{Op: "seal", Key: key2})
	hd.Term = 1
	b.end(hd, nil)
	ep := b.begin(Call{Op: Epoch, Lease: lv1, Plugin: "pl", Shard: "s2"})
	ep.Got = 1<<32 | 2
	b.end(ep, nil)

	co := b.begin(Call{Op: Collect, Plugin: "pl", Shard: "s1"})
	clock := keys.Clock("", blobID(9))
	b.createBlob(co, clock, nil)
	b.deleteBlob(co, clock)
	horizon := modifiedC.Add(time.Millisecond).UnixNano()
	collected := settled
	collected.Horizon = horizon
	b.put(co, key, rec("w2", 5, collected))
	b.deleteBlob(co, blobKeyOf(t, "s1", nameB))
	b.deleteBlob(co, blobKeyOf(t, "s1", nameC))
	co.Deleted = []string{blobKeyOf(t, "s1", nameB), blobKeyOf(t, "s1", nameC)}
	b.end(co, nil)

	la := b.begin(Call{Op: Latest, Plugin: "pl", Shard: "s1"})
	h, body, check := record.Decode(rec("w2", 5, collected))
	require.Empty(t, check)
	la.Read, la.ReadBody = &h, body
	b.end(la, nil)

	op := b.begin(Call{Op: Open, Plugin: "pl", Shard: "s1", Name: nameA})
	op.Bytes = blobA
	b.end(op, nil)

	assert.Empty(t, b.check(Options{}))
}

// TestAddIsIncremental checks that Add reports each violation with the
// entry that revealed it, and Check reports the same.
func TestAddIsIncremental(t *testing.T) {
	b := newBuilder(t)
	key := shardKeyOf(t, "", "pl", "s1")
	b.put(nil, key, rec("w1", 5, plain("x")))
	b.wrote(Call{Op: Push, Plugin: "pl", Shard: "s1", Writer: "w1", Epoch: 4, Payload: []byte("y")}, key, rec("w1", 4, plain("y")))

	c := NewChecker(Options{})
	var all []Violation
	for i, e := range b.h.Entries {
		for _, v := range c.Add(e) {
			assert.Equal(t, i, v.Entry)
			all = append(all, v)
		}
	}
	require.NotEmpty(t, all)
	assert.Equal(t, all, NewChecker(Options{}).Check(&b.h))
	assert.Equal(t, fmt.Sprintf("promise %d: %s", all[0].Promise, all[0].Msg), all[0].String())
}

func TestPromise1_EpochRises(t *testing.T) {
	key := shardKeyOf(t, "", "pl", "s1")
	judge(t, 1,
		story{name: "lower epoch", build: func(b *builder) {
			b.put(nil, key, rec("w1", 5, record.Body{Payload: []byte("x"), Since: 1, Stream: true}))
			b.wrote(Call{Op: Push, Plugin: "pl", Shard: "s1", Writer: "w1", Epoch: 4, Payload: []byte("y")}, key, rec("w1", 4, record.Body{Payload: []byte("y"), Since: 1, Stream: true}))
		}},
		story{name: "collect changes more than the horizon", build: func(b *builder) {
			b.put(nil, key, rec("w1", 5, record.Body{Payload: []byte("x"), Since: 1, Stream: true}))
			b.wrote(Call{Op: Collect, Plugin: "pl", Shard: "s1"}, key, rec("w1", 5, record.Body{Payload: []byte("other"), Since: 1, Horizon: 7, Stream: true}))
		}},
		story{name: "bytes that do not decode", build: func(b *builder) {
			b.wrote(Call{Op: Push, Plugin: "pl", Shard: "s1", Writer: "w1", Epoch: 4, Payload: []byte("y")}, key, []byte("garbage"))
		}},
		story{name: "collect makes a plain record a stream's", build: func(b *builder) {
			b.put(nil, key, rec("w1", 5, plain("x")))
			b.wrote(Call{Op: Collect, Plugin: "pl", Shard: "s1"}, key, rec("w1", 5, record.Body{Payload: []byte("x"), Since: 5, Horizon: 7, Stream: true}))
		}},
		story{name: "collect raises the horizon of a stream's record", kept: true, build: func(b *builder) {
			b.put(nil, key, rec("w1", 5, record.Body{Payload: []byte("x"), Since: 1, Stream: true}))
			b.wrote(Call{Op: Collect, Plugin: "pl", Shard: "s1"}, key, rec("w1", 5, record.Body{Payload: []byte("x"), Since: 1, Horizon: 7, Stream: true}))
		}},
	)
}

func TestPromise2_OneWritePerEpoch(t *testing.T) {
	key := shardKeyOf(t, "", "pl", "s1")
	history := func(t *testing.T, outside func(b *builder)) *builder {
		b := newBuilder(t)
		b.wrote(Call{Op: Push, Plugin: "pl", Shard: "s1", Writer: "w1", Epoch: 2, Payload: []byte("a")}, key, rec("w1", 2, plain("a")))
		if outside != nil {
			outside(b)
		}
		b.wrote(Call{Op: Push, Plugin: "pl", Shard: "s1", Writer: "w2", Epoch: 2, Payload: []byte("b")}, key, rec("w2", 2, plain("b")))
		return b
	}
	history(t, nil).requireBroken(2)
	// The promise holds while the store keeps the record: an outside
	// delete, or a record set back below the epoch, lets it land again.
	history(t, func(b *builder) { b.del(nil, key) }).requireKept(2)
	history(t, func(b *builder) { b.put(nil, key, rec("w0", 1, plain("old"))) }).requireKept(2)
	// A record set back to the epoch, or damaged, still holds it.
	history(t, func(b *builder) { b.put(nil, key, rec("w1", 2, plain("a"))) }).requireBroken(2)
	history(t, func(b *builder) { b.put(nil, key, []byte("damaged")) }).requireBroken(2)
}

func TestPromise3_RefusalWritesNothing(t *testing.T) {
	key := shardKeyOf(t, "", "pl", "s1")
	t.Run("stale push wrote", func(t *testing.T) {
		b := newBuilder(t)
		p := b.begin(Call{Op: Push, Plugin: "pl", Shard: "s1", Writer: "w1", Epoch: 1, Payload: []byte("a")})
		b.put(p, key, rec("w1", 1, plain("a")))
		b.end(p, errStale, "stale")
		b.requireBroken(3)
	})
	// A settle whose log landed and that was then refused, with the
	// Observer's event of the log (a step that landed before the refusal)
	// or without it (the log itself refused).
	settleLogged := func(t *testing.T, logEvent bool, err error, is string) *builder {
		b := newBuilder(t)
		b.put(nil, key, []byte("damaged"))
		st := b.begin(Call{Op: Settle, Plugin: "pl", Shard: "s1", Writer: "w1", Epoch: 3, Floor: 2, Version: "v1"})
		logKey, kerr := keys.SettleLog("", "pl", "s1")
		require.NoError(t, kerr)
		b.put(st, logKey, rec("w1", 3, plain("v1")))
		if logEvent {
			st.Events = append(st.Events, Event{Op: "settle log", Key: logKey})
		}
		b.end(st, err, is)
		return b
	}
	t.Run("a step that landed before the refusal", func(t *testing.T) { settleLogged(t, true, errInvalid, "invalid").requireKept(3) })
	t.Run("a refused settle log", func(t *testing.T) { settleLogged(t, false, errConflict, "conflict").requireBroken(3) })
}

func TestPromise4_AckedStays(t *testing.T) {
	key := shardKeyOf(t, "", "pl", "s1")
	judge(t, 4,
		story{name: "nil without landing", build: func(b *builder) {
			p := b.begin(Call{Op: Push, Plugin: "pl", Shard: "s1", Writer: "w1", Epoch: 1, Payload: []byte("a")})
			b.end(p, nil)
		}},
		story{name: "replaced at its epoch afterwards", build: func(b *builder) {
			b.wrote(Call{Op: Push, Plugin: "pl", Shard: "s1", Writer: "w1", Epoch: 3, Payload: []byte("a")}, key, rec("w1", 3, plain("a")))
			b.wrote(Call{Op: Push, Plugin: "pl", Shard: "s1", Writer: "w2", Epoch: 2, Payload: []byte("b")}, key, rec("w2", 2, plain("b")))
		}},
	)
}

func TestPromise5_LostReplies(t *testing.T) {
	key := shardKeyOf(t, "", "pl", "s1")
	push := Call{Op: Push, Plugin: "pl", Shard: "s1", Writer: "w1", Epoch: 1, Payload: []byte("a")}
	// lost begins the push, lands it and loses its reply.
	lost := func(b *builder) *Call {
		p := b.begin(push)
		b.put(p, key, rec("w1", 1, plain("a")))
		b.fault(p, "lost")
		return p
	}
	judge(t, 5,
		story{name: "unknown and stale", build: func(b *builder) { b.end(b.begin(push), errUnknown, "unknown", "stale", "cause") }},
		story{name: "unknown without its cause", build: func(b *builder) { b.end(b.begin(push), errUnknown, "unknown") }},
		story{name: "lost reply turned stale", build: func(b *builder) { b.end(lost(b), errStale, "stale") }},
		story{name: "retry refused over its own write", build: func(b *builder) {
			b.end(lost(b), fmt.Errorf("%w: timeout", errUnknown), "unknown", "cause")
			b.end(b.begin(push), errStale, "stale")
		}},
	)
	// A PutBlob does not retry its create (promise 6): a reply lost of a
	// create that landed leaves an outcome it cannot learn.
	blob := blobKeyOf(t, "s1", keys.BlobName(1, "w1", blobID(1)))
	lostBlob := func(b *builder) *Call {
		c := b.begin(Call{Op: PutBlob, Plugin: "pl", Shard: "s1", Writer: "w1", Epoch: 1, Payload: []byte("a")})
		b.createBlob(c, blob, []byte("a"))
		b.h.Change(Change{Call: c.ID, Kind: "fault", Key: blob, Fault: "lost", Request: "create blob", At: b.tick()})
		return c
	}
	judge(t, 5,
		story{name: "a PutBlob's lost reply returned as a plain failure", build: func(b *builder) {
			b.end(lostBlob(b), errFailed)
		}},
		story{name: "a PutBlob's lost reply returned as an unknown outcome", kept: true, build: func(b *builder) {
			b.end(lostBlob(b), fmt.Errorf("%w: reset", errUnknown), "unknown", "cause")
		}},
		story{name: "a PutBlob's lost reply and its ctx ended", kept: true, build: func(b *builder) {
			b.end(lostBlob(b), context.Canceled, "canceled")
		}},
	)
}

func TestPromise6_TransientRetried(t *testing.T) {
	history := func(t *testing.T, faults int) *builder {
		b := newBuilder(t)
		p := b.begin(Call{Op: Push, Plugin: "pl", Shard: "s1", Writer: "w1", Epoch: 1, Payload: []byte("a")})
		for range faults {
			b.fault(p, "transient")
		}
		b.end(p, errFailed)
		return b
	}
	history(t, 2).requireBroken(6)
	history(t, 10).requireKept(6)
}

// TestPromise6_NotRetried checks the second half of promise 6: PutBlob
// does not retry its blob's create, nor Collect its listing or its deletes
// of the shard's blobs, so a failure of one ends the call with an error;
// Collect's clock blob is retried as a read is.
func TestPromise6_NotRetried(t *testing.T) {
	blob := blobKeyOf(t, "s1", keys.BlobName(1, "w1", blobID(1)))
	clock := keys.Clock("", blobID(9))
	failed := func(b *builder, c *Call, request, key string) {
		b.h.Change(Change{Call: c.ID, Kind: "fault", Key: key, Fault: "transient", Request: request, At: b.tick()})
	}
	put := func(b *builder) *Call {
		return b.begin(Call{Op: PutBlob, Plugin: "pl", Shard: "s1", Writer: "w1", Epoch: 1})
	}
	collect := func(b *builder) *Call {
		c := b.begin(Call{Op: Collect, Plugin: "pl", Shard: "s1"})
		b.createBlob(c, clock, nil)
		b.deleteBlob(c, clock)
		return c
	}
	judge(t, 6,
		story{name: "a PutBlob created its blob again", build: func(b *builder) {
			c := put(b)
			failed(b, c, "create blob", blob)
			b.createBlob(c, blob, []byte("a"))
			b.end(c, errFailed)
		}},
		story{name: "a PutBlob returned nil after its create failed", build: func(b *builder) {
			c := put(b)
			failed(b, c, "create blob", blob)
			b.end(c, nil)
		}},
		story{name: "a PutBlob ended on its failed create", kept: true, build: func(b *builder) {
			c := put(b)
			failed(b, c, "create blob", blob)
			b.end(c, errFailed)
		}},
		story{name: "a Collect returned nil after its listing failed", build: func(b *builder) {
			c := collect(b)
			failed(b, c, "list blobs", "pl/s1/")
			b.end(c, nil)
		}},
		story{name: "a Collect deleted after its deletes failed", build: func(b *builder) {
			c := collect(b)
			failed(b, c, "delete blobs", blob)
			b.deleteBlob(c, blob)
			b.end(c, errFailed)
		}},
		story{name: "a Collect ended on its failed deletes", kept: true, build: func(b *builder) {
			c := collect(b)
			failed(b, c, "delete blobs", blob)
			b.end(c, errFailed)
		}},
		story{name: "a Push ended on its Fence's failed probe", kept: true, build: func(b *builder) {
			c := b.begin(Call{Op: Push, Plugin: "pl", Shard: "s1", Writer: "w1", Epoch: 1, Payload: []byte("a")})
			failed(b, c, "put", keys.Probe("")+"-{1}")
			b.end(c, errFailed)
		}},
		story{name: "a Collect ended on its Fence's probe's lost reply, after a throttled read", kept: true, build: func(b *builder) {
			c := b.begin(Call{Op: Collect, Plugin: "pl", Shard: "s1"})
			failed(b, c, "get", keys.Brand(""))
			b.put(c, keys.Probe("")+"-{1}", []byte("probe"))
			b.h.Change(Change{Call: c.ID, Kind: "fault", Key: keys.Probe("") + "-{1}", Fault: "lost", At: b.tick()})
			b.end(c, errFailed)
		}},
		story{name: "a Push probed again after its Fence's probe failed", build: func(b *builder) {
			c := b.begin(Call{Op: Push, Plugin: "pl", Shard: "s1", Writer: "w1", Epoch: 1, Payload: []byte("a")})
			failed(b, c, "put", keys.Probe("")+"-{1}")
			b.put(c, keys.Probe("")+"-{2}", []byte("probe"))
			b.end(c, errFailed)
		}},
		story{name: "a Push returned nil after its Fence's probe failed", build: func(b *builder) {
			c := b.begin(Call{Op: Push, Plugin: "pl", Shard: "s1", Writer: "w1", Epoch: 1, Payload: []byte("a")})
			failed(b, c, "put", keys.Probe("")+"-{1}")
			b.put(c, shardKeyOf(b.t, "", "pl", "s1"), rec("w1", 1, plain("a")))
			b.end(c, nil)
		}},
		story{name: "a Collect retried its clock and deleted", kept: true, build: func(b *builder) {
			c := b.begin(Call{Op: Collect, Plugin: "pl", Shard: "s1"})
			failed(b, c, "create blob", clock)
			b.createBlob(c, clock, nil)
			failed(b, c, "delete blob", clock)
			b.deleteBlob(c, clock)
			b.deleteBlob(c, blob)
			b.end(c, nil)
		}},
	)
}

func TestPromise7_Damage(t *testing.T) {
	key := shardKeyOf(t, "", "pl", "s1")
	t.Run("push over damage", func(t *testing.T) {
		b := newBuilder(t)
		b.put(nil, key, []byte("damaged"))
		b.wrote(Call{Op: Push, Plugin: "pl", Shard: "s1", Writer: "w1", Epoch: 1, Payload: []byte("a")}, key, rec("w1", 1, plain("a")))
		b.requireBroken(7)
	})
	// A record rewritten whole from outside, its payload damaged under a
	// sound head: a Push may replace it only on a store whose Pushes
	// decide on the head (Options.HeadPush), and only when the head is
	// sound and the damage was a new version.
	headPush := func(t *testing.T, data []byte, inPlace bool, op Op) *builder {
		b := newBuilder(t)
		b.h.Change(Change{Kind: "put", Key: key, Data: data, Version: b.version(), InPlace: inPlace, At: b.tick()})
		b.wrote(Call{Op: op, Plugin: "pl", Shard: "s1", Writer: "w2", Epoch: 2, Payload: []byte("b")}, key, rec("w2", 2, plain("b")))
		return b
	}
	sound := rec("w1", 1, plain(strings.Repeat("p", 5000))) // longer than a head read
	broken := func(b *builder, opts Options) bool {
		for _, v := range b.check(opts) {
			if v.Promise == 7 {
				return true
			}
		}
		return false
	}
	t.Run("push over a rewritten payload", func(t *testing.T) {
		require.True(t, broken(headPush(t, damage(sound), false, Push), Options{}), "without HeadPush")
		require.False(t, broken(headPush(t, damage(sound), false, Push), Options{HeadPush: true}), "with HeadPush")
		require.True(t, broken(headPush(t, damage(sound), true, Push), Options{HeadPush: true}), "damage in place")
		require.True(t, broken(headPush(t, damage(sound), false, Update), Options{HeadPush: true}), "an update")
		require.True(t, broken(headPush(t, sound[:len(sound)-1], false, Push), Options{HeadPush: true}), "a truncated record")
		require.True(t, broken(headPush(t, damage(rec("w1", 1, plain("short"))), false, Push), Options{HeadPush: true}), "a record read whole")
		header := bytes.Clone(sound)
		header[10] ^= 1
		require.True(t, broken(headPush(t, header, false, Push), Options{HeadPush: true}), "a damaged header")
	})
	judge(t, 7,
		story{name: "settle of another version", build: func(b *builder) {
			b.put(nil, key, []byte("damaged"))
			b.wrote(Call{Op: Settle, Plugin: "pl", Shard: "s1", Writer: "w1", Epoch: 3, Floor: 2, Version: "elsewhere"}, key, rec("w1", 3, plain("")))
		}},
		story{name: "latest at epoch 0", build: func(b *builder) {
			b.put(nil, key, []byte("damaged"))
			la := b.begin(Call{Op: Latest, Plugin: "pl", Shard: "s1"})
			la.Read = &record.Header{}
			b.end(la, nil)
		}},
		story{name: "latest finds damage absent", build: func(b *builder) {
			b.put(nil, key, []byte("damaged"))
			la := b.begin(Call{Op: Latest, Plugin: "pl", Shard: "s1"})
			b.end(la, errNotFound, "not found")
		}},
	)
	// A lease's record that does not decode is overwritten by no Lease
	// (only Lease.Settle, an operator's, replaces it).
	lease := leaseKeyOf(t, "L")
	damagedLease := func(b *builder) {
		data := record.EncodeLease("h1", 5, b.now.Add(time.Minute).UnixNano(), inc1)
		b.put(nil, lease, damage(data))
	}
	judge(t, 7,
		story{name: "an acquisition over a damaged lease record", build: func(b *builder) {
			damagedLease(b)
			b.wrote(Call{Op: Acquire, Lease: lv1, LeaseName: "L", Holder: "h2"}, lease, record.EncodeLease("h2", 6, b.now.Add(time.Hour).UnixNano(), inc2))
		}},
		story{name: "a renewal over a damaged lease record", build: func(b *builder) {
			b.wrote(Call{Op: Acquire, Lease: lv1, LeaseName: "L", Holder: "h1"}, lease, record.EncodeLease("h1", 5, b.now.Add(time.Minute).UnixNano(), inc1))
			damagedLease(b)
			b.wrote(Call{Op: Renew, Lease: lv1, LeaseName: "L", Holder: "h1"}, lease, record.EncodeLease("h1", 5, b.now.Add(time.Hour).UnixNano(), inc1))
		}},
		story{name: "an acquisition over a lease record replaced outside", kept: true, build: func(b *builder) {
			damagedLease(b)
			b.put(nil, lease, record.EncodeLease("op", 5, 0, [16]byte{9}))
			b.wrote(Call{Op: Acquire, Lease: lv1, LeaseName: "L", Holder: "h2"}, lease, record.EncodeLease("h2", 6, b.now.Add(time.Hour).UnixNano(), inc2))
		}},
	)
}

func TestPromise8_SettleFloor(t *testing.T) {
	key := shardKeyOf(t, "", "pl", "s1")
	judge(t, 8,
		story{name: "below the damaged header", build: func(b *builder) {
			v := b.put(nil, key, damage(rec("w1", 4, plain("x"))))
			b.wrote(Call{Op: Settle, Plugin: "pl", Shard: "s1", Writer: "w1", Epoch: 3, Version: v}, key, rec("w1", 3, plain("")))
		}},
		story{name: "not above the floor", build: func(b *builder) {
			v := b.put(nil, key, []byte("damaged"))
			b.wrote(Call{Op: Settle, Plugin: "pl", Shard: "s1", Writer: "w1", Epoch: 5, Floor: 10, Version: v}, key, rec("w1", 5, plain("")))
		}},
		story{name: "below an earlier settle", build: func(b *builder) {
			v := b.put(nil, key, []byte("damaged"))
			b.wrote(Call{Op: Settle, Plugin: "pl", Shard: "s1", Writer: "w1", Epoch: 7, Floor: 1, Version: v}, key, rec("w1", 7, plain("")))
			v = b.put(nil, key, []byte("damaged again"))
			b.wrote(Call{Op: Settle, Plugin: "pl", Shard: "s1", Writer: "w1", Epoch: 6, Floor: 1, Version: v}, key, rec("w1", 6, plain("")))
		}},
		// A settle of a record lost (Settlement.Lost) is held to the
		// floor its operator states and to the settle log as well.
		story{name: "a lost record's settle not above the floor", build: func(b *builder) {
			b.wrote(Call{Op: Settle, Plugin: "pl", Shard: "s1", Writer: "op", Epoch: 5, Floor: 9, Lost: true, Payload: []byte("s")}, key, rec("op", 5, plain("s")))
		}},
		story{name: "a lost record's settle below an earlier settle", build: func(b *builder) {
			v := b.put(nil, key, []byte("damaged"))
			b.wrote(Call{Op: Settle, Plugin: "pl", Shard: "s1", Writer: "w1", Epoch: 7, Floor: 1, Version: v}, key, rec("w1", 7, plain("")))
			b.del(nil, key)
			b.wrote(Call{Op: Settle, Proc: "p2", Plugin: "pl", Shard: "s1", Writer: "op", Epoch: 6, Floor: 5, Lost: true, Payload: []byte("s")}, key, rec("op", 6, plain("s")))
		}},
		story{name: "a lost record's settle landed again", kept: true, build: func(b *builder) {
			st := b.begin(Call{Op: Settle, Plugin: "pl", Shard: "s1", Writer: "op", Epoch: 6, Floor: 5, Lost: true, Payload: []byte("s")})
			b.put(st, key, rec("op", 6, plain("s")))
			b.fault(st, "lost")
			b.del(nil, key)
			b.put(st, key, rec("op", 6, plain("s")))
			b.end(st, nil)
		}},
		story{name: "a lost record's settle above both", kept: true, build: func(b *builder) {
			v := b.put(nil, key, []byte("damaged"))
			b.wrote(Call{Op: Settle, Plugin: "pl", Shard: "s1", Writer: "w1", Epoch: 7, Floor: 1, Version: v}, key, rec("w1", 7, plain("")))
			b.del(nil, key)
			b.wrote(Call{Op: Settle, Proc: "p2", Plugin: "pl", Shard: "s1", Writer: "op", Epoch: 9, Floor: 8, Lost: true, Payload: []byte("s")}, key, rec("op", 9, plain("s")))
		}},
	)
}

func TestPromise9_SettleKeepsRefs(t *testing.T) {
	key := shardKeyOf(t, "", "pl", "s1")
	name := keys.BlobName(1, "w1", blobID(1))
	stream := record.Body{Payload: []byte("x"), Refs: []record.BlobRef{ref(name, []byte("b"))}, Since: 1, Stream: true}
	judge(t, 9,
		story{name: "references dropped", build: func(b *builder) {
			v := b.put(nil, key, damage(rec("w1", 1, stream)))
			b.wrote(Call{Op: Settle, Plugin: "pl", Shard: "s1", Writer: "w1", Epoch: 2, Version: v}, key, rec("w1", 2, record.Body{Since: 2, Stream: true}))
		}},
		story{name: "references unreadable", build: func(b *builder) {
			data := rec("w1", 1, stream)
			h, _ := record.DecodeHeader(data)
			data[h.Size] ^= 0xff // the first byte of the references
			v := b.put(nil, key, data)
			b.wrote(Call{Op: Settle, Plugin: "pl", Shard: "s1", Writer: "w1", Epoch: 2, Version: v}, key, rec("w1", 2, record.Body{Since: 2, Stream: true}))
		}},
	)
}

func TestPromise10_Identity(t *testing.T) {
	key := shardKeyOf(t, "", "pl", "s1")
	judge(t, 10,
		story{name: "over another identity", build: func(b *builder) {
			b.put(nil, key, recOf("other/v9", "w1", 1, plain("x")))
			b.wrote(Call{Op: Push, Plugin: "pl", Shard: "s1", Writer: "w1", Epoch: 2, Payload: []byte("a")}, key, rec("w1", 2, plain("a")))
		}},
		story{name: "brand of another identity", build: func(b *builder) {
			b.put(nil, keys.Brand(""), []byte("other/v9"))
			b.wrote(Call{Op: Push, Plugin: "pl", Shard: "s1", Writer: "w1", Epoch: 1, Payload: []byte("a"), BrandAlways: true}, key, rec("w1", 1, plain("a")))
		}},
	)
}

func TestPromise11_Claims(t *testing.T) {
	brand := keys.Brand("")
	judge(t, 11,
		story{name: "a second claim lands", build: func(b *builder) {
			c1 := b.begin(Call{Op: Claim})
			c2 := b.begin(Call{Op: Claim, Proc: "p2"})
			b.put(c1, brand, []byte(defaultIdentity))
			b.put(c2, brand, []byte(defaultIdentity)) // a store that ignored create-only
			b.end(c1, nil)
			b.end(c2, nil)
		}},
		story{name: "a claim after an outside delete", kept: true, build: func(b *builder) {
			b.wrote(Call{Op: Claim}, brand, []byte(defaultIdentity))
			b.del(nil, brand) // an operator re-brands
			b.wrote(Call{Op: Claim, Proc: "p2", Claimed: true}, brand, []byte(defaultIdentity))
		}},
		story{name: "claimed without a create", build: func(b *builder) {
			b.put(nil, brand, []byte(defaultIdentity))
			c1 := b.begin(Call{Op: Claim, Claimed: true})
			b.end(c1, nil)
		}},
		story{name: "nil while the brand is another", build: func(b *builder) {
			b.put(nil, brand, []byte("other/v9"))
			c1 := b.begin(Call{Op: Claim})
			b.end(c1, nil)
		}},
	)
}

func TestPromise12_Terms(t *testing.T) {
	key := leaseKeyOf(t, "L")
	judge(t, 12,
		story{name: "term lowered", build: func(b *builder) {
			b.put(nil, key, record.EncodeLease("h1", 5, 0, inc1))
			b.wrote(Call{Op: Acquire, Lease: lv1, LeaseName: "L", Holder: "h2"}, key, record.EncodeLease("h2", 4, b.now.Add(time.Minute).UnixNano(), inc2))
		}},
		story{name: "a term taken twice", build: func(b *builder) {
			b.wrote(Call{Op: Acquire, Lease: lv1, LeaseName: "L", Holder: "h1"}, key, record.EncodeLease("h1", 1, 0, inc1))
			b.wrote(Call{Op: Acquire, Lease: "p2/lease#1", LeaseName: "L", Holder: "h1", Proc: "p2"}, key, record.EncodeLease("h1", 1, b.now.Add(time.Minute).UnixNano(), inc2))
		}},
	)
}

// TestPromise12_TakenOnce: a term is taken once. A Lease value that
// released its term takes the next one, never the same again (its epochs
// would start over at 1); a renewal keeps the term it holds, and an
// operator's settle takes none, whatever term it writes.
func TestPromise12_TakenOnce(t *testing.T) {
	key := leaseKeyOf(t, "L")
	held := func(b *builder, term uint64, is [16]byte) []byte {
		return record.EncodeLease("h1", term, b.now.Add(time.Minute).UnixNano(), is)
	}
	judge(t, 12,
		story{name: "a term taken again after its release", build: func(b *builder) {
			b.wrote(Call{Op: Acquire, Lease: lv1, LeaseName: "L", Holder: "h1"}, key, held(b, 1, inc1))
			b.wrote(Call{Op: Release, Lease: lv1, LeaseName: "L", Holder: "h1"}, key, record.EncodeLease("h1", 1, 0, inc1))
			b.wrote(Call{Op: Acquire, Lease: lv1, LeaseName: "L", Holder: "h1"}, key, held(b, 1, inc1))
		}},
		story{name: "a term taken again by a Hold after its release", build: func(b *builder) {
			b.wrote(Call{Op: Hold, Lease: lv1, LeaseName: "L", Holder: "h1"}, key, held(b, 1, inc1))
			b.wrote(Call{Op: Release, Lease: lv1, LeaseName: "L", Holder: "h1"}, key, record.EncodeLease("h1", 1, 0, inc1))
			b.wrote(Call{Op: Hold, Lease: lv1, LeaseName: "L", Holder: "h1"}, key, held(b, 1, inc1))
		}},
		story{name: "the next term taken after its release", kept: true, build: func(b *builder) {
			b.wrote(Call{Op: Acquire, Lease: lv1, LeaseName: "L", Holder: "h1"}, key, held(b, 1, inc1))
			b.wrote(Call{Op: Release, Lease: lv1, LeaseName: "L", Holder: "h1"}, key, record.EncodeLease("h1", 1, 0, inc1))
			b.wrote(Call{Op: Acquire, Lease: lv1, LeaseName: "L", Holder: "h1"}, key, held(b, 2, inc1))
		}},
		story{name: "a renewal past the expiry", kept: true, build: func(b *builder) {
			b.wrote(Call{Op: Acquire, Lease: lv1, LeaseName: "L", Holder: "h1"}, key, record.EncodeLease("h1", 1, b.now.UnixNano(), inc1))
			b.tick()
			b.wrote(Call{Op: Renew, Lease: lv1, LeaseName: "L", Holder: "h1"}, key, held(b, 1, inc1))
		}},
		story{name: "an operator's settle at the holder's term", kept: true, build: func(b *builder) {
			b.wrote(Call{Op: Acquire, Lease: lv1, LeaseName: "L", Holder: "h1"}, key, held(b, 1, inc1))
			b.wrote(Call{Op: Settled, Key: key, LeaseName: "L", Holder: "operator", Term: 1}, key, record.EncodeLease("operator", 1, 0, [16]byte{}))
			b.wrote(Call{Op: Acquire, Lease: "p2/lease#1", LeaseName: "L", Holder: "h2", Proc: "p2"}, key, record.EncodeLease("h2", 2, b.now.Add(time.Minute).UnixNano(), inc2))
		}},
	)
}

func TestPromise13_OneHolder(t *testing.T) {
	key := leaseKeyOf(t, "L")
	b := newBuilder(t)
	b.wrote(Call{Op: Acquire, Lease: lv1, LeaseName: "L", Holder: "h1"}, key, record.EncodeLease("h1", 1, b.now.Add(time.Minute).UnixNano(), inc1))
	b.wrote(Call{Op: Acquire, Lease: "p2/lease#1", LeaseName: "L", Holder: "h1", Proc: "p2"}, key, record.EncodeLease("h1", 2, b.now.Add(time.Minute).UnixNano(), inc2))
	b.requireBroken(13)

	// An operator's settle over a live holder takes no lease: it writes
	// one released.
	b = newBuilder(t)
	b.wrote(Call{Op: Acquire, Lease: lv1, LeaseName: "L", Holder: "h1"}, key, record.EncodeLease("h1", 1, b.now.Add(time.Minute).UnixNano(), inc1))
	b.wrote(Call{Op: Settled, Key: key, LeaseName: "L", Holder: "operator", Term: 2}, key, record.EncodeLease("operator", 2, 0, [16]byte{}))
	b.requireKept(13)

	// By the acquirer's clock: a term that expires in a second is taken
	// by a clock two seconds ahead, and a term that expired a second ago
	// is not by a clock two seconds behind.
	for _, tt := range []struct {
		expiry, skew time.Duration
		kept         bool
	}{{time.Second, 2 * time.Second, true}, {time.Second, 0, false}, {-time.Second, -2 * time.Second, false}, {-time.Second, 0, true}} {
		b = newBuilder(t)
		b.wrote(Call{Op: Acquire, Lease: lv1, LeaseName: "L", Holder: "h1"}, key, record.EncodeLease("h1", 1, b.now.Add(tt.expiry).UnixNano(), inc1))
		b.wrote(Call{Op: Acquire, Lease: "p2/lease#1", LeaseName: "L", Holder: "h2", Proc: "p2", Skew: tt.skew}, key, record.EncodeLease("h2", 2, b.now.Add(time.Minute).UnixNano(), inc2))
		if tt.kept {
			b.requireKept(13)
		} else {
			b.requireBroken(13)
		}
	}
}

// TestPromise13_HeldOnlyByItsWrite: an Acquire or a Hold that returned
// nil took or renewed the lease in a write of its own; one that wrote
// nothing would hold it beside the holder the record names.
func TestPromise13_HeldOnlyByItsWrite(t *testing.T) {
	key := leaseKeyOf(t, "L")
	judge(t, 13,
		story{name: "an acquire that wrote nothing", build: func(b *builder) {
			b.wrote(Call{Op: Acquire, Lease: lv1, LeaseName: "L", Holder: "h1"}, key, record.EncodeLease("h1", 1, b.now.Add(time.Minute).UnixNano(), inc1))
			ac := b.begin(Call{Op: Acquire, Lease: "p2/lease#1", LeaseName: "L", Holder: "h2", Proc: "p2"})
			ac.Term = 2
			b.end(ac, nil)
		}},
		story{name: "a hold naming no shard that wrote nothing", build: func(b *builder) {
			b.wrote(Call{Op: Acquire, Lease: lv1, LeaseName: "L", Holder: "h1"}, key, record.EncodeLease("h1", 1, b.now.Add(time.Minute).UnixNano(), inc1))
			hd := b.begin(Call{Op: Hold, Lease: "p2/lease#1", LeaseName: "L", Holder: "h2", Proc: "p2"})
			b.end(hd, nil)
		}},
		story{name: "an acquire of the lease it holds renews it", kept: true, build: func(b *builder) {
			b.wrote(Call{Op: Acquire, Lease: lv1, LeaseName: "L", Holder: "h1"}, key, record.EncodeLease("h1", 1, b.now.Add(time.Minute).UnixNano(), inc1))
			b.wrote(Call{Op: Acquire, Lease: lv1, LeaseName: "L", Holder: "h1"}, key, record.EncodeLease("h1", 1, b.now.Add(time.Minute).UnixNano(), inc1))
		}},
	)
}

// acquired records an acquisition of lv1 at term 1, lasting ttl.
func acquired(t *testing.T, b *builder, ttl time.Duration) {
	ac := b.begin(Call{Op: Acquire, Lease: lv1, LeaseName: "L", Holder: "h1"})
	b.put(ac, leaseKeyOf(t, "L"), record.EncodeLease("h1", 1, b.now.Add(ttl).UnixNano(), inc1))
	ac.Term = 1
	b.end(ac, nil)
}

func epoch(b *builder, got uint64) {
	skewedEpoch(b, got, 0)
}

// skewedEpoch records an Epoch of lv1 that returned got, its clock skew
// ahead of the history's.
func skewedEpoch(b *builder, got uint64, skew time.Duration) {
	ep := b.begin(Call{Op: Epoch, Lease: lv1, Skew: skew})
	ep.Got = got
	b.end(ep, nil)
}

func TestPromise14_LeaseEpochs(t *testing.T) {
	judge(t, 14,
		story{name: "not rising", build: func(b *builder) {
			acquired(b.t, b, time.Minute)
			epoch(b, 1<<32|2)
			epoch(b, 1<<32|1)
		}},
		story{name: "a term never written", build: func(b *builder) {
			acquired(b.t, b, time.Minute)
			epoch(b, 2<<32|1)
		}},
		story{name: "after the expiry", build: func(b *builder) {
			acquired(b.t, b, time.Millisecond)
			b.tick()
			epoch(b, 1<<32|1)
		}},
		story{name: "after the expiry by its clock", build: func(b *builder) {
			acquired(b.t, b, time.Second)
			skewedEpoch(b, 1<<32|1, time.Second)
		}},
		story{name: "before the expiry by its clock", kept: true, build: func(b *builder) {
			acquired(b.t, b, time.Millisecond)
			b.tick()
			skewedEpoch(b, 1<<32|1, -time.Second)
		}},
		story{name: "renewed in the background", kept: true, build: func(b *builder) {
			acquired(b.t, b, time.Millisecond)
			// A renewal no call is recorded for: the record bears the
			// value's incarnation.
			b.put(nil, leaseKeyOf(b.t, "L"), record.EncodeLease("h1", 1, b.now.Add(time.Minute).UnixNano(), inc1))
			b.tick()
			epoch(b, 1<<32|1)
		}},
		story{name: "after the loss", build: func(b *builder) {
			acquired(b.t, b, time.Minute)
			rn := b.begin(Call{Op: Renew, Lease: lv1, LeaseName: "L", Holder: "h1"})
			b.end(rn, errLeaseLost, "lease lost")
			epoch(b, 1<<32|1)
		}},
	)
}

// TestPromise14_LossLearnedByTheRenewer: a Lease whose Hold's renewer
// learned the lease lost (its Hold's context done, the lease lost) knows
// it, and hands out no epoch until an acquisition lands; an expiry is no
// loss, as a renewal may still land.
func TestPromise14_LossLearnedByTheRenewer(t *testing.T) {
	leaseKey := leaseKeyOf(t, "L")
	live := []Context{{ID: 1, Kind: "hold", Lease: lv1}}
	ended := func(cause error, is string) []Context {
		return []Context{{ID: 1, Kind: "hold", Lease: lv1, Done: true, Cause: cause, Is: Matches{is}}}
	}
	held := func(b *builder) {
		hd := b.begin(Call{Op: Hold, Lease: lv1, LeaseName: "L", Holder: "h1", After: live})
		b.put(hd, leaseKey, record.EncodeLease("h1", 1, b.now.Add(time.Minute).UnixNano(), inc1))
		b.end(hd, nil)
		ep := b.begin(Call{Op: Epoch, Lease: lv1, Before: live, After: live})
		ep.Got = 1<<32 | 1
		b.end(ep, nil)
	}
	after := func(b *builder, got uint64, ctxs []Context) {
		ep := b.begin(Call{Op: Epoch, Lease: lv1, Before: ctxs, After: ctxs})
		ep.Got = got
		b.end(ep, nil)
	}
	judge(t, 14,
		story{name: "an epoch after the renewer learned the loss", build: func(b *builder) {
			held(b)
			b.put(nil, leaseKey, record.EncodeLease("h2", 2, b.now.Add(time.Minute).UnixNano(), inc2))
			after(b, 1<<32|2, ended(errLeaseLost, "lease lost"))
		}},
		story{name: "an epoch after the loss and an acquisition", kept: true, build: func(b *builder) {
			held(b)
			b.put(nil, leaseKey, record.EncodeLease("h2", 2, b.now.Add(time.Minute).UnixNano(), inc2))
			b.wrote(Call{Op: Acquire, Lease: lv1, LeaseName: "L", Holder: "h1", Before: ended(errLeaseLost, "lease lost"), After: ended(errLeaseLost, "lease lost")},
				leaseKey, record.EncodeLease("h1", 3, b.now.Add(time.Minute).UnixNano(), inc1))
			after(b, 3<<32|1, ended(errLeaseLost, "lease lost"))
		}},
		story{name: "an epoch after an expiry and a renewal", kept: true, build: func(b *builder) {
			held(b)
			b.wrote(Call{Op: Renew, Lease: lv1, LeaseName: "L", Holder: "h1", Before: ended(errLeaseExpired, "lease expired"), After: ended(errLeaseExpired, "lease expired")},
				leaseKey, record.EncodeLease("h1", 1, b.now.Add(time.Minute).UnixNano(), inc1))
			after(b, 1<<32|2, ended(errLeaseExpired, "lease expired"))
		}},
	)
}

func TestPromise15_Hold(t *testing.T) {
	key, leaseKey := shardKeyOf(t, "", "pl", "s1"), leaseKeyOf(t, "L")
	judge(t, 15,
		story{name: "nil without its seal", build: func(b *builder) {
			b.wrote(Call{Op: Hold, Lease: lv1, LeaseName: "L", Holder: "h1", HoldsShards: []string{key}}, leaseKey, record.EncodeLease("h1", 1, b.now.Add(time.Minute).UnixNano(), inc1))
		}},
		story{name: "sealed at its term by another writer", build: func(b *builder) {
			b.wrote(Call{Op: Seal, Plugin: "pl", Shard: "s1", Writer: "h2", Epoch: 1<<32 | 1}, key, rec("h2", 1<<32|1, plain("")))
			b.wrote(Call{Op: Hold, Lease: lv1, LeaseName: "L", Holder: "h1", HoldsShards: []string{key}}, leaseKey, record.EncodeLease("h1", 1, b.now.Add(time.Minute).UnixNano(), inc1))
		}},
		story{name: "sealed by its holder at an earlier term", build: func(b *builder) {
			b.wrote(Call{Op: Seal, Plugin: "pl", Shard: "s1", Writer: "h1", Epoch: 1<<32 | 1}, key, rec("h1", 1<<32|1, plain("")))
			b.wrote(Call{Op: Hold, Lease: lv1, LeaseName: "L", Holder: "h1", HoldsShards: []string{key}}, leaseKey, record.EncodeLease("h1", 2, b.now.Add(time.Minute).UnixNano(), inc1))
		}},
		story{name: "sealed at its term before it began", kept: true, build: func(b *builder) {
			// A Hold of a term its Lease held before (taken again by
			// the same holder) whose seal found the shard sealed at that
			// term by its holder, as a source of the same term had
			// sealed it: the shard is sealed at its term.
			b.wrote(Call{Op: Seal, Plugin: "pl", Shard: "s1", Writer: "h1", Epoch: 1<<32 | 2}, key, rec("h1", 1<<32|2, plain("")))
			b.wrote(Call{Op: Hold, Lease: lv1, LeaseName: "L", Holder: "h1", HoldsShards: []string{key}}, leaseKey, record.EncodeLease("h1", 1, b.now.Add(time.Minute).UnixNano(), inc1))
		}},
		story{name: "sealed at its term, then deleted", kept: true, build: func(b *builder) {
			// Its seal found the shard sealed at its term by its holder,
			// then the record was deleted from outside before it
			// returned: it was sealed during the Hold.
			b.wrote(Call{Op: Seal, Plugin: "pl", Shard: "s1", Writer: "h1", Epoch: 1<<32 | 2}, key, rec("h1", 1<<32|2, plain("")))
			hd := b.begin(Call{Op: Hold, Key: key, Lease: lv1, LeaseName: "L", Holder: "h1", HoldsShards: []string{key}})
			b.put(hd, leaseKey, record.EncodeLease("h1", 1, b.now.Add(time.Minute).UnixNano(), inc1))
			b.del(nil, key)
			b.end(hd, nil)
		}},
		story{name: "sealed at its term only before it began", build: func(b *builder) {
			b.wrote(Call{Op: Seal, Plugin: "pl", Shard: "s1", Writer: "h1", Epoch: 1<<32 | 2}, key, rec("h1", 1<<32|2, plain("")))
			b.del(nil, key)
			b.wrote(Call{Op: Hold, Key: key, Lease: lv1, LeaseName: "L", Holder: "h1", HoldsShards: []string{key}}, leaseKey, record.EncodeLease("h1", 1, b.now.Add(time.Minute).UnixNano(), inc1))
		}},
		story{name: "released for slowness", build: func(b *builder) {
			hd := b.begin(Call{Op: Hold, Lease: lv1, LeaseName: "L", Holder: "h1", HoldsShards: []string{key}})
			b.put(hd, leaseKey, record.EncodeLease("h1", 1, b.now.Add(time.Minute).UnixNano(), inc1))
			b.put(hd, leaseKey, record.EncodeLease("h1", 1, 0, inc1))
			b.end(hd, errConflict, "conflict")
		}},
		// A seal attempt bounded by its own deadline, its Hold's ctx
		// live: the seal is slow, and the Hold keeps sealing.
		story{name: "released when a seal attempt timed out", build: func(b *builder) {
			hd := b.begin(Call{Op: Hold, Lease: lv1, LeaseName: "L", Holder: "h1", HoldsShards: []string{key}})
			b.put(hd, leaseKey, record.EncodeLease("h1", 1, b.now.Add(time.Minute).UnixNano(), inc1))
			b.put(hd, leaseKey, record.EncodeLease("h1", 1, 0, inc1))
			b.end(hd, context.DeadlineExceeded, "deadline")
		}},
		// A seal that keeps failing is sealed again while the lease is
		// held: a Hold that took the lease ends only on a refusal, a
		// loss, or its ctx.
		story{name: "gave up sealing, holding the lease", build: func(b *builder) {
			hd := b.begin(Call{Op: Hold, Lease: lv1, LeaseName: "L", Holder: "h1", HoldsShards: []string{key}})
			b.put(hd, leaseKey, record.EncodeLease("h1", 1, b.now.Add(time.Minute).UnixNano(), inc1))
			b.end(hd, errors.New("store unavailable"))
		}},
		story{name: "its acquisition's outcome unknown", kept: true, build: func(b *builder) {
			hd := b.begin(Call{Op: Hold, Lease: lv1, LeaseName: "L", Holder: "h1", HoldsShards: []string{key}})
			b.put(hd, leaseKey, record.EncodeLease("h1", 1, b.now.Add(time.Minute).UnixNano(), inc1))
			b.end(hd, errUnknown, "unknown")
		}},
		story{name: "its acquisition's reply lost, the lease since taken", kept: true, build: func(b *builder) {
			hd := b.begin(Call{Op: Hold, Lease: lv1, LeaseName: "L", Holder: "h1", HoldsShards: []string{key}})
			b.put(hd, leaseKey, record.EncodeLease("h1", 1, b.now.Add(time.Minute).UnixNano(), inc1))
			b.fault(hd, "lost")
			b.end(hd, errors.New("writefence: lease held"), "lease held")
		}},
		story{name: "released when its ctx ended", kept: true, build: func(b *builder) {
			hd := b.begin(Call{Op: Hold, Lease: lv1, LeaseName: "L", Holder: "h1", HoldsShards: []string{key}})
			b.put(hd, leaseKey, record.EncodeLease("h1", 1, b.now.Add(time.Minute).UnixNano(), inc1))
			b.put(hd, leaseKey, record.EncodeLease("h1", 1, 0, inc1))
			hd.CtxEnded = true
			b.end(hd, context.DeadlineExceeded, "deadline")
		}},
	)
}

func TestPromise16_LossEndsContexts(t *testing.T) {
	key := shardKeyOf(t, "", "pl", "s1")
	judge(t, 16,
		story{name: "hold context", build: func(b *builder) {
			acquired(b.t, b, time.Minute)
			hold := []Context{{ID: 1, Kind: "hold", Lease: lv1}}
			ep := b.begin(Call{Op: Epoch, Lease: lv1, Before: hold, After: hold})
			b.end(ep, errLeaseLost, "lease lost")
		}},
		story{name: "deposed context", build: func(b *builder) {
			acquired(b.t, b, time.Minute)
			ep := b.begin(Call{Op: Epoch, Lease: lv1, Key: key})
			ep.Got = 1<<32 | 1
			b.end(ep, nil)
			dep := []Context{{ID: 1, Kind: "deposed", Key: key}}
			ep = b.begin(Call{Op: Epoch, Lease: lv1, Before: dep, After: dep})
			b.end(ep, errLeaseLost, "lease lost")
		}},
	)
}

// TestPromise16_LearnedByTheRenewer: a loss no call learns (the Hold's
// renewer did) ends the Deposed contexts the Lease gates no later than
// its Hold's context.
func TestPromise16_LearnedByTheRenewer(t *testing.T) {
	key := shardKeyOf(t, "", "pl", "s1")
	live := []Context{{ID: 1, Kind: "hold", Lease: lv1}, {ID: 2, Kind: "deposed", Key: key}}
	ended := func(deposedDone bool) []Context {
		return []Context{{ID: 1, Kind: "hold", Lease: lv1, Done: true, Cause: errLeaseLost, Is: Matches{"lease lost"}},
			{ID: 2, Kind: "deposed", Key: key, Done: deposedDone, Cause: errLeaseLost, Is: Matches{"lease lost"}}}
	}
	gated := func(b *builder) {
		hd := b.begin(Call{Op: Hold, Lease: lv1, LeaseName: "L", Holder: "h1", HoldsShards: []string{key}})
		b.put(hd, leaseKeyOf(b.t, "L"), record.EncodeLease("h1", 1, b.now.Add(time.Minute).UnixNano(), inc1))
		b.put(hd, key, rec("h1", 1<<32|1, plain("")))
		b.end(hd, nil)
		ep := b.begin(Call{Op: Epoch, Lease: lv1, Key: key, Before: live, After: live})
		ep.Got = 1<<32 | 1
		b.end(ep, nil)
	}
	judge(t, 16,
		story{name: "the Deposed context left running", build: func(b *builder) {
			gated(b)
			ep := b.begin(Call{Op: Epoch, Lease: lv1, Key: key, Before: ended(false), After: ended(false)})
			b.end(ep, errLeaseLost, "lease lost")
		}},
		story{name: "the Deposed context ended", kept: true, build: func(b *builder) {
			gated(b)
			ep := b.begin(Call{Op: Epoch, Lease: lv1, Key: key, Before: ended(true), After: ended(true)})
			b.end(ep, errLeaseLost, "lease lost")
		}},
		story{name: "released", kept: true, build: func(b *builder) {
			gated(b)
			rl := b.begin(Call{Op: Release, Lease: lv1, LeaseName: "L", Holder: "h1", Before: live, After: ended(false)})
			b.end(rl, nil)
			ep := b.begin(Call{Op: Epoch, Lease: lv1, Key: key, Before: ended(false), After: ended(false)})
			b.end(ep, errLeaseLost, "lease lost")
		}},
	)
}

func TestPromise17_TermSource(t *testing.T) {
	source := func(b *builder, got uint64, err error, is ...string) {
		c := b.begin(Call{Op: Epoch, TermSource: "ts1"})
		c.Got = got
		b.end(c, err, is...)
	}
	// restarted is the first epoch of the shard a new TermSource of w1,
	// in another process, hands out.
	key := shardKeyOf(t, "", "pl", "s1")
	restarted := func(b *builder, got uint64) {
		c := b.begin(Call{Op: Epoch, TermSource: "ts2", Proc: "p2", Key: key, Writer: "w1"})
		c.Got = got
		b.end(c, nil)
	}
	judge(t, 17,
		story{name: "not rising", build: func(b *builder) {
			source(b, 7<<32|2, nil)
			source(b, 7<<32|1, nil)
		}},
		story{name: "another term", build: func(b *builder) {
			source(b, 7<<32|1, nil)
			source(b, 8<<32|1, nil)
		}},
		story{name: "after its term ended", build: func(b *builder) {
			source(b, 7<<32|1, nil)
			source(b, 0, errTermEnded, "term ended")
			source(b, 7<<32|2, nil)
		}},
		// The term function's report, which the call records: another
		// term than the source's ends it.
		story{name: "after its term function reported another term", build: func(b *builder) {
			c := b.begin(Call{Op: Epoch, TermSource: "ts1", Term: 7})
			c.Got = 7<<32 | 1
			b.end(c, nil)
			c = b.begin(Call{Op: Epoch, TermSource: "ts1", Term: 8})
			c.Got = 7<<32 | 2
			b.end(c, nil)
		}},
		story{name: "after its term function reported another term, then its own", build: func(b *builder) {
			c := b.begin(Call{Op: Epoch, TermSource: "ts1", Term: 7})
			b.end(c, errors.New("sim: read failed"))
			c = b.begin(Call{Op: Epoch, TermSource: "ts1", Term: 8})
			b.end(c, errors.New("sim: read failed"))
			c = b.begin(Call{Op: Epoch, TermSource: "ts1", Term: 7})
			c.Got = 7<<32 | 1
			b.end(c, nil)
		}},
		story{name: "its term function reporting its term", kept: true, build: func(b *builder) {
			c := b.begin(Call{Op: Epoch, TermSource: "ts1", Term: 7})
			b.end(c, errors.New("sim: read failed"))
			c = b.begin(Call{Op: Epoch, TermSource: "ts1", Term: 7})
			c.Got = 7<<32 | 1
			b.end(c, nil)
		}},
		story{name: "a restart not above its term's record", build: func(b *builder) {
			b.put(nil, key, rec("w1", 7<<32|5, plain("x")))
			restarted(b, 7<<32|3)
		}},
		story{name: "a restart above its term's record", kept: true, build: func(b *builder) {
			b.put(nil, key, rec("w1", 7<<32|5, plain("x")))
			restarted(b, 7<<32|6)
		}},
		story{name: "a restart over another writer's record of an earlier term", kept: true, build: func(b *builder) {
			b.put(nil, key, rec("w2", 6<<32|5, plain("x")))
			restarted(b, 7<<32|1)
		}},
		// A record of another writer in its term, or of a later term,
		// ends the source: it hands out no epoch of that shard.
		story{name: "over another writer's record of its term", build: func(b *builder) {
			b.put(nil, key, rec("w2", 7<<32|5, plain("x")))
			restarted(b, 7<<32|6)
		}},
		story{name: "over a record of a later term", build: func(b *builder) {
			b.put(nil, key, rec("w1", 8<<32|1, plain("x")))
			restarted(b, 7<<32|1)
		}},
		story{name: "over another writer's record of its term written during the read", kept: true, build: func(b *builder) {
			c := b.begin(Call{Op: Epoch, TermSource: "ts2", Proc: "p2", Key: key, Writer: "w1"})
			b.put(nil, key, rec("w2", 7<<32|5, plain("x")))
			c.Got = 7<<32 | 1
			b.end(c, nil)
		}},
		story{name: "a restart over a record set back during its read", kept: true, build: func(b *builder) {
			b.put(nil, key, rec("w1", 7<<32|5, plain("x")))
			c := b.begin(Call{Op: Epoch, TermSource: "ts2", Proc: "p2", Key: key, Writer: "w1"})
			b.put(nil, key, rec("w1", 7<<32|2, plain("x")))
			c.Got = 7<<32 | 3
			b.end(c, nil)
		}},
	)
}

func TestPromise18_Deposed(t *testing.T) {
	key := shardKeyOf(t, "", "pl", "s1")
	waiting := []Context{{ID: 1, Kind: "deposed", Key: key}}
	judge(t, 18,
		story{name: "stale leaves it running", build: func(b *builder) {
			b.put(nil, key, rec("w9", 9, plain("x")))
			p := b.begin(Call{Op: Push, Plugin: "pl", Shard: "s1", Writer: "w1", Epoch: 1, Before: waiting, After: waiting})
			b.end(p, errStale, "stale")
		}},
		// A Check tells no Deposed context, whatever it finds.
		story{name: "a check refused as stale ends it", build: func(b *builder) {
			b.put(nil, key, rec("w9", 9, plain("x")))
			c := b.begin(Call{Op: Check, Plugin: "pl", Shard: "s1", Writer: "w1", Epoch: 1, Before: waiting,
				After: []Context{{ID: 1, Kind: "deposed", Key: key, Done: true, Cause: errStale, Is: Matches{"stale"}}}})
			b.endBare(c, errStale, "stale")
		}},
		story{name: "a check refused as stale leaves it", kept: true, build: func(b *builder) {
			b.put(nil, key, rec("w9", 9, plain("x")))
			c := b.begin(Call{Op: Check, Plugin: "pl", Shard: "s1", Writer: "w1", Epoch: 1, Before: waiting, After: waiting})
			b.endBare(c, errStale, "stale")
		}},
		story{name: "a landed write ends it", build: func(b *builder) {
			p := b.begin(Call{Op: Push, Plugin: "pl", Shard: "s1", Writer: "w1", Epoch: 1, Payload: []byte("a"), Before: waiting,
				After: []Context{{ID: 1, Kind: "deposed", Key: key, Done: true, Cause: errStale, Is: Matches{"stale"}}}})
			b.put(p, key, rec("w1", 1, plain("a")))
			b.end(p, nil)
		}},
	)
}

// TestPromise18_ThatFenceAlone: a stale refusal cancels the Deposed
// contexts of its own Fence, and a Hold whose seal is refused as stale is
// such a refusal.
func TestPromise18_ThatFenceAlone(t *testing.T) {
	key, leaseKey := shardKeyOf(t, "", "pl", "s1"), leaseKeyOf(t, "L")
	waiting := []Context{{ID: 1, Kind: "deposed", Key: key}}
	deposed := []Context{{ID: 1, Kind: "deposed", Key: key, Done: true, Cause: errStale, Is: Matches{"stale"}}}
	judge(t, 18,
		story{name: "another Fence's refusal ends it", build: func(b *builder) {
			b.put(nil, key, rec("w9", 9, plain("x")))
			c := b.begin(Call{Op: Check, Proc: "p2", Plugin: "pl", Shard: "s1", Writer: "w2", Epoch: 9, Before: waiting, After: waiting})
			b.endBare(c, errStale, "stale")
			p := b.begin(Call{Op: Push, Plugin: "pl", Shard: "s1", Writer: "w1", Epoch: 1})
			b.end(p, errStale, "stale")
			c = b.begin(Call{Op: Check, Proc: "p2", Plugin: "pl", Shard: "s1", Writer: "w2", Epoch: 9, Before: deposed, After: deposed})
			b.endBare(c, errStale, "stale")
		}},
		story{name: "its own refusal ends it", kept: true, build: func(b *builder) {
			b.put(nil, key, rec("w9", 9, plain("x")))
			p := b.begin(Call{Op: Push, Proc: "p2", Plugin: "pl", Shard: "s1", Writer: "w2", Epoch: 1, Before: waiting, After: deposed})
			b.end(p, errStale, "stale")
			c := b.begin(Call{Op: Check, Proc: "p2", Plugin: "pl", Shard: "s1", Writer: "w2", Epoch: 9, Before: deposed, After: deposed})
			b.endBare(c, errStale, "stale")
		}},
		story{name: "a hold's seal refused as stale leaves it running", build: func(b *builder) {
			b.put(nil, key, rec("w9", 9<<32, plain("x")))
			hd := b.begin(Call{Op: Hold, Lease: lv1, LeaseName: "L", Holder: "h1", HoldsShards: []string{key}, Before: waiting, After: waiting})
			b.put(hd, leaseKey, record.EncodeLease("h1", 1, b.now.Add(time.Minute).UnixNano(), inc1))
			b.put(hd, leaseKey, record.EncodeLease("h1", 1, 0, inc1))
			b.end(hd, errStale, "stale")
		}},
		story{name: "a hold's seal refused as stale ends it", kept: true, build: func(b *builder) {
			b.put(nil, key, rec("w9", 9<<32, plain("x")))
			hd := b.begin(Call{Op: Hold, Lease: lv1, LeaseName: "L", Holder: "h1", HoldsShards: []string{key}, Before: waiting, After: deposed})
			b.put(hd, leaseKey, record.EncodeLease("h1", 1, b.now.Add(time.Minute).UnixNano(), inc1))
			b.put(hd, leaseKey, record.EncodeLease("h1", 1, 0, inc1))
			b.end(hd, errStale, "stale")
		}},
	)
}

func TestPromise19_BlobsOnce(t *testing.T) {
	b := newBuilder(t)
	name := keys.BlobName(1, "w1", blobID(1))
	for range 2 {
		pb := b.begin(Call{Op: PutBlob, Plugin: "pl", Shard: "s1", Writer: "w1", Epoch: 1})
		b.createBlob(pb, blobKeyOf(t, "s1", name), []byte("b"))
		b.end(pb, nil)
	}
	b.requireBroken(19)
}

func TestPromise20_Commit(t *testing.T) {
	key := shardKeyOf(t, "", "pl", "s1")
	for _, c := range []struct {
		name    string
		writer  string // of the blob's name
		stored  []byte // the blob's bytes; nil: no blob
		horizon bool   // the record's horizon is past the blob's creation
	}{
		{"another writer's blob", "w2", []byte("b"), false},
		{"a missing blob", "w1", nil, false},
		{"another size", "w1", []byte("bb"), false},
		{"behind the horizon", "w1", []byte("b"), true},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := newBuilder(t)
			name := keys.BlobName(1, c.writer, blobID(1))
			if c.stored != nil {
				made := b.createBlob(nil, blobKeyOf(t, "s1", name), c.stored)
				if c.horizon {
					b.put(nil, key, rec("w1", 1, record.Body{Since: 1, Horizon: made.UnixNano() + 1, Stream: true}))
				}
			}
			b.wrote(Call{Op: Commit, Plugin: "pl", Shard: "s1", Writer: "w1", Epoch: 2}, key, rec("w1", 2, record.Body{Refs: []record.BlobRef{ref(name, []byte("b"))}, Since: 1, Stream: true}))
			b.requireBroken(20)
		})
	}
}

func TestPromise21_Tenure(t *testing.T) {
	key := shardKeyOf(t, "", "pl", "s1")
	name := keys.BlobName(1, "w1", blobID(1))
	for _, c := range []struct {
		name       string
		was, floor uint64 // the epoch and the floor of w1's record before
		op         Op
		writer     string
		epoch      uint64
		body       record.Body // what the call wrote
	}{
		{"seal keeps the floor", 1, 1, Seal, "w1", 2, record.Body{Since: 1, Stream: true}},
		{"floor lowered", 3, 3, Push, "w1", 4, record.Body{Since: 2, Stream: true}},
		{"new writer keeps the floor", 3, 1, Push, "w2", 4, record.Body{Since: 1, Stream: true}},
		{"a blob below the floor", 3, 3, Commit, "w1", 4, record.Body{Refs: []record.BlobRef{ref(name, []byte("b"))}, Since: 3, Stream: true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := newBuilder(t)
			if len(c.body.Refs) > 0 {
				b.createBlob(nil, blobKeyOf(t, "s1", name), []byte("b"))
			}
			b.put(nil, key, rec("w1", c.was, record.Body{Since: c.floor, Stream: true}))
			b.wrote(Call{Op: c.op, Plugin: "pl", Shard: "s1", Writer: c.writer, Epoch: c.epoch}, key, rec(c.writer, c.epoch, c.body))
			b.requireBroken(21)
		})
	}
}

func TestPromise22_RecordOpsKeepRefs(t *testing.T) {
	key := shardKeyOf(t, "", "pl", "s1")
	name := keys.BlobName(1, "w1", blobID(1))
	judge(t, 22,
		story{name: "references dropped", build: func(b *builder) {
			b.createBlob(nil, blobKeyOf(b.t, "s1", name), []byte("b"))
			b.put(nil, key, rec("w1", 1, record.Body{Refs: []record.BlobRef{ref(name, []byte("b"))}, Since: 1, Stream: true}))
			b.wrote(Call{Op: Push, Plugin: "pl", Shard: "s1", Writer: "w1", Epoch: 2, Payload: []byte("a")}, key, rec("w1", 2, record.Body{Payload: []byte("a"), Since: 1, Stream: true}))
		}},
		story{name: "a stream's record made plain", build: func(b *builder) {
			b.put(nil, key, rec("w1", 1, record.Body{Since: 1, Stream: true}))
			b.wrote(Call{Op: Push, Plugin: "pl", Shard: "s1", Writer: "w1", Epoch: 2, Payload: []byte("a")}, key, rec("w1", 2, plain("a")))
		}},
		// The collection horizon stays as Collect raised it, whoever
		// writes the record next (but a settle).
		story{name: "a push drops the horizon", build: func(b *builder) {
			b.put(nil, key, rec("w1", 1, record.Body{Since: 1, Horizon: 500, Stream: true}))
			b.wrote(Call{Op: Push, Plugin: "pl", Shard: "s1", Writer: "w1", Epoch: 2, Payload: []byte("a")}, key, rec("w1", 2, record.Body{Payload: []byte("a"), Since: 1, Stream: true}))
		}},
		story{name: "an update lowers the horizon", build: func(b *builder) {
			b.put(nil, key, rec("w1", 1, record.Body{Since: 1, Horizon: 500, Stream: true}))
			b.wrote(Call{Op: Update, Plugin: "pl", Shard: "s1", Writer: "w1", Epoch: 2}, key, rec("w1", 2, record.Body{Payload: []byte("a"), Since: 1, Horizon: 400, Stream: true}))
		}},
		story{name: "a commit drops the horizon", build: func(b *builder) {
			b.put(nil, key, rec("w1", 1, record.Body{Since: 1, Horizon: 500, Stream: true}))
			b.wrote(Call{Op: Commit, Plugin: "pl", Shard: "s1", Writer: "w1", Epoch: 2}, key, rec("w1", 2, record.Body{Payload: []byte("a"), Since: 1, Stream: true}))
		}},
		story{name: "a seal keeps the horizon", kept: true, build: func(b *builder) {
			b.put(nil, key, rec("w1", 1, record.Body{Payload: []byte("m"), Since: 1, Horizon: 500, Stream: true}))
			b.wrote(Call{Op: Seal, Plugin: "pl", Shard: "s1", Writer: "w2", Epoch: 2}, key, rec("w2", 2, record.Body{Payload: []byte("m"), Since: 2, Horizon: 500, Stream: true}))
		}},
		// Seal keeps the payload byte for byte, and seals a shard never
		// pushed with an empty one.
		story{name: "a seal changes the payload", build: func(b *builder) {
			b.put(nil, key, rec("w1", 1, plain("state")))
			b.wrote(Call{Op: Seal, Plugin: "pl", Shard: "s1", Writer: "w2", Epoch: 2}, key, rec("w2", 2, plain("")))
		}},
		story{name: "a seal creates a record with a payload", build: func(b *builder) {
			b.wrote(Call{Op: Seal, Plugin: "pl", Shard: "s1", Writer: "w2", Epoch: 2}, key, rec("w2", 2, plain("made up")))
		}},
		story{name: "a hold's seal changes the payload", build: func(b *builder) {
			b.put(nil, key, rec("w1", 1, plain("state")))
			b.wrote(Call{Op: Hold, Lease: lv1, Holder: "w2", HoldsShards: []string{key}}, key, rec("w2", 2<<32|1, plain("")))
		}},
	)
}

func TestPromise23_Readers(t *testing.T) {
	key := shardKeyOf(t, "", "pl", "s1")
	// latest records a Latest that read h and body over a record of
	// stored.
	latest := func(b *builder, stored record.Body, h record.Header, body record.Body) {
		b.put(nil, key, rec("w1", 1, stored))
		la := b.begin(Call{Op: Latest, Plugin: "pl", Shard: "s1"})
		la.Read, la.ReadBody = &h, body
		b.end(la, nil)
	}
	// open records an OpenBlob that read data of a blob of "real", which
	// the record references when referenced.
	open := func(b *builder, referenced bool, data string) {
		name := keys.BlobName(1, "w1", blobID(1))
		b.createBlob(nil, blobKeyOf(b.t, "s1", name), []byte("real"))
		body := record.Body{Since: 1, Stream: true}
		if referenced {
			body.Refs = []record.BlobRef{ref(name, []byte("real"))}
		}
		b.put(nil, key, rec("w1", 1, body))
		op := b.begin(Call{Op: Open, Plugin: "pl", Shard: "s1", Name: name})
		op.Bytes = []byte(data)
		b.end(op, nil)
	}
	judge(t, 23,
		story{name: "latest of what was never recorded", build: func(b *builder) {
			h, body, _ := record.Decode(rec("w1", 1, plain("forged")))
			latest(b, plain("a"), h, body)
		}},
		story{name: "latest of the payload alone", kept: true, build: func(b *builder) {
			latest(b, record.Body{Payload: []byte("a"), Since: 1, Stream: true}, record.Header{Epoch: 1, Writer: "w1"}, record.Body{Payload: []byte("a")})
		}},
		story{name: "open of another blob's bytes", build: func(b *builder) { open(b, true, "fake") }},
		story{name: "open of an unreferenced blob", build: func(b *builder) { open(b, false, "real") }},
		// A blob rewritten from outside during an Open holds the bytes
		// written: read, they are bytes it held during the call.
		story{name: "open of a blob rewritten from outside during the call", kept: true, build: func(b *builder) {
			name := keys.BlobName(1, "w1", blobID(1))
			at := b.createBlob(nil, blobKeyOf(b.t, "s1", name), []byte("rea1"))
			b.put(nil, key, rec("w1", 1, record.Body{Since: 1, Stream: true, Refs: []record.BlobRef{ref(name, []byte("real"))}}))
			op := b.begin(Call{Op: Open, Plugin: "pl", Shard: "s1", Name: name})
			b.deleteBlob(nil, blobKeyOf(b.t, "s1", name))
			b.h.Change(Change{Kind: "create blob", Key: blobKeyOf(b.t, "s1", name), Data: []byte("real"), Modified: at, At: b.tick()})
			op.Bytes = []byte("real")
			b.end(op, nil)
		}},
		// ErrNotFound says the shard had no record during the call.
		story{name: "latest finds a record absent", build: func(b *builder) {
			b.put(nil, key, rec("w1", 1, plain("a")))
			la := b.begin(Call{Op: Latest, Plugin: "pl", Shard: "s1"})
			b.end(la, errNotFound, "not found")
		}},
		story{name: "latest finds a record deleted during the call absent", kept: true, build: func(b *builder) {
			b.put(nil, key, rec("w1", 1, plain("a")))
			la := b.begin(Call{Op: Latest, Plugin: "pl", Shard: "s1"})
			b.del(nil, key)
			b.end(la, errNotFound, "not found")
		}},
	)
}

func TestPromise24_NoReferencedBlobMissing(t *testing.T) {
	key := shardKeyOf(t, "", "pl", "s1")
	name := keys.BlobName(1, "w1", blobID(1))
	history := func(t *testing.T, deleter *Call) *builder {
		b := newBuilder(t)
		b.createBlob(nil, blobKeyOf(t, "s1", name), []byte("b"))
		b.put(nil, key, rec("w1", 1, record.Body{Refs: []record.BlobRef{ref(name, []byte("b"))}, Since: 1, Stream: true}))
		if deleter != nil {
			deleter = b.begin(*deleter)
		}
		b.deleteBlob(deleter, blobKeyOf(t, "s1", name))
		if deleter != nil {
			b.end(deleter, nil)
		}
		return b
	}
	history(t, &Call{Op: PutBlob, Plugin: "pl", Shard: "s1", Writer: "w1", Epoch: 1}).requireBroken(24)
	history(t, nil).requireKept(24) // deleted outside the package
}

// A commit that creates the record checks its blobs, and its write is
// on its way while a collector deletes the blob and something outside
// deletes the record: it lands on the absence it decided on. Promise 24
// says so; a commit that began after the delete decided after it, and
// under KeepFloor no commit creates the record (31).
func TestPromise24_CommitCreatingARecordDeletedMeanwhile(t *testing.T) {
	key := shardKeyOf(t, "", "pl", "s1")
	name := keys.BlobName(1, "w1", blobID(1))
	history := func(t *testing.T, beganBefore, keepFloor bool) *builder {
		b := newBuilder(t)
		b.createBlob(nil, blobKeyOf(t, "s1", name), []byte("b"))
		var commit *Call
		begin := func() {
			commit = b.begin(Call{Op: Commit, Plugin: "pl", Shard: "s1", Writer: "w1", Epoch: 1, KeepFloor: keepFloor})
		}
		if beganBefore {
			begin()
		}
		b.put(nil, key, rec("w2", 2, record.Body{Since: 2, Stream: true}))
		gc := b.begin(Call{Op: Collect, Plugin: "pl", Shard: "s1"})
		b.deleteBlob(gc, blobKeyOf(t, "s1", name))
		b.end(gc, nil)
		b.del(nil, key)
		if !beganBefore {
			begin()
		}
		b.put(commit, key, rec("w1", 1, record.Body{Refs: []record.BlobRef{ref(name, []byte("b"))}, Since: 1, Stream: true}))
		b.end(commit, nil)
		return b
	}
	history(t, true, false).requireKept(24)
	history(t, true, false).requireKept(20)
	history(t, false, false).requireBroken(24)
	history(t, false, false).requireBroken(20)
	history(t, true, true).requireBroken(24)
}

func TestPromise25_CollectDeletesGarbageOnly(t *testing.T) {
	key := shardKeyOf(t, "", "pl", "s1")
	name := keys.BlobName(1, "w1", blobID(1))
	body := record.Body{Refs: []record.BlobRef{ref(name, []byte("b"))}, Since: 1, Stream: true}
	for _, c := range []struct {
		name   string
		stored []byte // the record the collection finds; nil: none
		err    error  // what the collection returned
		is     []string
		commit bool // a commit references the blob afterwards
	}{
		{"a referenced blob", rec("w1", 1, body), nil, nil, false},
		{"no record and no RecordGone", nil, errNotFound, []string{"not found"}, false},
		{"a damaged record", []byte("damaged"), nil, nil, false},
		{"referenced after the collection", rec("w1", 1, record.Body{Since: 1, Stream: true}), nil, nil, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := newBuilder(t)
			b.createBlob(nil, blobKeyOf(t, "s1", name), []byte("b"))
			if c.stored != nil {
				b.put(nil, key, c.stored)
			}
			co := b.begin(Call{Op: Collect, Plugin: "pl", Shard: "s1"})
			b.deleteBlob(co, blobKeyOf(t, "s1", name))
			b.end(co, c.err, c.is...)
			if c.commit {
				b.wrote(Call{Op: Commit, Plugin: "pl", Shard: "s1", Writer: "w1", Epoch: 2}, key, rec("w1", 2, body))
			}
			b.requireBroken(25)
		})
	}
	// A dry run writes only its clock's blob: it deletes no blob of the
	// shard, garbage included, and raises no horizon.
	deposed := keys.BlobName(1, "w0", blobID(2))
	judge(t, 25,
		story{name: "a dry run deletes garbage", build: func(b *builder) {
			b.createBlob(nil, blobKeyOf(b.t, "s1", deposed), []byte("g"))
			b.put(nil, key, rec("w1", 2, record.Body{Since: 2, Stream: true}))
			co := b.begin(Call{Op: Collect, Plugin: "pl", Shard: "s1", DryRun: true})
			b.deleteBlob(co, blobKeyOf(b.t, "s1", deposed))
			b.end(co, nil)
		}},
		story{name: "a dry run raises the horizon", build: func(b *builder) {
			b.put(nil, key, rec("w1", 2, record.Body{Since: 2, Stream: true}))
			co := b.begin(Call{Op: Collect, Plugin: "pl", Shard: "s1", DryRun: true})
			b.put(co, key, rec("w1", 2, record.Body{Since: 2, Horizon: 500, Stream: true}))
			b.end(co, nil)
		}},
		story{name: "a record of another identity", build: func(b *builder) {
			b.createBlob(nil, blobKeyOf(b.t, "s1", deposed), []byte("g"))
			b.put(nil, key, recOf("other/v2", "w1", 2, record.Body{Since: 2, Stream: true}))
			co := b.begin(Call{Op: Collect, Plugin: "pl", Shard: "s1"})
			b.deleteBlob(co, blobKeyOf(b.t, "s1", deposed))
			b.end(co, nil)
		}},
		story{name: "a collection deletes garbage", kept: true, build: func(b *builder) {
			b.createBlob(nil, blobKeyOf(b.t, "s1", deposed), []byte("g"))
			b.put(nil, key, rec("w1", 2, record.Body{Since: 2, Stream: true}))
			co := b.begin(Call{Op: Collect, Plugin: "pl", Shard: "s1"})
			b.deleteBlob(co, blobKeyOf(b.t, "s1", deposed))
			b.end(co, nil)
		}},
	)
	// What the record can come to reference: a blob of the recorded
	// writer within its tenure, or of an epoch above the record's,
	// created at or after the horizon, unless the record no longer could
	// at some moment of the collection (its horizon raised, its writer
	// deposed).
	own, ahead := keys.BlobName(2, "w1", blobID(3)), keys.BlobName(3, "w2", blobID(4))
	committable := func(name string, raise, depose bool) func(b *builder) {
		return func(b *builder) {
			at := b.createBlob(nil, blobKeyOf(b.t, "s1", name), []byte("c"))
			b.put(nil, key, rec("w1", 2, record.Body{Since: 2, Stream: true}))
			co := b.begin(Call{Op: Collect, Plugin: "pl", Shard: "s1"})
			if raise {
				b.put(co, key, rec("w1", 2, record.Body{Since: 2, Horizon: at.UnixNano() + 1, Stream: true}))
			}
			if depose {
				b.wrote(Call{Op: Seal, Plugin: "pl", Shard: "s1", Writer: "w3", Epoch: 4}, key, rec("w3", 4, record.Body{Since: 4, Stream: true}))
			}
			b.deleteBlob(co, blobKeyOf(b.t, "s1", name))
			b.end(co, nil)
		}
	}
	judge(t, 25,
		story{name: "the writer's blob of its tenure", build: committable(own, false, false)},
		story{name: "a blob of an epoch above the record's", build: committable(ahead, false, false)},
		story{name: "the writer's blob behind the horizon raised", kept: true, build: committable(own, true, false)},
		story{name: "a blob ahead, behind the horizon raised", kept: true, build: committable(ahead, true, false)},
		story{name: "the writer's blob, the writer deposed", kept: true, build: committable(own, false, true)},
		story{name: "a blob ahead, below the tenure that deposed the writer", kept: true, build: committable(ahead, false, true)},
	)
}

func TestPromise26_CollectReclaims(t *testing.T) {
	key := shardKeyOf(t, "", "pl", "s1")
	deposed := keys.BlobName(1, "w1", blobID(1))
	b := newBuilder(t)
	b.createBlob(nil, blobKeyOf(t, "s1", deposed), []byte("b"))
	b.put(nil, key, rec("w2", 2, record.Body{Since: 2, Stream: true}))
	co := b.begin(Call{Op: Collect, Plugin: "pl", Shard: "s1"})
	b.end(co, nil)
	b.requireBroken(26)
}

func TestPromise27_Observer(t *testing.T) {
	key := shardKeyOf(t, "", "pl", "s1")
	// landed begins a push and lands its record.
	landed := func(b *builder) *Call {
		p := b.begin(Call{Op: Push, Plugin: "pl", Shard: "s1", Writer: "w1", Epoch: 1, Payload: []byte("a")})
		b.put(p, key, rec("w1", 1, plain("a")))
		return p
	}
	judge(t, 27,
		story{name: "no event", build: func(b *builder) { b.endBare(landed(b), nil) }},
		story{name: "refused without an event", build: func(b *builder) {
			b.put(nil, key, []byte("damaged"))
			st := b.begin(Call{Op: Settle, Plugin: "pl", Shard: "s1", Writer: "w1", Epoch: 2, Floor: 1, Version: "elsewhere"})
			b.endBare(st, errConflict, "conflict")
		}},
		story{name: "an Op WriteEvent does not name", build: func(b *builder) {
			p := landed(b)
			p.Events = append(p.Events, Event{Op: "pushed", Key: key})
			b.end(p, nil)
		}},
		story{name: "a write seen ending twice", build: func(b *builder) {
			p := landed(b)
			p.Events = append(p.Events, Event{Op: "push", Key: key})
			b.end(p, nil)
		}},
		story{name: "a lost race, then the end", kept: true, build: func(b *builder) {
			p := landed(b)
			p.Events = append(p.Events, Event{Op: "push", Key: key, Retrying: true, Err: errConflict, Is: Matches{"conflict"}})
			b.end(p, nil)
		}},
	)
	// Every write the Observer names, not only a record's: a blob, a
	// lease's record, the brand, a collection's horizon, a floor.
	blob := blobKeyOf(t, "s1", keys.BlobName(1, "w1", blobID(1)))
	floorKey, err := keys.Floor("", "pl", "s1")
	require.NoError(t, err)
	judge(t, 27,
		story{name: "a blob created, no event", build: func(b *builder) {
			c := b.begin(Call{Op: PutBlob, Plugin: "pl", Shard: "s1", Writer: "w1", Epoch: 1, Payload: []byte("b")})
			b.createBlob(c, blob, []byte("b"))
			b.endBare(c, nil)
		}},
		story{name: "a blob created, seen", kept: true, build: func(b *builder) {
			c := b.begin(Call{Op: PutBlob, Plugin: "pl", Shard: "s1", Writer: "w1", Epoch: 1, Payload: []byte("b")})
			b.createBlob(c, blob, []byte("b"))
			b.end(c, nil)
		}},
		story{name: "a blob seen ending twice", build: func(b *builder) {
			c := b.begin(Call{Op: PutBlob, Plugin: "pl", Shard: "s1", Writer: "w1", Epoch: 1, Payload: []byte("b")})
			b.createBlob(c, blob, []byte("b"))
			c.Events = append(c.Events, Event{Op: "blob", Key: c.Key})
			b.end(c, nil)
		}},
		story{name: "a lease acquired, no event", build: func(b *builder) {
			ac := b.begin(Call{Op: Acquire, Lease: lv1, LeaseName: "L", Holder: "h1"})
			b.put(ac, leaseKeyOf(t, "L"), record.EncodeLease("h1", 1, b.now.Add(time.Minute).UnixNano(), inc1))
			ac.Term = 1
			b.endBare(ac, nil)
		}},
		story{name: "the brand claimed, no event", build: func(b *builder) {
			cl := b.begin(Call{Op: Claim})
			b.put(cl, keys.Brand(""), []byte(defaultIdentity))
			cl.Claimed = true
			b.endBare(cl, nil)
		}},
		story{name: "a Collect refused, no event", build: func(b *builder) {
			b.endBare(b.begin(Call{Op: Collect, Plugin: "pl", Shard: "s1"}), errWire, "wire")
		}},
		story{name: "a Collect that wrote nothing, no event", build: func(b *builder) {
			b.endBare(b.begin(Call{Op: Collect, Plugin: "pl", Shard: "s1"}), nil)
		}},
		story{name: "a Collect that wrote nothing, seen", kept: true, build: func(b *builder) {
			b.end(b.begin(Call{Op: Collect, Plugin: "pl", Shard: "s1"}), nil)
		}},
		story{name: "a Collect's invalid argument, no event", kept: true, build: func(b *builder) {
			b.endBare(b.begin(Call{Op: Collect, Plugin: "pl", Shard: "s1"}), errInvalid, "invalid")
		}},
		story{name: "a horizon written, no event", build: func(b *builder) {
			b.put(nil, key, rec("w1", 2, record.Body{Since: 2, Stream: true}))
			co := b.begin(Call{Op: Collect, Plugin: "pl", Shard: "s1"})
			b.put(co, key, rec("w1", 2, record.Body{Since: 2, Horizon: 9, Stream: true}))
			b.endBare(co, nil)
		}},
		// A race lost (a put refused as a conflict) and retried is seen
		// before the end; one that ends the write is seen ending it.
		story{name: "a lost race retried unseen", build: func(b *builder) {
			p := b.begin(Call{Op: Push, Plugin: "pl", Shard: "s1", Writer: "w1", Epoch: 1, Payload: []byte("a")})
			b.h.Change(Change{Call: p.ID, Kind: "fault", Key: key, Fault: "conflict", Request: "put", At: b.tick()})
			b.put(p, key, rec("w1", 1, plain("a")))
			b.end(p, nil)
		}},
		story{name: "a lost race retried, seen", kept: true, build: func(b *builder) {
			p := b.begin(Call{Op: Push, Plugin: "pl", Shard: "s1", Writer: "w1", Epoch: 1, Payload: []byte("a")})
			b.h.Change(Change{Call: p.ID, Kind: "fault", Key: key, Fault: "conflict", Request: "put", At: b.tick()})
			p.Events = append(p.Events, Event{Op: "push", Key: key, Retrying: true, Err: errConflict, Is: Matches{"conflict"}})
			b.put(p, key, rec("w1", 1, plain("a")))
			b.end(p, nil)
		}},
		story{name: "a lost race that ends the write", kept: true, build: func(b *builder) {
			p := b.begin(Call{Op: Push, Plugin: "pl", Shard: "s1", Writer: "w1", Epoch: 1, Payload: []byte("a")})
			b.h.Change(Change{Call: p.ID, Kind: "fault", Key: key, Fault: "conflict", Request: "put", At: b.tick()})
			b.end(p, context.Canceled, "canceled")
		}},
		story{name: "a seal's floor, no event", build: func(b *builder) {
			sl := b.begin(Call{Op: Seal, Plugin: "pl", Shard: "s1", Writer: "w1", Epoch: 5, KeepFloor: true})
			b.put(sl, key, rec("w1", 5, plain("")))
			b.put(sl, floorKey, bytes.Join(record.Encode(defaultIdentity, "w1", 5, record.Body{}, record.CRC32C(nil)), nil))
			b.end(sl, nil)
		}},
	)
}

func TestPromise28_Keys(t *testing.T) {
	judge(t, 28,
		story{name: "another shard's record", build: func(b *builder) {
			b.wrote(Call{Op: Push, Plugin: "pl", Shard: "s1", Writer: "w1", Epoch: 1, Payload: []byte("a")}, shardKeyOf(b.t, "", "pl", "s2"), rec("w1", 1, plain("a")))
		}},
		story{name: "a prefix that reaches into another's keys", build: func(b *builder) {
			b.wrote(Call{Op: Claim, Prefix: "a/_x/"}, "a/_x/_brand", []byte(defaultIdentity))
		}},
		// Of the default prefix's reserved space, a call under another
		// prefix writes only Valkey's own keys (its waits, its staged
		// values), never the default prefix's brand or floors.
		story{name: "the default prefix's brand, under another", build: func(b *builder) {
			b.wrote(Call{Op: Claim, Prefix: "a/"}, keys.Brand(""), []byte(defaultIdentity))
		}},
		story{name: "the default prefix's floor, under another", build: func(b *builder) {
			floorKey, err := keys.Floor("", "pl", "s1")
			require.NoError(b.t, err)
			sl := b.begin(Call{Op: Seal, Prefix: "a/", Plugin: "pl", Shard: "s1", Writer: "w1", Epoch: 5, KeepFloor: true})
			b.put(sl, sl.Key, rec("w1", 5, plain("")))
			b.put(sl, floorKey, rec("w1", 5, record.Body{}))
			b.end(sl, nil)
		}},
		story{name: "Valkey's staged value, under another", kept: true, build: func(b *builder) {
			p := b.begin(Call{Op: Push, Prefix: "a/", Plugin: "pl", Shard: "s1", Writer: "w1", Epoch: 1, Payload: []byte("a")})
			b.put(p, keys.Staging+"x", []byte("staged"))
			b.del(p, keys.Staging+"x")
			b.put(p, keys.Wait, []byte("w"))
			b.put(p, p.Key, rec("w1", 1, plain("a")))
			b.end(p, nil)
		}},
	)
}

// TestWriteError checks a refused write under a wire error is judged as
// any refusal, with its message naming the call.
func TestWriteError(t *testing.T) {
	key := shardKeyOf(t, "", "pl", "s1")
	b := newBuilder(t)
	p := b.begin(Call{Op: Push, Plugin: "pl", Shard: "s1", Writer: "w\n1", Epoch: 1, Payload: []byte("a")})
	b.put(p, key, rec("w\n1", 1, plain("a")))
	b.end(p, errWire, "wire")
	vs := b.check(Options{})
	require.NotEmpty(t, vs)
	assert.Contains(t, vs[0].Msg, `writer "w\n1"`)
	assert.Contains(t, vs[0].Msg, "call 1 ")
}

var errRegressed = errors.New("writefence: epoch regressed")

// pushed records a push by proc of payload at epoch that landed.
func pushed(b *builder, proc, key string, epoch uint64, payload string, keepFloor bool) {
	b.wrote(Call{Op: Push, Proc: proc, Plugin: "pl", Shard: "s1", Writer: "w1", Epoch: epoch, Payload: []byte(payload), KeepFloor: keepFloor}, key, rec("w1", epoch, plain(payload)))
}

func TestPromise29_FenceSawIt(t *testing.T) {
	key := shardKeyOf(t, "", "pl", "s1")
	history := func(t *testing.T, proc string, forget bool) *builder {
		b := newBuilder(t)
		pushed(b, "p1", key, 5, "five", false)
		b.del(nil, key)
		if forget {
			f := b.begin(Call{Op: Forget, Plugin: "pl", Shard: "s1"})
			b.end(f, nil)
		}
		pushed(b, proc, key, 6, "six", false)
		return b
	}
	t.Run("its write over the deleted record", func(t *testing.T) { history(t, "p1", false).requireBroken(29) })
	t.Run("a Fence that never saw it", func(t *testing.T) { history(t, "p2", false).requireKept(29) })
	// A write at or below the recorded epoch is stale, however the
	// record was set back.
	t.Run("stale over the record set back, at its epoch", func(t *testing.T) {
		b := newBuilder(t)
		pushed(b, "p1", key, 5, "five", false)
		pushed(b, "p1", key, 6, "six", false)
		b.put(nil, key, rec("w1", 5, plain("five")))
		p := b.begin(Call{Op: Push, Plugin: "pl", Shard: "s1", Writer: "w1", Epoch: 5, Payload: []byte("again")})
		b.end(p, errStale, "stale")
		b.requireKept(29)
	})
	// Its writes are refused as regressed, not as something else, while
	// the record is absent or below what it saw throughout the call.
	for _, op := range []Op{Push, Update, Commit, Seal} {
		for _, is := range []string{"stale", "not found", "regressed"} {
			t.Run(string(op)+" refused as "+is+" over the deleted record", func(t *testing.T) {
				b := newBuilder(t)
				pushed(b, "p1", key, 5, "five", false)
				b.del(nil, key)
				p := b.begin(Call{Op: op, Plugin: "pl", Shard: "s1", Writer: "w1", Epoch: 6, Payload: []byte("six")})
				b.end(p, errors.New("writefence: "+is), is)
				if is == "regressed" {
					b.requireKept(29)
				} else {
					b.requireBroken(29)
				}
			})
		}
	}
	t.Run("after Forget", func(t *testing.T) { history(t, "p1", true).requireKept(29) })
	// A refusal as regressed names what the Fence saw: an epoch the record
	// held during a call of its process since it last forgot the shard.
	regressed := func(t *testing.T, forget bool) *builder {
		b := newBuilder(t)
		pushed(b, "p1", key, 5, "five", false)
		b.put(nil, key, rec("w0", 3, plain("three"))) // set back
		if forget {
			b.end(b.begin(Call{Op: Forget, Plugin: "pl", Shard: "s1"}), nil)
		}
		p := b.begin(Call{Op: Push, Plugin: "pl", Shard: "s1", Writer: "w1", Epoch: 6, Payload: []byte("six")})
		p.Regress = &record.Header{Epoch: 5, Writer: "w1"}
		b.end(p, errors.New("writefence: epoch regressed"), "regressed")
		return b
	}
	t.Run("refused by what it saw", func(t *testing.T) { regressed(t, false).requireKept(29) })
	t.Run("refused by what it saw before Forget", func(t *testing.T) { regressed(t, true).requireBroken(29) })
	// A Check refused because the record is below the epoch it was asked
	// about names that epoch and writer as seen: the caller's, not its
	// Fence's memory, whatever the Fence saw.
	for _, asked := range []bool{true, false} {
		name := map[bool]string{true: "a check naming the epoch it was asked about", false: "a check naming another epoch"}[asked]
		t.Run(name, func(t *testing.T) {
			b := newBuilder(t)
			b.put(nil, key, rec("w0", 3, plain("three")))
			c := b.begin(Call{Op: Check, Proc: "p2", Plugin: "pl", Shard: "s1", Writer: "w1", Epoch: 6})
			c.Regress = &record.Header{Epoch: 6, Writer: "w1"}
			if !asked {
				c.Regress = &record.Header{Epoch: 5, Writer: "w1"}
			}
			b.end(c, errors.New("writefence: epoch regressed"), "regressed")
			if asked {
				b.requireKept(29)
			} else {
				b.requireBroken(29)
			}
		})
	}
	t.Run("a read counts", func(t *testing.T) {
		b := newBuilder(t)
		b.put(nil, key, rec("w0", 3, plain("three")))
		b.put(nil, key, rec("w0", 5, plain("five")))
		la := b.begin(Call{Op: Latest, Plugin: "pl", Shard: "s1"})
		la.Read = &record.Header{Epoch: 5, Writer: "w0"}
		la.ReadBody = plain("five")
		b.end(la, nil)
		b.put(nil, key, rec("w0", 3, plain("three"))) // set back
		pushed(b, "p1", key, 4, "four", false)
		b.requireBroken(29)
	})
	// An OpenBlob and a Collect read the record too: their Fence holds
	// to the lowest epoch the record held during the call.
	for _, op := range []Op{Open, Collect} {
		t.Run("a read by "+string(op)+" counts", func(t *testing.T) {
			for _, setBack := range []bool{true, false} {
				b := newBuilder(t)
				name := keys.BlobName(5, "w0", blobID(1))
				b.createBlob(nil, blobKeyOf(t, "s1", name), []byte("b"))
				b.put(nil, key, rec("w0", 5, record.Body{Since: 5, Stream: true, Refs: []record.BlobRef{ref(name, []byte("b"))}}))
				r := b.begin(Call{Op: op, Plugin: "pl", Shard: "s1", Name: name})
				if op == Open {
					r.Bytes = []byte("b")
				}
				b.end(r, nil)
				if setBack {
					b.put(nil, key, rec("w0", 3, plain("three")))
				}
				pushed(b, "p1", key, 4, "four", false)
				if setBack {
					b.requireBroken(29)
				} else {
					b.requireKept(29)
				}
			}
		})
	}
	t.Run("a settle at what it saw", func(t *testing.T) {
		for _, e := range []uint64{5, 6} {
			b := newBuilder(t)
			pushed(b, "p1", key, 5, "five", false)
			b.del(nil, key)
			b.wrote(Call{Op: Settle, Plugin: "pl", Shard: "s1", Writer: "op", Epoch: e, Payload: []byte("s"), Floor: e - 1, Lost: true}, key, rec("op", e, plain("s")))
			if e == 5 {
				b.requireBroken(29)
			} else {
				b.requireKept(29)
			}
		}
	})
	t.Run("a collection over the record set back", func(t *testing.T) {
		b := newBuilder(t)
		pushed(b, "p1", key, 5, "five", false)
		b.put(nil, key, rec("w1", 2, plain("two")))
		name := keys.BlobName(1, "w0", blobID(1))
		b.createBlob(nil, blobKeyOf(t, "s1", name), []byte("x"))
		co := b.begin(Call{Op: Collect, Plugin: "pl", Shard: "s1"})
		b.deleteBlob(co, blobKeyOf(t, "s1", name))
		b.end(co, nil)
		b.requireBroken(29)
	})
}

func TestPromise30_LeaseSawIt(t *testing.T) {
	leaseKey := leaseKeyOf(t, "L")
	judge(t, 30,
		story{name: "an acquisition over the deleted record", build: func(b *builder) {
			acquired(b.t, b, time.Minute)
			b.del(nil, leaseKey)
			b.wrote(Call{Op: Acquire, Lease: lv1, LeaseName: "L", Holder: "h1"}, leaseKey, record.EncodeLease("h1", 1, b.now.Add(time.Minute).UnixNano(), inc1))
		}},
		story{name: "a renewal over the record set back", build: func(b *builder) {
			ac := b.begin(Call{Op: Acquire, Lease: lv1, LeaseName: "L", Holder: "h1"})
			b.put(ac, leaseKey, record.EncodeLease("h1", 3, b.now.Add(time.Minute).UnixNano(), inc1))
			ac.Term = 3
			b.end(ac, nil)
			b.put(nil, leaseKey, record.EncodeLease("h1", 2, 0, inc1))
			b.wrote(Call{Op: Renew, Lease: lv1, LeaseName: "L", Holder: "h1"}, leaseKey, record.EncodeLease("h1", 3, b.now.Add(time.Minute).UnixNano(), inc1))
		}},
		story{name: "another Lease value", kept: true, build: func(b *builder) {
			acquired(b.t, b, time.Millisecond)
			b.del(nil, leaseKey)
			b.wrote(Call{Op: Acquire, Lease: "p2/lease#1", Proc: "p2", LeaseName: "L", Holder: "h2"}, leaseKey, record.EncodeLease("h2", 1, b.now.Add(time.Minute).UnixNano(), inc2))
		}},
	)
	key := shardKeyOf(t, "", "pl", "s1")
	termSource := func(t *testing.T, deleted bool) *builder {
		b := newBuilder(t)
		pushed(b, "p1", key, 7<<32|5, "five", false)
		if deleted {
			b.del(nil, key)
		}
		ep := b.begin(Call{Op: Epoch, TermSource: "ts1", Plugin: "pl", Shard: "s1"})
		ep.Got = 7<<32 | 6
		if deleted {
			ep.Got = 7<<32 | 1
		}
		b.end(ep, nil)
		return b
	}
	t.Run("a term source over the deleted record", func(t *testing.T) { termSource(t, true).requireBroken(30) })
	t.Run("a term source over its record", func(t *testing.T) { termSource(t, false).requireKept(30) })
}

// TestPromise30_RenewalsSawIt: a renewal is a write of the Lease value
// too, whoever makes it: the Hold's renewer, during the Hold or after it
// returned, never writes the record over none or over a lower term.
func TestPromise30_RenewalsSawIt(t *testing.T) {
	leaseKey := leaseKeyOf(t, "L")
	lease := func(b *builder, term uint64) []byte {
		return record.EncodeLease("h1", term, b.now.Add(time.Minute).UnixNano(), inc1)
	}
	held := func(b *builder) *Call {
		hd := b.begin(Call{Op: Hold, Lease: lv1, LeaseName: "L", Holder: "h1"})
		b.put(hd, leaseKey, lease(b, 3))
		b.end(hd, nil)
		return hd
	}
	judge(t, 30,
		story{name: "the renewer over the deleted record, after the Hold returned", build: func(b *builder) {
			hd := held(b)
			b.del(nil, leaseKey)
			b.put(hd, leaseKey, lease(b, 3))
		}},
		story{name: "the renewer over the record set back, after the Hold returned", build: func(b *builder) {
			hd := held(b)
			b.put(nil, leaseKey, record.EncodeLease("h1", 2, 0, inc1))
			b.put(hd, leaseKey, lease(b, 3))
		}},
		story{name: "the renewer over its own record", kept: true, build: func(b *builder) {
			hd := held(b)
			b.put(hd, leaseKey, lease(b, 3))
		}},
		story{name: "the renewer over the deleted record, during the Hold", build: func(b *builder) {
			hd := b.begin(Call{Op: Hold, Lease: lv1, LeaseName: "L", Holder: "h1"})
			b.put(hd, leaseKey, lease(b, 3))
			b.del(nil, leaseKey)
			b.put(hd, leaseKey, lease(b, 3))
			b.end(hd, nil)
		}},
		// The reply of its first write lost, the value never learned it
		// held term 1: it may create the record again.
		story{name: "an acquisition whose reply was lost, again over the deleted record", kept: true, build: func(b *builder) {
			ac := b.begin(Call{Op: Acquire, Lease: lv1, LeaseName: "L", Holder: "h1"})
			b.put(ac, leaseKey, lease(b, 1))
			b.h.Change(Change{Call: ac.ID, Kind: "fault", Key: leaseKey, Fault: "lost", At: b.tick()})
			b.del(nil, leaseKey)
			b.put(ac, leaseKey, lease(b, 1))
			ac.Term = 1
			b.end(ac, nil)
		}},
	)
}

// TestPromise30_RenewalReportsRegressed: a Lease value whose record went
// absent or below its term, with no takeover between, reports the lease
// lost and regressed, from a Renew, an Epoch or its Hold's context.
func TestPromise30_RenewalReportsRegressed(t *testing.T) {
	leaseKey := leaseKeyOf(t, "L")
	taken := func(b *builder) {
		ac := b.begin(Call{Op: Acquire, Lease: lv1, LeaseName: "L", Holder: "h1"})
		b.put(ac, leaseKey, record.EncodeLease("h1", 3, b.now.Add(time.Minute).UnixNano(), inc1))
		ac.Term = 3
		b.end(ac, nil)
	}
	renewed := func(b *builder, is ...string) {
		rn := b.begin(Call{Op: Renew, Lease: lv1, LeaseName: "L", Holder: "h1"})
		b.end(rn, errLeaseLost, is...)
	}
	judge(t, 30,
		story{name: "a Renew over the deleted record, not regressed", build: func(b *builder) {
			taken(b)
			b.del(nil, leaseKey)
			renewed(b, "lease lost")
		}},
		story{name: "a Renew over the deleted record, regressed", kept: true, build: func(b *builder) {
			taken(b)
			b.del(nil, leaseKey)
			renewed(b, "lease lost", "regressed")
		}},
		story{name: "a Renew over the record set back, not regressed", build: func(b *builder) {
			taken(b)
			b.put(nil, leaseKey, record.EncodeLease("h2", 2, 0, inc2))
			renewed(b, "lease lost")
		}},
		story{name: "a Renew after a takeover, the record then deleted", kept: true, build: func(b *builder) {
			taken(b)
			b.wrote(Call{Op: Acquire, Lease: "p2/lease#1", Proc: "p2", LeaseName: "L", Holder: "h2"}, leaseKey,
				record.EncodeLease("h2", 4, b.now.Add(time.Minute).UnixNano(), inc2))
			b.del(nil, leaseKey)
			renewed(b, "lease lost")
		}},
		story{name: "an Epoch after the record was deleted, not regressed", build: func(b *builder) {
			taken(b)
			b.del(nil, leaseKey)
			ep := b.begin(Call{Op: Epoch, Lease: lv1, LeaseName: "L", Holder: "h1"})
			b.end(ep, errLeaseLost, "lease lost")
		}},
		story{name: "the Hold's context ended after the record was deleted, not regressed", build: func(b *builder) {
			heldContext(b, leaseKey, "lease lost")
		}},
		story{name: "the Hold's context ended after the record was deleted, regressed", kept: true, build: func(b *builder) {
			heldContext(b, leaseKey, "lease lost", "regressed")
		}},
	)
}

// heldContext records a Hold of lv1 that took term 3, its context seen
// running by a call of its process, the record deleted, and the context
// seen ended with a loss that matches is.
func heldContext(b *builder, leaseKey string, is ...string) {
	hd := b.begin(Call{Op: Hold, Lease: lv1, LeaseName: "L", Holder: "h1"})
	b.put(hd, leaseKey, record.EncodeLease("h1", 3, b.now.Add(time.Minute).UnixNano(), inc1))
	b.end(hd, nil)
	running := []Context{{ID: 1, Kind: "hold", Lease: lv1}}
	fg := b.begin(Call{Op: Forget, Plugin: "pl", Shard: "s1", Before: running, After: running})
	b.end(fg, nil)
	b.del(nil, leaseKey)
	ended := []Context{{ID: 1, Kind: "hold", Lease: lv1, Done: true, Cause: errLeaseLost, Is: is}}
	fg = b.begin(Call{Op: Forget, Plugin: "pl", Shard: "s1", Before: ended, After: ended})
	b.end(fg, nil)
}

// TestPromise30_LeaseReadIt: what a Lease value read of its record binds
// it as what it held: refused as held at a term, it never takes the
// record later absent or below that term, and over a record below what it
// held it is refused as regressed, not as held.
func TestPromise30_LeaseReadIt(t *testing.T) {
	leaseKey := leaseKeyOf(t, "L")
	judge(t, 30,
		story{name: "an acquisition over the deleted record, after the lease was found held", build: func(b *builder) {
			b.wrote(Call{Op: Acquire, Lease: "p2/lease#1", Proc: "p2", LeaseName: "L", Holder: "h2"}, leaseKey,
				record.EncodeLease("h2", 4, b.now.Add(time.Minute).UnixNano(), inc2))
			ac := b.begin(Call{Op: Acquire, Lease: lv1, LeaseName: "L", Holder: "h1"})
			b.end(ac, errors.New("writefence: lease held"), "lease held")
			b.del(nil, leaseKey)
			b.wrote(Call{Op: Acquire, Lease: lv1, LeaseName: "L", Holder: "h1"}, leaseKey, record.EncodeLease("h1", 1, b.now.Add(time.Minute).UnixNano(), inc1))
		}},
		story{name: "an acquisition refused as held over the record set back below its term", build: func(b *builder) {
			acquiredAt(b, leaseKey, 3)
			b.put(nil, leaseKey, record.EncodeLease("h2", 2, b.now.Add(time.Hour).UnixNano(), inc2))
			ac := b.begin(Call{Op: Acquire, Lease: lv1, LeaseName: "L", Holder: "h1"})
			b.end(ac, errors.New("writefence: lease held"), "lease held")
		}},
		story{name: "an acquisition refused as regressed over the record set back below its term", kept: true, build: func(b *builder) {
			acquiredAt(b, leaseKey, 3)
			b.put(nil, leaseKey, record.EncodeLease("h2", 2, b.now.Add(time.Hour).UnixNano(), inc2))
			ac := b.begin(Call{Op: Acquire, Lease: lv1, LeaseName: "L", Holder: "h1"})
			b.end(ac, errors.New("writefence: epoch regressed"), "regressed")
		}},
		story{name: "an acquisition refused as held over a record at its term", kept: true, build: func(b *builder) {
			acquiredAt(b, leaseKey, 3)
			b.wrote(Call{Op: Acquire, Lease: "p2/lease#1", Proc: "p2", LeaseName: "L", Holder: "h2"}, leaseKey,
				record.EncodeLease("h2", 4, b.now.Add(time.Hour).UnixNano(), inc2))
			ac := b.begin(Call{Op: Acquire, Lease: lv1, LeaseName: "L", Holder: "h1"})
			b.end(ac, errors.New("writefence: lease held"), "lease held")
		}},
	)
}

// acquiredAt records an Acquire of lv1 that took term at leaseKey.
func acquiredAt(b *builder, leaseKey string, term uint64) {
	ac := b.begin(Call{Op: Acquire, Lease: lv1, LeaseName: "L", Holder: "h1"})
	b.put(ac, leaseKey, record.EncodeLease("h1", term, b.now.Add(time.Millisecond).UnixNano(), inc1))
	ac.Term = term
	b.end(ac, nil)
}

func TestPromise31_KeepFloor(t *testing.T) {
	key := shardKeyOf(t, "", "pl", "s1")
	floorKey, err := keys.Floor("", "pl", "s1")
	require.NoError(t, err)
	sealed := func(b *builder) {
		sl := b.begin(Call{Op: Seal, Plugin: "pl", Shard: "s1", Writer: "w1", Epoch: 5, KeepFloor: true})
		b.put(sl, key, rec("w1", 5, plain("")))
		b.put(sl, floorKey, bytes.Join(record.Encode(defaultIdentity, "w1", 5, record.Body{}, record.CRC32C(nil)), nil))
		sl.Events = append(sl.Events, Event{Op: "floor", Key: floorKey})
		b.end(sl, nil)
	}
	t.Run("a write over the record set back below the floor", func(t *testing.T) {
		for _, keep := range []bool{true, false} {
			b := newBuilder(t)
			b.put(nil, key, rec("w0", 2, plain("two")))
			sealed(b)
			b.put(nil, key, rec("w0", 2, plain("two"))) // set back
			pushed(b, "p2", key, 3, "three", keep)
			if keep {
				b.requireBroken(31)
			} else {
				b.requireKept(31)
			}
		}
	})
	// A seal or a settle that returned nil under KeepFloor kept its
	// epoch as the floor.
	judge(t, 31,
		story{name: "a seal that keeps no floor", build: func(b *builder) {
			b.wrote(Call{Op: Seal, Plugin: "pl", Shard: "s1", Writer: "w1", Epoch: 5, KeepFloor: true}, key, rec("w1", 5, plain("")))
		}},
		story{name: "a seal that keeps its floor", kept: true, build: sealed},
		story{name: "a seal that found its floor kept", kept: true, build: func(b *builder) {
			sealed(b)
			b.wrote(Call{Op: Seal, Plugin: "pl", Shard: "s1", Writer: "w1", Epoch: 5, KeepFloor: true}, key, rec("w1", 5, plain("")))
		}},
		story{name: "a seal that found its record landed and keeps no floor", build: func(b *builder) {
			b.put(nil, key, rec("w1", 5, plain("")))
			sl := b.begin(Call{Op: Seal, Plugin: "pl", Shard: "s1", Writer: "w1", Epoch: 5, KeepFloor: true})
			b.end(sl, nil)
		}},
		story{name: "a seal that keeps a floor below it", build: func(b *builder) {
			sealed(b)
			b.wrote(Call{Op: Seal, Plugin: "pl", Shard: "s1", Writer: "w1", Epoch: 6, KeepFloor: true}, key, rec("w1", 6, plain("")))
		}},
		story{name: "a settle that keeps no floor", build: func(b *builder) {
			b.put(nil, key, []byte("damaged"))
			b.wrote(Call{Op: Settle, Plugin: "pl", Shard: "s1", Writer: "op", Epoch: 7, Payload: []byte("s"), Floor: 6, Version: "v1", KeepFloor: true}, key, rec("op", 7, plain("s")))
		}},
		story{name: "a seal without KeepFloor", kept: true, build: func(b *builder) {
			b.wrote(Call{Op: Seal, Plugin: "pl", Shard: "s1", Writer: "w1", Epoch: 5}, key, rec("w1", 5, plain("")))
		}},
	)
	judge(t, 31,
		story{name: "a seal over the deleted record", build: func(b *builder) {
			sealed(b)
			b.del(nil, key)
			b.wrote(Call{Op: Seal, Proc: "p2", Plugin: "pl", Shard: "s1", Writer: "w2", Epoch: 9, KeepFloor: true}, key, rec("w2", 9, plain("")))
		}},
		story{name: "a push creates the record", build: func(b *builder) {
			pushed(b, "p1", key, 1, "one", true)
		}},
		story{name: "a settle not above the floor", build: func(b *builder) {
			sealed(b)
			b.del(nil, key)
			b.wrote(Call{Op: Settle, Proc: "p2", Plugin: "pl", Shard: "s1", Writer: "op", Epoch: 5, Payload: []byte("s"), Floor: 4, Lost: true, KeepFloor: true}, key, rec("op", 5, plain("s")))
		}},
		// Collect reads the floor under KeepFloor, and with RecordGone
		// whatever KeepFloor: it deletes nothing of a shard whose record
		// is absent or below it.
		story{name: "a collection under the floor deletes", build: func(b *builder) {
			sealed(b)
			b.createBlob(nil, blobKeyOf(b.t, "s1", keys.BlobName(4, "w0", blobID(1))), []byte("g"))
			b.del(nil, key)
			co := b.begin(Call{Op: Collect, Proc: "p2", Plugin: "pl", Shard: "s1", KeepFloor: true})
			b.deleteBlob(co, blobKeyOf(b.t, "s1", keys.BlobName(4, "w0", blobID(1))))
			b.end(co, nil)
		}},
		story{name: "a retired shard's collection under the floor deletes", build: func(b *builder) {
			sealed(b)
			b.createBlob(nil, blobKeyOf(b.t, "s1", keys.BlobName(4, "w0", blobID(1))), []byte("g"))
			b.del(nil, key)
			co := b.begin(Call{Op: Collect, Proc: "p2", Plugin: "pl", Shard: "s1", RecordGone: true})
			b.deleteBlob(co, blobKeyOf(b.t, "s1", keys.BlobName(4, "w0", blobID(1))))
			b.end(co, nil)
		}},
		story{name: "a retired shard's collection once the floor is deleted", kept: true, build: func(b *builder) {
			sealed(b)
			b.createBlob(nil, blobKeyOf(b.t, "s1", keys.BlobName(4, "w0", blobID(1))), []byte("g"))
			b.del(nil, key)
			b.del(nil, floorKey)
			co := b.begin(Call{Op: Collect, Proc: "p2", Plugin: "pl", Shard: "s1", RecordGone: true})
			b.deleteBlob(co, blobKeyOf(b.t, "s1", keys.BlobName(4, "w0", blobID(1))))
			b.end(co, nil)
		}},
		story{name: "the floor deleted outside", kept: true, build: func(b *builder) {
			sealed(b)
			b.del(nil, key)
			b.del(nil, floorKey)
			sl := b.begin(Call{Op: Seal, Proc: "p2", Plugin: "pl", Shard: "s1", Writer: "w2", Epoch: 9, KeepFloor: true})
			b.put(sl, key, rec("w2", 9, plain("")))
			b.put(sl, floorKey, bytes.Join(record.Encode(defaultIdentity, "w2", 9, record.Body{}, record.CRC32C(nil)), nil))
			b.end(sl, nil)
		}},
	)
}

// TestPromise10_CollectReadsTheBrand: a Collect of a Fence that reads
// the brand before every write reads it again after its listing, before
// a batch of deletes, and deletes nothing once it found another identity
// or none there.
func TestPromise10_CollectReadsTheBrand(t *testing.T) {
	key := shardKeyOf(t, "", "pl", "s1")
	bk := keys.Brand("")
	garbage := keys.BlobName(1, "w0", blobID(1))
	space, err := keys.Blobs("", "pl", "s1")
	require.NoError(t, err)
	read := func(b *builder, co *Call, k string) {
		b.h.Change(Change{Call: co.ID, Kind: "read", Key: k, At: b.tick()})
	}
	collect := func(then func(b *builder, co *Call)) func(b *builder) {
		return func(b *builder) {
			b.put(nil, bk, []byte(defaultIdentity))
			b.createBlob(nil, blobKeyOf(b.t, "s1", garbage), []byte("g"))
			b.put(nil, key, rec("w1", 2, record.Body{Since: 2, Horizon: 100, Stream: true}))
			co := b.begin(Call{Op: Collect, Plugin: "pl", Shard: "s1", BrandAlways: true})
			read(b, co, bk)
			read(b, co, key)
			read(b, co, space)
			then(b, co)
			read(b, co, key)
			b.deleteBlob(co, blobKeyOf(b.t, "s1", garbage))
			b.end(co, nil)
		}
	}
	judge(t, 10,
		story{name: "the brand read after the listing", kept: true, build: collect(func(b *builder, co *Call) { read(b, co, bk) })},
		story{name: "no read of the brand after the listing", build: collect(func(*builder, *Call) {})},
		story{name: "the brand read after the listing holds another identity", build: collect(func(b *builder, co *Call) {
			b.put(nil, bk, []byte("other/v9"))
			read(b, co, bk)
		})},
		story{name: "the brand read after the listing is gone", build: collect(func(b *builder, co *Call) {
			b.del(nil, bk)
			read(b, co, bk)
		})},
		story{name: "the brand changed after its last read", kept: true, build: collect(func(b *builder, co *Call) {
			read(b, co, bk)
			b.put(nil, bk, []byte("other/v9"))
		})},
	)
}

func TestPromise32_Check(t *testing.T) {
	key := shardKeyOf(t, "", "pl", "s1")
	// Collect reads the record before each batch of deletes, and deletes
	// nothing once it no longer holds the tenure it judged by. A history
	// that records a Collect's reads is judged on them.
	t.Run("collect", func(t *testing.T) {
		garbage := keys.BlobName(1, "w0", blobID(1))
		space, err := keys.Blobs("", "pl", "s1")
		require.NoError(t, err)
		collect := func(then func(b *builder, co *Call)) func(b *builder) {
			return func(b *builder) {
				b.createBlob(nil, blobKeyOf(b.t, "s1", garbage), []byte("g"))
				b.put(nil, key, rec("w1", 2, record.Body{Since: 2, Horizon: 100, Stream: true}))
				co := b.begin(Call{Op: Collect, Plugin: "pl", Shard: "s1"})
				b.h.Change(Change{Call: co.ID, Kind: "read", Key: key, At: b.tick()})
				b.h.Change(Change{Call: co.ID, Kind: "read", Key: space, At: b.tick()})
				then(b, co)
				b.deleteBlob(co, blobKeyOf(b.t, "s1", garbage))
				b.end(co, nil)
			}
		}
		read := func(b *builder, co *Call) { b.h.Change(Change{Call: co.ID, Kind: "read", Key: key, At: b.tick()}) }
		judge(t, 32,
			story{name: "a read after the listing", kept: true, build: collect(read)},
			story{name: "no read after the listing", build: collect(func(*builder, *Call) {})},
			story{name: "a read after the listing finds no record", build: collect(func(b *builder, co *Call) {
				b.del(nil, key)
				read(b, co)
			})},
			story{name: "a read after the listing finds a lower horizon", build: collect(func(b *builder, co *Call) {
				b.put(nil, key, rec("w1", 2, record.Body{Since: 2, Horizon: 50, Stream: true}))
				read(b, co)
			})},
			story{name: "a read after the listing finds a new tenure", kept: true, build: collect(func(b *builder, co *Call) {
				b.wrote(Call{Op: Seal, Plugin: "pl", Shard: "s1", Writer: "w2", Epoch: 3}, key, rec("w2", 3, record.Body{Since: 3, Horizon: 100, Stream: true}))
				read(b, co)
			})},
			story{name: "the record deleted after the read", kept: true, build: collect(func(b *builder, co *Call) {
				read(b, co)
				b.del(nil, key)
			})},
		)
	})
	check := func(b *builder, writer string, epoch uint64, err error, is ...string) {
		c := b.begin(Call{Op: Check, Proc: "p2", Plugin: "pl", Shard: "s1", Writer: writer, Epoch: epoch})
		b.endBare(c, err, is...)
	}
	stream := func(since uint64) record.Body {
		return record.Body{Payload: []byte("m"), Since: since, Stream: true}
	}
	// staleNaming: a Check of w1 at 5, the record at epoch 8 by w2,
	// refused as stale naming epoch and writer as recorded.
	staleNaming := func(epoch uint64, writer string) func(b *builder) {
		return func(b *builder) {
			b.put(nil, key, rec("w2", 8, plain("x")))
			c := b.begin(Call{Op: Check, Proc: "p2", Plugin: "pl", Shard: "s1", Writer: "w1", Epoch: 5})
			c.Stale = &record.Header{Epoch: epoch, Writer: writer}
			b.endBare(c, errStale, "stale")
		}
	}
	judge(t, 32,
		story{name: "nil while another writer held it", build: func(b *builder) {
			b.put(nil, key, rec("w2", 7, plain("x")))
			check(b, "w1", 5, nil)
		}},
		story{name: "nil within the tenure", kept: true, build: func(b *builder) {
			b.put(nil, key, rec("w1", 7, stream(4)))
			check(b, "w1", 5, nil)
		}},
		story{name: "nil below the tenure", build: func(b *builder) {
			b.put(nil, key, rec("w1", 7, stream(6)))
			check(b, "w1", 5, nil)
		}},
		story{name: "stale while it held the writer", build: func(b *builder) {
			b.put(nil, key, rec("w1", 5, plain("x")))
			check(b, "w1", 5, errStale, "stale")
		}},
		story{name: "regressed while it held the writer", build: func(b *builder) {
			b.put(nil, key, rec("w1", 5, plain("x")))
			check(b, "w1", 5, errRegressed, "regressed")
		}},
		story{name: "regressed once set back", kept: true, build: func(b *builder) {
			b.put(nil, key, rec("w1", 5, plain("x")))
			b.put(nil, key, rec("w1", 6, plain("y")))
			b.put(nil, key, rec("w1", 5, plain("x")))
			check(b, "w1", 5, errRegressed, "regressed")
		}},
		// A write at epoch 5 over another writer's record at 6 is refused
		// as stale, whatever higher epoch the record was set back from.
		story{name: "regressed over another writer's record set back", build: func(b *builder) {
			b.put(nil, key, rec("w2", 8, plain("x")))
			b.put(nil, key, rec("w2", 6, plain("y")))
			check(b, "w1", 5, errRegressed, "regressed")
		}},
		story{name: "stale over another writer's record set back", kept: true, build: func(b *builder) {
			b.put(nil, key, rec("w2", 8, plain("x")))
			b.put(nil, key, rec("w2", 6, plain("y")))
			check(b, "w1", 5, errStale, "stale")
		}},
		// A refusal as stale names the recorded epoch and writer: those
		// of a record the key held during the call.
		// A refusal as corrupt is a damaged record's, read during the
		// call (or a damaged floor's, or brand's).
		story{name: "corrupt over a sound record", build: func(b *builder) {
			b.put(nil, key, rec("w1", 5, plain("x")))
			check(b, "w1", 5, errors.New("writefence: corrupt"), "corrupt")
		}},
		story{name: "corrupt over no record", build: func(b *builder) {
			b.put(nil, key, rec("w1", 5, plain("x")))
			b.del(nil, key)
			check(b, "w1", 5, errors.New("writefence: corrupt"), "corrupt")
		}},
		story{name: "corrupt over damage", kept: true, build: func(b *builder) {
			b.put(nil, key, rec("w1", 5, plain("x")))
			c := b.begin(Call{Op: Check, Proc: "p2", Plugin: "pl", Shard: "s1", Writer: "w1", Epoch: 5})
			b.put(nil, key, []byte("damaged"))
			b.endBare(c, errors.New("writefence: corrupt"), "corrupt")
		}},
		story{name: "corrupt under KeepFloor, the floor unknown", kept: true, build: func(b *builder) {
			b.put(nil, key, rec("w1", 5, plain("x")))
			c := b.begin(Call{Op: Check, Proc: "p2", Plugin: "pl", Shard: "s1", Writer: "w1", Epoch: 5, KeepFloor: true})
			b.endBare(c, errors.New("writefence: corrupt"), "corrupt")
		}},
		story{name: "stale naming what the record held", kept: true, build: staleNaming(8, "w2")},
		story{name: "stale naming the checked epoch", build: staleNaming(5, "w2")},
		story{name: "stale naming the checking writer", build: staleNaming(8, "w1")},
		// Its Fence saw epoch 6; the record, set back, holds the writer at
		// 5 throughout: a regression, not nil.
		story{name: "nil below what its Fence saw", build: func(b *builder) {
			pushed(b, "p2", key, 5, "five", false)
			pushed(b, "p2", key, 6, "six", false)
			b.put(nil, key, rec("w1", 5, plain("five")))
			check(b, "w1", 5, nil)
		}},
		story{name: "nil at what its Fence saw", kept: true, build: func(b *builder) {
			pushed(b, "p2", key, 5, "five", false)
			check(b, "w1", 5, nil)
		}},
		story{name: "a check writes the record", build: func(b *builder) {
			b.put(nil, key, rec("w1", 5, plain("x")))
			c := b.begin(Call{Op: Check, Proc: "p2", Plugin: "pl", Shard: "s1", Writer: "w1", Epoch: 5})
			b.put(c, key, rec("w1", 6, plain("x")))
			b.endBare(c, nil)
		}},
	)
}

// TestPromise33_OperatorReads: Latest, OpenBlob, Forget, VerifyBrand and
// InspectLease write nothing; VerifyBrand and InspectLease return what
// their key held during the call.
func TestPromise33_OperatorReads(t *testing.T) {
	brand, leaseKey := keys.Brand(""), leaseKeyOf(t, "L")
	held := record.EncodeLease("h1", 1, 1000, [record.LeaseIncSize]byte{7})
	verify := func(b *builder, err error, is ...string) {
		b.endBare(b.begin(Call{Op: Verify, Key: brand}), err, is...)
	}
	// refused ends a VerifyBrand on a *WireError that names found (nil:
	// the key absent).
	refused := func(b *builder, found *string) {
		c := b.begin(Call{Op: Verify, Key: brand})
		c.Found = found
		b.endBare(c, errWire, "wire")
	}
	another := "another/v1"
	inspect := func(b *builder, got *record.Lease, err error, is ...string) {
		c := b.begin(Call{Op: Inspect, Key: leaseKey, LeaseName: "L"})
		c.Leased = got
		b.endBare(c, err, is...)
	}
	judge(t, 33,
		story{name: "a Latest wrote", build: func(b *builder) {
			c := b.begin(Call{Op: Latest, Plugin: "pl", Shard: "s1", Key: shardKeyOf(t, "", "pl", "s1")})
			b.put(c, leaseKey, held)
			b.endBare(c, errNotFound, "not found")
		}},
		story{name: "a Forget wrote", build: func(b *builder) {
			c := b.begin(Call{Op: Forget, Plugin: "pl", Shard: "s1"})
			b.del(c, brand)
			b.endBare(c, nil)
		}},
		story{name: "VerifyBrand found the brand", kept: true, build: func(b *builder) {
			b.put(nil, brand, []byte(defaultIdentity))
			verify(b, nil)
		}},
		story{name: "VerifyBrand passed an absent brand", build: func(b *builder) {
			verify(b, nil)
		}},
		story{name: "VerifyBrand passed another identity", build: func(b *builder) {
			b.put(nil, brand, []byte("another/v1"))
			verify(b, nil)
		}},
		story{name: "VerifyBrand refused the brand it held", build: func(b *builder) {
			b.put(nil, brand, []byte(defaultIdentity))
			verify(b, errWire, "wire")
		}},
		story{name: "VerifyBrand refused an absent brand", kept: true, build: func(b *builder) {
			verify(b, errWire, "wire")
		}},
		story{name: "VerifyBrand refused another identity, named", kept: true, build: func(b *builder) {
			b.put(nil, brand, []byte(another))
			refused(b, &another)
		}},
		story{name: "VerifyBrand called another identity absent", build: func(b *builder) {
			b.put(nil, brand, []byte(another))
			refused(b, nil)
		}},
		story{name: "VerifyBrand named a value an absent brand never held", build: func(b *builder) {
			refused(b, &another)
		}},
		story{name: "VerifyBrand named a value the brand never held", build: func(b *builder) {
			b.put(nil, brand, []byte("third/v1"))
			refused(b, &another)
		}},
		story{name: "InspectLease returned the record", kept: true, build: func(b *builder) {
			b.put(nil, leaseKey, held)
			inspect(b, &record.Lease{Holder: "h1", Term: 1, Expiry: 1000}, nil)
		}},
		story{name: "InspectLease returned another term", build: func(b *builder) {
			b.put(nil, leaseKey, held)
			inspect(b, &record.Lease{Holder: "h1", Term: 2, Expiry: 1000}, nil)
		}},
		story{name: "InspectLease found none while one was held", build: func(b *builder) {
			b.put(nil, leaseKey, held)
			inspect(b, nil, errNotFound, "not found")
		}},
		story{name: "InspectLease found none", kept: true, build: func(b *builder) {
			inspect(b, nil, errNotFound, "not found")
		}},
	)
}

// TestRollbackRelanding: a call whose write the store lost to a rollback
// and that writes again at its epoch, deciding afresh, made one write
// (promise 2); another call at that epoch did not.
func TestRollbackRelanding(t *testing.T) {
	key := shardKeyOf(t, "", "pl", "s1")
	b := newBuilder(t)
	b.put(nil, key, rec("w1", 1, plain("one")))
	sl := b.begin(Call{Op: Seal, Plugin: "pl", Shard: "s1", Writer: "w2", Epoch: 2})
	b.put(sl, key, rec("w2", 2, plain("one")))
	b.put(nil, key, rec("w0", 1, plain("zero"))) // set back
	b.put(sl, key, rec("w2", 2, plain("zero")))
	b.end(sl, nil)
	b.requireKept(2)
}

// The excuse of a commit that creates a record deleted meanwhile rests on
// its blobs having been checked when it decided, after it began: it covers
// a blob deleted while the commit was on its way, never one that did not
// exist while the call ran (never written, or collected before the commit
// began) nor one that exists with another size than the one referenced.
// Excusing those would hide a commit that created the record without
// checking its blobs, whenever the record happened to be deleted meanwhile.
func TestPromise20_CommitCreatingARecordDeletedMeanwhileCheckedItsBlobs(t *testing.T) {
	key := shardKeyOf(t, "", "pl", "s1")
	name := keys.BlobName(1, "w1", blobID(1))
	blob := blobKeyOf(t, "s1", name)
	committed := rec("w1", 1, record.Body{Refs: []record.BlobRef{ref(name, []byte("b"))}, Since: 1, Stream: true})
	// history: before runs first; the commit begins, the record (put by
	// w2 at epoch 2) is deleted outside, and the commit creates it.
	history := func(t *testing.T, before func(b *builder)) *builder {
		b := newBuilder(t)
		b.put(nil, key, rec("w2", 2, record.Body{Since: 2, Stream: true}))
		before(b)
		commit := b.begin(Call{Op: Commit, Plugin: "pl", Shard: "s1", Writer: "w1", Epoch: 1})
		b.del(nil, key)
		b.put(commit, key, committed)
		b.end(commit, nil)
		return b
	}
	t.Run("never written", func(t *testing.T) {
		never := func(*builder) {}
		history(t, never).requireBroken(20)
		history(t, never).requireBroken(24)
	})
	t.Run("collected before the commit began", func(t *testing.T) {
		collected := func(b *builder) {
			b.createBlob(nil, blob, []byte("b"))
			gc := b.begin(Call{Op: Collect, Plugin: "pl", Shard: "s1"})
			b.deleteBlob(gc, blob)
			b.end(gc, nil)
		}
		history(t, collected).requireBroken(20)
		history(t, collected).requireBroken(24)
	})
	t.Run("another size", func(t *testing.T) {
		history(t, func(b *builder) { b.createBlob(nil, blob, []byte("bb")) }).requireBroken(20)
	})
}

// TestPromise20_RefusedCommit: a commit refused as not found names a blob
// it newly references, over the manifest it decided on, that did not
// exist with its size throughout the call, created at or after the
// collection horizon.
func TestPromise20_RefusedCommit(t *testing.T) {
	key := shardKeyOf(t, "", "pl", "s1")
	old, name := keys.BlobName(1, "w1", blobID(1)), keys.BlobName(1, "w1", blobID(2))
	held := ref(old, []byte("a"))
	// refused sets up the blobs and a stream's record referencing old,
	// whose collection horizon is none (-1) or that many nanoseconds after
	// the last blob's creation, then a commit of name over it, refused as
	// not found; during runs between its begin and its end.
	refused := func(b *builder, blob []byte, after int64, during func(b *builder, c *Call)) {
		made := b.createBlob(nil, blobKeyOf(b.t, "s1", old), []byte("a"))
		if blob != nil {
			made = b.createBlob(nil, blobKeyOf(b.t, "s1", name), blob)
		}
		var horizon int64
		if after >= 0 {
			horizon = made.UnixNano() + after
		}
		b.put(nil, key, rec("w1", 1, record.Body{Refs: []record.BlobRef{held}, Since: 1, Horizon: horizon, Stream: true}))
		c := b.begin(Call{Op: Commit, Plugin: "pl", Shard: "s1", Writer: "w1", Epoch: 2,
			Current: []record.BlobRef{held}, Blobs: []record.BlobRef{held, ref(name, []byte("b"))}})
		if during != nil {
			during(b, c)
		}
		b.end(c, errNotFound, "not found")
	}
	judge(t, 20,
		story{name: "the blob existed throughout", build: func(b *builder) {
			refused(b, []byte("b"), -1, nil)
		}},
		story{name: "the blob existed throughout a lost reply and a retry", build: func(b *builder) {
			refused(b, []byte("b"), -1, func(b *builder, c *Call) {
				b.fault(c, "lost")
				b.fault(c, "transient")
			})
		}},
		story{name: "the blob was created at the horizon", build: func(b *builder) {
			refused(b, []byte("b"), 0, nil)
		}},
		story{name: "the blob was missing", kept: true, build: func(b *builder) {
			refused(b, nil, -1, nil)
		}},
		// Another size is refused as an invalid argument (see Commit),
		// not as not found.
		story{name: "the blob held another size throughout", build: func(b *builder) {
			refused(b, []byte("bb"), -1, nil)
		}},
		story{name: "the blob was created before the horizon", kept: true, build: func(b *builder) {
			refused(b, []byte("b"), 1, nil)
		}},
		story{name: "a collection deleted the blob during the call", kept: true, build: func(b *builder) {
			refused(b, []byte("b"), -1, func(b *builder, _ *Call) {
				co := b.begin(Call{Op: Collect, Plugin: "pl", Shard: "s1", Proc: "gc"})
				b.deleteBlob(co, blobKeyOf(b.t, "s1", name))
				b.end(co, nil)
			})
		}},
		story{name: "a collection raised the horizon past the blob during the call", kept: true, build: func(b *builder) {
			refused(b, []byte("b"), -1, func(b *builder, _ *Call) {
				co := b.begin(Call{Op: Collect, Plugin: "pl", Shard: "s1", Proc: "gc"})
				b.put(co, key, rec("w1", 1, record.Body{Refs: []record.BlobRef{held}, Since: 1, Horizon: b.now.UnixNano(), Stream: true}))
				b.end(co, nil)
			})
		}},
		story{name: "under KeepFloor, with no record", kept: true, build: func(b *builder) {
			b.createBlob(nil, blobKeyOf(b.t, "s1", name), []byte("b"))
			c := b.begin(Call{Op: Commit, Plugin: "pl", Shard: "s1", Writer: "w1", Epoch: 2, KeepFloor: true,
				Blobs: []record.BlobRef{ref(name, []byte("b"))}})
			b.end(c, errNotFound, "not found")
		}},
		story{name: "the blob was created during the call", kept: true, build: func(b *builder) {
			refused(b, nil, -1, func(b *builder, _ *Call) {
				b.createBlob(nil, blobKeyOf(b.t, "s1", name), []byte("b"))
			})
		}},
	)
}

// TestPromise1_CollectWritesOnlyTheHorizon: Collect's write of a record's
// collection horizon changes nothing else in it, not even to a higher
// epoch, and writes no record where there is none.
func TestPromise1_CollectWritesOnlyTheHorizon(t *testing.T) {
	key := shardKeyOf(t, "", "pl", "s1")
	stream := func(writer string, epoch uint64, payload string, horizon int64) []byte {
		return rec(writer, epoch, record.Body{Payload: []byte(payload), Since: 1, Horizon: horizon, Stream: true})
	}
	judge(t, 1,
		story{name: "collect raises the epoch with the horizon", build: func(b *builder) {
			b.put(nil, key, stream("w1", 5, "x", 0))
			b.wrote(Call{Op: Collect, Plugin: "pl", Shard: "s1"}, key, stream("w1", 6, "x", 7))
		}},
		story{name: "collect changes the writer", build: func(b *builder) {
			b.put(nil, key, stream("w1", 5, "x", 0))
			b.wrote(Call{Op: Collect, Plugin: "pl", Shard: "s1"}, key, stream("gc", 5, "x", 7))
		}},
		story{name: "collect changes the references", build: func(b *builder) {
			name := keys.BlobName(1, "w1", blobID(1))
			b.put(nil, key, rec("w1", 5, record.Body{Payload: []byte("x"), Refs: []record.BlobRef{ref(name, []byte("b"))}, Since: 1, Stream: true}))
			b.wrote(Call{Op: Collect, Plugin: "pl", Shard: "s1"}, key, stream("w1", 5, "x", 7))
		}},
		story{name: "collect writes a record where there is none", build: func(b *builder) {
			b.wrote(Call{Op: Collect, Plugin: "pl", Shard: "s1"}, key, stream("w1", 5, "x", 7))
		}},
		story{name: "collect raises the horizon only", kept: true, build: func(b *builder) {
			b.put(nil, key, stream("w1", 5, "x", 3))
			b.wrote(Call{Op: Collect, Plugin: "pl", Shard: "s1"}, key, stream("w1", 5, "x", 7))
		}},
	)
}

// TestPromise2_CollectIsNoWriteOfAnEpoch: Collect's horizon write lands at
// the record's epoch, a second content of none.
func TestPromise2_CollectIsNoWriteOfAnEpoch(t *testing.T) {
	key := shardKeyOf(t, "", "pl", "s1")
	stream := func(payload string, horizon int64) []byte {
		return rec("w1", 5, record.Body{Payload: []byte(payload), Since: 5, Horizon: horizon, Stream: true})
	}
	judge(t, 2,
		story{name: "a horizon written at the record's epoch", kept: true, build: func(b *builder) {
			b.wrote(Call{Op: Seal, Plugin: "pl", Shard: "s1", Writer: "w1", Epoch: 5}, key, stream("", 0))
			b.wrote(Call{Op: Collect, Plugin: "pl", Shard: "s1"}, key, stream("", 7))
		}},
		story{name: "a second content at the epoch", build: func(b *builder) {
			b.wrote(Call{Op: Seal, Plugin: "pl", Shard: "s1", Writer: "w1", Epoch: 5}, key, stream("", 0))
			b.wrote(Call{Op: Push, Plugin: "pl", Shard: "s1", Writer: "w1", Epoch: 5, Payload: []byte("b")}, key, stream("b", 0))
		}},
	)
}

// TestPromise3_EveryRefusal: each kind of refusal promise 3 lists writes
// nothing; a Seal or a Settle whose floor's write is refused says that
// its record landed.
func TestPromise3_EveryRefusal(t *testing.T) {
	key := shardKeyOf(t, "", "pl", "s1")
	for _, is := range []string{"stale", "regressed", "wire", "corrupt", "invalid", "untrusted", "permission"} {
		t.Run("a push refused as "+is+" wrote", func(t *testing.T) {
			b := newBuilder(t)
			p := b.begin(Call{Op: Push, Plugin: "pl", Shard: "s1", Writer: "w1", Epoch: 1, Payload: []byte("a")})
			b.put(p, key, rec("w1", 1, plain("a")))
			b.end(p, fmt.Errorf("writefence: refused: %s", is), is)
			b.requireBroken(3)
		})
	}
	lease := leaseKeyOf(t, "L")
	t.Run("an acquisition refused as held wrote", func(t *testing.T) {
		b := newBuilder(t)
		a := b.begin(Call{Op: Acquire, Lease: lv1, LeaseName: "L", Holder: "h2"})
		b.put(a, lease, record.EncodeLease("h2", 1, b.now.Add(time.Hour).UnixNano(), inc2))
		b.end(a, errors.New("writefence: lease held"), "lease held")
		b.requireBroken(3)
	})
	floorKey, err := keys.Floor("", "pl", "s1")
	require.NoError(t, err)
	// sealed seals at epoch 3, its record landing, and its floor's write
	// refused (fs.ErrPermission): the call ends with err.
	sealed := func(t *testing.T, err error) *builder {
		b := newBuilder(t)
		s := b.begin(Call{Op: Seal, Plugin: "pl", Shard: "s1", Writer: "w1", Epoch: 3, KeepFloor: true})
		b.put(s, key, rec("w1", 3, plain("")))
		s.Events = append(s.Events, Event{Op: "seal", Key: key}, Event{Op: "floor", Key: floorKey, Err: err, Is: Matches{"permission"}})
		b.endBare(s, err, "permission")
		return b
	}
	t.Run("a seal whose floor was refused says its record landed", func(t *testing.T) {
		sealed(t, errors.New("writefence: the record landed at epoch 3, but the floor was not raised to it: permission denied")).requireKept(3)
	})
	t.Run("a seal whose floor was refused does not say its record landed", func(t *testing.T) {
		sealed(t, errors.New("writefence: floor: permission denied")).requireBroken(3)
	})
}

// TestPromise3_LeaseLostIsNoRefusal: a loss a renewal reports is no
// refusal of its write, even as regressed (promise 30): a renewal whose
// reply was lost, its record deleted from outside before it read it
// again, landed and says the lease is lost.
func TestPromise3_LeaseLostIsNoRefusal(t *testing.T) {
	lease := leaseKeyOf(t, "L")
	b := newBuilder(t)
	acquired(t, b, time.Minute)
	rn := b.begin(Call{Op: Renew, Lease: lv1, LeaseName: "L", Holder: "h1"})
	b.put(rn, lease, record.EncodeLease("h1", 1, b.now.Add(time.Minute).UnixNano(), inc1))
	b.h.Change(Change{Call: rn.ID, Kind: "fault", Key: lease, Fault: "lost", At: b.tick()})
	b.del(nil, lease)
	b.end(rn, errLeaseLost, "lease lost", "regressed")
	b.requireKept(3)
	b.requireKept(5)
}

// TestPromise4_AckedUntilHigher: an acknowledged write is replaced only by
// a higher epoch, never deleted by a call.
func TestPromise4_AckedUntilHigher(t *testing.T) {
	key := shardKeyOf(t, "", "pl", "s1")
	judge(t, 4,
		story{name: "deleted by a call afterwards", build: func(b *builder) {
			b.wrote(Call{Op: Push, Plugin: "pl", Shard: "s1", Writer: "w1", Epoch: 3, Payload: []byte("a")}, key, rec("w1", 3, plain("a")))
			c := b.begin(Call{Op: Collect, Plugin: "pl", Shard: "s1"})
			b.del(c, key)
			b.end(c, nil)
		}},
		story{name: "replaced before it returned, at its epoch", build: func(b *builder) {
			p := b.begin(Call{Op: Push, Plugin: "pl", Shard: "s1", Writer: "w1", Epoch: 3, Payload: []byte("a")})
			b.put(p, key, rec("w1", 3, plain("a")))
			b.wrote(Call{Op: Push, Proc: "p2", Plugin: "pl", Shard: "s1", Writer: "w2", Epoch: 3, Payload: []byte("b")}, key, rec("w2", 3, plain("b")))
			b.end(p, nil)
		}},
		story{name: "replaced before it returned, from outside", kept: true, build: func(b *builder) {
			p := b.begin(Call{Op: Push, Plugin: "pl", Shard: "s1", Writer: "w1", Epoch: 3, Payload: []byte("a")})
			b.put(p, key, rec("w1", 3, plain("a")))
			b.put(nil, key, rec("w0", 2, plain("z"))) // a restore: the store kept no longer what it acknowledged
			b.end(p, nil)
		}},
		story{name: "replaced by a higher epoch", kept: true, build: func(b *builder) {
			b.wrote(Call{Op: Push, Plugin: "pl", Shard: "s1", Writer: "w1", Epoch: 3, Payload: []byte("a")}, key, rec("w1", 3, plain("a")))
			b.wrote(Call{Op: Push, Plugin: "pl", Shard: "s1", Writer: "w2", Epoch: 4, Payload: []byte("b")}, key, rec("w2", 4, plain("b")))
		}},
	)
}

// TestPromise5_UnknownIsNoRefusal: an unknown outcome matches no refusal
// of any kind, nor ErrNotFound.
func TestPromise5_UnknownIsNoRefusal(t *testing.T) {
	push := Call{Op: Push, Plugin: "pl", Shard: "s1", Writer: "w1", Epoch: 1, Payload: []byte("a")}
	var stories []story
	for _, is := range append([]string{"conflict", "not found"}, refusals...) {
		stories = append(stories, story{name: "unknown and " + is, build: func(b *builder) {
			b.end(b.begin(push), errUnknown, "unknown", is, "cause")
		}})
	}
	stories = append(stories, story{name: "unknown with its cause", kept: true, build: func(b *builder) {
		b.end(b.begin(push), errUnknown, "unknown", "cause")
	}})
	judge(t, 5, stories...)
}

// TestPromise5_SettleLoggedRunAgain: a Settle whose log entry landed and
// whose record did not is refused when run again with the same arguments
// (its reply lost: the damage may be new); a settle above the entry lands.
func TestPromise5_SettleLoggedRunAgain(t *testing.T) {
	key := shardKeyOf(t, "", "pl", "s1")
	logKey, err := keys.SettleLog("", "pl", "s1")
	require.NoError(t, err)
	// logged: a settle of version v at epoch 3 whose log entry landed and
	// whose reply was lost before its record's write.
	logged := func(b *builder) (settle Call) {
		v := b.put(nil, key, []byte("damaged"))
		settle = Call{Op: Settle, Plugin: "pl", Shard: "s1", Writer: "op", Epoch: 3, Floor: 2, Version: v}
		st := b.begin(settle)
		b.put(st, logKey, rec("op", 3, plain(v)))
		st.Events = append(st.Events, Event{Op: "settle log", Key: logKey})
		b.fault(st, "lost")
		b.endBare(st, fmt.Errorf("%w: reset", errUnknown), "unknown", "cause")
		return settle
	}
	judge(t, 5,
		story{name: "run again, it lands", build: func(b *builder) {
			settle := logged(b)
			b.wrote(settle, key, rec("op", 3, plain("")))
		}},
		story{name: "run again, it is refused", kept: true, build: func(b *builder) {
			settle := logged(b)
			b.end(b.begin(settle), errStale, "stale")
		}},
	)
	judge(t, 8,
		story{name: "a settle below the logged one lands", build: func(b *builder) {
			settle := logged(b)
			settle.Epoch = 2
			settle.Floor = 1
			b.wrote(settle, key, rec("op", 2, plain("")))
		}},
		story{name: "a settle above the logged one lands", kept: true, build: func(b *builder) {
			settle := logged(b)
			settle.Epoch = 4
			st := b.begin(settle)
			b.put(st, logKey, rec("op", 4, plain(settle.Version)))
			b.put(st, key, rec("op", 4, plain("")))
			b.end(st, nil)
		}},
	)
}

// TestPromise9_SettleRefusesUnreadableBlobs: a settle over damage whose
// header does not decode keeps no references it cannot read while the
// shard has blobs, unless told to drop them, or its Fence has no blob
// store.
func TestPromise9_SettleRefusesUnreadableBlobs(t *testing.T) {
	key := shardKeyOf(t, "", "pl", "s1")
	blob := blobKeyOf(t, "s1", keys.BlobName(1, "w1", blobID(1)))
	settle := func(b *builder, withBlob bool, c Call) {
		if withBlob {
			b.createBlob(nil, blob, []byte("b"))
		}
		c.Op, c.Plugin, c.Shard, c.Writer, c.Epoch, c.Floor = Settle, "pl", "s1", "op", 9, 8
		c.Version = b.put(nil, key, []byte("damaged"))
		b.wrote(c, key, rec("op", 9, plain("")))
	}
	judge(t, 9,
		story{name: "the shard has a blob", build: func(b *builder) { settle(b, true, Call{}) }},
		story{name: "the shard has a blob, dropped", kept: true, build: func(b *builder) { settle(b, true, Call{DropBlobs: true}) }},
		story{name: "the shard has a blob its Fence cannot see", kept: true, build: func(b *builder) { settle(b, true, Call{NoBlobStore: true}) }},
		story{name: "the shard has no blob", kept: true, build: func(b *builder) { settle(b, false, Call{}) }},
		story{name: "readable references kept", kept: true, build: func(b *builder) {
			name := keys.BlobName(1, "w1", blobID(1))
			body := record.Body{Payload: []byte("x"), Refs: []record.BlobRef{ref(name, []byte("b"))}, Since: 1, Stream: true}
			v := b.put(nil, key, damage(rec("w1", 1, body)))
			b.wrote(Call{Op: Settle, Plugin: "pl", Shard: "s1", Writer: "w1", Epoch: 2, Version: v}, key,
				rec("w1", 2, record.Body{Refs: body.Refs, Since: 2, Stream: true}))
		}},
	)
}

// TestPromise10_BrandAndDamage: under BrandVerifyAlways no write lands
// while the brand is absent; a brand changed during the call, on a store
// whose brand is read right before the write, is no breach; a settle
// lands on no damage whose header names another identity.
func TestPromise10_BrandAndDamage(t *testing.T) {
	key := shardKeyOf(t, "", "pl", "s1")
	push := Call{Op: Push, Plugin: "pl", Shard: "s1", Writer: "w1", Epoch: 1, Payload: []byte("a"), BrandAlways: true}
	judge(t, 10,
		story{name: "the brand is absent", build: func(b *builder) {
			b.wrote(push, key, rec("w1", 1, plain("a")))
		}},
		story{name: "the brand holds the identity", kept: true, build: func(b *builder) {
			b.put(nil, keys.Brand(""), []byte(defaultIdentity))
			b.wrote(push, key, rec("w1", 1, plain("a")))
		}},
		story{name: "the brand changed during the call", kept: true, build: func(b *builder) {
			b.put(nil, keys.Brand(""), []byte(defaultIdentity))
			p := b.begin(push)
			b.put(nil, keys.Brand(""), []byte("other/v9"))
			b.put(p, key, rec("w1", 1, plain("a")))
			b.end(p, nil)
		}},
		story{name: "a probe's scratch key while the brand is absent", build: func(b *builder) {
			p := b.begin(push)
			b.put(p, keys.Probe("")+"{b40635c1b0b2fff0}", []byte("probe"))
			b.end(p, errWire, "wire")
		}},
		story{name: "a settle over damage of another identity", build: func(b *builder) {
			v := b.put(nil, key, damage(recOf("other/v9", "w1", 4, plain("x"))))
			b.wrote(Call{Op: Settle, Plugin: "pl", Shard: "s1", Writer: "op", Epoch: 5, Version: v}, key, rec("op", 5, plain("")))
		}},
	)
}

// TestPromise3_ProbeOnAStoreOfAnotherBrand: a Fence that reads the brand
// (BrandVerify, BrandClaim) writes no probe key while the brand holds
// another identity, since before the call began; a brand absent, or
// changed during the call, or a Fence that reads no brand, is no breach.
func TestPromise3_ProbeOnAStoreOfAnotherBrand(t *testing.T) {
	probe := keys.Probe("") + "{b40635c1b0b2fff0}"
	push := Call{Op: Push, Plugin: "pl", Shard: "s1", Writer: "w1", Epoch: 1, Payload: []byte("a"), BrandReads: true}
	probed := func(b *builder, c Call) {
		p := b.begin(c)
		b.put(p, probe, []byte("probe"))
		b.end(p, errWire, "wire")
	}
	unread := push
	unread.BrandReads = false
	judge(t, 3,
		story{name: "the brand of another identity", build: func(b *builder) {
			b.put(nil, keys.Brand(""), []byte("other/v9"))
			probed(b, push)
		}},
		story{name: "the brand absent", kept: true, build: func(b *builder) { probed(b, push) }},
		story{name: "the brand of its identity", kept: true, build: func(b *builder) {
			b.put(nil, keys.Brand(""), []byte(defaultIdentity))
			probed(b, push)
		}},
		story{name: "the brand changed during the call", kept: true, build: func(b *builder) {
			p := b.begin(push)
			b.put(nil, keys.Brand(""), []byte("other/v9"))
			b.put(p, probe, []byte("probe"))
			b.end(p, errWire, "wire")
		}},
		story{name: "a Fence that reads no brand", kept: true, build: func(b *builder) {
			b.put(nil, keys.Brand(""), []byte("other/v9"))
			probed(b, unread)
		}},
	)
}

// TestPromise11_ClaimersLearnTheWinner: a claimer refused as of another
// identity found the winner's brand, and names it.
func TestPromise11_ClaimersLearnTheWinner(t *testing.T) {
	brand := keys.Brand("")
	named := func(s string) *string { return &s }
	judge(t, 11,
		story{name: "refused while the brand held its identity", build: func(b *builder) {
			b.put(nil, brand, []byte(defaultIdentity))
			b.end(b.begin(Call{Op: Claim}), errWire, "wire")
		}},
		story{name: "refused naming what the brand never held", build: func(b *builder) {
			b.wrote(Call{Op: Claim, Proc: "p2", Identity: "other/v9", Claimed: true}, brand, []byte("other/v9"))
			b.end(b.begin(Call{Op: Claim, Found: named("another/v3")}), errWire, "wire")
		}},
		story{name: "refused naming the winner", kept: true, build: func(b *builder) {
			c1 := b.begin(Call{Op: Claim})
			b.wrote(Call{Op: Claim, Proc: "p2", Identity: "other/v9", Claimed: true}, brand, []byte("other/v9"))
			c1.Found = named("other/v9")
			b.end(c1, errWire, "wire")
		}},
	)
}

// TestPromise7_TermSourceOverDamage: a TermSource reads a record whose
// header does not decode as no epoch to continue above, never as absent:
// it hands out none from it.
func TestPromise7_TermSourceOverDamage(t *testing.T) {
	key := shardKeyOf(t, "", "pl", "s1")
	first := func(b *builder) {
		c := b.begin(Call{Op: Epoch, TermSource: "ts1", Key: key, Writer: "w1"})
		c.Got = 7<<32 | 1
		b.end(c, nil)
	}
	judge(t, 7,
		story{name: "an epoch from a record whose header does not decode", build: func(b *builder) {
			b.put(nil, key, []byte("damaged"))
			first(b)
		}},
		story{name: "an epoch from a damaged record whose header decodes", kept: true, build: func(b *builder) {
			b.put(nil, key, damage(rec("w1", 7<<32|3, plain("x"))))
			first(b)
		}},
		story{name: "an epoch from no record", kept: true, build: first},
	)
}

// TestPromise20_BlobWrittenByTheCommitter: "written by the committing
// writer within its tenure" speaks of the PutBlob that wrote the blob, not
// of the name it gave it: a blob another writer's PutBlob wrote under the
// committer's name, or one put at an epoch below the tenure under a name of
// an epoch within it, is no blob the committer wrote in its tenure.
func TestPromise20_BlobWrittenByTheCommitter(t *testing.T) {
	key := shardKeyOf(t, "", "pl", "s1")
	// committed: a PutBlob by writer at epoch creates a blob named as put
	// by w1 at epoch 2; a seal of w1 at 2 begins its tenure; w1 commits
	// it at 3.
	committed := func(writer string, epoch uint64) func(b *builder) {
		return func(b *builder) {
			name := keys.BlobName(2, "w1", blobID(1))
			pb := b.begin(Call{Op: PutBlob, Plugin: "pl", Shard: "s1", Writer: writer, Epoch: epoch, Proc: writer})
			b.createBlob(pb, blobKeyOf(b.t, "s1", name), []byte("b"))
			b.end(pb, nil)
			b.wrote(Call{Op: Seal, Plugin: "pl", Shard: "s1", Writer: "w1", Epoch: 2}, key, rec("w1", 2, record.Body{Since: 2, Stream: true}))
			b.wrote(Call{Op: Commit, Plugin: "pl", Shard: "s1", Writer: "w1", Epoch: 3}, key,
				rec("w1", 3, record.Body{Refs: []record.BlobRef{ref(name, []byte("b"))}, Since: 2, Stream: true}))
		}
	}
	judge(t, 20,
		story{name: "put by the committer in its tenure", kept: true, build: committed("w1", 2)},
		story{name: "put by another writer under the committer's name", build: committed("w2", 2)},
		story{name: "put below the tenure under a name within it", build: committed("w1", 1)},
	)
	// The seal at 2 began a tenure: the blob put at 1 is below it
	// (promise 21), whatever its name says.
	judge(t, 21,
		story{name: "put in the tenure", kept: true, build: committed("w1", 2)},
		story{name: "put below the seal under a name above it", build: committed("w1", 1)},
	)
}

// TestPromise20_CommitOfABlobDeletedOutsideBefore: a blob something
// outside deleted before a commit began did not exist while the commit
// decided: the commit that lands referencing it breaks promise 20 (24
// excuses what outside deleted, 20 does not).
func TestPromise20_CommitOfABlobDeletedOutsideBefore(t *testing.T) {
	key := shardKeyOf(t, "", "pl", "s1")
	name := keys.BlobName(1, "w1", blobID(1))
	commit := func(deleteBefore bool) func(b *builder) {
		return func(b *builder) {
			b.createBlob(nil, blobKeyOf(b.t, "s1", name), []byte("b"))
			b.put(nil, key, rec("w1", 1, record.Body{Since: 1, Stream: true}))
			if deleteBefore {
				b.deleteBlob(nil, blobKeyOf(b.t, "s1", name))
			}
			c := b.begin(Call{Op: Commit, Plugin: "pl", Shard: "s1", Writer: "w1", Epoch: 2})
			if !deleteBefore {
				b.deleteBlob(nil, blobKeyOf(b.t, "s1", name))
			}
			b.put(c, key, rec("w1", 2, record.Body{Refs: []record.BlobRef{ref(name, []byte("b"))}, Since: 1, Stream: true}))
			b.end(c, nil)
		}
	}
	judge(t, 20,
		story{name: "deleted outside before the commit began", build: commit(true)},
		story{name: "deleted outside while the commit ran", kept: true, build: commit(false)},
	)
}

// TestPromise22_HeadPushKeepsRefs: a Push that replaces a record rewritten
// whole from outside with a sound head (Options.HeadPush, promise 7) keeps
// the references and the horizon that head carries, as over a sound
// record.
func TestPromise22_HeadPushKeepsRefs(t *testing.T) {
	key := shardKeyOf(t, "", "pl", "s1")
	name := keys.BlobName(1, "w1", blobID(1))
	was := record.Body{Payload: []byte(strings.Repeat("m", 5000)), Refs: []record.BlobRef{ref(name, []byte("b"))}, Since: 1, Horizon: 500, Stream: true} // longer than a head read
	for _, c := range []struct {
		name string
		body record.Body // what the push wrote
		kept bool
	}{
		{"refs and horizon kept", record.Body{Payload: []byte("a"), Refs: was.Refs, Since: 1, Horizon: 500, Stream: true}, true},
		{"refs dropped", record.Body{Payload: []byte("a"), Since: 1, Horizon: 500, Stream: true}, false},
		{"horizon dropped", record.Body{Payload: []byte("a"), Refs: was.Refs, Since: 1, Stream: true}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := newBuilder(t)
			b.createBlob(nil, blobKeyOf(t, "s1", name), []byte("b"))
			b.put(nil, key, damage(rec("w1", 1, was)))
			b.wrote(Call{Op: Push, Plugin: "pl", Shard: "s1", Writer: "w1", Epoch: 2, Payload: []byte("a")}, key, rec("w1", 2, c.body))
			found := map[int]bool{}
			for _, v := range b.check(Options{HeadPush: true}) {
				found[v.Promise] = true
			}
			require.False(t, found[7], "promise 7")
			require.Equal(t, !c.kept, found[22], "promise 22")
		})
	}
}

// TestPromise26_BehindTheHorizonItRaised: a collection that raised the
// horizon past a blob made it one no commit can reference: the pass
// leaves none behind it.
func TestPromise26_BehindTheHorizonItRaised(t *testing.T) {
	key := shardKeyOf(t, "", "pl", "s1")
	name := keys.BlobName(2, "w1", blobID(1))
	pass := func(deleted bool) func(b *builder) {
		return func(b *builder) {
			at := b.createBlob(nil, blobKeyOf(b.t, "s1", name), []byte("b"))
			b.put(nil, key, rec("w1", 2, record.Body{Since: 2, Stream: true}))
			co := b.begin(Call{Op: Collect, Plugin: "pl", Shard: "s1"})
			b.put(co, key, rec("w1", 2, record.Body{Since: 2, Horizon: at.UnixNano() + 1, Stream: true}))
			if deleted {
				b.deleteBlob(co, blobKeyOf(b.t, "s1", name))
			}
			b.end(co, nil)
		}
	}
	judge(t, 26,
		story{name: "deleted", kept: true, build: pass(true)},
		story{name: "left", build: pass(false)},
	)
}
