//go:build !writefence_nodynamodb

package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"strings"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/writefence/writefence/dynamostore"
	"github.com/writefence/writefence/internal/escape"
)

func init() {
	openers["dynamodb"] = openDynamoDB
}

// dynamoTableName is DynamoDB's rule for table names.
var dynamoTableName = regexp.MustCompile(`^[A-Za-z0-9_.-]{3,255}$`)

// openDynamoDB opens dynamodb://table[?endpoint=http://host:port&region=R].
// Credentials and, without region=, the region come from the AWS SDK's
// usual sources: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and
// AWS_SESSION_TOKEN), AWS_PROFILE and ~/.aws, AWS_REGION. The table must
// exist: the command never creates one.
func openDynamoDB(ctx context.Context, u *url.URL) (*opened, error) {
	q, err := query(u, "endpoint", "region")
	if err != nil {
		return nil, err
	}
	table := u.Host
	if table == "" || strings.Trim(u.Path, "/") != "" {
		return nil, usagef("writefence: store address: want dynamodb://table[?endpoint=http://host:port&region=R], the table as the host and no path")
	}
	if !dynamoTableName.MatchString(table) {
		return nil, usagef("writefence: store address: table %s: want 3 to 255 letters, digits, '_', '-' or '.'", escape.String(table))
	}
	var opts []func(*config.LoadOptions) error
	region := q.Get("region")
	endpoint := q.Get("endpoint")
	if endpoint != "" {
		e, err := url.Parse(endpoint)
		if err != nil || (e.Scheme != "http" && e.Scheme != "https") || e.Host == "" {
			return nil, usagef("writefence: store address: endpoint=%s: want http://host:port or https://host:port", escape.String(endpoint))
		}
		if region == "" && os.Getenv("AWS_REGION") == "" && os.Getenv("AWS_DEFAULT_REGION") == "" {
			region = "us-east-1" // a local server ignores it; the SDK requires one
		}
	}
	if region != "" {
		opts = append(opts, config.WithRegion(region))
	}
	cfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("writefence: dynamodb client: %w", err)
	}
	if cfg.Region == "" {
		return nil, usagef("writefence: store address: dynamodb:// needs a region: region=R in the address, or AWS_REGION")
	}
	client := dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) {
		if endpoint != "" {
			o.BaseEndpoint = &endpoint
		}
	})
	return &opened{store: dynamostore.New(client, table), close: noClose, audit: dynamoAuditor(client, table)}, nil
}
