//go:build !writefence_nogcs && !writefence_nosdk

package main

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence/internal/testserver"
)

// TestGCSMissingBucket: a Cloud Storage bucket that does not exist is
// named, with the init command that creates it, after one request: a read
// no longer says the shard was not found (exit 3) and a push no longer
// ends with an unknown outcome (exit 8) over a 404 that names nothing.
// init creates it, and then a push lands.
func TestGCSMissingBucket(t *testing.T) {
	endpoint := testserver.GCSEndpoint(t)
	c := testserver.GCSClient(t, endpoint, nil)
	bucket := testserver.GCSBucket(t, c)
	require.NoError(t, c.Bucket(bucket).Delete(context.Background()))
	proxy, requests := countingProxy(t, endpoint)
	addr := "gs://" + bucket + "?endpoint=http://" + proxy
	p := writeFile(t, "segment")
	for _, args := range [][]string{
		{"latest", "wal", "s"},
		{"push", "-writer", "a", "-epoch", "1", "-file", p, "wal", "s"},
		{"gc", "wal", "s"},
	} {
		before := requests()
		r := wf(t, append(args, "-store", addr)...)
		assert.Equal(t, exitError, r.code, "%v: %s", args, r)
		assert.Contains(t, r.stderr, "writefence: bucket "+bucket+" does not exist ("+addr+")", "%v", args)
		assert.Contains(t, r.stderr, "to create it, run: writefence init -store '"+addr+"'", "%v", args)
		assert.EqualValues(t, 1, requests()-before, "%v: one request, nothing retried", args)
	}
	// The emulator serves reads only at its own host: the proxy is left.
	addr = "gs://" + bucket + "?endpoint=" + endpoint
	r := wf(t, "init", "-store", addr)
	require.Equal(t, exitOK, r.code, "%s", r)
	assert.Equal(t, "created: "+addr+" (bucket "+bucket+")\n", r.stdout)
	r = wf(t, "push", "-store", addr, "-writer", "a", "-epoch", "1", "-file", p, "wal", "s")
	assert.Equal(t, exitOK, r.code, "%s", r)
	r = wf(t, "latest", "-json", "-store", addr, "wal", "s")
	require.Equal(t, exitOK, r.code, "%s", r)
	assert.EqualValues(t, 1, jsonOf(t, r)["epoch"])
}
