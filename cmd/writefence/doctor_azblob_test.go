//go:build !writefence_noazblob && !writefence_nosdk

package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDoctorAzblob: on Azurite, the lifecycle rules an Azure account
// keeps out of the blob API's reach are a warning that says where to look;
// reads under overwrite are checked as on every store.
func TestDoctorAzblob(t *testing.T) {
	addr, _ := azblobAddress(t)
	r := wf(t, "doctor", "-json", "-overwrite", "2s", "-store", addr)
	require.Equal(t, exitOK, r.code, "%s", r)
	fs, _ := doctorLines(t, r)
	lc := findingsOf(fs, "azblob.lifecycle")
	require.Len(t, lc, 1, "%s", r)
	assert.Equal(t, levelWarn, lc[0].Level)
	assert.Contains(t, lc[0].Fix, "Lifecycle management")
	ow := findingsOf(fs, "reads.overwrite")
	require.Len(t, ow, 1, "%s", r)
	assert.Equal(t, levelOK, ow[0].Level, "%s", r)
}
