// Package dynalite reaches the DynamoDB server the DynamoDB tests run
// against (dynalite in CI) through the AWS SDK, beside package
// testserver, so that only the modules that test on DynamoDB link the SDK.
package dynalite

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
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence/internal/testserver"
)

// DynamoDBClient returns a client of the server at endpoint with the test
// credentials, sending through rt (nil: testserver.HTTPTransport(t)); configure, when
// given, changes its options (credentials, retries, a logger).
func DynamoDBClient(t testing.TB, endpoint string, rt http.RoundTripper, configure ...func(*dynamodb.Options)) *dynamodb.Client {
	t.Helper()
	if rt == nil {
		rt = testserver.HTTPTransport(t)
	}
	o := dynamodb.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(endpoint),
		Credentials:  credentials.NewStaticCredentialsProvider(testserver.DynamoDBAccessKey, testserver.DynamoDBSecretKey, ""),
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
	name := testserver.UniqueName(t)
	_, err := c.CreateTable(context.Background(), &dynamodb.CreateTableInput{
		TableName:            aws.String(name),
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("key"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("key"), KeyType: types.KeyTypeHash}},
		BillingMode:          types.BillingModePayPerRequest,
	})
	require.NoError(t, err)
	// dynalite makes a table ACTIVE a moment after creating it; the
	// waiter's default first delay is 20 s.
	waiter := dynamodb.NewTableExistsWaiter(c, func(o *dynamodb.TableExistsWaiterOptions) {
		o.MinDelay, o.MaxDelay = 10*time.Millisecond, 500*time.Millisecond
	})
	require.NoError(t, waiter.Wait(context.Background(), &dynamodb.DescribeTableInput{TableName: aws.String(name)}, time.Minute))
	t.Cleanup(func() {
		ctx, cancel := testserver.CleanupContext(t)
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
func DamageDynamoDB(c *dynamodb.Client, table string) testserver.Damager {
	return func(ctx context.Context, key string, f testserver.Fault) error {
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
