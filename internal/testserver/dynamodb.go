package testserver

import "testing"

// DynamoDBEndpoint returns the URL of the DynamoDB server named by the
// environment (WRITEFENCE_DYNAMODB_ENDPOINT; .ci/run starts
// dynalite), e.g. http://127.0.0.1:4567.
func DynamoDBEndpoint(t testing.TB) string { return Env(t, "WRITEFENCE_DYNAMODB_ENDPOINT") }

// DynamoDB test credentials: dynalite accepts any signed request.
const (
	DynamoDBAccessKey = "AKIDWRITEFENCETEST"
	DynamoDBSecretKey = "writefence-test-secret-key"
)
