package operator

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/wasmreconcile/wasmreconcile/api/v1alpha1"
	"github.com/wasmreconcile/wasmreconcile/host/internal/metrics"
	"github.com/wasmreconcile/wasmreconcile/host/source"
)

// newModuleCache is the oci module cache in opts.Sources.CacheDir, bounded
// by opts.Sources.CacheMaxBytes, keeping what the operator serves.
func newModuleCache(mgr manager.Manager, opts Options, m *metrics.Metrics, log logr.Logger) (*source.BlobCache, error) {
	c, err := source.NewBlobCache(opts.Sources.CacheDir, source.BlobCacheOptions{
		MaxBytes: opts.Sources.CacheMaxBytes,
		InUse:    ociInUse(mgr, opts.Modules, opts.ReconcileModules),
		Pruned: func(p source.BlobCachePrune) {
			m.ObserveModuleCachePrune(p)
			logCachePrune(log, "module cache directory", "--module-cache-max-size", p.Removed, p.Freed, p.Bytes-p.Freed, p.Over, p.Err)
		},
	})
	if err != nil {
		return nil, fmt.Errorf("the module cache (--module-cache-dir): %w", err)
	}
	if opts.Sources.CacheMaxBytes > 0 {
		// A directory left over from a run with a larger bound is checked
		// once the cache can say what is in use; writes check it after.
		if err := mgr.Add(everyReplica(func(ctx context.Context) error {
			if mgr.GetCache().WaitForCacheSync(ctx) {
				_ = c.Prune() // Pruned reports it
			}
			return nil
		})); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// ociInUse returns the oci references the operator may load again after a
// restart: the oci:// entries of modules (--module) and, with
// reconcileModules, every ReconcileModule's source and candidate, read
// from mgr's cache. Until that cache answers it fails, and nothing is
// removed.
func ociInUse(mgr manager.Manager, modules []string, reconcileModules bool) func() ([]string, error) {
	var static []string
	for _, m := range modules {
		if strings.HasPrefix(m, source.OCIScheme) {
			static = append(static, m)
		}
	}
	return func() ([]string, error) {
		refs := append([]string(nil), static...)
		if !reconcileModules {
			return refs, nil
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var list v1alpha1.ReconcileModuleList
		if err := mgr.GetCache().List(ctx, &list); err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				err = errors.New("the ReconcileModules were not listed within 10s")
			}
			return nil, fmt.Errorf("listing the ReconcileModules whose modules must stay: %w", err)
		}
		for _, rm := range list.Items {
			if o := rm.Spec.Source.OCI; o != nil {
				refs = append(refs, o.Ref)
			}
			if c := rm.Spec.Candidate; c != nil && c.Source.OCI != nil {
				refs = append(refs, c.Source.OCI.Ref)
			}
		}
		return refs, nil
	}
}

// logCachePrune logs a check of a bounded cache directory's size that
// removed files, left it over its bound (flag), or failed; quiet checks
// are only metrics.
func logCachePrune(log logr.Logger, what, flag string, removed int, freed, left int64, over bool, err error) {
	if removed == 0 && !over && err == nil {
		return
	}
	log.Info(what+" over its bound: removed the least recently used files", "removed", removed, "freedBytes", freed,
		"leftBytes", left, "stillOver", over, "error", err, "fix", "if stillOver stays true, raise "+flag+" (and the volume under it)")
}
