package protocol

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

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

// The API server's own limits on an Event, which a response's Events must
// keep: what the host accepts, the API server accepts too.
const (
	// MaxEventReasonLength is the longest Event reason, in bytes.
	MaxEventReasonLength = 128
	// MaxEventMessageBytes is the longest Event message (an Event's note).
	MaxEventMessageBytes = 1024
)

// Defaults of Limits.
const (
	// DefaultMaxEvents is how many Events one response may ask for, so
	// that a buggy guest cannot flood the API server.
	DefaultMaxEvents = 10
	// DefaultMaxRequeueAfter is the longest requeueAfterSeconds: 30 days.
	DefaultMaxRequeueAfter = 30 * 24 * time.Hour
	// DefaultMaxObjectBytes is the largest object the host writes, encoded:
	// etcd's default request limit (its --max-request-bytes, 1.5 MiB).
	DefaultMaxObjectBytes = 1536 * 1024
)

// Limits bound one response. An operator sets them once, for the cluster
// (operator run) and for offline runs (operator invoke and test) alike:
// the flags have the same names. Zero fields take the defaults.
type Limits struct {
	// MaxEvents caps the Events of one response. Defaults to
	// DefaultMaxEvents (10).
	MaxEvents int
	// MaxRequeueAfter caps requeueAfterSeconds. Defaults to
	// DefaultMaxRequeueAfter (30 days).
	MaxRequeueAfter time.Duration
	// MaxObjectBytes caps a child's encoded size, and the reconciled
	// object's with the new status. Defaults to DefaultMaxObjectBytes
	// (1.5 MiB); raise it only with etcd's --max-request-bytes.
	MaxObjectBytes int
}

// WithDefaults returns l with zero fields set to the defaults.
func (l Limits) WithDefaults() Limits {
	if l.MaxEvents <= 0 {
		l.MaxEvents = DefaultMaxEvents
	}
	if l.MaxRequeueAfter <= 0 {
		l.MaxRequeueAfter = DefaultMaxRequeueAfter
	}
	if l.MaxObjectBytes <= 0 {
		l.MaxObjectBytes = DefaultMaxObjectBytes
	}
	return l
}

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
	// Limits bound the response; see Limits for the defaults.
	Limits Limits
}

// RulesFor returns the rules of a module with manifest m; scopes may be nil.
func RulesFor(m abi.Manifest, scopes Scopes, limits Limits) Rules {
	return Rules{Module: m.Name, Owns: m.Owns, Scopes: scopes, Limits: limits}
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
// call (see CallName), and checks it against the rules. requestBytes is the
// length of the request EncodeRequest made for owner (0 if unknown): it
// bounds owner's encoded size, so that the size of owner with its new status
// is computed only when that bound does not already prove it fits. It
// returns an *engine.ABIError when output is not JSON and an
// *InvalidResponseError when it breaks a rule; either way nothing of it may
// be applied.
func (r Rules) Decode(call string, owner map[string]any, requestBytes int, output []byte) (*Response, error) {
	limits := r.Limits.WithDefaults()
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
	if err := checkEvents(resp.Events, limits.MaxEvents); err != nil {
		return nil, r.invalid(call, "%v", err)
	}
	if s, max := resp.RequeueAfterSeconds, int64(limits.MaxRequeueAfter/time.Second); s < 0 || s > max {
		return nil, r.invalid(call, "requeueAfterSeconds is %d; it must be within 0..%d (%s)", s, max, limits.MaxRequeueAfter)
	}
	if resp.Error != nil && strings.TrimSpace(resp.Error.Message) == "" {
		return nil, r.invalid(call, "error has no message; say what went wrong and what to do about it")
	}
	// The request holds owner (with its old status) and the output holds the
	// new status: when both together fit, so does owner with the new status.
	if requestBytes <= 0 || requestBytes+len(output) > limits.MaxObjectBytes {
		if err := checkStatusSize(owner, resp.Status, limits.MaxObjectBytes); err != nil {
			return nil, r.invalid(call, "%v", err)
		}
	}
	if err := r.children(owner, &resp, limits.MaxObjectBytes); err != nil {
		return nil, r.invalid(call, "%v", err)
	}
	return &resp, nil
}

// checkStatusSize refuses a status that would make owner larger than
// MaxObjectBytes.
func checkStatusSize(owner map[string]any, status map[string]any, max int) error {
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
	if n := encodedSize(StripManagedFields(withStatus)); n > max {
		return fmt.Errorf("the object with this status is %d bytes encoded; the API server stores at most %d (etcd's request limit; --max-object-bytes): keep large data out of the status", n, max)
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

func checkEvents(events []abi.Event, max int) error {
	if len(events) > max {
		return fmt.Errorf("%d events; a response may record at most %d (--max-events)", len(events), max)
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
func (r Rules) children(owner map[string]any, resp *Response, maxBytes int) error {
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
		if n := encodedSize(c); n > maxBytes {
			return fmt.Errorf("children[%d] (%s %s) is %d bytes encoded; the API server stores at most %d (etcd's request limit; --max-object-bytes)", i, kind, name, n, maxBytes)
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
