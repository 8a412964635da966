package writefencetest

import (
	"testing"

	"github.com/writefence/writefence/internal/overwrite"
)

// overwriteReads is how many reads that overlap a write
// Get/UnderOverwrite waits for: Options.OverwriteReads when set, else
// overwrite.DefaultReads (see there for what it catches).
func (o *Options) overwriteReads() int64 {
	if o.OverwriteReads > 0 {
		return int64(o.OverwriteReads)
	}
	return overwrite.DefaultReads
}

// testGetUnderOverwrite has one writer overwrite a key while readers read
// it, alternately with Get and writefence.GetPrefix, and checks afterwards
// that every read paired its bytes with the version of the write that
// stored them. A server that returns a new body with the previous version
// under concurrent overwrite (or the reverse) fails here. overwrite.Run
// says which reads count as under overwrite.
func testGetUnderOverwrite(t *testing.T, sc *scope) {
	logPaths(t, sc, "GetPrefix", "PutParts")
	key := sc.key("overwrite")
	res, err := overwrite.Run(t.Context(), sc.s, key, overwrite.Check{Reads: sc.opts.overwriteReads()})
	if err != nil {
		t.Fatal(err)
	}
	for i, m := range res.Mismatches {
		if i == 5 {
			t.Errorf("and %d more such reads", len(res.Mismatches)-5)
			break
		}
		t.Errorf("%s (%d times)", m.Message, m.Count)
	}
	t.Logf("%d writes, %d reads by %d readers (%d of them overlapping a write), %d distinct (bytes, version) pairs that no write made",
		res.Writes, res.Reads, overwrite.Readers, res.Overlapped, len(res.Mismatches))
}
