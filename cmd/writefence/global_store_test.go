package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestGlobalStoreOnCommandWithoutStore: -store before the name of a
// command that opens no store is refused as -prefix is, not silently
// dropped: the command would not run on the store the user named.
func TestGlobalStoreOnCommandWithoutStore(t *testing.T) {
	for _, args := range [][]string{
		{"-store", "mem://", "demo"},
		{"--store=mem://", "version"},
	} {
		r := wf(t, args...)
		assert.Equal(t, exitUsage, r.code, "%v: %s", args, r)
		assert.Contains(t, r.stderr, "the command takes no -store\n", "%v", args)
	}
}
