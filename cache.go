package writefence

// The version cache: what a Fence remembers of the records it wrote or
// read, so that a push can skip its read.

// maxCached bounds the version cache; past it an arbitrary entry is dropped,
// which costs that shard one read on its next push.
const maxCached = 4096

// cachedRecord is what the fence remembers of a record it wrote or read: its
// version and epoch. The version lets a push skip the read; the write is
// still conditioned on it, so a stale entry costs one conflict, never a
// wrong admission. The epoch is only used to decide whether skipping the
// read is worth trying; it never refuses a push on its own.
type cachedRecord struct {
	version string
	epoch   uint64
	writer  string // who wrote it
	since   uint64 // its tenure floor (format version 3)
	stream  bool   // format version 3: a push over it keeps the floor
}

// cached returns what the fence remembers of key's record to condition a
// push at epoch on without reading, when the fence wrote or read it at a
// lower epoch.
func (f *Fence) cached(key string, epoch uint64) (cachedRecord, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.cache[key]
	if !ok || epoch <= c.epoch {
		return cachedRecord{}, false
	}
	return c, true
}

func (f *Fence) remember(key string, c cachedRecord) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cache == nil {
		f.cache = make(map[string]cachedRecord)
	}
	if _, ok := f.cache[key]; !ok && len(f.cache) >= maxCached {
		for k := range f.cache {
			delete(f.cache, k)
			break
		}
	}
	f.cache[key] = c
}

func (f *Fence) forget(key string) {
	f.mu.Lock()
	delete(f.cache, key)
	f.mu.Unlock()
}
