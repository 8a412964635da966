package dynamostore_test

import (
	"testing"

	"github.com/writefence/writefence/dynamostore"
	"github.com/writefence/writefence/internal/modeltest"
	"github.com/writefence/writefence/internal/sdkserver/dynalite"
	"github.com/writefence/writefence/internal/testserver"
)

// TestMain sets rapid's flags for the model test and checks for leaked
// goroutines (modeltest.Main).
func TestMain(m *testing.M) { modeltest.Main(m) }

// TestModel runs the model (internal/modeltest) on DynamoDB
// (WRITEFENCE_DYNAMODB_ENDPOINT, dynalite in CI), damaged in place, on
// both ways its write learns the item it conditions on.
func TestModel(t *testing.T) {
	t.Parallel()
	for name, cache := range map[string]int64{"remembered": 0, "readfirst": -1} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			modeltest.Run(t, func(t *testing.T) modeltest.Target {
				c := dynalite.DynamoDBClient(t, testserver.DynamoDBEndpoint(t), nil)
				table := dynalite.DynamoDBTable(t, c)
				s := dynamostore.New(c, table)
				s.CacheBytes = cache
				return modeltest.Target{Name: "dynamodb-" + name, Store: s, Damage: dynalite.DamageDynamoDB(c, table)}
			})
		})
	}
}
