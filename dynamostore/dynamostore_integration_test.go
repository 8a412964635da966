package dynamostore_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/logging"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/dynamostore"
	"github.com/writefence/writefence/internal/modeltest"
	"github.com/writefence/writefence/internal/sdkserver/dynalite"
	"github.com/writefence/writefence/internal/testserver"
	"github.com/writefence/writefence/internal/testserver/kit"
	"github.com/writefence/writefence/writefencetest"
)

// The store against the DynamoDB server named by
// WRITEFENCE_DYNAMODB_ENDPOINT (.ci/run starts dynalite 4.0.0),
// each test in a table of its own.

// kitReadLimit is the read limit of the conformance runs: below the data
// an item can hold, so the suite sees an object one byte over it read and
// refused.
const kitReadLimit = 256 << 10

// newStore returns a client of the server sending through rt (nil: a
// transport of the test's own), a table of the test's own and a store
// over it.
func newStore(t *testing.T, rt *testserver.Transport) (*dynamodb.Client, string, *dynamostore.Store) {
	t.Helper()
	var tr http.RoundTripper
	if rt != nil {
		tr = rt
	}
	c := dynalite.DynamoDBClient(t, testserver.DynamoDBEndpoint(t), tr)
	table := dynalite.DynamoDBTable(t, c)
	return c, table, dynamostore.New(c, table)
}

// TestMain sets rapid's flags for the model test and checks for leaked
// goroutines (modeltest.Main).
func TestMain(m *testing.M) { modeltest.Main(m) }

// TestConformanceUntold runs the kit's size checks on a store left as
// New makes it, without Options.ReadLimit: an item holds less than the
// 1 MiB Payload/1MiB writes, and the kit learns the limit from the store's
// ErrTooLarge and checks it there.
func TestConformanceUntold(t *testing.T) {
	_, _, store := newStore(t, nil)
	writefencetest.TestConditionalStore(t, func(*testing.T) writefence.ConditionalStore { return store }, &writefencetest.Options{
		Only: "^(Payload/1MiB|Get/TooLarge|GetPrefix/Sizes|Fence/Reads)$",
	})
}

// TestConformance runs the kit on both ways a write learns the item it
// conditions on: remembered (the default) and read first (CacheBytes < 0).
// Damage is in place: the data attribute changed, version and digest kept.
//
// A Get is one consistent GetItem either way, which pairs bytes and
// version as it does in the other configuration: read first, the check of
// reads under overwrite makes readFirstOverwriteReads of them, enough for a
// read path that pairs them from two responses, and the remembered run the
// kit's count.
func TestConformance(t *testing.T) {
	for name, cache := range map[string]int64{"remembered": 0, "readfirst": -1} {
		t.Run(name, func(t *testing.T) {
			c, table, store := newStore(t, nil)
			store.MaxObjectSize, store.CacheBytes = kitReadLimit, cache
			opts := kit.Options(dynalite.DamageDynamoDB(c, table), kitReadLimit)
			if cache < 0 {
				opts.OverwriteReads = readFirstOverwriteReads
			}
			writefencetest.TestConditionalStore(t, func(*testing.T) writefence.ConditionalStore { return store }, opts)
		})
	}
}

// readFirstOverwriteReads is the size of Get/UnderOverwrite read first.
const readFirstOverwriteReads = 300

// TestModel runs the model (internal/modeltest) on both ways a write
// learns the item it conditions on, damaged in place.
func TestModel(t *testing.T) {
	t.Parallel()
	for name, cache := range map[string]int64{"remembered": 0, "readfirst": -1} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			modeltest.Run(t, func(t *testing.T) modeltest.Target {
				c, table, store := newStore(t, nil)
				store.CacheBytes = cache
				return modeltest.Target{Name: "dynamodb-" + name, Store: store, Damage: dynalite.DamageDynamoDB(c, table)}
			})
		})
	}
}

// TestProbe: the probe trusts DynamoDB, and leaves no item behind.
func TestProbe(t *testing.T) {
	_, _, store := newStore(t, nil)
	kit.Probe(t, store)
}

// TestRoundTrips counts the HTTP requests the SDK sends: a steady push (a
// Fence pushing consecutive epochs, its version cached) is one PutItem; a
// push by a fresh Fence a GetItem and a PutItem; Get one GetItem. Without
// the store's memory (CacheBytes < 0) a steady push reads the item first.
func TestRoundTrips(t *testing.T) {
	rt := testserver.NewTransport(t)
	_, _, store := newStore(t, rt)
	ctx := t.Context()
	payload := make([]byte, 1<<10)
	f := &writefence.Fence{Store: store}
	require.NoError(t, f.Push(ctx, "wal", "0", "w", 1, payload))

	const pushes = 50
	before := rt.Requests()
	for e := uint64(2); e < 2+pushes; e++ {
		require.NoError(t, f.Push(ctx, "wal", "0", "w", e, payload))
	}
	assert.Equal(t, 1.0, float64(rt.Requests()-before)/pushes, "requests per steady push")

	before = rt.Requests()
	require.NoError(t, (&writefence.Fence{Store: store}).Push(ctx, "wal", "0", "w", 100, payload))
	assert.EqualValues(t, 2, rt.Requests()-before, "requests of a cold push")

	before = rt.Requests()
	_, _, err := store.Get(ctx, kit.ShardKey(t, "wal", "0"))
	require.NoError(t, err)
	assert.EqualValues(t, 1, rt.Requests()-before, "requests of a Get")

	store.CacheBytes = -1
	require.NoError(t, f.Push(ctx, "wal", "0", "w", 101, payload)) // f learns the version of the cold push
	before = rt.Requests()
	for e := uint64(102); e < 102+pushes; e++ {
		require.NoError(t, f.Push(ctx, "wal", "0", "w", e, payload))
	}
	assert.Equal(t, 2.0, float64(rt.Requests()-before)/pushes, "requests per steady push, remembering nothing")
}

// getItem reads key's item raw.
func getItem(t *testing.T, c *dynamodb.Client, table, key string) map[string]types.AttributeValue {
	t.Helper()
	out, err := c.GetItem(t.Context(), &dynamodb.GetItemInput{TableName: aws.String(table), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{"key": &types.AttributeValueMemberS{Value: key}}})
	require.NoError(t, err)
	return out.Item
}

// TestDamageInPlace: an item whose data was changed around the store
// keeps its version, and a Fence that remembers that version does not
// overwrite it: the push is refused as corrupt and the item is left as it
// was; Latest reports the damage with its own version and the header of the
// record; a settle of exactly that version replaces it. The same holds for
// a PutItem by another program that copies the version and digest over
// other data.
func TestDamageInPlace(t *testing.T) {
	c, table, store := newStore(t, nil)
	ctx := t.Context()
	damage := dynalite.DamageDynamoDB(c, table)
	key := kit.ShardKey(t, "wal", "0")
	for i, how := range []string{"update", "put"} {
		t.Run(how, func(t *testing.T) {
			f := &writefence.Fence{Store: store}
			base := uint64(10 * (i + 1))
			require.NoError(t, f.Push(ctx, "wal", "0", "w", base, []byte("segment one")))
			require.NoError(t, f.Push(ctx, "wal", "0", "w", base+1, []byte("segment two")))
			switch how {
			case "update":
				require.NoError(t, damage(ctx, key, testserver.Fault{Flip: -1}))
			case "put":
				it := getItem(t, c, table, key)
				it["data"] = &types.AttributeValueMemberB{Value: []byte("forged")}
				_, err := c.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: it})
				require.NoError(t, err)
			}
			before := getItem(t, c, table, key)

			err := f.Push(ctx, "wal", "0", "w", base+2, []byte("segment three"))
			require.ErrorIs(t, err, writefence.ErrCorrupt, "a push at the remembered version")
			assert.Equal(t, before, getItem(t, c, table, key), "the damaged item is left as it was")

			_, _, _, err = f.Latest(ctx, "wal", "0")
			var ce *writefence.CorruptError
			require.ErrorAs(t, err, &ce)
			assert.True(t, strings.HasPrefix(ce.Version, "damaged-"), ce.Version)
			_, err = store.PutIfVersion(ctx, key, []byte("x"), before["version"].(*types.AttributeValueMemberS).Value)
			require.ErrorAs(t, err, &ce, "the version from before the damage")

			// The forged data holds no header: the operator states the floor.
			require.NoError(t, f.Settle(ctx, "wal", "0", writefence.Settlement{
				Version: ce.Version, Writer: "operator", Epoch: base + 5, Payload: []byte("settled"), Floor: base + 1}))
			epoch, writer, payload, err := f.Latest(ctx, "wal", "0")
			require.NoError(t, err)
			assert.Equal(t, base+5, epoch)
			assert.Equal(t, "operator", writer)
			assert.Equal(t, "settled", string(payload))
		})
	}
}

// TestForeignItem: an item another program wrote without the store's
// attributes is damage too: Get names it, and neither a create nor a
// Fence overwrites it.
func TestForeignItem(t *testing.T) {
	c, table, store := newStore(t, nil)
	ctx := t.Context()
	_, err := c.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: map[string]types.AttributeValue{
		"key": &types.AttributeValueMemberS{Value: "k"}, "data": &types.AttributeValueMemberS{Value: "text"}}})
	require.NoError(t, err)
	_, _, err = store.Get(ctx, "k")
	var ce *writefence.CorruptError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, "dynamodb item has no string version", ce.Check)
	_, err = store.PutIfVersion(ctx, "k", []byte("x"), "")
	require.ErrorAs(t, err, &ce, "a create over a foreign item")
	_, err = store.PutIfVersion(ctx, "k", []byte("x"), ce.Version)
	require.NoError(t, err, "a write at exactly the damaged version replaces it")
}

// TestLimits: data of exactly MaxDataSize lands and reads back; one byte
// more is refused before any request, and DynamoDB itself refuses an item
// one byte over its limit, so the store's bound is the service's.
func TestLimits(t *testing.T) {
	rt := testserver.NewTransport(t)
	c, table, store := newStore(t, rt)
	ctx := t.Context()
	max := dynamostore.MaxDataSize("big")
	_, err := store.PutIfVersion(ctx, "big", make([]byte, max), "")
	require.NoError(t, err)
	data, _, err := store.Get(ctx, "big")
	require.NoError(t, err)
	assert.Len(t, data, max)

	before := rt.Requests()
	_, err = store.PutIfVersion(ctx, "big2", make([]byte, max+1), "")
	require.ErrorIs(t, err, writefence.ErrTooLarge)
	var se *writefence.StoreError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, "dynamodb put", se.Op)
	assert.Equal(t, before, rt.Requests(), "refused before sending")

	it := getItem(t, c, table, "big")
	it["key"] = &types.AttributeValueMemberS{Value: "big2"}
	it["data"] = &types.AttributeValueMemberB{Value: make([]byte, max-1)} // the key is one byte longer
	_, err = c.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: it})
	require.NoError(t, err, "an item of exactly 400 KB")
	it["data"] = &types.AttributeValueMemberB{Value: make([]byte, max)}
	_, err = c.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: it})
	var ae smithy.APIError
	require.ErrorAs(t, err, &ae, "one byte more is refused by the service")
	assert.Equal(t, "ValidationException", ae.ErrorCode())

	store.MaxObjectSize = 1000
	_, _, err = store.Get(ctx, "big")
	require.ErrorIs(t, err, writefence.ErrTooLarge)
	_, err = store.PutIfVersion(ctx, strings.Repeat("k", dynamostore.MaxKeySize+1), nil, "")
	require.ErrorIs(t, err, writefence.ErrInvalidArgument)
}

// TestPermissions: a request the service refuses for its credentials
// (here none: dynalite checks that a request is signed, not by whom)
// matches fs.ErrPermission on every operation, reaches the SDK's error,
// and a Fence does not retry it. Errors and the SDK's log lines, with
// retries, responses and signing logged, never carry the credentials.
func TestPermissions(t *testing.T) {
	endpoint := testserver.DynamoDBEndpoint(t)
	owner := dynalite.DynamoDBClient(t, endpoint, nil)
	table := dynalite.DynamoDBTable(t, owner)
	ctx := t.Context()
	_, err := dynamostore.New(owner, table).PutIfVersion(ctx, "k", []byte("v"), "")
	require.NoError(t, err)

	anonymous := dynamostore.New(dynalite.DynamoDBClient(t, endpoint, nil, func(o *dynamodb.Options) {
		o.Credentials = aws.AnonymousCredentials{}
	}), table)
	for name, call := range map[string]func() error{
		"get":    func() error { _, _, err := anonymous.Get(ctx, "k"); return err },
		"create": func() error { _, err := anonymous.PutIfVersion(ctx, "new", []byte("x"), ""); return err },
		"delete": func() error { return anonymous.Delete(ctx, "k") },
		"list":   func() error { return anonymous.List(ctx, "", func(string) error { return nil }) },
		"table":  func() error { return anonymous.CreateTable(ctx) },
	} {
		err := call()
		require.ErrorIs(t, err, fs.ErrPermission, name)
		assert.NotErrorIs(t, err, writefence.ErrConflict, name)
		assert.NotErrorIs(t, err, writefence.ErrNotFound, name)
		var ae smithy.APIError
		require.ErrorAs(t, err, &ae, name)
		assert.Equal(t, "MissingAuthenticationTokenException", ae.ErrorCode(), name)
	}
	require.ErrorIs(t, (&writefence.Fence{Store: anonymous}).Push(ctx, "wal", "0", "w", 1, []byte("p")), fs.ErrPermission)

	// Failures of a client that holds credentials: a missing table, a
	// conflict, damage, a cancelled call; and its log lines.
	var logs syncLog
	logged := dynalite.DynamoDBClient(t, endpoint, nil, func(o *dynamodb.Options) {
		o.Logger = &logs
		o.ClientLogMode = aws.LogRetries | aws.LogResponse | aws.LogSigning | aws.LogDeprecatedUsage
	})
	store := dynamostore.New(logged, table)
	var errs []error
	_, _, err = dynamostore.New(logged, "no-such-table").Get(ctx, "k")
	require.Error(t, err)
	assert.NotErrorIs(t, err, writefence.ErrNotFound, "a missing table is not a missing key")
	errs = append(errs, err)
	_, err = store.PutIfVersion(ctx, "k", []byte("x"), "")
	require.ErrorIs(t, err, writefence.ErrConflict)
	errs = append(errs, err)
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, _, err = store.Get(cctx, "k")
	require.ErrorIs(t, err, context.Canceled)
	errs = append(errs, err)
	for _, err := range errs {
		for _, secret := range []string{testserver.DynamoDBSecretKey, testserver.DynamoDBAccessKey} {
			assert.NotContains(t, fmt.Sprintf("%v %+v", err, err), secret)
		}
	}
	require.NotEmpty(t, logs.lines(), "the client logged")
	for _, line := range logs.lines() {
		assert.NotContains(t, line, testserver.DynamoDBSecretKey)
	}
}

// syncLog keeps the SDK's log lines.
type syncLog struct {
	mu  sync.Mutex
	buf []string
}

func (l *syncLog) Logf(_ logging.Classification, format string, v ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, fmt.Sprintf(format, v...))
}

func (l *syncLog) lines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.buf...)
}

// TestCreateTable: the store creates its table only when asked; asking
// again is not an error, and a table of another key schema is refused.
func TestCreateTable(t *testing.T) {
	c := dynalite.DynamoDBClient(t, testserver.DynamoDBEndpoint(t), nil)
	ctx := t.Context()
	name := testserver.UniqueName(t)
	t.Cleanup(func() {
		_, _ = c.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: aws.String(name)})
	})
	store := dynamostore.New(c, name)
	_, _, err := store.Get(ctx, "k")
	require.Error(t, err, "no table is created by a read")
	var nf *types.ResourceNotFoundException
	require.ErrorAs(t, err, &nf)
	require.NoError(t, store.CreateTable(ctx))
	require.NoError(t, store.CreateTable(ctx), "again")
	_, _, err = store.Get(ctx, "k")
	require.ErrorIs(t, err, writefence.ErrNotFound)

	other := testserver.UniqueName(t)
	_, err = c.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            aws.String(other),
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("id"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("id"), KeyType: types.KeyTypeHash}},
		BillingMode:          types.BillingModePayPerRequest,
	})
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = c.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: aws.String(other)})
	})
	err = dynamostore.New(c, other).CreateTable(ctx)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "key schema")
	assert.False(t, errors.Is(err, writefence.ErrConflict))
}

// BenchmarkPush compares, for a 1 KiB payload, the service's raw
// conditional write (a PutItem conditioned on version = :v, the floor),
// the same PutItem with the store's item and condition (rawitem: version,
// data and digest, so the previous data travels with the new), the
// store's PutIfVersion, and a steady Fence.Push (one writer pushing
// consecutive epochs, its version cached), side by side:
//
//	go test -run '^$' -bench BenchmarkPush -count 10 ./dynamostore | benchstat -col /impl -
//
// roundtrips/op counts the HTTP requests sent.
func BenchmarkPush(b *testing.B) {
	rt := testserver.NewTransport(b)
	c := dynalite.DynamoDBClient(b, testserver.DynamoDBEndpoint(b), rt)
	table := dynalite.DynamoDBTable(b, c)
	store := dynamostore.New(c, table)
	payload := make([]byte, 1<<10)
	for i := range payload {
		payload[i] = byte(i*31 + 7)
	}
	for _, impl := range []string{"raw", "rawitem", "store", "fenced"} {
		b.Run("size=1KiB/impl="+impl, func(b *testing.B) {
			ctx := context.Background()
			key := testserver.UniqueName(b)
			prevDigest := make([]byte, 32)
			version, err := store.PutIfVersion(ctx, key, payload, "")
			require.NoError(b, err)
			fence := &writefence.Fence{Store: store, Prefix: key + "/"}
			epoch := uint64(1)
			require.NoError(b, fence.Push(ctx, "wal", "0", "w", epoch, payload))
			rawVersion := 0
			b.SetBytes(int64(len(payload)))
			b.ReportAllocs()
			before := rt.Requests()
			for b.Loop() {
				switch impl {
				case "raw", "rawitem":
					next := fmt.Sprint(rawVersion + 1)
					in := &dynamodb.PutItemInput{
						TableName: aws.String(table),
						Item: map[string]types.AttributeValue{
							"key":     &types.AttributeValueMemberS{Value: key + "-raw"},
							"version": &types.AttributeValueMemberS{Value: next},
							"data":    &types.AttributeValueMemberB{Value: payload},
						},
						ConditionExpression:      aws.String("attribute_not_exists(#k) OR #v = :v"),
						ExpressionAttributeNames: map[string]string{"#k": "key", "#v": "version"},
						ExpressionAttributeValues: map[string]types.AttributeValue{
							":v": &types.AttributeValueMemberS{Value: fmt.Sprint(rawVersion)},
						},
					}
					if impl == "rawitem" {
						digest := make([]byte, 32)
						digest[0] = byte(rawVersion + 1)
						in.Item["digest"] = &types.AttributeValueMemberB{Value: digest}
						in.ConditionExpression = aws.String(*in.ConditionExpression + " AND #d = :d AND #g = :g")
						in.ExpressionAttributeNames["#d"], in.ExpressionAttributeNames["#g"] = "data", "digest"
						in.ExpressionAttributeValues[":d"] = &types.AttributeValueMemberB{Value: payload}
						in.ExpressionAttributeValues[":g"] = &types.AttributeValueMemberB{Value: prevDigest}
						prevDigest = digest
					}
					_, err = c.PutItem(ctx, in, func(o *dynamodb.Options) { o.Retryer = aws.NopRetryer{} })
					rawVersion++
				case "store":
					version, err = store.PutIfVersion(ctx, key, payload, version)
				case "fenced":
					epoch++
					err = fence.Push(ctx, "wal", "0", "w", epoch, payload)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(rt.Requests()-before)/float64(b.N), "roundtrips/op")
		})
	}
}
