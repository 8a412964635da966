//go:build !writefence_noazblob && !writefence_nosdk

package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/writefence/writefence/azblobstore"
	"github.com/writefence/writefence/internal/escape"
)

func init() {
	openers["azblob"] = openAzblob
	advisers = append(advisers, adviseAzblob)
}

// openAzblob opens azblob://container[?endpoint=URL]. The credentials come
// from AZURE_STORAGE_CONNECTION_STRING, whose endpoint is then the
// container's (endpoint= is refused beside it), or else from
// AZURE_STORAGE_ACCOUNT and AZURE_STORAGE_KEY, a shared key, with the
// endpoint https://ACCOUNT.blob.core.windows.net unless endpoint= names
// another (the account's URL, e.g. Azurite's
// http://127.0.0.1:10000/devstoreaccount1).
func openAzblob(_ context.Context, u *url.URL) (*opened, error) {
	name, q, err := storeName(u, "container", "azblob://container[?endpoint=URL]", validContainer, "endpoint")
	if err != nil {
		return nil, err
	}
	endpoint := q.Get("endpoint")
	if endpoint != "" {
		e, err := url.Parse(endpoint)
		if err != nil || (e.Scheme != "http" && e.Scheme != "https") || e.Host == "" || e.RawQuery != "" || e.User != nil {
			// Not echoed: a query could hold a SAS token.
			return nil, usagef("writefence: store address: endpoint: want the account's URL, http(s)://host[:port][/account], without a query or a user")
		}
	}
	var c *container.Client
	if cs := os.Getenv("AZURE_STORAGE_CONNECTION_STRING"); cs != "" {
		if endpoint != "" {
			return nil, usagef("writefence: store address: endpoint= beside AZURE_STORAGE_CONNECTION_STRING, which names the endpoint: give one of them")
		}
		// The SDK's message never repeats the string.
		c, err = container.NewClientFromConnectionString(cs, name, nil)
		if err != nil {
			return nil, errors.New("writefence: AZURE_STORAGE_CONNECTION_STRING: " + err.Error())
		}
	} else {
		account, key := os.Getenv("AZURE_STORAGE_ACCOUNT"), os.Getenv("AZURE_STORAGE_KEY")
		if account == "" || key == "" {
			return nil, errors.New("writefence: azblob:// needs credentials: set AZURE_STORAGE_CONNECTION_STRING, or AZURE_STORAGE_ACCOUNT and AZURE_STORAGE_KEY; the command read " +
				envList("AZURE_STORAGE_CONNECTION_STRING", "AZURE_STORAGE_ACCOUNT", "AZURE_STORAGE_KEY"))
		}
		if endpoint == "" {
			endpoint = "https://" + url.PathEscape(account) + ".blob.core.windows.net"
		}
		cred, err := container.NewSharedKeyCredential(account, key)
		if err != nil {
			return nil, errors.New("writefence: AZURE_STORAGE_KEY is not an account key (base64)")
		}
		c, err = container.NewClientWithSharedKeyCredential(strings.TrimSuffix(endpoint, "/")+"/"+name, cred, nil)
		if err != nil {
			return nil, errors.New("writefence: azure blob client: " + err.Error())
		}
	}
	addr := u.String()
	var hostport string
	if endpoint != "" {
		hostport, _ = endpointHostPort(endpoint)
	} else {
		hostport, _ = endpointHostPort(c.URL())
	}
	return &opened{
		store: azblobstore.New(c),
		close: noClose,
		ready: func(ctx context.Context) error {
			if err := dialCheck(ctx, addr, true, hostport); err != nil {
				return err
			}
			_, err := c.GetProperties(ctx, nil)
			return readyUnless(ctx, bloberror.HasCode(err, bloberror.ContainerNotFound), addr, "container", name)
		},
		create: func(ctx context.Context) error {
			_, err := c.Create(ctx, nil)
			if err != nil && !bloberror.HasCode(err, bloberror.ContainerAlreadyExists) {
				return fmt.Errorf("writefence: azure blob: create container %s: %w", escape.String(name), err)
			}
			return nil
		},
	}, nil
}

// validContainer applies Azure's rules for container names.
func validContainer(n string) error {
	bad := errors.New("want 3 to 63 lower-case letters, digits and single hyphens, starting and ending with a letter or digit")
	if len(n) < 3 || len(n) > 63 || n[0] == '-' || n[len(n)-1] == '-' || strings.Contains(n, "--") {
		return bad
	}
	for i := 0; i < len(n); i++ {
		if c := n[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return bad
		}
	}
	return nil
}

// adviseAzblob names the variables read when Azure refused the
// credentials.
func adviseAzblob(err error, _ *invocation) error {
	var re *azcore.ResponseError
	if !errors.As(err, &re) || !errors.Is(err, fs.ErrPermission) {
		return nil
	}
	return &advisedError{err, "Azure Storage refused the credentials (" + escape.String(re.ErrorCode) + "); the command read " +
		envList("AZURE_STORAGE_CONNECTION_STRING", "AZURE_STORAGE_ACCOUNT", "AZURE_STORAGE_KEY") +
		": export the account's key, or a connection string whose key or SAS may read, write, delete and list the container's blobs"}
}
