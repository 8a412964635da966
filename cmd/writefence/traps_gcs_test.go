//go:build !writefence_nogcs && !writefence_nosdk

package main

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestGCSMissingBucket: a Cloud Storage bucket that does not exist is
// named, with the init command that creates it, after one request: a read
// no longer says the shard was not found (exit 3) and a push no longer
// ends with an unknown outcome (exit 8) over a 404 that names nothing.
// init creates it, and then a push lands.
func TestGCSMissingBucket(t *testing.T) {
	bucket, endpoint, c := gcsBucket(t)
	require.NoError(t, c.Bucket(bucket).Delete(context.Background()))
	proxy, requests := countingProxy(t, endpoint)
	addr := "gs://" + bucket + "?endpoint=http://" + proxy
	p := writeFile(t, "segment")
	assertMissing(t, addr, "bucket "+bucket, requests,
		[]string{"latest", "wal", "s"},
		[]string{"push", "-writer", "a", "-epoch", "1", "-file", p, "wal", "s"},
		[]string{"gc", "wal", "s"},
	)
	// The emulator serves reads only at its own host: the proxy is left.
	addr = "gs://" + bucket + "?endpoint=" + endpoint
	assertInitCreates(t, addr, "bucket "+bucket, p)
	r := wf(t, "latest", "-json", "-store", addr, "wal", "s")
	require.Equal(t, exitOK, r.code, "%s", r)
	assert.EqualValues(t, 1, jsonOf(t, r)["epoch"])
}
