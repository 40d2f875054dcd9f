// Package faults holds host/operator's tests that break the control plane under a running operator (cut connections, a slow or failing API server, killed kube-apiserver and etcd, a killed leader), so they run one at a time, on a control plane of their own. It has no code:
// see the _test.go files, and optest for what the operator's test
// packages share.
package faults
