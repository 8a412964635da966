package dynamostore_test

import (
	"context"
	"errors"
	"io/fs"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/dynamostore"
	"github.com/writefence/writefence/internal/testserver/kit"
)

// fakeAPI answers every call with its fixed error, or, with none set, the
// calls' own fakes; it records the calls it got.
type fakeAPI struct {
	dynamostore.API // calls not faked panic

	mu      sync.Mutex
	err     error                           // every call's answer, when set
	putErr  error                           // PutItem's answer, when set
	item    map[string]types.AttributeValue // what GetItem returns
	calls   []string                        // the calls made, in order
	puts    []*dynamodb.PutItemInput        // the PutItems made
	retried []bool                          // whether each PutItem allowed SDK retries
	scan    func(*dynamodb.ScanInput) *dynamodb.ScanOutput
}

func (f *fakeAPI) record(name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, name)
	return f.err
}

func (f *fakeAPI) GetItem(ctx context.Context, in *dynamodb.GetItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	if err := f.record("GetItem"); err != nil {
		return nil, err
	}
	return &dynamodb.GetItemOutput{Item: f.item}, nil
}

func (f *fakeAPI) PutItem(ctx context.Context, in *dynamodb.PutItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	if err := f.record("PutItem"); err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.puts = append(f.puts, in)
	f.retried = append(f.retried, dynamostore.Retried(optFns...))
	f.mu.Unlock()
	if f.putErr != nil {
		return nil, f.putErr
	}
	f.item = in.Item
	return &dynamodb.PutItemOutput{}, nil
}

func (f *fakeAPI) DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	return &dynamodb.DeleteItemOutput{}, f.record("DeleteItem")
}

func (f *fakeAPI) Scan(ctx context.Context, in *dynamodb.ScanInput, _ ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error) {
	if err := f.record("Scan"); err != nil {
		return nil, err
	}
	return f.scan(in), nil
}

func apiError(code string) error {
	return &smithy.GenericAPIError{Code: code, Message: "refused by the fake"}
}

// TestErrorKinds: the service's answers map to the package's sentinels on
// every operation, the SDK's error stays reachable, and what a retry may
// overcome (throttling, a server error, a missing table) matches none.
func TestErrorKinds(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		code string
		want error // nil: none of the sentinels
	}{
		{"AccessDeniedException", fs.ErrPermission},
		{"UnrecognizedClientException", fs.ErrPermission},
		{"MissingAuthenticationTokenException", fs.ErrPermission},
		{"InvalidSignatureException", fs.ErrPermission},
		{"IncompleteSignatureException", fs.ErrPermission},
		{"ExpiredTokenException", fs.ErrPermission},
		{"ProvisionedThroughputExceededException", nil},
		{"ThrottlingException", nil},
		{"RequestLimitExceeded", nil},
		{"InternalServerError", nil},
		{"ResourceNotFoundException", nil},
	} {
		for name, call := range kit.Ops {
			op := "dynamodb " + name
			err := kit.Call(ctx, dynamostore.NewWithAPI(&fakeAPI{err: apiError(tc.code)}, "t"), call, "")
			var se *writefence.StoreError
			require.ErrorAs(t, err, &se, "%s %s", tc.code, op)
			assert.Equal(t, op, se.Op)
			var ae smithy.APIError
			require.ErrorAs(t, err, &ae, "%s %s: the SDK's error is reachable", tc.code, op)
			assert.Equal(t, tc.code, ae.ErrorCode())
			kit.Sentinels(t, err, tc.want, tc.code+" "+op)
		}
	}
}

// TestCanceled: a done ctx is returned as it is, and a cancelled write is
// not sent.
func TestCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	f := &fakeAPI{err: context.Canceled}
	s := dynamostore.NewWithAPI(f, "t")
	_, _, err := s.Get(ctx, "k")
	assert.Equal(t, context.Canceled, err)
	_, err = s.PutIfVersion(ctx, "k", nil, "")
	assert.Equal(t, context.Canceled, err)
	assert.Equal(t, []string{"GetItem"}, f.calls)
}

// TestPutItemOnce: a PutItem is sent without the SDK's retries, its
// condition compares the whole item the version named, and a failed
// condition is a conflict, or the item's damage when the service returned
// a damaged item with the refusal (no GetItem then).
func TestPutItemOnce(t *testing.T) {
	ctx := context.Background()
	f := &fakeAPI{}
	s := dynamostore.NewWithAPI(f, "t")
	v1, err := s.PutIfVersion(ctx, "k", []byte("one"), "")
	require.NoError(t, err)
	v2, err := s.PutIfVersion(ctx, "k", []byte("two"), v1)
	require.NoError(t, err)
	assert.Equal(t, []string{"PutItem", "PutItem"}, f.calls, "the second write conditioned on the remembered item")
	assert.Equal(t, []bool{false, false}, f.retried)
	assert.Equal(t, "attribute_not_exists(#a0)", *f.puts[0].ConditionExpression)
	assert.Equal(t, "#a0 = :v0 AND #a1 = :v1 AND #a2 = :v2", *f.puts[1].ConditionExpression)
	assert.Equal(t, map[string]string{"#a0": "version", "#a1": "data", "#a2": "digest"}, f.puts[1].ExpressionAttributeNames)
	assert.Equal(t, []byte("one"), f.puts[1].ExpressionAttributeValues[":v1"].(*types.AttributeValueMemberB).Value)
	assert.Equal(t, types.ReturnValuesOnConditionCheckFailureAllOld, f.puts[1].ReturnValuesOnConditionCheckFailure)

	damaged := map[string]types.AttributeValue{}
	for k, v := range f.item {
		damaged[k] = v
	}
	damaged["data"] = &types.AttributeValueMemberB{Value: []byte("tw0")}
	f.calls, f.item = nil, damaged // damaged in place, its version kept
	f.putErr = &types.ConditionalCheckFailedException{Message: new(string), Item: damaged}
	_, err = s.PutIfVersion(ctx, "k", []byte("three"), v2)
	var ce *writefence.CorruptError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, "dynamodb item digest", ce.Check)
	assert.Equal(t, []byte("tw0"), ce.Head)
	assert.Equal(t, []string{"PutItem"}, f.calls, "no GetItem: the refusal carries the item")

	f.calls = nil
	_, err = s.PutIfVersion(ctx, "k", []byte("three"), v2)
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, []string{"GetItem"}, f.calls, "v2 is forgotten after the refusal: the read finds the damage, nothing is sent")

	f.putErr = &types.ConditionalCheckFailedException{Message: new(string)}
	f.item = nil
	f.calls = nil
	_, err = s.PutIfVersion(ctx, "k", []byte("x"), "")
	require.ErrorIs(t, err, writefence.ErrConflict)
	var ccf *types.ConditionalCheckFailedException
	require.ErrorAs(t, err, &ccf)
	assert.Equal(t, []string{"PutItem", "GetItem"}, f.calls, "no item in the refusal: read it to tell damage from a conflict")
}

// TestVersionsNeverIssued: a version of neither form is a conflict without
// a round trip.
func TestVersionsNeverIssued(t *testing.T) {
	f := &fakeAPI{}
	s := dynamostore.NewWithAPI(f, "t")
	for _, v := range []string{"0", "*", "not a token", "0123456789abcdef0123456789ABCDEF", "0123456789abcdef0123456789abcde", "damaged-00"} {
		_, err := s.PutIfVersion(context.Background(), "k", []byte("x"), v)
		require.ErrorIs(t, err, writefence.ErrConflict, v)
	}
	assert.Empty(t, f.calls)
}

// TestListPages: List follows LastEvaluatedKey, filters by begins_with,
// and stops at fn's error.
func TestListPages(t *testing.T) {
	s := func(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
	pages := [][]string{{"a/1", "a/2"}, {"a/3"}}
	var filters []string
	f := &fakeAPI{scan: func(in *dynamodb.ScanInput) *dynamodb.ScanOutput {
		filters = append(filters, *in.FilterExpression)
		i := 0
		if in.ExclusiveStartKey != nil {
			i = 1
		}
		out := &dynamodb.ScanOutput{}
		for _, k := range pages[i] {
			out.Items = append(out.Items, map[string]types.AttributeValue{"key": s(k)})
		}
		if i == 0 {
			out.LastEvaluatedKey = map[string]types.AttributeValue{"key": s("a/2")}
		}
		return out
	}}
	var got []string
	require.NoError(t, dynamostore.NewWithAPI(f, "t").List(context.Background(), "a/", func(k string) error { got = append(got, k); return nil }))
	assert.Equal(t, []string{"a/1", "a/2", "a/3"}, got)
	assert.Equal(t, []string{"begins_with(#k, :p)", "begins_with(#k, :p)"}, filters)
	stop := errors.New("stop")
	assert.Equal(t, stop, dynamostore.NewWithAPI(f, "t").List(context.Background(), "a/", func(string) error { return stop }))
}

// multiFake is a fake table of many items.
type multiFake struct {
	dynamostore.API
	mu    sync.Mutex
	items map[string]map[string]types.AttributeValue
	gets  int
}

func (m *multiFake) GetItem(_ context.Context, in *dynamodb.GetItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.gets++
	return &dynamodb.GetItemOutput{Item: m.items[in.Key["key"].(*types.AttributeValueMemberS).Value]}, nil
}

func (m *multiFake) PutItem(_ context.Context, in *dynamodb.PutItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.items == nil {
		m.items = map[string]map[string]types.AttributeValue{}
	}
	m.items[in.Item["key"].(*types.AttributeValueMemberS).Value] = in.Item
	return &dynamodb.PutItemOutput{}, nil
}

// TestCacheBytes: the store remembers the data of the versions it wrote,
// least recently used first out, within CacheBytes; a version it no
// longer remembers costs a GetItem before the write.
func TestCacheBytes(t *testing.T) {
	ctx := context.Background()
	m := &multiFake{}
	s := dynamostore.NewWithAPI(m, "t")
	s.CacheBytes = 25
	versions := map[string]string{}
	for _, k := range []string{"a", "b", "c"} {
		v, err := s.PutIfVersion(ctx, k, make([]byte, 10), "")
		require.NoError(t, err)
		versions[k] = v
	}
	for _, tc := range []struct {
		key  string
		gets int
	}{{"c", 0}, {"b", 0}, {"a", 1}, {"c", 1}} {
		before := m.gets
		v, err := s.PutIfVersion(ctx, tc.key, make([]byte, 10), versions[tc.key])
		require.NoError(t, err, tc.key)
		versions[tc.key] = v
		assert.Equal(t, tc.gets, m.gets-before, "reads before writing %s", tc.key)
	}
	s.CacheBytes = 5 // smaller than one item's data: nothing is remembered
	v, err := s.PutIfVersion(ctx, "a", make([]byte, 10), versions["a"])
	require.NoError(t, err)
	before := m.gets
	_, err = s.PutIfVersion(ctx, "a", make([]byte, 10), v)
	require.NoError(t, err)
	assert.Equal(t, 1, m.gets-before)
}

// TestMaxDataSize: DynamoDB's 400 KB count the attribute names and values:
// the four names, the 32-byte token, the 32-byte digest, the key and the
// data.
func TestMaxDataSize(t *testing.T) {
	assert.Equal(t, 409600-84-3, dynamostore.MaxDataSize("abc"))
	f := &fakeAPI{}
	_, err := dynamostore.NewWithAPI(f, "t").PutIfVersion(context.Background(), "abc", make([]byte, 409600-84-3+1), "")
	require.ErrorIs(t, err, writefence.ErrTooLarge)
	assert.Empty(t, f.calls)
}
