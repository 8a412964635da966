// Package etcdstore is a writefence.ConditionalStore over etcd (API v3,
// through go.etcd.io/etcd/client/v3): each key of the store is one etcd
// key, its version token is the key's mod revision, and every write is one
// transaction that etcd decides.
//
// It lives in its own package so that programs importing writefence do not
// compile the etcd client unless they use it.
//
// # Versions
//
// A version token is the decimal mod revision of the key: the revision of
// the cluster-wide write that stored its value. etcd raises the revision
// with every write to the cluster and never reuses one, so a token never
// names two contents, not after a delete and a new create either; and any
// write to the key, by this store or by any other etcd client (etcdctl put,
// a program writing the key directly), gives it a new mod revision. The
// store therefore keeps no digest beside the value: bytes written around
// the store are a new version, which a Fence reads and judges as it judges
// any record.
//
// # Writes
//
// PutIfVersion is one Txn: If ModRevision(key) = v (or CreateRevision(key)
// = 0 for create-only, expectVersion ""), Then Put. etcd's leader decides
// the comparison and the put in one step of its Raft log; a failed compare
// writes nothing and returns an error matching writefence.ErrConflict. The
// transaction is sent once: the client retries it only when it never left
// the client (no connection), never after it may have reached the server.
// PutIfBranded adds one more comparison to the same Txn, Value(brandKey) =
// identity, so a write lands only while the brand key holds the identity,
// with no gap between the check and the write.
//
// # Limits
//
// etcd refuses a request larger than its --max-request-bytes (1.5 MiB by
// default). A write whose transaction would not fit MaxRequestBytes is
// refused before it is sent, with an error matching writefence.ErrTooLarge,
// and so is one the server refuses as too large: with the default limit a
// value can hold a little less than 1.5 MiB. A record larger than that
// (a snapshot) belongs in a blob store, referenced by a manifest that the
// fence admits here (see Fence.Blobs in the writefence package).
//
// Reads are bounded on the wire: every Range and Txn the store sends
// accepts a reply of at most MaxObjectSize bytes of value plus room for the
// key and the reply's own fields (the gRPC receive limit of the call), so a
// value larger than the read limit is refused with writefence.ErrTooLarge
// without being buffered whole; a value within that room but above the
// limit is refused after it arrived.
//
// # Failure model
//
// Durability across failover: etcd acknowledges a Txn once a majority of
// the cluster's members hold it in their Raft logs (each fsynced, unless a
// member runs with --unsafe-no-fsync), so a leader change or the loss of a
// minority of members never loses an acknowledged write. There is nothing to
// configure for it; a one-member cluster is as durable as its disk.
//
// Consistency of reads: Get and List send linearizable Ranges (the
// default; never serializable ones), so a read reflects every write
// acknowledged before it began, whichever member serves it.
//
// Per-item limits: MaxRequestBytes for a write (1.5 MiB by default, as the
// server's --max-request-bytes), MaxObjectSize for a read.
//
// What the caller must configure: MaxRequestBytes when the server's
// --max-request-bytes is not the default. Revisions are those of one
// cluster: restoring a cluster from a snapshot without raising its revision
// (etcdutl snapshot restore --bump-revision with --mark-compacted) can hand
// out mod revisions that were tokens of other bytes before, which a
// Fence's cached version must never meet: bump the revision on restore, or
// restart the writers.
//
// # Errors
//
// Every failure is a *writefence.StoreError whose Op is "etcd get", "etcd
// put", "etcd delete" or "etcd list" and whose Err reaches the client's
// error (an rpctypes.EtcdError or a gRPC status), except the refusals
// decided on what was found: a *writefence.WireError from PutIfBranded. A
// refusal of the caller's credentials or their rights (permission denied,
// authentication failed, an invalid auth token, a user name missing where
// the server requires one) also matches fs.ErrPermission; a request too
// large matches writefence.ErrTooLarge. A cancelled or expired ctx is
// returned as ctx.Err(). Errors name keys, never credentials: the client's
// user name and password stay in its configuration.
package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"strconv"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/escape"
)

// DefaultMaxRequestBytes is etcd's default --max-request-bytes, 1.5 MiB:
// the largest request a server started without the flag accepts.
const DefaultMaxRequestBytes = 1536 * 1024

// raftOverhead is what etcd adds to a Txn before it checks the size
// against --max-request-bytes: the InternalRaftRequest around it, with a
// header carrying the request's ID, the user name and the auth revision.
// 256 bytes leave room for a user name of 200.
const raftOverhead = 256

// replyRoom is what a reply holds beyond the value and the key: the
// response header, the key's revisions, the framing.
const replyRoom = 1024

// listPage is how many keys one Range of List asks for.
const listPage = 512

// Store is a writefence.ConditionalStore over etcd; see the package
// documentation. It also implements writefence.Deleter, writefence.Lister
// and writefence.BrandedPutter (declared through writefence.Capable).
//
// Set the fields before first use; they are read without locking. A Store
// is safe for concurrent use.
type Store struct {
	// MaxObjectSize is the read limit in bytes: Get refuses a larger value
	// with writefence.ErrTooLarge. Zero (or less) means MaxRequestBytes's
	// value, the largest a write can store.
	MaxObjectSize int64

	// MaxRequestBytes is the server's --max-request-bytes: a write whose
	// transaction, with etcd's own envelope, would exceed it is refused
	// before it is sent. Zero (or less) means DefaultMaxRequestBytes.
	MaxRequestBytes int64

	prefix string
	kv     pb.KVClient
}

var (
	_ writefence.ConditionalStore = (*Store)(nil)
	_ writefence.Capable          = (*Store)(nil)
	_ writefence.BrandedPutter    = (*Store)(nil)
	_ writefence.Deleter          = (*Store)(nil)
	_ writefence.Lister           = (*Store)(nil)
)

// New returns a store that keeps its keys under prefix in the cluster the
// caller's client talks to: the store's key k is the etcd key prefix+k.
// The client's authentication (user name and password, or a TLS client
// certificate) and endpoints are used as configured. The store sends its
// requests through the client's connection with call options of its own:
// the receive limit of each call follows MaxObjectSize, whatever the
// client's MaxCallRecvMsgSize says.
//
// The user needs read and write permission on the keys under prefix
// (etcdctl role grant-permission --prefix=true ROLE readwrite PREFIX).
func New(client *clientv3.Client, prefix string) *Store {
	return &Store{prefix: prefix, kv: clientv3.RetryKVClient(client)}
}

// Capabilities implements writefence.Capable: the store's BrandedPutter is
// its own.
func (s *Store) Capabilities() writefence.ConditionalStore { return s }

func (s *Store) readLimit() int64 {
	if s.MaxObjectSize > 0 {
		return s.MaxObjectSize
	}
	return s.requestLimit()
}

func (s *Store) requestLimit() int64 {
	if s.MaxRequestBytes > 0 {
		return s.MaxRequestBytes
	}
	return DefaultMaxRequestBytes
}

// key returns the etcd key of the store's key k, for op.
func (s *Store) key(op, k string) ([]byte, error) {
	if s.prefix == "" && k == "" {
		return nil, &writefence.StoreError{Op: "etcd " + op, Key: k,
			Err: &writefence.InvalidArgumentError{Arg: "key", Reason: "empty, and the store has no prefix"}}
	}
	return []byte(s.prefix + k), nil
}

// callOpts are the options of a call whose reply may carry a value of up
// to the read limit under an etcd key of keyLen bytes. WaitForReady is the
// client's own default: a call waits for a connection rather than failing
// while the client reconnects.
func (s *Store) callOpts(keyLen int) []grpc.CallOption {
	return recvLimit(s.readLimit() + int64(keyLen) + replyRoom)
}

// recvLimit are the call options of a call whose reply may be n bytes.
func recvLimit(n int64) []grpc.CallOption {
	n = min(n, math.MaxInt32)
	return []grpc.CallOption{grpc.WaitForReady(true), grpc.MaxCallRecvMsgSize(int(n))}
}

// Get implements writefence.ConditionalStore with one linearizable Range:
// the value and its mod revision come from the same reply.
func (s *Store) Get(ctx context.Context, key string) ([]byte, string, error) {
	k, err := s.key("get", key)
	if err != nil {
		return nil, "", err
	}
	resp, err := s.kv.Range(ctx, &pb.RangeRequest{Key: k}, s.callOpts(len(k))...)
	if err != nil {
		return nil, "", s.fail(ctx, "get", key, err)
	}
	if len(resp.Kvs) == 0 {
		return nil, "", &writefence.StoreError{Op: "etcd get", Key: key, Err: writefence.ErrNotFound}
	}
	kv := resp.Kvs[0]
	if limit := s.readLimit(); int64(len(kv.Value)) > limit {
		return nil, "", tooLarge("etcd get", key, limit)
	}
	if kv.ModRevision <= 0 {
		return nil, "", &writefence.StoreError{Op: "etcd get", Key: key, Err: fmt.Errorf("reply carries mod revision %d", kv.ModRevision)}
	}
	data := kv.Value
	if data == nil {
		data = []byte{}
	}
	return data, strconv.FormatInt(kv.ModRevision, 10), nil
}

// PutIfVersion implements writefence.ConditionalStore with one Txn: If
// ModRevision(key) = expectVersion (CreateRevision(key) = 0 when it is
// empty) Then Put. A non-empty expectVersion that is not a mod revision in
// the form this store writes it (a positive decimal without leading
// zeros) cannot equal the current one: it returns an error matching
// writefence.ErrConflict without a round trip.
func (s *Store) PutIfVersion(ctx context.Context, key string, data []byte, expectVersion string) (string, error) {
	return s.put(ctx, key, data, expectVersion, "", "", false)
}

// PutIfBranded implements writefence.BrandedPutter: PutIfVersion of the
// parts joined, in a Txn that also compares Value(brandKey) = identity, so
// it lands only while the brand key holds exactly identity. When the Txn
// fails, its Else reads the brand key in the same step and the refusal says
// which comparison failed: an absent brand key or another identity is a
// *writefence.WireError (writefence.ErrWire), otherwise the version
// conflicted (writefence.ErrConflict). It costs no round trip more than
// PutIfVersion.
func (s *Store) PutIfBranded(ctx context.Context, brandKey, identity, key string, parts [][]byte, expectVersion string) (string, error) {
	switch {
	case brandKey == "":
		return "", &writefence.StoreError{Op: "etcd put", Key: key,
			Err: &writefence.InvalidArgumentError{Arg: "brand key", Reason: "empty"}}
	case key == brandKey:
		return "", &writefence.StoreError{Op: "etcd put", Key: key,
			Err: &writefence.InvalidArgumentError{Arg: "key", Reason: escape.String(key) + " is the brand key"}}
	}
	return s.put(ctx, key, join(parts), expectVersion, brandKey, identity, true)
}

func join(parts [][]byte) []byte {
	if len(parts) == 1 {
		return parts[0]
	}
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	b := make([]byte, 0, n)
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}

func (s *Store) put(ctx context.Context, key string, data []byte, expectVersion, brandKey, identity string, branded bool) (string, error) {
	k, err := s.key("put", key)
	if err != nil {
		return "", err
	}
	if err := ctx.Err(); err != nil {
		return "", err
	}
	cmp := &pb.Compare{Key: k, Result: pb.Compare_EQUAL, Target: pb.Compare_CREATE,
		TargetUnion: &pb.Compare_CreateRevision{CreateRevision: 0}}
	if expectVersion != "" {
		rev, ok := parseRevision(expectVersion)
		if !ok {
			return "", &writefence.StoreError{Op: "etcd put", Key: key,
				Err: fmt.Errorf("%w: %s is not a version this store issues", writefence.ErrConflict, escape.String(expectVersion))}
		}
		cmp = &pb.Compare{Key: k, Result: pb.Compare_EQUAL, Target: pb.Compare_MOD,
			TargetUnion: &pb.Compare_ModRevision{ModRevision: rev}}
	}
	req := &pb.TxnRequest{
		Compare: []*pb.Compare{cmp},
		Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: k, Value: data}}}},
	}
	var bk []byte
	if branded {
		if bk, err = s.key("put", brandKey); err != nil {
			return "", err
		}
		req.Compare = append(req.Compare, &pb.Compare{Key: bk, Result: pb.Compare_EQUAL, Target: pb.Compare_VALUE,
			TargetUnion: &pb.Compare_Value{Value: []byte(identity)}})
		req.Failure = []*pb.RequestOp{{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: bk}}}}
	}
	if size := int64(proto.Size(req)) + raftOverhead; size > s.requestLimit() {
		return "", &writefence.StoreError{Op: "etcd put", Key: key,
			Err: fmt.Errorf("%w: a request of %d bytes, above the server's limit of %d (MaxRequestBytes)", writefence.ErrTooLarge, size, s.requestLimit())}
	}
	resp, err := s.kv.Txn(ctx, req, s.callOpts(max(len(k), len(bk)))...)
	if err != nil {
		return "", s.fail(ctx, "put", key, err)
	}
	if resp.Succeeded {
		if resp.Header == nil || resp.Header.Revision <= 0 {
			return "", &writefence.StoreError{Op: "etcd put", Key: key, Err: errors.New("reply carries no revision")}
		}
		return strconv.FormatInt(resp.Header.Revision, 10), nil
	}
	if branded {
		if err := brandVerdict(resp, brandKey, identity); err != nil {
			return "", err
		}
	}
	return "", &writefence.StoreError{Op: "etcd put", Key: key, Err: writefence.ErrConflict}
}

// brandVerdict is the refusal of a failed branded Txn whose brand
// comparison failed, from the brand key as its Else read it; nil when the
// brand key holds the identity, so the version comparison failed.
func brandVerdict(resp *pb.TxnResponse, brandKey, identity string) error {
	if len(resp.Responses) != 1 || resp.Responses[0].GetResponseRange() == nil {
		return &writefence.StoreError{Op: "etcd put", Key: brandKey, Err: errors.New("a failed transaction's reply does not carry the brand key's read")}
	}
	kvs := resp.Responses[0].GetResponseRange().Kvs
	switch {
	case len(kvs) == 0:
		return &writefence.WireError{Key: brandKey, Expected: identity, Absent: true}
	case string(kvs[0].Value) != identity:
		return &writefence.WireError{Key: brandKey, Expected: identity, Found: string(kvs[0].Value)}
	}
	return nil
}

// parseRevision returns the mod revision a version token names: a
// positive decimal in canonical form, as the store formats one.
func parseRevision(v string) (int64, bool) {
	rev, err := strconv.ParseInt(v, 10, 64)
	if err != nil || rev <= 0 || strconv.FormatInt(rev, 10) != v {
		return 0, false
	}
	return rev, true
}

// Delete implements writefence.Deleter with one DeleteRange of the key.
func (s *Store) Delete(ctx context.Context, key string) error {
	k, err := s.key("delete", key)
	if err != nil {
		return err
	}
	if _, err := s.kv.DeleteRange(ctx, &pb.DeleteRangeRequest{Key: k}, s.callOpts(len(k))...); err != nil {
		return s.fail(ctx, "delete", key, err)
	}
	return nil
}

// List implements writefence.Lister with linearizable Ranges over the
// keys that start with prefix, keys only, 512 keys per request, in
// etcd's order (ascending bytes). Each page starts after the last key of
// the one before; a key written or deleted meanwhile may or may not be
// listed.
func (s *Store) List(ctx context.Context, prefix string, fn func(key string) error) error {
	start := []byte(s.prefix + prefix)
	end := []byte(clientv3.GetPrefixRangeEnd(string(start)))
	if len(start) == 0 {
		start, end = []byte{0}, []byte{0} // the whole keyspace: [\x00, end of keys)
	}
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		// A page holds listPage keys and no value: bounded by the keys'
		// own sizes, as the client's default limit bounds any reply.
		resp, err := s.kv.Range(ctx, &pb.RangeRequest{Key: start, RangeEnd: end, KeysOnly: true, Limit: listPage},
			recvLimit(math.MaxInt32)...)
		if err != nil {
			return s.fail(ctx, "list", prefix, err)
		}
		for _, kv := range resp.Kvs {
			if err := ctx.Err(); err != nil {
				return err
			}
			if err := fn(string(kv.Key[len(s.prefix):])); err != nil {
				return err
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return ctx.Err()
		}
		last := resp.Kvs[len(resp.Kvs)-1].Key
		start = append(append([]byte(nil), last...), 0)
	}
}

// fail wraps a client error in a *writefence.StoreError of op on key,
// classifying what a retry cannot change. A done ctx is returned as it is.
func (s *Store) fail(ctx context.Context, op, key string, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return ctxErr
	}
	err = clientv3.ContextError(ctx, err)
	var kind error
	switch {
	case errors.Is(err, rpctypes.ErrPermissionDenied), errors.Is(err, rpctypes.ErrAuthFailed),
		errors.Is(err, rpctypes.ErrInvalidAuthToken), errors.Is(err, rpctypes.ErrUserEmpty):
		kind = fs.ErrPermission
	case errors.Is(err, rpctypes.ErrRequestTooLarge):
		kind = writefence.ErrTooLarge
	case errors.As(err, new(rpctypes.EtcdError)):
		// Any other answer of etcd's, such as its own back-pressure (too
		// many requests) or a full database (no space), which share the
		// gRPC code of a message over a limit: not final.
	case status.Code(err) == codes.ResourceExhausted:
		// A gRPC message limit: a reply above the call's receive limit
		// (the read limit), or a request above the server's, refused
		// before etcd saw it.
		kind = writefence.ErrTooLarge
	}
	if kind != nil {
		err = fmt.Errorf("%w: %w", kind, err)
	}
	return &writefence.StoreError{Op: "etcd " + op, Key: key, Err: err}
}

func tooLarge(op, key string, limit int64) error {
	return &writefence.StoreError{Op: op, Key: key, Err: fmt.Errorf("%w: more than %d bytes", writefence.ErrTooLarge, limit)}
}
