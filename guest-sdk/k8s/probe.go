package k8s

// Probe checks a container: the kubelet runs one of Exec, HTTPGet,
// TCPSocket or GRPC every PeriodSeconds (the API's default 10), after
// InitialDelaySeconds; FailureThreshold failures in a row (default 3) fail
// it. (k8s.io/api's ProbeHandler is inlined: its actions are here
// directly.)
type Probe struct {
	Exec                          *ExecAction      `json:"exec,omitempty"`
	HTTPGet                       *HTTPGetAction   `json:"httpGet,omitempty"`
	TCPSocket                     *TCPSocketAction `json:"tcpSocket,omitempty"`
	GRPC                          *GRPCAction      `json:"grpc,omitempty"`
	InitialDelaySeconds           int32            `json:"initialDelaySeconds,omitempty"`
	TimeoutSeconds                int32            `json:"timeoutSeconds,omitempty"`
	PeriodSeconds                 int32            `json:"periodSeconds,omitempty"`
	SuccessThreshold              int32            `json:"successThreshold,omitempty"`
	FailureThreshold              int32            `json:"failureThreshold,omitempty"`
	TerminationGracePeriodSeconds *int64           `json:"terminationGracePeriodSeconds,omitempty"`
	Extra                         map[string]any   `json:"-"`
}

// AppendJSON appends p's JSON encoding to b.
func (p *Probe) AppendJSON(b []byte) ([]byte, error) {
	w := open(b, p.Extra)
	if p.Exec != nil && w.key("exec") {
		w.value(p.Exec.AppendJSON(w.b))
	}
	w.int32("failureThreshold", p.FailureThreshold)
	if p.GRPC != nil && w.key("grpc") {
		w.value(p.GRPC.AppendJSON(w.b))
	}
	if p.HTTPGet != nil && w.key("httpGet") {
		w.value(p.HTTPGet.AppendJSON(w.b))
	}
	w.int32("initialDelaySeconds", p.InitialDelaySeconds)
	w.int32("periodSeconds", p.PeriodSeconds)
	w.int32("successThreshold", p.SuccessThreshold)
	if p.TCPSocket != nil && w.key("tcpSocket") {
		w.value(p.TCPSocket.AppendJSON(w.b))
	}
	w.int64Ptr("terminationGracePeriodSeconds", p.TerminationGracePeriodSeconds)
	w.int32("timeoutSeconds", p.TimeoutSeconds)
	return w.close()
}

// ExecAction runs Command in the container; exit status 0 is healthy.
type ExecAction struct {
	Command []string       `json:"command,omitempty"`
	Extra   map[string]any `json:"-"`
}

// AppendJSON appends a's JSON encoding to b.
func (a *ExecAction) AppendJSON(b []byte) ([]byte, error) {
	w := open(b, a.Extra)
	w.strs("command", a.Command)
	return w.close()
}

// URIScheme is the scheme of an HTTP probe; the API's default is HTTP.
type URIScheme string

// The schemes of an HTTP probe.
const (
	URISchemeHTTP  URIScheme = "HTTP"
	URISchemeHTTPS URIScheme = "HTTPS"
)

// HTTPGetAction GETs Path on Port (a number, or a container port's name);
// a status from 200 to 399 is healthy.
type HTTPGetAction struct {
	Path        string         `json:"path,omitempty"`
	Port        IntOrString    `json:"port,omitzero"`
	Host        string         `json:"host,omitempty"`
	Scheme      URIScheme      `json:"scheme,omitempty"`
	HTTPHeaders []HTTPHeader   `json:"httpHeaders,omitempty"`
	Extra       map[string]any `json:"-"`
}

// AppendJSON appends a's JSON encoding to b.
func (a *HTTPGetAction) AppendJSON(b []byte) ([]byte, error) {
	w := open(b, a.Extra)
	w.str("host", a.Host)
	list(&w, "httpHeaders", a.HTTPHeaders)
	w.str("path", a.Path)
	w.intOrString("port", a.Port)
	w.str("scheme", string(a.Scheme))
	return w.close()
}

// HTTPHeader is a header an HTTP probe sends.
type HTTPHeader struct {
	Name  string         `json:"name,omitempty"`
	Value string         `json:"value,omitempty"`
	Extra map[string]any `json:"-"`
}

// AppendJSON appends h's JSON encoding to b.
func (h *HTTPHeader) AppendJSON(b []byte) ([]byte, error) {
	w := open(b, h.Extra)
	w.str("name", h.Name)
	w.str("value", h.Value)
	return w.close()
}

// TCPSocketAction opens a connection to Port; an open is healthy.
type TCPSocketAction struct {
	Port  IntOrString    `json:"port,omitzero"`
	Host  string         `json:"host,omitempty"`
	Extra map[string]any `json:"-"`
}

// AppendJSON appends a's JSON encoding to b.
func (a *TCPSocketAction) AppendJSON(b []byte) ([]byte, error) {
	w := open(b, a.Extra)
	w.str("host", a.Host)
	w.intOrString("port", a.Port)
	return w.close()
}

// GRPCAction calls the gRPC health service on Port, for Service ("" is
// the server's overall health).
type GRPCAction struct {
	Port    int32          `json:"port,omitempty"`
	Service *string        `json:"service,omitempty"`
	Extra   map[string]any `json:"-"`
}

// AppendJSON appends a's JSON encoding to b.
func (a *GRPCAction) AppendJSON(b []byte) ([]byte, error) {
	w := open(b, a.Extra)
	w.int32("port", a.Port)
	w.strPtr("service", a.Service)
	return w.close()
}

// SecurityContext is a container's: the user it runs as and what it may
// do. Restricted pods (Pod Security Standards) need RunAsNonRoot,
// AllowPrivilegeEscalation false and Capabilities dropping "ALL".
type SecurityContext struct {
	RunAsUser                *int64         `json:"runAsUser,omitempty"`
	RunAsGroup               *int64         `json:"runAsGroup,omitempty"`
	RunAsNonRoot             *bool          `json:"runAsNonRoot,omitempty"`
	ReadOnlyRootFilesystem   *bool          `json:"readOnlyRootFilesystem,omitempty"`
	AllowPrivilegeEscalation *bool          `json:"allowPrivilegeEscalation,omitempty"`
	Privileged               *bool          `json:"privileged,omitempty"`
	Capabilities             *Capabilities  `json:"capabilities,omitempty"`
	Extra                    map[string]any `json:"-"`
}

// AppendJSON appends s's JSON encoding to b.
func (s *SecurityContext) AppendJSON(b []byte) ([]byte, error) {
	w := open(b, s.Extra)
	w.boolPtr("allowPrivilegeEscalation", s.AllowPrivilegeEscalation)
	if s.Capabilities != nil && w.key("capabilities") {
		w.value(s.Capabilities.AppendJSON(w.b))
	}
	w.boolPtr("privileged", s.Privileged)
	w.boolPtr("readOnlyRootFilesystem", s.ReadOnlyRootFilesystem)
	w.int64Ptr("runAsGroup", s.RunAsGroup)
	w.boolPtr("runAsNonRoot", s.RunAsNonRoot)
	w.int64Ptr("runAsUser", s.RunAsUser)
	return w.close()
}

// Capabilities are Linux capabilities added to and dropped from a
// container's, such as "NET_BIND_SERVICE" and "ALL".
type Capabilities struct {
	Add   []string       `json:"add,omitempty"`
	Drop  []string       `json:"drop,omitempty"`
	Extra map[string]any `json:"-"`
}

// AppendJSON appends c's JSON encoding to b.
func (c *Capabilities) AppendJSON(b []byte) ([]byte, error) {
	w := open(b, c.Extra)
	w.strs("add", c.Add)
	w.strs("drop", c.Drop)
	return w.close()
}
