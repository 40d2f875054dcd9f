// Package membership keeps this replica's Lease in its group and tells
// which replicas of the group are live and which shard slots each claims
// (issue 27).
//
// Each replica holds one coordination.k8s.io Lease of its own, named
// GROUP-IDENTITY and labelled LabelGroup=GROUP, and renews it every
// RetryPeriod. The live Leases of a group are its members. A replica's
// Lease also carries its claims (AnnotationClaims): the slots it may be
// working on, and the assignment generation it claimed them under. A
// replica starts the work of a slot only after a renewal carrying its claim
// has been written (Claim returns) and no other live member claims the
// slot; it drops a claim only after its work on the slot has stopped. So
// two replicas never work on one slot at once:
//
//   - a replica that leaves gracefully writes its Lease released (no holder,
//     no claims) and its slots are free at once;
//   - a replica that cannot renew for RenewDeadline stops all work
//     (Options.OnLost); the others count its Lease live for LeaseDuration
//     after they last saw it change, which is later than its last renewal,
//     so they take its slots only after it has stopped, as long as
//     RenewDeadline, plus the time its work takes to stop, is under
//     LeaseDuration;
//   - a Lease whose claims cannot be read claims every slot.
//
// Liveness is judged by each observer's own clock from when it saw a
// Lease change, as client-go's leader election does, so clocks need not
// agree. The Leases are listed every RetryPeriod, with the renewal.
package membership

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/utils/ptr"

	"github.com/wasmreconcile/wasmreconcile/host/internal/shard"
)

const (
	// LabelGroup names the group of a member's Lease.
	LabelGroup = "wasmreconcile.io/shard-group"
	// AnnotationClaims holds a member's claims: "g=GENERATION;s=SLOTS",
	// SLOTS a comma-separated list of slots and ranges of slots (0-12,40).
	AnnotationClaims = "wasmreconcile.io/shard-claims"

	// DefaultLeaseDuration is how long the others count a member live
	// after they last saw its Lease change.
	DefaultLeaseDuration = 15 * time.Second
	// DefaultRenewDeadline is how long a member keeps failing to renew
	// before it stops all work.
	DefaultRenewDeadline = 10 * time.Second
	// DefaultRetryPeriod is how often a member renews its Lease and lists
	// the group's.
	DefaultRetryPeriod = 2 * time.Second
)

// Options configure a Membership. Client, Namespace, Group and Identity
// are required.
type Options struct {
	// Client reads and writes Leases.
	Client coordinationv1client.LeasesGetter
	// Namespace holds the group's Leases (the operator's own).
	Namespace string
	// Group is the label value that makes Leases one group; GROUP-IDENTITY
	// must be a DNS subdomain name.
	Group string
	// Identity is this replica's name in the group (its pod's name).
	Identity string
	// LeaseDuration, RenewDeadline and RetryPeriod: the defaults above;
	// RetryPeriod < RenewDeadline < LeaseDuration.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// OnChange, when set, is called with the view each time the live
	// members or their claims change, one call at a time.
	OnChange func(View)
	// OnLost, when set, is called once when this replica's Lease could not
	// be renewed for RenewDeadline, or another process renewed it: stop
	// all work at once, since the others may take its slots LeaseDuration
	// after its last renewal. Run then returns the same error.
	OnLost func(error)
	// Annotations, when set, are written into this replica's Lease with
	// every renewal (each key under wasmreconcile.io/, beside
	// AnnotationClaims): what the replica publishes to the others, such
	// as its shadow comparison counts. A key it stops returning is
	// removed.
	Annotations func() map[string]string
	// PeerAnnotations name the annotations Peers reads from the other
	// live members' Leases. Default: none.
	PeerAnnotations []string
	// KeptAnnotations name the annotations Kept reads from every Lease of
	// the group, live or not (a released Lease keeps its annotations but
	// its claims): what outlives the replicas, such as the balancing
	// plan across a restart of them all. Default: none.
	KeptAnnotations []string
	// now is the clock, for tests; time.Now by default.
	now func() time.Time
}

// Claims are the slots a member may be working on, and the generation of
// the assignment it claimed them under.
type Claims struct {
	Generation int64
	Slots      []int // ascending, distinct
}

// Member is a live member of the group.
type Member struct {
	Identity string
	Claims   Claims
	// All is true when the member's claims could not be read: it is taken
	// to claim every slot, and Invalid says why.
	All     bool
	Invalid string
	// Self is this replica.
	Self bool
}

// View is the live members of a group, sorted by identity.
type View struct {
	Members []Member
}

// Identities are the live members' identities, sorted.
func (v View) Identities() []string {
	out := make([]string, len(v.Members))
	for i, m := range v.Members {
		out[i] = m.Identity
	}
	return out
}

// ClaimedByOthers reports whether a live member other than this replica
// claims slot.
func (v View) ClaimedByOthers(slot int) bool {
	for _, m := range v.Members {
		if !m.Self && (m.All || slices.Contains(m.Claims.Slots, slot)) {
			return true
		}
	}
	return false
}

// Membership is this replica's Lease and its view of the group.
type Membership struct {
	opts      Options
	leaseName string
	selector  string

	claimCh chan claimRequest
	stopped chan struct{} // closed when Run returns
	listMu  sync.Mutex    // held across a list and its OnChange

	mu       sync.Mutex
	view     View
	seen     map[string]seen // by Lease name: when this replica last saw it change
	lease    *coordinationv1.Lease
	renewed  time.Time   // this replica's last successful renewal
	attempts []time.Time // the renewal times it wrote last, oldest first (at most 16)
	claims   Claims
	notified *View
	// peers are the other live members' PeerAnnotations values, by
	// annotation and identity, as last listed; published the keys this
	// replica wrote from Annotations last.
	peers     map[string]map[string]string
	published []string
	// kept are the KeptAnnotations values of every Lease of the group, by
	// annotation and Lease name, as last listed.
	kept map[string]map[string]string
}

type seen struct {
	holder, renew, claims string
	at                    time.Time
}

type claimRequest struct {
	claims Claims
	done   chan error
}

// New checks opts and returns a Membership; Run starts it.
func New(opts Options) (*Membership, error) {
	if opts.Client == nil || opts.Namespace == "" || opts.Group == "" || opts.Identity == "" {
		return nil, errors.New("membership: Client, Namespace, Group and Identity are required")
	}
	if opts.LeaseDuration == 0 {
		opts.LeaseDuration = DefaultLeaseDuration
	}
	if opts.RenewDeadline == 0 {
		opts.RenewDeadline = DefaultRenewDeadline
	}
	if opts.RetryPeriod == 0 {
		opts.RetryPeriod = DefaultRetryPeriod
	}
	if !(opts.RetryPeriod < opts.RenewDeadline && opts.RenewDeadline < opts.LeaseDuration) {
		return nil, fmt.Errorf("membership: want retry period %s < renew deadline %s < lease duration %s", opts.RetryPeriod, opts.RenewDeadline, opts.LeaseDuration)
	}
	if opts.now == nil {
		opts.now = time.Now
	}
	name := LeaseName(opts.Group, opts.Identity)
	if err := CheckLeaseName(opts.Group, opts.Identity); err != nil {
		return nil, fmt.Errorf("membership: %w", err)
	}
	if err := CheckGroup(opts.Group); err != nil {
		return nil, fmt.Errorf("membership: %w", err)
	}
	return &Membership{
		opts:      opts,
		leaseName: name,
		selector:  labels.Set{LabelGroup: opts.Group}.String(),
		claimCh:   make(chan claimRequest),
		stopped:   make(chan struct{}),
		seen:      map[string]seen{},
		attempts:  make([]time.Time, 0, 16),
	}, nil
}

// LeaseName is the name of this replica's Lease.
func (m *Membership) LeaseName() string { return m.leaseName }

// LeaseName is the name of the Lease of identity in group: GROUP-IDENTITY.
func LeaseName(group, identity string) string { return group + "-" + identity }

// CheckGroup reports whether group can label the Leases (a label value).
func CheckGroup(group string) error {
	if errs := validation.IsValidLabelValue(group); len(errs) > 0 {
		return fmt.Errorf("group %q is not a label value: %s", group, strings.Join(errs, "; "))
	}
	return nil
}

// CheckLeaseName reports whether identity's Lease in group has a valid
// name (a DNS subdomain name).
func CheckLeaseName(group, identity string) error {
	name := LeaseName(group, identity)
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return fmt.Errorf("the Lease name %q (group-identity): %s", name, strings.Join(errs, "; "))
	}
	return nil
}

// View is the group as last listed.
func (m *Membership) View() View {
	m.mu.Lock()
	defer m.mu.Unlock()
	return cloneView(m.view)
}

// Claim writes claims into this replica's Lease and returns once the
// write succeeded: only then may the replica start the work of a slot it
// newly claims (and only if View says no other member claims it). Drop a
// slot from the claims only after its work has stopped.
func (m *Membership) Claim(ctx context.Context, c Claims) error {
	c.Slots = slices.Clone(c.Slots)
	slices.Sort(c.Slots)
	c.Slots = slices.Compact(c.Slots)
	req := claimRequest{claims: c, done: make(chan error, 1)}
	select {
	case m.claimCh <- req:
	case <-m.stopped:
		return ErrStopped
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-req.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Claims are the claims this replica last asked Claim to write (written,
// or being written).
func (m *Membership) Claims() Claims {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.claims
	c.Slots = slices.Clone(c.Slots)
	return c
}

// ClaimsGeneration is Claims().Generation without copying the slots: what
// a caller naming the claims in every request reads.
func (m *Membership) ClaimsGeneration() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.claims.Generation
}

// Peers are the other live members' values of annotation, one of
// Options.PeerAnnotations, by identity, as last listed (members without
// it are left out).
func (m *Membership) Peers(annotation string) map[string]string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return maps.Clone(m.peers[annotation])
}

// Kept are the values of annotation, one of Options.KeptAnnotations, in
// every Lease of the group, live or not, by Lease name, as last listed.
func (m *Membership) Kept(annotation string) map[string]string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return maps.Clone(m.kept[annotation])
}

// ErrStopped is Claim's error once Run has returned.
var ErrStopped = errors.New("membership: not running")

// Run holds this replica's Lease until ctx ends, then releases it (no
// holder, no claims) so that the others take its slots at once. It
// returns nil after a release, or the error that made this replica lose
// its Lease (after calling OnLost). Call it once.
func (m *Membership) Run(ctx context.Context) error {
	defer close(m.stopped)
	tick := time.NewTicker(m.opts.RetryPeriod)
	defer tick.Stop()
	m.mu.Lock()
	m.renewed = m.opts.now()
	m.mu.Unlock()
	var pending []claimRequest
	for {
		err := m.renew(ctx)
		for _, p := range pending {
			p.done <- err
		}
		pending = nil
		if err != nil {
			m.mu.Lock()
			stale := m.opts.now().Sub(m.renewed) >= m.opts.RenewDeadline
			m.mu.Unlock()
			var other *renewedByAnotherError
			if errors.As(err, &other) || (stale && ctx.Err() == nil) {
				lost := fmt.Errorf("membership %s: lost Lease %s/%s: %w", m.opts.Group, m.opts.Namespace, m.leaseName, err)
				m.setSelfGone()
				if m.opts.OnLost != nil {
					m.opts.OnLost(lost)
				}
				return lost
			}
		}
		if err == nil {
			_, _ = m.list(ctx) // on an error the next tick lists again; liveness keeps counting from what was seen
		}
		select {
		case <-ctx.Done():
			for _, p := range pending {
				p.done <- ctx.Err()
			}
			return m.release()
		case <-tick.C:
		case req := <-m.claimCh:
			m.mu.Lock()
			m.claims = req.claims
			m.mu.Unlock()
			pending = append(pending, req)
		}
	}
}

// renewedByAnotherError: this replica's Lease was renewed by a process
// other than this one, which has the same identity.
type renewedByAnotherError struct{ holder string }

func (e *renewedByAnotherError) Error() string {
	return fmt.Sprintf("another process renewed it as %q: two replicas have one identity; give each its own (the pod's name)", e.holder)
}

// renew writes this replica's Lease: holder, renewal time and claims.
func (m *Membership) renew(ctx context.Context) error {
	leases := m.opts.Client.Leases(m.opts.Namespace)
	m.mu.Lock()
	lease, claims := m.lease, m.claims
	m.mu.Unlock()
	now := metav1.NewMicroTime(m.opts.now())
	if lease == nil {
		got, err := leases.Get(ctx, m.leaseName, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			m.wrote(now)
			created, err := leases.Create(ctx, m.desired(&coordinationv1.Lease{}, claims, now), metav1.CreateOptions{})
			if err != nil {
				return err
			}
			m.renewedWith(created)
			return nil
		case err != nil:
			return err
		}
		// A Lease of this identity: this replica's own from before a
		// restart, taken over; or another live process's, which the
		// conflicts of its renewals will show.
		lease = got
	}
	m.wrote(now)
	updated, err := leases.Update(ctx, m.desired(lease.DeepCopy(), claims, now), metav1.UpdateOptions{})
	if apierrors.IsConflict(err) {
		got, gerr := leases.Get(ctx, m.leaseName, metav1.GetOptions{})
		m.mu.Lock()
		m.lease = nil
		if gerr == nil {
			m.lease = got
		}
		m.mu.Unlock()
		if gerr == nil && m.renewedElsewhere(got) {
			return &renewedByAnotherError{holder: ptr.Deref(got.Spec.HolderIdentity, "")}
		}
		return err
	}
	if err != nil {
		return err
	}
	m.renewedWith(updated)
	return nil
}

// wrote remembers a renewal time this replica is about to write, so that
// a Lease read back after a conflict can be told from another process's.
func (m *Membership) wrote(t metav1.MicroTime) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.attempts) == cap(m.attempts) && len(m.attempts) > 0 {
		m.attempts = m.attempts[1:]
	}
	m.attempts = append(m.attempts, t.UTC().Truncate(time.Microsecond))
}

// renewedElsewhere reports whether got, holding this replica's identity,
// carries a renewal time this process never wrote.
func (m *Membership) renewedElsewhere(got *coordinationv1.Lease) bool {
	if ptr.Deref(got.Spec.HolderIdentity, "") != m.opts.Identity || got.Spec.RenewTime == nil {
		return false
	}
	t := got.Spec.RenewTime.UTC().Truncate(time.Microsecond)
	m.mu.Lock()
	defer m.mu.Unlock()
	return !slices.ContainsFunc(m.attempts, t.Equal) && t.After(m.renewed)
}

func (m *Membership) renewedWith(l *coordinationv1.Lease) {
	m.mu.Lock()
	m.lease = l
	if l.Spec.RenewTime != nil {
		m.renewed = l.Spec.RenewTime.Time
	}
	m.mu.Unlock()
}

// desired is l with this replica's holder, times and claims.
func (m *Membership) desired(l *coordinationv1.Lease, c Claims, now metav1.MicroTime) *coordinationv1.Lease {
	l.Name, l.Namespace = m.leaseName, m.opts.Namespace
	if l.Labels == nil {
		l.Labels = map[string]string{}
	}
	l.Labels[LabelGroup] = m.opts.Group
	if l.Annotations == nil {
		l.Annotations = map[string]string{}
	}
	l.Annotations[AnnotationClaims] = FormatClaims(c)
	if m.opts.Annotations != nil {
		extra := m.opts.Annotations()
		for _, k := range m.published {
			if _, ok := extra[k]; !ok {
				delete(l.Annotations, k)
			}
		}
		m.published = m.published[:0]
		for k, v := range extra {
			if k == AnnotationClaims {
				continue
			}
			l.Annotations[k] = v
			m.published = append(m.published, k)
		}
	}
	if ptr.Deref(l.Spec.HolderIdentity, "") != m.opts.Identity || l.Spec.AcquireTime == nil {
		l.Spec.AcquireTime = &now
	}
	l.Spec.HolderIdentity = ptr.To(m.opts.Identity)
	l.Spec.LeaseDurationSeconds = ptr.To(int32((m.opts.LeaseDuration + time.Second - 1) / time.Second))
	l.Spec.RenewTime = &now
	return l
}

// release writes this replica's Lease with no holder and no claims.
func (m *Membership) release() error {
	m.mu.Lock()
	lease := m.lease
	m.mu.Unlock()
	if lease == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), m.opts.RenewDeadline)
	defer cancel()
	l := lease.DeepCopy()
	l.Spec.HolderIdentity = nil
	l.Spec.RenewTime = nil
	l.Spec.AcquireTime = nil
	delete(l.Annotations, AnnotationClaims)
	_, err := m.opts.Client.Leases(m.opts.Namespace).Update(ctx, l, metav1.UpdateOptions{})
	m.setSelfGone()
	if err != nil {
		return fmt.Errorf("membership %s: releasing Lease %s/%s: %w (the others take its slots when it expires)", m.opts.Group, m.opts.Namespace, m.leaseName, err)
	}
	return nil
}

// Refresh lists the group's Leases now and returns the view: a view
// listed after a Claim returned, which shows every claim written before
// it (the API server's lists are linearizable). A replica that claimed a
// slot starts its work only if such a view shows no other live member's
// claim on it: of two replicas that claim one slot at once, at most one
// sees the other's claim missing.
func (m *Membership) Refresh(ctx context.Context) (View, error) { return m.list(ctx) }

// list reads the group's Leases and updates the view.
func (m *Membership) list(ctx context.Context) (View, error) {
	m.listMu.Lock() // one list and its OnChange at a time, in order
	defer m.listMu.Unlock()
	list, err := m.opts.Client.Leases(m.opts.Namespace).List(ctx, metav1.ListOptions{LabelSelector: m.selector})
	if err != nil {
		return View{}, fmt.Errorf("membership %s: listing Leases in %s: %w", m.opts.Group, m.opts.Namespace, err)
	}
	m.mu.Lock()
	now := m.opts.now()
	present := map[string]bool{}
	kept := map[string]map[string]string{}
	for i := range list.Items {
		l := &list.Items[i]
		present[l.Name] = true
		for _, k := range m.opts.KeptAnnotations {
			if v, ok := l.Annotations[k]; ok {
				if kept[k] == nil {
					kept[k] = map[string]string{}
				}
				kept[k][l.Name] = v
			}
		}
		s := seen{holder: ptr.Deref(l.Spec.HolderIdentity, ""), claims: l.Annotations[AnnotationClaims]}
		if l.Spec.RenewTime != nil {
			s.renew = l.Spec.RenewTime.Format(time.RFC3339Nano)
		}
		if old, ok := m.seen[l.Name]; ok && old.holder == s.holder && old.renew == s.renew && old.claims == s.claims {
			s.at = old.at
		} else {
			s.at = now
		}
		m.seen[l.Name] = s
	}
	var members []Member
	peers := map[string]map[string]string{}
	for i := range list.Items {
		l := &list.Items[i]
		s := m.seen[l.Name]
		if s.holder == "" || s.renew == "" {
			continue // released
		}
		d := time.Duration(ptr.Deref(l.Spec.LeaseDurationSeconds, 0)) * time.Second
		if d <= 0 {
			d = m.opts.LeaseDuration
		}
		self := l.Name == m.leaseName
		if !self && now.Sub(s.at) >= d {
			continue // expired: not seen to change for its duration
		}
		mem := Member{Identity: s.holder, Self: self}
		for _, k := range m.opts.PeerAnnotations {
			if v, ok := l.Annotations[k]; ok && !self {
				if peers[k] == nil {
					peers[k] = map[string]string{}
				}
				peers[k][s.holder] = v
			}
		}
		if self {
			mem.Claims = m.claims
		} else if c, err := ParseClaims(s.claims); err != nil {
			mem.All, mem.Invalid = true, err.Error()
		} else {
			mem.Claims = c
		}
		members = append(members, mem)
	}
	for name := range m.seen {
		if !present[name] {
			delete(m.seen, name)
		}
	}
	slices.SortFunc(members, func(a, b Member) int { return strings.Compare(a.Identity, b.Identity) })
	m.view = View{Members: members}
	m.peers = peers
	m.kept = kept
	v := cloneView(m.view)
	m.notifyLocked()
	return v, nil
}

// setSelfGone drops this replica from the view.
func (m *Membership) setSelfGone() {
	m.listMu.Lock()
	defer m.listMu.Unlock()
	m.mu.Lock()
	m.view.Members = slices.DeleteFunc(m.view.Members, func(x Member) bool { return x.Self })
	m.lease = nil
	m.notifyLocked()
}

// notifyLocked calls OnChange when the view changed, and unlocks m.mu.
func (m *Membership) notifyLocked() {
	changed := m.notified == nil || !sameView(*m.notified, m.view)
	v := cloneView(m.view)
	if changed {
		m.notified = &v
	}
	m.mu.Unlock()
	if changed && m.opts.OnChange != nil {
		m.opts.OnChange(cloneView(v))
	}
}

func cloneView(v View) View {
	out := View{Members: slices.Clone(v.Members)}
	for i := range out.Members {
		out.Members[i].Claims.Slots = slices.Clone(out.Members[i].Claims.Slots)
	}
	return out
}

func sameView(a, b View) bool {
	return slices.EqualFunc(a.Members, b.Members, func(x, y Member) bool {
		return x.Identity == y.Identity && x.Self == y.Self && x.All == y.All && x.Invalid == y.Invalid &&
			x.Claims.Generation == y.Claims.Generation && slices.Equal(x.Claims.Slots, y.Claims.Slots)
	})
}

// FormatClaims writes c as AnnotationClaims holds it.
func FormatClaims(c Claims) string {
	return "g=" + strconv.FormatInt(c.Generation, 10) + ";s=" + shard.FormatSlots(c.Slots)
}

// maxClaimedSlots bounds what ParseClaims expands: shard.MaxSlots.
const maxClaimedSlots = 4096

// ParseClaims reads AnnotationClaims; an error means the member is taken
// to claim every slot.
func ParseClaims(s string) (Claims, error) {
	var c Claims
	gen, slots, ok := strings.Cut(s, ";")
	g, found := strings.CutPrefix(gen, "g=")
	list, found2 := strings.CutPrefix(slots, "s=")
	if !ok || !found || !found2 {
		return c, fmt.Errorf("claims %q: want g=GENERATION;s=SLOTS", s)
	}
	var err error
	if c.Generation, err = strconv.ParseInt(g, 10, 64); err != nil || c.Generation < 0 {
		return Claims{}, fmt.Errorf("claims %q: generation %q is not a count", s, g)
	}
	if c.Slots, err = shard.ParseSlots(list, maxClaimedSlots); err != nil {
		return Claims{}, fmt.Errorf("claims %q: %w", s, err)
	}
	return c, nil
}
