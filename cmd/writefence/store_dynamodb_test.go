//go:build !writefence_nodynamodb && !writefence_nosdk

package main

import (
	"context"
	"net/url"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence/dynamostore"
	"github.com/writefence/writefence/internal/sdkserver/dynalite"
	"github.com/writefence/writefence/internal/testserver"
)

// TestDynamoDBAddress: the forms of a DynamoDB address, and the malformed
// ones, refused as usage errors before any I/O, echoing no secret.
func TestDynamoDBAddress(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "hunter2secret")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	t.Setenv("AWS_REGION", "")
	t.Setenv("AWS_DEFAULT_REGION", "")
	t.Setenv("AWS_CONFIG_FILE", "/nonexistent")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
	ctx := context.Background()
	for _, addr := range []string{
		"dynamodb://mirrors?region=eu-west-1",
		"dynamodb://my_table.v2?endpoint=http://127.0.0.1:4567",
		"dynamodb://mirrors?endpoint=https://dynamodb.local:8000&region=us-west-2",
	} {
		s, err := openStore(ctx, addr)
		require.NoError(t, err, addr)
		assert.IsType(t, &dynamostore.Store{}, s.store, addr)
		require.NoError(t, s.close())
	}
	for _, addr := range []string{
		"dynamodb://",
		"dynamodb://ab?region=r",
		"dynamodb://mirrors/path?region=r",
		"dynamodb://bad%20name?region=r",
		"dynamodb://mirrors?endpoint=127.0.0.1:4567",
		"dynamodb://mirrors?regoin=r",
		"dynamodb://mirrors",
		"dynamodb://AKIDEXAMPLE:hunter2secret@mirrors?region=r",
	} {
		r := wf(t, "latest", "-store", addr, "wal", "s")
		assert.Equal(t, exitUsage, r.code, "%s: %s", addr, r)
		assert.NotContains(t, r.stderr+r.stdout, "hunter2secret", addr)
	}
}

// dynamoAddress creates a table of the test's own on the DynamoDB server,
// deleted afterwards, and returns its address; the command finds the
// credentials in the AWS SDK's variables.
func dynamoAddress(t *testing.T) string {
	endpoint := testserver.DynamoDBEndpoint(t)
	t.Setenv("AWS_ACCESS_KEY_ID", testserver.DynamoDBAccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", testserver.DynamoDBSecretKey)
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	table := dynalite.DynamoDBTable(t, dynalite.DynamoDBClient(t, endpoint, nil))
	return "dynamodb://" + table + "?" + url.Values{"endpoint": {endpoint}}.Encode()
}

// TestServerDynamoDB: latest, push, ls, brand, probe, race and settle on
// DynamoDB (dynalite in CI).
func TestServerDynamoDB(t *testing.T) {
	serverScenario(t, dynamoAddress(t), "")
}
