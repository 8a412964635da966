package writefencetest

import "testing"

// TestOverwriteReads: Get/UnderOverwrite waits for Options.OverwriteReads
// reads when it is positive, else for the full 21,000.
func TestOverwriteReads(t *testing.T) {
	for _, tt := range []struct {
		set  int
		want int64
	}{{0, 21000}, {-1, 21000}, {1, 1}, {3000, 3000}, {50000, 50000}} {
		if got := (&Options{OverwriteReads: tt.set}).overwriteReads(); got != tt.want {
			t.Errorf("OverwriteReads %d: the check waits for %d reads, want %d", tt.set, got, tt.want)
		}
	}
}
