package writefence_test

import (
	"testing"

	"github.com/writefence/writefence/dynamostore"
	"github.com/writefence/writefence/etcdstore"
	"github.com/writefence/writefence/internal/testserver"
)

// The model (model_test.go) on the stores that live in packages of their
// own, against their real servers: etcd (WRITEFENCE_ETCD_ENDPOINT), where
// a write around the store is a new mod revision, and DynamoDB
// (WRITEFENCE_DYNAMODB_ENDPOINT, dynalite in CI), damaged in place, on
// both ways its write learns the item it conditions on.

func TestModelEtcd(t *testing.T) {
	t.Parallel()
	runModel(t, func(t *testing.T) modelTarget {
		c := testserver.EtcdClient(t, testserver.EtcdEndpoint(t))
		prefix := testserver.EtcdPrefix(t, c)
		return modelTarget{name: "etcd", rewrites: true, store: etcdstore.New(c, prefix), damage: testserver.DamageEtcd(c, prefix)}
	})
}

func TestModelDynamoDB(t *testing.T) {
	t.Parallel()
	for name, cache := range map[string]int64{"remembered": 0, "readfirst": -1} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			runModel(t, func(t *testing.T) modelTarget {
				c := testserver.DynamoDBClient(t, testserver.DynamoDBEndpoint(t), nil)
				table := testserver.DynamoDBTable(t, c)
				s := dynamostore.New(c, table)
				s.CacheBytes = cache
				return modelTarget{name: "dynamodb-" + name, store: s, damage: testserver.DamageDynamoDB(c, table)}
			})
		})
	}
}
