package testserver

import (
	"context"
	"testing"

	"go.uber.org/goleak"
)

// LeakOptions are the goroutines a package's TestMain lets outlive its
// tests when it checks for leaks with goleak.VerifyTestMain: those of an
// idle keep-alive connection, which an SDK client's transport keeps after
// its test ends unless the test closes it. An idle connection's read loop
// blocks reading the socket, in persistConn.Read; its write loop waits in
// its select. A response body left open is still caught: its connection's
// read loop waits for the body's end in its own select, not in a read.
// And go-redis's own retry of a failed dial, which ends once one lands.
func LeakOptions() []goleak.Option {
	return []goleak.Option{
		goleak.IgnoreAnyFunction("net/http.(*persistConn).Read"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		// go-redis dials again, once a second, after a connection to a
		// server that failed; the retry ends on its own once one lands.
		goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"),
	}
}

// Keys returns every key a store holds, through its List method (the
// writefence.Lister capability).
func Keys(t testing.TB, s interface {
	List(ctx context.Context, prefix string, fn func(key string) error) error
}) []string {
	t.Helper()
	var keys []string
	check(t, s.List(context.Background(), "", func(k string) error { keys = append(keys, k); return nil }))
	return keys
}

// Flipped returns a copy of b with the lowest bit of byte i flipped: one
// bit of damage, for the tests of decoders and of damaged stored values.
func Flipped(b []byte, i int) []byte {
	c := append([]byte(nil), b...)
	c[i] ^= 1
	return c
}
