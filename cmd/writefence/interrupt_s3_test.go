//go:build !writefence_nominio && !writefence_nosdk

package main

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestS3PushInterrupted: a push that a signal stops while it waits on the
// store says it was interrupted and what to do, not only "context
// canceled".
func TestS3PushInterrupted(t *testing.T) {
	silent, accepted := silentServer(t)
	awsCredentials(t, "AKIDEXAMPLE", "example-secret")
	p := writeFile(t, "x")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan result)
	go func() {
		done <- wfContext(ctx, "push", "-timeout", "0", "-store", "s3://mirrors?secure=false&endpoint="+silent,
			"-writer", "a", "-epoch", "1", "-file", p, "wal", "s")
	}()
	// Wait for the connection that carries a request: the command is then
	// waiting on the store's answer.
	for sent := false; !sent; {
		select {
		case c := <-accepted:
			require.NoError(t, c.SetReadDeadline(time.Now().Add(time.Minute)))
			n, _ := c.Read(make([]byte, 1))
			sent = n == 1
		case <-time.After(time.Minute):
			cancel()
			t.Fatal("the command never sent a request")
		}
	}
	cancel()
	r := <-done
	assert.Equal(t, exitInterrupted, r.code, "%s", r)
	assert.Contains(t, r.stderr, "writefence: push interrupted (SIGINT or SIGTERM): ")
	assert.Contains(t, r.stderr, "the push may have landed: run the same command again, which succeeds if it did, or writefence latest to see what the store holds")
}
