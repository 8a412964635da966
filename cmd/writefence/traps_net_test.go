//go:build (!writefence_nominio || !writefence_nogcs || !writefence_novalkey || !writefence_nodynamodb || !writefence_noetcd || !writefence_noazblob || !writefence_nopostgres) && !writefence_nosdk

package main

import (
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// refusingPort returns a 127.0.0.1 address where nothing listens: a port
// taken and let go.
func refusingPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}

// countingProxy forwards HTTP requests to target (http://host:port) and
// counts them; it returns its host:port and the count so far.
func countingProxy(t *testing.T, target string) (string, func() int64) {
	t.Helper()
	u, err := url.Parse(target)
	require.NoError(t, err)
	var n atomic.Int64
	rp := httputil.NewSingleHostReverseProxy(u)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://"), n.Load
}

// assertMissing runs each command on addr, whose bucket, table or
// container (missing, such as "bucket mirrors") does not exist, and
// asserts that each fails naming it, with the init command that creates
// it, and retries nothing: one request each, where requests counts them
// (nil: not counted). It returns the runs.
func assertMissing(t *testing.T, addr, missing string, requests func() int64, commands ...[]string) []result {
	t.Helper()
	var rs []result
	for _, args := range commands {
		var before int64
		if requests != nil {
			before = requests()
		}
		r := wf(t, append(args, "-store", addr)...)
		assert.Equal(t, exitError, r.code, "%v: %s", args, r)
		assert.Contains(t, r.stderr, "writefence: "+missing+" does not exist ("+addr+")", "%v", args)
		assert.Contains(t, r.stderr, "to create it, run: writefence init -store '"+addr+"'", "%v", args)
		assert.NotContains(t, r.stderr, "attempts", "%v: nothing retried", args)
		if requests != nil {
			assert.EqualValues(t, 1, requests()-before, "%v: one request, nothing retried", args)
		}
		rs = append(rs, r)
	}
	return rs
}

// assertInitCreates runs init on addr, whose bucket, table or container
// (missing) does not exist, asserts it says it created it, and that a
// push of the file p then lands.
func assertInitCreates(t *testing.T, addr, missing, p string) {
	t.Helper()
	r := wf(t, "init", "-store", addr)
	require.Equal(t, exitOK, r.code, "%s", r)
	assert.Equal(t, "created: "+addr+" ("+missing+")\n", r.stdout)
	r = wf(t, "push", "-store", addr, "-writer", "a", "-epoch", "1", "-file", p, "wal", "s")
	assert.Equal(t, exitOK, r.code, "%s", r)
}

// TestConnectionRefusedFailsFast: on every store, an address where nothing
// listens fails at once with what to check, not after the client's
// retries or the whole -timeout (etcd waited 61 s), and before any
// request: reads and writes alike.
func TestConnectionRefusedFailsFast(t *testing.T) {
	awsCredentials(t, "AKIDEXAMPLE", "example-secret")
	azureSharedKey(t, "devstoreaccount1", "ZXhhbXBsZS1rZXk=")
	t.Setenv("PGPASSWORD", "example")
	noValkeyPassword(t)
	p := writeFile(t, "x")
	for scheme, addr := range map[string]func(hp string) string{
		"s3":             func(hp string) string { return "s3://mirrors?secure=false&endpoint=" + hp },
		"gs":             func(hp string) string { return "gs://mirrors?endpoint=http://" + hp },
		"valkey":         func(hp string) string { return "valkey://" + hp + "/0" },
		"valkey+cluster": func(hp string) string { return "valkey+cluster://" + hp },
		"dynamodb":       func(hp string) string { return "dynamodb://mirrors?endpoint=http://" + hp },
		"etcd":           func(hp string) string { return "etcd://" + hp + "/mirrors" },
		"azblob":         func(hp string) string { return "azblob://mirrors?endpoint=http://" + hp + "/devstoreaccount1" },
		"postgres":       func(hp string) string { return "postgres://writer@" + hp + "/mirrors?sslmode=disable" },
	} {
		t.Run(scheme, func(t *testing.T) {
			if _, ok := openers[scheme]; !ok {
				t.Skipf("%s:// is not in this build", scheme)
			}
			hp := refusingPort(t)
			store := addr(hp)
			for _, args := range [][]string{
				{"latest", "wal", "s"},
				{"push", "-writer", "a", "-epoch", "1", "-file", p, "wal", "s"},
			} {
				r := wf(t, append(args, "-timeout", "20s", "-store", store)...)
				assert.Equal(t, exitError, r.code, "%v: %s", args, r)
				assert.Contains(t, r.stderr, "writefence: nothing listens at "+hp+" (from ", "%v", args)
				assert.Contains(t, r.stderr, "connection refused; check the host and port in -store and $WRITEFENCE_STORE, and that the server is up", "%v", args)
				assert.NotContains(t, r.stderr, "attempts", "%v: nothing was retried", args)
			}
		})
	}
}
