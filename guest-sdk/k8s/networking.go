package k8s

import (
	guest "github.com/wasmreconcile/wasmreconcile/guest-sdk"
	"github.com/wasmreconcile/wasmreconcile/guest-sdk/internal/jsontree"
)

// appender is a pointer to one of this package's types.
type appender[T any] interface {
	*T
	AppendJSON(b []byte) ([]byte, error)
}

// list writes the member k, a list of xs, when xs is not empty.
func list[T any, P appender[T]](w *writer, k string, xs []T) {
	if len(xs) == 0 || !w.key(k) {
		return
	}
	w.b = append(w.b, '[')
	for i := range xs {
		if i > 0 {
			w.b = append(w.b, ',')
		}
		w.value(P(&xs[i]).AppendJSON(w.b))
	}
	w.b = append(w.b, ']')
}

// Ingress is a networking.k8s.io/v1 Ingress: HTTP routes from hosts and
// paths to Services. The API server checks what no schema says: a rule's
// host is a lower-case DNS name (operator test --api-server checks it
// offline), a path of PathTypePrefix or PathTypeExact starts with "/".
type Ingress struct {
	ObjectMeta `json:"metadata"`
	Spec       IngressSpec    `json:"spec"`
	Extra      map[string]any `json:"-"`
}

// Child returns i as an element of guest.Response.Children (see
// Deployment.Child).
func (i *Ingress) Child() guest.Object {
	o := i.ObjectMeta.child("networking.k8s.io/v1", "Ingress", 1)
	o["spec"] = &i.Spec
	return withExtra(o, i.Extra)
}

// AppendJSON appends i's JSON encoding to b.
func (i *Ingress) AppendJSON(b []byte) ([]byte, error) {
	return jsontree.Append(b, map[string]any(i.Child()))
}

// MarshalJSON is AppendJSON for encoding/json.
func (i Ingress) MarshalJSON() ([]byte, error) { return i.AppendJSON(nil) }

// IngressSpec routes by Rules, with TLS for their hosts; DefaultBackend
// serves what no rule matches. IngressClassName picks the controller.
type IngressSpec struct {
	IngressClassName *string         `json:"ingressClassName,omitempty"`
	DefaultBackend   *IngressBackend `json:"defaultBackend,omitempty"`
	TLS              []IngressTLS    `json:"tls,omitempty"`
	Rules            []IngressRule   `json:"rules,omitempty"`
	Extra            map[string]any  `json:"-"`
}

// AppendJSON appends s's JSON encoding to b.
func (s *IngressSpec) AppendJSON(b []byte) ([]byte, error) {
	w := open(b, s.Extra)
	if s.DefaultBackend != nil && w.key("defaultBackend") {
		w.value(s.DefaultBackend.AppendJSON(w.b))
	}
	w.strPtr("ingressClassName", s.IngressClassName)
	list(&w, "rules", s.Rules)
	list(&w, "tls", s.TLS)
	return w.close()
}

// MarshalJSON is AppendJSON for encoding/json.
func (s *IngressSpec) MarshalJSON() ([]byte, error) { return s.AppendJSON(nil) }

// IngressTLS serves Hosts with the certificate of Secret SecretName.
type IngressTLS struct {
	Hosts      []string       `json:"hosts,omitempty"`
	SecretName string         `json:"secretName,omitempty"`
	Extra      map[string]any `json:"-"`
}

// AppendJSON appends t's JSON encoding to b.
func (t *IngressTLS) AppendJSON(b []byte) ([]byte, error) {
	w := open(b, t.Extra)
	w.strs("hosts", t.Hosts)
	w.str("secretName", t.SecretName)
	return w.close()
}

// IngressRule routes the requests for Host ("" for any) by HTTP's paths.
// (k8s.io/api's IngressRuleValue is inlined: HTTP is here directly.)
type IngressRule struct {
	Host  string                `json:"host,omitempty"`
	HTTP  *HTTPIngressRuleValue `json:"http,omitempty"`
	Extra map[string]any        `json:"-"`
}

// AppendJSON appends r's JSON encoding to b.
func (r *IngressRule) AppendJSON(b []byte) ([]byte, error) {
	w := open(b, r.Extra)
	w.str("host", r.Host)
	if r.HTTP != nil && w.key("http") {
		w.value(r.HTTP.AppendJSON(w.b))
	}
	return w.close()
}

// HTTPIngressRuleValue lists a rule's paths.
type HTTPIngressRuleValue struct {
	Paths []HTTPIngressPath `json:"paths,omitempty"`
	Extra map[string]any    `json:"-"`
}

// AppendJSON appends v's JSON encoding to b.
func (v *HTTPIngressRuleValue) AppendJSON(b []byte) ([]byte, error) {
	w := open(b, v.Extra)
	list(&w, "paths", v.Paths)
	return w.close()
}

// PathType is how an Ingress path matches a request's.
type PathType string

// The path types; the API requires one on every path.
const (
	PathTypeExact                  PathType = "Exact"
	PathTypePrefix                 PathType = "Prefix"
	PathTypeImplementationSpecific PathType = "ImplementationSpecific"
)

// HTTPIngressPath sends the requests whose path matches Path (as PathType
// says) to Backend.
type HTTPIngressPath struct {
	Path     string         `json:"path,omitempty"`
	PathType *PathType      `json:"pathType,omitempty"`
	Backend  IngressBackend `json:"backend,omitzero"`
	Extra    map[string]any `json:"-"`
}

// AppendJSON appends p's JSON encoding to b.
func (p *HTTPIngressPath) AppendJSON(b []byte) ([]byte, error) {
	w := open(b, p.Extra)
	if w.key("backend") {
		w.object(p.Backend.AppendJSON(w.b))
	}
	w.str("path", p.Path)
	if p.PathType != nil && w.key("pathType") {
		w.b = jsontree.AppendString(w.b, string(*p.PathType))
	}
	return w.close()
}

// IngressBackend is where matching requests go: a Service's port. (A
// resource backend goes in Extra["resource"].)
type IngressBackend struct {
	Service *IngressServiceBackend `json:"service,omitempty"`
	Extra   map[string]any         `json:"-"`
}

// AppendJSON appends i's JSON encoding to b.
func (i *IngressBackend) AppendJSON(b []byte) ([]byte, error) {
	w := open(b, i.Extra)
	if i.Service != nil && w.key("service") {
		w.value(i.Service.AppendJSON(w.b))
	}
	return w.close()
}

// IngressServiceBackend is the Service Name, at Port.
type IngressServiceBackend struct {
	Name  string             `json:"name,omitempty"`
	Port  ServiceBackendPort `json:"port,omitzero"`
	Extra map[string]any     `json:"-"`
}

// AppendJSON appends s's JSON encoding to b.
func (s *IngressServiceBackend) AppendJSON(b []byte) ([]byte, error) {
	w := open(b, s.Extra)
	w.str("name", s.Name)
	if w.key("port") {
		w.object(s.Port.AppendJSON(w.b))
	}
	return w.close()
}

// ServiceBackendPort is a Service's port, by Name or by Number (one of
// them).
type ServiceBackendPort struct {
	Name   string         `json:"name,omitempty"`
	Number int32          `json:"number,omitempty"`
	Extra  map[string]any `json:"-"`
}

// AppendJSON appends p's JSON encoding to b.
func (p *ServiceBackendPort) AppendJSON(b []byte) ([]byte, error) {
	w := open(b, p.Extra)
	w.str("name", p.Name)
	w.int32("number", p.Number)
	return w.close()
}
