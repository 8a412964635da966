package etcdstore_test

import (
	"context"
	"errors"
	"io/fs"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/etcdstore"
	"github.com/writefence/writefence/internal/testserver/kit"
)

// fakeKV answers every call with err when set, else with the replies set;
// it records the requests.
type fakeKV struct {
	pb.KVClient // calls not faked panic

	err    error
	rng    func(*pb.RangeRequest) *pb.RangeResponse
	txn    *pb.TxnResponse
	ranges []*pb.RangeRequest
	txns   []*pb.TxnRequest
	opts   [][]grpc.CallOption
}

func (f *fakeKV) Range(_ context.Context, in *pb.RangeRequest, opts ...grpc.CallOption) (*pb.RangeResponse, error) {
	f.ranges, f.opts = append(f.ranges, in), append(f.opts, opts)
	if f.err != nil {
		return nil, f.err
	}
	return f.rng(in), nil
}

func (f *fakeKV) Txn(_ context.Context, in *pb.TxnRequest, opts ...grpc.CallOption) (*pb.TxnResponse, error) {
	f.txns, f.opts = append(f.txns, in), append(f.opts, opts)
	if f.err != nil {
		return nil, f.err
	}
	return f.txn, nil
}

func (f *fakeKV) DeleteRange(context.Context, *pb.DeleteRangeRequest, ...grpc.CallOption) (*pb.DeleteRangeResponse, error) {
	return &pb.DeleteRangeResponse{}, f.err
}

// TestErrorKinds: etcd's refusals map to the package's sentinels on every
// operation, the client's error stays reachable, and what a retry may
// overcome (no leader, too many requests, no connection) matches none.
func TestErrorKinds(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		err  error // as the gRPC connection returns it
		want error // nil: none of the sentinels
	}{
		{"permission denied", rpctypes.ErrGRPCPermissionDenied, fs.ErrPermission},
		{"auth failed", rpctypes.ErrGRPCAuthFailed, fs.ErrPermission},
		{"invalid auth token", rpctypes.ErrGRPCInvalidAuthToken, fs.ErrPermission},
		{"user empty", rpctypes.ErrGRPCUserEmpty, fs.ErrPermission},
		{"request too large", rpctypes.ErrGRPCRequestTooLarge, writefence.ErrTooLarge},
		{"message over the call's limit", status.Error(codes.ResourceExhausted, "grpc: received message larger than max (9 vs. 8)"), writefence.ErrTooLarge},
		{"too many requests", rpctypes.ErrGRPCRequestTooManyRequests, nil},
		{"no space", rpctypes.ErrGRPCNoSpace, nil},
		{"no leader", rpctypes.ErrGRPCNoLeader, nil},
		{"unavailable", status.Error(codes.Unavailable, "connection refused"), nil},
	} {
		for name, call := range kit.Ops {
			op := "etcd " + name
			err := kit.Call(ctx, etcdstore.NewFromKV(&fakeKV{err: tc.err}, "/p/"), call, "")
			var se *writefence.StoreError
			require.ErrorAs(t, err, &se, "%s %s", tc.name, op)
			assert.Equal(t, op, se.Op)
			// etcd's answers reach the caller as the client's typed
			// rpctypes errors, gRPC's own as their status.
			if reach := rpctypes.Error(tc.err); errors.As(reach, new(rpctypes.EtcdError)) {
				assert.ErrorIs(t, err, reach, "%s %s: the client's error is reachable", tc.name, op)
			} else {
				assert.Equal(t, status.Code(tc.err), status.Code(err), "%s %s: the gRPC status is reachable", tc.name, op)
			}
			kit.Sentinels(t, err, tc.want, tc.name+" "+op)
		}
	}
}

// TestTxn: the write is one Txn comparing the mod revision (or the create
// revision for create-only) and putting under the prefix; its revision is
// the new version; a failed compare is a conflict.
func TestTxn(t *testing.T) {
	ctx := context.Background()
	f := &fakeKV{txn: &pb.TxnResponse{Succeeded: true, Header: &pb.ResponseHeader{Revision: 42}}}
	s := etcdstore.NewFromKV(f, "/p/")
	v, err := s.PutIfVersion(ctx, "k", []byte("x"), "")
	require.NoError(t, err)
	assert.Equal(t, "42", v)
	_, err = s.PutIfVersion(ctx, "k", []byte("y"), "42")
	require.NoError(t, err)
	require.Len(t, f.txns, 2)
	create, update := f.txns[0], f.txns[1]
	assert.Equal(t, pb.Compare_CREATE, create.Compare[0].Target)
	assert.EqualValues(t, 0, create.Compare[0].GetCreateRevision())
	assert.Equal(t, pb.Compare_MOD, update.Compare[0].Target)
	assert.EqualValues(t, 42, update.Compare[0].GetModRevision())
	assert.Equal(t, "/p/k", string(update.Success[0].GetRequestPut().Key))
	assert.Equal(t, "y", string(update.Success[0].GetRequestPut().Value))
	assert.Empty(t, update.Failure)

	f.txn = &pb.TxnResponse{Succeeded: false, Header: &pb.ResponseHeader{Revision: 43}}
	_, err = s.PutIfVersion(ctx, "k", []byte("z"), "42")
	require.ErrorIs(t, err, writefence.ErrConflict)
}

// TestVersionsNeverIssued: a version not in the store's form (a positive
// decimal without leading zeros) is a conflict without a round trip: "0"
// in particular, which etcd's compare would take for an absent key.
func TestVersionsNeverIssued(t *testing.T) {
	f := &fakeKV{}
	s := etcdstore.NewFromKV(f, "/p/")
	for _, v := range []string{"0", "-1", "007", "+7", "7 ", "x", "99999999999999999999", "*"} {
		_, err := s.PutIfVersion(context.Background(), "k", []byte("x"), v)
		require.ErrorIs(t, err, writefence.ErrConflict, v)
	}
	assert.Empty(t, f.txns)
}

// TestBrandVerdicts: a failed branded Txn reads the brand key in its Else,
// and the refusal names what it found.
func TestBrandVerdicts(t *testing.T) {
	ctx := context.Background()
	fail := func(kvs ...*mvccpb.KeyValue) *pb.TxnResponse {
		return &pb.TxnResponse{Responses: []*pb.ResponseOp{{Response: &pb.ResponseOp_ResponseRange{ResponseRange: &pb.RangeResponse{Kvs: kvs}}}}}
	}
	for _, tc := range []struct {
		name  string
		reply *pb.TxnResponse
		check func(t *testing.T, err error)
	}{
		{"absent", fail(), func(t *testing.T, err error) {
			var we *writefence.WireError
			require.ErrorAs(t, err, &we)
			assert.True(t, we.Absent)
		}},
		{"other", fail(&mvccpb.KeyValue{Key: []byte("/p/b"), Value: []byte("other/v2")}), func(t *testing.T, err error) {
			var we *writefence.WireError
			require.ErrorAs(t, err, &we)
			assert.Equal(t, "other/v2", we.Found)
		}},
		{"version", fail(&mvccpb.KeyValue{Key: []byte("/p/b"), Value: []byte("id/v1")}), func(t *testing.T, err error) {
			require.ErrorIs(t, err, writefence.ErrConflict)
			assert.NotErrorIs(t, err, writefence.ErrWire)
		}},
	} {
		f := &fakeKV{txn: tc.reply}
		_, err := etcdstore.NewFromKV(f, "/p/").PutIfBranded(ctx, "b", "id/v1", "k", [][]byte{[]byte("a"), []byte("b")}, "5")
		tc.check(t, err)
		require.Len(t, f.txns, 1, tc.name)
		req := f.txns[0]
		require.Len(t, req.Compare, 2)
		assert.Equal(t, pb.Compare_VALUE, req.Compare[1].Target)
		assert.Equal(t, "/p/b", string(req.Compare[1].Key))
		assert.Equal(t, "id/v1", string(req.Compare[1].GetValue()))
		assert.Equal(t, "ab", string(req.Success[0].GetRequestPut().Value), "the parts joined")
		assert.Equal(t, "/p/b", string(req.Failure[0].GetRequestRange().Key))
	}
	_, err := etcdstore.NewFromKV(&fakeKV{}, "/p/").PutIfBranded(ctx, "k", "id", "k", nil, "")
	require.ErrorIs(t, err, writefence.ErrInvalidArgument)
}

// TestListPages: List asks for keys only, a page at a time, each starting
// after the last key of the one before, and strips the prefix.
func TestListPages(t *testing.T) {
	kv := func(k string) *mvccpb.KeyValue { return &mvccpb.KeyValue{Key: []byte(k)} }
	f := &fakeKV{rng: func(in *pb.RangeRequest) *pb.RangeResponse {
		if string(in.Key) == "/p/a/" {
			return &pb.RangeResponse{Kvs: []*mvccpb.KeyValue{kv("/p/a/1"), kv("/p/a/2")}, More: true}
		}
		return &pb.RangeResponse{Kvs: []*mvccpb.KeyValue{kv("/p/a/3")}}
	}}
	var got []string
	require.NoError(t, etcdstore.NewFromKV(f, "/p/").List(context.Background(), "a/", func(k string) error { got = append(got, k); return nil }))
	assert.Equal(t, []string{"a/1", "a/2", "a/3"}, got)
	require.Len(t, f.ranges, 2)
	for _, r := range f.ranges {
		assert.True(t, r.KeysOnly)
		assert.Equal(t, "/p/a0", string(r.RangeEnd))
		assert.False(t, r.Serializable, "linearizable")
	}
	assert.Equal(t, "/p/a/2\x00", string(f.ranges[1].Key))
}

// TestGetReceiveLimit: a Get's call accepts a reply of the read limit plus
// room for the key and the reply's fields, no more; Get is linearizable.
func TestGetReceiveLimit(t *testing.T) {
	f := &fakeKV{rng: func(*pb.RangeRequest) *pb.RangeResponse {
		return &pb.RangeResponse{Kvs: []*mvccpb.KeyValue{{Key: []byte("/p/k"), Value: make([]byte, 101), ModRevision: 3}}}
	}}
	s := etcdstore.NewFromKV(f, "/p/")
	s.MaxObjectSize = 100
	_, _, err := s.Get(context.Background(), "k")
	require.ErrorIs(t, err, writefence.ErrTooLarge)
	require.Len(t, f.opts, 1)
	var recv int
	for _, o := range f.opts[0] {
		if m, ok := o.(grpc.MaxRecvMsgSizeCallOption); ok {
			recv = m.MaxRecvMsgSize
		}
	}
	assert.Equal(t, 100+len("/p/k")+1024, recv)
	assert.False(t, f.ranges[0].Serializable)
}
