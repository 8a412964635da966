// Package azblobstore is a writefence.ConditionalStore over one Azure Blob
// Storage container, reached through the Azure SDK for Go (azblob). It is
// a package of its own so that a program that does not use it does not
// link the SDK.
//
// The version token is the blob's ETag without its quotes. A create-only
// write is a Put Blob carrying If-None-Match: *, an update one carrying
// If-Match: "etag"; the service decides both. Get reads the bytes and the
// ETag from one Get Blob response.
//
// # Failure model
//
//   - Durability: Azure Storage acknowledges a Put Blob once the blob is
//     stored durably (three copies in the primary region for LRS, and
//     across zones for ZRS), so a push that returned nil survives the
//     service's own failures. With geo-redundancy (GRS, RA-GRS) the copy in
//     the secondary region is asynchronous: a customer-initiated failover
//     to it can lose the last writes, and two pushes at one epoch can then
//     both have returned nil. Use LRS or ZRS, or GZRS without failing over,
//     for records; after a geo-failover, treat every record as suspect.
//   - Consistency of reads: strong. A Get Blob after a Put Blob returned
//     sees it, and its body and ETag belong to one version. Reads from the
//     secondary endpoint of RA-GRS are eventually consistent: never give
//     the store a client of the secondary endpoint.
//   - Per-object limits: a blob written by one Put Blob may hold up to
//     5000 MiB; the store's read limit (MaxObjectSize, 64 MiB and 4 KiB by
//     default) is the practical bound. Names are 1 to 1024 characters.
//   - What the caller must configure: a container that exists, and
//     credentials that may read, write and delete its blobs (and list them,
//     for Lister). Do not set a lifecycle management rule that deletes or
//     tiers blobs under the records' prefix (an archived blob cannot be
//     read), and no immutability policy on it (a record must be
//     overwritable). Soft delete and blob versioning do not change the
//     protocol.
//
// # Errors
//
// Every failure is a *writefence.StoreError whose Op is "azblob get",
// "azblob put", "azblob delete" or "azblob list", and whose Err reaches the
// SDK's *azcore.ResponseError, for an answer of the service, through
// errors.As. A refused precondition matches writefence.ErrConflict, a
// missing blob on Get writefence.ErrNotFound, and a request refused for
// its credentials or their rights (HTTP 401 or 403) fs.ErrPermission: the
// request did nothing, and a Fence does not retry it. A cancelled or
// expired ctx is returned as it is. Messages carry the service's status
// line and error code but never the response body, the request's query
// (which would hold a SAS token) or its headers (which hold the signature).
package azblobstore

import (
	"bytes"
	"context"
	"crypto/md5"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/defaults"
	"github.com/writefence/writefence/internal/escape"
)

// Store is a writefence.ConditionalStore over one Azure Blob Storage
// container. It also implements writefence.PrefixReader,
// writefence.PartsPutter (declared through writefence.Capable),
// writefence.Deleter and writefence.Lister. A Store is safe for
// concurrent use.
type Store struct {
	// MaxObjectSize is the read limit of Get and GetPrefix in bytes; zero
	// (or less) means 64 MiB and 4 KiB, the largest payload a Fence takes
	// by default and room for its header. Set it before first use.
	MaxObjectSize int64

	c *container.Client
}

var (
	_ writefence.ConditionalStore = (*Store)(nil)
	_ writefence.Capable          = (*Store)(nil)
	_ writefence.PrefixReader     = (*Store)(nil)
	_ writefence.PartsPutter      = (*Store)(nil)
	_ writefence.Deleter          = (*Store)(nil)
	_ writefence.Lister           = (*Store)(nil)
)

// New returns a store that keeps its blobs in the container c names,
// which must exist, using the caller's client. Blob names are the keys as
// given.
//
// The service must decide Put Blob's If-Match and If-None-Match: * itself:
// Azure Storage does, and so does the Azurite emulator (which answers a
// lost create with 409 BlobAlreadyExists and a failed If-Match with 412
// ConditionNotMet; both are conflicts here). Prove another
// implementation with writefence.Probe before trusting it.
//
// Every record is sent as one Put Blob of its exact length, never as
// blocks. A conditional Put Blob is sent once: the client's retry policy
// is switched off for it, because a retry after a write that landed but
// whose answer was lost would be refused by the write's own precondition
// and reported as a conflict. Reads are retried as the client is
// configured.
func New(c *container.Client) *Store { return &Store{c: c} }

// Capabilities implements writefence.Capable: the store's PrefixReader
// and PartsPutter are its own.
func (s *Store) Capabilities() writefence.ConditionalStore { return s }

func (s *Store) limit() int64 {
	if s.MaxObjectSize > 0 {
		return s.MaxObjectSize
	}
	return defaults.MaxObjectSize
}

// Get implements writefence.ConditionalStore with one Get Blob: the bytes
// and the ETag come from the same response. A blob whose Content-Length
// exceeds the read limit is refused before its body is read; otherwise at
// most the limit and one byte are read.
func (s *Store) Get(ctx context.Context, key string) ([]byte, string, error) {
	r, err := s.c.NewBlobClient(key).DownloadStream(ctx, nil)
	if err != nil {
		return nil, "", fail(ctx, "get", key, err, readKind)
	}
	defer r.Body.Close()
	limit := s.limit()
	if r.ContentLength != nil && *r.ContentLength > limit {
		return nil, "", tooLarge("get", key, limit)
	}
	data, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	if err != nil {
		return nil, "", fail(ctx, "get", key, err, nil)
	}
	if int64(len(data)) > limit {
		return nil, "", tooLarge("get", key, limit)
	}
	etag, err := token("get", key, r.ETag)
	if err != nil {
		return nil, "", err
	}
	return data, etag, nil
}

// GetPrefix implements writefence.PrefixReader with one ranged Get Blob
// (x-ms-range: bytes=0-n-1): the prefix, the ETag and the blob's total
// size, the total of the Content-Range, come from the same response.
//
// An empty blob has no byte 0, and the service answers the range with 416
// InvalidRange; GetPrefix then sends one unranged Get Blob and reads at
// most n bytes of it, so a blob rewritten in between is still read from a
// single response. As Get, it refuses a blob larger than the read limit,
// here without reading its body.
func (s *Store) GetPrefix(ctx context.Context, key string, n int64) ([]byte, int64, string, error) {
	if n < 1 {
		return nil, 0, "", &writefence.StoreError{Op: "azblob get", Key: key,
			Err: &writefence.InvalidArgumentError{Arg: "n", Reason: fmt.Sprintf("%d, must be at least 1", n)}}
	}
	b := s.c.NewBlobClient(key)
	r, err := b.DownloadStream(ctx, &blob.DownloadStreamOptions{Range: blob.HTTPRange{Offset: 0, Count: n}})
	if bloberror.HasCode(err, bloberror.InvalidRange) {
		r, err = b.DownloadStream(ctx, nil)
	}
	if err != nil {
		return nil, 0, "", fail(ctx, "get", key, err, readKind)
	}
	defer r.Body.Close()
	size, err := objectSize(r.ContentRange, r.ContentLength)
	if err != nil {
		return nil, 0, "", &writefence.StoreError{Op: "azblob get", Key: key, Err: err}
	}
	if limit := s.limit(); size > limit {
		return nil, 0, "", tooLarge("get", key, limit)
	}
	prefix, err := io.ReadAll(io.LimitReader(r.Body, n))
	if err != nil {
		return nil, 0, "", fail(ctx, "get", key, err, nil)
	}
	if want := min(n, size); int64(len(prefix)) != want {
		return nil, 0, "", &writefence.StoreError{Op: "azblob get", Key: key,
			Err: fmt.Errorf("read %d bytes of the first %d of a %d-byte blob", len(prefix), want, size)}
	}
	etag, err := token("get", key, r.ETag)
	if err != nil {
		return nil, 0, "", err
	}
	return prefix, size, etag, nil
}

// objectSize returns a blob's total size from a Get Blob response: the
// total of its Content-Range when it has one (a 206), else its
// Content-Length.
func objectSize(contentRange *string, contentLength *int64) (int64, error) {
	if contentRange == nil || *contentRange == "" {
		if contentLength == nil || *contentLength < 0 {
			return 0, errors.New("the response carries no blob size")
		}
		return *contentLength, nil
	}
	cr := *contentRange
	_, total, ok := strings.Cut(cr, "/")
	size, err := strconv.ParseInt(total, 10, 64)
	if !ok || !strings.HasPrefix(cr, "bytes ") || err != nil || size < 0 {
		return 0, fmt.Errorf("the response carries a Content-Range without a total size: %s", escape.String(cr))
	}
	return size, nil
}

// PutIfVersion implements writefence.ConditionalStore with one Put Blob:
// If-None-Match: * when expectVersion is empty, If-Match: "expectVersion"
// otherwise. A 412 ConditionNotMet, a 409 BlobAlreadyExists (the answer
// to a create-only put of an existing blob) and a 404 BlobNotFound
// answering If-Match are conflicts; a 412 for a lease held on the blob
// (LeaseIdMissing...) is not. A token that cannot be an ETag (empty
// inside, "*", or holding a quote, a space or a control byte) was never
// issued: it is a conflict too, and nothing is sent.
func (s *Store) PutIfVersion(ctx context.Context, key string, data []byte, expectVersion string) (string, error) {
	return s.PutPartsIfVersion(ctx, key, [][]byte{data}, expectVersion)
}

// PutPartsIfVersion implements writefence.PartsPutter: the parts are sent
// one after the other as the body of one Put Blob, with the preconditions
// of PutIfVersion and their MD5 in Content-MD5 (the service refuses a
// body damaged on the way), and never copied.
func (s *Store) PutPartsIfVersion(ctx context.Context, key string, parts [][]byte, expectVersion string) (string, error) {
	cond := &blob.ModifiedAccessConditions{}
	if expectVersion == "" {
		etag := azcore.ETagAny
		cond.IfNoneMatch = &etag
	} else {
		if !validETag(expectVersion) {
			return "", &writefence.StoreError{Op: "azblob put", Key: key,
				Err: fmt.Errorf("%w: %s cannot be an etag", writefence.ErrConflict, escape.String(expectVersion))}
		}
		etag := azcore.ETag(`"` + expectVersion + `"`)
		cond.IfMatch = &etag
	}
	h := md5.New()
	for _, p := range parts {
		h.Write(p)
	}
	body := newPartsBody(parts)
	defer body.done()
	// No retry: see New.
	ctx = policy.WithRetryOptions(ctx, policy.RetryOptions{MaxRetries: -1})
	r, err := s.c.NewBlockBlobClient(key).Upload(ctx, body, &blockblob.UploadOptions{
		AccessConditions:        &blob.AccessConditions{ModifiedAccessConditions: cond},
		TransactionalValidation: blob.TransferValidationTypeMD5(h.Sum(nil)),
	})
	if err != nil {
		return "", fail(ctx, "put", key, err, func(re *azcore.ResponseError) error {
			return putKind(re, expectVersion)
		})
	}
	return token("put", key, r.ETag)
}

// Delete implements writefence.Deleter: it deletes the blob and its
// snapshots. A blob that does not exist is not an error.
func (s *Store) Delete(ctx context.Context, key string) error {
	include := blob.DeleteSnapshotsOptionTypeInclude
	_, err := s.c.NewBlobClient(key).Delete(ctx, &blob.DeleteOptions{DeleteSnapshots: &include})
	if err == nil || bloberror.HasCode(err, bloberror.BlobNotFound) {
		return nil
	}
	return fail(ctx, "delete", key, err, nil)
}

// List implements writefence.Lister with List Blobs under prefix, page by
// page, in the service's (lexical) order.
func (s *Store) List(ctx context.Context, prefix string, fn func(key string) error) error {
	opts := &container.ListBlobsFlatOptions{}
	if prefix != "" {
		opts.Prefix = &prefix
	}
	pager := s.c.NewListBlobsFlatPager(opts)
	for pager.More() {
		if err := ctx.Err(); err != nil {
			return err
		}
		page, err := pager.NextPage(ctx)
		if err != nil {
			return fail(ctx, "list", prefix, err, nil)
		}
		if page.Segment == nil {
			continue
		}
		for _, item := range page.Segment.BlobItems {
			if item == nil || item.Name == nil {
				continue
			}
			// A page is handed over without a look at ctx.
			if err := ctx.Err(); err != nil {
				return err
			}
			if err := fn(*item.Name); err != nil {
				return err
			}
		}
	}
	return ctx.Err()
}

// token returns the version token of a response's ETag: the ETag without
// its quotes.
func token(op, key string, etag *azcore.ETag) (string, error) {
	if etag != nil {
		if t := strings.Trim(string(*etag), `"`); t != "" {
			return t, nil
		}
	}
	return "", &writefence.StoreError{Op: "azblob " + op, Key: key, Err: errors.New("the response carries no etag")}
}

// validETag reports whether v can be the inside of an entity tag (RFC 9110
// etagc: visible ASCII other than the double quote, or obs-text), and is
// not the wildcard.
func validETag(v string) bool {
	if v == "" || v == "*" {
		return false
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c <= ' ' || c == '"' || c == 0x7f {
			return false
		}
	}
	return true
}

func tooLarge(op, key string, limit int64) error {
	return &writefence.StoreError{Op: "azblob " + op, Key: key,
		Err: fmt.Errorf("%w: more than %d bytes", writefence.ErrTooLarge, limit)}
}

// readKind: only a missing blob is ErrNotFound. A missing container is a
// misconfiguration, and calling it "not found" would invite a create.
func readKind(re *azcore.ResponseError) error {
	if re.ErrorCode == string(bloberror.BlobNotFound) {
		return writefence.ErrNotFound
	}
	return nil
}

// putKind: a failed precondition is a 412 ConditionNotMet (or a 412
// without a code); a 412 for a lease someone holds on the blob is a
// refusal of another kind, which the version cannot settle.
func putKind(re *azcore.ResponseError, expectVersion string) error {
	switch {
	case re.StatusCode == http.StatusPreconditionFailed &&
		(re.ErrorCode == string(bloberror.ConditionNotMet) || re.ErrorCode == ""):
		return writefence.ErrConflict
	case re.ErrorCode == string(bloberror.BlobAlreadyExists) && expectVersion == "":
		return writefence.ErrConflict
	case re.ErrorCode == string(bloberror.BlobNotFound) && expectVersion != "":
		return writefence.ErrConflict
	}
	return nil
}

// fail wraps an SDK error in a *writefence.StoreError. kind, when not nil,
// names the sentinel a response error stands for; a refusal of the
// credentials (HTTP 401 or 403) is fs.ErrPermission whatever the
// operation. A done ctx is returned as it is, so cancellation is never
// mistaken for an answer of the service.
func fail(ctx context.Context, op, key string, err error, kind func(*azcore.ResponseError) error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return ctxErr
	}
	var re *azcore.ResponseError
	if !errors.As(err, &re) {
		return &writefence.StoreError{Op: "azblob " + op, Key: key, Err: err}
	}
	var sentinel error
	if kind != nil {
		sentinel = kind(re)
	}
	if sentinel == nil && (re.StatusCode == http.StatusUnauthorized || re.StatusCode == http.StatusForbidden) {
		sentinel = fs.ErrPermission
	}
	cause := error(responseError{re})
	if sentinel != nil {
		cause = fmt.Errorf("%w: %w", sentinel, cause)
	}
	return &writefence.StoreError{Op: "azblob " + op, Key: key, Err: cause}
}

// responseError is a response of the service, told in one line: its
// status and error code. The SDK's own message spans many lines and holds
// the response body, which for a refused signature echoes what was
// signed. Unwrap reaches the SDK's error.
type responseError struct{ re *azcore.ResponseError }

func (e responseError) Error() string {
	status := strconv.Itoa(e.re.StatusCode)
	if r := e.re.RawResponse; r != nil && r.Status != "" {
		status = r.Status
	}
	s := "http " + escape.String(status)
	if e.re.ErrorCode != "" {
		s += " (" + escape.String(e.re.ErrorCode) + ")"
	}
	return s
}

func (e responseError) Unwrap() error { return e.re }

// partsBody is a Put Blob body over parts, seekable as the SDK needs, that
// cannot be read once PutPartsIfVersion returns: net/http may go on
// reading a request body after the response arrived (a service that
// answers 412 before the upload ends), which would otherwise read the
// caller's slices after they were handed back.
type partsBody struct {
	mu    sync.Mutex // held across each Read and Seek so done waits for them
	r     *bytes.Reader
	parts [][]byte
	off   int64 // the position, for more than one part
	size  int64
	ended bool
}

func newPartsBody(parts [][]byte) *partsBody {
	b := &partsBody{parts: parts}
	for _, p := range parts {
		b.size += int64(len(p))
	}
	if len(parts) == 1 {
		b.r = bytes.NewReader(parts[0])
	}
	return b
}

func (b *partsBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ended {
		return 0, io.ErrClosedPipe
	}
	if b.r != nil {
		return b.r.Read(p)
	}
	if b.off >= b.size {
		return 0, io.EOF
	}
	n, skip := 0, b.off
	for _, part := range b.parts {
		if skip >= int64(len(part)) {
			skip -= int64(len(part))
			continue
		}
		c := copy(p[n:], part[skip:])
		n += c
		skip = 0
		if n == len(p) {
			break
		}
	}
	b.off += int64(n)
	return n, nil
}

func (b *partsBody) Seek(offset int64, whence int) (int64, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ended {
		return 0, io.ErrClosedPipe
	}
	if b.r != nil {
		return b.r.Seek(offset, whence)
	}
	var abs int64
	switch whence {
	case io.SeekStart:
		abs = offset
	case io.SeekCurrent:
		abs = b.off + offset
	case io.SeekEnd:
		abs = b.size + offset
	default:
		return 0, errors.New("azblobstore: invalid whence")
	}
	if abs < 0 {
		return 0, errors.New("azblobstore: negative position")
	}
	b.off = abs
	return abs, nil
}

// Close is called by the transport when it is done with the body; done,
// not Close, ends it.
func (b *partsBody) Close() error { return nil }

func (b *partsBody) done() {
	b.mu.Lock()
	b.ended = true
	b.mu.Unlock()
}
