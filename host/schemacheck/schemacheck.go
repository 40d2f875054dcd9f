// Package schemacheck checks, with no cluster, what a module's response asks
// the host to write (the desired children, and the status of the reconciled
// object) against the schemas the API server checks it against, with the API
// server's own code and messages. It backs `operator test --crds` and
// `operator invoke --crds`, so that a typo'd field fails in CI as it would
// fail in a cluster.
//
// The host writes children and the status with server-side apply (a child
// that does not exist yet is created, and applied from then on). The API
// server turns an applied object into a typed value with
// structured-merge-diff, which refuses a field the schema does not declare
// and a value of the wrong type; schemacheck does the same, with the same
// type converters: for built-in kinds, client-go's (generated from the
// schema of every built-in type), and for custom resources, one built from
// each CRD's structural schema as the apiextensions-apiserver builds it
// (x-kubernetes-preserve-unknown-fields, x-kubernetes-embedded-resource and
// the other extensions mean what they mean there). Custom resources are then
// validated as the apiextensions-apiserver validates them: defaulting, then
// the OpenAPI value validations (types, enum, required, pattern, minimum and
// maximum, lengths, formats), embedded objects' metadata, list types, and
// the CEL rules (x-kubernetes-validations). A status is validated against
// the status schema with the object's observed status as the old one, so a
// value that was already invalid and did not change passes, as with the API
// server's validation ratcheting.
//
// Not checked offline: built-in kinds' value validations, which live in the
// kube-apiserver itself (a Service port out of range, a missing container
// image), admission webhooks and policies, and quota.
//
// A kind with no schema here (a CRD not given) is not checked: Check lists
// it, and the caller says so.
package schemacheck

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"

	apiextensionsinternal "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel/model"
	structuraldefaulting "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	structurallisttype "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/listtype"
	schemaobjectmeta "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/objectmeta"
	apiservervalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	"k8s.io/apiextensions-apiserver/pkg/controller/openapi/builder"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/apimachinery/pkg/util/validation/field"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/cel/common"
	"k8s.io/client-go/applyconfigurations"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/kube-openapi/pkg/spec3"
	"k8s.io/kube-openapi/pkg/validation/spec"
	"sigs.k8s.io/structured-merge-diff/v6/typed"

	"github.com/wasmreconcile/wasmreconcile/host/protocol"
)

// builtin converts objects of the built-in kinds to typed values with the
// schemas client-go ships (k8s.io/client-go/applyconfigurations), generated
// from the same OpenAPI as the kube-apiserver's. Parsing them takes a few
// hundred milliseconds: done on first use, not when a program starts.
var builtin = sync.OnceValue(func() managedfields.TypeConverter {
	return applyconfigurations.NewTypeConverter(scheme.Scheme)
})

// Checker checks objects against the schemas of the CustomResourceDefinitions
// it was given and of the built-in kinds. A nil *Checker checks nothing.
type Checker struct {
	kinds map[schema.GroupKind]*customKind
}

// customKind is a kind defined by a CRD.
type customKind struct {
	crd        string // the CRD's name
	plural     string // spec.names.plural
	source     string // where it was read
	namespaced bool
	converter  managedfields.TypeConverter
	versions   map[string]*customVersion
	names      []string // the versions, in the CRD's order
}

// customVersion is one version of a custom kind.
type customVersion struct {
	served     bool
	status     bool // it has the status subresource
	structural *structuralschema.Structural
	validator  apiservervalidation.SchemaValidator
	// statusValidator validates .status, as the status subresource does;
	// nil when the schema has no status property.
	statusValidator apiservervalidation.SchemaValidator
	cel             *cel.Validator // nil without x-kubernetes-validations
}

// New returns a Checker for crds (apiextensions.k8s.io/v1, as the API server
// accepted them: LoadDir validates what it reads) and the built-in kinds.
func New(crds ...*apiextensionsv1.CustomResourceDefinition) (*Checker, error) {
	sources := make([]string, len(crds))
	for i, c := range crds {
		sources[i] = "CustomResourceDefinition " + c.Name
	}
	return newChecker(crds, sources)
}

func newChecker(crds []*apiextensionsv1.CustomResourceDefinition, sources []string) (*Checker, error) {
	c := &Checker{kinds: map[schema.GroupKind]*customKind{}}
	for i, crd := range crds {
		gk := schema.GroupKind{Group: crd.Spec.Group, Kind: crd.Spec.Names.Kind}
		if prev, ok := c.kinds[gk]; ok {
			return nil, fmt.Errorf("%s: %s is defined twice, also in %s; give each CRD once", sources[i], gk, prev.source)
		}
		k, err := newCustomKind(crd)
		if err != nil {
			return nil, fmt.Errorf("%s: CustomResourceDefinition %s: %w", sources[i], crd.Name, err)
		}
		k.source = sources[i]
		c.kinds[gk] = k
	}
	return c, nil
}

// newCustomKind builds what the apiextensions-apiserver builds to serve
// crd: a structural schema, validators and a type converter per version
// (see its customresource_handler.go).
func newCustomKind(crd *apiextensionsv1.CustomResourceDefinition) (*customKind, error) {
	if crd.Status.AcceptedNames.Kind == "" {
		crd = crd.DeepCopy()
		crd.Status.AcceptedNames = crd.Spec.Names
	}
	k := &customKind{
		crd:        crd.Name,
		plural:     crd.Spec.Names.Plural,
		namespaced: crd.Spec.Scope != apiextensionsv1.ClusterScoped,
		versions:   map[string]*customVersion{},
	}
	var specs []*spec3.OpenAPI
	for _, v := range crd.Spec.Versions {
		if v.Schema == nil || v.Schema.OpenAPIV3Schema == nil {
			return nil, fmt.Errorf("version %s has no schema.openAPIV3Schema", v.Name)
		}
		internal := &apiextensionsinternal.CustomResourceValidation{}
		if err := apiextensionsv1.Convert_v1_CustomResourceValidation_To_apiextensions_CustomResourceValidation(v.Schema, internal, nil); err != nil {
			return nil, fmt.Errorf("version %s: %w", v.Name, err)
		}
		s, err := structuralschema.NewStructural(internal.OpenAPIV3Schema)
		if err != nil {
			return nil, fmt.Errorf("version %s: the schema is not structural: %w", v.Name, err)
		}
		if errs := structuralschema.ValidateStructural(nil, s); len(errs) > 0 {
			return nil, fmt.Errorf("version %s: the schema is not structural: %w", v.Name, errs.ToAggregate())
		}
		if !crd.Spec.PreserveUnknownFields {
			s = s.DeepCopy()
			if err := structuraldefaulting.PruneDefaults(s); err != nil {
				return nil, fmt.Errorf("version %s: %w", v.Name, err)
			}
		}
		validator, _, err := apiservervalidation.NewSchemaValidator(internal.OpenAPIV3Schema)
		if err != nil {
			return nil, fmt.Errorf("version %s: %w", v.Name, err)
		}
		cv := &customVersion{
			served:     v.Served,
			status:     v.Subresources != nil && v.Subresources.Status != nil,
			structural: s,
			validator:  validator,
			cel:        cel.NewValidator(s, true, celconfig.PerCallLimit),
		}
		if st, ok := internal.OpenAPIV3Schema.Properties["status"]; ok && cv.status {
			if cv.statusValidator, _, err = apiservervalidation.NewSchemaValidator(&st); err != nil {
				return nil, fmt.Errorf("version %s: status: %w", v.Name, err)
			}
		}
		k.versions[v.Name] = cv
		k.names = append(k.names, v.Name)

		// The models server-side apply uses (buildOpenAPIModelsForApply).
		o, err := builder.BuildOpenAPIV3(crd, v.Name, builder.Options{})
		if err != nil {
			return nil, fmt.Errorf("version %s: building its OpenAPI: %w", v.Name, err)
		}
		specs = append(specs, o)
	}
	merged, err := builder.MergeSpecsV3(specs...)
	if err != nil {
		return nil, fmt.Errorf("merging the OpenAPI of its versions: %w", err)
	}
	models := map[string]*spec.Schema{}
	if merged.Components != nil {
		models = merged.Components.Schemas
	}
	if k.converter, err = managedfields.NewTypeConverter(models, crd.Spec.PreserveUnknownFields); err != nil {
		return nil, err
	}
	return k, nil
}

// Namespaced reports whether the objects of a kind defined by one of the
// CRDs live in a namespace (protocol.Scopes); other kinds are unknown.
func (c *Checker) Namespaced(gk schema.GroupKind) (namespaced, known bool) {
	if c == nil {
		return false, false
	}
	k, ok := c.kinds[gk]
	if !ok {
		return false, false
	}
	return k.namespaced, true
}

// Plural returns spec.names.plural of the CRD that defines gk, the resource
// name RBAC rules and REST paths use; ok is false for other kinds.
func (c *Checker) Plural(gk schema.GroupKind) (plural string, ok bool) {
	if c == nil {
		return "", false
	}
	k, ok := c.kinds[gk]
	if !ok {
		return "", false
	}
	return k.plural, true
}

// Kinds lists the kinds defined by the CRDs, sorted.
func (c *Checker) Kinds() []schema.GroupKind {
	if c == nil {
		return nil
	}
	out := make([]schema.GroupKind, 0, len(c.kinds))
	for gk := range c.kinds {
		out = append(out, gk)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

// Refusal is one write the API server would refuse.
type Refusal struct {
	// What names what is written: "child CronJob default/web", or
	// "the status of WebApp default/shop".
	What string
	// Fields are the paths of the offending fields, as the API server
	// names them (".spec.x" in a server-side apply error, "spec.x" in a
	// validation error).
	Fields []string
	// Message is the API server's message.
	Message string
}

func (r Refusal) String() string { return r.What + ": " + r.Message }

// Error reports a response whose desired children or status the API server
// would refuse. It unwraps to a *protocol.InvalidResponseError, so its kind
// is protocol.InvalidResponse, the kind the cluster gives a write the API
// server refuses as invalid, and it is terminal: the same input gives the
// same response.
type Error struct {
	Module string
	Call   string
	// Refusals are the refused writes, children first, in the response's
	// order, then the status.
	Refusals []Refusal
}

// Hint says what to do about an Error.
const Hint = "fix the module so that what it writes matches the schema, or pass the CRD the cluster has if it differs (docs/abi.md, \"Schema checks offline\")"

func (e *Error) reason() string {
	parts := make([]string, len(e.Refusals))
	for i, r := range e.Refusals {
		parts[i] = "the API server would refuse " + r.String()
	}
	return strings.Join(parts, "; ")
}

func (e *Error) Error() string {
	return fmt.Sprintf("module[%s] %s: invalid response: %s; %s", e.Module, e.Call, e.reason(), Hint)
}

// Unwrap returns the *protocol.InvalidResponseError e is a case of.
func (e *Error) Unwrap() error {
	return &protocol.InvalidResponseError{Module: e.Module, Call: e.Call, Reason: e.reason()}
}

// Check checks what resp, the checked response of module to the reconcile
// of owner named call, asks the host to write, as the host writes it: the
// desired children when the response has children and no error, and the
// status when it is set and differs from owner's. It returns an *Error when
// the API server would refuse any of it, and the kinds it has no schema for
// and did not check.
func (c *Checker) Check(module, call string, owner map[string]any, resp *protocol.Response) (unchecked []schema.GroupVersionKind, err error) {
	if c == nil || resp == nil {
		return nil, nil
	}
	var refusals []Refusal
	note := func(gvk schema.GroupVersionKind) {
		for _, u := range unchecked {
			if u == gvk {
				return
			}
		}
		unchecked = append(unchecked, gvk)
	}
	if resp.Error == nil && resp.Children != nil {
		for _, d := range resp.Desired {
			r, ok := c.CheckObject(d.Object)
			if !ok {
				note(d.GroupVersionKind())
			}
			if r != nil {
				refusals = append(refusals, *r)
			}
		}
	}
	if resp.Status != nil {
		observed, _, _ := unstructured.NestedFieldNoCopy(owner, "status")
		if !equality.Semantic.DeepEqual(observed, any(resp.Status)) {
			r, ok := c.CheckStatus(owner, resp.Status)
			if !ok {
				note((&unstructured.Unstructured{Object: owner}).GroupVersionKind())
			}
			if r != nil {
				refusals = append(refusals, *r)
			}
		}
	}
	if len(refusals) > 0 {
		return unchecked, &Error{Module: module, Call: call, Refusals: refusals}
	}
	return unchecked, nil
}

// CheckObject checks obj as a desired child, applied with server-side apply
// (and created, the first time). It returns the refusal the API server
// would answer, or nil; checked is false when obj's kind has no schema
// here.
func (c *Checker) CheckObject(obj map[string]any) (refusal *Refusal, checked bool) {
	return c.checkObject(obj, "child ")
}

// CheckInput checks obj, an object a test case gives a module as input
// (the reconciled object, a child, a related object), as the API server
// checks it on create: a field its schema does not declare (which the API
// server prunes, so the module never sees it in a cluster), a value of the
// wrong type, one the schema's validation refuses. what names it in the
// refusal, such as "input.object". checked is false when obj's kind has no
// schema here.
func (c *Checker) CheckInput(obj map[string]any, what string) (refusal *Refusal, checked bool) {
	return c.checkObject(obj, what+" ")
}

func (c *Checker) checkObject(obj map[string]any, prefix string) (refusal *Refusal, checked bool) {
	if c == nil {
		return nil, false
	}
	u := &unstructured.Unstructured{Object: obj}
	gvk := u.GroupVersionKind()
	what := prefix + objectName(u)
	k, v, r := c.custom(gvk, what)
	if r != nil {
		return r, true
	}
	if k == nil {
		if !scheme.Scheme.Recognizes(gvk) {
			return nil, false
		}
		return applyRefusal(builtin(), u, what), true
	}
	if r := applyRefusal(k.converter, u, what); r != nil {
		return r, true
	}
	// Validated as the custom resource strategy validates a create.
	x := deepCopy(obj).(map[string]any)
	structuraldefaulting.Default(x, v.structural)
	ctx := context.Background()
	var errs field.ErrorList
	errs = append(errs, apiservervalidation.ValidateCustomResource(nil, x, v.validator)...)
	errs = append(errs, schemaobjectmeta.Validate(ctx, nil, x, v.structural, false)...)
	errs = append(errs, structurallisttype.ValidateListSetsAndMaps(nil, v.structural, x)...)
	if v.cel != nil {
		if blocked, e := hasBlockingErr(errs); blocked {
			errs = append(errs, e)
		} else {
			cerrs, _ := v.cel.Validate(ctx, nil, v.structural, x, nil, celconfig.RuntimeCELCostBudget)
			errs = append(errs, cerrs...)
		}
	}
	return invalidRefusal(gvk.GroupKind(), u.GetName(), what, errs), true
}

// CheckStatus checks status as the new status of owner, applied with
// server-side apply to its status subresource as the host does. It returns
// the refusal the API server would answer, or nil; checked is false when
// owner's kind has no schema here.
func (c *Checker) CheckStatus(owner map[string]any, status map[string]any) (refusal *Refusal, checked bool) {
	if c == nil {
		return nil, false
	}
	o := &unstructured.Unstructured{Object: owner}
	gvk := o.GroupVersionKind()
	what := "the status of " + objectName(o)
	// What the host applies: the object's identity and the status.
	patch := &unstructured.Unstructured{Object: map[string]any{"status": deepCopy(status)}}
	patch.SetGroupVersionKind(gvk)
	patch.SetNamespace(o.GetNamespace())
	patch.SetName(o.GetName())
	k, v, r := c.custom(gvk, what)
	if r != nil {
		return r, true
	}
	if k == nil {
		if !scheme.Scheme.Recognizes(gvk) {
			return nil, false
		}
		return applyRefusal(builtin(), patch, what), true
	}
	if !v.status {
		return &Refusal{What: what, Message: fmt.Sprintf("the CRD %s has no status subresource for version %s (spec.versions[].subresources.status), so the host cannot write a status: the API server answers 404 Not Found; add the subresource to the CRD, or return no status", k.crd, gvk.Version)}, true
	}
	if r := applyRefusal(k.converter, patch, what); r != nil {
		return r, true
	}
	// Validated as the status strategy validates an update, with the
	// observed object as the old one (validation ratcheting).
	newObj := deepCopy(owner).(map[string]any)
	newObj["status"] = deepCopy(status)
	structuraldefaulting.Default(newObj, v.structural)
	oldObj := owner
	ctx := context.Background()
	correlated := common.NewCorrelatedObject(newObj, oldObj, &model.Structural{Structural: v.structural})
	var errs field.ErrorList
	if v.statusValidator != nil {
		errs = append(errs, apiservervalidation.ValidateCustomResourceUpdate(field.NewPath("status"), newObj["status"], oldObj["status"],
			v.statusValidator, apiservervalidation.WithRatcheting(correlated.Key("status")))...)
	}
	if newErrs := structurallisttype.ValidateListSetsAndMaps(nil, v.structural, newObj); len(newErrs) > 0 {
		if oldErrs := structurallisttype.ValidateListSetsAndMaps(nil, v.structural, oldObj); len(oldErrs) == 0 {
			errs = append(errs, newErrs...)
		}
	}
	if v.cel != nil {
		if blocked, e := hasBlockingErr(errs); blocked {
			errs = append(errs, e)
		} else {
			cerrs, _ := v.cel.Validate(ctx, nil, v.structural, newObj, oldObj, celconfig.RuntimeCELCostBudget, cel.WithRatcheting(correlated))
			errs = append(errs, cerrs...)
		}
	}
	return invalidRefusal(gvk.GroupKind(), o.GetName(), what, errs), true
}

// custom returns the custom kind and version of gvk, nil if its group and
// kind have no CRD here, or the refusal of a version the CRD does not serve.
func (c *Checker) custom(gvk schema.GroupVersionKind, what string) (*customKind, *customVersion, *Refusal) {
	k, ok := c.kinds[gvk.GroupKind()]
	if !ok {
		return nil, nil, nil
	}
	v, ok := k.versions[gvk.Version]
	if !ok || !v.served {
		served := []string{}
		for _, n := range k.names {
			if k.versions[n].served {
				served = append(served, n)
			}
		}
		return nil, nil, &Refusal{What: what, Fields: []string{"apiVersion"}, Message: fmt.Sprintf("the CRD %s does not serve version %s (it serves %s): the API server answers 404 Not Found; use a served version", k.crd, gvk.Version, strings.Join(served, ", "))}
	}
	return k, v, nil
}

// applyRefusal converts obj to a typed value as the API server does with
// an applied object, and returns the refusal it answers if that fails.
func applyRefusal(tc managedfields.TypeConverter, obj *unstructured.Unstructured, what string) *Refusal {
	_, err := tc.ObjectToTyped(obj)
	if err == nil {
		return nil
	}
	r := &Refusal{What: what,
		// The API server's words (structuredMergeManager.Apply).
		Message: fmt.Sprintf("failed to create typed patch object (%s/%s; %s): %v", obj.GetNamespace(), obj.GetName(), obj.GroupVersionKind(), err)}
	var verrs typed.ValidationErrors
	if errors.As(err, &verrs) {
		for _, e := range verrs {
			r.Fields = append(r.Fields, e.Path)
		}
	}
	return r
}

// invalidRefusal is the refusal of an object with validation errors errs:
// the API server's 422 Invalid.
func invalidRefusal(gk schema.GroupKind, name, what string, errs field.ErrorList) *Refusal {
	if len(errs) == 0 {
		return nil
	}
	r := &Refusal{What: what, Message: apierrors.NewInvalid(gk, name, errs).Error()}
	for _, e := range errs {
		r.Fields = append(r.Fields, e.Field)
	}
	return r
}

// hasBlockingErr is the custom resource strategy's: CEL rules are not run
// on an object with errors they could trip over.
func hasBlockingErr(errs field.ErrorList) (bool, *field.Error) {
	for _, err := range errs {
		if err.Type == field.ErrorTypeNotSupported || err.Type == field.ErrorTypeRequired || err.Type == field.ErrorTypeTooLong || err.Type == field.ErrorTypeTooMany || err.Type == field.ErrorTypeTypeInvalid {
			return true, field.Invalid(nil, nil, "some validation rules were not checked because the object was invalid; correct the existing errors to complete validation")
		}
	}
	return false, nil
}

// deepCopy copies the maps and slices of a decoded JSON or YAML value (the
// defaulting writes in place); scalars are shared.
func deepCopy(v any) any {
	switch v := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, e := range v {
			out[k] = deepCopy(e)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = deepCopy(e)
		}
		return out
	}
	return v
}

// objectName is "Kind namespace/name", or "Kind name" without a namespace.
func objectName(u *unstructured.Unstructured) string {
	if ns := u.GetNamespace(); ns != "" {
		return u.GetKind() + " " + ns + "/" + u.GetName()
	}
	return u.GetKind() + " " + u.GetName()
}
