// Package dynamostore is a writefence.ConditionalStore over one Amazon
// DynamoDB table, through aws-sdk-go-v2: each key of the store is one item,
// and every write is one PutItem whose ConditionExpression DynamoDB
// decides.
//
// It lives in its own package so that programs importing writefence do not
// compile the AWS SDK unless they use it.
//
// # Layout
//
// The table's partition key is the string attribute "key" and it has no
// sort key (Store.CreateTable makes such a table). Each item holds:
//
//	key      S  the store's key
//	version  S  the version token: 128 random bits in lower-case hex,
//	            drawn afresh for every write
//	data     B  the bytes stored
//	digest   B  the SHA-256 of the key, the version and the data
//
// DynamoDB keeps no version of its own: the version is an attribute the
// writer sets, beside the data. A random token never repeats for a key,
// not after a delete either (a counter would restart, or need a counter
// item updated in a TransactWriteItems with every write, which costs twice
// the write capacity and makes one item the hot spot of every shard). A
// number attribute cannot hold 128 bits (DynamoDB numbers keep 38 digits),
// hence a string.
//
// # Damage in place
//
// Because the version sits beside the data, bytes changed around the store
// (an UpdateItem that sets data, an item edited in the console, a PutItem
// that copies the version) can keep the version a Fence remembers. Every
// read therefore checks the item against its digest: Get reports an item
// that fails as a *writefence.CorruptError whose Version is "damaged-"
// followed by the SHA-256 of the version, data and digest attributes as
// found (it names exactly that damage and no intact item) and whose Head
// holds the item's data as found. Every conditional write compares the whole
// item it expects, not only its version: the condition is
//
//	version = :v AND data = :d AND digest = :g
//
// with the data and digest of the intact item at that version, so a write
// lands only over exactly the item the version named, and a write over a
// damaged item is refused with the *writefence.CorruptError, writing
// nothing. The store remembers the data of the version it last wrote or
// read, per key (CacheBytes), so a steady writer's write is one PutItem;
// without it, PutIfVersion reads the item first (a GetItem, consistent) and
// conditions its write on what it read. A write conditioned on the damaged
// version replaces the item if and only if every one of the three
// attributes still holds what was found: that is how an operator replaces
// it (Fence.Settle). The condition carries the previous data, so a write
// sends the previous data with the new (400 KB at most each); DynamoDB's
// write capacity counts the item, not the request.
//
// # Failure model
//
// Durability across failover: DynamoDB acknowledges a write once it is
// durable in several Availability Zones of the region; an acknowledged
// write is never lost to a node's or a zone's failure. There is nothing to
// configure for it. A global table (replicated across regions) is not
// served: its cross-region replication is asynchronous and last writer
// wins, so conditions are not decided across regions.
//
// Consistency of reads: every GetItem and Scan the store sends asks for
// ConsistentRead. An eventually consistent read can return an item older
// than the last acknowledged write: a Fence that read one would decide on a
// stale record (its write then conflicts and it reads again), but a writer
// retrying a push whose reply was lost could miss its own landed write, and
// Latest could return a superseded record.
//
// Per-item limits: DynamoDB's item limit is 400 KB (409,600 bytes)
// counting attribute names and values; an item holds 84 bytes beside the
// key and the data, so the data can be 409,516 bytes less the key's
// length. A larger write is refused before it is sent, with an error
// matching writefence.ErrTooLarge. A record larger than that (a snapshot)
// belongs in a blob store such as S3, referenced by a manifest that the
// fence admits here (Fence.Blobs in the writefence package: the manifests
// in DynamoDB, the blobs in S3). MaxObjectSize bounds reads below that.
//
// What the caller must configure: the table (CreateTable, or an existing
// table with the same key schema; either billing mode), in one region, and
// credentials allowed dynamodb:GetItem, PutItem, DeleteItem and Scan on it
// (and CreateTable and DescribeTable for CreateTable). Throttling is
// answered as a transient error and retried by the Fence; provision for
// the write rate or use on-demand capacity.
//
// # Errors
//
// Every failure that is not a verdict on what was found (a
// *writefence.CorruptError) is a *writefence.StoreError whose Op is
// "dynamodb get", "dynamodb put", "dynamodb delete", "dynamodb list" or
// "dynamodb create table" and whose Err reaches the SDK's error (a
// smithy.APIError for an answer of the service). A failed condition
// matches writefence.ErrConflict (and reaches the
// *types.ConditionalCheckFailedException); a refusal of the credentials or
// their rights (AccessDeniedException, UnrecognizedClientException,
// MissingAuthenticationTokenException, InvalidSignatureException,
// IncompleteSignatureException, ExpiredTokenException) matches
// fs.ErrPermission and wrote nothing; throttling and server errors match
// no sentinel and are retried. A cancelled or expired ctx is returned as
// ctx.Err(). The SDK's errors name no credentials, and the store logs
// nothing.
package dynamostore

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/escape"
	"github.com/writefence/writefence/internal/hook"
	"github.com/writefence/writefence/internal/keys"
)

// The item's attribute names.
const (
	attrKey     = "key"
	attrVersion = "version"
	attrData    = "data"
	attrDigest  = "digest"
)

// Limits of DynamoDB and of the layout.
const (
	// MaxItemSize is DynamoDB's item limit: 400 KB, counting each
	// attribute's name and value.
	MaxItemSize = 400 << 10

	// itemOverhead is what an item holds beside its key's and data's
	// bytes: the four attribute names, the token and the digest.
	itemOverhead = len(attrKey) + len(attrVersion) + versionLen + len(attrData) + len(attrDigest) + sha256.Size

	// MaxKeySize is DynamoDB's limit on a partition key value.
	MaxKeySize = 2048

	versionLen = 32 // 128 bits in hex

	// damagedPrefix starts the version of a damaged item.
	damagedPrefix = "damaged-"

	// defaultCacheBytes bounds the data remembered for conditions when
	// CacheBytes is zero.
	defaultCacheBytes = 16 << 20
)

// MaxDataSize returns the largest data a write of key can store: what
// DynamoDB's item limit leaves beside the key and the layout's attributes.
func MaxDataSize(key string) int {
	return MaxItemSize - itemOverhead - len(key)
}

// api is the part of the SDK's client the store uses; *dynamodb.Client
// implements it, and tests substitute their own.
type api interface {
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	PutItem(ctx context.Context, in *dynamodb.PutItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error)
	Scan(ctx context.Context, in *dynamodb.ScanInput, optFns ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error)
	CreateTable(ctx context.Context, in *dynamodb.CreateTableInput, optFns ...func(*dynamodb.Options)) (*dynamodb.CreateTableOutput, error)
	DescribeTable(ctx context.Context, in *dynamodb.DescribeTableInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error)
}

// Store is a writefence.ConditionalStore over one DynamoDB table; see the
// package documentation. It also implements writefence.Deleter and
// writefence.Lister. It declares no faster paths (writefence.Capable):
// DynamoDB reads no part of an attribute, and joins nothing faster than
// the library does.
//
// Set the fields before first use; they are read without locking. A Store
// is safe for concurrent use.
type Store struct {
	// MaxObjectSize is the read limit in bytes of data: Get refuses an
	// item whose data is larger with writefence.ErrTooLarge. Zero (or
	// less) means no limit below DynamoDB's own item limit, which bounds
	// every read.
	MaxObjectSize int64

	// CacheBytes bounds the data the store remembers, per key, of the
	// version it last wrote or read, so a write conditioned on that
	// version needs no read first. Zero means 16 MiB; a negative value
	// remembers nothing, and every update then costs a GetItem and a
	// PutItem.
	CacheBytes int64

	api   api
	table string
	cache cache
}

var (
	_ writefence.ConditionalStore = (*Store)(nil)
	_ writefence.Deleter          = (*Store)(nil)
	_ writefence.Lister           = (*Store)(nil)
)

// New returns a store over table, through the caller's client (its region,
// endpoint and credentials). The table must exist with a string partition
// key named "key" and no sort key; CreateTable makes one. The store never
// creates a table by itself.
//
// Reads use the client's retries. A PutItem is sent once, without the
// SDK's retries: a retry after a write that landed but whose answer was
// lost would be refused by the write's own condition and reported as a
// conflict.
func New(client *dynamodb.Client, table string) *Store {
	return &Store{api: client, table: table}
}

// noRetry is the option of a call that must be sent at most once.
func noRetry(o *dynamodb.Options) { o.Retryer = aws.NopRetryer{} }

// CreateTable creates the store's table, on-demand billing, with the key
// schema the store needs, and waits until it is ACTIVE or ctx ends. A
// table that already exists with that key schema is not an error; one with
// another key schema is. The caller's credentials need
// dynamodb:CreateTable and dynamodb:DescribeTable.
func (s *Store) CreateTable(ctx context.Context) error {
	_, err := s.api.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            aws.String(s.table),
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String(attrKey), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String(attrKey), KeyType: types.KeyTypeHash}},
		BillingMode:          types.BillingModePayPerRequest,
	})
	var inUse *types.ResourceInUseException
	if err != nil && !errors.As(err, &inUse) {
		return s.fail(ctx, "create table", "", err)
	}
	for {
		out, err := s.api.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(s.table)})
		if err != nil {
			return s.fail(ctx, "create table", "", err)
		}
		if out.Table == nil {
			return s.fail(ctx, "create table", "", errors.New("DescribeTable returned no table"))
		}
		if err := checkSchema(out.Table); err != nil {
			return &writefence.StoreError{Op: "dynamodb create table", Err: fmt.Errorf("table %s: %w", escape.String(s.table), err)}
		}
		if out.Table.TableStatus == types.TableStatusActive {
			return nil
		}
		if err := hook.Sleep(ctx, 200*time.Millisecond); err != nil {
			return err
		}
	}
}

// checkSchema reports a table whose key schema is not the store's.
func checkSchema(t *types.TableDescription) error {
	if len(t.KeySchema) != 1 || aws.ToString(t.KeySchema[0].AttributeName) != attrKey || t.KeySchema[0].KeyType != types.KeyTypeHash {
		return errors.New(`its key schema is not one string partition key named "key"`)
	}
	for _, d := range t.AttributeDefinitions {
		if aws.ToString(d.AttributeName) == attrKey && d.AttributeType != types.ScalarAttributeTypeS {
			return errors.New(`its partition key "key" is not a string`)
		}
	}
	return nil
}

func keyOf(key string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{attrKey: &types.AttributeValueMemberS{Value: key}}
}

// checkKey refuses, for op, a key DynamoDB cannot hold.
func checkKey(op, key string) error {
	var reason string
	switch {
	case key == "":
		reason = "empty"
	case len(key) > MaxKeySize:
		reason = fmt.Sprintf("%d bytes, DynamoDB takes at most %d", len(key), MaxKeySize)
	default:
		return nil
	}
	return &writefence.StoreError{Op: "dynamodb " + op, Key: key, Err: &writefence.InvalidArgumentError{Arg: "key", Reason: reason}}
}

// Get implements writefence.ConditionalStore with one GetItem, consistent:
// the data and the version come from the same item. An item that fails
// its digest is a *writefence.CorruptError; see Damage in place.
func (s *Store) Get(ctx context.Context, key string) ([]byte, string, error) {
	it, err := s.read(ctx, "get", key)
	if err != nil {
		return nil, "", err
	}
	if limit := s.MaxObjectSize; limit > 0 && int64(len(it.data)) > limit {
		return nil, "", &writefence.StoreError{Op: "dynamodb get", Key: key, Err: fmt.Errorf("%w: more than %d bytes", writefence.ErrTooLarge, limit)}
	}
	s.remember(key, it)
	return append([]byte{}, it.data...), it.version, nil
}

// read reads key's item with one consistent GetItem and checks it: an
// absent item is an error matching writefence.ErrNotFound, a damaged one
// its *writefence.CorruptError.
func (s *Store) read(ctx context.Context, op, key string) (*item, error) {
	if err := checkKey(op, key); err != nil {
		return nil, err
	}
	out, err := s.api.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(s.table), Key: keyOf(key), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return nil, s.fail(ctx, op, key, err)
	}
	if len(out.Item) == 0 {
		return nil, &writefence.StoreError{Op: "dynamodb " + op, Key: key, Err: writefence.ErrNotFound}
	}
	it, err := parseItem(key, out.Item)
	if err != nil {
		return nil, &writefence.StoreError{Op: "dynamodb " + op, Key: key, Err: err}
	}
	return it, nil
}

// item is an intact item.
type item struct {
	version string
	data    []byte
	digest  []byte
}

// parseItem returns the intact item attrs hold for key, or the
// *writefence.CorruptError of the damage it finds.
func parseItem(key string, attrs map[string]types.AttributeValue) (*item, error) {
	var it item
	check := ""
	v, okV := attrs[attrVersion].(*types.AttributeValueMemberS)
	d, okD := attrs[attrData].(*types.AttributeValueMemberB)
	g, okG := attrs[attrDigest].(*types.AttributeValueMemberB)
	switch {
	case !okV:
		check = "dynamodb item has no string version"
	case !validVersion(v.Value):
		check = "dynamodb version token"
	case !okD:
		check = "dynamodb item has no binary data"
	case !okG || len(g.Value) != sha256.Size:
		check = "dynamodb item has no digest"
	default:
		it = item{version: v.Value, data: d.Value, digest: g.Value}
		if sum := digest(key, it.version, it.data); string(sum[:]) != string(it.digest) {
			check = "dynamodb item digest"
		}
	}
	if check == "" {
		return &it, nil
	}
	ce := &writefence.CorruptError{Key: key, Version: damagedVersion(attrs), Check: check}
	if okD && len(d.Value) > 0 {
		ce.Head = append([]byte(nil), d.Value...)
	}
	return nil, ce
}

// digest is the SHA-256 of the key (its length first), the version token
// and the data.
func digest(key, version string, data []byte) [sha256.Size]byte {
	h := sha256.New()
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(key)))
	h.Write(n[:])
	h.Write([]byte(key))
	h.Write([]byte(version))
	h.Write(data)
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return sum
}

// damagedVersion is the version of a damaged item: the SHA-256 of its
// version, data and digest attributes as found, each as its presence, its
// type and its value.
func damagedVersion(attrs map[string]types.AttributeValue) string {
	h := sha256.New()
	for _, name := range []string{attrVersion, attrData, attrDigest} {
		var b []byte
		switch v := attrs[name].(type) {
		case nil:
			b = []byte{0}
		case *types.AttributeValueMemberS:
			b = append([]byte{'S'}, v.Value...)
		case *types.AttributeValueMemberB:
			b = append([]byte{'B'}, v.Value...)
		case *types.AttributeValueMemberN:
			b = append([]byte{'N'}, v.Value...)
		default:
			b = append([]byte{'X'}, fmt.Sprintf("%T", v)...)
		}
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(b)))
		h.Write(n[:])
		h.Write(b)
	}
	return damagedPrefix + hex.EncodeToString(h.Sum(nil))
}

func validVersion(v string) bool {
	return len(v) == versionLen && keys.IsLowerHex(v)
}

func validDamagedVersion(v string) bool {
	h, ok := strings.CutPrefix(v, damagedPrefix)
	return ok && len(h) == 2*sha256.Size && keys.IsLowerHex(h)
}

func newVersion() string {
	var b [versionLen / 2]byte
	_, _ = rand.Read(b[:]) // never fails: crypto/rand aborts the program instead
	return hex.EncodeToString(b[:])
}

// PutIfVersion implements writefence.ConditionalStore with one PutItem
// whose condition DynamoDB decides: attribute_not_exists(key) when
// expectVersion is empty, otherwise the whole intact item at that version
// (version, data and digest; see Damage in place), taken from what the
// store remembers of that version or, when it remembers nothing, from a
// consistent GetItem sent first. A write conditioned on the version of a
// damaged item reads it first and replaces it only if it still holds
// exactly that damage.
//
// A failed condition is an error matching writefence.ErrConflict, or the
// item's *writefence.CorruptError when it is damaged (the item that made
// the condition fail is taken from the reply, where the service returns
// it, or from a GetItem). A non-empty expectVersion of neither form cannot
// equal the current version: writefence.ErrConflict without a round trip.
// A write whose item would exceed DynamoDB's item limit is refused with
// writefence.ErrTooLarge before it is sent.
func (s *Store) PutIfVersion(ctx context.Context, key string, data []byte, expectVersion string) (string, error) {
	if err := checkKey("put", key); err != nil {
		return "", err
	}
	if err := ctx.Err(); err != nil {
		return "", err
	}
	if max := MaxDataSize(key); len(data) > max {
		return "", &writefence.StoreError{Op: "dynamodb put", Key: key,
			Err: fmt.Errorf("%w: %d bytes of data, above the %d an item of this key holds within DynamoDB's 400 KB", writefence.ErrTooLarge, len(data), max)}
	}
	c := newCond()
	switch {
	case expectVersion == "":
		c.add("attribute_not_exists(%s)", attrKey, nil)
	case validVersion(expectVersion):
		it, ok := s.recall(key, expectVersion)
		if !ok {
			var err error
			if it, err = s.read(ctx, "put", key); err != nil {
				if errors.Is(err, writefence.ErrNotFound) {
					return "", conflict(key, nil)
				}
				return "", err
			}
			if it.version != expectVersion {
				return "", conflict(key, nil)
			}
		}
		c.add("%s = %s", attrVersion, &types.AttributeValueMemberS{Value: it.version})
		c.add("%s = %s", attrData, &types.AttributeValueMemberB{Value: it.data})
		c.add("%s = %s", attrDigest, &types.AttributeValueMemberB{Value: it.digest})
	case validDamagedVersion(expectVersion):
		attrs, err := s.damaged(ctx, key, expectVersion)
		if err != nil {
			return "", err
		}
		for _, name := range []string{attrVersion, attrData, attrDigest} {
			if v, ok := attrs[name]; ok {
				c.add("%s = %s", name, v)
			} else {
				c.add("attribute_not_exists(%s)", name, nil)
			}
		}
	default:
		return "", conflict(key, fmt.Errorf("%s is not a version this store issues", escape.String(expectVersion)))
	}

	version := newVersion()
	sum := digest(key, version, data)
	_, err := s.api.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: aws.String(s.table),
		Item: map[string]types.AttributeValue{
			attrKey:     &types.AttributeValueMemberS{Value: key},
			attrVersion: &types.AttributeValueMemberS{Value: version},
			attrData:    &types.AttributeValueMemberB{Value: data},
			attrDigest:  &types.AttributeValueMemberB{Value: sum[:]},
		},
		ConditionExpression:                 aws.String(c.expr()),
		ExpressionAttributeNames:            c.names,
		ExpressionAttributeValues:           c.values,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}, noRetry)
	var ccf *types.ConditionalCheckFailedException
	switch {
	case errors.As(err, &ccf):
		s.forget(key)
		return "", s.refusal(ctx, key, ccf)
	case err != nil:
		return "", s.fail(ctx, "put", key, err)
	}
	s.remember(key, &item{version: version, data: append([]byte{}, data...), digest: sum[:]})
	return version, nil
}

// damaged reads key's item for a write conditioned on the damaged version
// expect, and returns its attributes when it still holds exactly that
// damage. An absent or intact item is a conflict; other damage is its own
// *writefence.CorruptError.
func (s *Store) damaged(ctx context.Context, key, expect string) (map[string]types.AttributeValue, error) {
	out, err := s.api.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(s.table), Key: keyOf(key), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return nil, s.fail(ctx, "put", key, err)
	}
	if len(out.Item) == 0 {
		return nil, conflict(key, nil)
	}
	_, err = parseItem(key, out.Item)
	var ce *writefence.CorruptError
	switch {
	case err == nil:
		return nil, conflict(key, nil)
	case !errors.As(err, &ce) || ce.Version != expect:
		return nil, &writefence.StoreError{Op: "dynamodb put", Key: key, Err: err}
	}
	return out.Item, nil
}

// refusal is the error of a write whose condition failed: the
// *writefence.CorruptError of the item that made it fail when that item is
// damaged, else a conflict. The item comes from the reply when the service
// returned it (ReturnValuesOnConditionCheckFailure), else from a GetItem;
// when that read fails the refusal is a conflict all the same, since the
// write did not land either way.
func (s *Store) refusal(ctx context.Context, key string, ccf *types.ConditionalCheckFailedException) error {
	attrs := ccf.Item
	if attrs == nil {
		out, err := s.api.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(s.table), Key: keyOf(key), ConsistentRead: aws.Bool(true)})
		if err != nil {
			return conflict(key, ccf)
		}
		attrs = out.Item
	}
	if len(attrs) > 0 {
		var ce *writefence.CorruptError
		if _, err := parseItem(key, attrs); errors.As(err, &ce) {
			return &writefence.StoreError{Op: "dynamodb put", Key: key, Err: ce}
		}
	}
	return conflict(key, ccf)
}

func conflict(key string, cause error) error {
	err := writefence.ErrConflict
	if cause != nil {
		err = fmt.Errorf("%w: %w", writefence.ErrConflict, cause)
	}
	return &writefence.StoreError{Op: "dynamodb put", Key: key, Err: err}
}

// cond builds a ConditionExpression of comparisons joined by AND.
type cond struct {
	terms  []string
	names  map[string]string
	values map[string]types.AttributeValue
}

func newCond() *cond {
	return &cond{names: map[string]string{}, values: map[string]types.AttributeValue{}}
}

// add adds the comparison format makes of the attribute name and, when v
// is not nil, a value placeholder.
func (c *cond) add(format, name string, v types.AttributeValue) {
	n := fmt.Sprintf("#a%d", len(c.names))
	c.names[n] = name
	if v == nil {
		c.terms = append(c.terms, fmt.Sprintf(format, n))
		return
	}
	p := fmt.Sprintf(":v%d", len(c.values))
	c.values[p] = v
	c.terms = append(c.terms, fmt.Sprintf(format, n, p))
}

func (c *cond) expr() string {
	if len(c.values) == 0 {
		c.values = nil
	}
	return strings.Join(c.terms, " AND ")
}

// Delete implements writefence.Deleter with one unconditional DeleteItem.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := checkKey("delete", key); err != nil {
		return err
	}
	s.forget(key)
	if _, err := s.api.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(s.table), Key: keyOf(key)}); err != nil {
		return s.fail(ctx, "delete", key, err)
	}
	return nil
}

// List implements writefence.Lister with a consistent Scan of the table's
// keys (ProjectionExpression key) filtered by begins_with, page by page.
// DynamoDB has no index of keys by prefix in a table keyed by partition
// key alone: a Scan reads (and bills) the whole table. Keys come in no
// particular order.
func (s *Store) List(ctx context.Context, prefix string, fn func(key string) error) error {
	in := &dynamodb.ScanInput{
		TableName:                aws.String(s.table),
		ProjectionExpression:     aws.String("#k"),
		ExpressionAttributeNames: map[string]string{"#k": attrKey},
		ConsistentRead:           aws.Bool(true),
	}
	if prefix != "" {
		in.FilterExpression = aws.String("begins_with(#k, :p)")
		in.ExpressionAttributeValues = map[string]types.AttributeValue{":p": &types.AttributeValueMemberS{Value: prefix}}
	}
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		out, err := s.api.Scan(ctx, in)
		if err != nil {
			return s.fail(ctx, "list", prefix, err)
		}
		for _, it := range out.Items {
			if err := ctx.Err(); err != nil {
				return err
			}
			k, ok := it[attrKey].(*types.AttributeValueMemberS)
			if !ok || !strings.HasPrefix(k.Value, prefix) {
				continue
			}
			if err := fn(k.Value); err != nil {
				return err
			}
		}
		if len(out.LastEvaluatedKey) == 0 {
			return ctx.Err()
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
}

// refusedCodes are the error codes with which DynamoDB refuses the
// caller's credentials or their rights.
var refusedCodes = map[string]bool{
	"AccessDeniedException":               true,
	"UnrecognizedClientException":         true,
	"MissingAuthenticationTokenException": true,
	"InvalidSignatureException":           true,
	"IncompleteSignatureException":        true,
	"ExpiredTokenException":               true,
}

// fail wraps an SDK error in a *writefence.StoreError of op on key; a
// refusal of the credentials also matches fs.ErrPermission. A done ctx is
// returned as it is.
func (s *Store) fail(ctx context.Context, op, key string, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return ctxErr
	}
	var ae smithy.APIError
	if errors.As(err, &ae) && refusedCodes[ae.ErrorCode()] {
		err = fmt.Errorf("%w: %w", fs.ErrPermission, err)
	}
	return &writefence.StoreError{Op: "dynamodb " + op, Key: key, Err: err}
}
