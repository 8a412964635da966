//go:build !writefence_nogcs && !writefence_nosdk

package writefence_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"log"
	"mime"
	"mime/multipart"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/storage"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/api/googleapi"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/testserver"
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
func newGCSUnitStore(t *testing.T, retry bool, handler http.HandlerFunc) (*writefence.GCSStore, *gcsRecorder) {
	t.Helper()
	store, rec, _ := newGCSUnitServer(t, retry, handler)
	return store, rec
}

// newGCSUnitServer is newGCSUnitStore, and also returns the server's URL.
func newGCSUnitServer(t *testing.T, retry bool, handler http.HandlerFunc) (*writefence.GCSStore, *gcsRecorder, string) {
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
	return newGCSClientStore(t, srv.URL, retry), rec, srv.URL
}

// newGCSClientStore returns a store over a client for the server at base.
func newGCSClientStore(t *testing.T, base string, retry bool) *writefence.GCSStore {
	t.Helper()
	client := testserver.GCSClient(t, base, nil)
	if !retry {
		client.SetRetry(storage.WithPolicy(storage.RetryNever))
	}
	return writefence.NewGCSStore(client, gcsTestBucket)
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

// gcsUnitCtx bounds a call on a unit server: an SDK that came to retry an
// answer for ever fails the test in minutes, not at the run's timeout. The
// bound is far above what any call takes (a 17 MiB upload under -race on
// a loaded machine has taken over 10 s): it bounds a fault, not a time.
func gcsUnitCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
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
		wantPermission
		wantUnsupported
		wantNil
	)
	cases := []struct {
		op     string // get, put (update), create, delete, list
		status int
		want   want
	}{
		{"put", 412, wantConflict}, {"create", 412, wantConflict}, {"put", 429, wantRateLimit},
		{"put", 404, wantUnsupported}, {"create", 404, wantUnsupported}, {"list", 404, wantUnsupported}, {"put", 500, wantOther}, {"put", 503, wantOther},
		{"get", 404, wantNotFound}, {"get", 429, wantRateLimit}, {"get", 500, wantOther},
		{"delete", 404, wantNil}, {"delete", 429, wantRateLimit}, {"delete", 500, wantOther},
		{"get", 401, wantPermission}, {"get", 403, wantPermission}, {"put", 401, wantPermission},
		{"put", 403, wantPermission}, {"create", 403, wantPermission}, {"delete", 403, wantPermission},
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
			assert.Equal(t, tc.want == wantRateLimit, strings.Contains(err.Error(), ": rate limited (http 429), retry after a backoff: "),
				"rate limit: %v", err)
			assert.Equal(t, tc.want == wantPermission, errors.Is(err, fs.ErrPermission), "fs.ErrPermission: %v", err)
			assert.Equal(t, tc.want == wantUnsupported, errors.Is(err, errors.ErrUnsupported), "errors.ErrUnsupported: %v", err)
			assert.Regexp(t, `^writefence: gcs `, err.Error())
			// Both our error, with its context, and the client's are
			// reachable.
			var se *writefence.StoreError
			require.ErrorAs(t, err, &se)
			assert.Equal(t, "k", se.Key)
			assert.Equal(t, map[string]string{"get": "gcs get", "put": "gcs put", "create": "gcs put", "delete": "gcs delete", "list": "gcs list"}[tc.op], se.Op)
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
func gcsUnitOp(t *testing.T, store *writefence.GCSStore, op string) error {
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
	case "list":
		err = store.List(ctx, "k", func(string) error { return nil })
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

// TestGCSMalformedVersion: a token that is not a generation in its
// canonical form was never issued, so it cannot equal the current version:
// a conflict, decided before sending anything, as on every adapter.
func TestGCSMalformedVersion(t *testing.T) {
	store, rec := newGCSUnitStore(t, true, func(w http.ResponseWriter, r *http.Request) {
		gcsInserted(w, r, 1)
	})
	for _, tok := range []string{"abc", "-1", "0", "1.5", "+1", "01", " 1", "1 ", "9223372036854775808", "0x10"} {
		t.Run(strconv.Quote(tok), func(t *testing.T) {
			v, err := store.PutIfVersion(gcsUnitCtx(t), "k", []byte("v"), tok)
			require.ErrorIs(t, err, writefence.ErrConflict)
			assert.Empty(t, v)
			assert.NotErrorIs(t, err, writefence.ErrInvalidArgument)
			assert.NotErrorIs(t, err, writefence.ErrNotFound)
			var se *writefence.StoreError
			require.ErrorAs(t, err, &se)
			assert.Equal(t, "gcs put", se.Op)
			assert.Equal(t, "k", se.Key)
			assert.Contains(t, err.Error(), "is not a gcs object generation")
			_, err = writefence.PutParts(gcsUnitCtx(t), store, "k", [][]byte{[]byte("v"), []byte("w")}, tok)
			require.ErrorIs(t, err, writefence.ErrConflict, "PutParts")
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

// TestGCSUploadIsOneConditionalRequest checks what goes on the wire for a
// create-only put and an update: one multipart insert carrying the
// generation precondition, never a resumable session, even for a body
// larger than the client's default 16 MiB chunk.
func TestGCSUploadIsOneConditionalRequest(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, expect, wantMatch string
		size                    int
	}{
		{"create", "", "0", 100},
		{"update", "7", "7", 100},
		{"update_over_chunk_size", "123456789012", "123456789012", 17 << 20},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			store, rec := newGCSUnitStore(t, true, func(w http.ResponseWriter, r *http.Request) {
				gcsInserted(w, r, 99)
			})
			data := bytes.Repeat([]byte("r"), tc.size)
			v, err := store.PutIfVersion(gcsUnitCtx(t), "dir/k", data, tc.expect)
			require.NoError(t, err)
			assert.Equal(t, "99", v, "the new version is the generation the server answered")

			reqs := rec.requests()
			require.Len(t, reqs, 1, "one request per put")
			req := reqs[0]
			assert.Equal(t, http.MethodPost, req.Method)
			assert.Equal(t, "/upload/storage/v1/b/"+gcsTestBucket+"/o", req.Path)
			assert.Equal(t, []string{"multipart"}, req.Query["uploadType"], "not a resumable session")
			assert.Equal(t, []string{tc.wantMatch}, req.Query["ifGenerationMatch"])
			assert.Equal(t, []string{"dir/k"}, req.Query["name"])
			for _, p := range []string{"ifGenerationNotMatch", "ifMetagenerationMatch", "ifMetagenerationNotMatch", "upload_id"} {
				assert.NotContains(t, req.Query, p)
			}

			meta, media := gcsSplitMultipart(t, req)
			assert.Equal(t, data, media, "the body is the data, whole")
			var sum [4]byte
			binary.BigEndian.PutUint32(sum[:], crc32.Checksum(data, crc32.MakeTable(crc32.Castagnoli)))
			assert.Equal(t, base64.StdEncoding.EncodeToString(sum[:]), meta["crc32c"], "the server is given the checksum to verify")
			assert.Equal(t, "application/octet-stream", meta["contentType"])
		})
	}
}

// gcsSplitMultipart returns the metadata and media parts of an insert.
func gcsSplitMultipart(t *testing.T, req gcsRequest) (map[string]any, []byte) {
	t.Helper()
	mt, params, err := mime.ParseMediaType(req.Header.Get("Content-Type"))
	require.NoError(t, err)
	require.Equal(t, "multipart/related", mt)
	mr := multipart.NewReader(bytes.NewReader(req.Body), params["boundary"])
	p, err := mr.NextPart()
	require.NoError(t, err)
	var meta map[string]any
	require.NoError(t, json.NewDecoder(p).Decode(&meta))
	p, err = mr.NextPart()
	require.NoError(t, err)
	media, err := io.ReadAll(p)
	require.NoError(t, err)
	_, err = mr.NextPart()
	require.ErrorIs(t, err, io.EOF, "two parts only")
	return meta, media
}

// TestGCSUploadNotRetried shows the client, on its default retry policy,
// sends a conditional put once even when the answer is one it retries for
// other calls: the unbuffered body cannot be sent again.
func TestGCSUploadNotRetried(t *testing.T) {
	for _, status := range []int{http.StatusServiceUnavailable, http.StatusTooManyRequests} {
		t.Run(strconv.Itoa(status), func(t *testing.T) {
			store, rec := newGCSUnitStore(t, true, func(w http.ResponseWriter, r *http.Request) {
				gcsJSONError(w, status)
			})
			_, err := store.PutIfVersion(gcsUnitCtx(t), "k", []byte("v"), "5")
			require.Error(t, err)
			assert.NotErrorIs(t, err, writefence.ErrConflict)
			assert.Len(t, rec.requests(), 1)
		})
	}
}

// TestGCSGetVersionFromResponse takes the version from the generation
// header of the response that carried the bytes.
func TestGCSGetVersionFromResponse(t *testing.T) {
	store, rec := newGCSUnitStore(t, false, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Goog-Generation", "1712345678901234")
		_, _ = io.WriteString(w, "payload")
	})
	data, v, err := store.Get(gcsUnitCtx(t), "dir/k")
	require.NoError(t, err)
	assert.Equal(t, "payload", string(data))
	assert.Equal(t, "1712345678901234", v)
	reqs := rec.requests()
	require.Len(t, reqs, 1)
	assert.Equal(t, "/"+gcsTestBucket+"/dir/k", reqs[0].Path)
}

// TestGCSGetWithoutGeneration refuses bytes that come without a version.
func TestGCSGetWithoutGeneration(t *testing.T) {
	store, _ := newGCSUnitStore(t, false, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "payload")
	})
	_, v, err := store.Get(gcsUnitCtx(t), "k")
	require.Error(t, err)
	assert.Empty(t, v)
	assert.NotErrorIs(t, err, writefence.ErrNotFound)
	assert.NotErrorIs(t, err, writefence.ErrConflict)
}

// TestGCSGetBounded covers the read limit: an object at the limit is read,
// one whose announced size exceeds it is refused without reading its body
// (the server here never sends that body, so reading it would hang until
// the deadline), and one of unannounced size that never ends is cut off one
// byte past the limit.
func TestGCSGetBounded(t *testing.T) {
	const limit = 1000
	cases := []struct {
		name    string
		handler http.HandlerFunc
		wantLen int // -1: too large
	}{
		{"at_limit", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Goog-Generation", "3")
			w.Header().Set("Content-Length", strconv.Itoa(limit))
			_, _ = w.Write(bytes.Repeat([]byte("a"), limit))
		}, limit},
		{"announced_over_limit", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Goog-Generation", "3")
			w.Header().Set("Content-Length", strconv.Itoa(limit+1))
			w.WriteHeader(http.StatusOK)
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		}, -1},
		{"endless_unannounced", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Goog-Generation", "3")
			chunk := bytes.Repeat([]byte("b"), 512)
			for r.Context().Err() == nil {
				if _, err := w.Write(chunk); err != nil {
					return
				}
				w.(http.Flusher).Flush()
			}
		}, -1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			store, _ := newGCSUnitStore(t, false, tc.handler)
			store.MaxObjectSize = limit
			data, v, err := store.Get(gcsUnitCtx(t), "big")
			if tc.wantLen >= 0 {
				require.NoError(t, err)
				assert.Len(t, data, tc.wantLen)
				assert.Equal(t, "3", v)
				return
			}
			assert.Nil(t, data)
			require.ErrorIs(t, err, writefence.ErrTooLarge)
			var se *writefence.StoreError
			require.ErrorAs(t, err, &se)
			assert.Equal(t, &writefence.StoreError{Op: "gcs get", Key: "big", Err: se.Err}, se)
			assert.Equal(t, fmt.Sprintf("writefence: gcs get big: object too large: more than %d bytes", limit), err.Error())
		})
	}
}

// gcsFenceServer answers the requests of a Fence pushing one record: a
// read finds the object absent, an insert lands at generation 1 and up.
// refuse, when set, answers each request instead with the status it
// returns (0: answer normally).
type gcsFenceServer struct {
	mu     sync.Mutex // guards the fields below
	refuse func(r *http.Request) int
	gen    int64
}

func (s *gcsFenceServer) setRefuse(f func(r *http.Request) int) {
	s.mu.Lock()
	s.refuse = f
	s.mu.Unlock()
}

func (s *gcsFenceServer) serve(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	refuse := s.refuse
	s.mu.Unlock()
	if refuse != nil {
		if status := refuse(r); status != 0 {
			gcsJSONError(w, status)
			return
		}
	}
	if r.Method == http.MethodGet {
		w.WriteHeader(http.StatusNotFound)
		return
	}
	s.mu.Lock()
	s.gen++
	gen := s.gen
	s.mu.Unlock()
	gcsInserted(w, r, gen)
}

// TestGCSFencePermissionIsFinal: a Push whose read or write is refused
// with a 401 or a 403 returns, after that one request, an error matching
// fs.ErrPermission that still reaches the *googleapi.Error; the refused
// write wrote nothing, so its outcome is not unknown.
func TestGCSFencePermissionIsFinal(t *testing.T) {
	for _, status := range []int{http.StatusUnauthorized, http.StatusForbidden} {
		t.Run(strconv.Itoa(status), func(t *testing.T) {
			srv := &gcsFenceServer{}
			store, rec := newGCSUnitStore(t, false, srv.serve)
			ctx, trace := testserver.Traced(gcsUnitCtx(t))
			warm := &writefence.Fence{Store: store}
			require.NoError(t, warm.Push(ctx, "wal", "0", "w", 1, []byte("one")))
			srv.setRefuse(func(*http.Request) int { return status })

			for _, tc := range []struct {
				name   string
				f      *writefence.Fence
				method string
			}{
				{"write on the remembered version", warm, http.MethodPost},
				{"cold read", &writefence.Fence{Store: store}, http.MethodGet},
			} {
				before := len(rec.requests())
				err := tc.f.Push(ctx, "wal", "0", "w", 2, []byte("two"))
				require.ErrorIs(t, err, fs.ErrPermission, tc.name)
				assert.NotErrorIs(t, err, writefence.ErrOutcomeUnknown, tc.name)
				var gerr *googleapi.Error
				require.ErrorAs(t, err, &gerr, tc.name)
				assert.Equal(t, status, gerr.Code, tc.name)
				reqs := rec.requests()[before:]
				require.Len(t, reqs, 1, "%s: one request, never retried: %v", tc.name, err)
				assert.Equal(t, tc.method, reqs[0].Method, tc.name)
			}
			assert.Equal(t, [3]int64{2, 2, 0}, trace.Counts(), "reads, writes, back-offs: the push that landed, then one request each, nothing retried")
		})
	}
}

// TestGCSFenceRetriesRateLimit: a 429 is transient: the Fence backs off
// and tries again, on a read and on a write (whose outcome the next read
// resolves), and the push lands.
func TestGCSFenceRetriesRateLimit(t *testing.T) {
	for _, method := range []string{http.MethodGet, http.MethodPost} {
		t.Run(method, func(t *testing.T) {
			srv := &gcsFenceServer{}
			var limited atomic.Bool
			srv.setRefuse(func(r *http.Request) int {
				if r.Method == method && limited.CompareAndSwap(false, true) {
					return http.StatusTooManyRequests
				}
				return 0
			})
			store, rec := newGCSUnitStore(t, false, srv.serve)
			ctx, trace := testserver.Traced(gcsUnitCtx(t))
			require.NoError(t, (&writefence.Fence{Store: store}).Push(ctx, "wal", "0", "w", 1, []byte("one")))
			assert.True(t, limited.Load(), "the 429 was answered")
			assert.Equal(t, int64(1), trace.Waits(), "one back-off, before the retry")
			var methods []string
			for _, r := range rec.requests() {
				methods = append(methods, r.Method)
			}
			want := map[string][]string{
				http.MethodGet:  {http.MethodGet, http.MethodGet, http.MethodPost},
				http.MethodPost: {http.MethodGet, http.MethodPost, http.MethodGet, http.MethodPost},
			}[method]
			assert.Equal(t, want, methods)
		})
	}
}

// gcsServerTime is the unit server's clock, far from ours: a blob's time
// must be the server's.
var gcsServerTime = time.Date(2001, 2, 3, 4, 5, 6, 789000000, time.UTC)

// gcsBlobCreated answers the request that completes a blob's upload with
// the object the server created, of size bytes.
func gcsBlobCreated(w http.ResponseWriter, name string, size int) {
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"kind":"storage#object","bucket":%q,"name":%q,"generation":"5","metageneration":"1","size":"%d","timeCreated":%q,"updated":%q}`,
		gcsTestBucket, name, size, gcsServerTime.Format(time.RFC3339Nano), gcsServerTime.Add(time.Hour).Format(time.RFC3339Nano))
}

func crc32cBase64(data []byte) string {
	var sum [4]byte
	binary.BigEndian.PutUint32(sum[:], crc32.Checksum(data, crc32.MakeTable(crc32.Castagnoli)))
	return base64.StdEncoding.EncodeToString(sum[:])
}

// TestGCSBlobOneRequest: a blob under 1 MiB, an empty one included, is
// one insert, create-only (ifGenerationMatch=0), carrying its CRC-32C,
// sent once even by a client that retries; its info is the object the
// server answered, with the server's creation time.
func TestGCSBlobOneRequest(t *testing.T) {
	for _, n := range []int{0, 100, 1<<20 - 1} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			data := bytes.Repeat([]byte("b"), n)
			store, rec := newGCSUnitStore(t, true, func(w http.ResponseWriter, r *http.Request) {
				gcsBlobCreated(w, r.URL.Query().Get("name"), len(data))
			})
			store.BlobPartSize = 256 << 10
			info, err := store.CreateBlob(gcsUnitCtx(t), "b/k", bytes.NewReader(data))
			require.NoError(t, err)
			assert.Equal(t, writefence.BlobInfo{Key: "b/k", Size: int64(n), Modified: gcsServerTime}, info)

			reqs := rec.requests()
			require.Len(t, reqs, 1)
			assert.Equal(t, []string{"multipart"}, reqs[0].Query["uploadType"])
			assert.Equal(t, []string{"0"}, reqs[0].Query["ifGenerationMatch"])
			assert.Equal(t, []string{"b/k"}, reqs[0].Query["name"])
			meta, media := gcsSplitMultipart(t, reqs[0])
			assert.Equal(t, len(data), len(media))
			assert.Equal(t, crc32cBase64(data), meta["crc32c"])
			assert.Equal(t, "application/octet-stream", meta["contentType"])
		})
	}
	t.Run("sent once", func(t *testing.T) {
		store, rec := newGCSUnitStore(t, true, func(w http.ResponseWriter, r *http.Request) {
			gcsJSONError(w, http.StatusServiceUnavailable)
		})
		_, err := store.CreateBlob(gcsUnitCtx(t), "b/k", strings.NewReader("small"))
		require.Error(t, err)
		assert.NotErrorIs(t, err, writefence.ErrConflict)
		assert.Len(t, rec.requests(), 1)
	})
}

// gcsResumableServer speaks the resumable upload protocol: a session
// started by one request, chunks sent to it, the last one completing it.
func gcsResumableServer(t *testing.T, srvURL func() string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		switch {
		case q.Get("uploadType") == "resumable" && q.Get("upload_id") == "":
			w.Header().Set("Location", srvURL()+"/upload/storage/v1/b/"+gcsTestBucket+"/o?uploadType=resumable&upload_id=u1")
		case q.Get("upload_id") == "u1":
			// The recorder has read the body; the test reads it from there.
			var first, last int
			var total string
			cr := r.Header.Get("Content-Range")
			if _, err := fmt.Sscanf(cr, "bytes %d-%d/%s", &first, &last, &total); err != nil {
				t.Errorf("chunk with Content-Range %q: %v", cr, err)
			}
			if total == "*" {
				// What Cloud Storage answers a client that sent
				// X-GUploader-No-308, as this one does, for "go on".
				w.Header().Set("Range", fmt.Sprintf("bytes=0-%d", last))
				w.Header().Set("X-Http-Status-Code-Override", "308")
				return
			}
			n, _ := strconv.Atoi(total)
			gcsBlobCreated(w, "b/k", n)
		default:
			gcsJSONError(w, http.StatusNotImplemented)
		}
	}
}

// TestGCSBlobResumable: a blob of 1 MiB or more is a resumable upload
// started create-only, sent in chunks of BlobPartSize, the last carrying
// the CRC-32C of the whole blob.
func TestGCSBlobResumable(t *testing.T) {
	const chunk = 256 << 10
	data := bytes.Repeat([]byte("0123456789abcdef"), (4*chunk+1008)/16)
	var srv string
	store, rec, srv := newGCSUnitServer(t, false, gcsResumableServer(t, func() string { return srv }))
	store.BlobPartSize = chunk
	info, err := store.CreateBlob(gcsUnitCtx(t), "b/k", bytes.NewReader(data))
	require.NoError(t, err)
	assert.Equal(t, writefence.BlobInfo{Key: "b/k", Size: int64(len(data)), Modified: gcsServerTime}, info)

	reqs := rec.requests()
	require.Len(t, reqs, 6, "the session's start and five chunks")
	assert.Equal(t, []string{"resumable"}, reqs[0].Query["uploadType"])
	assert.Equal(t, []string{"0"}, reqs[0].Query["ifGenerationMatch"])
	var sent []byte
	for i, c := range reqs[1:] {
		assert.LessOrEqual(t, len(c.Body), chunk)
		sent = append(sent, c.Body...)
		if i < 4 {
			assert.Empty(t, c.Header.Get("X-Goog-Hash"))
		}
	}
	assert.Equal(t, data, sent)
	assert.Equal(t, "crc32c="+crc32cBase64(data), reqs[5].Header.Get("X-Goog-Hash"), "the server is given the checksum of the whole blob")
}

// gcsBlobObject is the metadata of the one blob gcsNoLastModified serves:
// created at gcsServerTime and updated an hour later, or, when created is
// false, a metadata without timeCreated.
func gcsBlobObject(name string, size int, created bool) map[string]any {
	obj := map[string]any{
		"kind": "storage#object", "bucket": gcsTestBucket, "name": name,
		"generation": "5", "metageneration": "1", "size": strconv.Itoa(size),
		"updated": gcsServerTime.Add(time.Hour).Format(time.RFC3339Nano),
	}
	if created {
		obj["timeCreated"] = gcsServerTime.Format(time.RFC3339Nano)
	}
	return obj
}

// gcsNoLastModified serves one blob, data at name: its creation, its
// metadata, its listing, and its reads, whose responses carry its
// generation and no Last-Modified.
func gcsNoLastModified(t *testing.T, name string, data []byte, created bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		obj := gcsBlobObject(name, len(data), created)
		switch {
		case r.Method == http.MethodPost:
			w.Header().Set("Content-Type", "application/json")
			require.NoError(t, json.NewEncoder(w).Encode(obj))
		case r.URL.Path == "/"+gcsTestBucket+"/"+name:
			if g := r.URL.Query().Get("generation"); g != "" && g != "5" {
				w.WriteHeader(http.StatusNotFound)
				return
			}
			w.Header().Set("X-Goog-Generation", "5")
			w.Header().Set("X-Goog-Metageneration", "1")
			w.Header().Set("Content-Length", strconv.Itoa(len(data)))
			_, _ = w.Write(data)
		case r.URL.Path == "/storage/v1/b/"+gcsTestBucket+"/o/"+name:
			w.Header().Set("Content-Type", "application/json")
			require.NoError(t, json.NewEncoder(w).Encode(obj))
		case r.URL.Path == "/storage/v1/b/"+gcsTestBucket+"/o":
			w.Header().Set("Content-Type", "application/json")
			require.NoError(t, json.NewEncoder(w).Encode(map[string]any{"kind": "storage#objects", "items": []any{obj}}))
		default:
			gcsJSONError(w, http.StatusNotImplemented)
		}
	}
}

// TestGCSBlobTimeWithoutLastModified: against a server whose reads carry
// no Last-Modified, CreateBlob, OpenBlob, StatBlob and ListBlobs all
// report the blob's creation time from its metadata (timeCreated, not
// updated), OpenBlob reading the generation that metadata describes.
// Without a timeCreated each of them fails rather than report a zero
// time.
func TestGCSBlobTimeWithoutLastModified(t *testing.T) {
	const name = "blob-k"
	data := []byte("a blob's bytes")
	t.Run("with timeCreated", func(t *testing.T) {
		store, rec := newGCSUnitStore(t, false, gcsNoLastModified(t, name, data, true))
		ctx := gcsUnitCtx(t)
		want := writefence.BlobInfo{Key: name, Size: int64(len(data)), Modified: gcsServerTime}

		info, err := store.CreateBlob(ctx, name, bytes.NewReader(data))
		require.NoError(t, err)
		assert.Equal(t, want, info, "CreateBlob")

		rc, info, err := store.OpenBlob(ctx, name)
		require.NoError(t, err)
		got, err := io.ReadAll(rc)
		require.NoError(t, rc.Close())
		require.NoError(t, err)
		assert.Equal(t, data, got)
		assert.Equal(t, want, info, "OpenBlob")
		reads := 0
		for _, req := range rec.requests() {
			if req.Path == "/"+gcsTestBucket+"/"+name {
				reads++
				assert.Equal(t, []string{"5"}, req.Query["generation"], "the read is of the generation the info describes")
			}
		}
		assert.Equal(t, 1, reads, "OpenBlob's reads of the bytes")

		info, err = store.StatBlob(ctx, name)
		require.NoError(t, err)
		assert.Equal(t, want, info, "StatBlob")

		var listed []writefence.BlobInfo
		require.NoError(t, store.ListBlobs(ctx, "blob-", func(i writefence.BlobInfo) error {
			listed = append(listed, i)
			return nil
		}))
		assert.Equal(t, []writefence.BlobInfo{want}, listed, "ListBlobs")
	})
	t.Run("without timeCreated", func(t *testing.T) {
		store, _ := newGCSUnitStore(t, false, gcsNoLastModified(t, name, data, false))
		ctx := gcsUnitCtx(t)
		requireNoTime := func(err error, op string) {
			t.Helper()
			require.Error(t, err, op)
			var se *writefence.StoreError
			require.ErrorAs(t, err, &se, op)
			assert.Equal(t, "gcs "+op, se.Op)
			assert.Contains(t, err.Error(), "no creation time")
		}
		_, err := store.CreateBlob(ctx, name, bytes.NewReader(data))
		requireNoTime(err, "blob create")
		rc, info, err := store.OpenBlob(ctx, name)
		if rc != nil {
			rc.Close()
		}
		requireNoTime(err, "blob open")
		assert.Zero(t, info)
		_, err = store.StatBlob(ctx, name)
		requireNoTime(err, "blob stat")
		err = store.ListBlobs(ctx, "blob-", func(writefence.BlobInfo) error { return nil })
		requireNoTime(err, "blob list")
	})
}

// TestGCSBlobFailingReader: when the reader fails, the upload is abandoned
// before the request that would complete it: for a blob that fails within
// its first MiB nothing is sent at all, for a larger one no chunk claims
// the end.
func TestGCSBlobFailingReader(t *testing.T) {
	const chunk = 256 << 10
	for _, n := range []int{0, 100, chunk + 100, 1 << 20, 1<<20 + chunk + 100} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			var srv string
			store, rec, srv := newGCSUnitServer(t, false, gcsResumableServer(t, func() string { return srv }))
			store.BlobPartSize = chunk
			r := io.MultiReader(bytes.NewReader(make([]byte, n)), iotestErrReader{errInjectedGCS})
			_, err := store.CreateBlob(gcsUnitCtx(t), "b/k", r)
			require.ErrorIs(t, err, errInjectedGCS)
			var se *writefence.StoreError
			require.ErrorAs(t, err, &se)
			assert.Equal(t, "gcs blob create", se.Op)
			for _, req := range rec.requests() {
				assert.NotEqual(t, []string{"multipart"}, req.Query["uploadType"], "a one-request upload was sent")
				assert.NotRegexp(t, `/\d+$`, req.Header.Get("Content-Range"), "a chunk completed the upload")
			}
			if n < 1<<20 {
				assert.Empty(t, rec.requests())
			}
		})
	}
}

var errInjectedGCS = errors.New("the test's reader broke")

// iotestErrReader fails every read with err.
type iotestErrReader struct{ err error }

func (r iotestErrReader) Read([]byte) (int, error) { return 0, r.err }

// TestGCSBlobErrorMapping: the blob calls classify the server's answers as
// the record calls do, and keep the client's error reachable.
func TestGCSBlobErrorMapping(t *testing.T) {
	cases := []struct {
		op     string // create, open, stat, delete, list
		status int
		want   error // a sentinel, nil for none, or errNone for no error
	}{
		{"create", 412, writefence.ErrConflict}, {"create", 403, fs.ErrPermission}, {"create", 500, nil},
		{"open", 404, writefence.ErrNotFound}, {"open", 403, fs.ErrPermission}, {"open", 500, nil},
		{"stat", 404, writefence.ErrNotFound}, {"stat", 401, fs.ErrPermission}, {"stat", 500, nil},
		{"delete", 404, errNone}, {"delete", 403, fs.ErrPermission}, {"delete", 500, nil},
		{"list", 403, fs.ErrPermission}, {"list", 404, nil},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%s_%d", tc.op, tc.status), func(t *testing.T) {
			store, _ := newGCSUnitStore(t, false, func(w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodGet && tc.status == http.StatusNotFound && !strings.Contains(r.URL.Path, "/storage/v1/") {
					w.WriteHeader(http.StatusNotFound) // the XML API's bare 404
					return
				}
				gcsJSONError(w, tc.status)
			})
			ctx := gcsUnitCtx(t)
			key := "k"
			var err error
			switch tc.op {
			case "create":
				_, err = store.CreateBlob(ctx, key, strings.NewReader("x"))
			case "open":
				_, _, err = store.OpenBlob(ctx, key)
			case "stat":
				_, err = store.StatBlob(ctx, key)
			case "delete":
				err = store.DeleteBlob(ctx, key)
			case "list":
				key = "p/"
				err = store.ListBlobs(ctx, key, func(writefence.BlobInfo) error { return nil })
			}
			if tc.want == errNone {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			for _, sentinel := range []error{writefence.ErrConflict, writefence.ErrNotFound, fs.ErrPermission} {
				assert.Equal(t, sentinel == tc.want, errors.Is(err, sentinel), "errors.Is(%v, %v)", err, sentinel)
			}
			var se *writefence.StoreError
			require.ErrorAs(t, err, &se)
			assert.Equal(t, key, se.Key)
			assert.Equal(t, "gcs blob "+tc.op, se.Op)
			if tc.want == writefence.ErrNotFound {
				assert.ErrorIs(t, err, storage.ErrObjectNotExist)
				return
			}
			var gerr *googleapi.Error
			require.ErrorAs(t, err, &gerr)
			assert.Equal(t, tc.status, gerr.Code)
		})
	}
}

var errNone = errors.New("no error")

// TestGCSBlobContextPassesThrough: every blob call returns a cancelled
// context's error as it is.
func TestGCSBlobContextPassesThrough(t *testing.T) {
	store, _ := newGCSUnitStore(t, true, func(w http.ResponseWriter, r *http.Request) {
		gcsJSONError(w, http.StatusServiceUnavailable)
	})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := store.CreateBlob(ctx, "k", strings.NewReader("x"))
	assert.ErrorIs(t, err, context.Canceled)
	_, _, err = store.OpenBlob(ctx, "k")
	assert.ErrorIs(t, err, context.Canceled)
	_, err = store.StatBlob(ctx, "k")
	assert.ErrorIs(t, err, context.Canceled)
	assert.ErrorIs(t, store.DeleteBlob(ctx, "k"), context.Canceled)
	assert.ErrorIs(t, store.ListBlobs(ctx, "", func(writefence.BlobInfo) error { return nil }), context.Canceled)
}

// ExampleNewGCSConditionalStore fences pushes to a Cloud Storage bucket. It
// needs credentials and a bucket, so it is compiled but not run.
func ExampleNewGCSConditionalStore() {
	ctx := context.Background()
	client, err := storage.NewClient(ctx) // application default credentials
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	fence := &writefence.Fence{Store: writefence.NewGCSConditionalStore(client, "my-mirror-bucket", nil)}

	// epoch comes from whatever elects this node the shard's writer.
	var epoch uint64 = 42
	err = fence.Push(ctx, "wal", "shard-7", "node-a", epoch, []byte("segment bytes"))
	var gerr *googleapi.Error
	switch {
	case err == nil:
		log.Print("pushed")
	case errors.Is(err, writefence.ErrStaleEpoch):
		log.Print("deposed: a writer with this epoch or a later one has pushed; stop writing")
	case errors.As(err, &gerr) && gerr.Code == http.StatusTooManyRequests:
		log.Print("throttled: Cloud Storage takes about one update per second per object; retry later")
	default:
		log.Fatal(err)
	}
}
