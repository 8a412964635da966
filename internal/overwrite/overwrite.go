// Package overwrite checks that a store's reads pair bytes and version
// token from one write while another client overwrites the key. The
// conformance kit (writefencetest) and the command's doctor run it; it is
// not part of the public API.
package overwrite

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/writefence/writefence"
)

// Size of the check. It counts the reads that overlap a write, and the
// writer keeps writing until the readers have made Check.Reads of them
// (DefaultReads when zero), however fast or slow the store is, unless
// Check.Until comes first.
//
// A store that pairs one write's bytes with another write's version on a
// fraction p of the reads under overwrite passes n such reads unseen with
// chance (1-p)^n, about e^(-np). Some S3-compatible servers do so on a
// few reads in ten thousand; at p = 1/3,000, 21,000 reads miss such a
// store with chance e^-7, below 1 in 1,000 (at least ln(1000)*3000, about
// 20,700 reads, are needed for that).
const (
	DefaultReads = 21000
	MinWrites    = 50 // and at least this many writes, so reads meet many of them
	Readers      = 8
	PrefixLen    = 12 // bytes GetPrefix asks for: enough to name the write
)

// Check is the size of one run.
type Check struct {
	// Reads is how many reads that overlap a write the run waits for;
	// zero or less means DefaultReads.
	Reads int64

	// Until, when not zero, ends the writes at that moment even if fewer
	// reads overlapped a write: the command's doctor bounds the check in
	// time, the kit does not.
	Until time.Time
}

// Mismatch is one (bytes, version) pair that no write made, and how many
// reads returned it.
type Mismatch struct {
	Message string // what was read and which write its version names
	Count   int
}

// Result is what a run saw.
type Result struct {
	Writes     int   // overwrites made by the writer, after the first write
	Reads      int   // reads made by every reader
	Overlapped int64 // reads that overlapped a write
	Mismatches []Mismatch
}

// Content is write i's bytes: they name the write in their first
// PrefixLen bytes, are longer than that, and their length varies so a
// size from another write shows.
func Content(i int) []byte {
	return fmt.Appendf(nil, "write %06d%s", i, bytes.Repeat([]byte{'x'}, 2+i%7))
}

// readPair is what one read returned: bytes (or a prefix and a size) and a
// version.
type readPair struct {
	data    string
	version string
	size    int64 // -1 for a Get, else the size GetPrefix returned
}

// Run has one writer overwrite key on s while Readers readers read it,
// alternately with Get and writefence.GetPrefix, and returns every read
// that paired its bytes with the version of another write than the one
// that stored them. A server that returns a new body with the previous
// version under concurrent overwrite (or the reverse) shows here. Writes
// go through writefence.PutParts, with the bytes in two parts, as the
// Fence writes. key must not exist; Run leaves it behind.
//
// A read counts as under overwrite when it began after the writer's first
// write returned (so the key had been overwritten when the store read it)
// and before a later write returned, and ended after that write began:
// the writer counts the writes it has begun and those that have returned,
// and a read that began seeing r of them returned, r at least 1, and ended
// seeing more than r begun, overlapped write r+1. A reader that runs while
// the writer waits to be scheduled, before its first write or between two,
// is not counted, however many reads it makes.
//
// A write or a read that fails ends the run with its error.
func Run(ctx context.Context, s writefence.ConditionalStore, key string, c Check) (Result, error) {
	var res Result
	named := map[string][]byte{} // each write's version and bytes, filled by the writer
	v, err := writefence.PutParts(ctx, s, key, split(Content(0)), "")
	if err != nil {
		return res, fmt.Errorf("PutParts(%q, %d bytes in 2 parts, \"\"): %w", key, len(Content(0)), err)
	}
	named[v] = Content(0)

	var (
		begun, returned atomic.Int64 // writes begun, and returned, by the writer
		overlapped      atomic.Int64 // reads that overlapped a write
		failed          atomic.Bool  // a reader stopped on an error: no more reads will come
		stop            = make(chan struct{})
		started         sync.WaitGroup // each reader has read once: writes meet reads
		readers         sync.WaitGroup
		seen            = make([]map[readPair]int, Readers)
		errs            = make([]error, Readers)
	)
	started.Add(Readers)
	for r := range Readers {
		seen[r] = map[readPair]int{}
		read := func(prefix bool) error {
			var p readPair
			if prefix {
				data, size, v, err := writefence.GetPrefix(ctx, s, key, PrefixLen)
				if err != nil {
					return fmt.Errorf("GetPrefix(%q, %d): %w", key, PrefixLen, err)
				}
				p = readPair{data: string(data), version: v, size: size}
			} else {
				data, v, err := s.Get(ctx, key)
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
	want := c.Reads
	if want <= 0 {
		want = DefaultReads
	}
	inTime := func() bool { return c.Until.IsZero() || time.Now().Before(c.Until) }
	for writeErr == nil && (res.Writes < MinWrites || overlapped.Load() < want) && !failed.Load() && inTime() {
		res.Writes++
		data := Content(res.Writes)
		begun.Add(1)
		v, writeErr = writefence.PutParts(ctx, s, key, split(data), v)
		returned.Add(1)
		if writeErr == nil {
			if prev, ok := named[v]; ok {
				writeErr = fmt.Errorf("write %d returned version %q, the version of %s", res.Writes, v, describe(prev))
			}
			named[v] = data
		}
	}
	close(stop)
	readers.Wait()
	res.Overlapped = overlapped.Load()
	if writeErr != nil {
		return res, fmt.Errorf("PutParts(%q) by the only writer: %w", key, writeErr)
	}
	for _, err := range errs {
		if err != nil {
			return res, fmt.Errorf("a read during the overwrites: %w", err)
		}
	}
	for _, m := range seen {
		for p, count := range m {
			res.Reads += count
			if msg := mismatch(p, named); msg != "" {
				res.Mismatches = append(res.Mismatches, Mismatch{Message: msg, Count: count})
			}
		}
	}
	return res, nil
}

// split returns data as two parts, its halves, sharing data's array.
func split(data []byte) [][]byte {
	h := len(data) / 2
	return [][]byte{data[:h:h], data[h:]}
}

// mismatch says how p disagrees with the write its version names, if it
// does.
func mismatch(p readPair, named map[string][]byte) string {
	what := "Get"
	if p.size >= 0 {
		what = fmt.Sprintf("GetPrefix(%d)", PrefixLen)
	}
	want, ok := named[p.version]
	switch {
	case !ok:
		return fmt.Sprintf("%s during the overwrites returned %s with version %q, which no write returned", what, describe([]byte(p.data)), p.version)
	case p.size < 0 && p.data != string(want):
		return fmt.Sprintf("%s during the overwrites returned %s with version %q, the version of %s: bytes and version of different writes",
			what, describe([]byte(p.data)), p.version, describe(want))
	case p.size >= 0 && (p.data != string(want[:min(len(want), PrefixLen)]) || p.size != int64(len(want))):
		return fmt.Sprintf("%s during the overwrites returned %s of size %d with version %q, the version of %s: bytes and version of different writes",
			what, describe([]byte(p.data)), p.size, p.version, describe(want))
	}
	return ""
}

// describe summarises a payload for a message without dumping it.
func describe(b []byte) string {
	if len(b) <= 32 {
		return fmt.Sprintf("%d bytes %q", len(b), b)
	}
	return fmt.Sprintf("%d bytes %q...", len(b), b[:32])
}
