package writefencetest

import (
	"bytes"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/writefence/writefence"
)

// Size of the overwrite check. It counts the reads that overlap a write,
// and the writer keeps writing until the readers have made
// overwriteReads of them (Options.OverwriteReads when set), however fast
// or slow the store is.
//
// A store that pairs one write's bytes with another write's version on a
// fraction p of the reads under overwrite passes n such reads unseen with
// chance (1-p)^n, about e^(-np). Some S3-compatible servers do so on a
// few reads in ten thousand; at p = 1/3,000, 21,000 reads miss such a
// store with chance e^-7, below 1 in 1,000 (at least ln(1000)*3000, about
// 20,700 reads, are needed for that).
const (
	overwriteReads     = 21000
	overwriteMinWrites = 50 // and at least this many writes, so reads meet many of them
	overwriteReaders   = 8
	overwritePrefix    = 12 // bytes GetPrefix asks for: enough to name the write
)

// overwriteReads is how many reads that overlap a write
// Get/UnderOverwrite waits for.
func (o *Options) overwriteReads() int64 {
	if o.OverwriteReads > 0 {
		return int64(o.OverwriteReads)
	}
	return overwriteReads
}

// overwriteContent is write i's bytes: they name the write in their first
// overwritePrefix bytes, are longer than that, and their length varies so a
// size from another write shows.
func overwriteContent(i int) []byte {
	return fmt.Appendf(nil, "write %06d%s", i, bytes.Repeat([]byte{'x'}, 2+i%7))
}

// readPair is what one read returned: bytes (or a prefix and a size) and a
// version.
type readPair struct {
	data    string
	version string
	size    int64 // -1 for a Get, else the size GetPrefix returned
}

// testGetUnderOverwrite has one writer overwrite a key while readers read
// it, alternately with Get and writefence.GetPrefix, and checks afterwards
// that every read paired its bytes with the version of the write that
// stored them. A server that returns a new body with the previous version
// under concurrent overwrite (or the reverse) fails here.
//
// A read counts as under overwrite when it began after the writer's first
// write returned (so the key had been overwritten when the store read it)
// and before a later write returned, and ended after that write began:
// the writer counts the writes it has begun and those that have returned,
// and a read that began seeing r of them returned, r at least 1, and ended
// seeing more than r begun, overlapped write r+1. A reader that runs while
// the writer waits to be scheduled, before its first write or between two,
// is not counted, however many reads it makes.
func testGetUnderOverwrite(t *testing.T, sc *scope) {
	logPaths(t, sc, "GetPrefix", "PutParts")
	key := sc.key("overwrite")
	named := map[string][]byte{} // each write's version and bytes, filled by the writer
	v := put(t, sc.s, key, overwriteContent(0), "")
	named[v] = overwriteContent(0)

	var (
		begun, returned atomic.Int64 // writes begun, and returned, by the writer
		overlapped      atomic.Int64 // reads that overlapped a write
		failed          atomic.Bool  // a reader stopped on an error: no more reads will come
		stop            = make(chan struct{})
		started         sync.WaitGroup // each reader has read once: writes meet reads
		readers         sync.WaitGroup
		seen            = make([]map[readPair]int, overwriteReaders)
		errs            = make([]error, overwriteReaders)
	)
	started.Add(overwriteReaders)
	for r := range overwriteReaders {
		seen[r] = map[readPair]int{}
		read := func(prefix bool) error {
			var p readPair
			if prefix {
				data, size, v, err := writefence.GetPrefix(t.Context(), sc.s, key, overwritePrefix)
				if err != nil {
					return fmt.Errorf("GetPrefix(%q, %d): %w", key, overwritePrefix, err)
				}
				p = readPair{data: string(data), version: v, size: size}
			} else {
				data, v, err := sc.s.Get(t.Context(), key)
				if err != nil {
					return fmt.Errorf("Get(%q): %w", key, err)
				}
				p = readPair{data: string(data), version: v, size: -1}
			}
			seen[r][p]++
			return nil
		}
		readers.Go(func() {
			for n := 0; errs[r] == nil; n++ {
				done := returned.Load()
				errs[r] = read(n%2 == 1)
				if done >= 1 && begun.Load() > done {
					overlapped.Add(1)
				}
				if n == 0 {
					started.Done()
				}
				if errs[r] != nil {
					failed.Store(true)
				}
				select {
				case <-stop:
					// One more read of each kind, after the last write:
					// a store that lags a write shows even if every
					// read during the writes was lucky.
					if errs[r] == nil {
						errs[r] = read(false)
					}
					if errs[r] == nil {
						errs[r] = read(true)
					}
					return
				default:
				}
			}
		})
	}
	started.Wait()
	var writeErr error
	writes := 0
	wantReads := sc.opts.overwriteReads()
	for writeErr == nil && (writes < overwriteMinWrites || overlapped.Load() < wantReads) && !failed.Load() {
		writes++
		data := overwriteContent(writes)
		begun.Add(1)
		v, writeErr = writefence.PutParts(t.Context(), sc.s, key, split(data), v)
		returned.Add(1)
		if writeErr == nil {
			if prev, ok := named[v]; ok {
				writeErr = fmt.Errorf("write %d returned version %q, the version of %s", writes, v, describe(prev))
			}
			named[v] = data
		}
	}
	close(stop)
	readers.Wait()
	if writeErr != nil {
		t.Fatalf("PutParts(%q) by the only writer: %v", key, writeErr)
	}
	for _, err := range errs {
		if err != nil {
			t.Fatalf("a read during the overwrites: %v", err)
		}
	}

	reads, bad := 0, 0
	for _, m := range seen {
		for p, count := range m {
			reads += count
			if msg := mismatch(p, named); msg != "" {
				if bad++; bad <= 5 {
					t.Errorf("%s (%d times)", msg, count)
				}
			}
		}
	}
	if bad > 5 {
		t.Errorf("and %d more such reads", bad-5)
	}
	t.Logf("%d writes, %d reads by %d readers (%d of them overlapping a write), %d distinct (bytes, version) pairs that no write made",
		writes, reads, overwriteReaders, overlapped.Load(), bad)
}

// mismatch says how p disagrees with the write its version names, if it
// does.
func mismatch(p readPair, named map[string][]byte) string {
	what := "Get"
	if p.size >= 0 {
		what = fmt.Sprintf("GetPrefix(%d)", overwritePrefix)
	}
	want, ok := named[p.version]
	switch {
	case !ok:
		return fmt.Sprintf("%s during the overwrites returned %s with version %q, which no write returned", what, describe([]byte(p.data)), p.version)
	case p.size < 0 && p.data != string(want):
		return fmt.Sprintf("%s during the overwrites returned %s with version %q, the version of %s: bytes and version of different writes",
			what, describe([]byte(p.data)), p.version, describe(want))
	case p.size >= 0 && (p.data != string(want[:min(len(want), overwritePrefix)]) || p.size != int64(len(want))):
		return fmt.Sprintf("%s during the overwrites returned %s of size %d with version %q, the version of %s: bytes and version of different writes",
			what, describe([]byte(p.data)), p.size, p.version, describe(want))
	}
	return ""
}
