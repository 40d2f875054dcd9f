package metrics_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/util/workqueue"
	_ "sigs.k8s.io/controller-runtime/pkg/controller" // registers the workqueue metrics, as in the operator
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/yaml"

	"github.com/wasmreconcile/wasmreconcile/host/informer"
	"github.com/wasmreconcile/wasmreconcile/host/internal/metrics"
	"github.com/wasmreconcile/wasmreconcile/host/protocol"
	"github.com/wasmreconcile/wasmreconcile/internal/testwasm"
)

var metricName = regexp.MustCompile(`\b(wasmreconcile_[a-z_]+|controller_runtime_[a-z_]+|workqueue_[a-z_]+)\b`)
var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)

// existing lists the metric names that exist: our collectors' descriptors,
// plus the workqueue metrics controller-runtime registers (a queue is created
// so that its series are gathered).
func existing(t *testing.T) map[string]bool {
	names := map[string]bool{}
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	im, err := informer.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan *prometheus.Desc, 100)
	for _, c := range append(m.Collectors(), im.Collectors()...) {
		c.Describe(ch)
	}
	close(ch)
	for d := range ch {
		if m := fqName.FindStringSubmatch(d.String()); m != nil {
			names[m[1]] = true
		}
	}
	q := workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "config-test"})
	q.Add("x")
	defer q.ShutDown()
	families, err := crmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		names[f.GetName()] = true
	}
	return names
}

// referenced extracts metric names from the expressions in a file.
func referenced(t *testing.T, path string, exprs func([]byte) []string) []string {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, e := range exprs(b) {
		for _, m := range metricName.FindAllString(e, -1) {
			for _, suffix := range []string{"_bucket", "_count", "_sum"} { // histogram series
				if base, ok := strings.CutSuffix(m, suffix); ok {
					m = base
				}
			}
			seen[m] = true
		}
	}
	out := make([]string, 0, len(seen))
	for m := range seen {
		out = append(out, m)
	}
	sort.Strings(out)
	if len(out) == 0 {
		t.Fatalf("%s references no metrics", path)
	}
	return out
}

func TestAlertsAndDashboardReferenceOnlyExistingMetrics(t *testing.T) {
	names := existing(t)
	root := testwasm.RepoRoot()
	rules := referenced(t, filepath.Join(root, "config", "prometheus", "wasmreconcile-rules.yaml"), func(b []byte) []string {
		var r struct {
			Spec struct {
				Groups []struct {
					Rules []struct{ Expr string } `json:"rules"`
				} `json:"groups"`
			} `json:"spec"`
		}
		if err := yaml.Unmarshal(b, &r); err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, g := range r.Spec.Groups {
			for _, rule := range g.Rules {
				out = append(out, rule.Expr)
			}
		}
		return out
	})
	dashboard := referenced(t, filepath.Join(root, "config", "grafana", "wasmreconcile-dashboard.json"), func(b []byte) []string {
		var d struct {
			Panels []struct {
				Targets []struct{ Expr string } `json:"targets"`
			} `json:"panels"`
		}
		if err := json.Unmarshal(b, &d); err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, p := range d.Panels {
			for _, tg := range p.Targets {
				out = append(out, tg.Expr)
			}
		}
		return out
	})
	for file, list := range map[string][]string{"alert rules": rules, "dashboard": dashboard} {
		for _, m := range list {
			if !names[m] {
				t.Errorf("%s reference %s, which does not exist", file, m)
			}
		}
		t.Logf("%s reference %d metrics, all existing: %s", file, len(list), strings.Join(list, " "))
	}
	if names["wasmreconcile_no_such_metric"] {
		t.Fatal("the existence check accepts anything")
	}
}

var resultLabel = regexp.MustCompile(`result\s*(=|!=)\s*"([^"]*)"`)

// TestResultLabelsAreKinds: the result values the alert rules and the
// dashboard compare with are protocol.Kinds, the one vocabulary.
func TestResultLabelsAreKinds(t *testing.T) {
	root := testwasm.RepoRoot()
	kinds := map[string]bool{}
	for _, k := range protocol.Kinds {
		kinds[string(k)] = true
	}
	found := 0
	for _, path := range []string{filepath.Join(root, "config", "prometheus", "wasmreconcile-rules.yaml"), filepath.Join(root, "config", "grafana", "wasmreconcile-dashboard.json"), filepath.Join(root, "docs", "metrics.md")} {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range resultLabel.FindAllStringSubmatch(strings.ReplaceAll(string(b), `\"`, `"`), -1) {
			found++
			if !kinds[m[2]] {
				t.Errorf("%s compares result with %q, which is not a protocol.Kind", path, m[2])
			}
		}
	}
	if found == 0 {
		t.Fatal("no result label found in the alert rules, dashboard or docs; the check checks nothing")
	}
}
