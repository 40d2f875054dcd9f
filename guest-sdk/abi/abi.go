// Package abi holds the names, numbers and wire types of the wasmreconcile
// guest ABI. It mirrors docs/abi.md, which is the contract. This file is the
// source: the guest SDK imports it, and `make generate` copies it verbatim
// into the host module (host/abi), so that the host needs no dependency on
// the SDK's module and the two cannot drift apart (`make lint` fails on a
// stale copy). It has no dependencies and builds for every GOOS, including
// wasip1.
//
// # Calling convention
//
// The host writes a request into guest memory obtained from [ExportAlloc], then
// calls [ExportReconcile] with (ptr, len). The guest returns a [PackedBuffer]:
// the pointer in the high 32 bits and the length in the low 32 bits of an i64.
// Both buffers hold JSON documents ([Request], [Response]).
package abi

// Version is the ABI version this package describes. A module declares the
// version it was built for by exporting the marker function named by
// [ExportVersionMarker]; the host refuses modules that declare none, or one it
// does not know.
const Version = "v1"

// Export names that a guest module must provide.
const (
	// ExportVersionMarker is an exported function with no parameters and no
	// results. Its presence declares ABI v1. It is never called.
	//
	//	(export "wr_abi_v1" (func))
	ExportVersionMarker = "wr_abi_v1"

	// ExportInitialize is the WASI reactor initializer. The host calls it once,
	// right after instantiation, before any other export.
	//
	//	(export "_initialize" (func))
	ExportInitialize = "_initialize"

	// ExportMemory is the guest's linear memory.
	ExportMemory = "memory"

	// ExportAlloc returns a pointer to size bytes of guest memory that stay
	// valid until the next call into the guest.
	//
	//	(export "wr_alloc" (func (param $size i32) (result (;ptr;) i32)))
	ExportAlloc = "wr_alloc"

	// ExportManifest returns the module's Manifest as JSON, packed as a
	// PackedBuffer.
	//
	//	(export "wr_manifest" (func (result (;packed;) i64)))
	ExportManifest = "wr_manifest"

	// ExportReconcile takes a Request as JSON and returns a Response as JSON,
	// packed as a PackedBuffer.
	//
	//	(export "wr_reconcile" (func (param $ptr i32) (param $len i32) (result (;packed;) i64)))
	ExportReconcile = "wr_reconcile"
)

// ImportModule is the module name of every host function.
const ImportModule = "wasmreconcile"

// Host function names, imported from [ImportModule].
const (
	// ImportLog writes one log line at the given level.
	//
	//	(import "wasmreconcile" "log" (func (param $level i32) (param $ptr i32) (param $len i32)))
	ImportLog = "log"

	// ImportCacheRead reads objects from the host's cache. The request at
	// [req_ptr, req_ptr+req_len) is a CacheRequest as JSON. The result is
	// packed as status<<32 | length: the host writes the result to
	// [buf, buf+length) only when length <= buf_limit; otherwise it writes
	// nothing and the guest calls again with a buffer of at least length
	// bytes. For CacheOK the result is the object (get) or a JSON array of
	// objects (list); for any other status it is a UTF-8 message.
	//
	//	(import "wasmreconcile" "cache_read" (func (param $req_ptr i32) (param $req_len i32) (param $buf i32) (param $buf_limit i32) (result i64)))
	ImportCacheRead = "cache_read"
)

// CacheRequest is the request of ImportCacheRead.
type CacheRequest struct {
	// Op is "get" or "list".
	Op         string `json:"op"`
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	// Namespace of the object (get) or to list in; "" lists across all
	// namespaces, and names a cluster-scoped object.
	Namespace string `json:"namespace,omitempty"`
	// Name of the object; get only.
	Name string `json:"name,omitempty"`
	// LabelSelector filters a list, in kubectl's syntax (e.g. "app=web,tier!=db").
	LabelSelector string `json:"labelSelector,omitempty"`
}

// CacheStatus is the status half of ImportCacheRead's result.
type CacheStatus uint32

// Cache statuses.
const (
	CacheOK          CacheStatus = 0 // the result holds the object or the list
	CacheNotFound    CacheStatus = 1 // get: no such object
	CacheForbidden   CacheStatus = 2 // the kind is not declared in For, Owns or Reads
	CacheBadRequest  CacheStatus = 3 // malformed request or selector
	CacheUnavailable CacheStatus = 4 // the host has no cache for this call
	CacheError       CacheStatus = 5 // the read failed; the message says why
)

// LogLevel is the level argument of [ImportLog].
type LogLevel int32

// Log levels. Unknown levels are logged as LogLevelInfo.
const (
	LogLevelDebug LogLevel = 0
	LogLevelInfo  LogLevel = 1
	LogLevelWarn  LogLevel = 2
	LogLevelError LogLevel = 3
)

// PackedBuffer is a guest pointer and a length packed into one i64:
// ptr<<32 | len. A zero PackedBuffer means "no output".
type PackedBuffer uint64

// Pack packs ptr and length into a PackedBuffer.
func Pack(ptr, length uint32) PackedBuffer { return PackedBuffer(uint64(ptr)<<32 | uint64(length)) }

// Ptr is the guest pointer of b.
func (b PackedBuffer) Ptr() uint32 { return uint32(b >> 32) }

// Len is the length in bytes of b.
func (b PackedBuffer) Len() uint32 { return uint32(b) }

// GroupVersionKind names a Kubernetes kind.
type GroupVersionKind struct {
	Group   string `json:"group"`
	Version string `json:"version"`
	Kind    string `json:"kind"`
}

// Manifest describes a module to the host. The host reads it once at load time
// and validates it before the module may reconcile anything.
type Manifest struct {
	// Name is the module's name, used in logs, metrics, Events and as the
	// server-side apply field manager. Required: lower-case DNS label.
	Name string `json:"name"`
	// For is the kind the module reconciles. Required.
	For GroupVersionKind `json:"for"`
	// Owns are the kinds of the children the module creates. The host
	// watches them, passes the observed ones in Request.Children, applies
	// Response.Children of these kinds and prunes the ones no longer
	// desired. A child of any other kind is refused.
	Owns []GroupVersionKind `json:"owns,omitempty"`
	// Reads are the kinds, beyond For and Owns, the module may read through
	// the host's cache; anything else is refused.
	Reads []GroupVersionKind `json:"reads,omitempty"`
	// Triggers say which reconciled objects the host calls again when an
	// object of a Reads kind is created, changed or deleted. Without a
	// trigger, a change to a read object calls no one: the module sees it
	// at the object's next reconcile only.
	Triggers []Trigger `json:"triggers,omitempty"`
	// Finalizer, when true, makes the host add a finalizer to every object
	// and call the module with Request.Finalizing set when the object is
	// deleted, until it answers Response.Finalized.
	Finalizer bool `json:"finalizer,omitempty"`
	// Limits are the module's own limits: each may ask for less than the
	// operator allows (its setting, else the host's default), never more; a
	// value over the allowance is lowered to it, and reported.
	Limits *ManifestLimits `json:"limits,omitempty"`
}

// Trigger maps a change to an object of one Reads kind (the related
// object) to the reconciled objects, of the For kind, that the host
// reconciles again. Exactly one of OwnerReference, Field, Selector and All
// is set. A reconcile a trigger causes is an ordinary reconcile: the guest
// reads the related object through cache_read as always.
type Trigger struct {
	// Kind is the related kind. It must be listed in Reads.
	Kind GroupVersionKind `json:"kind"`
	// OwnerReference, when true, reconciles the objects of the For kind
	// that the related object names in its metadata.ownerReferences
	// (any owner reference, not only the controller).
	OwnerReference bool `json:"ownerReference,omitempty"`
	// Field is a dot-separated path into the reconciled object, such as
	// "spec.target", that names related objects: a string, or a list of
	// strings. The host indexes the reconciled objects by it, and a change
	// to a related object reconciles the objects whose field holds its
	// name, in its namespace (any namespace for a cluster-scoped related
	// kind).
	Field string `json:"field,omitempty"`
	// Selector is a dot-separated path into the reconciled object, such as
	// "spec.selector", holding a label selector: either a
	// metav1.LabelSelector ({matchLabels, matchExpressions}) or a plain map
	// of labels as in a Service's spec.selector. A change to a related
	// object reconciles the objects in its namespace whose selector
	// matches its labels (old or new). A missing or empty selector matches
	// nothing.
	Selector string `json:"selector,omitempty"`
	// All, when true, reconciles every object of the For kind in the
	// related object's namespace, or in every namespace for a
	// cluster-scoped related kind. It suits small kinds only.
	All bool `json:"all,omitempty"`
}

// ManifestLimits are a module's own limits, at most what the operator
// allows; zero fields are unset.
type ManifestLimits struct {
	// Fuel is the fuel budget of one reconcile call.
	Fuel uint64 `json:"fuel,omitempty"`
	// TimeoutMillis is the wall-clock limit of one reconcile call.
	TimeoutMillis int64 `json:"timeoutMillis,omitempty"`
	// MemoryPages caps linear memory, in 64 KiB pages.
	MemoryPages uint32 `json:"memoryPages,omitempty"`
}

// Request is what the host passes to ExportReconcile.
type Request struct {
	// Object is the object to reconcile, as the API server returned it.
	Object map[string]any `json:"object"`
	// Children are the observed objects of the Manifest.Owns kinds that the
	// object owns (by controller owner reference).
	Children []map[string]any `json:"children,omitempty"`
	// Related are other objects the host passes along: in this version,
	// those given offline (`operator invoke --related`, a case's
	// input.related), which also serve the guest's cache_read. In a
	// cluster it is empty: read related objects with cache_read.
	Related []map[string]any `json:"related,omitempty"`
	// Finalizing is true when the object is being deleted and the module
	// declared a finalizer. The module cleans up and answers Finalized.
	Finalizing bool `json:"finalizing,omitempty"`
	// Config is the module's configuration, as given by the operator.
	Config map[string]any `json:"config,omitempty"`
	// Attempt counts consecutive calls for this object that ended in an error;
	// it is 0 on the first try after a success.
	Attempt int `json:"attempt"`
	// Now is the host's wall clock in RFC 3339, truncated to seconds. Guests
	// have no clock of their own; use Now for timestamps such as a condition's
	// lastTransitionTime.
	Now string `json:"now"`
	// ChildFailures are the desired children the host could not write in
	// the previous reconcile of this object: a name already taken by an
	// object this module did not create (ChildFailureConflict), or a write
	// the API server refused (Invalid, Forbidden, ...). The host never
	// writes a status computed without knowledge of a child's failure: when
	// a child fails and the response was not computed from a request that
	// listed that failure, the status is not written and the guest is
	// called again at once, with the failure here. Empty when every child
	// was written.
	ChildFailures []ChildFailure `json:"childFailures,omitempty"`
}

// ChildFailure is a desired child the host could not write.
type ChildFailure struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	// Namespace is "" for a cluster-scoped child.
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
	// Reason is ChildFailureConflict, or the API server's reason for
	// refusing the write (Invalid, Forbidden, ...).
	Reason string `json:"reason"`
	// Message says what happened, with the API server's message.
	Message string `json:"message"`
}

// ChildFailureConflict is the ChildFailure.Reason of a desired child whose
// name is taken by an object this module did not create: the host never
// adopts, overwrites or deletes such an object. Rename the child, or have
// the object removed.
const ChildFailureConflict = "Conflict"

// Response is what a guest returns from ExportReconcile.
type Response struct {
	// Status, when non-nil, is the desired .status of the object. The host
	// writes it through the status subresource, and only when it differs from
	// the observed status. A nil Status leaves the status alone.
	Status map[string]any `json:"status,omitempty"`
	// Events are recorded on the object.
	Events []Event `json:"events,omitempty"`
	// RequeueAfterSeconds, when > 0, asks the host to reconcile the object
	// again after that many seconds even if nothing changes.
	RequeueAfterSeconds int64 `json:"requeueAfterSeconds,omitempty"`
	// Error, when non-nil, reports that reconciliation failed. The host applies
	// Status anyway (so guests can surface the failure in a condition), records
	// a Warning Event, and retries with backoff unless Error.Terminal is set.
	Error *Error `json:"error,omitempty"`
	// Children are the desired children, of the Manifest.Owns kinds, or nil
	// to leave the children as they are. When non-nil (an empty list
	// included), the host creates the desired children that do not exist,
	// updates the ones that differ with server-side apply (field manager =
	// module name), marks each with the label wasmreconcile.io/module and
	// the object as its controller, and deletes the observed children that
	// are no longer desired. A name taken by an object the module did not
	// create is never written (see ChildFailures). Absent or null: children
	// are left alone; []: every child is deleted.
	Children []map[string]any `json:"children,omitzero"`
	// Finalized, in answer to a Finalizing request, lets the host remove
	// the finalizer so that deletion proceeds.
	Finalized bool `json:"finalized,omitempty"`
}

// EventType is the type of a Kubernetes Event.
type EventType string

// Event types.
const (
	EventNormal  EventType = "Normal"
	EventWarning EventType = "Warning"
)

// Event is a Kubernetes Event a guest asks the host to record on the object.
type Event struct {
	Type    EventType `json:"type"`
	Reason  string    `json:"reason"`
	Message string    `json:"message"`
}

// Error is a reconcile failure reported by the guest.
type Error struct {
	// Message says what went wrong and, ideally, what to do about it.
	Message string `json:"message"`
	// Terminal errors are not retried until the object changes.
	Terminal bool `json:"terminal,omitempty"`
}
