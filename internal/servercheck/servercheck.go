// Package servercheck checks what a module's answer asks the host to write
// against a real kube-apiserver, with server-side dry-run: built-in kinds'
// value rules (an Ingress host in upper case, a Service port out of
// range), defaulting and validation happen exactly as in a cluster,
// because the API server's own code runs them. `operator test
// --api-server` runs it on a local control plane it starts once for all
// cases (etcd and kube-apiserver, no controllers).
//
// For each case it creates the input object for real (with its status, so
// that the status is checked against what is stored), server-side applies each
// desired child and the desired status with dryRun=All as the host applies
// them (its field manager, forced, strict field validation; the children
// carry the owner reference and module label the host stamps), and deletes
// the object. Nothing but the input object is ever stored.
package servercheck

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"

	"github.com/wasmreconcile/wasmreconcile/host/protocol"
)

// ModuleLabel is the label the host puts on every child (the reconciler's
// ModuleLabel).
const ModuleLabel = "wasmreconcile.io/module"

// Refusal is one write the API server refused.
type Refusal struct {
	// What names what was written: "input.object Shop default/sample",
	// "child Ingress default/web", "the status of Shop default/sample".
	What string
	// Message is the API server's message, word for word.
	Message string
}

func (r Refusal) String() string { return r.What + ": " + r.Message }

// Checker checks against one API server.
type Checker struct {
	dc      discovery.DiscoveryInterface
	dyn     dynamic.Interface
	mapper  *restmapper.DeferredDiscoveryRESTMapper
	timeout time.Duration
}

// New returns a Checker of the API server cfg reaches.
func New(cfg *rest.Config) (*Checker, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &Checker{dc: dc, dyn: dyn, mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc)), timeout: 30 * time.Second}, nil
}

// Result is the verdict on one case.
type Result struct {
	// Input are the refusals of the case's input object: one a cluster
	// could not hold, so it never reaches the module.
	Input []Refusal
	// Writes are the refusals of what the response asks the host to
	// write: its desired children and its status.
	Writes []Refusal
}

// Check checks one case: in is its input, resp the module's checked
// response (nil when the call failed: then only the input is checked), and
// module the module's name (the host's field manager and module label). An
// error is a failure to check (the API server unreachable, a kind it does
// not serve), not a refusal.
func (c *Checker) Check(ctx context.Context, module string, in Input, resp *protocol.Response) (Result, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	var res Result
	obj := stored(in.Object)
	if err := c.ensureNamespace(ctx, obj.GetNamespace()); err != nil {
		return res, err
	}
	ri, err := c.resource(obj)
	if err != nil {
		return res, err
	}
	what := "input.object " + describe(obj)
	created, err := ri.Create(ctx, obj, metav1.CreateOptions{FieldValidation: metav1.FieldValidationStrict})
	if apierrors.IsAlreadyExists(err) { // left by a check that could not delete it: replace it
		zero := int64(0)
		if derr := ri.Delete(ctx, obj.GetName(), metav1.DeleteOptions{GracePeriodSeconds: &zero}); derr != nil && !apierrors.IsNotFound(derr) {
			return res, fmt.Errorf("deleting the %s a previous check left: %w", what, derr)
		}
		created, err = ri.Create(ctx, obj, metav1.CreateOptions{FieldValidation: metav1.FieldValidationStrict})
	}
	if err != nil {
		if !refused(err) {
			return res, fmt.Errorf("creating %s: %w", what, err)
		}
		res.Input = append(res.Input, Refusal{What: what, Message: err.Error()})
		created = nil
	}
	if created != nil {
		defer func() {
			// With no controllers, nothing holds it: it goes at once.
			zero := int64(0)
			_ = ri.Delete(context.WithoutCancel(ctx), created.GetName(), metav1.DeleteOptions{GracePeriodSeconds: &zero})
		}()
		if status, ok := in.Object["status"]; ok && c.hasStatus(created) {
			created.Object["status"] = status
			if _, err := ri.UpdateStatus(ctx, created, metav1.UpdateOptions{FieldValidation: metav1.FieldValidationStrict}); err != nil {
				if !refused(err) {
					return res, fmt.Errorf("writing the status of %s: %w", what, err)
				}
				res.Input = append(res.Input, Refusal{What: "the status of " + what, Message: err.Error()})
			}
		}
	}
	if resp == nil {
		return res, nil
	}
	owner := created
	if owner == nil { // refused: the children are still checked, with an owner of no uid
		owner = obj
		owner.SetUID(types.UID("00000000-0000-0000-0000-000000000000"))
	}
	if resp.Error == nil && resp.Children != nil {
		yes := true
		ref := []metav1.OwnerReference{{APIVersion: owner.GetAPIVersion(), Kind: owner.GetKind(), Name: owner.GetName(), UID: owner.GetUID(), Controller: &yes, BlockOwnerDeletion: &yes}}
		for _, d := range resp.Desired {
			d = d.DeepCopy()
			d.SetOwnerReferences(ref)
			labels := d.GetLabels()
			if labels == nil {
				labels = map[string]string{}
			}
			labels[ModuleLabel] = module
			d.SetLabels(labels)
			if err := c.ensureNamespace(ctx, d.GetNamespace()); err != nil {
				return res, err
			}
			r, err := c.dryApply(ctx, d, module, "child "+describe(d), "")
			if err != nil {
				return res, err
			}
			if r != nil {
				res.Writes = append(res.Writes, *r)
			}
		}
	}
	if resp.Status != nil && created != nil {
		body := &unstructured.Unstructured{Object: map[string]any{"apiVersion": obj.GetAPIVersion(), "kind": obj.GetKind(), "status": resp.Status}}
		body.SetName(obj.GetName())
		body.SetNamespace(obj.GetNamespace())
		r, err := c.dryApply(ctx, body, module, "the status of "+describe(obj), "status")
		if err != nil {
			return res, err
		}
		if r != nil {
			res.Writes = append(res.Writes, *r)
		}
	}
	return res, nil
}

// Input is a case's input. Only the reconciled object is checked: a case's
// observed children and related objects may give only the fields the
// module reads (a CronJob's name, a claim's phase), which the API server
// would refuse to store for its required ones; the offline schema check
// still refuses their undeclared fields and wrong types.
type Input struct {
	Object map[string]any
}

// dryApply server-side applies o (to subresource, if set) with dryRun=All,
// as the host applies it.
func (c *Checker) dryApply(ctx context.Context, o *unstructured.Unstructured, manager, what, subresource string) (*Refusal, error) {
	ri, err := c.resource(o)
	if err != nil {
		return nil, err
	}
	body, err := json.Marshal(o.Object)
	if err != nil {
		return nil, err
	}
	force := true
	var sub []string
	if subresource != "" {
		sub = []string{subresource}
	}
	_, err = ri.Patch(ctx, o.GetName(), types.ApplyPatchType, body, metav1.PatchOptions{
		DryRun: []string{metav1.DryRunAll}, FieldManager: manager, Force: &force, FieldValidation: metav1.FieldValidationStrict,
	}, sub...)
	switch {
	case err == nil:
		return nil, nil
	case refused(err):
		return &Refusal{What: what, Message: err.Error()}, nil
	}
	return nil, fmt.Errorf("checking %s: %w", what, err)
}

// refused reports whether err is the API server refusing what was sent
// (invalid, malformed, forbidden by a rule of the object), as opposed to
// failing to answer.
func refused(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return false
	}
	switch status.Status().Code {
	case 400, 403, 409, 422:
		return true
	case 500: // server-side apply's "failed to create typed patch object"
		return strings.Contains(err.Error(), "failed to create typed patch object")
	}
	return false
}

// resource returns the client of o's kind, in o's namespace when it is
// namespaced.
func (c *Checker) resource(o *unstructured.Unstructured) (dynamic.ResourceInterface, error) {
	gvk := o.GroupVersionKind()
	m, err := c.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if meta.IsNoMatchError(err) {
		c.mapper.Reset()
		m, err = c.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	}
	if err != nil {
		return nil, fmt.Errorf("the API server does not serve %s: %w; pass its CRD with --crds", gvk, err)
	}
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		if o.GetNamespace() == "" {
			o.SetNamespace(metav1.NamespaceDefault)
		}
		return c.dyn.Resource(m.Resource).Namespace(o.GetNamespace()), nil
	}
	o.SetNamespace("")
	return c.dyn.Resource(m.Resource), nil
}

// hasStatus reports whether o's kind has a status subresource.
func (c *Checker) hasStatus(o *unstructured.Unstructured) bool {
	gvk := o.GroupVersionKind()
	m, err := c.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return false
	}
	list, err := c.dc.ServerResourcesForGroupVersion(gvk.GroupVersion().String())
	if err != nil {
		return false
	}
	for _, r := range list.APIResources {
		if r.Name == m.Resource.Resource+"/status" {
			return true
		}
	}
	return false
}

// ensureNamespace creates namespace ns if it does not exist.
func (c *Checker) ensureNamespace(ctx context.Context, ns string) error {
	if ns == "" {
		return nil
	}
	nsRes := c.dyn.Resource(corev1.SchemeGroupVersion.WithResource("namespaces"))
	if _, err := nsRes.Get(ctx, ns, metav1.GetOptions{}); err == nil {
		return nil
	}
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": ns}}}
	if _, err := nsRes.Create(ctx, u, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s: %w", ns, err)
	}
	return nil
}

// stored returns a copy of o as a client creates it: without the fields the
// API server sets (uid, resourceVersion, creationTimestamp, generation,
// managedFields) or that would keep it from going (finalizers, a deletion
// time).
func stored(o map[string]any) *unstructured.Unstructured {
	u := (&unstructured.Unstructured{Object: o}).DeepCopy()
	for _, f := range []string{"uid", "resourceVersion", "creationTimestamp", "generation", "managedFields", "finalizers", "deletionTimestamp", "deletionGracePeriodSeconds", "selfLink"} {
		unstructured.RemoveNestedField(u.Object, "metadata", f)
	}
	delete(u.Object, "status")
	return u
}

// describe names o as "Kind namespace/name".
func describe(o *unstructured.Unstructured) string {
	if o.GetNamespace() == "" {
		return o.GetKind() + " " + o.GetName()
	}
	return o.GetKind() + " " + o.GetNamespace() + "/" + o.GetName()
}
