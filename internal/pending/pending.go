// Package pending runs a call that blocks in the background, for a test
// that checks it is still waiting and later takes its result: a second
// candidate's campaign while another leads, a write held at a gate. It is
// not part of the public API.
package pending

import "testing"

// Call is a call running in the background.
type Call struct{ done chan error }

// Start runs fn in the background.
func Start(fn func() error) *Call {
	c := &Call{done: make(chan error, 1)}
	go func() { c.done <- fn() }()
	return c
}

// RequireBlocked fails the test at once if the call has returned: what
// names it in the message.
func (c *Call) RequireBlocked(t testing.TB, what string) {
	t.Helper()
	select {
	case err := <-c.done:
		t.Fatalf("%s returned while it should wait: %v", what, err)
	default:
	}
}

// Wait returns the call's error once it returned.
func (c *Call) Wait() error { return <-c.done }
