package protocol

import (
	"encoding/json"
	"fmt"
	"strings"

	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	kjson "sigs.k8s.io/json"

	"github.com/wasmreconcile/wasmreconcile/host/abi"
	"github.com/wasmreconcile/wasmreconcile/host/engine"
)

// Limits of one response. They are the API server's own limits where it has
// one (an Event's reason and note), so that what the host accepts the API
// server accepts too.
const (
	// MaxEvents is how many Events one response may ask for, so that a
	// buggy guest cannot flood the API server.
	MaxEvents = 10
	// MaxEventReasonLength is the longest Event reason, in bytes (the API
	// server's limit).
	MaxEventReasonLength = 128
	// MaxEventMessageBytes is the longest Event message (the API server's
	// limit on an Event's note).
	MaxEventMessageBytes = 1024
	// MaxRequeueAfterSeconds is the longest requeueAfterSeconds: 30 days.
	MaxRequeueAfterSeconds = 30 * 24 * 60 * 60
	// MaxObjectBytes is the largest object the host writes, encoded: etcd's
	// default request limit (--max-request-bytes, 1.5 MiB). A child over it,
	// or a status that makes its object over it, is refused.
	MaxObjectBytes = 1536 * 1024
)

// Rules are what a module's responses are checked against.
type Rules struct {
	// Module names the module in messages.
	Module string
	// Owns are the kinds the module may return as children: its
	// manifest's owns.
	Owns []abi.GroupVersionKind
	// Scopes tells which kinds are namespaced. Defaults to Builtin; a kind
	// that Scopes does not know is taken as namespaced.
	Scopes Scopes
}

// RulesFor returns the rules of a module with manifest m; scopes may be nil.
func RulesFor(m abi.Manifest, scopes Scopes) Rules {
	return Rules{Module: m.Name, Owns: m.Owns, Scopes: scopes}
}

// Response is a guest's response that passed every rule.
type Response struct {
	abi.Response
	// Desired are Response.Children completed for applying, in order: a
	// namespaced child that names no namespace is in its owner's.
	Desired []*unstructured.Unstructured
	// ScopeUnknown lists the child kinds whose scope Rules.Scopes did not
	// know, taken as namespaced. Offline, pass their CRDs to know them.
	ScopeUnknown []schema.GroupKind
}

// Decode decodes output, a guest's answer to the reconcile of owner named
// call (see CallName), and checks it against the rules. It returns an
// *engine.ABIError when output is not JSON and an *InvalidResponseError
// when it breaks a rule; either way nothing of it may be applied.
func (r Rules) Decode(call string, owner map[string]any, output []byte) (*Response, error) {
	var resp Response
	strict, err := kjson.UnmarshalStrict(output, &resp.Response)
	if err != nil {
		if syntax, _ := kjson.SyntaxErrorOffset(err); syntax || len(output) == 0 {
			return nil, &engine.ABIError{Module: r.Module, Call: call, Reason: "response is not valid JSON: " + err.Error()}
		}
		return nil, r.invalid(call, "%v", err)
	}
	if len(strict) > 0 {
		msgs := make([]string, len(strict))
		for i, e := range strict {
			msgs[i] = e.Error()
		}
		return nil, r.invalid(call, "%s", strings.Join(msgs, "; "))
	}
	if err := checkEvents(resp.Events); err != nil {
		return nil, r.invalid(call, "%v", err)
	}
	if s := resp.RequeueAfterSeconds; s < 0 || s > MaxRequeueAfterSeconds {
		return nil, r.invalid(call, "requeueAfterSeconds is %d; it must be within 0..%d (30 days)", s, MaxRequeueAfterSeconds)
	}
	if resp.Error != nil && strings.TrimSpace(resp.Error.Message) == "" {
		return nil, r.invalid(call, "error has no message; say what went wrong and what to do about it")
	}
	if err := checkStatusSize(owner, resp.Status); err != nil {
		return nil, r.invalid(call, "%v", err)
	}
	if err := r.children(owner, &resp); err != nil {
		return nil, r.invalid(call, "%v", err)
	}
	return &resp, nil
}

// checkStatusSize refuses a status that would make owner larger than
// MaxObjectBytes.
func checkStatusSize(owner map[string]any, status map[string]any) error {
	if status == nil {
		return nil
	}
	withStatus := make(map[string]any, len(owner)+1)
	for k, v := range owner {
		if k != "status" {
			withStatus[k] = v
		}
	}
	withStatus["status"] = status
	if n := encodedSize(StripManagedFields(withStatus)); n > MaxObjectBytes {
		return fmt.Errorf("the object with this status is %d bytes encoded; the API server stores at most %d (etcd's request limit): keep large data out of the status", n, MaxObjectBytes)
	}
	return nil
}

func encodedSize(v any) int {
	b, err := json.Marshal(v)
	if err != nil {
		return 0 // decoded from JSON: it encodes
	}
	return len(b)
}

func (r Rules) invalid(call, format string, args ...any) error {
	return &InvalidResponseError{Module: r.Module, Call: call, Reason: fmt.Sprintf(format, args...)}
}

func checkEvents(events []abi.Event) error {
	if len(events) > MaxEvents {
		return fmt.Errorf("%d events; a response may record at most %d", len(events), MaxEvents)
	}
	for i, e := range events {
		switch {
		case e.Type != abi.EventNormal && e.Type != abi.EventWarning:
			return fmt.Errorf("events[%d] has type %q; want Normal or Warning", i, e.Type)
		case e.Reason == "":
			return fmt.Errorf("events[%d] has no reason; give a short UpperCamelCase reason such as Created", i)
		case len(e.Reason) > MaxEventReasonLength:
			return fmt.Errorf("events[%d] has a reason of %d bytes; the API server allows at most %d", i, len(e.Reason), MaxEventReasonLength)
		case len(e.Message) > MaxEventMessageBytes:
			return fmt.Errorf("events[%d] (%s) has a message of %d bytes; the API server allows at most %d", i, e.Reason, len(e.Message), MaxEventMessageBytes)
		}
	}
	return nil
}

// childKey identifies a child: group, kind, namespace and name.
type childKey struct {
	gk              schema.GroupKind
	namespace, name string
}

func (k childKey) String() string {
	if k.namespace == "" {
		return k.gk.Kind + " " + k.name
	}
	return k.gk.Kind + " " + k.namespace + "/" + k.name
}

// children checks the children and completes their namespaces.
func (r Rules) children(owner map[string]any, resp *Response) error {
	if len(resp.Children) == 0 {
		return nil
	}
	scopes := r.Scopes
	if scopes == nil {
		scopes = Builtin
	}
	owned := map[schema.GroupVersionKind]bool{}
	for _, g := range r.Owns {
		owned[schema.GroupVersionKind{Group: g.Group, Version: g.Version, Kind: g.Kind}] = true
	}
	o := &unstructured.Unstructured{Object: owner}
	ownerNS := o.GetNamespace()
	self := childKey{gk: o.GroupVersionKind().GroupKind(), namespace: ownerNS, name: o.GetName()}
	seen := map[childKey]bool{}
	unknown := map[schema.GroupKind]bool{}
	for i, c := range resp.Children {
		u := &unstructured.Unstructured{Object: c}
		apiVersion, _ := c["apiVersion"].(string)
		kind, _ := c["kind"].(string)
		if apiVersion == "" || kind == "" {
			return fmt.Errorf("children[%d] has no apiVersion or kind", i)
		}
		gv, err := schema.ParseGroupVersion(apiVersion)
		if err != nil {
			return fmt.Errorf("children[%d] has apiVersion %q: %v", i, apiVersion, err)
		}
		gvk := gv.WithKind(kind)
		if !owned[gvk] {
			return fmt.Errorf("children[%d] is a %s, which is not among the kinds the manifest owns; add it to manifest.owns", i, describe(gvk))
		}
		if _, ok := c["metadata"].(map[string]any); !ok {
			return fmt.Errorf("children[%d] (%s) has no metadata", i, kind)
		}
		name := u.GetName()
		if name == "" {
			return fmt.Errorf("children[%d] (%s) has no metadata.name", i, kind)
		}
		if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
			return fmt.Errorf("children[%d] (%s) has an invalid metadata.name %q: %s", i, kind, name, strings.Join(errs, "; "))
		}
		if n := encodedSize(c); n > MaxObjectBytes {
			return fmt.Errorf("children[%d] (%s %s) is %d bytes encoded; the API server stores at most %d (etcd's request limit)", i, kind, name, n, MaxObjectBytes)
		}
		namespaced, known := scopes.Namespaced(gvk.GroupKind())
		if !known {
			namespaced = true
			if !unknown[gvk.GroupKind()] {
				unknown[gvk.GroupKind()] = true
				resp.ScopeUnknown = append(resp.ScopeUnknown, gvk.GroupKind())
			}
		}
		ns := u.GetNamespace()
		switch {
		case !namespaced && ownerNS != "":
			return fmt.Errorf("children[%d] (%s %s) is cluster-scoped, but its owner is in namespace %q: a namespaced object cannot own a cluster-scoped one", i, kind, name, ownerNS)
		case !namespaced && ns != "":
			return fmt.Errorf("children[%d] (%s %s) is cluster-scoped but sets metadata.namespace %q; remove it", i, kind, name, ns)
		case namespaced && ns == "" && ownerNS == "":
			return fmt.Errorf("children[%d] (%s %s) is namespaced and its owner is cluster-scoped: set metadata.namespace", i, kind, name)
		case namespaced && ns == "":
			ns = ownerNS
		case namespaced && ownerNS != "" && ns != ownerNS:
			return fmt.Errorf("children[%d] (%s %s) is in namespace %q, but children must be in their owner's namespace %q", i, kind, name, ns, ownerNS)
		}
		if err := checkMeta(c, ns, namespaced); err != nil {
			return fmt.Errorf("children[%d] (%s %s) has invalid metadata: %v", i, kind, name, err)
		}
		k := childKey{gk: gvk.GroupKind(), namespace: ns, name: name}
		if k == self {
			return fmt.Errorf("children[%d] (%s) is the reconciled object itself; a module cannot own its own object", i, k)
		}
		if seen[k] {
			return fmt.Errorf("children[%d]: %s is listed twice", i, k)
		}
		seen[k] = true
		if namespaced && u.GetNamespace() == "" {
			// Complete a copy: c belongs to the decoded response.
			u = u.DeepCopy()
			u.SetNamespace(ns)
		}
		resp.Desired = append(resp.Desired, u)
	}
	return nil
}

// describe names a kind the way kubectl does: "Service" for the core
// group, "Deployment.apps" otherwise, with the version.
func describe(gvk schema.GroupVersionKind) string {
	if gvk.Group == "" {
		return gvk.Kind + " (" + gvk.Version + ")"
	}
	return gvk.Kind + "." + gvk.Group + " (" + gvk.Version + ")"
}

// checkMeta checks a child's metadata with the API server's own rules for
// every kind (namespace, labels, annotations, finalizers, generateName),
// with the namespace the host will apply it in. Owner references are the
// host's to set, and are not checked.
func checkMeta(child map[string]any, namespace string, namespaced bool) error {
	md, _ := child["metadata"].(map[string]any)
	var om metav1.ObjectMeta
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(md, &om); err != nil {
		return err
	}
	om.Namespace, om.OwnerReferences = namespace, nil
	if !namespaced {
		om.Namespace = ""
	}
	errs := apivalidation.ValidateObjectMeta(&om, namespaced, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	return errs.ToAggregate()
}
