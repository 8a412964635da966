package writefence

import (
	"hash/maphash"
	"sync"
)

// The version cache: what a Fence remembers of the records it wrote, so
// that a push can skip its read; and beside each entry, the highest epoch
// the Fence saw of the record, so that a record deleted or set back is
// never taken for a new one (see Fence.Forget).

// recordCache is what a Fence wrote and saw of each record, by a hash of
// the record's key; and beside it the epoch of the last blob the Fence put
// in each shard's blob space, where a commit's new blobs most likely are
// (see Fence.Commit).
type recordCache struct {
	mu   sync.Mutex // guards m and puts
	m    map[uint64]cachedRecord
	puts map[uint64]uint64
}

// maxCached bounds the version cache: 131,072 shards, about 150 bytes each
// (165 when the highest epoch seen is another writer's), and the payload
// the Fence wrote when it is at most cachedPayload bytes (a manifest's
// references besides, when the record is a stream's); past it an
// arbitrary entry is dropped, which costs that shard one read on its next
// write, and the Fence's memory of the highest epoch it saw of it: a
// record of that shard lost or set back is then found by the Fence only
// as a Fence that never saw it would (see Fence.KeepFloor).

const maxCached = 1 << 17

// cacheSeed keys the version cache by a hash of the record's key rather
// than the key, which would double an entry's size. Two keys whose 64-bit
// hashes under a random seed collide (about one chance in 2^64 for a pair)
// would share an entry: a push to one would condition its write on the
// other's version, and carry the other's references on. On the stores
// whose tokens never repeat across keys (MemStore, Valkey, the directory
// store) that write conflicts and the push reads afresh; on those whose
// tokens name the bytes (S3's ETags) it lands only when the two records
// hold the same bytes, references included, so nothing is carried on
// wrongly; a GCS generation, a timestamp, could in principle match
// another object's: the chance of both coincidences is negligible. And
// a record would be held to the highest epoch seen of the other: a
// refusal (ErrEpochRegressed) that Forget ends.
var cacheSeed = maphash.MakeSeed()

// cachedRecord is what the fence remembers of a record it wrote: its
// version and what a push over it must carry on, and its payload when
// that is at most cachedPayload bytes and the record at most writeChecked
// or on a bytesNamed store (whole), which an update, a seal or a commit
// over it computes from. The version lets such a write skip the read; the
// write is still conditioned on it, so a stale entry costs one conflict,
// never a wrong admission, and since a version names its bytes, what is
// remembered with it is what the store holds while the version matches,
// but for damage in place, which a write on the version refuses only in
// the part of the record the store checks on a write. The epoch is only
// used to decide whether skipping the read is worth trying; it never
// refuses a write on its own.
//
// seen is the highest epoch the Fence wrote or read of the record, by
// seenWriter: a write that finds the record absent or below it is refused
// (ErrEpochRegressed). It outlives the version (forget keeps it).
type cachedRecord struct {
	version string
	prior
	payload []byte
	whole   bool // payload is the record's

	seen       uint64
	seenWriter string
}

// cachedPayload bounds the payload a cachedRecord keeps: a manifest's
// payload is most often a position in a log, and 131,072 of these take
// at most 64 MiB.
const cachedPayload = 512

// writeChecked is the part of a record, from its start, that every store
// checks for damage in place when it writes (see ConditionalStore): a
// write decided on a remembered record longer than that could replace
// damage past it unseen, which only a read of the record finds (promise
// 7).
const writeChecked = 1343

// rememberWrite is what the Fence remembers of the record at version
// that it wrote with payload, size bytes in all, and that hands p on;
// named says the store's versions name the bytes (bytesNamed), so that
// no damage in place hides behind the version whatever the size.
func rememberWrite(version string, p prior, payload []byte, size int64, named bool) cachedRecord {
	c := cachedRecord{version: version, prior: p}
	if len(payload) <= cachedPayload && (size <= writeChecked || named) {
		// A copy: the payload may be a slice the caller uses again. Never
		// nil, which an update's next gets only when there is no record.
		c.payload, c.whole = append([]byte{}, payload...), true
	}
	return c
}

// manifest is the manifest of the record c remembers whole.
func (c cachedRecord) manifest() Manifest {
	m := Manifest{Payload: c.payload}
	if c.stream != nil {
		m.Blobs = c.stream.refs
	}
	return m
}

// cached returns what the fence remembers of key's record to condition a
// push at epoch on without reading, when the fence wrote it at a lower
// epoch, and saw nothing of it above what it wrote.
func (rc *recordCache) cached(key string, epoch uint64) (cachedRecord, bool) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	c, ok := rc.m[maphash.String(cacheSeed, key)]
	if !ok || c.version == "" || epoch <= c.epoch || c.seen > c.epoch {
		return cachedRecord{}, false
	}
	return c, true
}

// remember keeps c as what the fence wrote of key's record, at c.epoch by
// c.writer: its version, and the epoch seen.
func (rc *recordCache) remember(key string, c cachedRecord) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	h := maphash.String(cacheSeed, key)
	old := rc.entryLocked(h)
	c.seen, c.seenWriter = old.seen, old.seenWriter
	if c.epoch > c.seen {
		c.seen, c.seenWriter = c.epoch, c.writer
	}
	rc.m[h] = c
}

// saw notes that the fence read or wrote key's record at epoch by writer.
func (rc *recordCache) saw(key string, epoch uint64, writer string) {
	if epoch == 0 {
		return
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	h := maphash.String(cacheSeed, key)
	if c, ok := rc.m[h]; ok && c.seen >= epoch {
		return
	}
	c := rc.entryLocked(h)
	c.seen, c.seenWriter = epoch, writer
	rc.m[h] = c
}

// seen returns the highest epoch the fence saw of key's record, and its
// writer; 0 when it saw none, or forgot.
func (rc *recordCache) seen(key string) (uint64, string) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	c := rc.m[maphash.String(cacheSeed, key)]
	return c.seen, c.seenWriter
}

// entryLocked returns the entry of hash h, making room for it when it is
// new and the cache is full. The caller holds mu.
func (rc *recordCache) entryLocked(h uint64) cachedRecord {
	if rc.m == nil {
		rc.m = make(map[uint64]cachedRecord)
	}
	c, ok := rc.m[h]
	if !ok && len(rc.m) >= maxCached {
		for k := range rc.m {
			delete(rc.m, k)
			break
		}
	}
	return c
}

// forget drops the version the fence remembers of key's record, keeping
// the epoch it saw.
func (rc *recordCache) forget(key string) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	h := maphash.String(cacheSeed, key)
	c, ok := rc.m[h]
	switch {
	case !ok:
	case c.seen == 0:
		delete(rc.m, h)
	default:
		rc.m[h] = cachedRecord{seen: c.seen, seenWriter: c.seenWriter}
	}
}

// drop forgets everything the fence remembers of key's record.
func (rc *recordCache) drop(key string) {
	rc.mu.Lock()
	delete(rc.m, maphash.String(cacheSeed, key))
	rc.mu.Unlock()
}

// put notes that the Fence put a blob at epoch in the blob space of the
// shard whose record is at key.
func (rc *recordCache) put(key string, epoch uint64) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.puts == nil {
		rc.puts = make(map[uint64]uint64)
	}
	h := maphash.String(cacheSeed, key)
	if _, ok := rc.puts[h]; !ok && len(rc.puts) >= maxCached {
		for k := range rc.puts {
			delete(rc.puts, k)
			break
		}
	}
	rc.puts[h] = epoch
}

// lastPut returns the epoch of the last blob the Fence put for the record
// at key, the version of that record the Fence remembers writing ("" for
// none), and the references the Fence knows that record to hold (nil when
// it knows none).
func (rc *recordCache) lastPut(key string) (epoch uint64, version string, refs []BlobRef, ok bool) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	h := maphash.String(cacheSeed, key)
	if epoch, ok = rc.puts[h]; !ok {
		return 0, "", nil, false
	}
	c := rc.m[h]
	if c.stream != nil {
		refs = c.stream.refs
	}
	return epoch, c.version, refs, true
}
