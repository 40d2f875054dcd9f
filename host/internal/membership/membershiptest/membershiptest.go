// Package membershiptest helps tests of replicas' Leases (packages
// membership and sharding): a Leases client that can be cut off from the
// API server, as a partitioned replica is.
package membershiptest

import (
	"context"
	"errors"
	"sync/atomic"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
)

// ErrCutOff is what a Breakable's calls return once it is broken.
var ErrCutOff = errors.New("cut off from the API server")

// Breakable is a Leases client whose Get, List, Create and Update fail
// with ErrCutOff once Broken is set.
type Breakable struct {
	coordinationv1client.LeasesGetter
	Broken atomic.Bool
}

// Leases implements coordinationv1client.LeasesGetter.
func (b *Breakable) Leases(ns string) coordinationv1client.LeaseInterface {
	return &leases{LeaseInterface: b.LeasesGetter.Leases(ns), b: b}
}

type leases struct {
	coordinationv1client.LeaseInterface
	b *Breakable
}

func (l *leases) Get(ctx context.Context, name string, o metav1.GetOptions) (*coordinationv1.Lease, error) {
	if l.b.Broken.Load() {
		return nil, ErrCutOff
	}
	return l.LeaseInterface.Get(ctx, name, o)
}

func (l *leases) Update(ctx context.Context, x *coordinationv1.Lease, o metav1.UpdateOptions) (*coordinationv1.Lease, error) {
	if l.b.Broken.Load() {
		return nil, ErrCutOff
	}
	return l.LeaseInterface.Update(ctx, x, o)
}

func (l *leases) Create(ctx context.Context, x *coordinationv1.Lease, o metav1.CreateOptions) (*coordinationv1.Lease, error) {
	if l.b.Broken.Load() {
		return nil, ErrCutOff
	}
	return l.LeaseInterface.Create(ctx, x, o)
}

func (l *leases) List(ctx context.Context, o metav1.ListOptions) (*coordinationv1.LeaseList, error) {
	if l.b.Broken.Load() {
		return nil, ErrCutOff
	}
	return l.LeaseInterface.List(ctx, o)
}
