//go:build !writefence_nodynamodb && !writefence_nosdk

package main

import (
	"net/url"
	"testing"

	"github.com/writefence/writefence/internal/sdkserver/dynalite"
	"github.com/writefence/writefence/internal/testserver"
)

// TestDynamoDBAddress: the forms of a DynamoDB address, and the malformed
// ones, refused as usage errors before any I/O, echoing no secret.
func TestDynamoDBAddress(t *testing.T) {
	awsCredentials(t, "AKIDEXAMPLE", "hunter2secret")
	for _, v := range []string{"AWS_REGION", "AWS_DEFAULT_REGION"} {
		t.Setenv(v, "")
	}
	for _, v := range []string{"AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE"} {
		t.Setenv(v, "/nonexistent")
	}
	assertOpens(t, "*dynamostore.Store",
		"dynamodb://mirrors?region=eu-west-1",
		"dynamodb://my_table.v2?endpoint=http://127.0.0.1:4567",
		"dynamodb://mirrors?endpoint=https://dynamodb.local:8000&region=us-west-2",
	)
	assertRefused(t,
		"dynamodb://",
		"dynamodb://ab?region=r",
		"dynamodb://mirrors/path?region=r",
		"dynamodb://bad%20name?region=r",
		"dynamodb://mirrors?endpoint=127.0.0.1:4567",
		"dynamodb://mirrors?regoin=r",
		"dynamodb://mirrors",
		"dynamodb://AKIDEXAMPLE:hunter2secret@mirrors?region=r",
	)
}

// dynamoAddress creates a table of the test's own on the DynamoDB server,
// deleted afterwards, and returns its address; the command finds the
// credentials in the AWS SDK's variables.
func dynamoAddress(t *testing.T) string {
	endpoint := testserver.DynamoDBEndpoint(t)
	awsCredentials(t, testserver.DynamoDBAccessKey, testserver.DynamoDBSecretKey)
	table := dynalite.DynamoDBTable(t, dynalite.DynamoDBClient(t, endpoint, nil))
	return "dynamodb://" + table + "?" + url.Values{"endpoint": {endpoint}}.Encode()
}

// TestServerDynamoDB: latest, push, ls, brand, probe, race and settle on
// DynamoDB (dynalite in CI).
func TestServerDynamoDB(t *testing.T) {
	serverScenario(t, dynamoAddress(t), "")
}
