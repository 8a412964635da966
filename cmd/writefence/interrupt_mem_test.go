package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestInterruptedOnEmptyMem: an interrupt ends ls with its status on an
// in-memory store too, where there is nothing to list and no request
// that could notice the interrupt.
func TestInterruptedOnEmptyMem(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, args := range [][]string{{"ls", "-store", "mem://"}, {"ls", "-json", "-store", "mem://", "wal"}} {
		var stdout, stderr bytes.Buffer
		code := run(ctx, args, &stdout, &stderr)
		assert.Equal(t, exitInterrupted, code, "%v: %s%s", args, stdout.String(), stderr.String())
		assert.NotContains(t, strings.ToLower(stdout.String()+stderr.String()), "violation")
	}
}
