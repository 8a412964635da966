package writefence

import "hash/maphash"

// The version cache: what a Fence remembers of the records it wrote, so
// that a push can skip its read.

// maxCached bounds the version cache: 131,072 shards, about 150 bytes each
// (BENCHMARKS.md); past it an arbitrary entry is dropped, which costs that
// shard one read on its next push.
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
// another object's: the chance of both coincidences is negligible.
var cacheSeed = maphash.MakeSeed()

// cachedRecord is what the fence remembers of a record it wrote: its
// version and what a push over it must carry on. The version lets a push
// skip the read; the write is still conditioned on it, so a stale entry
// costs one conflict, never a wrong admission, and since a version names
// its bytes, what is remembered with it is what the store holds while the
// version matches. The epoch is only used to decide whether skipping the
// read is worth trying; it never refuses a push on its own.
type cachedRecord struct {
	version string
	prior
}

// cached returns what the fence remembers of key's record to condition a
// push at epoch on without reading, when the fence wrote or read it at a
// lower epoch.
func (f *Fence) cached(key string, epoch uint64) (cachedRecord, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.cache[maphash.String(cacheSeed, key)]
	if !ok || epoch <= c.epoch {
		return cachedRecord{}, false
	}
	return c, true
}

func (f *Fence) remember(key string, c cachedRecord) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cache == nil {
		f.cache = make(map[uint64]cachedRecord)
	}
	h := maphash.String(cacheSeed, key)
	if _, ok := f.cache[h]; !ok && len(f.cache) >= maxCached {
		for k := range f.cache {
			delete(f.cache, k)
			break
		}
	}
	f.cache[h] = c
}

func (f *Fence) forget(key string) {
	f.mu.Lock()
	delete(f.cache, maphash.String(cacheSeed, key))
	f.mu.Unlock()
}
