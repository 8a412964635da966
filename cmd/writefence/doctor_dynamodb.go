//go:build !writefence_nodynamodb && !writefence_nosdk

package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/writefence/writefence/internal/escape"
)

// dynamoSettings is the part of the DynamoDB client doctor reads the
// table's settings through.
type dynamoSettings interface {
	DescribeTimeToLive(ctx context.Context, in *dynamodb.DescribeTimeToLiveInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DescribeTimeToLiveOutput, error)
	DescribeTable(ctx context.Context, in *dynamodb.DescribeTableInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error)
}

// dynamoAuditor reads the settings of table: its time to live, and
// whether it is a global table.
func dynamoAuditor(client dynamoSettings, table string) auditor {
	return func(ctx context.Context, a *audit) {
		dynamoTTL(ctx, a, client, table)
		dynamoReplicas(ctx, a, client, table)
	}
}

func dynamoTTL(ctx context.Context, a *audit, client dynamoSettings, table string) {
	const check = "dynamodb.ttl"
	out, err := client.DescribeTimeToLive(ctx, &dynamodb.DescribeTimeToLiveInput{TableName: &table})
	if err != nil {
		dynamoUnreadable(a, check, err, "dynamodb:DescribeTimeToLive")
		return
	}
	d := out.TimeToLiveDescription
	if d == nil || (d.TimeToLiveStatus != types.TimeToLiveStatusEnabled && d.TimeToLiveStatus != types.TimeToLiveStatusEnabling) {
		a.ok(check, "time to live is off")
		return
	}
	attr := escape.String(aws.ToString(d.AttributeName))
	a.add(finding{Check: check, Level: levelRisk,
		Found:       fmt.Sprintf("time to live is %s, on the attribute %s", strings.ToLower(string(d.TimeToLiveStatus)), attr),
		Consequence: fmt.Sprintf("DynamoDB deletes every item whose %s holds a time in the past: the store's own items do not carry it, but a program or a person that adds it to a record's item makes the record vanish, and a shard whose record is gone looks new", attr),
		Fix: fmt.Sprintf("turn time to live off on the table (aws dynamodb update-time-to-live --table-name %s --time-to-live-specification Enabled=false,AttributeName=%s), or keep the records in a table without it",
			table, aws.ToString(d.AttributeName))})
}

func dynamoReplicas(ctx context.Context, a *audit, client dynamoSettings, table string) {
	const check = "dynamodb.replicas"
	out, err := client.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: &table})
	if err != nil {
		dynamoUnreadable(a, check, err, "dynamodb:DescribeTable")
		return
	}
	t := out.Table
	if t == nil || len(t.Replicas) == 0 {
		a.ok(check, "not a global table: one region decides every conditional write")
		return
	}
	var regions []string
	for _, r := range t.Replicas {
		regions = append(regions, escape.String(aws.ToString(r.RegionName)))
	}
	if t.MultiRegionConsistency == types.MultiRegionConsistencyStrong {
		a.ok(check, fmt.Sprintf("a global table in %s with multi-Region strong consistency", strings.Join(regions, ", ")))
		return
	}
	a.add(finding{Check: check, Level: levelRisk,
		Found:       fmt.Sprintf("a global table replicated to %s, with eventual consistency between regions", strings.Join(regions, ", ")),
		Consequence: "each region checks a conditional write against its own copy and replication keeps the last writer: two writers in two regions can both land a push of one epoch, and one replaces the other unseen",
		Fix:         "send every writer to one region (region= in the store address), or use a global table with multi-Region strong consistency"})
}

// dynamoUnreadable adds check as unknown because of err; permission is
// the IAM action that reads it.
func dynamoUnreadable(a *audit, check string, err error, permission string) {
	var missing *types.ResourceNotFoundException
	if errors.As(err, &missing) {
		a.unknown(check, err, "the table does not exist: check the table and the region in the store address")
		return
	}
	a.unknown(check, err, "let the credentials read it ("+permission+" on the table)")
}
