package writefence_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/storage"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/api/googleapi"
	"google.golang.org/api/option"

	"github.com/writefence/writefence"
)

// The unit tier runs the adapter over the real client against a local HTTP
// server that answers what each test needs and records what it is sent.

const gcsTestBucket = "unit-bucket"

// gcsRequest is what the test server saw of one request.
type gcsRequest struct {
	Method string
	Path   string
	Query  map[string][]string
	Header http.Header
	Body   []byte
}

// gcsRecorder logs every request the test server receives.
type gcsRecorder struct {
	mu   sync.Mutex // guards reqs
	reqs []gcsRequest
}

func (r *gcsRecorder) requests() []gcsRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]gcsRequest(nil), r.reqs...)
}

// newGCSUnitStore starts a server running handler and returns a store whose
// client talks to it. The client makes no retries unless retry is true, so
// a failing read returns at once instead of backing off until the deadline.
func newGCSUnitStore(t *testing.T, retry bool, handler http.HandlerFunc) (*writefence.GCSConditionalStore, *gcsRecorder) {
	t.Helper()
	rec := &gcsRecorder{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		rec.mu.Lock()
		rec.reqs = append(rec.reqs, gcsRequest{Method: r.Method, Path: r.URL.Path, Query: r.URL.Query(), Header: r.Header.Clone(), Body: body})
		rec.mu.Unlock()
		handler(w, r)
	}))
	t.Cleanup(srv.Close)
	return newGCSClientStore(t, srv.URL, retry), rec
}

// newGCSClientStore returns a store over a client for the server at base.
func newGCSClientStore(t *testing.T, base string, retry bool) *writefence.GCSConditionalStore {
	t.Helper()
	client, err := storage.NewClient(context.Background(),
		option.WithEndpoint(base+"/storage/v1/"),
		option.WithoutAuthentication())
	require.NoError(t, err)
	t.Cleanup(func() { _ = client.Close() })
	if !retry {
		client.SetRetry(storage.WithPolicy(storage.RetryNever))
	}
	return writefence.NewGCSConditionalStore(client, gcsTestBucket)
}

// gcsJSONError answers like the JSON API does on failure.
func gcsJSONError(w http.ResponseWriter, code int) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	fmt.Fprintf(w, `{"error":{"code":%d,"message":%q}}`, code, http.StatusText(code))
}

// gcsInserted answers a successful object insert with generation gen.
func gcsInserted(w http.ResponseWriter, r *http.Request, gen int64) {
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"kind":"storage#object","bucket":%q,"name":%q,"generation":"%d","metageneration":"1"}`,
		gcsTestBucket, r.URL.Query().Get("name"), gen)
}

func gcsUnitCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestGCSErrorMapping drives each operation into each server answer and
// checks how the adapter classifies it, and that the client's error stays
// reachable beside our sentinel.
func TestGCSErrorMapping(t *testing.T) {
	type want int
	const (
		wantOther want = iota // neither ErrConflict nor ErrNotFound
		wantConflict
		wantNotFound
		wantRateLimit
		wantNil
	)
	cases := []struct {
		op     string // get, put (update), create, delete
		status int
		want   want
	}{
		{"put", 412, wantConflict},
		{"create", 412, wantConflict},
		{"put", 429, wantRateLimit},
		{"put", 404, wantOther},
		{"put", 500, wantOther},
		{"put", 503, wantOther},
		{"get", 404, wantNotFound},
		{"get", 429, wantRateLimit},
		{"get", 500, wantOther},
		{"get", 403, wantOther},
		{"delete", 404, wantNil},
		{"delete", 429, wantRateLimit},
		{"delete", 500, wantOther},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%s_%d", tc.op, tc.status), func(t *testing.T) {
			store, _ := newGCSUnitStore(t, false, func(w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodGet && tc.status == http.StatusNotFound {
					// The XML API answers a missing object with a bare 404.
					w.WriteHeader(http.StatusNotFound)
					return
				}
				gcsJSONError(w, tc.status)
			})
			err := gcsUnitOp(t, store, tc.op)
			if tc.want == wantNil {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Equal(t, tc.want == wantConflict, errors.Is(err, writefence.ErrConflict), "ErrConflict: %v", err)
			assert.Equal(t, tc.want == wantNotFound, errors.Is(err, writefence.ErrNotFound), "ErrNotFound: %v", err)
			var rl *writefence.GCSRateLimitError
			assert.Equal(t, tc.want == wantRateLimit, errors.As(err, &rl), "GCSRateLimitError: %v", err)
			assert.Regexp(t, `^writefence: gcs `, err.Error())
			if tc.want == wantNotFound {
				assert.ErrorIs(t, err, storage.ErrObjectNotExist)
				return
			}
			var gerr *googleapi.Error
			require.ErrorAs(t, err, &gerr)
			assert.Equal(t, tc.status, gerr.Code)
		})
	}
}

// gcsUnitOp runs one operation of the error table.
func gcsUnitOp(t *testing.T, store *writefence.GCSConditionalStore, op string) error {
	ctx := gcsUnitCtx(t)
	var err error
	switch op {
	case "get":
		_, _, err = store.Get(ctx, "k")
	case "put":
		_, err = store.PutIfVersion(ctx, "k", []byte("v"), "7")
	case "create":
		_, err = store.PutIfVersion(ctx, "k", []byte("v"), "")
	case "delete":
		err = store.Delete(ctx, "k")
	default:
		t.Fatalf("unknown op %q", op)
	}
	return err
}

// TestGCSTransportError points the store at a closed port: the failure is
// neither a conflict nor a missing key.
func TestGCSTransportError(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	store := newGCSClientStore(t, "http://"+addr, false)

	for _, op := range []string{"get", "put", "create", "delete"} {
		t.Run(op, func(t *testing.T) {
			err := gcsUnitOp(t, store, op)
			require.Error(t, err)
			assert.NotErrorIs(t, err, writefence.ErrConflict)
			assert.NotErrorIs(t, err, writefence.ErrNotFound)
			assert.Regexp(t, `^writefence: gcs `, err.Error())
			var opErr *net.OpError
			assert.ErrorAs(t, err, &opErr, "the dial error stays reachable")
		})
	}
}

// TestGCSMalformedVersion refuses tokens that are not generations before
// sending anything.
func TestGCSMalformedVersion(t *testing.T) {
	store, rec := newGCSUnitStore(t, true, func(w http.ResponseWriter, r *http.Request) {
		gcsInserted(w, r, 1)
	})
	for _, tok := range []string{"abc", "-1", "0", "1.5", "+1", "01", " 1", "1 ", "9223372036854775808", "0x10"} {
		t.Run(strconv.Quote(tok), func(t *testing.T) {
			v, err := store.PutIfVersion(gcsUnitCtx(t), "k", []byte("v"), tok)
			require.Error(t, err)
			assert.Empty(t, v)
			assert.ErrorIs(t, err, writefence.ErrInvalidArgument)
			var iae *writefence.InvalidArgumentError
			require.ErrorAs(t, err, &iae)
			assert.Equal(t, "expectVersion", iae.Arg)
			assert.NotErrorIs(t, err, writefence.ErrConflict)
		})
	}
	assert.Empty(t, rec.requests(), "a malformed token must not reach the server")
}

// TestGCSContextPassesThrough returns a cancelled context's error as it is.
func TestGCSContextPassesThrough(t *testing.T) {
	store, _ := newGCSUnitStore(t, true, func(w http.ResponseWriter, r *http.Request) {
		gcsJSONError(w, http.StatusServiceUnavailable)
	})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, _, err := store.Get(ctx, "k")
	assert.ErrorIs(t, err, context.Canceled)
	assert.NotErrorIs(t, err, writefence.ErrNotFound)
	_, err = store.PutIfVersion(ctx, "k", []byte("v"), "")
	assert.ErrorIs(t, err, context.Canceled)
	assert.NotErrorIs(t, err, writefence.ErrConflict)
}
