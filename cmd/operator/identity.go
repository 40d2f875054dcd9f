package main

import (
	"flag"
	"fmt"
	"time"

	"github.com/wasmreconcile/wasmreconcile/host/operator"
)

// identityFlags say whose identity modules run as (docs/security.md).
type identityFlags struct {
	defaultAccount string
	namespace      string
	allowedTTL     time.Duration
	deniedTTL      time.Duration
}

func (f *identityFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.defaultAccount, "default-service-account", "", `NAMESPACE/NAME: the ServiceAccount that --module and --module-dir modules, and ReconcileModules without spec.serviceAccountName, run as: their writes and Events impersonate it and their reads are authorized for it; "" (the default) is the operator's own identity, for a single tenant (docs/security.md)`)
	fs.StringVar(&f.namespace, "service-account-namespace", "", `namespace of a ReconcileModule's spec.serviceAccountName when it sets no spec.serviceAccountNamespace (default: the operator's own namespace in-cluster, else "default")`)
	fs.DurationVar(&f.allowedTTL, "authorization-cache-ttl", operator.DefaultAuthorizationTTL, "how long a SubjectAccessReview that allowed a module's account a read is reused; a revoked right is used for up to this long")
	fs.DurationVar(&f.deniedTTL, "authorization-cache-denied-ttl", operator.DefaultAuthorizationDeniedTTL, "how long a SubjectAccessReview that denied a module's account a read is reused; a granted right takes up to this long to be used")
}

// apply checks the flags and sets them in opts.
func (f *identityFlags) apply(opts *operator.Options) error {
	if f.defaultAccount != "" {
		if _, _, err := operator.ParseServiceAccount(f.defaultAccount); err != nil {
			return fmt.Errorf("--default-service-account: %w", err)
		}
	}
	if f.allowedTTL <= 0 || f.deniedTTL <= 0 {
		return fmt.Errorf("--authorization-cache-ttl and --authorization-cache-denied-ttl must be positive")
	}
	opts.Identity.DefaultServiceAccount, opts.Identity.ServiceAccountNamespace = f.defaultAccount, f.namespace
	opts.Identity.AuthorizationTTL, opts.Identity.AuthorizationDeniedTTL = f.allowedTTL, f.deniedTTL
	return nil
}
