package source

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// fakeRegistry answers /v2/ with 200 and every manifest with handler.
func fakeRegistry(t *testing.T, manifest http.HandlerFunc) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v2/" {
			return
		}
		if strings.Contains(r.URL.Path, "/manifests/") {
			manifest(w, r)
			return
		}
		w.WriteHeader(http.StatusNotFound)
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

var anyDigest = "sha256:" + strings.Repeat("a", 64)

// TestOCIManifestCappedBeforeReading: a 90 MiB manifest is refused at the
// distribution spec's 4 MiB, whether its Content-Length says so (refused
// unread) or it sends more than it says (refused at the cap); the
// registry is not made to send the rest.
func TestOCIManifestCappedBeforeReading(t *testing.T) {
	const huge = 90 << 20
	for _, declared := range []bool{true, false} {
		var sent atomic.Int64
		host := fakeRegistry(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/vnd.oci.image.manifest.v1+json")
			if declared {
				w.Header().Set("Content-Length", "94371840")
			}
			chunk := make([]byte, 64<<10)
			for sent.Load() < huge {
				n, err := w.Write(chunk)
				sent.Add(int64(n))
				if err != nil {
					return
				}
			}
		})
		_, err := OCI("oci://"+host+"/m@"+anyDigest, nil, 0, loopback).Fetch(context.Background())
		var big *ManifestTooLargeError
		if !errors.As(err, &big) || !strings.Contains(err.Error(), "4194304 bytes") {
			t.Errorf("declared %v: want a ManifestTooLargeError at 4 MiB, got %T: %v", declared, err, err)
		}
		if s := sent.Load(); s > 32<<20 {
			t.Errorf("declared %v: the registry sent %d MiB before the fetch gave up", declared, s>>20)
		}
	}
}

// TestOCITokenServiceOnLinkLocal: a registry that sends clients to a token
// service on a link-local address (a cloud metadata service) is refused,
// and the error names that address, not the registry.
func TestOCITokenServiceOnLinkLocal(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="http://169.254.169.254/token",service="reg"`)
		w.WriteHeader(http.StatusUnauthorized)
	}))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	_, err := OCI("oci://"+host+"/m@"+anyDigest, nil, 0, loopback).Fetch(context.Background())
	if err == nil || !strings.Contains(err.Error(), "token service at 169.254.169.254") || strings.Contains(err.Error(), "did not answer with HTTP") {
		t.Fatalf("want an error naming the token service's address, got %v", err)
	}
}
