package promise

import (
	"testing"
	"time"

	"github.com/writefence/writefence/internal/keys"
	"github.com/writefence/writefence/internal/record"
)

// observe adds e to c's events, placed where the history stands now, as
// the recorders place what the Observer sees.
func (b *builder) observe(c *Call, e Event) {
	e.Place = len(b.h.Entries)
	c.Events = append(c.Events, e)
}

// TestPromise27_WhenItEnds judges when the Observer sees a write: once it
// ended (its change, or the fault that ended it: a race lost, a lost
// reply), before the call's end; and a race lost retried, after it and
// before the retry's write.
func TestPromise27_WhenItEnds(t *testing.T) {
	key := shardKeyOf(t, "", "pl", "s1")
	push := Call{Op: Push, Plugin: "pl", Shard: "s1", Writer: "w1", Epoch: 1, Payload: []byte("a")}
	landed := Event{Op: "push", Key: key}
	retry := Event{Op: "push", Key: key, Retrying: true, Err: errConflict, Is: Matches{"conflict"}}
	conflict := func(b *builder, c *Call) {
		b.h.Change(Change{Call: c.ID, Kind: "fault", Key: key, Fault: "conflict", Request: "put", At: b.tick()})
	}
	blob := blobKeyOf(t, "s1", keys.BlobName(1, "w1", blobID(1)))
	lease := leaseKeyOf(t, "L")
	judge(t, 27,
		story{name: "seen after its write", kept: true, build: func(b *builder) {
			p := b.begin(push)
			b.put(p, key, rec("w1", 1, plain("a")))
			b.observe(p, landed)
			b.endBare(p, nil)
		}},
		story{name: "seen before its write", build: func(b *builder) {
			p := b.begin(push)
			b.observe(p, landed)
			b.put(p, key, rec("w1", 1, plain("a")))
			b.endBare(p, nil)
		}},
		story{name: "seen after the call's end", build: func(b *builder) {
			p := b.begin(push)
			b.put(p, key, rec("w1", 1, plain("a")))
			e := landed
			e.Place = len(b.h.Entries) + 1
			p.Events = append(p.Events, e)
			b.endBare(p, nil)
		}},
		story{name: "a lost reply, seen after it", kept: true, build: func(b *builder) {
			p := b.begin(push)
			b.put(p, key, rec("w1", 1, plain("a")))
			b.fault(p, "lost")
			b.observe(p, landed)
			b.endBare(p, nil)
		}},
		story{name: "a lost reply, seen before it", build: func(b *builder) {
			p := b.begin(push)
			b.put(p, key, rec("w1", 1, plain("a")))
			b.observe(p, landed)
			b.fault(p, "lost")
			b.endBare(p, nil)
		}},
		story{name: "a race lost, retried, seen between", kept: true, build: func(b *builder) {
			p := b.begin(push)
			conflict(b, p)
			b.observe(p, retry)
			b.put(p, key, rec("w1", 1, plain("a")))
			b.observe(p, landed)
			b.endBare(p, nil)
		}},
		story{name: "a race lost, retried, seen before it", build: func(b *builder) {
			p := b.begin(push)
			b.observe(p, retry)
			conflict(b, p)
			b.put(p, key, rec("w1", 1, plain("a")))
			b.observe(p, landed)
			b.endBare(p, nil)
		}},
		story{name: "a race lost, retried, seen after the retry's write", build: func(b *builder) {
			p := b.begin(push)
			conflict(b, p)
			b.put(p, key, rec("w1", 1, plain("a")))
			b.observe(p, retry)
			b.observe(p, landed)
			b.endBare(p, nil)
		}},
		story{name: "a race lost that ends the write, seen before it", build: func(b *builder) {
			p := b.begin(push)
			b.observe(p, Event{Op: "push", Key: key, Err: errConflict, Is: Matches{"conflict"}})
			conflict(b, p)
			b.endBare(p, errConflict, "conflict")
		}},
		story{name: "a race lost that ends the write, seen after it", kept: true, build: func(b *builder) {
			p := b.begin(push)
			conflict(b, p)
			b.observe(p, Event{Op: "push", Key: key, Err: errConflict, Is: Matches{"conflict"}})
			b.endBare(p, errConflict, "conflict")
		}},
		story{name: "a blob seen before it was created", build: func(b *builder) {
			c := b.begin(Call{Op: PutBlob, Plugin: "pl", Shard: "s1", Writer: "w1", Epoch: 1, Payload: []byte("b")})
			b.observe(c, Event{Op: "blob", Key: blob})
			b.createBlob(c, blob, []byte("b"))
			b.endBare(c, nil)
		}},
		story{name: "a lease record seen before it was written", build: func(b *builder) {
			ac := b.begin(Call{Op: Acquire, Lease: lv1, LeaseName: "L", Holder: "h1"})
			b.observe(ac, Event{Op: "lease acquire", Key: lease})
			b.put(ac, lease, record.EncodeLease("h1", 1, b.now.Add(time.Minute).UnixNano(), inc1))
			ac.Term = 1
			b.endBare(ac, nil)
		}},
		story{name: "a lease record seen after it was written", kept: true, build: func(b *builder) {
			ac := b.begin(Call{Op: Acquire, Lease: lv1, LeaseName: "L", Holder: "h1"})
			b.put(ac, lease, record.EncodeLease("h1", 1, b.now.Add(time.Minute).UnixNano(), inc1))
			b.observe(ac, Event{Op: "lease acquire", Key: lease})
			ac.Term = 1
			b.endBare(ac, nil)
		}},
		// A Lease's renewer runs beside the Hold that took it, under its
		// ctx: the Observer sees a renewal end when it ends, which may be
		// once the Hold returned.
		story{name: "a Hold's renewal, seen after the Hold's end", kept: true, build: func(b *builder) {
			h := b.begin(Call{Op: Hold, Lease: lv1, LeaseName: "L", Holder: "h1", Writer: "h1", HoldsShards: []string{key}})
			b.put(h, lease, record.EncodeLease("h1", 1, b.now.Add(time.Minute).UnixNano(), inc1))
			b.observe(h, Event{Op: "lease acquire", Key: lease})
			b.put(h, lease, record.EncodeLease("h1", 1, b.now.Add(2*time.Minute).UnixNano(), inc1))
			b.put(h, key, rec("h1", 1<<32, plain("")))
			b.observe(h, Event{Op: "seal", Key: key})
			b.endBare(h, nil)
		}},
		story{name: "a Hold's acquisition seen before it was written", build: func(b *builder) {
			h := b.begin(Call{Op: Hold, Lease: lv1, LeaseName: "L", Holder: "h1", Writer: "h1", HoldsShards: []string{key}})
			b.observe(h, Event{Op: "lease acquire", Key: lease})
			b.put(h, lease, record.EncodeLease("h1", 1, b.now.Add(time.Minute).UnixNano(), inc1))
			b.put(h, key, rec("h1", 1<<32, plain("")))
			b.observe(h, Event{Op: "seal", Key: key})
			b.endBare(h, nil)
		}},
	)
}
