// Package informer builds the informers of an operator's cache with the
// list and watch behaviour wasmreconcile promises its modules. It plugs into
// controller-runtime through cache.Options.NewInformer and wraps the
// ListerWatcher controller-runtime gives it:
//
//   - Every initial LIST and relist is paginated with Limit and Continue
//     (Options.PageSize, default 500) by client-go's pager, and read from
//     etcd-consistent storage: a LIST at resourceVersion "0" is served from
//     the API server's watch cache, which ignores Limit. An expired continue
//     token makes the pager fall back to a full list; a 410 on the list makes
//     client-go's reflector relist.
//
//   - Every page has its own timeout (Options.ListTimeout, default 60 s), and
//     every watch a client-side timeout a margin beyond the server-side
//     timeout the reflector asks for, so a dead connection cannot stall an
//     informer.
//
//   - WatchList (streaming lists, on by default in client-go from v0.35) is
//     off unless Options.UseWatchList: a streamed list has no pages to
//     bound and count. See RATIONALE.md.
//
//   - Watch restarts keep client-go's reflector backoff (800 ms doubling to
//     30 s, jitter 1.0, reset after 2 min of health).
//
//   - An empty LIST for a kind whose previous list had objects is repeated
//     with backoff (Options.EmptyListVerifications, default 3) before the
//     cache may act on it: an empty answer makes the cache delete every
//     object of the kind, and the host never prunes on such a list.
//
// HTTPClient gives the cache an HTTP client that cuts every object's
// metadata.managedFields out of the JSON the API server sends before it is
// decoded. With it and Options.Packed, unstructured objects are decoded
// from that JSON straight into the packed objects the operator's cache
// keeps, not into maps first.
//
// It also feeds the informer metrics in docs/metrics.md, labelled by kind
// and group ("Widget.examples.wasmreconcile.io"; "ConfigMap" for the core
// group): list pages, objects, duration and expired continues; watch events
// by type; watch restarts by reason; and the time of the last event. That
// time is kept in the Informers' own state (LastEvent), which health checks
// read; the metric reports it and is never read back.
package informer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/pager"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/wasmreconcile/wasmreconcile/host/internal/fieldstrip"
	"github.com/wasmreconcile/wasmreconcile/host/internal/packed"
)

// Options configure the informers. Zero fields take the stated defaults.
type Options struct {
	// PageSize is the Limit of each LIST page. Defaults to 500.
	PageSize int64
	// ListTimeout bounds each LIST page request. Defaults to 60 seconds.
	ListTimeout time.Duration
	// WatchTimeoutMargin is added to the server-side timeout the reflector
	// requests for a watch to form its client-side deadline.
	// Defaults to 30 seconds.
	WatchTimeoutMargin time.Duration
	// UseWatchList lets client-go stream initial lists (WatchList) instead of
	// paginated LISTs, where the API server supports it. Defaults to false.
	UseWatchList bool

	// EmptyListVerifications is how many times an empty LIST is repeated,
	// with backoff, when the previous list of the kind had objects, before
	// the cache may act on it (and so delete every object of the kind from
	// the cache). Defaults to 3.
	EmptyListVerifications int
	// EmptyListBackoff is the first wait before a verification; it doubles
	// each time, up to 5 seconds. Defaults to 100 ms.
	EmptyListBackoff time.Duration

	// Packed keeps the cache's unstructured objects packed (JSON beside
	// typed metadata; see cache.Options.DefaultTransform in operator.New)
	// and decodes lists and watch events straight into packed objects,
	// without decoding them into maps first. It needs the cache's HTTP
	// client from HTTPClient; responses that did not pass through it are
	// decoded by client-go and packed after. It is ignored while
	// KUBE_CACHE_MUTATION_DETECTOR is on. Defaults to false.
	Packed bool

	// Registerer registers the informer metrics. Defaults to
	// controller-runtime's registry (crmetrics.Registry).
	Registerer prometheus.Registerer
	// Scheme names the kinds of typed objects, for metric labels and
	// LastEvent. Defaults to client-go's scheme; unstructured objects carry
	// their kind.
	Scheme *runtime.Scheme
}

// Defaults of Options.
const (
	DefaultPageSize    = 500
	DefaultListTimeout = 60 * time.Second
)

func (o Options) withDefaults() Options {
	if o.PageSize <= 0 {
		o.PageSize = DefaultPageSize
	}
	if o.ListTimeout <= 0 {
		o.ListTimeout = DefaultListTimeout
	}
	if o.WatchTimeoutMargin <= 0 {
		o.WatchTimeoutMargin = 30 * time.Second
	}
	if o.EmptyListVerifications <= 0 {
		o.EmptyListVerifications = 3
	}
	if o.EmptyListBackoff <= 0 {
		o.EmptyListBackoff = 100 * time.Millisecond
	}
	if o.Registerer == nil {
		o.Registerer = crmetrics.Registry
	}
	if o.Scheme == nil {
		o.Scheme = scheme.Scheme
	}
	return o
}

// maxEmptyListBackoff caps the wait between empty-list verifications.
const maxEmptyListBackoff = 5 * time.Second

// Informers builds the informers of a controller-runtime cache and keeps
// what they saw. Create it with New and pass its NewInformer as
// cache.Options.NewInformer. It is safe for concurrent use.
type Informers struct {
	opts    Options
	metrics *Metrics

	mu   sync.Mutex
	last map[schema.GroupKind]time.Time // last watch event or completed list
	errs map[schema.GroupKind]error     // last reflector error since then

	// Sharding (shard.go): nil unless SetSharding was called.
	sharding  *Sharding
	selection selection
	notify    chan struct{}             // closed when an informer watches anew
	lws       map[*listWatcher]struct{} // every informer's, for Resharded
}

// New returns Informers configured by opts, with their metrics registered on
// opts.Registerer.
func New(opts Options) (*Informers, error) {
	opts = opts.withDefaults()
	m, err := NewMetrics(opts.Registerer)
	if err != nil {
		return nil, err
	}
	return &Informers{opts: opts, metrics: m, last: map[schema.GroupKind]time.Time{}, errs: map[schema.GroupKind]error{},
		notify: make(chan struct{}), lws: map[*listWatcher]struct{}{}}, nil
}

// Metrics are the informers' metrics.
func (i *Informers) Metrics() *Metrics { return i.metrics }

// LastEvent is when an informer of gk last received a watch event
// (bookmarks included) or completed a list; zero if never. Now minus it is
// how stale the cache of gk may be.
func (i *Informers) LastEvent(gk schema.GroupKind) time.Time {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.last[gk]
}

// LastError is the last error an informer of gk's reflector reported
// (a list refused as Forbidden, a watch cut), until its next successful
// list or event; nil if none.
func (i *Informers) LastError(gk schema.GroupKind) error {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.errs[gk]
}

func (i *Informers) sawEvent(gk schema.GroupKind, label string) {
	now := time.Now()
	i.mu.Lock()
	i.last[gk] = now
	delete(i.errs, gk)
	i.mu.Unlock()
	i.metrics.LastEvent.WithLabelValues(label).Set(float64(now.UnixNano()) / 1e9)
}

// HTTPClient returns an HTTP client for an operator's cache
// (cache.Options.HTTPClient) that talks to the API server as cfg says and
// cuts metadata.managedFields out of every JSON list, object and watch event
// before client-go decodes it. Guests never see managedFields and a cache
// that strips them (cache.TransformStripManagedFields) drops them anyway,
// but an unstructured object is decoded in full first: for a small custom
// resource, its managedFields made decoding a watch event three times as
// costly (docs/benchmarks.md). Bodies in other encodings (protobuf, CBOR)
// pass as they came; keep the transform for them.
func HTTPClient(cfg *rest.Config) (*http.Client, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(fieldstrip.WrapTransport)
	c, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("the cache's HTTP client: %w", err)
	}
	return c, nil
}

// NewInformer builds one informer; it is a cache.Options.NewInformer.
func (i *Informers) NewInformer(lw toolscache.ListerWatcher, obj runtime.Object, resync time.Duration, indexers toolscache.Indexers) toolscache.SharedIndexInformer {
	gk := i.groupKind(obj)
	w := &listWatcher{inner: toolscache.ToListerWatcherWithContext(lw), opts: i.opts, gk: gk, kind: Label(gk), informers: i, m: i.metrics}
	if u, ok := obj.(*unstructured.Unstructured); ok && i.opts.Packed && packed.Enabled() {
		// The reflector checks every object's type against the
		// informer's example: the packed one.
		w.packed = u.GroupVersionKind()
		example := &packed.Object{}
		example.SetGroupVersionKind(w.packed)
		obj = example
	}
	w.example = obj
	i.mu.Lock()
	if w.sharding = i.sharding; w.sharding != nil {
		i.lws[w] = struct{}{}
	}
	i.mu.Unlock()
	inf := toolscache.NewSharedIndexInformer(w, obj, resync, indexers)
	_ = inf.SetWatchErrorHandlerWithContext(func(ctx context.Context, r *toolscache.Reflector, err error) {
		w.mu.Lock()
		w.lastError = err
		w.mu.Unlock()
		i.mu.Lock()
		i.errs[gk] = err
		i.mu.Unlock()
		toolscache.DefaultWatchErrorHandler(ctx, r, err)
	})
	return inf
}

// Label is how the metrics name a kind: "Kind.group", or "Kind" for the
// core group, as kubectl names resources.
func Label(gk schema.GroupKind) string {
	if gk.Group == "" {
		return gk.Kind
	}
	return gk.Kind + "." + gk.Group
}

func (i *Informers) groupKind(obj runtime.Object) schema.GroupKind {
	if gvk := obj.GetObjectKind().GroupVersionKind(); gvk.Kind != "" {
		return gvk.GroupKind()
	}
	if gvk, err := apiutil.GVKForObject(obj, i.opts.Scheme); err == nil {
		return gvk.GroupKind()
	}
	t := reflect.TypeOf(obj)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return schema.GroupKind{Kind: t.Name()}
}

type listWatcher struct {
	inner     toolscache.ListerWatcherWithContext
	opts      Options
	gk        schema.GroupKind
	kind      string // the metrics' label
	informers *Informers
	m         *Metrics
	packed    schema.GroupVersionKind // set: decode into packed objects

	mu        sync.Mutex
	lastCount int    // objects held: the last list's, plus watch adds, minus deletes
	watches   int    // watches opened so far
	lastEnd   string // how the previous watch ended: a restart reason
	lastError error  // the last error the reflector reported

	// Sharding (shard.go).
	sharding   *Sharding // the Informers' when the informer was built; nil: off
	shardOnce  sync.Once
	sharded    bool              // the kind lists and watches with the selector
	listed     selection         // the selection the last list used
	watchedGen uint64            // the selection of the open watch
	runCtx     context.Context   // the reflector's, from its last call
	keys       map[string]string // key to resourceVersion of the objects the informer holds (sharded kinds)
	example    runtime.Object    // the informer's example object
}

// countObjects counts objects a watch added (+1) or deleted (-1).
func (w *listWatcher) countObjects(d int) {
	w.mu.Lock()
	w.lastCount += d
	w.mu.Unlock()
	w.m.Objects.WithLabelValues(w.kind).Add(float64(d))
}

func (w *listWatcher) setEnd(reason string) {
	w.mu.Lock()
	w.lastEnd = reason
	w.mu.Unlock()
}

var _ toolscache.ListerWatcherWithContext = (*listWatcher)(nil)

// IsWatchListSemanticsUnSupported tells client-go's reflector whether it may
// stream lists (see k8s.io/client-go/util/watchlist).
func (w *listWatcher) IsWatchListSemanticsUnSupported() bool { return !w.opts.UseWatchList }

func (w *listWatcher) List(opts metav1.ListOptions) (runtime.Object, error) {
	return w.ListWithContext(context.Background(), opts)
}

func (w *listWatcher) Watch(opts metav1.ListOptions) (watch.Interface, error) {
	return w.WatchWithContext(context.Background(), opts)
}

// ListWithContext lists in pages of Options.PageSize and returns the whole
// list. The reflector's own pager asks with its own Limit, often at
// resourceVersion "0", where the watch cache would ignore it; every first
// page request is therefore paginated here, and the reflector receives one
// complete list with no continue token.
func (w *listWatcher) ListWithContext(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	if opts.Continue != "" {
		return w.page(ctx, opts) // never issued by us; pass through
	}
	resharded := w.selectForList(ctx, &opts)
	opts.Limit = 0
	if opts.ResourceVersionMatch != metav1.ResourceVersionMatchExact {
		// Every list here is paginated, and that changes what a
		// resourceVersion means:
		//   - at "0" the watch cache ignores Limit;
		//   - at "X" with no resourceVersionMatch a paginated list is
		//     served at exactly X, from etcd, however old X is.
		// The reflector relists at its last seen resourceVersion after a
		// watch fails with "too old resource version", counting on
		// not-older-than semantics. Served exactly, that list returns the
		// stale state again and the next watch from X is too old again: after
		// a kube-apiserver restart (a fresh watch cache) the informer would
		// loop on stale data forever. A consistent read ("") is never older
		// than anything asked for, so it honours every request but Exact.
		opts.ResourceVersion, opts.ResourceVersionMatch = "", ""
	}
	list, err := w.fullList(ctx, opts)
	if err != nil {
		return nil, err
	}
	w.mu.Lock()
	had := w.lastCount
	w.mu.Unlock()
	if resharded {
		had = 0 // a share that changed may well be empty
	}
	if meta.LenList(list) == 0 && had > 0 {
		// A kind that had objects now lists empty: a truncated or wrong
		// answer would make the cache delete them all. Ask again first.
		wait := w.opts.EmptyListBackoff
		for i := 0; i < w.opts.EmptyListVerifications && meta.LenList(list) == 0; i++ {
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(wait):
			}
			wait = min(2*wait, maxEmptyListBackoff)
			if list, err = w.fullList(ctx, opts); err != nil {
				return nil, err
			}
		}
		outcome := "confirmed"
		if meta.LenList(list) > 0 {
			outcome = "refuted"
		}
		w.m.EmptyListVerifications.WithLabelValues(w.kind, outcome).Inc()
	}
	w.mu.Lock()
	prev := w.lastCount
	w.lastCount = meta.LenList(list)
	w.m.Objects.WithLabelValues(w.kind).Add(float64(w.lastCount - prev))
	w.mu.Unlock()
	if w.isSharded() {
		keys, err := listKeys(list)
		if err != nil {
			return nil, err
		}
		w.mu.Lock()
		w.keys = keys
		w.mu.Unlock()
	}
	w.informers.sawEvent(w.gk, w.kind) // a list is as fresh as an event
	return list, nil
}

// fullList runs one paginated list.
func (w *listWatcher) fullList(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	start := time.Now()
	p := pager.New(w.page)
	p.PageSize = w.opts.PageSize
	list, _, err := p.ListWithAlloc(ctx, opts)
	w.m.ListDuration.WithLabelValues(w.kind).Observe(time.Since(start).Seconds())
	return list, err
}

// page fetches one page under ListTimeout and counts it.
func (w *listWatcher) page(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	ctx, cancel := context.WithTimeout(ctx, w.opts.ListTimeout)
	defer cancel()
	list, err := w.list(ctx, opts)
	if err != nil {
		if apierrors.IsResourceExpired(err) && opts.Continue != "" {
			w.m.ListExpired.WithLabelValues(w.kind).Inc() // the pager now lists in full
		}
		return nil, err
	}
	w.m.ListPages.WithLabelValues(w.kind).Inc()
	w.m.ListObjects.WithLabelValues(w.kind).Add(float64(meta.LenList(list)))
	return list, nil
}

// WatchWithContext opens a watch with a client-side deadline and counts its
// events; opening a watch after the first is a restart, labelled with how
// the previous one ended.
func (w *listWatcher) WatchWithContext(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	changed, err := w.selectForWatch(ctx, &opts)
	if err != nil {
		w.setEnd("resharded")
		return nil, err
	}
	w.mu.Lock()
	if w.watches > 0 {
		reason := w.lastEnd
		if w.lastError != nil {
			reason = restartReason(w.lastError)
			w.lastError = nil
		}
		if reason == "" {
			reason = "error"
		}
		w.m.WatchRestarts.WithLabelValues(w.kind, reason).Inc()
	}
	w.watches++
	w.lastEnd = ""
	w.mu.Unlock()
	var cancel context.CancelFunc = func() {}
	var serverTimeout time.Duration
	if opts.TimeoutSeconds != nil && *opts.TimeoutSeconds > 0 {
		serverTimeout = time.Duration(*opts.TimeoutSeconds) * time.Second
		ctx, cancel = context.WithTimeout(ctx, serverTimeout+w.opts.WatchTimeoutMargin)
	}
	inner, err := w.watch(ctx, opts)
	if err != nil {
		cancel()
		w.setEnd(restartReason(err))
		return nil, err
	}
	w.watchOpened()
	return newCountingWatch(w, inner, cancel, serverTimeout, changed, ctx, opts), nil
}

// emptyList is what client-go decodes in place of a diverted list.
var emptyList = []byte(`{"apiVersion":"v1","kind":"List","metadata":{},"items":[]}`)

// list lists one page; a packed kind's comes as a *packed.List decoded
// from the response's JSON.
func (w *listWatcher) list(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	if w.packed.Empty() {
		return w.inner.ListWithContext(ctx, opts)
	}
	ctx, d := fieldstrip.Divert(ctx, emptyList)
	list, err := w.inner.ListWithContext(ctx, opts)
	values := d.Values()
	if values == nil {
		if err != nil {
			return nil, err
		}
		return packList(list)
	}
	defer values.Close()
	if err != nil {
		return nil, err
	}
	body, err := values.Next()
	if err != nil {
		return nil, fmt.Errorf("reading a list of %s: %w", w.kind, err)
	}
	return packed.DecodeList(body)
}

// watch opens a watch; a packed kind's events come with *packed.Object
// objects decoded from the stream's JSON.
func (w *listWatcher) watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	if w.packed.Empty() {
		return w.inner.WatchWithContext(ctx, opts)
	}
	ctx, d := fieldstrip.Divert(ctx, nil)
	inner, err := w.inner.WatchWithContext(ctx, opts)
	values := d.Values()
	if values == nil {
		if err != nil {
			return nil, err
		}
		return watch.Filter(inner, packEvent), nil
	}
	if err != nil {
		_ = values.Close()
		return nil, err
	}
	inner.Stop() // it read the empty placeholder
	// As client-go's REST client reports a watch event it cannot decode.
	reporter := apierrors.NewClientErrorReporter(http.StatusInternalServerError, http.MethodGet, "ClientWatchDecoding")
	return watch.NewStreamWatcher(packed.NewWatchDecoder(values, w.packed), reporter), nil
}

// packList packs a list client-go decoded.
func packList(list runtime.Object) (runtime.Object, error) {
	ul, ok := list.(*unstructured.UnstructuredList)
	if !ok {
		return list, nil
	}
	out := &packed.List{TypeMeta: metav1.TypeMeta{APIVersion: ul.GetAPIVersion(), Kind: ul.GetKind()}}
	out.ResourceVersion, out.Continue = ul.GetResourceVersion(), ul.GetContinue()
	out.RemainingItemCount = ul.GetRemainingItemCount()
	for i := range ul.Items {
		o, err := packed.Pack(&ul.Items[i])
		if err != nil {
			return nil, err
		}
		out.Items = append(out.Items, o)
	}
	return out, nil
}

// packEvent packs the object of an event client-go decoded.
func packEvent(ev watch.Event) (watch.Event, bool) {
	u, ok := ev.Object.(*unstructured.Unstructured)
	if !ok || ev.Type == watch.Error {
		return ev, true
	}
	o, err := packed.Pack(u)
	if err != nil {
		return watch.Event{Type: watch.Error, Object: &apierrors.NewInternalError(err).ErrStatus}, true
	}
	return watch.Event{Type: ev.Type, Object: o}, true
}

// restartReason classifies why a watch or list failed.
func restartReason(err error) string {
	switch {
	case strings.Contains(err.Error(), errResharded.Error()):
		return "resharded"
	case apierrors.IsResourceExpired(err) || apierrors.IsGone(err):
		return "gone"
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		return "eof"
	case errors.Is(err, context.DeadlineExceeded) || apierrors.IsTimeout(err) || apierrors.IsServerTimeout(err):
		return "timeout"
	}
	return "error"
}

// countingWatch forwards a watch's events, counting them by type and noting
// how the watch ended. For a sharded kind it also follows the shard
// selection (reshard).
type countingWatch struct {
	mu     sync.Mutex
	inner  watch.Interface
	out    chan watch.Event
	cancel context.CancelFunc
	stop   chan struct{}
}

func newCountingWatch(w *listWatcher, inner watch.Interface, cancel context.CancelFunc, serverTimeout time.Duration, resharded <-chan struct{}, ctx context.Context, opts metav1.ListOptions) *countingWatch {
	c := &countingWatch{inner: inner, out: make(chan watch.Event), cancel: cancel, stop: make(chan struct{})}
	started := time.Now()
	go func() {
		defer close(c.out)
		defer cancel()
		for {
			select {
			case ev, ok := <-inner.ResultChan():
				if !ok {
					// The stream closed: a server-side timeout if it ran its
					// course, otherwise the connection ended early.
					if serverTimeout > 0 && time.Since(started) >= serverTimeout-time.Second {
						w.setEnd("timeout")
					} else {
						w.setEnd("eof")
					}
					return
				}
				w.m.EventsReceived.WithLabelValues(w.kind, string(ev.Type)).Inc()
				switch ev.Type {
				case watch.Added:
					w.countObjects(1)
				case watch.Deleted:
					w.countObjects(-1)
				}
				w.track(ev)
				w.informers.sawEvent(w.gk, w.kind)
				if ev.Type == watch.Error {
					if st, ok := ev.Object.(*metav1.Status); ok && st.Code == 410 {
						w.setEnd("gone")
					} else {
						w.setEnd("error")
					}
				}
				select {
				case c.out <- ev:
				case <-c.stop:
					return
				}
			case <-resharded:
				// The shard selection changed: list the new share and
				// tell the reflector the difference, then watch on.
				next, changed, err := c.reshard(ctx, w, opts)
				if errors.Is(err, errStopped) {
					return
				}
				if err == nil {
					inner, resharded = next, changed
					continue
				}
				// Else end as expired, so that the reflector lists with
				// the new selector itself.
				w.setEnd("resharded")
				st := reshardedError().(apierrors.APIStatus).Status()
				select {
				case c.out <- watch.Event{Type: watch.Error, Object: &st}:
				case <-c.stop:
				}
				return
			case <-c.stop:
				return
			}
		}
	}()
	return c
}

func (c *countingWatch) ResultChan() <-chan watch.Event { return c.out }

func (c *countingWatch) Stop() {
	select {
	case <-c.stop:
	default:
		close(c.stop)
	}
	c.mu.Lock()
	c.inner.Stop()
	c.mu.Unlock()
	c.cancel()
}
