// Package clusterscoped holds host/operator's tests that create cluster-scoped objects (ReconcileModules, a CRD, ClusterRoles and their bindings) or run operators that watch every ReconcileModule, so they run one at a time, on a control plane of their own. It has no code:
// see the _test.go files, and optest for what the operator's test
// packages share.
package clusterscoped
