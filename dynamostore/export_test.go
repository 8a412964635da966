package dynamostore

import "github.com/aws/aws-sdk-go-v2/service/dynamodb"

// API is the part of the SDK's client the store uses, for the tests' fakes.
type API = api

// NewWithAPI returns a store over table that calls a instead of a client.
func NewWithAPI(a API, table string) *Store { return &Store{api: a, table: table} }

// Retried reports whether a call with optFns applied would be retried by
// the SDK.
func Retried(optFns ...func(*dynamodb.Options)) bool {
	var o dynamodb.Options
	for _, f := range optFns {
		f(&o)
	}
	return o.Retryer == nil || o.Retryer.MaxAttempts() > 1
}
