package sim

import "testing"

// requireBesideSettle fails t unless, in the runs' tallies (total, over n
// seeds), the operator held a Deposed context of the shard while a Settle
// of its Fence was refused, which must leave it running (promise 18).
func requireBesideSettle(t *testing.T, total map[string]int, n int) {
	t.Helper()
	if n >= 50 && total["settle refused beside a Deposed context"] == 0 {
		t.Errorf("no settle refused beside a Deposed context")
	}
}
