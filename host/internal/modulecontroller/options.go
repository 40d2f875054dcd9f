package modulecontroller

import (
	"bytes"
	"net/http"
	"os"
	"time"

	"github.com/wasmreconcile/wasmreconcile/host/internal/shadow"

	"github.com/wasmreconcile/wasmreconcile/host/source"
)

// Options configure the controller. Zero fields take the stated defaults.
type Options struct {
	// DefaultServiceAccount, "namespace/name", is the account of the
	// modules whose spec.serviceAccountName is empty. Defaults to "": the
	// operator's own identity.
	DefaultServiceAccount string
	// ServiceAccountNamespace is the namespace of spec.serviceAccountName
	// when spec.serviceAccountNamespace is empty: the operator's. Defaults
	// to "default".
	ServiceAccountNamespace string
	// MaxModuleBytes caps a module's size, compressed and uncompressed.
	// Defaults to source.DefaultMaxBytes (64 MiB).
	MaxModuleBytes int64
	// FetchTimeout bounds fetching a module from a URL or a registry.
	// Defaults to 30 s.
	FetchTimeout time.Duration
	// StatusInterval is how often a serving module's statistics are
	// refreshed in its status. Defaults to 30 s.
	StatusInterval time.Duration
	// HTTPClient fetches url sources. Defaults to
	// source.NewHTTPClient(URLPolicy), which checks every address it dials.
	// A client of the caller's keeps its Transport: URLPolicy's hosts and
	// redirect rules still apply, its address rules only through a
	// Transport of source.NewTransport.
	HTTPClient *http.Client
	// URLPolicy is what url sources may reach. Defaults to the zero policy:
	// any host with public addresses (source.URLPolicy).
	URLPolicy source.URLPolicy
	// SourceNamespaces are the namespaces configMap and secret sources may
	// name; "*" is any. Defaults to the namespace the operator runs in (its
	// service account's, in-cluster), else "default".
	SourceNamespaces []string
	// BlobCache is where oci sources keep the manifests and modules they
	// fetched, by digest, so that a restart while the registry is down
	// still loads them. Defaults to nil: nothing is kept.
	BlobCache *source.BlobCache
	// Workers is how many ReconcileModules are reconciled at once, and so
	// how many modules may fetch and compile at once: one module's slow
	// load (a large module, an unreachable registry, a compile stopped at
	// its limits) never holds up the others'. Defaults to 4.
	Workers int
	// PeerShadowStats, when set (sharded replicas), returns the other
	// replicas' comparison counts of module's candidate digest: each
	// replica shadows only its share of the objects, so status and
	// promotion use this replica's counts plus these. Defaults to nil:
	// this replica's counts alone.
	PeerShadowStats func(module, digest string) shadow.Stats
}

// Defaults of Options.
const (
	DefaultStatusInterval = 30 * time.Second
	DefaultWorkers        = 4
)

func (o Options) withDefaults() Options {
	if o.MaxModuleBytes <= 0 {
		o.MaxModuleBytes = source.DefaultMaxBytes
	}
	if o.FetchTimeout <= 0 {
		o.FetchTimeout = source.DefaultURLTimeout
	}
	if o.StatusInterval <= 0 {
		o.StatusInterval = DefaultStatusInterval
	}
	if o.Workers <= 0 {
		o.Workers = DefaultWorkers
	}
	if o.HTTPClient == nil {
		o.HTTPClient = source.NewHTTPClient(o.URLPolicy)
	}
	if len(o.SourceNamespaces) == 0 {
		o.SourceNamespaces = []string{OperatorNamespace()}
	}
	return o
}

// OperatorNamespace is the namespace the operator runs in: its service
// account's, in-cluster, else "default".
func OperatorNamespace() string {
	if ns, err := os.ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace"); err == nil && len(bytes.TrimSpace(ns)) > 0 {
		return string(bytes.TrimSpace(ns))
	}
	return "default"
}
