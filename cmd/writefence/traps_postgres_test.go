//go:build !writefence_nopostgres && !writefence_nosdk

package main

import (
	"net/url"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPostgresMissingTable: a table that does not exist is named, with the
// init command that creates it, without the ten attempts a push made; init
// creates it and its sequence, and then a push lands.
func TestPostgresMissingTable(t *testing.T) {
	addr, _ := postgresAddress(t)
	u, err := url.Parse(addr)
	require.NoError(t, err)
	table := u.Query().Get("table")
	p := writeFile(t, "segment")
	r := wf(t, "push", "-store", addr, "-writer", "a", "-epoch", "1", "-file", p, "wal", "s")
	assert.Equal(t, exitError, r.code, "%s", r)
	assert.Contains(t, r.stderr, "writefence: table "+table+" does not exist ("+addr+")")
	assert.Contains(t, r.stderr, "to create it, run: writefence init -store '"+addr+"', or pass -create")
	assert.NotContains(t, r.stderr, "attempts")

	r = wf(t, "init", "-json", "-store", addr)
	require.Equal(t, exitOK, r.code, "%s", r)
	assert.Equal(t, "created", jsonOf(t, r)["state"])
	r = wf(t, "push", "-store", addr, "-writer", "a", "-epoch", "1", "-file", p, "wal", "s")
	assert.Equal(t, exitOK, r.code, "%s", r)
}
