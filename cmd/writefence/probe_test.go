package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/writefence/writefence/internal/probecheck"
)

func TestProbe(t *testing.T) {
	for _, addr := range []string{"mem://", fileStore(t)} {
		r := wf(t, "probe", "-store", addr)
		require.Equal(t, exitOK, r.code, "%s: %s", addr, r)
		assert.Contains(t, r.stdout, "trusted: "+addr+" enforces conditional writes")
		for _, c := range probeChecks {
			assert.Contains(t, r.stdout, "ok      "+c+"\n")
		}
		r = wf(t, "probe", "-json", "-store", addr)
		require.Equal(t, exitOK, r.code, "%s", r)
		m := jsonOf(t, r)
		assert.Equal(t, true, m["trusted"])
		assert.Len(t, m["passed"], len(probeChecks))
	}
}

// TestProbeUntrusted: a store that ignores preconditions fails the probe
// with the untrusted status and the check it failed.
func TestProbeUntrusted(t *testing.T) {
	r := wf(t, "probe", "-store", "ignoring://")
	assert.Equal(t, exitUntrusted, r.code, "%s", r)
	assert.Contains(t, r.stdout, "FAILED  "+probecheck.CreateRefused)
	assert.Contains(t, r.stdout, "untrusted: ignoring:// does not enforce conditional writes")

	r = wf(t, "probe", "-json", "-store", "ignoring://")
	assert.Equal(t, exitUntrusted, r.code, "%s", r)
	m := jsonOf(t, r)
	assert.Equal(t, "untrusted", m["outcome"])
	assert.Equal(t, false, m["trusted"])
	assert.Equal(t, probecheck.CreateRefused, m["failed"])
}

// TestProbeHeadlineNamesTheCheck: the one-line verdict says what the store
// did wrong, not always "does not enforce conditional writes".
func TestProbeHeadlineNamesTheCheck(t *testing.T) {
	for _, tc := range []struct{ store, check, headline string }{
		{"ignoring://", probecheck.CreateRefused, "untrusted: ignoring:// does not enforce conditional writes"},
		{"garbling://", probecheck.ReadBack, "untrusted: garbling:// reads back other bytes than it wrote"},
		{"blind://", probecheck.ReadBack, "untrusted: blind:// reads back nothing after a write it acknowledged"},
	} {
		r := wf(t, "probe", "-store", tc.store)
		assert.Equal(t, exitUntrusted, r.code, "%s", r)
		assert.Contains(t, r.stdout, "FAILED  "+tc.check, "%s", r)
		assert.Contains(t, r.stdout, tc.headline, "%s", r)
		if tc.check != probecheck.CreateRefused {
			assert.NotContains(t, r.stdout, "does not enforce conditional writes", "%s", r)
		}
	}
}

func TestProbeKey(t *testing.T) {
	assert.Equal(t, "writefence/_probe", probeKey(""))
	assert.Equal(t, "x/_probe", probeKey("x/"))
}
