// Package clusterhardening holds host/operator's tests of hostile or
// missing inputs that need cluster-scoped objects: ReconcileModules whose
// bytes are a compile bomb or ask for more memory than the budget, secret
// values that must not leak into status or Events, accounts bound by
// ClusterRoles, and modules waiting for a CRD that is not installed. Like
// clusterscoped, its operators watch every ReconcileModule, so its tests
// run one at a time, on a control plane of their own; the two packages
// run beside each other. It has no code: see the _test.go files, and
// optest for what the operator's test packages share.
package clusterhardening
