package promise

import (
	"testing"

	"github.com/writefence/writefence/internal/keys"
	"github.com/writefence/writefence/internal/record"
)

// retiredShard builds a shard whose stream record references a blob and
// which also holds a deposed writer's blob, then deletes its record from
// outside unless kept: a shard retired (GCOptions.RecordGone). It
// returns the two blobs' keys.
func retiredShard(b *builder, kept bool) (referenced, garbage string) {
	key := shardKeyOf(b.t, "", "pl", "s1")
	name := keys.BlobName(2, "w1", blobID(1))
	referenced, garbage = blobKeyOf(b.t, "s1", name), blobKeyOf(b.t, "s1", keys.BlobName(1, "w0", blobID(2)))
	b.createBlob(nil, referenced, []byte("r"))
	b.createBlob(nil, garbage, []byte("g"))
	b.put(nil, key, rec("w1", 2, record.Body{Refs: []record.BlobRef{ref(name, []byte("r"))}, Since: 2, Stream: true}))
	if !kept {
		b.del(nil, key)
	}
	return referenced, garbage
}

// TestPromise25_RecordGone: with RecordGone over a shard whose record is
// absent, Collect may delete every blob of the shard, those the deleted
// record referenced included; over a record, RecordGone or not, only
// what it does not reference and cannot come to.
func TestPromise25_RecordGone(t *testing.T) {
	judge(t, 25,
		story{name: "a retired shard's blobs, the referenced one included", kept: true, build: func(b *builder) {
			referenced, garbage := retiredShard(b, false)
			co := b.begin(Call{Op: Collect, Plugin: "pl", Shard: "s1", RecordGone: true})
			b.deleteBlob(co, referenced)
			b.deleteBlob(co, garbage)
			b.end(co, nil)
		}},
		story{name: "without RecordGone, the record absent", build: func(b *builder) {
			_, garbage := retiredShard(b, false)
			co := b.begin(Call{Op: Collect, Plugin: "pl", Shard: "s1"})
			b.deleteBlob(co, garbage)
			b.end(co, nil)
		}},
		story{name: "with RecordGone over the record, a blob it references", build: func(b *builder) {
			referenced, _ := retiredShard(b, true)
			co := b.begin(Call{Op: Collect, Plugin: "pl", Shard: "s1", RecordGone: true})
			b.deleteBlob(co, referenced)
			b.end(co, nil)
		}},
		story{name: "with RecordGone over the record, garbage", kept: true, build: func(b *builder) {
			_, garbage := retiredShard(b, true)
			co := b.begin(Call{Op: Collect, Plugin: "pl", Shard: "s1", RecordGone: true})
			b.deleteBlob(co, garbage)
			b.end(co, nil)
		}},
	)
}

// TestPromise26_RecordGone: a pass of Collect with RecordGone that
// returned nil over a shard with no record leaves none of the blobs it
// found, the deleted record's included: no commit ever references them.
func TestPromise26_RecordGone(t *testing.T) {
	judge(t, 26,
		story{name: "a pass that deletes every blob", kept: true, build: func(b *builder) {
			referenced, garbage := retiredShard(b, false)
			co := b.begin(Call{Op: Collect, Plugin: "pl", Shard: "s1", RecordGone: true})
			b.deleteBlob(co, referenced)
			b.deleteBlob(co, garbage)
			b.end(co, nil)
		}},
		story{name: "a pass that leaves the blob the deleted record referenced", build: func(b *builder) {
			_, garbage := retiredShard(b, false)
			co := b.begin(Call{Op: Collect, Plugin: "pl", Shard: "s1", RecordGone: true})
			b.deleteBlob(co, garbage)
			b.end(co, nil)
		}},
		story{name: "a pass that deletes nothing", build: func(b *builder) {
			retiredShard(b, false)
			co := b.begin(Call{Op: Collect, Plugin: "pl", Shard: "s1", RecordGone: true})
			b.end(co, nil)
		}},
		story{name: "a dry run", kept: true, build: func(b *builder) {
			retiredShard(b, false)
			co := b.begin(Call{Op: Collect, Plugin: "pl", Shard: "s1", RecordGone: true, DryRun: true})
			b.end(co, nil)
		}},
		story{name: "a pass that failed", kept: true, build: func(b *builder) {
			_, garbage := retiredShard(b, false)
			co := b.begin(Call{Op: Collect, Plugin: "pl", Shard: "s1", RecordGone: true})
			b.deleteBlob(co, garbage)
			b.end(co, errFailed)
		}},
	)
}

// TestPromise18_RefusedSettle: a Settle refused, as stale or otherwise,
// cancels no Deposed context of its shard on its Fence.
func TestPromise18_RefusedSettle(t *testing.T) {
	key := shardKeyOf(t, "", "pl", "s1")
	waiting := []Context{{ID: 1, Kind: "deposed", Key: key}}
	refused := func(after []Context) func(b *builder) {
		return func(b *builder) {
			b.put(nil, key, rec("w9", 9, plain("x")))
			b.put(nil, key, damage(rec("w9", 9, plain("x"))))
			st := b.begin(Call{Op: Settle, Plugin: "pl", Shard: "s1", Writer: "op", Epoch: 9, Payload: []byte("s"), Version: "v2", Before: waiting, After: after})
			b.endBare(st, errStale, "stale")
		}
	}
	judge(t, 18,
		story{name: "a refused settle leaves it", kept: true, build: refused(waiting)},
		story{name: "a refused settle ends it, stale", build: refused([]Context{{ID: 1, Kind: "deposed", Key: key, Done: true, Cause: errStale, Is: Matches{"stale"}}})},
		story{name: "a refused settle ends it, with its refusal", build: refused([]Context{{ID: 1, Kind: "deposed", Key: key, Done: true, Cause: errInvalid, Is: Matches{"invalid"}}})},
	)
}
