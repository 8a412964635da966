//go:build !writefence_nominio && !writefence_nosdk

package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/minio/minio-go/v7/pkg/s3utils"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/escape"
)

func init() {
	openers["s3"] = openS3
	advisers = append(advisers, adviseS3)
}

// openS3 opens s3://bucket?endpoint=host:port&secure=false&region=r.
// Credentials come from the environment, in minio-go's usual order.
func openS3(_ context.Context, u *url.URL) (*opened, error) {
	bucket, q, err := storeName(u, "bucket", "s3://bucket[?endpoint=host:port]", s3utils.CheckValidBucketNameStrict, "endpoint", "secure", "region")
	if err != nil {
		return nil, err
	}
	endpoint := q.Get("endpoint")
	if endpoint == "" {
		endpoint = "s3.amazonaws.com"
	}
	if strings.Contains(endpoint, "/") {
		return nil, usagef("writefence: store address: endpoint=%s: want host:port, without a scheme (use secure=false for http)", escape.String(endpoint))
	}
	if gcsXMLEndpoint(endpoint) {
		return nil, usagef("writefence: store address: endpoint=%s is Cloud Storage's XML API, which ignores the S3 If-Match and If-None-Match headers the fence rests on: use gs://%s", escape.String(endpoint), bucket)
	}
	secure, err := boolParam(q, "secure", true)
	if err != nil {
		return nil, err
	}
	creds := credentials.NewChainCredentials([]credentials.Provider{
		&credentials.EnvAWS{},
		&credentials.EnvMinio{},
		&credentials.FileAWSCredentials{},
	})
	region := q.Get("region")
	client, err := minio.New(endpoint, &minio.Options{Creds: creds, Secure: secure, Region: region})
	if err != nil {
		// minio.New does no I/O: what it refuses is the address's
		// endpoint or region.
		return nil, usagef("writefence: store address: endpoint=%s: %v", escape.String(endpoint), err)
	}
	port := "443"
	if !secure {
		port = "80"
	}
	addr := u.String()
	return &opened{
		store: writefence.NewMinioConditionalStore(client, bucket, nil),
		close: noClose,
		audit: s3Auditor(client, bucket),
		ready: func(ctx context.Context) error {
			if err := dialCheck(ctx, addr, true, withPort(endpoint, port)); err != nil {
				return err
			}
			return s3BucketReady(ctx, client, addr, bucket, region)
		},
		create: func(ctx context.Context) error {
			err := client.MakeBucket(ctx, bucket, minio.MakeBucketOptions{Region: region})
			if code := minio.ToErrorResponse(err).Code; err != nil && code != "BucketAlreadyOwnedByYou" {
				return fmt.Errorf("writefence: s3: create bucket %s: %w", escape.String(bucket), err)
			}
			return nil
		},
	}, nil
}

// s3BucketReady reports a bucket that does not exist as a *missingError.
// Without a region minio-go asks the bucket's location before its first
// request to it, and keeps the answer: that request tells, at no cost.
// With one, a HEAD of the bucket does. Any other failure (a refused
// credential, no permission to ask) is left to the command's own
// requests, which say more.
func s3BucketReady(ctx context.Context, client *minio.Client, addr, bucket, region string) error {
	exists := true
	var err error
	if region == "" {
		_, err = client.GetBucketLocation(ctx, bucket)
		exists = minio.ToErrorResponse(err).Code != "NoSuchBucket"
	} else {
		exists, err = client.BucketExists(ctx, bucket)
	}
	return readyUnless(ctx, !exists && (err == nil || minio.ToErrorResponse(err).Code == "NoSuchBucket"), addr, "bucket", bucket)
}

// gcsXMLEndpoint reports whether endpoint (host or host:port) is Cloud
// Storage's S3-style XML API, path-style or virtual-hosted.
func gcsXMLEndpoint(endpoint string) bool {
	host := strings.ToLower(endpoint)
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(host, ".")
	return host == "storage.googleapis.com" || strings.HasSuffix(host, ".storage.googleapis.com")
}

// S3 error codes that mean the credentials were missing or wrong.
var s3CredentialCodes = []string{"AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "InvalidToken", "ExpiredToken"}

// adviseS3 names the variables read when the S3 server refused the
// credentials.
func adviseS3(err error, _ *invocation) error {
	var resp minio.ErrorResponse
	if !errors.As(err, &resp) || !slices.Contains(s3CredentialCodes, resp.Code) {
		return nil
	}
	return &advisedError{err, "the S3 server refused the credentials (" + resp.Code + "); the command read " +
		envList("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "MINIO_ROOT_USER", "MINIO_ROOT_PASSWORD",
			"MINIO_ACCESS_KEY", "MINIO_SECRET_KEY", "AWS_SHARED_CREDENTIALS_FILE", "AWS_PROFILE") +
		", then ~/.aws/credentials: export the bucket's access key pair"}
}
