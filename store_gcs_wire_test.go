package writefence_test

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
)

// TestGCSUploadIsOneConditionalRequest checks what goes on the wire for a
// create-only put and an update: one multipart insert carrying the
// generation precondition, never a resumable session, even for a body
// larger than the client's default 16 MiB chunk.
func TestGCSUploadIsOneConditionalRequest(t *testing.T) {
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
			require.Error(t, err)
			assert.Nil(t, data)
			var tl *writefence.StoreError
			require.True(t, errors.As(err, &tl), "want *TooLargeError, got %v", err)
			assert.Contains(t, tl.Error(), fmt.Sprintf("more than %d bytes", limit))
			assert.Equal(t, "big", tl.Key)
			assert.ErrorIs(t, err, writefence.ErrTooLarge)
			assert.True(t, strings.HasPrefix(err.Error(), "writefence: "))
		})
	}
}
