package sim

import "testing"

// requireRetired fails t unless the retirement of the shard ran in the
// runs' tallies (total, over n seeds): a collection of the retired shard
// deleted its blobs, and others were refused before the record was
// deleted, over its floor and from a Fence that saw the record
// (promises 25, 26, 29 and 31).
func requireRetired(t *testing.T, total map[string]int, n int) {
	t.Helper()
	if n < 50 {
		return
	}
	for _, k := range []string{"shard retired", "retired shard's record deleted", "retired shard collected, blobs deleted",
		"retired shard's collection refused, a record", "retired shard's collection refused, a floor",
		"retired shard's collection refused, its Fence saw the record", "retired shard's floor deleted"} {
		if total[k] == 0 {
			t.Errorf("no %q in the histories", k)
		}
	}
}
