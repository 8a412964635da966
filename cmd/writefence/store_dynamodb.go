//go:build !writefence_nodynamodb && !writefence_nosdk

package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"strings"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/writefence/writefence/dynamostore"
	"github.com/writefence/writefence/internal/escape"
)

func init() {
	openers["dynamodb"] = openDynamoDB
}

// dynamoTableName is DynamoDB's rule for table names.
var dynamoTableName = regexp.MustCompile(`^[A-Za-z0-9_.-]{3,255}$`)

// validTable applies dynamoTableName.
func validTable(n string) error {
	if !dynamoTableName.MatchString(n) {
		return errors.New("want 3 to 255 letters, digits, '_', '-' or '.'")
	}
	return nil
}

// openDynamoDB opens dynamodb://table[?endpoint=http://host:port&region=R].
// Credentials and, without region=, the region come from the AWS SDK's
// usual sources: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and
// AWS_SESSION_TOKEN), AWS_PROFILE and ~/.aws, AWS_REGION; never the EC2
// metadata service for an endpoint that is not AWS's own. The table must
// exist: only init and -create create it.
func openDynamoDB(ctx context.Context, u *url.URL) (*opened, error) {
	table, q, err := storeName(u, "table", "dynamodb://table[?endpoint=http://host:port&region=R]", validTable, "endpoint", "region")
	if err != nil {
		return nil, err
	}
	var opts []func(*config.LoadOptions) error
	region := q.Get("region")
	endpoint := q.Get("endpoint")
	local := false // an endpoint that is not AWS's own
	if endpoint != "" {
		e, err := url.Parse(endpoint)
		if err != nil || (e.Scheme != "http" && e.Scheme != "https") || e.Host == "" {
			return nil, usagef("writefence: store address: endpoint=%s: want http://host:port or https://host:port", escape.String(endpoint))
		}
		if region == "" && os.Getenv("AWS_REGION") == "" && os.Getenv("AWS_DEFAULT_REGION") == "" {
			region = "us-east-1" // a local server ignores it; the SDK requires one
		}
		if local = !awsHost(e.Hostname()); local {
			// The SDK's last source of credentials is the EC2 metadata
			// service, a request to 169.254.169.254 that only means
			// something on AWS: never for another endpoint.
			opts = append(opts, config.WithEC2IMDSClientEnableState(imds.ClientDisabled))
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
	store := dynamostore.New(client, table)
	addr := u.String()
	return &opened{
		store: store,
		close: noClose,
		audit: dynamoAuditor(client, table),
		ready: func(ctx context.Context) error {
			if hp, ok := endpointHostPort(endpoint); ok {
				if err := dialCheck(ctx, addr, true, hp); err != nil {
					return err
				}
			}
			if local && cfg.Credentials != nil {
				if _, err := cfg.Credentials.Retrieve(ctx); err != nil && ctx.Err() == nil {
					return fmt.Errorf("writefence: dynamodb: no AWS credentials for %s: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (a local server takes any pair), or AWS_PROFILE; "+
						"for an endpoint that is not AWS's own the command asks no metadata service; it read %s and ~/.aws",
						escape.String(endpoint), envList("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"))
				}
			}
			_, err := client.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: &table})
			var nf *types.ResourceNotFoundException
			return readyUnless(ctx, errors.As(err, &nf), addr, "table", table)
		},
		create: store.CreateTable,
	}, nil
}

// awsHost tells whether host is one of AWS's own endpoints.
func awsHost(host string) bool {
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	for _, suffix := range []string{".amazonaws.com", ".amazonaws.com.cn", ".api.aws"} {
		if strings.HasSuffix(host, suffix) {
			return true
		}
	}
	return false
}
