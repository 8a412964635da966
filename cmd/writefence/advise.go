package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
)

// advisedError is an error with what to do about it. It unwraps to the
// error, so its exit status is the error's.
type advisedError struct {
	err    error
	advice string
}

func (e *advisedError) Error() string { return e.err.Error() + "; " + e.advice }
func (e *advisedError) Unwrap() error { return e.err }

// advisers are the advice of the stores that register their own (in
// init): each returns err with advice, or nil when it has none.
var advisers []func(err error, inv *invocation) error

// advise adds what to do to the errors whose cause the user can fix from
// the shell: missing or wrong credentials, a store that does not answer in
// time, TLS against a plain endpoint or a certificate this host does not
// trust. Other errors are returned as they are. The SDKs' errors are
// classified by type, never by their text. After a signal, an error that
// would exit 1 is the interrupt's: this decides the exit status and the
// -json outcome both.
func advise(err error, inv *invocation) error {
	if err == nil {
		return nil
	}
	if code, _ := classify(err); code == exitError && inv.signalled() {
		// The signal's cancellation, which a store client may wrap in an
		// error of its own that keeps no context.Canceled. A more telling
		// status (8: the write may have landed) stays.
		return interrupted(err, inv)
	}
	var advised *advisedError
	if errors.As(err, &advised) {
		return err
	}
	for _, a := range advisers {
		if advised := a(err, inv); advised != nil {
			return advised
		}
	}
	where := inv.where()
	var timeout interface{ Timeout() bool } // net.Error's, without the net package
	switch {
	case errors.Is(err, context.Canceled):
		return interrupted(err, inv)
	case errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &timeout) && timeout.Timeout()):
		t := "its -timeout"
		if inv.timeout > 0 {
			t = "-timeout " + inv.timeout.String()
		}
		advice := fmt.Sprintf("no answer from %s within %s: check that the address and port are right and the server is up, or raise -timeout (0: wait forever)", where, t)
		if valkeyTLS(inv.addr) {
			// A server that does not speak TLS waits for the end of a
			// command line that the TLS handshake never sends.
			advice += "; the address asks for TLS, and a server that does not speak TLS never answers its handshake: use valkey:// without tls=true if the server takes plain connections"
		}
		return &advisedError{err, advice}
	}
	return err
}

// where names the store in advice: its address, once known.
func (inv *invocation) where() string {
	if inv.addr != "" {
		return inv.addr
	}
	return "the store"
}

// valkeyTLS tells whether addr is a Valkey address that asks for TLS.
func valkeyTLS(addr string) bool {
	u, err := url.Parse(addr)
	if err != nil {
		return false
	}
	switch u.Scheme {
	case "valkeys", "rediss", "valkeys+cluster":
		return true
	case "valkey", "redis", "valkey+cluster":
		on, _ := strconv.ParseBool(u.Query().Get("tls"))
		return on
	}
	return false
}

// envList names the environment variables the command read, marking the
// ones that were set; it never prints a value.
//
//lint:ignore U1000 the stores' advisers use it, and a build may leave them all out
func envList(names ...string) string {
	parts := make([]string, len(names))
	for i, n := range names {
		state := "unset"
		if os.Getenv(n) != "" {
			state = "set"
		}
		parts[i] = n + " (" + state + ")"
	}
	return strings.Join(parts, ", ")
}
