package testserver

import (
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// HTTPTransport returns a clone of the default transport whose idle
// connections are closed when the test ends, so that no goroutine of an
// SDK client built on it outlives the test.
func HTTPTransport(t testing.TB) *http.Transport {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(tr.CloseIdleConnections)
	return tr
}

// Transport is an http.RoundTripper that counts the requests it sends, the
// writes among them (PUT and POST, the writes of either API) and the
// response body bytes its client reads.
type Transport struct {
	base  *http.Transport
	kinds sync.Map // request kind (Kind) -> *atomic.Int64
	reqs  atomic.Int64
	puts  atomic.Int64
	read  atomic.Int64
	reads atomic.Int64 // GET response body bytes only
}

// NewTransport returns a counting transport over HTTPTransport(t).
func NewTransport(t testing.TB) *Transport { return &Transport{base: HTTPTransport(t)} }

// RoundTrip implements http.RoundTripper.
func (c *Transport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.reqs.Add(1)
	n, _ := c.kinds.LoadOrStore(Kind(r), new(atomic.Int64))
	n.(*atomic.Int64).Add(1)
	if r.Method == http.MethodPut || r.Method == http.MethodPost {
		c.puts.Add(1)
	}
	resp, err := c.base.RoundTrip(r)
	if resp != nil {
		body := &countingBody{ReadCloser: resp.Body, n: &c.read}
		if r.Method == http.MethodGet {
			body.get = &c.reads
		}
		resp.Body = body
	}
	return resp, err
}

// Kind names what a request of S3 or GCS does: its method, or "LIST"
// for a listing of objects (a GET with S3's list-type or GCS's object
// collection path).
func Kind(r *http.Request) string {
	q := r.URL.Query()
	switch {
	case r.Method != http.MethodGet:
		return r.Method
	case q.Has("list-type"), strings.HasSuffix(r.URL.Path, "/o") && q.Has("prefix"):
		return "LIST"
	}
	return r.Method
}

// Kinds returns the requests sent so far by Kind.
func (c *Transport) Kinds() map[string]int64 {
	out := map[string]int64{}
	c.kinds.Range(func(k, v any) bool {
		out[k.(string)] = v.(*atomic.Int64).Load()
		return true
	})
	return out
}

// Requests returns the requests sent so far.
func (c *Transport) Requests() int64 { return c.reqs.Load() }

// Writes returns the PUT and POST requests sent so far.
func (c *Transport) Writes() int64 { return c.puts.Load() }

// BytesRead returns the response body bytes read so far.
func (c *Transport) BytesRead() int64 { return c.read.Load() }

// GetBytesRead returns the GET response body bytes read so far.
func (c *Transport) GetBytesRead() int64 { return c.reads.Load() }

type countingBody struct {
	io.ReadCloser
	n, get *atomic.Int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	if b.get != nil {
		b.get.Add(int64(n))
	}
	return n, err
}
