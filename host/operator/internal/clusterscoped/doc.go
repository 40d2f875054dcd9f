// Package clusterscoped holds host/operator's tests of ReconcileModules
// (lifecycle, sources, OCI, ceilings, identity, finalizer drains,
// rollouts) and of the deploy manifests: cluster-scoped objects every
// operator watching ReconcileModules would see, so they run one at a
// time, on a control plane of their own. clusterhardening holds the
// hostile and missing inputs of the same kind. It has no code: see the
// _test.go files, and optest for what the operator's test packages
// share.
package clusterscoped
