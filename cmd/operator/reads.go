package main

import (
	"flag"
	"fmt"
	"strings"
)

// readNamespacesFlag is --module-read-namespaces: NAME=NS[,NS...],
// repeatable, the namespaces beyond its object's own a module may read.
type readNamespacesFlag map[string][]string

func (f readNamespacesFlag) String() string { return "" }

func (f readNamespacesFlag) Set(v string) error {
	name, list, ok := strings.Cut(v, "=")
	if !ok || name == "" || list == "" {
		return fmt.Errorf("want NAME=NAMESPACE[,NAMESPACE...] (\"*\" for every namespace), got %q", v)
	}
	namespaces, err := splitNamespaces(list)
	if err != nil {
		return err
	}
	f[name] = append(f[name], namespaces...)
	return nil
}

// splitNamespaces splits a comma-separated list of namespaces, "*" for
// every namespace.
func splitNamespaces(list string) ([]string, error) {
	var out []string
	for _, ns := range strings.Split(list, ",") {
		ns = strings.TrimSpace(ns)
		if ns == "" {
			continue
		}
		if ns != "*" && (len(ns) > 63 || strings.Trim(ns, "abcdefghijklmnopqrstuvwxyz0123456789-") != "") {
			return nil, fmt.Errorf("%q is not a namespace name (or \"*\")", ns)
		}
		out = append(out, ns)
	}
	return out, nil
}

func registerModuleReadNamespaces(fs *flag.FlagSet) readNamespacesFlag {
	f := readNamespacesFlag{}
	fs.Var(f, "module-read-namespaces", "NAME=NS[,NS...]: namespaces beyond its object's own whose objects module NAME's guest may read through cache_read (\"*\": every namespace; repeatable). Default: none, a guest reads only its object's namespace and cluster-scoped kinds. A ReconcileModule's spec.readNamespaces takes its place")
	return f
}
