package testserver

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// DynamoDBEndpoint returns the URL of the DynamoDB server named by the
// environment (WRITEFENCE_DYNAMODB_ENDPOINT; .ci/servers.sh starts
// dynalite), e.g. http://127.0.0.1:4567.
func DynamoDBEndpoint(t testing.TB) string { return Env(t, "WRITEFENCE_DYNAMODB_ENDPOINT") }

// DynamoDB test credentials: dynalite accepts any signed request.
const (
	DynamoDBAccessKey = "AKIDWRITEFENCETEST"
	DynamoDBSecretKey = "writefence-test-secret-key"
)

// DynamoDBClient returns a client of the server at endpoint with the test
// credentials, sending through rt (nil: HTTPTransport(t)); configure, when
// given, changes its options (credentials, retries, a logger).
func DynamoDBClient(t testing.TB, endpoint string, rt http.RoundTripper, configure ...func(*dynamodb.Options)) *dynamodb.Client {
	t.Helper()
	if rt == nil {
		rt = HTTPTransport(t)
	}
	o := dynamodb.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(endpoint),
		Credentials:  credentials.NewStaticCredentialsProvider(DynamoDBAccessKey, DynamoDBSecretKey, ""),
		HTTPClient:   &http.Client{Transport: rt},
	}
	for _, f := range configure {
		f(&o)
	}
	return dynamodb.New(o)
}

// DynamoDBTable creates a table of the test's own through c, keyed as the
// DynamoDB store needs (a string partition key "key"), and deletes it when
// the test ends.
func DynamoDBTable(t testing.TB, c *dynamodb.Client) string {
	t.Helper()
	name := UniqueName(t)
	_, err := c.CreateTable(context.Background(), &dynamodb.CreateTableInput{
		TableName:            aws.String(name),
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("key"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("key"), KeyType: types.KeyTypeHash}},
		BillingMode:          types.BillingModePayPerRequest,
	})
	check(t, err)
	// dynalite makes a table ACTIVE a moment after creating it; the
	// waiter's default first delay is 20 s.
	waiter := dynamodb.NewTableExistsWaiter(c, func(o *dynamodb.TableExistsWaiterOptions) {
		o.MinDelay, o.MaxDelay = 10*time.Millisecond, 500*time.Millisecond
	})
	check(t, waiter.Wait(context.Background(), &dynamodb.DescribeTableInput{TableName: aws.String(name)}, time.Minute))
	t.Cleanup(func() {
		ctx, cancel := CleanupContext(t)
		defer cancel()
		if _, err := c.DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: aws.String(name)}); err != nil {
			t.Errorf("cleanup: delete table %s: %v", name, err)
		}
	})
	return name
}

// DamageDynamoDB damages the items of the DynamoDB store's table on c in
// place, as an UpdateItem by another program or an edit in the console
// would: a flip changes one byte of the data attribute, Empty sets it to
// no bytes; the item's version and digest attributes stay.
func DamageDynamoDB(c *dynamodb.Client, table string) Damager {
	return func(ctx context.Context, key string, f Fault) error {
		k := map[string]types.AttributeValue{"key": &types.AttributeValueMemberS{Value: key}}
		out, err := c.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(table), Key: k, ConsistentRead: aws.Bool(true)})
		if err != nil {
			return err
		}
		d, ok := out.Item["data"].(*types.AttributeValueMemberB)
		if !ok {
			return fmt.Errorf("damage %s: the item holds no binary data", key)
		}
		_, err = c.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName:                 aws.String(table),
			Key:                       k,
			UpdateExpression:          aws.String("SET #d = :d"),
			ExpressionAttributeNames:  map[string]string{"#d": "data"},
			ExpressionAttributeValues: map[string]types.AttributeValue{":d": &types.AttributeValueMemberB{Value: f.Apply(d.Value)}},
		})
		return err
	}
}
