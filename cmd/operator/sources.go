package main

import (
	"flag"
	"strings"

	"github.com/wasmreconcile/wasmreconcile/host/operator"
	"github.com/wasmreconcile/wasmreconcile/host/source"
)

// sourceFlags are the policy of ReconcileModule sources (docs/sources.md):
// which hosts and addresses url sources may reach, and which namespaces
// configMap and secret sources may name.
type sourceFlags struct {
	allowedHosts commaList
	allowPrivate bool
	namespaces   commaList
	cacheMax     string
}

func (s *sourceFlags) register(fs *flag.FlagSet) {
	fs.Var(&s.allowedHosts, "module-url-allowed-hosts", `hosts a module's url or oci source (a ReconcileModule's, or --module oci://) may fetch from, comma-separated (repeatable): names, "*.example.com" for any name under a domain, or IP addresses; any port (default: any host whose addresses are public)`)
	fs.BoolVar(&s.allowPrivate, "module-url-allow-private", false, "let url and oci sources reach loopback, private (RFC 1918, fc00::/7) and other non-public addresses; link-local (169.254.169.254, the cloud metadata service), multicast and unspecified addresses stay refused")
	fs.Var(&s.namespaces, "module-source-namespaces", `namespaces whose ConfigMaps and Secrets a ReconcileModule's source may name, comma-separated (repeatable); "*" is any (default: the operator's own namespace)`)
	fs.StringVar(&s.cacheMax, "module-cache-max-size", "256Mi", `most the files under --module-cache-dir may add up to: past it the least recently used manifests and modules are removed, never those a ReconcileModule (source or candidate) or --module names; "0" turns the bound off. Keep it, with --compilation-cache-max-size, under the volume's size: an emptyDir past its sizeLimit gets the pod evicted`)
}

// apply sets the flags in o, refusing a malformed host pattern.
func (s *sourceFlags) apply(o *operator.Options) error {
	p := source.URLPolicy{AllowedHosts: s.allowedHosts, AllowPrivate: s.allowPrivate}
	if err := p.Validate(); err != nil {
		return err
	}
	o.Sources.URLAllowedHosts, o.Sources.URLAllowPrivate = p.AllowedHosts, p.AllowPrivate
	o.Sources.Namespaces = s.namespaces
	var err error
	o.Sources.CacheMaxBytes, err = boundFlag("--module-cache-max-size", s.cacheMax)
	return err
}

// commaList is a repeatable flag of comma-separated values.
type commaList []string

func (c *commaList) String() string { return strings.Join(*c, ",") }

func (c *commaList) Set(v string) error {
	for _, item := range strings.Split(v, ",") {
		if item = strings.TrimSpace(item); item != "" {
			*c = append(*c, item)
		}
	}
	return nil
}
