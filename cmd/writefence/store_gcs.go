//go:build !writefence_nogcs && !writefence_nosdk

package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"syscall"

	"cloud.google.com/go/storage"
	"google.golang.org/api/googleapi"
	"google.golang.org/api/option"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/escape"
)

func init() {
	openers["gs"] = openGCS
}

// openGCS opens gs://bucket[?endpoint=http://host:port&project=ID]. With an
// endpoint (an emulator) no credentials are used; otherwise the client
// finds application default credentials, or STORAGE_EMULATOR_HOST. The
// project (default $GOOGLE_CLOUD_PROJECT) is needed only to create the
// bucket (init, -create).
func openGCS(ctx context.Context, u *url.URL) (*opened, error) {
	bucket, q, err := storeName(u, "bucket", "gs://bucket[?endpoint=http://host:port]", validGCSBucket, "endpoint", "project")
	if err != nil {
		return nil, err
	}
	var opts []option.ClientOption
	host := "storage.googleapis.com:443"
	if emu := os.Getenv("STORAGE_EMULATOR_HOST"); emu != "" {
		host = withPort(strings.TrimPrefix(strings.TrimPrefix(emu, "http://"), "https://"), "80")
	}
	project := q.Get("project")
	if project == "" {
		project = os.Getenv("GOOGLE_CLOUD_PROJECT")
	}
	if ep := q.Get("endpoint"); ep != "" {
		e, err := url.Parse(ep)
		if err != nil || (e.Scheme != "http" && e.Scheme != "https") || e.Host == "" {
			return nil, usagef("writefence: store address: endpoint=%s: want http://host:port or https://host:port", escape.String(ep))
		}
		if e.Path == "" || e.Path == "/" {
			e.Path = "/storage/v1/"
		}
		opts = append(opts, option.WithEndpoint(e.String()), option.WithoutAuthentication())
		host, _ = endpointHostPort(e.String())
		if project == "" {
			project = "emulator" // an emulator takes any project
		}
	}
	client, err := storage.NewClient(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("writefence: cloud storage client: %w", err)
	}
	client.SetRetry(storage.WithErrorFunc(gcsRetryable))
	addr := u.String()
	b := client.Bucket(bucket)
	return &opened{
		store: writefence.NewGCSConditionalStore(client, bucket, nil),
		close: client.Close,
		audit: gcsAuditor(client, bucket),
		ready: func(ctx context.Context) error {
			if err := dialCheck(ctx, addr, true, host); err != nil {
				return err
			}
			// A missing bucket answers an object's read with the 404 of a
			// missing object, and a write with a 404 that names nothing:
			// only the bucket's own attributes tell. A refusal to read
			// them (no storage.buckets.get) is left to the requests.
			_, err := b.Attrs(ctx)
			return readyUnless(ctx, errors.Is(err, storage.ErrBucketNotExist), addr, "bucket", bucket)
		},
		create: func(ctx context.Context) error {
			if project == "" {
				return usagef("writefence: creating a Cloud Storage bucket needs a project: add project=ID to the address, or set GOOGLE_CLOUD_PROJECT")
			}
			err := b.Create(ctx, project, nil)
			var ge *googleapi.Error
			if err != nil && !(errors.As(err, &ge) && ge.Code == http.StatusConflict) {
				return fmt.Errorf("writefence: cloud storage: create bucket %s: %w", escape.String(bucket), err)
			}
			return nil
		},
	}, nil
}

// gcsRetryable is the client's retry policy (storage.ShouldRetry) except
// that a refused connection is final: nothing listens at the endpoint, and
// retrying would wait out the whole -timeout before saying so, where the
// other stores fail at once.
func gcsRetryable(err error) bool {
	if errors.Is(err, syscall.ECONNREFUSED) {
		return false
	}
	return storage.ShouldRetry(err)
}

// validGCSBucket applies Cloud Storage's naming rules for buckets without
// dots, and the 222-byte limit of dotted names; the server decides the rest.
func validGCSBucket(b string) error {
	bad := errors.New("want 3 to 63 lower-case letters, digits, '-', '_' or '.', starting and ending with a letter or digit")
	max := 63
	if strings.Contains(b, ".") {
		max = 222
	}
	if len(b) < 3 || len(b) > max {
		return bad
	}
	alnum := func(c byte) bool { return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' }
	for i := 0; i < len(b); i++ {
		if c := b[i]; !alnum(c) && c != '-' && c != '_' && c != '.' {
			return bad
		}
	}
	if !alnum(b[0]) || !alnum(b[len(b)-1]) {
		return bad
	}
	return nil
}
